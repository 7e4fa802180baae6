"""The mutation tier: changes generated from the workload declaration (`contract.workload_shapes`)
on the rendered dev and prod stacks, each refused by the whole pack with a mandatory finding,
and the stack's valid options passed with none.

For each declared workload the stack renders, and for each of its containers: an env var added,
removed, or taken from another source; a port added, removed, renumbered or bound to the host;
a mount added (every volume of the pod the container does not mount), removed or moved; the
image swapped for a foreign one pinned by digest; the container moved to the other list, removed,
or copied beside itself. For its pod: a volume added, removed or of another source; each Secret a
volume takes swapped for another role's Secret, or given every key or a key more where the
declaration names its keys; a projected volume given a token; a claim added; another service
account, or a token. For the stack: a
workload of another kind running the same containers, a workload removed, a DaemonSet added;
each NetworkPolicy opened to every namespace, and each of its rules given a peer by a pod label,
another port, or an address block in place of its peer.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from contract.workload_shapes import SecretRole, WorkloadShape, shape_of
from offline.render import record_stack
from tests.policies.conftest import Evaluate, stack_config

RULE = "workload-shapes"
FOREIGN = "registry.example/tools:1.0@sha256:" + "f" * 64
Resources = list[Any]
Change = Callable[[Resources], None]
Mutation = tuple[str, Change]


def _pod(resource: Any) -> dict[str, Any]:
    return resource.props["spec"]["template"]["spec"]


def _workloads(resources: Resources) -> Iterator[tuple[int, WorkloadShape]]:
    for index, resource in enumerate(resources):
        if resource.type.split(":")[-1] in ("StatefulSet", "Job"):
            spec = _pod(resource)
            names = {
                c["name"] for key in ("initContainers", "containers") for c in spec.get(key, [])
            }
            shape = shape_of(names)
            assert shape is not None, f"{resource.name} is no declared workload"
            yield index, shape


def _container(resources: Resources, index: int, name: str) -> dict[str, Any]:
    spec = _pod(resources[index])
    (found,) = [
        c
        for key in ("initContainers", "containers")
        for c in spec.get(key, [])
        if c["name"] == name
    ]
    return found


Edit = Callable[[dict[str, Any]], None]
_LISTS = ("initContainers", "containers")


def _appended(key: str, entry: dict[str, Any]) -> Edit:
    return lambda obj: obj.setdefault(key, []).append(copy.deepcopy(entry))


def _popped(key: str, index: int) -> Edit:
    return lambda obj: obj[key].pop(index)


def _set(key: str, index: int, field: str, value: Any) -> Edit:
    return lambda obj: obj[key][index].__setitem__(field, value)


def _replaced(key: str, index: int, entry: dict[str, Any]) -> Edit:
    return lambda obj: obj[key].__setitem__(index, copy.deepcopy(entry))


def _other_source(env: dict[str, Any]) -> dict[str, Any]:
    """The env var from a Secret's key if it is a value or a field, else as a value."""
    if "valueFrom" in env:
        return {"name": env["name"], "value": "1"}
    key_ref = {"secretKeyRef": {"name": "kafka-tls", "key": "tls.key"}}
    return {"name": env["name"], "valueFrom": key_ref}


def _on_container(index: int, name: str, edit: Edit) -> Change:
    return lambda resources: edit(_container(resources, index, name))


def _on_pod(index: int, edit: Edit) -> Change:
    return lambda resources: edit(_pod(resources[index]))


def _container_edits(container: dict[str, Any], mountable: list[str]) -> Iterator[tuple[str, Edit]]:
    """Additions, removals and swaps of one container's env, ports, mounts and image."""
    yield "env var added", _appended("env", {"name": "EXTRA", "value": "1"})
    for i, env in enumerate(container.get("env", [])):
        yield f"env {env['name']} removed", _popped("env", i)
        yield f"env {env['name']} from another source", _replaced("env", i, _other_source(env))
    yield "envFrom added", _appended("envFrom", {"configMapRef": {"name": "extra"}})
    yield "port added", _appended("ports", {"name": "extra", "containerPort": 9999})
    for i, port in enumerate(container.get("ports", [])):
        name = port.get("name", port["containerPort"])
        yield f"port {name} removed", _popped("ports", i)
        yield f"port {name} renumbered", _set("ports", i, "containerPort", 12345)
        yield f"port {name} on the host", _set("ports", i, "hostPort", port["containerPort"])
    mounted = [m["name"] for m in container.get("volumeMounts", [])]
    for volume in mountable:
        if volume not in mounted:
            mount = {"name": volume, "mountPath": "/mnt/extra", "readOnly": True}
            yield f"volume {volume} mounted", _appended("volumeMounts", mount)
    for i, volume in enumerate(mounted):
        yield f"mount {volume} removed", _popped("volumeMounts", i)
        yield f"mount {volume} moved", _set("volumeMounts", i, "mountPath", "/mnt/moved")
    yield "image swapped", lambda c: c.__setitem__("image", FOREIGN)


def _moved(index: int, name: str, init: bool) -> Change:
    def move(resources: Resources) -> None:
        pod, container = _pod(resources[index]), _container(resources, index, name)
        source, target = _LISTS if init else _LISTS[::-1]
        pod[source].remove(container)
        pod.setdefault(target, []).append(container)

    return move


def _removed(index: int, name: str) -> Change:
    def remove(resources: Resources) -> None:
        pod = _pod(resources[index])
        for key in _LISTS:
            pod[key] = [c for c in pod.get(key, []) if c["name"] != name]

    return remove


def _copied(index: int, name: str, init: bool) -> Change:
    def copy_beside(resources: Resources) -> None:
        extra = copy.deepcopy(_container(resources, index, name))
        extra["name"] = "sidecar"
        _pod(resources[index]).setdefault(_LISTS[0 if init else 1], []).append(extra)

    return copy_beside


def _container_mutations(
    index: int, shape: WorkloadShape, resources: Resources
) -> Iterator[Mutation]:
    spec = _pod(resources[index])
    mountable = [v["name"] for v in spec.get("volumes", [])] + sorted(shape.claims)
    for declared in shape.containers:
        name = declared.name
        present = [c for key in _LISTS for c in spec.get(key, []) if c["name"] == name]
        if not present:
            continue
        where = f"{shape.role} {name}"
        for change, edit in _container_edits(present[0], mountable):
            yield f"{where}: {change}", _on_container(index, name, edit)
        yield f"{where}: moved to the other list", _moved(index, name, declared.init)
        yield f"{where}: container removed", _removed(index, name)
        yield f"{where}: a copy beside it", _copied(index, name, declared.init)


def _secret_refs(volume: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], str]]:
    """Each Secret a volume takes: (where, its reference, the reference's name field)."""
    if "secret" in volume:
        yield "", volume["secret"], "secretName"
    for j, source in enumerate(volume.get("projected", {}).get("sources", [])):
        if "secret" in source:
            yield f" source {j}", source["secret"], "name"


def _on_secret(index: int, volume: int, nth: int, edit: Edit) -> Change:
    def change(resources: Resources) -> None:
        refs = list(_secret_refs(_pod(resources[index])["volumes"][volume]))
        edit(refs[nth][1])

    return change


def _secret_mutations(
    index: int, volume_index: int, volume: dict[str, Any], shape: WorkloadShape
) -> Iterator[Mutation]:
    """Each Secret a volume takes: another role's Secret, and where the declaration names its
    keys, every key or a key more; a projected volume given a source other than a Secret (a
    service account token)."""
    name, role = volume["name"], shape.role
    declared = shape.volumes.get(name)
    for nth, (where, ref, name_field) in enumerate(_secret_refs(volume)):
        at = f"{role}: volume {name}{where}"
        taken = SecretRole.BROKER_TLS if ref[name_field].endswith("-tls") else SecretRole.USER
        keys = [s.keys for s in (declared.secrets if declared else ()) if s.role is taken]
        if keys and keys[0] is not None:
            yield f"{at}: every key", _on_secret(index, volume_index, nth, _dropped("items"))
            key = {"key": "tls.key", "path": "extra"}
            yield (
                f"{at}: a key added",
                _on_secret(index, volume_index, nth, _appended("items", key)),
            )
        # the brokers' TLS Secret for a user's, a user's for the TLS one
        cluster = ref[name_field].split("-tls")[0].split("-user-")[0]
        other = f"{cluster}-user-observer" if ref[name_field].endswith("-tls") else f"{cluster}-tls"
        swap = _renamed(name_field, other)
        yield f"{at}: {other}", _on_secret(index, volume_index, nth, swap)
    if "projected" in volume:
        token = {"serviceAccountToken": {"path": "token"}}
        yield (
            f"{role}: volume {name}: a token projected",
            _on_pod(
                index,
                lambda p: p["volumes"][volume_index]["projected"]["sources"].append(
                    copy.deepcopy(token)
                ),
            ),
        )


def _renamed(field: str, name: str) -> Edit:
    return lambda ref: ref.__setitem__(field, name)


def _dropped(key: str) -> Edit:
    return lambda obj: obj.pop(key)


def _claim_added(index: int) -> Change:
    def add(resources: Resources) -> None:
        templates = resources[index].props["spec"]["volumeClaimTemplates"]
        extra = copy.deepcopy(templates[0])
        extra["metadata"]["name"] = "extra"
        templates.append(extra)

    return add


def _pod_mutations(index: int, shape: WorkloadShape, resources: Resources) -> Iterator[Mutation]:
    role = shape.role
    host = {"name": "host", "hostPath": {"path": "/"}}
    yield f"{role}: hostPath volume added", _on_pod(index, _appended("volumes", host))
    for i, volume in enumerate(_pod(resources[index]).get("volumes", [])):
        name = volume["name"]
        other = {"name": name, "hostPath": {"path": "/"}}
        yield f"{role}: volume {name} removed", _on_pod(index, _popped("volumes", i))
        yield (
            f"{role}: volume {name} of another source",
            _on_pod(index, _replaced("volumes", i, other)),
        )
        yield from _secret_mutations(index, i, volume, shape)
    account = ("serviceAccountName", "cluster-admin-holder")
    yield f"{role}: another service account", _on_pod(index, lambda p: p.__setitem__(*account))
    token = ("automountServiceAccountToken", True)
    yield f"{role}: a service account token", _on_pod(index, lambda p: p.__setitem__(*token))
    if shape.claims:
        yield f"{role}: claim added", _claim_added(index)


def _as_kind(index: int, kind: str) -> Change:
    def change(resources: Resources) -> None:
        group = "apps/v1" if kind == "Deployment" else "batch/v1"
        resources[index] = dataclasses.replace(resources[index], type=f"kubernetes:{group}:{kind}")
        if kind == "CronJob":
            job = resources[index].props["spec"]
            resources[index].props["spec"] = {"schedule": "0 * * * *", "jobTemplate": {"spec": job}}

    return change


def _gone(index: int) -> Change:
    return lambda resources: resources.pop(index)


def _opened(index: int) -> Change:
    every_namespace: dict[str, Any] = {"from": [{"namespaceSelector": {}}]}
    return lambda resources: (
        resources[index].props["spec"].setdefault("ingress", []).append(every_namespace)
    )


def _rule_edits(peers: str) -> Iterator[tuple[str, Edit]]:
    """A peer a pod may label itself into, another port, and a peer swapped for an address
    block, on one NetworkPolicy rule."""
    yield (
        "peer by a pod label added",
        _appended(peers, {"podSelector": {"matchLabels": {"app": "debug"}}}),
    )
    yield "port added", _appended("ports", {"protocol": "TCP", "port": 22})
    yield "peer swapped", _replaced(peers, 0, {"ipBlock": {"cidr": "10.0.0.0/8"}})


def _on_rule(index: int, direction: str, rule: int, edit: Edit) -> Change:
    return lambda resources: edit(resources[index].props["spec"][direction][rule])


def _stack_mutations(resources: Resources) -> Iterator[Mutation]:
    for index, shape in _workloads(resources):
        kind = "Deployment" if shape.kind == "StatefulSet" else "CronJob"
        yield f"{shape.role}: as a {kind}", _as_kind(index, kind)
        yield f"{shape.role}: removed", _gone(index)
    yield "a DaemonSet added", _add_daemonset
    yield "a Role and its binding added", _add_role
    for index, resource in enumerate(resources):
        if resource.type.endswith(":NetworkPolicy"):
            name = resource.props["metadata"]["name"]
            yield f"NetworkPolicy {name}: ingress from every namespace", _opened(index)
            for direction, peers in (("ingress", "from"), ("egress", "to")):
                for i in range(len(resource.props["spec"].get(direction, []))):
                    where = f"NetworkPolicy {name}: {direction}[{i}]"
                    for change, edit in _rule_edits(peers):
                        yield f"{where} {change}", _on_rule(index, direction, i, edit)


def _add_daemonset(resources: Resources) -> None:
    template = next(r for r in resources if r.type.endswith(":StatefulSet"))
    props = copy.deepcopy(template.props)
    props["metadata"]["name"] = "node-agent"
    props["spec"].pop("volumeClaimTemplates", None)
    urn = template.urn.replace(template.name, "node-agent")
    resources.append(
        dataclasses.replace(
            template, type="kubernetes:apps/v1:DaemonSet", name="node-agent", urn=urn, props=props
        )
    )


def _add_role(resources: Resources) -> None:
    template = next(r for r in resources if r.type.endswith(":ServiceAccount"))
    namespace = template.props["metadata"]["namespace"]
    rules = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]
    subject = {"kind": "ServiceAccount", "name": "reader", "namespace": namespace}
    for kind, spec in (
        ("Role", {"rules": rules}),
        ("RoleBinding", {"roleRef": {"kind": "Role", "name": "reader"}, "subjects": [subject]}),
    ):
        props = {"metadata": {"name": "reader", "namespace": namespace}, **spec}
        urn = template.urn.replace(template.type, f"kubernetes:rbac.authorization.k8s.io/v1:{kind}")
        resources.append(
            dataclasses.replace(
                template,
                type=f"kubernetes:rbac.authorization.k8s.io/v1:{kind}",
                name="reader",
                urn=urn.replace(template.name, "reader"),
                props=props,
            )
        )


def mutations(resources: Resources) -> list[Mutation]:
    """Every mutation the declaration generates for a recorded stack."""
    found: list[Mutation] = []
    for index, shape in _workloads(resources):
        found += _container_mutations(index, shape, resources)
        found += _pod_mutations(index, shape, resources)
    found += _stack_mutations(resources)
    return found


@pytest.mark.long
@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_mutation_generated_from_the_declaration_is_refused(
    run: Evaluate, recorded_stacks: dict[str, Any], stack: str
) -> None:
    resources = list(recorded_stacks[stack].resources)
    generated = mutations(resources)
    passed, declaration_only = [], []
    by_rule: dict[str, int] = {}
    for name, mutate in generated:
        changed = copy.deepcopy(resources)
        mutate(changed)
        mandatory = [v for v in run(changed, stack_config(stack)) if v.mandatory]
        if not mandatory:
            passed.append(name)
        elif {v.policy for v in mandatory} == {RULE}:
            declaration_only.append(name)
        for policy in {v.policy for v in mandatory}:
            by_rule[policy] = by_rule.get(policy, 0) + 1
    print(
        f"\n{stack}: {len(generated)} mutations generated, {len(generated) - len(passed)} refused, "
        f"{len(declaration_only)} of them by {RULE} alone: {declaration_only}"
    )
    for policy, count in sorted(by_rule.items(), key=lambda item: -item[1]):
        print(f"  {policy}: {count}")
    assert passed == [], f"{len(passed)} of {len(generated)} mutations passed: {passed}"
    assert len(generated) > 100


VALID: dict[str, dict[str, Any]] = {
    "dev": {},
    "dev, SASL_SSL": {"security": {"clientListener": "SASL_SSL"}},
    "dev, KIP-848 consumer groups": {"processor": {"groupProtocol": "consumer"}},
    "dev, a cluster id given": {"kafka": {"clusterId": "MkU3OEVBNTcwNTJENDM2Qg"}},
    "dev, metadataVersion": {"kafka": {"metadataVersion": "4.3"}},
    "dev, scaled out": {"kafka": {"replicas": 5}, "processor": {"replicas": 3}},
    "prod": {},
    "prod, active/standby pair": {"processor.pair": True},
    "prod, cert-manager": {"security": {"certificates": "cert-manager", "issuerName": "ca-issuer"}},
    "prod, rotation": {"security": {"credentialsRevision": 2}},
    "prod, podMonitor": {"processor": {"metricsScrape": "podMonitor"}},
    "prod, annotations scrape": {"processor": {"metricsScrape": "annotations"}},
    "prod, KIP-848 consumer groups": {"processor": {"groupProtocol": "consumer"}},
    "prod, static membership": {"processor": {"membershipMode": "static"}},
}


@pytest.mark.parametrize("variant", VALID)
def test_the_stacks_valid_options_pass_the_declaration(run: Evaluate, variant: str) -> None:
    stack = variant.split(",")[0]
    resources = record_stack(stack, VALID[variant]).resources
    assert [v.message for v in run(resources, stack_config(stack)) if v.policy == RULE] == []
