"""Every workload is one the contract declares, exactly as it declares it (an allowlist).

`contract.workload_shapes` declares each workload the program deploys: its kind, its containers
in their lists, each one's env var names with their sources, its ports and its mounts, its pod's
volumes (the Secrets each takes, by role and keys) and claims, and its service account; some
items only where the brokers' client listener is secured. A pod template is the declared
workload whose anchor container it runs; anything it has that the declaration does not hold is
refused, and so is anything declared for this stack that it lacks. A workload with no anchor, or
with two, is not one the program deploys, and no RBAC object is (the declaration holds none).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pulumi_policy import PolicyResource, StackValidationArgs

from contract.kafka_security import CLIENT_LISTENER, PLAINTEXT
from contract.workload_shapes import (
    BROKERS,
    DECLARED_IN,
    DNS_NAMESPACE,
    DNS_POD_LABELS,
    KAFKA_CLIENT_LABEL,
    NAMESPACE_NAME_LABEL,
    RBAC_NEEDED,
    VALUE,
    WORKLOADS,
    ContainerShape,
    Peer,
    PeerKind,
    Presence,
    Volume,
    WorkloadShape,
)

from .broker_security import protocol_map
from .config import MANDATORY, stack_rule
from .kafka_cluster import broker_configs
from .manifests import (
    get,
    items,
    kind,
    label,
    name_of,
    namespace_of,
    number,
    pod_spec,
    pod_spec_path,
)
from .messages import violation
from .network import policies_selecting
from .secret_mounts import KafkaSecrets
from .stack_view import StackView

Finding = tuple[str, str | None]
RBAC_TYPES = frozenset(
    f"kubernetes:rbac.authorization.k8s.io/v1:{kind}"
    for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
)
_FIX = (
    f"render the workload as {DECLARED_IN} declares it, or declare the change there first, "
    "where review sees every workload's containers, env, ports and mounts in one place"
)


def _names(spec: Mapping[str, Any] | None, key: str) -> list[str]:
    return [str(get(c, "name", default="?")) for c in items(spec, key)]


def _secured(view: StackView) -> bool:
    """Whether a Kafka cluster of the stack has a secured client listener."""
    for workload in _brokers(view):
        configs = broker_configs(workload.resource_type, workload.props)
        protocols = protocol_map(configs.get("listener.security.protocol.map", ""))
        if protocols.get(CLIENT_LISTENER, PLAINTEXT) != PLAINTEXT:
            return True
    return False


def _plain(value: Any) -> Any:
    """The engine's read-only views as dicts and lists, numbers as ints where whole."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


_DNS = {
    "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: DNS_NAMESPACE}},
    "podSelector": {"matchLabels": DNS_POD_LABELS},
}


def peer_kind(peer: Any, brokers: Mapping[str, Any] | None) -> PeerKind | None:
    """What a NetworkPolicy peer selects, if it is one of the program's spellings."""
    peer = _plain(peer)
    if peer == _DNS:
        return PeerKind.CLUSTER_DNS
    if isinstance(peer, dict) and set(peer) == {"podSelector"}:
        if peer["podSelector"] == {"matchLabels": KAFKA_CLIENT_LABEL}:
            return PeerKind.KAFKA_CLIENTS
        if brokers and peer["podSelector"] == {"matchLabels": dict(brokers)}:
            return PeerKind.BROKERS
    if isinstance(peer, dict) and set(peer) == {"namespaceSelector"}:
        selector = peer["namespaceSelector"]
        if selector.keys() == {"matchLabels"} and list(selector["matchLabels"]) == [
            NAMESPACE_NAME_LABEL
        ]:
            return PeerKind.MONITORING
    return None


def _roles(declared: Volume) -> str:
    """What a volume's declared Secrets are, as a finding requires them."""
    roles = [
        s.role.value + ("" if s.keys is None else f", keys {', '.join(sorted(s.keys))}")
        for s in declared.secrets
    ]
    return "a Secret of its declared role: " + ("; ".join(roles) or "none")


def _where(presence: Presence, secured: bool) -> str:
    declared = "declared for " + presence.value
    return declared if presence.expected(secured) else f"{declared}, and this stack is not one"


class _Judge:
    """The findings on one workload against its shape."""

    def __init__(
        self,
        view: StackView,
        workload: PolicyResource,
        shape: WorkloadShape,
        secured: bool,
        brokers: Mapping[str, Any] | None,
        secrets: KafkaSecrets,
    ) -> None:
        self.view = view
        self.secrets = secrets
        self.workload = workload
        self.shape = shape
        self.secured = secured
        self.brokers = brokers
        self.subject = label(workload.resource_type, workload.props)
        self.spec = pod_spec(workload.resource_type, workload.props)
        self.path = pod_spec_path(workload.resource_type)

    def finding(self, field: str, found: object, required: str) -> str:
        where = f"{DECLARED_IN}, {self.shape.role}"
        return violation(self.subject, field, found, f"{required} ({where})", _FIX)

    def findings(self) -> Iterator[str]:
        shape = self.shape
        if kind(self.workload.resource_type) != shape.kind:
            yield self.finding(
                "its kind", kind(self.workload.resource_type), f"{shape.kind}: {shape.why}"
            )
        if not shape.presence.expected(self.secured):
            yield self.finding("the workload", "present", _where(shape.presence, self.secured))
        yield from self._service_account()
        yield from self._volumes()
        yield from self._claims()
        for key in ("initContainers", "containers", "ephemeralContainers"):
            for container in items(self.spec, key):
                yield from self._container(container, key)
        yield from self._peers()
        for declared in shape.containers:
            present = declared.name in _names(self.spec, declared.list_name)
            if declared.presence.expected(self.secured) and not present:
                yield self.finding(
                    f"{self.path}.{declared.list_name}[{declared.name}]",
                    "absent",
                    f"present: {_where(declared.presence, self.secured)}",
                )

    def _peers(self) -> Iterator[str]:
        for policy in policies_selecting(self.view, self.workload):
            at = f"{label(policy.resource_type, policy.props)}"
            for direction, peers_key, declared in (
                ("ingress", "from", self.shape.ingress),
                ("egress", "to", self.shape.egress),
            ):
                for i, rule in enumerate(items(policy.props, "spec", direction)):
                    field = f"{at} spec.{direction}[{i}]"
                    yield from self._rule(rule, peers_key, declared, self.brokers, field)

    def _rule(
        self,
        rule: Mapping[str, Any],
        peers_key: str,
        declared: tuple[Peer, ...],
        brokers: Mapping[str, Any] | None,
        field: str,
    ) -> Iterator[str]:
        allowed = ", ".join(p.kind.value for p in declared) or "none"
        ports = [
            (str(get(p, "protocol", default="TCP")), _plain(get(p, "port")))
            for p in items(rule, "ports")
        ]
        peers = items(rule, peers_key)
        if not peers:
            yield self.finding(f"{field}.{peers_key}", "absent (every peer)", allowed)
        if not ports:
            yield self.finding(f"{field}.ports", "absent (every port)", "the declared ports")
        for j, peer in enumerate(peers):
            kind = peer_kind(peer, brokers)
            matching = [p for p in declared if p.kind is kind]
            if kind is None or not matching:
                shown = _plain(peer)
                yield self.finding(f"{field}.{peers_key}[{j}]", shown, f"one of: {allowed}")
                continue
            extra = sorted(
                f"{protocol}/{port}"
                for protocol, port in ports
                if (protocol, port) not in matching[0].ports
            )
            if extra:
                wanted = ", ".join(sorted(f"{pr}/{po}" for pr, po in matching[0].ports))
                yield self.finding(
                    f"{field}.ports for {kind.name.lower()}", ", ".join(extra), f"within {wanted}"
                )

    def _service_account(self) -> Iterator[str]:
        account = get(self.spec, "serviceAccountName") or get(self.spec, "serviceAccount")
        own = name_of(self.workload.props)
        expected = own if self.shape.own_service_account else None
        if (account or None) != expected and not (expected is None and account == "default"):
            yield self.finding(
                f"{self.path}.serviceAccountName",
                account or "absent (the namespace's default)",
                own if expected else "absent (the namespace's default, which holds no role)",
            )
        if get(self.spec, "automountServiceAccountToken") is not False:
            yield self.finding(
                f"{self.path}.automountServiceAccountToken",
                get(self.spec, "automountServiceAccountToken", default="absent (true)"),
                "false: no workload of the stack calls the Kubernetes API",
            )

    def _volumes(self) -> Iterator[str]:
        found = {str(get(v, "name", default="?")): v for v in items(self.spec, "volumes")}
        for name, volume in found.items():
            field = f"{self.path}.volumes[{name}]"
            declared = self.shape.volumes.get(name)
            sources = (
                sorted(k for k in volume if k != "name") if isinstance(volume, Mapping) else []
            )
            if declared is None:
                yield self.finding(field, ", ".join(sources) or "present", "no such volume")
            elif sources != [declared.source]:
                yield self.finding(f"{field} source", ", ".join(sources), declared.source)
            elif not declared.presence.expected(self.secured):
                yield self.finding(field, "present", _where(declared.presence, self.secured))
            else:
                yield from self._secrets(volume, declared, field)
        for name, declared in self.shape.volumes.items():
            if name not in found and declared.presence.expected(self.secured):
                yield self.finding(
                    f"{self.path}.volumes[{name}]",
                    "absent",
                    f"a {declared.source} volume: {_where(declared.presence, self.secured)}",
                )

    def _secrets(self, volume: Mapping[str, Any], declared: Volume, at: str) -> Iterator[str]:
        """Each Secret the volume takes: of a declared role, and only the declared keys."""
        if declared.source == "secret":
            taken = [(f"{at}.secret", get(volume, "secret"), "secretName")]
        elif declared.source == "projected":
            taken = []
            for i, source in enumerate(items(volume, "projected", "sources")):
                where = f"{at}.projected.sources[{i}]"
                kinds = sorted(source) if isinstance(source, Mapping) else []
                if kinds != ["secret"]:
                    yield self.finding(where, ", ".join(kinds) or "empty", _roles(declared))
                else:
                    taken.append((f"{where}.secret", source["secret"], "name"))
        else:
            return
        for where, ref, name_key in taken:
            secret = str(get(ref, name_key, default=""))
            role = self.secrets.role_of(namespace_of(self.workload.props), secret)
            source = next((d for d in declared.secrets if d.role is role), None)
            if source is None:
                shown = f"Secret {secret}" + (f", {role.value}" if role else "")
                yield self.finding(where, shown, _roles(declared))
                continue
            listed = items(ref, "items")
            keys = {str(get(i, "key", default="")) for i in listed} if listed else None
            if source.keys is not None and (keys is None or not keys <= source.keys):
                extra = "every key" if keys is None else ", ".join(sorted(keys - source.keys))
                yield self.finding(
                    f"{where}.items",
                    f"Secret {secret}, {extra}",
                    f"only {', '.join(sorted(source.keys))} of {source.role.value}",
                )

    def _claims(self) -> Iterator[str]:
        found = {
            str(get(c, "metadata", "name", default="?"))
            for c in items(self.workload.props, "spec", "volumeClaimTemplates")
        }
        if found != set(self.shape.claims):
            yield self.finding(
                "spec.volumeClaimTemplates",
                ", ".join(sorted(found)) or "none",
                ", ".join(sorted(self.shape.claims)) or "none",
            )

    def _container(self, container: Mapping[str, Any], key: str) -> Iterator[str]:
        name = str(get(container, "name", default="?"))
        field = f"{self.path}.{key}[{name}]"
        declared = self.shape.container(name)
        if declared is None:
            declared_names = ", ".join(c.name for c in self.shape.containers)
            yield self.finding(field, "present", f"only its declared containers: {declared_names}")
            return
        if key != declared.list_name:
            yield self.finding(field, f"in {key}", f"in {declared.list_name}")
        if not declared.presence.expected(self.secured):
            yield self.finding(field, "present", _where(declared.presence, self.secured))
        yield from self._env(container, declared, field)
        yield from self._ports(container, declared, field)
        yield from self._mounts(container, declared, field)

    def _env(
        self, container: Mapping[str, Any], declared: ContainerShape, at: str
    ) -> Iterator[str]:
        if items(container, "envFrom"):
            yield self.finding(f"{at}.envFrom", "present", "none: each env var by name")
        found = {str(get(e, "name", default="?")): e for e in items(container, "env")}
        for name, entry in found.items():
            source = declared.env.get(name)
            if source is None:
                yield self.finding(f"{at}.env[{name}]", "present", "no such env var")
                continue
            field_path = get(entry, "valueFrom", "fieldRef", "fieldPath")
            has_source = get(entry, "valueFrom") is not None
            actual = VALUE if not has_source else field_path or "another valueFrom source"
            if actual != source:
                shown = "a value" if source == VALUE else f"the downward API's {source}"
                yield self.finding(f"{at}.env[{name}] source", actual, shown)
        for name in declared.env:
            if name not in found:
                yield self.finding(f"{at}.env[{name}]", "absent", "present")

    def _ports(
        self, container: Mapping[str, Any], declared: ContainerShape, at: str
    ) -> Iterator[str]:
        found: dict[str, Mapping[str, Any]] = {}
        for port in items(container, "ports"):
            name = str(get(port, "name", default=""))
            field = f"{at}.ports[{name or number(get(port, 'containerPort'))}]"
            expected = declared.ports.get(name)
            found[name] = port
            if expected is None:
                yield self.finding(field, "present", "no such port")
            elif number(get(port, "containerPort")) != expected:
                yield self.finding(
                    f"{field}.containerPort", get(port, "containerPort"), str(expected)
                )
            for host_field in ("hostPort", "hostIP"):
                if get(port, host_field) is not None:
                    yield self.finding(f"{field}.{host_field}", get(port, host_field), "absent")
        for name, expected in declared.ports.items():
            if name not in found:
                yield self.finding(f"{at}.ports[{name}]", "absent", f"containerPort {expected}")

    def _mounts(
        self, container: Mapping[str, Any], declared: ContainerShape, at: str
    ) -> Iterator[str]:
        found: set[str] = set()
        for mount in items(container, "volumeMounts"):
            volume = str(get(mount, "name", default="?"))
            field = f"{at}.volumeMounts[{volume}]"
            expected = declared.mounts.get(volume)
            found.add(volume)
            if expected is None:
                yield self.finding(field, "present", "no mount of this volume in this container")
            elif get(mount, "mountPath") != expected.path or get(mount, "subPath") is not None:
                shown = get(mount, "mountPath", default="?") + (
                    f" (subPath {get(mount, 'subPath')})" if get(mount, "subPath") else ""
                )
                yield self.finding(f"{field}.mountPath", shown, expected.path)
            elif not expected.presence.expected(self.secured):
                yield self.finding(field, "present", _where(expected.presence, self.secured))
        for volume, expected in declared.mounts.items():
            if volume not in found and expected.presence.expected(self.secured):
                yield self.finding(
                    f"{at}.volumeMounts[{volume}]",
                    "absent",
                    f"at {expected.path}: {_where(expected.presence, self.secured)}",
                )


def _brokers(view: StackView) -> list[PolicyResource]:
    """The workloads that run the brokers (by their anchor container)."""
    return [
        w
        for w in view.workloads()
        if BROKERS.anchor in _names(pod_spec(w.resource_type, w.props), "containers")
    ]


def _brokers_selector(view: StackView) -> Mapping[str, Any] | None:
    """The match labels of the brokers' StatefulSet, which a peer selecting them spells."""
    for workload in _brokers(view):
        return _plain(get(workload.props, "spec", "selector", "matchLabels"))
    return None


def check_workload_shapes(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """Each workload exactly as declared; each workload declared for the stack present."""
    view = StackView(args.resources)
    secured = _secured(view)
    brokers = _brokers_selector(view)
    secrets = KafkaSecrets(view)
    present: set[str] = set()
    for workload in view.workloads():
        spec = pod_spec(workload.resource_type, workload.props)
        names = {
            n
            for key in ("initContainers", "containers", "ephemeralContainers")
            for n in _names(spec, key)
        }
        shapes = [shape for shape in WORKLOADS if shape.anchor in names]
        if len(shapes) != 1:
            anchors = ", ".join(shape.anchor for shape in WORKLOADS)
            yield (
                violation(
                    label(workload.resource_type, workload.props),
                    "its containers",
                    ", ".join(sorted(names)) or "none",
                    f"exactly one of the anchors of the workloads {DECLARED_IN} declares "
                    f"({anchors}): a workload the program does not deploy runs nothing review "
                    "judged",
                    _FIX,
                ),
                workload.urn,
            )
            continue
        (shape,) = shapes
        present.add(shape.role)
        for message in _Judge(view, workload, shape, secured, brokers, secrets).findings():
            yield message, workload.urn
    for resource in view.resources:
        if resource.resource_type in RBAC_TYPES and name_of(resource.props) not in RBAC_NEEDED:
            yield (
                violation(
                    label(resource.resource_type, resource.props),
                    "an RBAC object",
                    "present",
                    f"one that {DECLARED_IN} declares in RBAC_NEEDED "
                    f"({', '.join(RBAC_NEEDED) or 'none: no workload calls the Kubernetes API'})",
                    "remove it, or declare the workload that needs it and the role it needs "
                    f"in {DECLARED_IN}, in review",
                ),
                resource.urn,
            )
    for shape in WORKLOADS:
        if shape.role not in present and shape.presence.expected(secured):
            yield (
                violation(
                    f"the stack ({shape.role})",
                    f"a {shape.kind} running {shape.anchor}",
                    "absent",
                    f"present: {_where(shape.presence, secured)} ({DECLARED_IN})",
                    _FIX,
                ),
                None,
            )


POLICIES = [
    stack_rule(
        name="workload-shapes",
        description=(
            "Every workload is one the contract declares (contract/workload_shapes.py), exactly: "
            "no other workload, container, env var or env source, port, volume, mount, claim or "
            "service account, and nothing declared for the stack missing."
        ),
        level=MANDATORY,
        check=check_workload_shapes,
    ),
]
