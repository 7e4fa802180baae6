"""Bring a Kafka cluster's topics to their specs: plan first, refuse what is unsafe, then apply.

The plan is computed from what the cluster reports (partitions, replication factor, the configs
the specs name) and is a pure function of it, so a second run over an up-to-date cluster plans
nothing. Unsafe changes are refused for the whole run, before anything is applied:

- a replication factor change: Kafka cannot do it through topic config, it is a partition
  reassignment;
- fewer partitions: Kafka cannot remove partitions;
- more partitions, unless explicitly allowed: the key -> partition mapping changes, so records
  of one key land in a new partition while their state and co-partitioned results stay behind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from app.clients.kafka_retry import Retrying, is_transient
from app.clients.waiting import poll_until
from contract.topic_specs import TopicSpec

log = logging.getLogger(__name__)

# Admin requests wait this long for the controller (seconds).
REQUEST_TIMEOUT_S = 30.0


class Action(StrEnum):
    """What the plan does with one topic (or one of its settings)."""

    CREATE = "create"
    ALTER_CONFIG = "alter-config"
    ADD_PARTITIONS = "add-partitions"
    REFUSED = "REFUSED"
    UP_TO_DATE = "up-to-date"


CHANGES = frozenset({Action.CREATE, Action.ALTER_CONFIG, Action.ADD_PARTITIONS})


@dataclass(frozen=True)
class TopicState:
    """What the cluster reports about one existing topic."""

    name: str
    partitions: int
    # One value normally; more while a reassignment is half done.
    replication_factors: frozenset[int]
    # The values of the config keys the spec names; None when the broker reports no value.
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """One line of the plan: a change to apply, a refusal, or a topic that is up to date."""

    topic: str
    action: Action
    detail: str
    key: str | None = None  # the config key of an alter-config step
    wanted: str | None = None  # its value, or the partition count of an add-partitions step


@dataclass(frozen=True)
class Plan:
    """The steps that bring the cluster to the specs, topic by topic in spec order."""

    specs: tuple[TopicSpec, ...]
    steps: tuple[Step, ...]

    @property
    def changes(self) -> list[Step]:
        """The steps that change the cluster."""
        return [s for s in self.steps if s.action in CHANGES]

    @property
    def refusals(self) -> list[Step]:
        """The steps refused; when there is any, nothing is applied."""
        return [s for s in self.steps if s.action is Action.REFUSED]

    @property
    def up_to_date(self) -> list[str]:
        """Topics that need nothing."""
        return [s.topic for s in self.steps if s.action is Action.UP_TO_DATE]

    def spec(self, topic: str) -> TopicSpec:
        """The spec of `topic`."""
        return next(s for s in self.specs if s.name == topic)


class ReconcileError(RuntimeError):
    """Applying the plan failed for at least one topic; `failures` says which and why."""

    def __init__(self, failures: Sequence[str]) -> None:
        self.failures = list(failures)
        super().__init__("; ".join(self.failures))


# --- reading the cluster ---------------------------------------------------------------------


def read_cluster(
    admin: AdminClient,
    names: Iterable[str],
    metadata: ClusterMetadata | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> dict[str, TopicState]:
    """The state of those of `names` that exist (partitions, replication, all their configs)."""
    metadata = metadata or admin.list_topics(timeout=timeout_s)
    existing = [n for n in names if n in metadata.topics]
    configs = _describe_configs(admin, existing, timeout_s)
    states = {}
    for name in existing:
        partitions = metadata.topics[name].partitions
        states[name] = TopicState(
            name=name,
            partitions=len(partitions),
            replication_factors=frozenset(len(p.replicas) for p in partitions.values()),
            configs=configs.get(name, {}),
        )
    return states


def _describe_configs(
    admin: AdminClient, names: Sequence[str], timeout_s: float
) -> dict[str, dict[str, str | None]]:
    if not names:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    futures = admin.describe_configs(resources, request_timeout=timeout_s)
    described: dict[str, dict[str, str | None]] = {}
    for resource, future in futures.items():
        try:
            entries = future.result()
        except KafkaException as exc:
            # The broker that answers may not know a topic created a moment ago
            # (UNKNOWN_TOPIC_OR_PART, transient): ask again until it does, within the timeout.
            if not is_transient(exc.args[0]):
                raise
            retrying = Retrying(budget_s=timeout_s, budget_name="the reconciler's request timeout")
            entries = retrying(
                f"configs of topic {resource.name}",
                partial(_describe_one, admin, resource, timeout_s),
            )
        described[resource.name] = {key: entry.value for key, entry in entries.items()}
    return described


def _describe_one(admin: AdminClient, resource: ConfigResource, timeout_s: float) -> Any:
    return admin.describe_configs([resource], request_timeout=timeout_s)[resource].result()


# --- planning --------------------------------------------------------------------------------


def plan(
    specs: Sequence[TopicSpec],
    cluster: Mapping[str, TopicState],
    allow_partition_increase: bool = False,
) -> Plan:
    """The steps from `cluster` to `specs`. Pure: the same inputs give the same plan."""
    steps: list[Step] = []
    for spec in specs:
        state = cluster.get(spec.name)
        steps += _create(spec) if state is None else _update(spec, state, allow_partition_increase)
    return Plan(specs=tuple(specs), steps=tuple(steps))


def _create(spec: TopicSpec) -> list[Step]:
    configs = " ".join(f"{k}={v}" for k, v in spec.configs.items())
    detail = f"partitions={spec.partitions} replication.factor={spec.replication_factor}"
    return [Step(spec.name, Action.CREATE, f"{detail} {configs}".strip())]


def _update(spec: TopicSpec, state: TopicState, allow_partition_increase: bool) -> list[Step]:
    steps = _replication_refusals(spec, state)
    if spec.partitions < state.partitions:
        steps.append(
            Step(
                spec.name,
                Action.REFUSED,
                f"partitions: found {state.partitions}, wanted {spec.partitions}: Kafka cannot "
                f"remove partitions. Keep partitions={state.partitions} in the spec, or create "
                "new topics with the smaller count and migrate (co-partitioned topics together)",
            )
        )
    elif spec.partitions > state.partitions:
        steps.append(_partition_increase(spec, state, allow_partition_increase))
    for key, wanted in spec.configs.items():
        found = state.configs.get(key)
        if found != wanted:
            shown = "(not set)" if found is None else found
            steps.append(
                Step(spec.name, Action.ALTER_CONFIG, f"{key}: {shown} -> {wanted}", key, wanted)
            )
    return steps or [Step(spec.name, Action.UP_TO_DATE, "")]


def _replication_refusals(spec: TopicSpec, state: TopicState) -> list[Step]:
    if state.replication_factors == {spec.replication_factor}:
        return []
    found = "/".join(str(rf) for rf in sorted(state.replication_factors)) or "none"
    return [
        Step(
            spec.name,
            Action.REFUSED,
            f"replication factor: found {found}, wanted {spec.replication_factor}: Kafka cannot "
            "change it through topic config; it takes a partition reassignment "
            "(kafka-reassign-partitions.sh with "
            f"{spec.replication_factor} replicas per partition). Reassign, then rerun; or set "
            f"replication_factor={found} in the spec",
        )
    ]


def _partition_increase(spec: TopicSpec, state: TopicState, allowed: bool) -> Step:
    counts = f"{state.partitions} -> {spec.partitions}"
    if allowed:
        return Step(spec.name, Action.ADD_PARTITIONS, counts, wanted=str(spec.partitions))
    return Step(
        spec.name,
        Action.REFUSED,
        f"partitions: found {state.partitions}, wanted {spec.partitions}: adding partitions "
        "moves keys to other partitions, which breaks co-partitioning and the processor's "
        "state for those keys. Stop the processor, plan how its state is rebuilt, then rerun "
        "with --allow-partition-increase",
    )


# --- applying --------------------------------------------------------------------------------


def apply(admin: AdminClient, the_plan: Plan, timeout_s: float = REQUEST_TIMEOUT_S) -> int:
    """Apply the plan's changes (never a refused plan); the number of changes applied.

    Raises `ReconcileError` naming every topic and setting that failed.
    """
    if the_plan.refusals:
        raise ValueError("a plan with refusals must not be applied")
    failures = _create_topics(admin, the_plan, timeout_s)
    failures += _alter_configs(admin, the_plan, timeout_s)
    failures += _add_partitions(admin, the_plan, timeout_s)
    if not failures:
        failures = _await_leaders(admin, the_plan, timeout_s)
    if failures:
        raise ReconcileError(failures)
    return len(the_plan.changes)


def _await_leaders(admin: AdminClient, the_plan: Plan, timeout_s: float) -> list[str]:
    """Wait until every created or grown topic has a leader for each partition in the metadata.

    The controller answers before the brokers have learned the new partitions; a client that
    starts right after the run (the processors after the topics Job) would otherwise see
    UNKNOWN_TOPIC_OR_PART for a moment.
    """
    grown = {
        s.topic: the_plan.spec(s.topic).partitions
        for s in the_plan.steps
        if s.action in (Action.CREATE, Action.ADD_PARTITIONS)
    }

    def all_led() -> bool:
        metadata = admin.list_topics(timeout=timeout_s)
        for name, wanted in list(grown.items()):
            found = metadata.topics.get(name)
            if (
                found is not None
                and found.error is None
                and len(found.partitions) >= wanted
                and all(p.leader >= 0 for p in found.partitions.values())
            ):
                del grown[name]
        return not grown

    if not grown or poll_until(all_led, timeout_s, interval_s=0.2):
        return []
    return [
        f"topic {name}: applied, but the brokers did not report a leader for each of "
        f"its {wanted} partitions within {timeout_s:g} s; check the brokers' health"
        for name, wanted in sorted(grown.items())
    ]


def error_text(exc: BaseException) -> str:
    """A Kafka failure as `NAME: reason` (librdkafka's error name and text), for messages."""
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError):
        return f"{error.name()}: {error.str()}"
    return str(exc)


def _create_topics(admin: AdminClient, the_plan: Plan, timeout_s: float) -> list[str]:
    steps = [s for s in the_plan.steps if s.action is Action.CREATE]
    if not steps:
        return []
    new_topics = []
    for step in steps:
        spec = the_plan.spec(step.topic)
        log.info("creating topic %s: %s", spec.name, step.detail)
        new_topics.append(
            NewTopic(
                spec.name,
                num_partitions=spec.partitions,
                replication_factor=spec.replication_factor,
                config=dict(spec.configs),
            )
        )
    futures = admin.create_topics(
        new_topics, operation_timeout=timeout_s, request_timeout=timeout_s
    )
    return _wait_for(
        futures,
        "created topic %s",
        lambda name, error: (
            f"topic {name}: create failed ({error}); wanted "
            f"{the_plan.spec(name).to_dict()}. Fix the spec (or the broker limits) and rerun"
        ),
    )


def _alter_configs(admin: AdminClient, the_plan: Plan, timeout_s: float) -> list[str]:
    by_topic: dict[str, list[Step]] = {}
    for step in the_plan.steps:
        if step.action is Action.ALTER_CONFIG:
            by_topic.setdefault(step.topic, []).append(step)
    if not by_topic:
        return []
    resources = []
    for topic, steps in by_topic.items():
        # SET only the keys the spec names: incremental, so every other key keeps its value.
        entries = []
        for step in steps:
            log.info("altering topic %s: %s", topic, step.detail)
            assert step.key is not None, "the planner names the key of every alter-config step"
            entries.append(
                ConfigEntry(step.key, step.wanted, incremental_operation=AlterConfigOpType.SET)
            )
        resources.append(ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries))
    futures = admin.incremental_alter_configs(resources, request_timeout=timeout_s)
    return _wait_for(
        futures,
        "altered topic %s",
        lambda name, error: (
            f"topic {name}: altering "
            f"{', '.join(s.detail for s in by_topic[name])} failed ({error}); check the setting's "
            "name and value in the spec and rerun"
        ),
    )


def _add_partitions(admin: AdminClient, the_plan: Plan, timeout_s: float) -> list[str]:
    steps = [s for s in the_plan.steps if s.action is Action.ADD_PARTITIONS]
    if not steps:
        return []
    for step in steps:
        log.info("adding partitions to topic %s: %s", step.topic, step.detail)
    futures = admin.create_partitions(
        [NewPartitions(s.topic, int(s.wanted or 0)) for s in steps],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    return _wait_for(
        futures,
        "added partitions to topic %s",
        lambda name, error: (
            f"topic {name}: adding partitions failed ({error}); rerun, or check the broker's limits"
        ),
    )


def _wait_for(
    futures: Mapping[str, Future[Any]] | Mapping[ConfigResource, Future[Any]],
    done: str,
    failure: Callable[[str, str], str],
) -> list[str]:
    """Wait for each topic's result: log `done` for a success, collect `failure(topic, error)`."""
    failures = []
    for key, error in outcomes(futures):
        topic = key if isinstance(key, str) else key.name
        if error is not None:
            failures.append(failure(topic, error_text(error)))
        else:
            log.info(done, topic)
    return failures


def outcomes(futures: Mapping[Any, Future[Any]]) -> Iterator[tuple[Any, KafkaException | None]]:
    """Each admin request's key and how it ended: its failure, or None when it succeeded."""
    for key, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            yield key, exc
        else:
            yield key, None


# --- presenting ------------------------------------------------------------------------------


def format_table(the_plan: Plan) -> str:
    """The plan as a text table: topic, action, detail (one row per step)."""
    return plan_table("TOPIC", [(s.topic, s.action.value, s.detail) for s in the_plan.steps])


def plan_table(subject: str, steps: Sequence[tuple[str, str, str]]) -> str:
    """Plan steps (subject, action, detail) as a text table under `subject`, ACTION, DETAIL."""
    rows = [(subject, "ACTION", "DETAIL"), *steps]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "\n".join(
        f"{name:<{widths[0]}}  {action:<{widths[1]}}  {detail}".rstrip()
        for name, action, detail in rows
    )
