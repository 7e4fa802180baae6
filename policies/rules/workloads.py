"""Rules for every StatefulSet (the Kafka cluster and the processor) and every pod template."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import PolicyResource, ResourceValidationArgs, StackValidationArgs

from contract.images import is_digest_pinned

from .config import ADVISORY, MANDATORY, Threshold, resource_rule, stack_rule
from .manifests import (
    STATEFUL_SET,
    all_containers,
    containers,
    fmt,
    get,
    items,
    iter_probes,
    label,
    number,
    pod_spec,
    quantity,
)
from .messages import violation
from .pair import ZONE_TOPOLOGY, side_of, zone_redundant_sides
from .restart_budget import restart_budget
from .stack_view import StackView

Finding = tuple[str, str | None]

# pulumi-kubernetes waits this long for a StatefulSet roll when no custom timeout is set.
DEFAULT_PULUMI_UPDATE_TIMEOUT_SECONDS = 600.0


def _statefulset(args: ResourceValidationArgs) -> bool:
    return args.resource_type == STATEFUL_SET


def check_rolling_update(args: ResourceValidationArgs, cfg: Mapping[str, Any]) -> Iterator[str]:
    """RollingUpdate, one pod at a time."""
    if not _statefulset(args):
        return
    subject = label(args.resource_type, args.props)
    strategy = get(args.props, "spec", "updateStrategy", default={})
    strategy_type = get(strategy, "type", default="RollingUpdate")
    if strategy_type != "RollingUpdate":
        yield violation(
            subject,
            "spec.updateStrategy.type",
            strategy_type,
            "RollingUpdate",
            "set spec.updateStrategy.type: RollingUpdate so a change rolls one pod at a time "
            "under the PDB instead of waiting for manual pod deletes",
        )
    max_unavailable = get(strategy, "rollingUpdate", "maxUnavailable")
    if max_unavailable is not None and number(max_unavailable) != cfg["maxUnavailable"]:
        yield violation(
            subject,
            "spec.updateStrategy.rollingUpdate.maxUnavailable",
            max_unavailable,
            f"absent or {fmt(cfg['maxUnavailable'])}",
            "remove maxUnavailable (it needs the MaxUnavailableStatefulSet feature gate, off by "
            "default); two pods down at once can take a partition's replicas below "
            "min.insync.replicas or stall two processors' partitions",
        )


def check_volume_retention(args: ResourceValidationArgs, _: Mapping[str, Any]) -> Iterator[str]:
    """Persistent state in volumeClaimTemplates, claims retained on delete and scale-down."""
    if not _statefulset(args):
        return
    subject = label(args.resource_type, args.props)
    if not items(args.props, "spec", "volumeClaimTemplates"):
        yield violation(
            subject,
            "spec.volumeClaimTemplates",
            "absent",
            "at least one claim template for the pod's state",
            "add a volumeClaimTemplate so pod N always remounts its own PersistentVolumeClaim; "
            "without it a restarted pod replays its whole state (note: the field is immutable, "
            "adding it replaces the StatefulSet)",
        )
    policy = get(args.props, "spec", "persistentVolumeClaimRetentionPolicy", default={})
    for field in ("whenDeleted", "whenScaled"):
        value = get(policy, field, default="Retain")
        if value != "Retain":
            yield violation(
                subject,
                f"spec.persistentVolumeClaimRetentionPolicy.{field}",
                value,
                "Retain",
                f"set {field}: Retain; Delete drops the state (and for Kafka the log) with the "
                "StatefulSet or on scale-down",
            )


def _spread_findings(
    statefulset: PolicyResource, cfg: Mapping[str, Any], *, side: bool, zone_redundant: bool
) -> Iterator[str]:
    """One StatefulSet's spread: replicas on different nodes, and over zones unless it is a
    side of a pair that keeps out of the other side's zones (`zone_redundant`)."""
    props = statefulset.props
    if (number(get(props, "spec", "replicas")) or 1) < 2:
        return
    subject = label(statefulset.resource_type, props)
    spec = pod_spec(statefulset.resource_type, props)
    anti = get(spec, "affinity", "podAntiAffinity", default={})
    hard = items(anti, "requiredDuringSchedulingIgnoredDuringExecution")
    soft = [
        get(t, "podAffinityTerm")
        for t in items(anti, "preferredDuringSchedulingIgnoredDuringExecution")
    ]
    hostname = "kubernetes.io/hostname"
    has_hard = any(get(t, "topologyKey") == hostname for t in hard)
    has_soft = any(get(t, "topologyKey") == hostname for t in soft)
    if cfg["requireHardAntiAffinity"] and not has_hard:
        yield violation(
            subject,
            "spec.template.spec.affinity.podAntiAffinity.requiredDuringScheduling...",
            "preferred only" if has_soft else "absent",
            f"a required anti-affinity term on {hostname}",
            "require pod anti-affinity on kubernetes.io/hostname so two replicas never share a "
            "node (a node drain would take both)",
        )
    elif not (has_hard or has_soft):
        yield violation(
            subject,
            "spec.template.spec.affinity.podAntiAffinity",
            "absent",
            f"an anti-affinity term on {hostname} (preferred is enough on this stack)",
            "add pod anti-affinity on kubernetes.io/hostname",
        )
    spread = [get(c, "topologyKey") for c in items(spec, "topologySpreadConstraints")]
    if not cfg["requireZoneSpread"] or ZONE_TOPOLOGY in spread or zone_redundant:
        return
    required = f"a constraint on {ZONE_TOPOLOGY}"
    fix = (
        f"add a topologySpreadConstraint on {ZONE_TOPOLOGY} (maxSkew 1) so a zone outage "
        "leaves a quorum"
    )
    if side:
        # A side may do without: the pair is the zone redundancy when the sides keep apart.
        required += (
            f", or, as a side of an active/standby pair, a required pod anti-affinity term on "
            f"{ZONE_TOPOLOGY} against the other side's pods (processor-pair)"
        )
        fix = (
            "keep the side out of the other side's zones with a required anti-affinity term, "
            "in a pair that processor-pair finds correct (processor.pair renders both in a prod "
            "stack): the other side, whole in another zone, then takes over when this side's "
            "zone goes down"
        )
    yield violation(
        subject,
        "spec.template.spec.topologySpreadConstraints",
        ", ".join(map(str, spread)) or "absent",
        required,
        fix,
    )


def check_spread(args: StackValidationArgs, cfg: Mapping[str, Any]) -> Iterator[Finding]:
    """Replicas on different nodes (and zones): one node loss takes one replica only. A stack
    rule: whether a side of an active/standby pair needs its own zone spread depends on its
    partner (`pair.zone_redundant_sides`)."""
    view = StackView(args.resources)
    sides = {p.workload.urn for p in view.processors() if side_of(p) is not None}
    zone_redundant = zone_redundant_sides(view)
    for statefulset in view.statefulsets():
        urn = statefulset.urn
        findings = _spread_findings(
            statefulset, cfg, side=urn in sides, zone_redundant=urn in zone_redundant
        )
        yield from ((message, urn) for message in findings)


def check_probes(args: ResourceValidationArgs, _: Mapping[str, Any]) -> Iterator[str]:
    """Startup, readiness and liveness probes; readiness that means "serving", not "port open"."""
    if not _statefulset(args):
        return
    subject = label(args.resource_type, args.props)
    for container in containers(pod_spec(args.resource_type, args.props)):
        name = container.get("name", "?")
        probes = dict(iter_probes(container))
        for probe_kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            if probe_kind not in probes:
                yield violation(
                    subject,
                    f"container {name} {probe_kind}",
                    "absent",
                    "startup, readiness and liveness probes",
                    f"add a {probe_kind}: the rolling update, the PDB and the restart budget "
                    "all depend on it",
                )
        readiness = probes.get("readinessProbe")
        if readiness is not None and not {"exec", "httpGet", "grpc"} & set(readiness):
            yield violation(
                subject,
                f"container {name} readinessProbe",
                "a tcpSocket check" if "tcpSocket" in readiness else "without a handler",
                "an exec, httpGet or grpc check of the application's state",
                "probe what ready means (a broker in RUNNING state, a processor with its "
                "assignment restored): an open port is not ready, and the roll moves on too early",
            )


def check_resources(args: ResourceValidationArgs, _: Mapping[str, Any]) -> Iterator[str]:
    """CPU and memory requests, a memory limit equal to the request (no OOM-kill surprises)."""
    if not _statefulset(args):
        return
    subject = label(args.resource_type, args.props)
    for container in containers(pod_spec(args.resource_type, args.props)):
        name = container.get("name", "?")
        resources = get(container, "resources", default={})
        missing = [
            path
            for path in ("requests.cpu", "requests.memory", "limits.memory")
            if get(resources, *path.split(".")) is None
        ]
        if missing:
            yield violation(
                subject,
                f"container {name} resources",
                f"missing {', '.join(missing)}",
                "requests.cpu, requests.memory and limits.memory",
                "set them: the scheduler places pods by requests, and a pod without a memory "
                "limit is the first evicted under node pressure",
            )
            continue
        request = quantity(get(resources, "requests", "memory"))
        limit = quantity(get(resources, "limits", "memory"))
        if request != limit:
            yield violation(
                subject,
                f"container {name} resources.requests.memory",
                get(resources, "requests", "memory"),
                f"equal to limits.memory ({get(resources, 'limits', 'memory')})",
                "set requests.memory = limits.memory so the pod is never evicted for memory "
                "it was promised",
            )


def check_update_timeout(args: ResourceValidationArgs, cfg: Mapping[str, Any]) -> Iterator[str]:
    """Pulumi waits long enough for a full roll (else `pulumi up` fails mid-roll)."""
    if not _statefulset(args):
        return
    replicas = number(get(args.props, "spec", "replicas")) or 1.0
    budget = restart_budget(args.resource_type, args.props)
    needed = replicas * budget.total_seconds * cfg["safetyFactor"]
    configured = args.opts.custom_timeouts.update_seconds or DEFAULT_PULUMI_UPDATE_TIMEOUT_SECONDS
    if configured < needed:
        yield violation(
            label(args.resource_type, args.props),
            "Pulumi customTimeouts.update",
            f"{fmt(configured)} s",
            f">= replicas {fmt(replicas)} x ({budget.explain()}) x {fmt(cfg['safetyFactor'])} "
            f"= {fmt(needed)} s",
            "set ResourceOptions(custom_timeouts=CustomTimeouts(update=...)) from the same "
            "numbers, or pulumi-kubernetes gives up (10 minutes by default) while the roll "
            "is still healthy",
        )


# pulumi-kubernetes' annotation for what a resource's readiness means to `pulumi up`: JSONPath
# conditions, all held on a status whose observedGeneration is current.
WAIT_FOR = "pulumi.com/waitFor"


def _wait_conditions(annotations: Mapping[str, Any]) -> set[str]:
    """The conditions of a `pulumi.com/waitFor` annotation (a JSON list or a single one)."""
    text = str(annotations.get(WAIT_FOR, "") or "")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text
    listed = parsed if isinstance(parsed, list) else [parsed]
    return {str(c).replace(" ", "") for c in listed if c}


def check_roll_wait(args: ResourceValidationArgs, _: Mapping[str, Any]) -> Iterator[str]:
    """`pulumi up` returns only once the roll is over: every pod updated and available."""
    if not _statefulset(args):
        return
    found = _wait_conditions(get(args.props, "metadata", "annotations", default={}))
    # The numbers follow spec.replicas and the partition in the program (infra/workload.py); a
    # wrong one shows at the first `up`, which waits for it until its update timeout.
    missing = [
        field
        for field in ("updatedReplicas", "availableReplicas")
        if not any(c.startswith(f"jsonpath={{.status.{field}}}=") for c in found)
    ]
    if missing:
        yield violation(
            label(args.resource_type, args.props),
            f"metadata.annotations[{WAIT_FOR}]",
            sorted(found) or "absent",
            "JSONPath conditions on " + " and ".join(f"status.{m}" for m in missing),
            "add them (infra/workload.py, roll_complete): pulumi-kubernetes' own wait ends when "
            "the last pod is Ready, before minReadySeconds, and before 4.34 even before the "
            "controller has seen the change, so `pulumi up` returns while the pods still roll",
        )


def check_pinned_images(args: ResourceValidationArgs, cfg: Mapping[str, Any]) -> Iterator[str]:
    """Images pinned to a version (or a digest): a roll must not change what runs by itself."""
    spec = pod_spec(args.resource_type, args.props)
    if spec is None:
        return
    subject = label(args.resource_type, args.props)
    for container in all_containers(spec):
        image = str(container.get("image", ""))
        name_part = image.split("@", 1)[0].rsplit("/", 1)[-1]
        tag = name_part.split(":", 1)[1] if ":" in name_part else None
        has_digest = is_digest_pinned(image)
        if cfg["requireDigest"] and not has_digest:
            required = "a digest pin (image@sha256:<64 hex digits>)"
        elif not has_digest and tag in (None, "latest"):
            required = "a version tag or a digest"
        else:
            continue
        yield violation(
            subject,
            f"container {container.get('name', '?')} image",
            image or "absent",
            required,
            "pin the image: an unpinned tag changes under a rolling restart, and pods of one "
            "StatefulSet end up running different versions",
        )


POLICIES = [
    resource_rule(
        name="statefulset-rolling-update",
        description=(
            "StatefulSets roll one pod at a time (RollingUpdate, maxUnavailable absent or 1): "
            "a roll must never take two Kafka replicas or two processors' partitions down at "
            "once. StatefulSet maxUnavailable is behind a feature gate that is off by default."
        ),
        level=MANDATORY,
        check=check_rolling_update,
        thresholds=[
            Threshold("maxUnavailable", "integer", 1, "Largest allowed maxUnavailable.", 1)
        ],
    ),
    resource_rule(
        name="statefulset-volume-retention",
        description=(
            "StatefulSets keep their state in volumeClaimTemplates with a Retain/Retain claim "
            "retention policy: pod N always remounts its own PVC, so a restart replays nothing, "
            "and deleting or scaling the StatefulSet never deletes data."
        ),
        level=MANDATORY,
        check=check_volume_retention,
    ),
    stack_rule(
        name="statefulset-spread",
        description=(
            "Replicas spread over nodes (pod anti-affinity on kubernetes.io/hostname) and, in "
            "prod, zones: a node drain or a zone outage takes one replica, not a quorum. A side "
            "of a correct active/standby pair (processor-pair) with a required pod anti-affinity "
            "on topology.kubernetes.io/zone against the other side's pods needs no zone spread "
            "of its own: the other side, in another zone, is its zone redundancy."
        ),
        level=ADVISORY,
        check=check_spread,
        thresholds=[
            Threshold(
                "requireHardAntiAffinity",
                "boolean",
                True,
                "Require (not just prefer) hostname anti-affinity.",
            ),
            Threshold(
                "requireZoneSpread",
                "boolean",
                True,
                "Require a topologySpreadConstraint on topology.kubernetes.io/zone.",
            ),
        ],
    ),
    resource_rule(
        name="statefulset-probes",
        description=(
            "StatefulSet containers have startup, readiness and liveness probes, and readiness "
            "checks the application (not an open port): the rolling update moves to the next "
            "pod only when this one really serves."
        ),
        level=MANDATORY,
        check=check_probes,
    ),
    resource_rule(
        name="statefulset-resources",
        description=(
            "StatefulSet containers request CPU and memory and limit memory at the request: "
            "scheduling and eviction follow what the pod really needs."
        ),
        level=ADVISORY,
        check=check_resources,
    ),
    resource_rule(
        name="statefulset-update-timeout",
        description=(
            "Pulumi's update timeout covers a full roll (replicas x the per-pod restart "
            "budget); pulumi-kubernetes waits 10 minutes by default and then fails the update "
            "while the roll is still healthy."
        ),
        level=ADVISORY,
        check=check_update_timeout,
        thresholds=[
            Threshold(
                "safetyFactor",
                "number",
                1.0,
                "Multiplier on replicas x per-pod restart budget.",
                1,
            )
        ],
    ),
    resource_rule(
        name="statefulset-roll-wait",
        description=(
            "`pulumi up` returns only once a StatefulSet's roll is over: a pulumi.com/waitFor "
            "annotation asks for every pod updated and available (ready for minReadySeconds). "
            "A pipeline that chains the next step on `pulumi up` must not start it mid-roll."
        ),
        level=MANDATORY,
        check=check_roll_wait,
    ),
    resource_rule(
        name="pinned-images",
        description=(
            "Container images are pinned by digest (image@sha256:<64 hex digits>); with "
            "requireDigest false (dev) a version tag is enough, never `latest` or untagged: the "
            "same manifest must run the same code on every pod."
        ),
        level=MANDATORY,
        check=check_pinned_images,
        thresholds=[Threshold("requireDigest", "boolean", True, "Require image@sha256 digests.")],
    ),
]
