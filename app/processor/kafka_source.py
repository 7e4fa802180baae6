"""A Spark Structured Streaming source that reads the partitions the consumer group assigns.

Spark's own Kafka source never joins a consumer group, so none of the group settings
(static membership, cooperative-sticky, session timeout) would mean anything. This source,
written with the PySpark Python Data Source API and confluent-kafka, plans offsets only for the
partitions the instance owns. It never joins the group itself: the group member lives in the
processor's main process (`group_member.py`) and publishes the assignment through a file
(`assignment_file.py`); the reader only reads that file, the group's committed offsets and the
partitions' ends. Executors read the planned ranges with `assign()`. Each planning step holds
the planning lock from reading the assignment until it has recorded whether it planned a batch,
so that a revocation waits for a batch planned with the partitions it takes (`planned_batch.py`).

Planning, per kept partition (`SourceOffsets` documents the offsets, `state_restore` the rules):

- held (the previous batch had it active, and the group's committed offset is where the previous
  batch ended): input from the previous end up to the partition's last stable offset, at most
  `max.records.per.batch` over all partitions, shared fairly;
- a standby (the member publishes which partitions it keeps copies of): its changelog's new
  records, applied to the copy;
- gained (new here, from a standby, or held but the group's committed offset moved on
  meanwhile), or newly a standby: the batch reads its changelog after the copy this instance
  has, or from the beginning without one; a gained partition's input is read in the same batch,
  from the group's committed offset.

Reading: the planned ranges (input split at `SPLIT_RECORDS`) are packed into as few tasks as
keep every core busy (`read.tasks`, the executor's cores), each read with one consumer that its
Python worker keeps between tasks (a task and a new consumer per range cost more than a
caught-up batch's records), the ranges of different partitions at once. The reader folds each
range's records with `combine.RangeFold` before they cross into the JVM (one row per page and
range, see `combine.py`). Rows: key, value, partition, offset (the last one the row stands
for), records (how many), `kind` (`input` or `restore`), `restore_epoch` (see `SourceOffsets`)
and `reason` (why a record goes to the dead-letter topic, NULL for a valid one). Nothing here
commits offsets: the sink does, inside its transaction; `commit()` runs late and never for the
last batch (DESIGN.md).
"""

from __future__ import annotations

import faulthandler
import heapq
import json
import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from app.clients import LOG_FORMAT
from app.clients.kafka_retry import Retrying, is_transient
from app.clients.waiting import poll_until
from app.processor import assignment_file, native_memory
from app.processor.aggregation import Aggregation, load_aggregation
from app.processor.combine import INPUT, RESTORE, RangeFold
from app.processor.planned_batch import planning
from app.processor.source_offsets import (
    FROM_BEGINNING,
    FROM_KEY,
    PartitionPosition,
    SourceOffsets,
)
from app.processor.state_restore import (
    CommittedInput,
    changelog_end_of,
    copies_path,
    next_position,
    read_copies,
)

log = logging.getLogger(__name__)


def _log_to_stderr() -> None:
    """Send this package's log lines to stderr, which Spark copies into the instance's log: the
    planner and reader processes are Spark's, where nobody configured logging."""
    package = logging.getLogger("app")
    if not package.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        package.addHandler(handler)
        package.setLevel(logging.INFO)


SOURCE_NAME = "kafka-group"

SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("records", LongType()),
        StructField("kind", StringType()),
        StructField("restore_epoch", LongType()),
        StructField("reason", StringType()),
        # Microseconds the reader spent reading and folding the row's range (its own timer: a
        # restore's rate is measured here, not from planning to the sink). Carried by the
        # range's first row only, so a sum over any rows counts each range once.
        StructField("read_us", LongType()),
    ]
)
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")

# One Spark task reads at most this many offsets, so that one busy partition still uses every
# core; the fewer ranges, the fewer rows a page has after folding (one per range). One consume
# call asks for at most READ_CHUNK records.
SPLIT_RECORDS = 100_000
READ_CHUNK = 5_000
# `consume(n, timeout)` returns when it has n records or when the timeout ends, and a range's
# offsets are not all records: a range of a transactional topic (the changelog, always) ends with
# a commit marker, which is never delivered, so the last call of such a read always waits out
# the timeout (an end-of-partition event does not end it either). A short timeout costs a few
# more calls while the fetcher is behind and bounds that wait: with 1 s, every restore and every
# standby read of a partition took at least that second, however few its records.
CONSUME_TIMEOUT_S = 0.01
# A planning call's longest attempt: a live broker answers in milliseconds, and an attempt
# that asks a lost leader gives up after 2 s at first, so that the retry asks the new one
# (`kafka_retry.attempt_timeouts`).
CLIENT_TIMEOUT_S = 10.0
# How often a gained partition's changelog end is asked again while a marker is on its way.
END_POLL_S = 0.05
# A planned range that yields nothing for this long was truncated under us (retention): fail
# the batch loudly rather than wait forever.
READ_STALL_TIMEOUT_S = 60.0
# A read task still running after this long is stuck in a call that never returns (the stall
# timeout ends one that only gets no records): its worker's stacks go to the instance's log.
READ_WATCHDOG_S = 2 * READ_STALL_TIMEOUT_S


@dataclass(frozen=True)
class SourceOptions:
    """What the source needs, passed as one JSON option (`.option("source", ...)`)."""

    input_topic: str
    changelog_topic: str
    assignment_path: str
    checkpoint_path: str  # the query's checkpoint: its copies file, the planning's record
    max_records_per_batch: int
    # How many tasks a batch's reads are packed into at least: the executor's cores.
    read_tasks: int
    # librdkafka settings for the reader's clients: bootstrap, group.id (for committed offsets
    # only: these clients never subscribe), isolation level, security.
    consumer_config: Mapping[str, str]
    # `task.timeout.ms`: how long the planning and the reads ride out transient Kafka errors.
    task_timeout_ms: int
    # `aggregation.class`: whose `fold` the readers run.
    aggregation_class: str

    @property
    def retrying(self) -> Retrying:
        """The retry of this source's Kafka calls (in the planner and reader processes, whose
        episodes are logged to the instance's log; the driver's metrics do not see them)."""
        return Retrying(self.task_timeout_ms / 1000)

    def to_option(self) -> str:
        """The option's value."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_option(cls, value: str) -> SourceOptions:
        """Parse the option's value."""
        return cls(**json.loads(value))


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """One task's work: offsets [begin, end) of one topic partition."""

    topic: str
    partition: int
    begin: int  # OFFSET_BEGINNING for a restore: the changelog's first record, whatever it is
    end: int
    kind: str
    restore_epoch: int

    @property
    def size(self) -> int:
        """Offsets the range spans (a restore from the beginning: up to its end)."""
        return self.end - max(self.begin, 0)


@dataclass(frozen=True)
class KafkaRanges(InputPartition):
    """One task's work: ranges read with one consumer, those of different partitions at once."""

    ranges: tuple[KafkaRange, ...]


class KafkaGroupSource(DataSource):
    """`spark.readStream.format("kafka-group").option("source", SourceOptions(...).to_option())`."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return SOURCE_NAME

    def schema(self) -> StructType:
        """Kafka's record fields, plus `kind` and `restore_epoch`."""
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The reader; the JVM creates it in a reader process, not in the main process."""
        _log_to_stderr()
        return GroupAssignedReader(SourceOptions.from_option(self.options["source"]))


class GroupAssignedReader(DataSourceStreamReader):
    """Plans owned partitions' ranges and reads them (see the module docstring)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        # Created lazily: the planner process pickles this object to the executors, and a
        # client created in __init__ would be created (and connect) in every process.
        self._client: Consumer | None = None
        self._checked_generation: int | None = None
        self._diverged: set[int] = set()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        return state

    # --- planning (the long-lived reader process) ----------------------------------------------

    def initialOffset(self) -> dict:
        """No partition held: a new checkpoint restores every partition it is assigned."""
        return {}

    def getDefaultReadLimit(self) -> ReadLimit:
        """`max.records.per.batch` input records per micro-batch, over all partitions."""
        return ReadMaxRows(self.options.max_records_per_batch)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The next batch's end positions for the kept partitions (`start` when nothing to do)."""
        with planning(Path(self.options.checkpoint_path)) as record:
            end = self._plan(start, limit)
            record(end != start)
        return end

    def _plan(self, start: dict, limit: ReadLimit) -> dict:
        opts = self.options
        assignment = assignment_file.read(Path(opts.assignment_path))
        if assignment is None or assignment.draining:
            return start  # no assignment yet, or shutting down: plan nothing
        previous = SourceOffsets.from_dict(start, opts.input_topic, opts.changelog_topic)
        # Warming up (not in the group yet): own nothing, catch the copies up.
        owned = set() if assignment.warm_up else set(assignment.partitions)
        standby = set(assignment.standby) - owned
        if assignment.generation != self._checked_generation:
            self._diverged = self._moved_on(previous, sorted(owned))
            self._checked_generation = assignment.generation
        copies = read_copies(copies_path(Path(opts.checkpoint_path)))
        positions: dict[int, PartitionPosition] = {}
        growing: dict[int, tuple[int, int]] = {}  # partition -> (from, last stable offset)
        now_ms = int(time.time() * 1000)
        for p in sorted(owned | standby):
            held = previous.positions.get(p)
            if p in owned and held is not None and held.active and p not in self._diverged:
                assert held.input_offset is not None
                growing[p] = (held.input_offset, self._end(opts.input_topic, p))
                continue
            positions[p] = next_position(
                held,
                active=p in owned,
                copy=copies.get(p),
                changelog_end=partial(self._end_at_least, opts.changelog_topic, p),
                committed=partial(self._committed_input, p),
                now_ms=now_ms,
            )
            self._log_change(p, held, positions[p])
            committed = positions[p].input_offset
            if committed is not None:  # gained: its input from the committed offset, this batch
                growing[p] = (committed, self._end(opts.input_topic, p))
        budget = None if isinstance(limit, ReadAllAvailable) else _max_rows(limit)
        taken = fair_share(budget, {p: max(0, end - begin) for p, (begin, end) in growing.items()})
        for p, (begin, _) in growing.items():
            if p in positions:  # gained
                positions[p] = replace(
                    positions[p], input_from=begin, input_offset=begin + taken[p]
                )
            else:
                positions[p] = replace(
                    previous.positions[p].settled(), input_offset=begin + taken[p]
                )
        self._diverged.clear()
        current = SourceOffsets(
            opts.input_topic,
            opts.changelog_topic,
            positions,
            assignment.warm_up or previous.warm_up,
            assignment.nudge or previous.nudge,
        )
        if current == previous.settled():
            return start  # nothing to read: no batch
        return current.to_dict()

    def _log_change(self, p: int, held: PartitionPosition | None, now: PartitionPosition) -> None:
        if now.restore_from is None or (held is not None and not held.active and not now.active):
            return  # a standby's regular tail read
        role = "gained" if now.active else "standby copy"
        source = (
            "from the beginning (no copy here)"
            if now.restore_from == FROM_BEGINNING
            else f"after this instance's copy at offset {now.restore_from}"
        )
        log.info(
            "partition %s-%d (%s): reading %s %s up to offset %d",
            self.options.input_topic,
            p,
            role,
            self.options.changelog_topic,
            source,
            now.changelog_offset,
        )

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """The ranges between two offsets; a pure function of them, so a replay reads the same."""
        opts = self.options
        previous = SourceOffsets.from_dict(start, opts.input_topic, opts.changelog_topic)
        current = SourceOffsets.from_dict(end, opts.input_topic, opts.changelog_topic)
        if FROM_KEY not in end:
            current = current.with_legacy_restores(previous)
        ranges: list[KafkaRange] = []
        for p, pos in sorted(current.positions.items()):
            if pos.restore_from is None or pos.changelog_offset <= max(pos.restore_from, 0):
                continue
            ranges.append(
                KafkaRange(
                    opts.changelog_topic,
                    p,
                    pos.restore_from,
                    pos.changelog_offset,
                    RESTORE,
                    pos.restore_epoch,
                )
            )
        for p, (begin, end_offset) in sorted(current.input_ranges(previous).items()):
            epoch = current.positions[p].restore_epoch
            for lo in range(begin, end_offset, SPLIT_RECORDS):
                hi = min(lo + SPLIT_RECORDS, end_offset)
                ranges.append(KafkaRange(opts.input_topic, p, lo, hi, INPUT, epoch))
        return pack_tasks(ranges, opts.read_tasks)

    def commit(self, end: dict) -> None:
        """Nothing: input offsets are committed in the sink's transaction."""

    def _consumer(self) -> Consumer:
        if self._client is None:
            self._client = Consumer(dict(self.options.consumer_config))
        return self._client

    def _end(self, topic: str, partition: int) -> int:
        # read_committed: the last stable offset, so a batch never waits on an open transaction.
        _, high = self.options.retrying.watermark_offsets(
            f"end offset of {topic}-{partition}",
            self._consumer(),
            topic,
            partition,
            CLIENT_TIMEOUT_S,
        )
        return int(high)

    def _end_at_least(self, topic: str, partition: int, at_least: int) -> int:
        """The last stable offset once it is at least `at_least`: a committed transaction's
        marker reaches each partition on its own, after the commit returned."""
        end = self._end(topic, partition)
        if end >= at_least:
            return end
        log.info(
            "%s-%d: waiting for its last stable offset (%d) to reach %d, where the transaction "
            "that committed the input offset ended",
            topic, partition, end, at_least,
        )  # fmt: skip
        timeout_s = self.options.task_timeout_ms / 1000
        started = time.monotonic()

        def reached() -> bool:
            nonlocal end
            end = self._end(topic, partition)
            return end >= at_least

        if not poll_until(reached, timeout_s, interval_s=END_POLL_S):
            raise TimeoutError(
                f"{topic}-{partition}: the last stable offset is {end} after "
                f"{timeout_s:g} s (task.timeout.ms), short of {at_least}, where the "
                "transaction that committed the group's offset ended. Either a marker is "
                "late (see kafka-transactions.sh describe-producers on that partition) or "
                "the changelog was recreated under the group's offsets: then the counts "
                "are gone, and the group's offsets must be reset with it"
            )
        log.info(
            "%s-%d: last stable offset %d after %.2f s",
            topic, partition, end, time.monotonic() - started,
        )  # fmt: skip
        return end

    def _committed_input(self, partition: int) -> CommittedInput:
        return self._committed([partition])[partition]

    def _committed(self, partitions: Sequence[int]) -> dict[int, CommittedInput]:
        """The group's committed input (the partition's first offset where there is none)."""
        topic = self.options.input_topic
        consumer = self._consumer()
        retrying = self.options.retrying
        found = retrying.committed_offsets(
            f"committed offsets of {topic}", consumer, topic, partitions, CLIENT_TIMEOUT_S
        )
        result = {}
        for tp in found:
            if tp.offset >= 0:
                result[tp.partition] = CommittedInput(tp.offset, changelog_end_of(tp.metadata))
            else:
                low, _ = retrying.watermark_offsets(
                    f"first offset of {topic}-{tp.partition}",
                    consumer,
                    topic,
                    tp.partition,
                    CLIENT_TIMEOUT_S,
                )
                result[tp.partition] = CommittedInput(int(low))
        return result

    def _moved_on(self, previous: SourceOffsets, owned: Sequence[int]) -> set[int]:
        """Held partitions whose committed offset is not where the checkpoint stopped.

        Someone else processed them meanwhile (they moved away and back), or this instance's
        last results for them were never written (revoked mid-batch): the local state is not
        the group's, so it is restored from the changelog.
        """
        held = [p for p in owned if p in previous.positions and previous.positions[p].active]
        if not held:
            return set()
        committed = self._committed(held)
        moved = {p for p in held if committed[p].offset != previous.positions[p].input_offset}
        for p in sorted(moved):
            log.info(
                "partition %s-%d: checkpoint stopped at %d, group committed %d: restoring",
                self.options.input_topic,
                p,
                previous.positions[p].input_offset,
                committed[p].offset,
            )
        return moved

    # --- reading (executors) -------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Exactly the records of the planned ranges, as Arrow batches (no group: `assign()`)."""
        assert isinstance(partition, KafkaRanges)
        _log_to_stderr()
        faulthandler.dump_traceback_later(READ_WATCHDOG_S, repeat=True)
        consumer = _reader_consumer(self.options.consumer_config)
        try:
            aggregation = load_aggregation(self.options.aggregation_class)
            yield from read_ranges(consumer, partition.ranges, self.options.retrying, aggregation)
        except BaseException:
            # A failed or abandoned read leaves the client in an unknown state: never reuse it.
            _drop_reader_consumer(self.options.consumer_config)
            raise
        finally:
            faulthandler.cancel_dump_traceback_later()
            native_memory.return_free_memory()


# The consumer of this Python worker process, kept between tasks (Spark reuses its workers):
# creating one and connecting it to the brokers costs more than reading a caught-up batch.
_READER_CONSUMERS: dict[str, Consumer] = {}


def _reader_consumer(config: Mapping[str, str]) -> Consumer:
    key = json.dumps(config, sort_keys=True)
    consumer = _READER_CONSUMERS.get(key)
    if consumer is None:
        consumer = _READER_CONSUMERS[key] = Consumer(dict(config))
    return consumer


def _drop_reader_consumer(config: Mapping[str, str]) -> None:
    consumer = _READER_CONSUMERS.pop(json.dumps(config, sort_keys=True), None)
    if consumer is not None:
        consumer.close()


def pack_tasks(ranges: Sequence[KafkaRange], tasks: int) -> list[KafkaRanges]:
    """The ranges packed into tasks of about equal size: `tasks` (the cores), or a multiple of
    it when the batch is bigger than `tasks * SPLIT_RECORDS` (whole waves: 5 tasks on 2 cores
    take as long as 6), never more than there are ranges.

    Largest range first into the smallest task, ties broken by position: a pure function of the
    ranges, so a replay plans the same tasks.
    """
    if not ranges:
        return []
    total = sum(r.size for r in ranges)
    waves = max(1, math.ceil(total / (tasks * SPLIT_RECORDS)))
    count = min(len(ranges), tasks * waves)
    bins: list[tuple[int, int, list[KafkaRange]]] = [(0, i, []) for i in range(count)]
    order = sorted(ranges, key=lambda r: (-r.size, r.topic, r.partition, r.begin))
    for work in order:
        size, index, members = heapq.heappop(bins)
        members.append(work)
        heapq.heappush(bins, (size + work.size, index, members))
    packed = sorted(bins, key=lambda b: b[1])
    return [
        KafkaRanges(tuple(sorted(members, key=lambda r: (r.topic, r.partition, r.begin))))
        for _, _, members in packed
    ]


def read_ranges(
    consumer: Consumer, ranges: Sequence[KafkaRange], retrying: Retrying, aggregation: Aggregation
) -> Iterator[pa.RecordBatch]:
    """Read offsets [begin, end) of every range with `assign()`, each folded per key: the
    ranges of different partitions at once, the ranges of one partition one after the other."""
    pending = list(ranges)
    while pending:
        together: dict[tuple[str, int], KafkaRange] = {}
        later: list[KafkaRange] = []
        for work in pending:
            if together.setdefault((work.topic, work.partition), work) is not work:
                later.append(work)
        yield from _read_together(consumer, list(together.values()), retrying, aggregation)
        pending = later


def _read_together(
    consumer: Consumer, ranges: Sequence[KafkaRange], retrying: Retrying, aggregation: Aggregation
) -> Iterator[pa.RecordBatch]:
    """Read ranges of distinct partitions at once. Sequentially, every range paid a round trip
    or two to its leader before its first record and a consume timeout after its last (the
    commit marker that ends it is never delivered): most of a small range's time."""
    started = time.perf_counter()
    folds: dict[tuple[str, int], RangeFold] = {}
    open_ranges: dict[tuple[str, int], KafkaRange] = {}
    begins: list[TopicPartition] = []
    from_start = [
        TopicPartition(w.topic, w.partition) for w in ranges if w.begin == OFFSET_BEGINNING
    ]
    names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in from_start)
    first = (
        retrying.first_offsets(f"first offsets of {names}", consumer, from_start, CLIENT_TIMEOUT_S)
        if from_start
        else {}
    )
    looked_up = time.perf_counter()
    for work in ranges:
        key = (work.topic, work.partition)
        folds[key] = RangeFold(work.kind, aggregation)
        begin = first.get(key, work.begin)
        if begin < work.end:
            open_ranges[key] = work
            begins.append(TopicPartition(work.topic, work.partition, begin))
    if begins:
        consumer.assign(begins)
        try:
            _read_open(
                consumer, open_ranges, folds, {(tp.topic, tp.partition): tp.offset for tp in begins}
            )
        finally:
            # A paused partition stays paused through unassign() and a later assign().
            consumer.resume(begins)
            consumer.unassign()
    # The readers' timer (the restore's rate): the ranges share the time they were read in, each
    # its share of the records, so that the shares add up to the time.
    seconds = time.perf_counter() - started
    total = sum(fold.records for fold in folds.values())
    if from_start:  # a restore: rare, and its time is the instance's to explain
        log.info(
            "read %d records of %s from their first offsets in %.3f s: the offsets' lookup "
            "%.3f s, the records %.3f s",
            total,
            names,
            seconds,
            looked_up - started,
            seconds - (looked_up - started),
        )
    for work in ranges:
        fold = folds[(work.topic, work.partition)]
        if len(fold):  # then it stands for at least one record, and total > 0
            yield _to_arrow(fold, work, round(seconds * fold.records / total * 1e6))


def _read_open(
    consumer: Consumer,
    open_ranges: dict[tuple[str, int], KafkaRange],
    folds: Mapping[tuple[str, int], RangeFold],
    positions: dict[tuple[str, int], int],
) -> None:
    """Consume until every open range's position reaches its end; each reached one is paused,
    so that its records past the end are neither fetched nor handed over any more."""
    last_progress = time.monotonic()
    while open_ranges:
        wanted = min(READ_CHUNK, sum(w.end - positions[k] for k, w in open_ranges.items()))
        by_partition: dict[tuple[Any, Any], list[Any]] = {}  # an error may have no partition
        for message in consumer.consume(wanted, timeout=CONSUME_TIMEOUT_S):
            by_partition.setdefault((message.topic(), message.partition()), []).append(message)
        for key, messages in by_partition.items():
            if key in open_ranges:
                folds[key].add_messages(messages, open_ranges[key].end, _check)
            else:
                for message in messages:  # an error not tied to an open range
                    if message.error() is not None:
                        _check(message.error())
        # The position moves past transaction markers and aborted records too.
        tps = [TopicPartition(t, p) for t, p in open_ranges]
        moved = False
        for tp in consumer.position(tps):
            key = (tp.topic, tp.partition)
            if tp.offset > positions[key]:
                positions[key], moved = tp.offset, True
            if tp.offset >= open_ranges[key].end:
                del open_ranges[key]
                consumer.pause([TopicPartition(tp.topic, tp.partition)])
        if moved:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > READ_STALL_TIMEOUT_S:
            stalled = ", ".join(
                f"{t}-{p} at offset {positions[(t, p)]} (reading up to {w.end})"
                for (t, p), w in open_ranges.items()
            )
            raise RuntimeError(
                f"no progress for {READ_STALL_TIMEOUT_S:g} s: {stalled}; were the records "
                "deleted (retention) or the topic recreated?"
            )


def _check(error: KafkaError) -> None:
    # librdkafka fetches again by itself after a transient error (a broker restart, a leader
    # move): the read goes on, and the stall timeout ends it if no record comes any more.
    if error.code() == KafkaError._PARTITION_EOF or is_transient(error):
        return
    raise KafkaException(error)


def _to_arrow(fold: RangeFold, work: KafkaRange, read_us: int) -> pa.RecordBatch:
    columns = fold.columns()
    n = len(columns["key"])
    arrays = [
        pa.array(columns["key"], pa.binary()),
        pa.array(columns["value"], pa.binary()),
        pa.array([work.partition] * n, pa.int32()),
        pa.array(columns["offset"], pa.int64()),
        pa.array(columns["records"], pa.int64()),
        pa.array([work.kind] * n, pa.string()),
        pa.array([work.restore_epoch] * n, pa.int64()),
        pa.array(columns["reason"], pa.string()),
        pa.array([read_us] + [0] * (n - 1), pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _max_rows(limit: ReadLimit) -> int | None:
    return int(limit.max_rows) if isinstance(limit, ReadMaxRows) else None


def fair_share(budget: int | None, available: Mapping[int, int]) -> dict[int, int]:
    """Split `budget` records over partitions with `available` records each, as evenly as
    possible (what a small partition leaves goes to the bigger ones); None: take everything."""
    if budget is None:
        return dict(available)
    taken: dict[int, int] = {}
    remaining = budget
    by_size = sorted(available, key=lambda p: (available[p], p))
    for index, p in enumerate(by_size):
        take = min(available[p], remaining // (len(by_size) - index))
        taken[p] = take
        remaining -= take
    return taken
