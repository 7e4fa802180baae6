"""Rules for the processor's consumer-group membership: static identity, a session timeout
computed from the StatefulSet itself, cooperative rebalancing, read_committed.

With Kafka 4's consumer group protocol (`consumer.group.protocol=consumer`, KIP-848) the session
timeout, the heartbeat and the assignment live on the broker (`group.consumer.*`); the rules
check whichever protocol the processor uses.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import StackValidationArgs

from .config import MANDATORY, Threshold, stack_rule
from .java_properties import env_reference
from .kafka_cluster import KAFKA_DEFAULTS, broker_configs, env_name
from .manifests import env_field_ref, fmt, label, number, pod_spec, processor_container
from .messages import violation
from .restart_budget import restart_budget
from .stack_view import PROPERTIES_KEY, STANDBY_KEY, ProcessorDeployment, StackView

Finding = tuple[str, str | None]

# librdkafka's client defaults (the processor's consumer is confluent-kafka).
CLIENT_DEFAULTS = {
    "consumer.group.protocol": "classic",
    "consumer.session.timeout.ms": "45000",
    "consumer.heartbeat.interval.ms": "3000",
    "consumer.partition.assignment.strategy": "range,roundrobin",
    "consumer.isolation.level": "read_committed",
    "consumer.max.poll.interval.ms": "300000",
}
# Client settings the consumer protocol moves to the broker (the client rejects them there).
BROKER_SIDE_UNDER_KIP_848 = (
    "consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms",
    "consumer.partition.assignment.strategy",
)


def _properties_subject(processor: ProcessorDeployment) -> tuple[str, str]:
    """How a message names the properties file, and the URN to attach it to."""
    if processor.config_map is None:
        workload = processor.workload
        return (
            f"{label(workload.resource_type, workload.props)} (no {PROPERTIES_KEY})",
            workload.urn,
        )
    cm = processor.config_map
    return f"{label(cm.resource_type, cm.props)} data[{PROPERTIES_KEY}]", cm.urn


def _setting(processor: ProcessorDeployment, key: str) -> str:
    return processor.properties.get(key, CLIENT_DEFAULTS.get(key, ""))


def _uses_kip_848(processor: ProcessorDeployment) -> bool:
    return _setting(processor, "consumer.group.protocol").strip().lower() == "consumer"


def check_static_membership(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """Static mode: group.instance.id from the pod name. Stateless or hand-off mode: none, so
    the member leaves on close; hand-off also needs a second instance to hand the partitions to,
    holding a warm copy of their state (num.standby.replicas >= 1)."""
    for processor in StackView(args.resources).processors():
        subject, urn = _properties_subject(processor)
        instance_id = processor.properties.get("consumer.group.instance.id")
        handoff = processor.properties.get("membership.mode", "static") == "handoff"
        if not processor.stateful or handoff:
            if instance_id:
                yield (
                    violation(
                        subject,
                        "consumer.group.instance.id",
                        instance_id,
                        "absent for a stateless processor (stateful=false) or with "
                        "membership.mode=handoff",
                        "remove it: a dynamic member leaves the group on close, so its "
                        "partitions move at once instead of after session.timeout.ms",
                    ),
                    urn,
                )
            replicas = number(processor.workload.props.get("spec", {}).get("replicas", 1))
            if processor.stateful and (replicas is None or replicas < 2):
                workload = processor.workload
                yield (
                    violation(
                        label(workload.resource_type, workload.props),
                        "spec.replicas",
                        fmt(replicas),
                        ">= 2 with membership.mode=handoff",
                        "run at least 2 replicas, or set membership.mode=static: a hand-off "
                        "needs another instance to take the partitions over",
                    ),
                    workload.urn,
                )
            if processor.stateful and handoff and processor.standby_replicas < 1:
                yield (
                    violation(
                        subject,
                        STANDBY_KEY,
                        processor.standby_found,
                        ">= 1 with membership.mode=handoff",
                        f"set {STANDBY_KEY}=1 (stack setting processor.numStandbyReplicas), or "
                        "membership.mode=static: a hand-off moves partitions to instances that "
                        "must hold warm copies of their state, otherwise each moved partition "
                        "restores its whole changelog",
                    ),
                    urn,
                )
            continue
        workload = processor.workload
        variable = env_reference(instance_id)
        container = processor_container(pod_spec(workload.resource_type, workload.props)) or {}
        source = env_field_ref(container, variable) if variable else None
        if source != "metadata.name":
            found = instance_id or "absent"
            if variable:
                found = f"{instance_id} with {variable} from {source or 'no fieldRef'}"
            yield (
                violation(
                    subject,
                    "consumer.group.instance.id",
                    found,
                    "${env:POD_NAME} with POD_NAME from the downward API fieldRef metadata.name",
                    "set consumer.group.instance.id=${env:POD_NAME}: a static member that "
                    "restarts within session.timeout.ms gets its partitions back with no "
                    "rebalance; without it every restart moves partitions and their state",
                ),
                urn,
            )


def _static_member(processor: ProcessorDeployment) -> bool:
    return processor.stateful and processor.properties.get("membership.mode", "static") != "handoff"


def check_session_timeout(args: StackValidationArgs, cfg: Mapping[str, Any]) -> Iterator[Finding]:
    """Each mode's failure path: a static member's session outlives one pod's worst-case
    restart, a hand-off member's ends soon after a crash; both within the broker's bounds."""
    view = StackView(args.resources)
    for processor in view.processors():
        workload = processor.workload
        budget = restart_budget(workload.resource_type, workload.props)
        kafka = view.kafka_for(processor.properties)
        broker = broker_configs(kafka.resource_type, kafka.props) if kafka else dict(KAFKA_DEFAULTS)
        subject, urn = _properties_subject(processor)
        if _uses_kip_848(processor):
            yield from _client_keys_under_kip_848(processor, subject, urn)
            key = "group.consumer.session.timeout.ms"
            min_key, max_key = (
                "group.consumer.min.session.timeout.ms",
                "group.consumer.max.session.timeout.ms",
            )
            where = (
                f"{label(kafka.resource_type, kafka.props)} broker config"
                if kafka
                else "broker default"
            )
            field, urn = f"{key} (env {env_name(key)})", kafka.urn if kafka else urn
            found = number(broker[key])
            subject = where
            fix = (
                f"set {env_name(key)} on the brokers (and {env_name(min_key)}/{env_name(max_key)} "
                "around it): under the consumer group protocol the broker owns the session timeout"
            )
        else:
            key = "consumer.session.timeout.ms"
            min_key, max_key = "group.min.session.timeout.ms", "group.max.session.timeout.ms"
            field, found = key, number(_setting(processor, key))
            fix = (
                f"set {key} (infra computes it per membership.mode) and, if needed, "
                f"{env_name(min_key)}/{env_name(max_key)} on the brokers"
            )
        found = found or 0.0
        minimum, maximum = number(broker[min_key]), number(broker[max_key])
        bounds = f"broker {min_key} {fmt(minimum)} <= it <= {max_key} {fmt(maximum)}"
        if _static_member(processor):
            needed_ms = budget.total_seconds * 1000 + cfg["minMarginMs"]
            required = (
                f">= the restart budget of {label(workload.resource_type, workload.props)} "
                f"({budget.explain()} = {fmt(budget.total_seconds * 1000)} ms, + margin "
                f"{fmt(cfg['minMarginMs'])} ms) and {bounds}"
            )
            why = (
                "a static member's session shorter than a restart expires it and every pod "
                "restart rebalances"
            )
            wrong = found < needed_ms
        elif processor.stateful:
            limit = cfg["maxHandoffSessionMs"]
            required = f"<= {fmt(limit)} with membership.mode=handoff, and {bounds}"
            why = (
                "a hand-off member that stops leaves the group at once, but one that crashes "
                "holds its partitions, producing nothing, until its session expires"
            )
            wrong = found > limit
        else:
            required, why, wrong = bounds, "", False
        out_of_bounds = (minimum is not None and found < minimum) or (
            maximum is not None and found > maximum
        )
        if wrong or out_of_bounds:
            reason = "; the broker refuses a join outside its bounds (INVALID_SESSION_TIMEOUT)"
            yield (
                violation(
                    subject, field, fmt(found), required, fix + (f"; {why}" if why else "") + reason
                ),
                urn,
            )


def _client_keys_under_kip_848(
    processor: ProcessorDeployment, subject: str, urn: str
) -> Iterator[Finding]:
    for key in BROKER_SIDE_UNDER_KIP_848:
        if key in processor.properties:
            yield (
                violation(
                    subject,
                    key,
                    processor.properties[key],
                    "absent with consumer.group.protocol=consumer",
                    "remove it: under KIP-848 the broker owns this setting (group.consumer.*) "
                    "and the client refuses to start with it",
                ),
                urn,
            )


def check_heartbeat(args: StackValidationArgs, cfg: Mapping[str, Any]) -> Iterator[Finding]:
    """Heartbeats at most a third of the session: two lost heartbeats do not expire a member."""
    view = StackView(args.resources)
    for processor in view.processors():
        subject, urn = _properties_subject(processor)
        if _uses_kip_848(processor):
            kafka = view.kafka_for(processor.properties)
            broker = broker_configs(kafka.resource_type, kafka.props) if kafka else KAFKA_DEFAULTS
            key = "group.consumer.heartbeat.interval.ms"
            session_key = "group.consumer.session.timeout.ms"
            heartbeat, session = number(broker[key]), number(broker[session_key])
            if kafka:
                subject, urn = f"{label(kafka.resource_type, kafka.props)} broker config", kafka.urn
            field = f"{key} (env {env_name(key)})"
        else:
            key, session_key = "consumer.heartbeat.interval.ms", "consumer.session.timeout.ms"
            heartbeat, session = (
                number(_setting(processor, key)),
                number(_setting(processor, session_key)),
            )
            field = key
        ratio = cfg["minSessionToHeartbeatRatio"]
        limit = (session or 0.0) / ratio
        if heartbeat is None or heartbeat * ratio > (session or 0.0):
            yield (
                violation(
                    subject,
                    field,
                    fmt(heartbeat),
                    f"<= {session_key} ({fmt(session)}) / {fmt(ratio)} = {fmt(round(limit))}",
                    f"lower {key} to at most a third of the session timeout, so a member "
                    "survives a missed heartbeat or two",
                ),
                urn,
            )


def check_poll_interval(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """max.poll.interval.ms at least the session timeout: librdkafka refuses a smaller one, so
    the processor would refuse to start (a long restart budget raises the session above the
    300 s default)."""
    for processor in StackView(args.resources).processors():
        if _uses_kip_848(processor):
            continue  # the session timeout is the broker's then, not the client's
        subject, urn = _properties_subject(processor)
        key, session_key = "consumer.max.poll.interval.ms", "consumer.session.timeout.ms"
        poll = number(_setting(processor, key))
        session = number(_setting(processor, session_key))
        if poll is None or (session is not None and poll < session):
            yield (
                violation(
                    subject,
                    key,
                    fmt(poll) if key in processor.properties else f"absent (default {fmt(poll)})",
                    f">= {session_key} ({fmt(session)})",
                    f"raise {key} to at least the session timeout: librdkafka refuses a smaller "
                    "one, so every pod would fail at start",
                ),
                urn,
            )


def check_cooperative(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """Incremental rebalancing: only the moving partitions pause."""
    for processor in StackView(args.resources).processors():
        if _uses_kip_848(processor):
            continue  # KIP-848 assignment is incremental; stray client keys reported elsewhere
        subject, urn = _properties_subject(processor)
        key = "consumer.partition.assignment.strategy"
        found = _setting(processor, key)
        if found.replace(" ", "") != "cooperative-sticky":
            yield (
                violation(
                    subject,
                    key,
                    found if key in processor.properties else f"absent (default {found})",
                    "cooperative-sticky",
                    f"set {key}=cooperative-sticky: an eager assignor (range, roundrobin) stops "
                    "every partition on every rebalance, and only sticky assignment keeps "
                    "partitions where their state already is",
                ),
                urn,
            )


def check_read_committed(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """Read only committed transactional data."""
    for processor in StackView(args.resources).processors():
        key = "consumer.isolation.level"
        found = _setting(processor, key)
        if found.strip() != "read_committed":
            subject, urn = _properties_subject(processor)
            yield (
                violation(
                    subject,
                    key,
                    found,
                    "read_committed",
                    f"set {key}=read_committed: with read_uncommitted the processor reads "
                    "records of aborted transactions (a restore would count them)",
                ),
                urn,
            )


POLICIES = [
    stack_rule(
        name="group-static-membership",
        description=(
            "A stateful processor is a static group member (group.instance.id = the pod name, "
            "from the downward API), so a restart within the session timeout causes no "
            "rebalance; a stateless one (stateful=false) has none and leaves the group on close. "
            "With membership.mode=handoff it has none either, and hands its partitions to at "
            "least one other instance holding warm copies (num.standby.replicas >= 1)."
        ),
        level=MANDATORY,
        check=check_static_membership,
    ),
    stack_rule(
        name="group-session-timeout",
        description=(
            "The session timeout fits the membership mode's failure path: a static member's "
            "covers the worst-case restart of one processor pod, computed from its StatefulSet "
            "(terminationGracePeriodSeconds + startup probe budget + minReadySeconds), or every "
            "pod replacement stops its partitions for 45 s and then rebalances; a hand-off "
            "member's is at most maxHandoffSessionMs, or a crash stops its partitions until the "
            "session expires. Both within the broker's group.min/max.session.timeout.ms. Under "
            "KIP-848 the broker's group.consumer.session.timeout.ms is checked instead."
        ),
        level=MANDATORY,
        check=check_session_timeout,
        thresholds=[
            Threshold("minMarginMs", "integer", 0, "Margin required above the restart budget.", 0),
            Threshold(
                "maxHandoffSessionMs",
                "integer",
                12000,
                "The longest session of a hand-off member (a crash stops its partitions as long).",
                1,
            ),
        ],
    ),
    stack_rule(
        name="group-heartbeat-interval",
        description=(
            "heartbeat.interval.ms is at most a third of session.timeout.ms (Kafka's own "
            "guidance), so one late heartbeat does not expire a member."
        ),
        level=MANDATORY,
        check=check_heartbeat,
        thresholds=[
            Threshold(
                "minSessionToHeartbeatRatio",
                "number",
                3,
                "Smallest session.timeout.ms / heartbeat.interval.ms.",
                1,
            )
        ],
    ),
    stack_rule(
        name="group-max-poll-interval",
        description=(
            "max.poll.interval.ms is at least session.timeout.ms: librdkafka refuses a smaller "
            "one, so a processor whose restart budget raised its session timeout above the "
            "300 s default would fail at start in every pod."
        ),
        level=MANDATORY,
        check=check_poll_interval,
    ),
    stack_rule(
        name="group-cooperative-assignor",
        description=(
            "The classic protocol uses the cooperative-sticky assignor: a rebalance pauses only "
            "the partitions that move, and partitions stay where their state is."
        ),
        level=MANDATORY,
        check=check_cooperative,
    ),
    stack_rule(
        name="group-read-committed",
        description=(
            "The processor consumes with isolation.level=read_committed: exactly-once needs "
            "consumers that skip aborted transactions."
        ),
        level=MANDATORY,
        check=check_read_committed,
    ),
]
