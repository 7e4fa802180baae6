"""Read Kubernetes objects as the policy engine hands them over.

The engine passes read-only Mapping/Sequence proxies (not dicts and lists) and every number as a
float, so everything here tests against `collections.abc` and `numbers.Real`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from numbers import Real
from typing import Any

from pulumi_policy.proxy import UnknownValueError

from contract.container_commands import SERVER_PROPERTIES_VARIABLE
from contract.java_properties import load_properties
from contract.quantity import quantity_or_none

STATEFUL_SET = "kubernetes:apps/v1:StatefulSet"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
SERVICE = "kubernetes:core/v1:Service"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
NAMESPACE = "kubernetes:core/v1:Namespace"
SECRET = "kubernetes:core/v1:Secret"
SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"

# Where each workload kind keeps its pod template.
_POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "kubernetes:apps/v1:StatefulSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:Deployment": ("spec", "template", "spec"),
    "kubernetes:apps/v1:ReplicaSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:DaemonSet": ("spec", "template", "spec"),
    "kubernetes:batch/v1:Job": ("spec", "template", "spec"),
    "kubernetes:batch/v1:CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    "kubernetes:core/v1:Pod": ("spec",),
}
WORKLOAD_TYPES = frozenset(_POD_SPEC_PATHS)

_EMPTY: Mapping[str, Any] = {}


def get(obj: Any, *path: str | int, default: Any = None) -> Any:
    """`obj[path[0]][path[1]]...`, or `default` where any step is missing."""
    for key in path:
        if isinstance(key, int):
            if not isinstance(obj, Sequence) or isinstance(obj, str) or key >= len(obj):
                return default
        elif not isinstance(obj, Mapping) or key not in obj:
            return default
        obj = obj[key]
    return default if obj is None else obj


def items(obj: Any, *path: str) -> list[Any]:
    """The sequence at `path` as a list (empty when absent)."""
    found = get(obj, *path, default=())
    return list(found) if isinstance(found, Sequence) and not isinstance(found, str) else []


def number(value: Any) -> float | None:
    """A numeric field as a float (the engine sends floats; a program may send ints, strings)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, Real):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def fmt(value: float | None) -> str:
    """A number for a message: `3` rather than `3.0`."""
    if value is None:
        return "absent"
    return str(int(value)) if float(value).is_integer() else str(value)


def kind(resource_type: str) -> str:
    """`kubernetes:apps/v1:StatefulSet` -> `StatefulSet`."""
    return resource_type.rsplit(":", 1)[-1]


def label(resource_type: str, props: Mapping[str, Any]) -> str:
    """`StatefulSet streaming/kafka`: how messages name a resource."""
    namespace = get(props, "metadata", "namespace", default="default")
    name = get(props, "metadata", "name", default="?")
    return f"{kind(resource_type)} {namespace}/{name}"


def namespace_of(props: Mapping[str, Any]) -> str:
    """The object's namespace (`default` when the manifest leaves it to the provider)."""
    return str(get(props, "metadata", "namespace", default="default"))


def name_of(props: Mapping[str, Any]) -> str:
    """The object's `metadata.name`."""
    return str(get(props, "metadata", "name", default=""))


def pod_spec(resource_type: str, props: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod spec of a workload, or None for anything that does not run pods."""
    path = _POD_SPEC_PATHS.get(resource_type)
    if path is None:
        return None
    spec = get(props, *path)
    return spec if isinstance(spec, Mapping) else _EMPTY


def pod_spec_path(resource_type: str) -> str:
    """Where a workload kind keeps its pod spec, as messages name fields (`spec.template.spec`)."""
    return ".".join(_POD_SPEC_PATHS.get(resource_type, ("spec",)))


def pod_labels(resource_type: str, props: Mapping[str, Any]) -> Mapping[str, Any]:
    """The labels of the pods a workload creates."""
    path = _POD_SPEC_PATHS.get(resource_type, ("spec",))[:-1]
    return get(props, *path, "metadata", "labels", default=_EMPTY)


def pod_annotations(resource_type: str, props: Mapping[str, Any]) -> Mapping[str, Any]:
    """The annotations of the pods a workload creates."""
    path = _POD_SPEC_PATHS.get(resource_type, ("spec",))[:-1]
    return get(props, *path, "metadata", "annotations", default=_EMPTY)


def containers(spec: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The (main) containers of a pod spec."""
    return [c for c in items(spec, "containers") if isinstance(c, Mapping)]


def all_containers(spec: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """Containers, init containers and ephemeral containers: everything that runs in the pod."""
    extra = [
        c
        for key in ("initContainers", "ephemeralContainers")
        for c in items(spec, key)
        if isinstance(c, Mapping)
    ]
    return containers(spec) + extra


def env(container: Mapping[str, Any]) -> dict[str, str]:
    """A container's literal environment (`valueFrom` entries are left out).

    A value computed from another resource (the KRaft cluster id on a first preview) is unknown
    during `pulumi preview`; it is left out too, so the rules that read the other variables
    still run instead of the whole policy being skipped.
    """
    result: dict[str, str] = {}
    for var in items(container, "env"):
        try:
            if isinstance(var, Mapping) and "value" in var and var["value"] is not None:
                result[str(var["name"])] = str(var["value"])
        except UnknownValueError:
            continue
    return result


def env_field_ref(container: Mapping[str, Any], name: str) -> str | None:
    """The `fieldRef.fieldPath` an env var is taken from (downward API), if any."""
    for var in items(container, "env"):
        if isinstance(var, Mapping) and var.get("name") == name:
            return get(var, "valueFrom", "fieldRef", "fieldPath")
    return None


def command_line(container: Mapping[str, Any]) -> list[str]:
    """`command` + `args` of a container, as strings."""
    return [str(part) for part in items(container, "command") + items(container, "args")]


def image_repository(image: str) -> str:
    """`docker.io/apache/kafka:4.1.0@sha256:...` -> `docker.io/apache/kafka`."""
    without_digest = image.split("@", 1)[0]
    head, _, tail = without_digest.rpartition(":")
    return head if head and "/" not in tail else without_digest


def is_kafka_container(container: Mapping[str, Any]) -> bool:
    """A container running Apache Kafka (the official image, or a KRaft node's settings)."""
    repository = image_repository(str(container.get("image", "")))
    return bool(re.search(r"(^|/)apache/kafka(-native)?$", repository)) or is_kafka_node(container)


def is_kafka_node(container: Mapping[str, Any]) -> bool:
    """A container that runs a Kafka node: its server.properties names its `process.roles`, or
    it is the official image's own start (a container of the image that runs one of its tools,
    `kafka-features.sh`, is a client)."""
    if "process.roles" in kafka_configs(container):
        return True
    own_start = not items(container, "command") and not items(container, "args")
    repository = image_repository(str(container.get("image", "")))
    return own_start and bool(re.search(r"(^|/)apache/kafka(-native)?$", repository))


def is_kafka_broker(resource_type: str, props: Mapping[str, Any]) -> bool:
    """A workload running Apache Kafka nodes (the official image, or KRaft env configuration)."""
    return any(is_kafka_node(c) for c in containers(pod_spec(resource_type, props)))


def is_processor(resource_type: str, props: Mapping[str, Any]) -> bool:
    """A workload running the stream processor (`python -m app.processor --properties ...`)."""
    return any(
        "app.processor" in command_line(c) for c in containers(pod_spec(resource_type, props))
    )


def processor_container(spec: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The container that runs the processor."""
    for container in containers(spec):
        if "app.processor" in command_line(container):
            return container
    return None


def kafka_configs(container: Mapping[str, Any]) -> dict[str, str]:
    """The broker settings a container runs with: its `SERVER_PROPERTIES` variable, the
    server.properties the program renders (`contract.container_commands.kafka_broker`)."""
    text = env(container).get(SERVER_PROPERTIES_VARIABLE)
    return load_properties(text) if text else {}


def quantity(value: Any) -> float | None:
    """A Kubernetes resource quantity (`2Gi`, `500m`, `1`) as a plain number, None if malformed."""
    return quantity_or_none(value)


def java_bytes(option: str) -> float | None:
    """A JVM size (`-Xmx1g`, `512m`) in bytes."""
    match = re.fullmatch(r"([0-9]+)([kKmMgG]?)", option)
    if not match:
        return None
    scale = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[match.group(2).lower()]
    return float(match.group(1)) * scale


def iter_probes(container: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(kind, probe) for the startup, readiness and liveness probes a container declares."""
    for probe_kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = container.get(probe_kind)
        if isinstance(probe, Mapping):
            yield probe_kind, probe
