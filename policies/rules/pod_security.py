"""Pod Security Standards `restricted` for every pod template, a namespace that enforces it, and
no service-account token where no pod calls the Kubernetes API.

The checks follow the standard's controls as Kubernetes documents them
(https://kubernetes.io/docs/concepts/security/pod-security-standards/): the pack sees a pod
template at `pulumi preview`, before the API server's admission would refuse its pods at
`pulumi up` (or, in a namespace that does not enforce the standard, admit them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import ResourceValidationArgs, StackValidationArgs
from pulumi_policy.proxy import UnknownValueError

from .config import MANDATORY, Threshold, resource_rule, stack_rule
from .manifests import (
    NAMESPACE,
    SERVICE_ACCOUNT,
    all_containers,
    get,
    items,
    label,
    name_of,
    namespace_of,
    number,
    pod_annotations,
    pod_spec,
    pod_spec_path,
)
from .messages import show, violation
from .stack_view import StackView

PSA_ENFORCE = "pod-security.kubernetes.io/enforce"
RESTRICTED = "restricted"

# The volume types `restricted` allows; every other one (hostPath above all) reaches outside
# the pod.
RESTRICTED_VOLUME_TYPES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
SECCOMP_TYPES = ("RuntimeDefault", "Localhost")
APPARMOR_TYPES = ("RuntimeDefault", "Localhost")
# The only capability `restricted` lets a container add back after dropping ALL.
ADDABLE_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SELINUX_TYPES = ("container_t", "container_init_t", "container_kvm_t", "container_engine_t")
# The namespaced sysctls the baseline (and so restricted) standard calls safe.
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
_HOST_NAMESPACES = {
    "hostNetwork": "the node's network stack (every other pod's traffic, the node's ports)",
    "hostPID": "the node's process table (every process on the node, their environment)",
    "hostIPC": "the node's IPC namespace (shared memory of every process on the node)",
}
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
_RESTRICTED_FIX = "; a namespace enforcing the restricted Pod Security Standard refuses such a pod"

Finding = tuple[str, str | None]


def check_pod_security(args: ResourceValidationArgs, cfg: Mapping[str, Any]) -> Iterator[str]:
    """Pod Security Standards `restricted`, a read-only root filesystem and no API token."""
    if args.resource_type == SERVICE_ACCOUNT:
        yield from _service_account(args)
        return
    spec = pod_spec(args.resource_type, args.props)
    if spec is None:
        return
    subject = label(args.resource_type, args.props)
    path = pod_spec_path(args.resource_type)
    pod_context = get(spec, "securityContext", default={})
    yield from _host_namespaces(subject, path, spec)
    yield from _volumes(subject, path, spec)
    yield from _token(subject, path, spec)
    yield from _sysctls(subject, path, pod_context)
    yield from _context(subject, f"{path}.securityContext", pod_context)
    yield from _seccomp(subject, path, spec, pod_context)
    yield from _apparmor_annotations(subject, pod_annotations(args.resource_type, args.props))
    for container in all_containers(spec):
        yield from _container(subject, container, pod_context, cfg)


def _host_namespaces(subject: str, path: str, spec: Mapping[str, Any]) -> Iterator[str]:
    for field, shared in _HOST_NAMESPACES.items():
        if get(spec, field) is True:
            yield violation(
                subject,
                f"{path}.{field}",
                True,
                "absent or false",
                f"remove {field}: the pod would share {shared}{_RESTRICTED_FIX}",
            )


def _volumes(subject: str, path: str, spec: Mapping[str, Any]) -> Iterator[str]:
    for volume in items(spec, "volumes"):
        if not isinstance(volume, Mapping):
            continue
        kinds = [k for k in volume if k != "name" and volume[k] is not None]
        for volume_type in kinds:
            if volume_type in RESTRICTED_VOLUME_TYPES:
                continue
            where = get(volume, volume_type, "path") if volume_type == "hostPath" else None
            yield violation(
                subject,
                f"{path}.volumes[{volume.get('name', '?')}]",
                f"a {volume_type} volume" + (f" of {where}" if where else ""),
                f"one of {', '.join(RESTRICTED_VOLUME_TYPES)}",
                "keep state on a persistentVolumeClaim and scratch space on an emptyDir; a "
                f"{volume_type} volume reaches outside the pod (a hostPath reads and writes the "
                f"node's own files){_RESTRICTED_FIX}",
            )


def _token(subject: str, path: str, spec: Mapping[str, Any]) -> Iterator[str]:
    value = get(spec, "automountServiceAccountToken")
    if value is not False:
        yield violation(
            subject,
            f"{path}.automountServiceAccountToken",
            "absent" if value is None else value,
            "false",
            "set automountServiceAccountToken: false: nothing here calls the Kubernetes API, "
            "and a mounted token is a credential for whoever gets into the container (unset, "
            "the pod takes its ServiceAccount's setting, true by default)",
        )


def _service_account(args: ResourceValidationArgs) -> Iterator[str]:
    value = get(args.props, "automountServiceAccountToken")
    if value is not False:
        yield violation(
            label(args.resource_type, args.props),
            "automountServiceAccountToken",
            "absent (default true)" if value is None else value,
            "false",
            "set automountServiceAccountToken: false on the ServiceAccount as well as on its "
            "pods: a pod that leaves the field unset (kubectl run or debug with this account, "
            "a workload added later) then still gets no API token",
        )


def _sysctls(subject: str, path: str, pod_context: Mapping[str, Any]) -> Iterator[str]:
    for sysctl in items(pod_context, "sysctls"):
        name = str(get(sysctl, "name", default="?"))
        if name not in SAFE_SYSCTLS:
            yield violation(
                subject,
                f"{path}.securityContext.sysctls[{name}]",
                get(sysctl, "value", default="absent"),
                f"only the safe sysctls ({', '.join(sorted(SAFE_SYSCTLS))})",
                f"remove {name}: it is not namespaced to the pod, so setting it changes the "
                f"node for every pod; tune it on the node instead{_RESTRICTED_FIX}",
            )


def _context(subject: str, where: str, context: Mapping[str, Any]) -> Iterator[str]:
    """The controls a pod's and a container's securityContext share."""
    if number(get(context, "runAsUser")) == 0:
        yield violation(
            subject,
            f"{where}.runAsUser",
            0,
            "a non-zero uid",
            "run as the image's unprivileged user (the images here run as 10001): uid 0 is "
            f"root in the container and, after any escape, on the node{_RESTRICTED_FIX}",
        )
    if get(context, "windowsOptions", "hostProcess") is True:
        yield violation(
            subject,
            f"{where}.windowsOptions.hostProcess",
            True,
            "absent or false",
            "remove hostProcess: a host process container runs on the node itself"
            + _RESTRICTED_FIX,
        )
    apparmor = get(context, "appArmorProfile", "type")
    if apparmor is not None and apparmor not in APPARMOR_TYPES:
        yield violation(
            subject,
            f"{where}.appArmorProfile.type",
            apparmor,
            f"absent, {' or '.join(APPARMOR_TYPES)}",
            f"remove the {apparmor} AppArmor profile (the runtime's default confines the "
            f"container){_RESTRICTED_FIX}",
        )
    selinux = get(context, "seLinuxOptions", default={})
    selinux_type = get(selinux, "type")
    if selinux_type not in (None, "", *SELINUX_TYPES):
        yield violation(
            subject,
            f"{where}.seLinuxOptions.type",
            selinux_type,
            f"absent or one of {', '.join(SELINUX_TYPES)}",
            f"remove the custom SELinux type: it can lift the container's confinement"
            f"{_RESTRICTED_FIX}",
        )
    for field in ("user", "role"):
        if get(selinux, field) not in (None, ""):
            yield violation(
                subject,
                f"{where}.seLinuxOptions.{field}",
                get(selinux, field),
                "absent",
                f"remove seLinuxOptions.{field}{_RESTRICTED_FIX}",
            )


def _seccomp(
    subject: str, path: str, spec: Mapping[str, Any], pod_context: Mapping[str, Any]
) -> Iterator[str]:
    """RuntimeDefault or Localhost on the pod, or on every container that the pod leaves open."""
    pod_type = get(pod_context, "seccompProfile", "type")
    if pod_type is not None and pod_type not in SECCOMP_TYPES:
        yield _seccomp_violation(subject, f"{path}.securityContext.seccompProfile.type", pod_type)
    unconfined = []
    for container in all_containers(spec):
        own = get(container, "securityContext", "seccompProfile", "type")
        if own is not None and own not in SECCOMP_TYPES:
            name = container.get("name", "?")
            field = f"container {name} securityContext.seccompProfile.type"
            yield _seccomp_violation(subject, field, own)
        elif own is None and pod_type is None:
            unconfined.append(str(container.get("name", "?")))
    if unconfined:
        yield _seccomp_violation(
            subject,
            f"{path}.securityContext.seccompProfile.type",
            f"absent (and on container {', '.join(unconfined)})",
        )


def _seccomp_violation(subject: str, field: str, found: object) -> str:
    return violation(
        subject,
        field,
        found,
        " or ".join(SECCOMP_TYPES),
        "set securityContext.seccompProfile.type: RuntimeDefault on the pod: without a profile "
        "a container may make every system call, the kernel's whole attack surface"
        f"{_RESTRICTED_FIX}",
    )


def _apparmor_annotations(subject: str, annotations: Mapping[str, Any]) -> Iterator[str]:
    # Only the AppArmor keys' values are read: another annotation may be unknown in a preview
    # (a certificate's hash), and reading it would make the engine skip the whole rule.
    for key in annotations:
        if not str(key).startswith(_APPARMOR_ANNOTATION):
            continue
        try:
            value = annotations[key]
        except UnknownValueError:
            yield violation(
                subject,
                f"pod annotation {key}",
                "unknown until `pulumi up`",
                "runtime/default or localhost/<profile>",
                "write the profile as a literal, so a preview can judge it",
            )
            continue
        if value == "runtime/default" or str(value).startswith("localhost/"):
            continue
        yield violation(
            subject,
            f"pod annotation {key}",
            value,
            "runtime/default or localhost/<profile>",
            f"remove the {value} AppArmor profile (the runtime's default confines the container)"
            f"{_RESTRICTED_FIX}",
        )


def _container(
    subject: str,
    container: Mapping[str, Any],
    pod_context: Mapping[str, Any],
    cfg: Mapping[str, Any],
) -> Iterator[str]:
    name = container.get("name", "?")
    context = get(container, "securityContext", default={})
    expected: dict[str, Any] = {"runAsNonRoot": True, "allowPrivilegeEscalation": False}
    if cfg["requireReadOnlyRootFilesystem"]:
        expected["readOnlyRootFilesystem"] = True
    for field, wanted in expected.items():
        value = get(context, field)
        if value is None and field == "runAsNonRoot":
            value = get(pod_context, field)
        if value != wanted:
            yield violation(
                subject,
                f"container {name} securityContext.{field}",
                "absent" if value is None else value,
                str(wanted).lower(),
                f"set securityContext.{field}: {str(wanted).lower()} (least privilege; "
                "give the image a writable emptyDir where it must write)",
            )
    if get(context, "privileged") is True:
        yield violation(
            subject,
            f"container {name} securityContext.privileged",
            True,
            "absent or false",
            "remove privileged: a privileged container has every device and capability of the "
            f"node{_RESTRICTED_FIX}",
        )
    yield from _context(subject, f"container {name} securityContext", context)
    dropped = [str(c) for c in items(context, "capabilities", "drop")]
    if "ALL" not in dropped:
        yield violation(
            subject,
            f"container {name} securityContext.capabilities.drop",
            dropped or "absent",
            '["ALL"]',
            "drop all Linux capabilities; nothing here binds a port below 1024",
        )
    added = [str(c) for c in items(context, "capabilities", "add")]
    beyond = [c for c in added if c.upper().removeprefix("CAP_") not in ADDABLE_CAPABILITIES]
    if beyond:
        yield violation(
            subject,
            f"container {name} securityContext.capabilities.add",
            added,
            f"nothing, or only {', '.join(sorted(ADDABLE_CAPABILITIES))}",
            f"remove {', '.join(beyond)}: a capability is a piece of root (SYS_ADMIN nearly all "
            f"of it), and nothing here needs one{_RESTRICTED_FIX}",
        )
    proc_mount = get(context, "procMount")
    if proc_mount not in (None, "Default"):
        yield violation(
            subject,
            f"container {name} securityContext.procMount",
            proc_mount,
            "absent or Default",
            "remove procMount: an unmasked /proc exposes the node's kernel settings"
            + _RESTRICTED_FIX,
        )
    for port in items(container, "ports"):
        host_port = number(get(port, "hostPort"))
        if host_port:
            yield violation(
                subject,
                f"container {name} ports[{show(get(port, 'containerPort', default='?'))}].hostPort",
                host_port,
                "absent or 0",
                "remove hostPort and reach the pod through a Service: a host port opens the "
                f"node's own address to the pod, around every NetworkPolicy{_RESTRICTED_FIX}",
            )


def check_namespace_pod_security(
    args: StackValidationArgs, _: Mapping[str, Any]
) -> Iterator[Finding]:
    """Each namespace the stack declares and runs a workload in enforces `restricted`."""
    view = StackView(args.resources)
    declared = {name_of(r.props): r for r in view.of_type(NAMESPACE)}
    for namespace_name in sorted({namespace_of(w.props) for w in view.workloads()}):
        namespace = declared.get(namespace_name)
        if namespace is None:
            continue  # a namespace the stack does not own: its labels are someone else's
        value = get(namespace.props, "metadata", "labels", PSA_ENFORCE)
        if value != RESTRICTED:
            yield (
                violation(
                    f"Namespace {namespace_name}",
                    f"metadata.labels[{PSA_ENFORCE}]",
                    value or "absent",
                    RESTRICTED,
                    f"label the namespace {PSA_ENFORCE}: {RESTRICTED}: the API server then "
                    "refuses every pod that breaks the standard (a kubectl run, a debug pod, a "
                    "workload created outside this stack), where this pack only sees the pods "
                    "the stack declares",
                ),
                namespace.urn,
            )


POLICIES = [
    resource_rule(
        name="pod-security",
        description=(
            "Every pod template meets the restricted Pod Security Standard (no host network, "
            "PID or IPC, no hostPath or other host volumes, non-root and never uid 0, no "
            "privilege escalation, all capabilities dropped with at most NET_BIND_SERVICE added, "
            "seccomp RuntimeDefault or Localhost, no host ports, unsafe sysctls, AppArmor or "
            "SELinux overrides), runs on a read-only root filesystem, and mounts no "
            "service-account token (pods and ServiceAccounts set automountServiceAccountToken: "
            "false): least privilege for every pod."
        ),
        level=MANDATORY,
        check=check_pod_security,
        thresholds=[
            Threshold(
                "requireReadOnlyRootFilesystem",
                "boolean",
                True,
                "Require securityContext.readOnlyRootFilesystem: true.",
            )
        ],
    ),
    stack_rule(
        name="namespace-pod-security",
        description=(
            "Each namespace that the stack declares and runs workloads in keeps the label "
            "pod-security.kubernetes.io/enforce: restricted, so the API server itself refuses "
            "pods that break the standard, including those created outside the stack."
        ),
        level=MANDATORY,
        check=check_namespace_pod_security,
    ),
]
