"""Rules for the processor's consumer-group membership: static identity, a session timeout
computed from the StatefulSet itself, cooperative rebalancing, read_committed.

With Kafka 4's consumer group protocol (`consumer.group.protocol=consumer`, KIP-848) the session
timeout, the heartbeat and the assignment live on the broker (`group.consumer.*`); the rules
check whichever protocol the processor uses.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import PolicyResource, StackValidationArgs

from contract import membership
from contract.java_properties import env_reference
from contract.processor_keys import DEFAULTS, INSTANCE_ID_KEY, PROTOCOL_CONSUMER

from .config import MANDATORY, Threshold, stack_rule
from .kafka_cluster import KAFKA_DEFAULTS, SERVER_PROPERTIES, broker_configs
from .manifests import (
    CONFIG_MAP,
    env_field_ref,
    fmt,
    label,
    number,
    pod_spec,
    processor_container,
)
from .messages import violation
from .restart_budget import restart_budget
from .stack_view import STANDBY_KEY, ProcessorDeployment, StackView
from .topics import TOPICS_KEY, group_configs_of

Finding = tuple[str, str | None]

# Keys whose every refused value these rules report, with fixes of their own (each row allows
# one value): `processor-settings-contract` leaves them to these rules, so a value is reported once.
JUDGED_KEYS = frozenset({"consumer.isolation.level", "consumer.partition.assignment.strategy"})


def _properties_subject(processor: ProcessorDeployment) -> tuple[str, str]:
    """How a message names the properties file, and the URN to attach it to."""
    return processor.properties_subject


def _setting(processor: ProcessorDeployment, key: str) -> str:
    """The value the processor runs with: the file's, else the contract's default."""
    return processor.properties.get(key, DEFAULTS.get(key, ""))


def _shown(processor: ProcessorDeployment, key: str) -> str:
    found = _setting(processor, key)
    return found if key in processor.properties else f"absent (default {found})"


def _mode(processor: ProcessorDeployment) -> str:
    return _setting(processor, "membership.mode").strip()


def _uses_kip_848(processor: ProcessorDeployment) -> bool:
    return _setting(processor, "consumer.group.protocol").strip().lower() == PROTOCOL_CONSUMER


def _int(value: float | None) -> int:
    return round(value or 0.0)


def check_static_membership(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """Static mode: group.instance.id from the pod name. Stateless or hand-off mode: none, so
    the member leaves on close; hand-off also needs a second instance to hand the partitions to,
    holding a warm copy of their state (num.standby.replicas >= 1)."""
    for processor in StackView(args.resources).processors():
        subject, urn = _properties_subject(processor)
        workload = processor.workload
        workload_label = label(workload.resource_type, workload.props)
        instance_id = processor.properties.get(INSTANCE_ID_KEY)
        mode = _mode(processor)
        replicas = number(workload.props.get("spec", {}).get("replicas", 1))
        breaches = membership.instance_id_breaches(
            stateful=processor.stateful, mode=mode, instance_id=instance_id
        ) + membership.handoff_breaches(
            stateful=processor.stateful,
            mode=mode,
            standby_replicas=_int(processor.standby_replicas),
            replicas=None if replicas is None else _int(replicas),
        )
        too_many = membership.standby_breach(
            standby_replicas=_int(processor.standby_replicas),
            replicas=None if replicas is None else _int(replicas),
        )
        # One finding for a lone instance: hand-off's need of a second one says it already.
        if too_many is not None and not any(b.key == "replicas" for b in breaches):
            breaches.append(too_many)
        for breach in breaches:
            if breach.key == "replicas":
                yield (
                    violation(
                        workload_label, "spec.replicas", fmt(replicas), breach.required, breach.why
                    ),
                    workload.urn,
                )
            elif breach.key == "membership.mode":
                yield violation(subject, breach.key, mode, breach.required, breach.why), urn
            elif breach.key == "num.standby.replicas":
                fix = f"{breach.why} (stack setting processor.numStandbyReplicas)"
                found = processor.standby_found
                yield violation(subject, STANDBY_KEY, found, breach.required, fix), urn
            elif instance_id:  # present where it must be absent
                yield violation(subject, breach.key, instance_id, breach.required, breach.why), urn
        if not membership.is_static_member(processor.stateful, mode):
            continue
        # Present is not enough: it must be the pod's own name, from the downward API.
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
                    INSTANCE_ID_KEY,
                    found,
                    "${env:POD_NAME} with POD_NAME from the downward API fieldRef metadata.name",
                    "set consumer.group.instance.id=${env:POD_NAME}: a static member that "
                    "restarts within session.timeout.ms gets its partitions back with no "
                    "rebalance; without it every restart moves partitions and their state",
                ),
                urn,
            )


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
            for breach in membership.classic_only_breaches(PROTOCOL_CONSUMER, processor.properties):
                yield violation(subject, breach.key, breach.found, breach.required, breach.why), urn
            min_key = "group.consumer.min.session.timeout.ms"
            max_key = "group.consumer.max.session.timeout.ms"
            own = _declared_group_configs(view, processor)
            if own is not None and membership.GROUP_SESSION_TIMEOUT_KEY in own[1]:
                # The group's own session, which the reconciler Job sets on the GROUP resource.
                spec, configs = own
                key = membership.GROUP_SESSION_TIMEOUT_KEY
                group = processor.properties.get("application.id", "")
                subject = (
                    f"{label(spec.resource_type, spec.props)} data[{TOPICS_KEY}] group {group}"
                )
                urn = spec.urn
                field, session = key, number(configs[key])
                where = "set it in the group's configs (infra computes it per membership.mode)"
            else:
                key = "group.consumer.session.timeout.ms"
                if kafka:
                    subject = f"{label(kafka.resource_type, kafka.props)} broker config"
                    urn = kafka.urn
                else:
                    subject = "broker default"
                field, session = f"{key} ({SERVER_PROPERTIES})", number(broker[key])
                where = (
                    f"set the group's own {membership.GROUP_SESSION_TIMEOUT_KEY} (the reconciler "
                    f"Job's groups), or {key} on the brokers (and "
                    f"{min_key}/{max_key})"
                )
        else:
            key = "consumer.session.timeout.ms"
            min_key, max_key = "group.min.session.timeout.ms", "group.max.session.timeout.ms"
            field, session = key, number(_setting(processor, key))
            where = (
                f"set {key} (infra computes it per membership.mode) and, if needed, "
                f"{min_key}/{max_key} on the brokers"
            )
        breaches = membership.session_breaches(
            stateful=processor.stateful,
            mode=_mode(processor),
            session_ms=_int(session),
            budget=budget,
            margin_ms=cfg["minMarginMs"],
            max_handoff_session_ms=cfg["maxHandoffSessionMs"],
            broker_min_ms=_optional_int(broker.get(min_key)),
            broker_max_ms=_optional_int(broker.get(max_key)),
            key=key,
            min_key=min_key,
            max_key=max_key,
        )
        for breach in breaches:
            yield (
                violation(subject, field, fmt(session), breach.required, f"{where}; {breach.why}"),
                urn,
            )


def _declared_group_configs(
    view: StackView, processor: ProcessorDeployment
) -> tuple[PolicyResource, dict[str, str]] | None:
    """The ConfigMap declaring the processor group's own configs (KIP-848), and those configs."""
    group = processor.properties.get("application.id", "").strip()
    for config_map in view.of_type(CONFIG_MAP):
        configs = group_configs_of(config_map.resource_type, config_map.props).get(group)
        if configs is not None:
            return config_map, configs
    return None


def _optional_int(value: Any) -> int | None:
    found = number(value)
    return None if found is None else round(found)


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
            field = f"{key} ({SERVER_PROPERTIES})"
        else:
            key, session_key = "consumer.heartbeat.interval.ms", "consumer.session.timeout.ms"
            heartbeat = number(_setting(processor, key))
            session = number(_setting(processor, session_key))
            field = key
        if heartbeat is None:
            continue  # not a number: `processor-settings-contract` reports it
        breach = membership.heartbeat_breach(
            session_ms=_int(session),
            heartbeat_ms=_int(heartbeat),
            ratio=cfg["minSessionToHeartbeatRatio"],
            key=key,
            session_key=session_key,
        )
        if breach is not None:
            fix = f"lower {key}, {breach.why}"
            yield violation(subject, field, fmt(heartbeat), breach.required, fix), urn


def check_poll_interval(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """max.poll.interval.ms at least the session timeout: librdkafka refuses a smaller one, so
    the processor would refuse to start (a long restart budget raises the session above the
    300 s default)."""
    for processor in StackView(args.resources).processors():
        if _uses_kip_848(processor):
            continue  # the session timeout is the broker's then, not the client's
        subject, urn = _properties_subject(processor)
        key = "consumer.max.poll.interval.ms"
        poll = number(_setting(processor, key))
        session = number(_setting(processor, "consumer.session.timeout.ms"))
        if poll is None:
            continue  # not a number: `processor-settings-contract` reports it
        breach = membership.poll_interval_breach(session_ms=_int(session), max_poll_ms=_int(poll))
        if breach is not None:
            fix = f"raise {key} to at least the session timeout: {breach.why}"
            yield violation(subject, key, _shown(processor, key), breach.required, fix), urn


def check_cooperative(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """Incremental rebalancing: only the moving partitions pause."""
    for processor in StackView(args.resources).processors():
        if _uses_kip_848(processor):
            continue  # KIP-848 assignment is incremental; stray client keys reported elsewhere
        subject, urn = _properties_subject(processor)
        key = "consumer.partition.assignment.strategy"
        if _setting(processor, key).replace(" ", "") != "cooperative-sticky":
            yield (
                violation(
                    subject,
                    key,
                    _shown(processor, key),
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
            "With membership.mode=handoff it has none either, and hands its partitions and their "
            "state (so it must be stateful) to at least one other instance holding warm copies "
            "(num.standby.replicas >= 1)."
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
            "KIP-848 the group's own consumer.session.timeout.ms (the reconciler Job's groups) "
            "is checked instead, or else the brokers' group.consumer.session.timeout.ms, within "
            "their group.consumer.min/max.session.timeout.ms."
        ),
        level=MANDATORY,
        check=check_session_timeout,
        thresholds=[
            Threshold("minMarginMs", "integer", 0, "Margin required above the restart budget.", 0),
            Threshold(
                "maxHandoffSessionMs",
                "integer",
                membership.MAX_HANDOFF_SESSION_TIMEOUT_MS,
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
                membership.MIN_SESSION_TO_HEARTBEAT_RATIO,
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
