"""Every key of the processor's properties file, one row each: name, type, default, what values
are allowed, why, and who sets it (as Kafka's `ConfigDef` keeps one row per key).

The processor reads the file at start (`app/processor/settings.py`), the Pulumi program renders
it (`infra/processor_properties.py`) and the pack judges it (`policies/rules/group_membership.py`
and `processor.py`): all three take the defaults and the checks from these rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType


class KeyType(StrEnum):
    STRING = "string"
    INT = "int"
    BOOL = "bool"
    ENUM = "enum"


class SetBy(StrEnum):
    """Who gives a key its value in a deployment."""

    DEFAULT = "default"  # the row's default, unless the stack's processor.properties overrides it
    STACK = "stack"  # the Pulumi program renders it from stack settings
    POD = "pod"  # the pod's identity, through ${env:POD_NAME}
    PROCESSOR = "processor"  # the processor sets it itself: a value in the file is refused


MEMBERSHIP_STATIC = "static"
MEMBERSHIP_HANDOFF = "handoff"
PROTOCOL_CLASSIC = "classic"
PROTOCOL_CONSUMER = "consumer"  # KIP-848
PAIR_SIDES = ("a", "b")
PAIR_SIDE_KEY = "pair.side"
PAIR_CONTROL_TOPIC_KEY = "pair.control.topic"
INSTANCE_ID_KEY = "consumer.group.instance.id"
TRANSACTIONAL_ID_KEY = "producer.transactional.id"

_INT = re.compile(r"[+-]?\d+")


@dataclass(frozen=True)
class Key:
    """One key of the contract."""

    name: str
    type: KeyType
    default: str | None  # None: no default (required, or required depending on other keys)
    doc: str  # why the key exists and why its default; errors quote it after the allowed values
    set_by: SetBy = SetBy.DEFAULT
    minimum: int | None = None
    maximum: int | None = None
    allowed: tuple[str, ...] = ()  # ENUM: the values; BOOL: the one value exactly-once allows
    required: bool = False  # must be present and not empty

    def problem(self, value: str) -> str | None:
        """What is wrong with this value for this key, or None."""
        if self.set_by is SetBy.PROCESSOR:
            return f"set by the processor ({self.doc}); remove it"
        if self.type is KeyType.INT:
            return self._int_problem(value)
        if self.type is KeyType.BOOL:
            if value.strip().lower() not in ("true", "false"):
                return "must be a boolean; allowed: true, false"
            if self.allowed and value.strip().lower() not in self.allowed:
                return f"must be {self.allowed[0]}: {self.doc}"
        if self.type is KeyType.ENUM and value not in self.allowed:
            return f"allowed: {', '.join(self.allowed)} ({self.doc})"
        return None

    def _int_problem(self, value: str) -> str | None:
        if self.maximum is not None:
            bounds = f"{self.minimum}..{self.maximum}"
        else:
            bounds = f">= {self.minimum}"
        if not _INT.fullmatch(value.strip()):
            return f"must be an integer; allowed: {bounds}"
        number = int(value)
        too_low = self.minimum is not None and number < self.minimum
        if too_low or (self.maximum is not None and number > self.maximum):
            return f"out of range; allowed: {bounds}"
        return None

    def invalid_example(self) -> str:
        """A value this row refuses (the contract test feeds it to every side)."""
        if self.type is KeyType.INT:
            return str((self.minimum or 0) - 1)
        if self.type is KeyType.BOOL:
            return (
                "maybe" if not self.allowed else {"true": "false", "false": "true"}[self.allowed[0]]
            )
        return "not-a-value"


def _int(name: str, default: str | None, doc: str, minimum: int, **kw: object) -> Key:
    return Key(name, KeyType.INT, default, doc, minimum=minimum, **kw)  # type: ignore[arg-type]


def _required(name: str, doc: str) -> Key:
    return Key(name, KeyType.STRING, None, doc, SetBy.STACK, required=True)


KEYS: tuple[Key, ...] = (
    # --- the pipeline: rendered by the Pulumi program from the stack's names
    _required("application.id", "the consumer group, the transactional ids' prefix"),
    _required("bootstrap.servers", "the brokers' client listener"),
    _required("input.topic", "the records to aggregate"),
    _required("output.topic", "the published results, a compacted table"),
    _required("changelog.topic", "the state's compacted changelog, the restore's source"),
    _required("dlq.topic", "malformed records, each with its reason"),
    # --- the processor's own keys
    Key(
        "processing.guarantee",
        KeyType.ENUM,
        "exactly_once_v2",
        "the sink writes results, state changes and input offsets in one transaction",
        allowed=("exactly_once_v2",),
    ),
    # Kafka's way of naming a pluggable class (`partition.assignment.strategy`, ...): the module
    # and the class of the pipeline's `app.processor.aggregation.Aggregation`.
    Key(
        "aggregation.class",
        KeyType.STRING,
        "app.pipelines.page_view_count.PageViewCount",
        "the pipeline's aggregation",
    ),
    Key(
        "stateful",
        KeyType.BOOL,
        "true",
        "keep per-key state, restored from the changelog",
        SetBy.STACK,
    ),
    Key(
        "membership.mode",
        KeyType.ENUM,
        MEMBERSHIP_STATIC,
        "static: a restarted instance gets its partitions back and they wait for it; "
        "handoff: a stopping instance leaves the group and its partitions move at once",
        SetBy.STACK,
        allowed=(MEMBERSHIP_STATIC, MEMBERSHIP_HANDOFF),
    ),
    # Kafka Streams' name and default. With N >= 1 each partition's state has N warm copies on
    # other instances, so a partition that moves there restores only the changelog's tail.
    _int(
        "num.standby.replicas",
        "0",
        "warm copies of each partition's state on other instances",
        0,
        set_by=SetBy.STACK,
    ),
    # An active/standby pair (docs/operations.md): two complete deployments, each its own group,
    # state and transactional ids, both reading all input; only the active side publishes, and
    # which side that is lives in the pair's control topic (`app/processor/pair.py`).
    # No default: a single deployment's file has neither key, so it renders as before pairs.
    Key(
        PAIR_SIDE_KEY,
        KeyType.ENUM,
        None,
        "which side of an active/standby pair this deployment is (absent: a single deployment)",
        SetBy.STACK,
        allowed=PAIR_SIDES,
    ),
    Key(
        PAIR_CONTROL_TOPIC_KEY,
        KeyType.STRING,
        None,
        "the pair's compacted control topic: which side publishes (required with pair.side)",
        SetBy.STACK,
    ),
    Key("state.dir", KeyType.STRING, "/var/lib/processor", "the state's volume"),
    _int(
        "health.port",
        "8080",
        "/ready, /live and /metrics; 0: any free port (tests, local runs)",
        0,
        maximum=65535,
    ),
    # Kafka Streams' name and default: how long a Kafka call may keep failing with errors that
    # clear by themselves (a broker restart, a leader or coordinator move) before the instance
    # fails (`app/clients/kafka_retry.py`).
    _int("task.timeout.ms", "300000", "0: no retry, the first error fails the instance", 0),
    _int("trigger.interval.ms", "1000", "how often a micro-batch starts", 1),
    # A cap for a backlog, not a batch size: a caught-up batch takes what arrived since the last
    # one (docs/benchmarks.md has the throughput per cap).
    _int("max.records.per.batch", "1000000", "the most records one micro-batch reads", 1),
    # The pod's terminationGracePeriodSeconds covers it plus Spark's shutdown.
    _int(
        "shutdown.timeout.ms",
        "45000",
        "how long SIGTERM waits for the running batch",
        0,
        set_by=SetBy.STACK,
    ),
    # The Spark driver's class-data-sharing archive (`python -m app.processor.class_archive_build`):
    # "auto" maps the one built into this Python environment if it is there, a path maps that
    # one, "" none (docs/benchmarks.md, "Start time").
    Key("class.data.archive", KeyType.STRING, "auto", "the JVM class-data-sharing archive"),
    # Spark's Python processes fork from one process that imported pyspark, pandas and pyarrow
    # once, instead of each importing them on a start's critical path.
    Key("python.forkserver", KeyType.BOOL, "true", "fork Spark's Python processes from one"),
    # The preloaded imports' objects go to the collector's permanent generation before the
    # forks: a worker's full collections (pyspark's daemon runs one after every task) then skip
    # them, and leave their pages shared with the parent (docs/benchmarks.md, "Restore").
    Key("python.gc.freeze", KeyType.BOOL, "true", "exempt the preloaded imports from collection"),
    # --- the consumer (librdkafka, `consumer.` prefix)
    Key(
        "consumer.group.protocol",
        KeyType.ENUM,
        PROTOCOL_CLASSIC,
        "classic: client-side assignor and timeouts; consumer: KIP-848, set on the broker",
        allowed=(PROTOCOL_CLASSIC, PROTOCOL_CONSUMER),
    ),
    # librdkafka's default; the Pulumi program computes it from the StatefulSet per membership
    # mode (`restart_budget.session_timeout_ms`) and renders it.
    _int(
        "consumer.session.timeout.ms",
        "45000",
        "how long the group waits for a silent member",
        1,
        set_by=SetBy.STACK,
    ),
    # A member learns of a rebalance at its next heartbeat: a hand-off's moved partitions wait
    # up to one interval (at 1 s, 0.1-1.5 s of a moved partition's gap went to the rebalance,
    # 0.1-0.6 s at 250 ms; docs/benchmarks.md, "Where a hand-off's time goes"). Four small
    # requests a second per member are nothing to the coordinator.
    _int("consumer.heartbeat.interval.ms", "250", "how often a member tells the group it lives", 1),
    # The source's readers assign planned ranges, read them to their ends and go on to the next
    # task's. At a partition's head librdkafka's next fetch waits up to this long for new
    # records, and the broker answers a connection's requests in order: the next requests to
    # the same broker queue behind it. A changelog gets records once a batch, so with
    # librdkafka's 500 ms a restore read that followed one on the same leader took half a second
    # more (docs/benchmarks.md, "Restore"). The group member pauses its partitions and never
    # fetches.
    _int(
        "consumer.fetch.wait.max.ms",
        "10",
        "how long a fetch waits at a partition's head for new records",
        0,
    ),
    Key(
        "consumer.partition.assignment.strategy",
        KeyType.ENUM,
        "cooperative-sticky",
        "the group member rebalances incrementally; an eager assignor stops every partition "
        "on each rebalance",
        allowed=("cooperative-sticky",),
    ),
    Key(
        "consumer.isolation.level",
        KeyType.ENUM,
        "read_committed",
        "exactly_once_v2 must not read records of aborted transactions",
        allowed=("read_committed",),
    ),
    _int("consumer.max.poll.interval.ms", "300000", "librdkafka's, at least the session", 1),
    Key(
        "consumer.enable.auto.commit",
        KeyType.BOOL,
        "false",
        "input offsets are committed in the sink's transaction, not by the consumer",
        allowed=("false",),
    ),
    Key(INSTANCE_ID_KEY, KeyType.STRING, None, "static membership: the pod's name", SetBy.POD),
    # --- the producer (librdkafka, `producer.` prefix)
    # The contract's default; deployments render CRASH_SAFE_TRANSACTION_TIMEOUT_MS.
    _int(
        "producer.transaction.timeout.ms",
        "60000",
        "how long an open transaction may last",
        1,
        set_by=SetBy.STACK,
    ),
    Key(
        "producer.acks",
        KeyType.ENUM,
        "all",
        "exactly_once_v2 needs every in-sync replica to ack",
        allowed=("all", "-1"),
    ),
    Key(
        "producer.enable.idempotence",
        KeyType.BOOL,
        "true",
        "transactions need the idempotent producer",
        allowed=("true",),
    ),
    Key(TRANSACTIONAL_ID_KEY, KeyType.STRING, None, "one per instance: the pod's name", SetBy.POD),
    # librdkafka keeps a group's coordinator cached while it is used and sends the offsets of a
    # transaction there even once that broker is lost (confluentinc/librdkafka#5511): an entry
    # unused this long is looked up again, so the batch after a lost broker's ~9 s finds the new
    # coordinator instead of waiting for the sink's deadline (`app/processor/sink.py`).
    _int(
        "producer.metadata.max.age.ms",
        "4000",
        "a lost group coordinator is forgotten after this without use",
        1000,
    ),
    _int(
        "producer.topic.metadata.refresh.interval.ms",
        "1000",
        "below metadata.max.age.ms, or the topics' metadata expires between refreshes",
        100,
    ),
    # --- Spark (their own names)
    Key(
        "spark.master",
        KeyType.STRING,
        "local[2]",
        "the driver's cores (the pod's CPU limit)",
        SetBy.STACK,
    ),
    # The JVM's C1 compiler only: C2 spends a start's first minutes compiling on the cores
    # everything else needs; the price is slower steady-state batches (docs/benchmarks.md,
    # "Start time"). The serial collector: the driver's live heap is about 70 MiB (the state is
    # in RocksDB, off the heap), and G1's remembered sets, marking bitmaps and concurrent
    # threads cost 140-240 MiB more on the same 2 cores, for slower batches (docs/benchmarks.md,
    # "Memory"). The initial heap: without -Xms the JVM takes 1/64 of the memory it sees, 32 MiB
    # in a 2 GiB pod and 378 MiB on a 24 GiB workstation, and the young generation, every page
    # of which is touched, is a third of it; pinned, a pod and a benchmark run the same JVM.
    # Setting this key replaces the value.
    Key(
        "spark.driver.extraJavaOptions",
        KeyType.STRING,
        "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xms64m",
        "the driver JVM's options",
    ),
    # The driver's heap (-Xmx). Spark refuses less than 450 MiB; its default, 1g, lets the heap
    # grow toward it with garbage a 70 MiB live set does not need.
    Key("spark.driver.memory", KeyType.STRING, "512m", "the driver JVM's heap"),
    # As many as the cores, so a batch's stateful tasks run in one wave (each costs about the
    # same whatever its size). Fixed in the checkpoint at first start.
    _int("spark.sql.shuffle.partitions", "2", "the stateful stage's tasks", 1, set_by=SetBy.STACK),
    Key(
        "spark.sql.streaming.stateStore.providerClass",
        KeyType.STRING,
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "the state store",
    ),
    Key(
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
        KeyType.BOOL,
        "true",
        "checkpoint the state's changes, not whole snapshots",
    ),
    Key("spark.local.dir", KeyType.STRING, "/tmp/spark", "Spark's scratch space"),
    # Python workers fork from a daemon that imported pandas, pyarrow and the processor once.
    Key(
        "spark.python.daemon.module",
        KeyType.STRING,
        "app.processor.python_daemon",
        "Spark's Python worker daemon",
    ),
    # Progress bars are for terminals; in a pod's log they are noise on every batch.
    Key("spark.ui.showConsoleProgress", KeyType.STRING, "false", "console progress bars"),
    # The web UI slows every start and opens an unauthenticated port the pod does not expose.
    # To debug: set it to true and `kubectl port-forward pod/<name> 4040`.
    Key("spark.ui.enabled", KeyType.STRING, "false", "Spark's web UI"),
    # --- keys the processor sets itself
    Key(
        "consumer.group.id", KeyType.STRING, None, "the group id is application.id", SetBy.PROCESSOR
    ),
    Key(
        "consumer.bootstrap.servers", KeyType.STRING, None, "use bootstrap.servers", SetBy.PROCESSOR
    ),
    Key(
        "producer.bootstrap.servers", KeyType.STRING, None, "use bootstrap.servers", SetBy.PROCESSOR
    ),
    Key(
        "consumer.enable.auto.offset.store",
        KeyType.STRING,
        None,
        "offsets are committed in the sink's transaction, never stored automatically",
        SetBy.PROCESSOR,
    ),
)

ROWS: Mapping[str, Key] = MappingProxyType({key.name: key for key in KEYS})
DEFAULTS: Mapping[str, str] = MappingProxyType(
    {key.name: key.default for key in KEYS if key.default is not None}
)
REQUIRED: tuple[str, ...] = tuple(key.name for key in KEYS if key.required)
KNOWN_KEYS: frozenset[str] = frozenset(k.name for k in KEYS if k.set_by is not SetBy.PROCESSOR)
BOOL_KEYS: frozenset[str] = frozenset(k.name for k in KEYS if k.type is KeyType.BOOL)

# With KIP-848 (`consumer.group.protocol=consumer`) these live on the broker (group.consumer.*)
# and librdkafka refuses them.
CLASSIC_PROTOCOL_ONLY = (
    "consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms",
    "consumer.partition.assignment.strategy",
)

# What deployments (the Pulumi program, the local run, the bench) render instead of the 60 s
# default: a crashed instance's open transaction keeps its partitions' committed offsets unstable
# (KIP-447: their next owner cannot fetch them) until the coordinator aborts it after this long,
# or its pod's next producer fences it. A transaction spans one batch's output and offsets, so
# Kafka Streams' exactly-once default of 10 s costs nothing.
CRASH_SAFE_TRANSACTION_TIMEOUT_MS = 10_000


def effective(properties: Mapping[str, str]) -> dict[str, str]:
    """The properties with the contract's defaults under them: what the processor runs with."""
    return {**DEFAULTS, **properties}


def key_problems(properties: Mapping[str, str]) -> list[tuple[str, str]]:
    """(key, problem) for every contract key whose value its row refuses."""
    return [
        (name, problem)
        for name, value in properties.items()
        if name in ROWS and (problem := ROWS[name].problem(value)) is not None
    ]
