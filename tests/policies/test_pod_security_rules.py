"""Pod security (docs/security.md): every pod template meets the restricted Pod Security
Standard and mounts no API token (`pod-security`), and the namespace enforces the standard
(`namespace-pod-security`), on the real pulumi_policy objects.

Each way through is one mutation of the handmade stack (prod's shape) or of a rendered stack,
which must be caught by its rule alone, as a mandatory violation in dev and prod alike.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from contract import container_commands
from policies.evaluate import Violation
from tests.policies.conftest import Evaluate, findings_of, stack_config
from tests.policies.handmade_stack import (
    KAFKA_IMAGE,
    Resource,
    changed,
    first_container,
    handmade_stack,
    pod,
)

POD_SECURITY = "pod-security"
NAMESPACE_RULE = "namespace-pod-security"
ENFORCE = "pod-security.kubernetes.io/enforce"
PROCESSOR = "StatefulSet streaming/page-view-counter"
TEMPLATE = "spec.template.spec"

Edit = Callable[[Resource], None]


def _findings(run: Evaluate, stack: list[Any], config: str = "prod") -> list[Violation]:
    """Every finding, asserting they all come from the pod security rules."""
    return findings_of(run, stack, {POD_SECURITY, NAMESPACE_RULE}, config)


def _processor(edit: Edit) -> list[Resource]:
    return changed(handmade_stack(), "processor", edit, ":StatefulSet")


def _caught(run: Evaluate, stack: list[Any], rule: str, expected: str) -> None:
    """`rule` alone fires, mandatory in dev and prod, naming what it found and the fix."""
    for config in ("dev", "prod"):
        violations = _findings(run, stack, config)
        assert {v.policy for v in violations} == {rule}, violations
        assert all(v.mandatory for v in violations)
        assert all("Fix: " in v.message for v in violations)
        assert any(expected in v.message for v in violations), [v.message for v in violations]


def _pod_field(field: str, value: Any) -> Edit:
    return lambda r: pod(r).update({field: value})


def _container_context(**fields: Any) -> Edit:
    return lambda r: first_container(r)["securityContext"].update(fields)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (_pod_field("hostNetwork", True), f"{TEMPLATE}.hostNetwork is true; required: absent"),
        (_pod_field("hostPID", True), f"{TEMPLATE}.hostPID is true; required: absent or false"),
        (_pod_field("hostIPC", True), f"{TEMPLATE}.hostIPC is true"),
        (
            lambda r: pod(r)["volumes"].append(
                {"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}}
            ),
            f"{TEMPLATE}.volumes[docker] is a hostPath volume of /var/run/docker.sock; "
            "required: one of configMap, csi, downwardAPI, emptyDir, ephemeral, "
            "persistentVolumeClaim, projected, secret",
        ),
        (
            lambda r: pod(r)["volumes"].append(
                {"name": "share", "nfs": {"server": "x", "path": "/"}}
            ),
            f"{TEMPLATE}.volumes[share] is a nfs volume",
        ),
        (
            _container_context(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
            "container processor securityContext.capabilities.add is ['SYS_ADMIN']; required: "
            "nothing, or only NET_BIND_SERVICE",
        ),
        (
            _container_context(capabilities={"drop": ["NET_RAW"]}),
            "container processor securityContext.capabilities.drop is ['NET_RAW']",
        ),
        (
            lambda r: pod(r)["securityContext"].pop("seccompProfile"),
            f"{TEMPLATE}.securityContext.seccompProfile.type is absent (and on container "
            "processor); required: RuntimeDefault or Localhost",
        ),
        (
            _container_context(seccompProfile={"type": "Unconfined"}),
            "container processor securityContext.seccompProfile.type is Unconfined",
        ),
        (
            lambda r: pod(r)["securityContext"].update(runAsUser=0),
            f"{TEMPLATE}.securityContext.runAsUser is 0; required: a non-zero uid",
        ),
        (
            _container_context(runAsUser=0),
            "container processor securityContext.runAsUser is 0",
        ),
        (
            _container_context(runAsNonRoot=False),
            "container processor securityContext.runAsNonRoot is false; required: true",
        ),
        (_container_context(privileged=True), "securityContext.privileged is true"),
        (
            _container_context(allowPrivilegeEscalation=True),
            "container processor securityContext.allowPrivilegeEscalation is true",
        ),
        (
            _container_context(readOnlyRootFilesystem=False),
            "securityContext.readOnlyRootFilesystem is false; required: true",
        ),
        (
            lambda r: first_container(r).update(ports=[{"containerPort": 8080, "hostPort": 8080}]),
            "container processor ports[8080].hostPort is 8080; required: absent or 0",
        ),
        (_container_context(procMount="Unmasked"), "procMount is Unmasked"),
        (
            lambda r: pod(r)["securityContext"].update(
                sysctls=[{"name": "kernel.msgmax", "value": "65536"}]
            ),
            f"{TEMPLATE}.securityContext.sysctls[kernel.msgmax] is 65536",
        ),
        (
            _container_context(seLinuxOptions={"type": "spc_t"}),
            "seLinuxOptions.type is spc_t",
        ),
        (
            _container_context(appArmorProfile={"type": "Unconfined"}),
            "appArmorProfile.type is Unconfined",
        ),
        (
            lambda r: (
                r.props["spec"]["template"]
                .setdefault("metadata", {})
                .update(
                    annotations={
                        "container.apparmor.security.beta.kubernetes.io/processor": "unconfined"
                    }
                )
            ),
            "pod annotation container.apparmor.security.beta.kubernetes.io/processor is unconfined",
        ),
        (
            _pod_field("automountServiceAccountToken", True),
            f"{TEMPLATE}.automountServiceAccountToken is true; required: false",
        ),
        (
            lambda r: pod(r).pop("automountServiceAccountToken"),
            f"{TEMPLATE}.automountServiceAccountToken is absent; required: false",
        ),
    ],
    ids=[
        "hostNetwork",
        "hostPID",
        "hostIPC",
        "hostPath",
        "nfs-volume",
        "capabilities-add-SYS_ADMIN",
        "capabilities-not-dropped",
        "no-seccomp",
        "container-seccomp-unconfined",
        "pod-runAsUser-0",
        "container-runAsUser-0",
        "container-runAsNonRoot-false",
        "privileged",
        "privilege-escalation",
        "writable-root",
        "hostPort",
        "procMount",
        "unsafe-sysctl",
        "selinux-type",
        "apparmor-unconfined",
        "apparmor-annotation",
        "token-mounted",
        "token-left-to-the-account",
    ],
)
def test_a_pod_beyond_the_restricted_standard_is_caught(run, edit: Edit, expected: str) -> None:
    message = next(v.message for v in _findings(run, _processor(edit)) if expected in v.message)
    assert message.startswith(f"{PROCESSOR}: ")
    _caught(run, _processor(edit), POD_SECURITY, expected)


def test_an_init_container_is_held_to_the_same_standard(run) -> None:
    init_runs = container_commands.format_storage()

    def add_init(r: Resource) -> None:
        # One the contract declares, running its render: only its security context is at fault.
        init = {k: v for k, v in copy.deepcopy(first_container(r)).items() if k != "args"}
        init.update(
            name=init_runs.name,
            image=KAFKA_IMAGE,  # its setting's image (image-sources)
            command=list(init_runs.command),
            securityContext={"capabilities": {"add": ["NET_ADMIN"]}},
        )
        pod(r)["initContainers"] = [init]

    violations = _findings(run, _processor(add_init))
    fields = {v.message.split(" is ")[0].removeprefix(f"{PROCESSOR}: ") for v in violations}
    assert {
        f"container {init_runs.name} securityContext.allowPrivilegeEscalation",
        f"container {init_runs.name} securityContext.readOnlyRootFilesystem",
        f"container {init_runs.name} securityContext.capabilities.drop",
        f"container {init_runs.name} securityContext.capabilities.add",
    } <= fields


def test_net_bind_service_is_the_one_capability_a_container_may_add(run) -> None:
    edit = _container_context(capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]})
    assert run(_processor(edit)) == []


def test_seccomp_on_every_container_instead_of_the_pod_passes(run) -> None:
    def per_container(r: Resource) -> None:
        profile = pod(r)["securityContext"].pop("seccompProfile")
        first_container(r)["securityContext"]["seccompProfile"] = profile

    assert run(_processor(per_container)) == []


@pytest.mark.parametrize(
    ("resource_type", "path", "wrap"),
    [
        ("kubernetes:apps/v1:Deployment", "spec.template.spec", lambda t: {"template": t}),
        ("kubernetes:apps/v1:DaemonSet", "spec.template.spec", lambda t: {"template": t}),
        ("kubernetes:batch/v1:Job", "spec.template.spec", lambda t: {"template": t}),
        (
            "kubernetes:batch/v1:CronJob",
            "spec.jobTemplate.spec.template.spec",
            lambda t: {"jobTemplate": {"spec": {"template": t}}},
        ),
        ("kubernetes:core/v1:Pod", "spec", lambda t: t["spec"]),
    ],
    ids=["Deployment", "DaemonSet", "Job", "CronJob", "Pod"],
)
def test_every_workload_kind_is_checked_on_its_pod_template(
    run, resource_type: str, path: str, wrap: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    """A pod in a host namespace is caught whichever kind of workload declares it."""
    template = copy.deepcopy(next(r for r in handmade_stack() if r.name == "kafka").props)
    template = template["spec"]["template"]
    template["spec"]["hostNetwork"] = True
    kind = resource_type.rsplit(":", 1)[-1]
    props = {
        "kind": kind,
        "metadata": {"name": "sidecar", "namespace": "streaming"},
        "spec": wrap(template),
    }
    resource = Resource(resource_type, "sidecar", props)
    violations = [v for v in run([resource]) if v.policy == POD_SECURITY]
    assert [v.message.split(";")[0] for v in violations] == [
        f"{kind} streaming/sidecar: {path}.hostNetwork is true"
    ]


def test_a_service_account_that_mounts_its_token_is_caught(run) -> None:
    def mount(r: Resource) -> None:
        del r.props["automountServiceAccountToken"]

    stack = changed(handmade_stack(), "processor-account", mount)
    _caught(
        run,
        stack,
        POD_SECURITY,
        "ServiceAccount streaming/page-view-counter: automountServiceAccountToken is absent "
        "(default true); required: false",
    )


@pytest.mark.parametrize(
    ("labels", "found"),
    [({}, "absent"), ({ENFORCE: "privileged"}, "privileged"), ({ENFORCE: "baseline"}, "baseline")],
    ids=["label-removed", "privileged", "baseline"],
)
def test_a_namespace_that_does_not_enforce_restricted_is_caught(
    run, labels: dict[str, str], found: str
) -> None:
    def relabel(r: Resource) -> None:
        r.props["metadata"]["labels"] = labels

    stack = changed(handmade_stack(), "namespace", relabel)
    _caught(
        run,
        stack,
        NAMESPACE_RULE,
        f"Namespace streaming: metadata.labels[{ENFORCE}] is {found}; required: restricted",
    )


def test_a_namespace_the_stack_does_not_declare_is_left_to_its_owner(run) -> None:
    stack = [r for r in handmade_stack() if r.name != "namespace"]
    assert run(stack) == []


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_rendered_stacks_meet_the_restricted_standard(run, recorded_stacks, stack) -> None:
    resources = recorded_stacks[stack].resources
    violations = run(resources, stack_config(stack))
    assert [v for v in violations if v.policy in (POD_SECURITY, NAMESPACE_RULE)] == []


@pytest.mark.parametrize(
    ("target", "edit", "rule", "expected"),
    [
        (
            "kafka",
            lambda p: p["spec"]["template"]["spec"]["initContainers"][0]["securityContext"].update(
                runAsUser=0
            ),
            POD_SECURITY,
            "container format-storage securityContext.runAsUser is 0",
        ),
        (
            "streaming",
            lambda p: p["metadata"]["labels"].pop(ENFORCE),
            NAMESPACE_RULE,
            f"metadata.labels[{ENFORCE}] is absent",
        ),
    ],
    ids=["kafka-init-as-root", "namespace-label-removed"],
)
def test_a_mutation_of_the_rendered_prod_stack_is_caught(
    run, recorded_stacks, target: str, edit: Callable[[dict[str, Any]], None], rule, expected
) -> None:
    resources = copy.deepcopy(list(recorded_stacks["prod"].resources))
    (resource,) = [
        r
        for r in resources
        if r.name == target
        and r.type.endswith(":StatefulSet" if target == "kafka" else ":Namespace")
    ]
    edit(resource.props)
    caught = [v for v in run(resources, stack_config("prod")) if v.policy == rule]
    assert any(expected in v.message for v in caught), caught
    assert all(v.mandatory for v in caught)
