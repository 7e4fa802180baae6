"""Every workload is one the contract declares, exactly as it declares it (an allowlist).

`contract.workload_shapes` declares each workload the program deploys: its kind, its containers
in their lists, each one's env var names with their sources, its ports and its mounts, its pod's
volumes and claims, and its service account; some items only where the brokers' client listener
is secured. A pod template is the declared workload whose anchor container it runs; anything it
has that the declaration does not hold is refused, and so is anything declared for this stack
that it lacks. A workload with no anchor, or with two, is not one the program deploys.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import PolicyResource, StackValidationArgs

from contract.kafka_security import CLIENT_LISTENER, PLAINTEXT
from contract.workload_shapes import (
    BROKERS,
    DECLARED_IN,
    VALUE,
    WORKLOADS,
    ContainerShape,
    Presence,
    WorkloadShape,
)

from .broker_security import protocol_map
from .config import MANDATORY, stack_rule
from .kafka_cluster import broker_configs
from .manifests import get, items, kind, label, name_of, number, pod_spec, pod_spec_path
from .messages import violation
from .stack_view import StackView

Finding = tuple[str, str | None]
_FIX = (
    f"render the workload as {DECLARED_IN} declares it, or declare the change there first, "
    "where review sees every workload's containers, env, ports and mounts in one place"
)


def _names(spec: Mapping[str, Any] | None, key: str) -> list[str]:
    return [str(get(c, "name", default="?")) for c in items(spec, key)]


def _secured(view: StackView) -> bool:
    """Whether a Kafka cluster of the stack has a secured client listener."""
    for workload in view.workloads():
        spec = pod_spec(workload.resource_type, workload.props)
        if BROKERS.anchor in _names(spec, "containers"):
            configs = broker_configs(workload.resource_type, workload.props)
            protocols = protocol_map(configs.get("listener.security.protocol.map", ""))
            if protocols.get(CLIENT_LISTENER, PLAINTEXT) != PLAINTEXT:
                return True
    return False


def _where(presence: Presence, secured: bool) -> str:
    declared = "declared for " + presence.value
    return declared if presence.expected(secured) else f"{declared}, and this stack is not one"


class _Judge:
    """The findings on one workload against its shape."""

    def __init__(self, workload: PolicyResource, shape: WorkloadShape, secured: bool) -> None:
        self.workload = workload
        self.shape = shape
        self.secured = secured
        self.subject = label(workload.resource_type, workload.props)
        self.spec = pod_spec(workload.resource_type, workload.props)
        self.path = pod_spec_path(workload.resource_type)

    def finding(self, field: str, found: object, required: str) -> str:
        where = f"{DECLARED_IN}, {self.shape.role}"
        return violation(self.subject, field, found, f"{required} ({where})", _FIX)

    def findings(self) -> Iterator[str]:
        shape = self.shape
        if kind(self.workload.resource_type) != shape.kind:
            yield self.finding("its kind", kind(self.workload.resource_type), shape.kind)
        if not shape.presence.expected(self.secured):
            yield self.finding("the workload", "present", _where(shape.presence, self.secured))
        yield from self._service_account()
        yield from self._volumes()
        yield from self._claims()
        for key in ("initContainers", "containers", "ephemeralContainers"):
            for container in items(self.spec, key):
                yield from self._container(container, key)
        for declared in shape.containers:
            present = declared.name in _names(self.spec, declared.list_name)
            if declared.presence.expected(self.secured) and not present:
                yield self.finding(
                    f"{self.path}.{declared.list_name}[{declared.name}]",
                    "absent",
                    f"present: {_where(declared.presence, self.secured)}",
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
        for name, declared in self.shape.volumes.items():
            if name not in found and declared.presence.expected(self.secured):
                yield self.finding(
                    f"{self.path}.volumes[{name}]",
                    "absent",
                    f"a {declared.source} volume: {_where(declared.presence, self.secured)}",
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


def check_workload_shapes(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """Each workload exactly as declared; each workload declared for the stack present."""
    view = StackView(args.resources)
    secured = _secured(view)
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
        for message in _Judge(workload, shape, secured).findings():
            yield message, workload.urn
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
