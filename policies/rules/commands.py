"""What every container of the stack runs is what `contract.container_commands` renders.

A container runs with its pod's credentials: the brokers' `grant-acls` container with the
broker's key (the cluster's only super user), the reconciler Job with the password that
administers every ACL. The other rules judge what those containers read (the ACL files, the
grant lines, the properties); this one makes sure that what they run is derived from the same
review. Each container is found by name among the contract's and rendered again from inputs the
pack reads in the stack itself, the way the program renders it:

- the brokers' listener ports (`listeners`) and whether their CLIENT listener is secured
  (`listener.security.protocol.map`), read from their rendered server.properties, for the
  brokers' pod;
- the Kafka cluster's client address and its credentials revision's SCRAM mechanism (the
  `scram-mechanism` file of the ConfigMap its pods mount), for the reconciler's Jobs;
- `--allow-partition-increase`, a stack setting nothing else shows, from the Job's own args
  (either way it is a render of the contract).

Then `command`, `args` and every exec probe must equal the render word for word, no lifecycle
hook may run a command, no `$(NAME)` the kubelet would fill from the container's env may be in
its command line unless the contract substitutes it, and every file the contract says it acts
on must be a key of a ConfigMap of the stack mounted whole at its folder. Which containers a
workload may have, and which only on a secured cluster, is the workload declaration's
(`workload-shapes`): this rule judges what each of the contract's containers runs.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pulumi_policy import PolicyResource, StackValidationArgs

from contract import container_commands
from contract.container_commands import ContainerCommand
from contract.kafka_security import (
    CLIENT_LISTENER,
    INTERNAL_LISTENER,
    PLAINTEXT,
    SCRAM_MECHANISMS,
)

from .broker_security import listener_ports, protocol_map
from .config import MANDATORY, stack_rule
from .kafka_cluster import broker_configs
from .manifests import (
    all_containers,
    get,
    is_kafka_broker,
    items,
    iter_probes,
    label,
    name_of,
    namespace_of,
    pod_spec,
)
from .messages import violation
from .stack_view import StackView

Finding = tuple[str, str | None]

CONTRACT = "contract/container_commands.py"
_FIX = (
    f"render the container from {CONTRACT} (the program imports it) and change what it runs "
    "there, where the pack reviews it, never in the manifest: a container runs with its pod's "
    "credentials (the broker's key, a user's password), so what it runs must be exactly what "
    "the pack judged"
)
_INPUT_FIX = (
    "render the Kafka cluster as the program does (infra/kafka_cluster.py), so that its "
    "manifests show what the container's render takes: the pack renders a container from the "
    "stack it reviews, never from the container itself"
)
_FILE_FIX = (
    "mount the stack's ConfigMap that holds the file at its folder, whole, as the program does: "
    "the pack reviews that ConfigMap's keys, and a file from anywhere else is one it never read"
)
# `$$` is the kubelet's escape for a literal `$`; `$(NAME)` is replaced with env var NAME.
_REFERENCE = re.compile(r"\$(?:\$|\(([^)]*)\))")
_LIFECYCLE_HOOKS = ("postStart", "preStop")
# A long script is shown by its length; the difference names the line.
_SHOWN_CHARACTERS = 160


class NotRendered(Exception):
    """The contract renders no such container for this cluster (a secured cluster's container on
    a PLAINTEXT one): `workload-shapes` refuses it, with where it is declared."""


class Unrenderable(Exception):
    """The stack does not show an input of the contract's render of a container, or the
    contract renders no such container for it."""

    def __init__(self, found: str, required: str, fix: str = _INPUT_FIX) -> None:
        super().__init__(found)
        self.found = found
        self.required = required
        self.fix = fix


@dataclass(frozen=True)
class ClusterInputs:
    """What the contract's renders take from a Kafka cluster of the stack, read from it."""

    label: str
    name: str
    namespace: str
    ports: Mapping[str, int | None]
    secured: bool
    # The credentials revision's SCRAM mechanism (its bootstrap ConfigMap's file), if shown.
    mechanism: str | None

    def port(self, listener: str) -> int:
        """The port of one of the brokers' listeners, which the containers beside them use."""
        port = self.ports.get(listener)
        if port is None:
            raise Unrenderable(
                f"not renderable: the brokers' listeners (listeners in env SERVER_PROPERTIES of "
                f"{self.label}) name no {listener} port",
                f"a {listener} listener with a port, which the contract's render takes",
            )
        return port

    def address(self) -> str:
        """The cluster's client address, which the Jobs are given."""
        port = self.port(CLIENT_LISTENER)
        return container_commands.bootstrap_servers(self.name, self.namespace, port)

    def current_mechanism(self) -> str:
        """The credentials revision's SCRAM mechanism, as the brokers' format step reads it."""
        if self.mechanism not in SCRAM_MECHANISMS:
            raise Unrenderable(
                f"not renderable: {self.label} mounts no ConfigMap whose "
                f"{container_commands.SCRAM_MECHANISM_FILE} is one of "
                f"{', '.join(SCRAM_MECHANISMS)} (found {self.mechanism or 'none'})",
                "the credentials revision's SCRAM mechanism in the brokers' bootstrap ConfigMap",
            )
        return str(self.mechanism)

    def require_secured(self) -> None:
        """Render nothing of a container the contract runs only on a secured cluster."""
        if not self.secured:
            raise NotRendered


def cluster_inputs(view: StackView, cluster: PolicyResource) -> ClusterInputs:
    """A Kafka cluster's listeners, security and SCRAM mechanism, as its manifests state them."""
    configs = broker_configs(cluster.resource_type, cluster.props)
    protocols = protocol_map(configs.get("listener.security.protocol.map", ""))
    mechanisms = [
        text.strip()
        for config_map in view.mounted_config_maps(cluster)
        if isinstance(
            text := get(config_map.props, "data", container_commands.SCRAM_MECHANISM_FILE), str
        )
    ]
    return ClusterInputs(
        label=label(cluster.resource_type, cluster.props),
        name=name_of(cluster.props),
        namespace=namespace_of(cluster.props),
        ports=listener_ports(configs.get("listeners", "")),
        secured=protocols.get(CLIENT_LISTENER, PLAINTEXT) != PLAINTEXT,
        mechanism=mechanisms[0] if mechanisms else None,
    )


@dataclass(frozen=True)
class Expected:
    """The contract's render of one container, and the inputs it was rendered from."""

    runs: ContainerCommand
    # What the stack gave the render, for a message (empty: it takes nothing from the stack).
    inputs: str

    def described(self) -> str:
        """`the contract's render for grant-acls, from ...`, as a message's `required` ends."""
        inputs = f", from {self.inputs}" if self.inputs else ""
        return f"the contract's render for {self.runs.name}{inputs}"


# A container's render from the Kafka cluster its pod belongs to or talks to, and its own
# command line (command, then args), where a setting shows only there.
Render = Callable[[ClusterInputs | None, Sequence[str]], Expected]


def _required(cluster: ClusterInputs | None) -> ClusterInputs:
    """The cluster a render reads its inputs from, which the stack must have."""
    if cluster is None:
        raise Unrenderable(
            "not renderable: the stack has no Kafka cluster to read its inputs from",
            "a Kafka cluster in the stack, whose listeners and address the render takes",
        )
    return cluster


def _without_inputs(runs: Callable[[], ContainerCommand]) -> Render:
    """The render of a container whose contract takes nothing from the stack."""
    return lambda _cluster, _args: Expected(runs(), "")


def _broker_readiness(found: ClusterInputs | None, _: Sequence[str]) -> Expected:
    cluster = _required(found)
    port = cluster.port(CLIENT_LISTENER)
    security = "secured" if cluster.secured else PLAINTEXT
    return Expected(
        container_commands.broker_readiness(port, secured=cluster.secured),
        f"the {CLIENT_LISTENER} listener's port {port} of {cluster.label}, {security}",
    )


def _grant_acls(found: ClusterInputs | None, _: Sequence[str]) -> Expected:
    cluster = _required(found)
    cluster.require_secured()
    port = cluster.port(INTERNAL_LISTENER)
    return Expected(
        container_commands.grant_acls(port),
        f"the {INTERNAL_LISTENER} listener's port {port} of {cluster.label}",
    )


def _format_storage(found: ClusterInputs | None, _: Sequence[str]) -> Expected:
    _required(found).require_secured()
    return Expected(container_commands.format_storage(), "")


def _reconcile(found: ClusterInputs | None, args: Sequence[str]) -> Expected:
    cluster = _required(found)
    allow = container_commands.ALLOW_PARTITION_INCREASE in args
    mechanism = cluster.current_mechanism() if cluster.secured else None
    return Expected(
        container_commands.topic_reconciler(
            cluster.address(), allow_partition_increase=allow, scram_mechanism=mechanism
        ),
        f"the client address of {cluster.label}, "
        + (f"its credentials revision's {mechanism}" if mechanism else PLAINTEXT)
        + (", " if allow else ", no ")
        + container_commands.ALLOW_PARTITION_INCREASE,
    )


def _retire(found: ClusterInputs | None, _: Sequence[str]) -> Expected:
    cluster = _required(found)
    cluster.require_secured()
    current = cluster.current_mechanism()
    # Mechanisms alternate with the revision: the one to retire is the other one.
    (retired,) = (m for m in SCRAM_MECHANISMS if m != current)
    return Expected(
        container_commands.scram_retire(cluster.address(), retired),
        f"the client address of {cluster.label}, retiring {retired}, the mechanism before its "
        f"credentials revision's {current}",
    )


def _finalize(found: ClusterInputs | None, words: Sequence[str]) -> Expected:
    cluster = _required(found)
    # The release is a stack setting (kafka.metadataVersion, or the image's release) that only
    # the command line shows; the render refuses anything but X.Y.
    flagged = container_commands.RELEASE_VERSION in words[:-1]
    release = words[words.index(container_commands.RELEASE_VERSION) + 1] if flagged else ""
    try:
        runs = container_commands.finalize_metadata_version(
            cluster.address(), release, secured=cluster.secured
        )
    except ValueError as refused:
        raise Unrenderable(
            f"not renderable: {refused}",
            f"{container_commands.RELEASE_VERSION} X.Y, the release whose metadata.version it "
            "finalizes",
        ) from refused
    security = "secured" if cluster.secured else PLAINTEXT
    return Expected(runs, f"the client address of {cluster.label} ({security}), release {release}")


# Every container the contract declares, by name, with how its inputs are read from the stack.
_RENDERS: dict[str, Render] = {
    container_commands.FORMAT_STORAGE: _format_storage,
    container_commands.KAFKA: _without_inputs(container_commands.kafka_broker),
    container_commands.GRANT_ACLS: _grant_acls,
    container_commands.BROKER_READINESS: _broker_readiness,
    container_commands.PROCESSOR: _without_inputs(container_commands.processor),
    container_commands.RECONCILE: _reconcile,
    container_commands.RETIRE: _retire,
    container_commands.FINALIZE: _finalize,
}


def _words(value: Any) -> list[str]:
    """A command, args or exec command as the list of strings the container runs."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [str(word) for word in value]
    return []


def _shown(words: Sequence[str], absent: str = "absent") -> str:
    """A command line for a message: a script by its length, a long line cut short."""
    if not words:
        return absent
    text = " ".join(f"<script of {len(w.splitlines())} lines>" if "\n" in w else w for w in words)
    return text if len(text) <= _SHOWN_CHARACTERS else text[: _SHOWN_CHARACTERS - 3] + "..."


def difference(found: Sequence[str], expected: Sequence[str]) -> str:
    """Where `found` first departs from `expected`: a word, or a line of a script."""
    for index, (have, want) in enumerate(zip(found, expected, strict=False), start=1):
        if have == want:
            continue
        if "\n" not in have + want:
            return f"word {index} is {have!r} where the contract has {want!r}"
        have_lines, want_lines = have.splitlines(), want.splitlines()
        lines = zip(have_lines, want_lines, strict=False)
        for number, (line, wanted) in enumerate(lines, start=1):
            if line != wanted:
                return (
                    f"line {number} of word {index} is {line!r} where the contract has {wanted!r}"
                )
        if len(have_lines) > len(want_lines):
            extra = have_lines[len(want_lines)]
            return f"word {index} has a line {len(want_lines) + 1} the contract has not: {extra!r}"
        if len(want_lines) > len(have_lines):
            missing = want_lines[len(have_lines)]
            return f"word {index} lacks line {len(have_lines) + 1} of the contract's: {missing!r}"
        return f"word {index} differs from the contract's in its line endings"
    if len(found) > len(expected):
        return f"word {len(expected) + 1} {found[len(expected)]!r} is more than the contract has"
    return f"word {len(found) + 1} {expected[len(found)]!r} of the contract's is missing"


class _Container:
    """One container of a workload, checked against its render."""

    def __init__(
        self, view: StackView, workload: PolicyResource, container: Mapping[str, Any]
    ) -> None:
        self.view = view
        self.workload = workload
        self.container = container
        self.name = str(container.get("name", "?"))
        self.subject = label(workload.resource_type, workload.props)

    def finding(self, field: str, found: str, required: str, fix: str = _FIX) -> str:
        """A violation of this container's `field` (of the container itself when empty)."""
        where = f"container {self.name} {field}".rstrip()
        return violation(self.subject, where, found, required, fix)

    def findings(self, cluster: ClusterInputs | None) -> Iterator[str]:
        """Every way the container departs from the contract's render of it."""
        render = _RENDERS.get(self.name)
        if render is None:
            return  # no container of the contract's: `workload-shapes` refuses it
        try:
            words = _words(self.container.get("command")) + _words(self.container.get("args"))
            expected = render(cluster, words)
        except NotRendered:
            return
        except Unrenderable as refused:
            yield self.finding("", refused.found, refused.required, refused.fix)
            return
        yield from self._command_line(expected)
        yield from self._probes(expected.runs)
        yield from self._hooks()
        yield from self._substitutions(expected.runs)
        for path in expected.runs.acts_on:
            yield from self._file(path)

    def _command_line(self, expected: Expected) -> Iterator[str]:
        runs = expected.runs
        for field, want, default in (
            ("command", runs.command, "ENTRYPOINT"),
            ("args", runs.args, "CMD"),
        ):
            found = _words(self.container.get(field))
            if found == list(want):
                continue
            required = (
                f"exactly {_shown(want)}, {expected.described()}"
                if want
                else f"absent: {expected.described()} runs the image's own {default}"
            )
            yield self.finding(field, f"{_shown(found)} ({difference(found, want)})", required)

    def _probes(self, runs: ContainerCommand) -> Iterator[str]:
        for kind, probe in iter_probes(self.container):
            if "exec" not in probe:
                continue  # httpGet, tcpSocket, grpc: the kubelet's, nothing runs in the container
            found = _words(get(probe, "exec", "command"))
            if not runs.probe:
                yield self.finding(
                    f"{kind}.exec.command",
                    _shown(found),
                    f"no exec probe: the contract's {self.name} has none (an httpGet or "
                    "tcpSocket probe runs nothing inside the container)",
                )
            elif found != list(runs.probe):
                yield self.finding(
                    f"{kind}.exec.command",
                    f"{_shown(found)} ({difference(found, runs.probe)})",
                    f"exactly {_shown(runs.probe)}, the contract's probe for {self.name}",
                )

    def _hooks(self) -> Iterator[str]:
        for hook in _LIFECYCLE_HOOKS:
            handler = get(self.container, "lifecycle", hook)
            if isinstance(handler, Mapping) and "exec" in handler:
                yield self.finding(
                    f"lifecycle.{hook}.exec.command",
                    _shown(_words(get(handler, "exec", "command"))),
                    "no lifecycle hook that runs a command: the contract declares none",
                )

    def _substitutions(self, runs: ContainerCommand) -> Iterator[str]:
        """`$(NAME)` in command or args is replaced by the kubelet with env var NAME before the
        container starts, so an env var named like a `$(...)` of a script rewrites the script."""
        defined = {str(get(var, "name")) for var in items(self.container, "env")}
        from_sources = bool(items(self.container, "envFrom"))
        for field in ("command", "args"):
            for word in _words(self.container.get(field)):
                for match in _REFERENCE.finditer(word):
                    name = match.group(1)
                    if name is None or name in runs.substituted:
                        continue
                    if name in defined or from_sources:
                        source = "its env" if name in defined else "its envFrom"
                        yield self.finding(
                            field,
                            f"a command line with $({name}), which the kubelet replaces with "
                            f"the value of an env var of that name from {source} before it runs",
                            "no $(NAME) the container's env can fill but those the contract "
                            f"substitutes ({', '.join(runs.substituted) or 'none'})",
                            f"remove the env var (or envFrom) that can fill $({name}); {_FIX}",
                        )

    def _file(self, path: str) -> Iterator[str]:
        """The file at `path` is a key of a ConfigMap of the stack, mounted whole at its folder."""
        folder, file = posixpath.split(path)
        mounts = [
            m
            for m in items(self.container, "volumeMounts")
            if (mount_path := str(get(m, "mountPath", default="")).rstrip("/"))
            and (path == mount_path or path.startswith(mount_path + "/"))
        ]
        source = self._file_source(mounts, folder, file)
        if source is not None:
            yield self.finding(
                f"file {path}",
                source,
                f"key {file} of a ConfigMap of this stack, its volume mounted whole at {folder}: "
                "the file the pack reviews",
                _FILE_FIX,
            )

    def _file_source(self, mounts: list[Mapping[str, Any]], folder: str, file: str) -> str | None:
        """Where the file comes from, when that is not a reviewed ConfigMap (None: it is)."""
        if not mounts:
            return "from no volume (the image's own file system)"
        mount = max(mounts, key=lambda m: len(str(get(m, "mountPath", default=""))))
        volume_name = str(get(mount, "name", default="?"))
        mount_path = str(get(mount, "mountPath", default="")).rstrip("/")
        sub_path = get(mount, "subPath") or get(mount, "subPathExpr")
        if sub_path:
            return f"from volume {volume_name} mounted at {mount_path} with subPath {sub_path}"
        if mount_path != folder:
            return f"from volume {volume_name} mounted at {mount_path}, not at {folder}"
        spec = pod_spec(self.workload.resource_type, self.workload.props)
        volume = next((v for v in items(spec, "volumes") if get(v, "name") == volume_name), None)
        config_map_name = get(volume, "configMap", "name")
        if config_map_name is None:
            if volume is None:
                return f"from volume {volume_name}, which the pod does not declare"
            kinds = ", ".join(str(k) for k in volume if k != "name")
            return f"from volume {volume_name} ({kinds}), not a ConfigMap"
        listed = items(volume, "configMap", "items")
        if listed and not any(get(i, "key") == file == get(i, "path") for i in listed):
            return f"from ConfigMap {config_map_name}, whose items do not map key {file} to it"
        config_map = self.view.config_map(namespace_of(self.workload.props), str(config_map_name))
        if config_map is None:
            return f"from ConfigMap {config_map_name}, which this stack does not declare"
        if not isinstance(get(config_map.props, "data", file), str):
            return f"from ConfigMap {config_map_name}, which holds no key {file}"
        return None


def _cluster_of(
    workload: PolicyResource, clusters: Mapping[str, ClusterInputs]
) -> ClusterInputs | None:
    """The Kafka cluster whose inputs a workload's containers are rendered from: its own, else
    the one in its namespace (the program's one cluster)."""
    if workload.urn in clusters:
        return clusters[workload.urn]
    namespace = namespace_of(workload.props)
    same = [c for c in clusters.values() if c.namespace == namespace]
    candidates = same or list(clusters.values())
    return candidates[0] if candidates else None


def check_container_commands(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """Every container runs exactly the contract's render, from inputs the stack shows."""
    view = StackView(args.resources)
    clusters = {
        cluster.urn: cluster_inputs(view, cluster)
        for cluster in view.workloads()
        if is_kafka_broker(cluster.resource_type, cluster.props)
    }
    for workload in view.workloads():
        cluster = _cluster_of(workload, clusters)
        for container in all_containers(pod_spec(workload.resource_type, workload.props)):
            for message in _Container(view, workload, container).findings(cluster):
                yield message, workload.urn


POLICIES = [
    stack_rule(
        name="container-commands",
        description=(
            "Every container runs exactly what contract/container_commands.py renders "
            "for it (the brokers' format-storage, kafka, grant-acls and "
            "broker-readiness, the processor, the reconciler's, the SCRAM retirement's and the "
            "metadata.version finalization's Jobs), "
            "from inputs read in the stack (the brokers' listener ports and security, the Kafka "
            "cluster's address, the credentials revision's SCRAM mechanism): command, args and "
            "exec probes word for word, no lifecycle hook that runs a command, no $(NAME) the "
            "container's env could fill but the contract's, every file it acts on (grant lines, "
            "ACLs, topic specs, processor properties) a key of a ConfigMap of the stack mounted "
            "whole (which containers a workload has is workload-shapes'). A container runs "
            "with its pod's credentials, so what it runs must be what the pack reviewed."
        ),
        level=MANDATORY,
        check=check_container_commands,
    ),
]
