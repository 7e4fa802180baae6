"""The exactly-once sink: one Kafka transaction per micro-batch (`foreachBatch`, main process).

Per batch, in one transaction (`transactional.id` from the pod name):

- each key's new output value to the output topic and its changelog value to the changelog
  topic, in the partition of the input record (`Aggregation.output_value`, `changelog_value`);
- each record that broke the input contract to the dead-letter topic, unchanged, with the
  headers `dlq.reason`, `dlq.source.topic`, `dlq.source.partition`, `dlq.source.offset`;
- the batch's input end offsets (from `<checkpoint>/offsets/<batchId>`) committed to the group
  with `send_offsets_to_transaction` and the group member's metadata, so the broker fences the
  commit if this instance no longer owns the partitions. Each offset's commit metadata is the
  changelog offset after the transaction's records for the partition, known from the delivery
  reports: the partition's next owner reads its changelog that far (`state_restore`).

A side of an active/standby pair (`pair.side`) writes the output and dead letters only for the
partitions it publishes, and its take-overs and releases to the pair's control topic, in the same
transaction (`app/processor/pair.py`).

A batch replayed after a crash whose transaction had committed (the group's committed offsets
already at its end) is not written again. A transaction that fails is aborted and the exception
propagates, so Spark does not mark the batch done; the processor restarts the query and Spark
replays the batch. An aborted transaction is first tried again, twice: a rebalance that moves
nothing of this instance still makes the broker refuse the offsets of a transaction begun before
it (ILLEGAL_GENERATION). Results for partitions the instance no longer owns are never written.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition
from pyspark.sql import DataFrame

from app.clients.deadline import CallAbandoned, call_with_deadline
from app.processor.group_member import GroupMember
from app.processor.keyed_state import DLQ, RESTORED, RESULT
from app.processor.metrics import ProcessorMetrics
from app.processor.pair import PairControl, PartitionPlan
from app.processor.source_offsets import (
    FROM_BEGINNING,
    SourceOffsets,
    batch_offsets_path,
    read_batch_offsets,
)
from app.processor.state_restore import (
    commit_metadata,
    copies_path,
    read_copies,
    record_batch,
    write_copies,
)

log = logging.getLogger(__name__)

TRANSACTION_TIMEOUT_S = 60.0
# send_offsets_to_transaction is abandoned after this (`call_with_deadline`), and a new producer
# writes the batch again. The call takes milliseconds, and a coordinator's move a second or two
# (librdkafka retries every 500 ms); but while the group's coordinator is a lost broker, it waits
# for that broker whatever its timeout (confluentinc/librdkafka#5456, #5511): 65 s here cost a
# lost coordinator 80 s without output. A false alarm costs a new producer and one batch
# written again, never a duplicate (the new producer fences the old one and aborts its
# transaction).
OFFSETS_DEADLINE_S = 4.0
TRANSACTION_ATTEMPTS = 3
RETRY_AFTER_S = 0.5
# The errors that say a newer producer with this transactional.id exists (another process has
# this instance's identity): nothing this one does can commit any more, and it must not retry.
# _FATAL is what a call returns after some fatal error whose code this binding does not pass
# on: it may be the fencing, and a new producer would then fence the newer instance back.
FENCED_CODES = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError._FATAL,
    }
)
DLQ_REASON_HEADER = "dlq.reason"
DLQ_HEADERS = (DLQ_REASON_HEADER, "dlq.source.topic", "dlq.source.partition", "dlq.source.offset")


class TransactionAbortedError(RuntimeError):
    """The batch's transaction was aborted; the batch is not done and will be replayed."""


class ProducerAbandonedError(TransactionAbortedError):
    """A call of the batch's producer outlived its deadline: the producer was dropped mid-call,
    and a new one (which fences it) writes the batch again."""


class ProducerFencedError(RuntimeError):
    """A newer producer with this transactional.id exists: this producer can never commit."""


@dataclass(frozen=True)
class SinkTopics:
    """Where the sink writes."""

    input: str
    output: str
    changelog: str
    dlq: str


class TransactionalSink:
    """`foreachBatch` target; see the module docstring."""

    def __init__(
        self,
        producer_config: dict[str, str],
        topics: SinkTopics,
        checkpoint_dir: Path,
        member: GroupMember,
        metrics: ProcessorMetrics,
        pair: PairControl | None = None,
        retry_for_s: float = 300.0,
    ) -> None:
        self.topics = topics
        # How long a batch is written again while Kafka does not answer (`task.timeout.ms`).
        self.retry_for_s = retry_for_s
        # One side of an active/standby pair: it publishes only while active.
        self.pair = pair
        self.checkpoint_dir = checkpoint_dir
        self.member = member
        self.metrics = metrics
        self._config = producer_config
        # The fencing error, once a newer producer with this transactional.id fenced this one.
        self.fenced: KafkaError | None = None
        self._producer: Producer | None = self._new_producer()

    @property
    def producer(self) -> Producer:
        """The transactional producer; a new one after the last became unusable."""
        if self._producer is None:
            self._producer = self._new_producer()
        return self._producer

    def _new_producer(self) -> Producer:
        producer = Producer(self._config)
        # Fences any older producer with this transactional.id (the previous run of this pod)
        # and aborts its open transaction, so the group's committed offsets become stable.
        producer.init_transactions(TRANSACTION_TIMEOUT_S)
        log.info("transactional producer %s ready", self._config.get("transactional.id"))
        return producer

    def write_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Write one micro-batch in one transaction (the `foreachBatch` function)."""
        started = time.monotonic()
        self.member.raise_if_fenced()  # a zombie writes nothing, not even a skipped batch
        rows = batch.toArrow()  # the stateful plan runs exactly once, here
        computed = time.monotonic()
        end = self._offsets(batch_id)
        start = self._offsets(batch_id - 1)
        self._report_restores(rows, end, batch_id)
        ranges = end.input_ranges(start)
        advanced = {p: e for p, (b, e) in ranges.items() if e > b}
        # An exception leaves the batch not done: Spark replays it from the state before it.
        written = self._write(batch_id, rows, ranges, started, computed)
        unwritten = [p for p in advanced if p not in written]
        self._record_copies(end, written, self._moved_on(unwritten, advanced))

    def _write(
        self,
        batch_id: int,
        rows: pa.Table,
        ranges: dict[int, tuple[int, int]],
        started: float,
        computed: float,
    ) -> dict[int, int]:
        """The batch's transaction; per partition written, the offset after its last changelog
        record (the partition's committed offset equal to the batch's end counts as written).
        `started` and `computed`: when the sink got the batch and when its rows were computed.
        A partition without new input is written only where a side of a pair acts on it (a
        release, a take-over)."""
        if not ranges:
            return {}  # a restore or standby batch: no input offsets to commit
        advanced = {p: e for p, (b, e) in ranges.items() if e > b}
        plans = self.pair.plan(ranges) if self.pair is not None else {}
        acting = {p for p, plan in plans.items() if plan.control or plan.snapshot}
        if not advanced and not acting:
            return {}
        committed = self.member.committed(advanced) if advanced else {}
        done = {p: o for p, o in advanced.items() if committed[p] == o}
        if not acting and all((committed[p] or 0) >= o for p, o in advanced.items()):
            log.info("batch %d: already committed before a restart; not written again", batch_id)
            self.metrics.batch_skipped()
            return dict.fromkeys(done, -1)
        with self.member.hold() as owned:  # no revocation while the transaction runs
            gone = sorted(set(advanced) - owned)
            if gone:
                log.warning("batch %d: partitions %s no longer owned: not written", batch_id, gone)
            offsets = {
                p: e
                for p, (_b, e) in ranges.items()
                if p in owned and (p in advanced or p in acting)
            }
            if not offsets:
                return {}
            kept = {p: plans[p] for p in offsets} if self.pair is not None else None
            written, changelog_ends = self._transaction_with_retries(batch_id, rows, offsets, kept)
            if self.pair is not None and kept is not None:
                self.pair.committed(kept)
                self.metrics.pair_published({p: plan.publish for p, plan in kept.items()})
        records_in: Counter[tuple[str, int]] = Counter()
        for kind in (RESULT, DLQ):
            for p, n in _records_by_partition(rows, kind).items():
                if p in offsets:
                    records_in[(self.topics.input, p)] += n
        finished = time.monotonic()
        self.metrics.batch_done(finished - started, records_in, written)
        # The split says where a batch's time went: the reads, shuffle and stateful operator
        # (Spark runs the plan inside toArrow) against writing the rows (the offsets files, the
        # group's committed offsets, the Kafka transaction).
        log.info(
            "batch %d: committed %s, %d records in, offsets %s (rows computed in %.2f s, "
            "written in %.2f s)",
            batch_id,
            dict(written),
            sum(records_in.values()),
            offsets,
            computed - started,
            finished - computed,
        )
        return {p: changelog_ends.get(p, -1) for p in offsets}

    def _moved_on(self, unwritten: list[int], advanced: dict[int, int]) -> list[int]:
        """Of the partitions this instance did not write, those whose group offset is not the
        batch's end: their results are nowhere (if it is, the state equals what was written)."""
        if not unwritten:
            return []
        try:
            committed = self.member.committed(unwritten)
        except KafkaException:
            return unwritten  # unknown: assume the worst
        return [p for p in unwritten if committed[p] != advanced[p]]

    def _record_copies(
        self, end: SourceOffsets, written: dict[int, int], unwritten: list[int]
    ) -> None:
        path = copies_path(self.checkpoint_dir)
        before = read_copies(path)
        # -1: written, but no changelog record for the partition (no valid page): the copy's
        # offset stays where it was.
        after = record_batch(
            before, end.positions, {p: o for p, o in written.items() if o >= 0}, unwritten
        )
        for p in unwritten:
            log.info(
                "partition %s-%d: this batch's results for it were not written; its state here "
                "will be rebuilt from the changelog if it comes back",
                self.topics.input,
                p,
            )
        if after != before:
            write_copies(path, after)

    def _offsets(self, batch_id: int) -> SourceOffsets:
        return read_batch_offsets(
            self.checkpoint_dir, batch_id, self.topics.input, self.topics.changelog
        )

    def _transaction_with_retries(
        self,
        batch_id: int,
        rows: pa.Table,
        offsets: dict[int, int],
        plans: dict[int, PartitionPlan] | None,
    ) -> tuple[Counter[str], dict[int, int]]:
        """`_transaction`, again after an aborted one (the same rows, the group's metadata read
        anew): a rebalance elsewhere in the group while the transaction ran makes the broker
        refuse its offsets (ILLEGAL_GENERATION) although this instance still owns them; failing
        the batch would restart the query, which costs far more than a second transaction."""
        attempt, abandoned_until = 1, time.monotonic() + self.retry_for_s
        while True:
            generation = self.member.generation
            try:
                return self._transaction(batch_id, rows, offsets, plans)
            except ProducerAbandonedError:
                # Not an attempt spent: Kafka has not answered yet. A lost broker's coordinators
                # move within its session; the new producer finds them (`task.timeout.ms` in all).
                if time.monotonic() > abandoned_until:
                    raise
                log.info("batch %d: writing it again with a new producer", batch_id)
            except TransactionAbortedError:
                if attempt == TRANSACTION_ATTEMPTS:
                    raise
                attempt += 1
                log.info("batch %d: writing it again (attempt %d)", batch_id, attempt)
                # A rebalance's callback gives the group's new metadata: at once if it ran
                # while the transaction did (a hand-off's usual case), else within the wait.
                self.member.wait_for_new_generation(generation, RETRY_AFTER_S)

    def _transaction(
        self,
        batch_id: int,
        rows: pa.Table,
        offsets: dict[int, int],
        plans: dict[int, PartitionPlan] | None = None,
    ) -> tuple[Counter[str], dict[int, int]]:
        """Records written per topic, and per partition the offset after its last changelog
        record (from the delivery reports). `plans`: a side of a pair's decisions per partition
        (`app/processor/pair.py`): what it publishes, its take-overs and control records."""
        publish = {p for p in offsets if plans is None or plans[p].publish}
        producer = self.producer
        written: Counter[str] = Counter()
        changelog_ends: dict[int, int] = {}

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is None:
                p, offset = message.partition(), message.offset()
                if p is None or offset is None:  # set on every delivered record
                    raise RuntimeError(
                        f"delivery report of a {message.topic()} record without its partition "
                        f"or offset ({p}, {offset})"
                    )
                changelog_ends[p] = max(changelog_ends.get(p, 0), offset + 1)

        begun = False
        try:
            producer.begin_transaction()
            begun = True
            if plans is not None:
                written += self._pair_records(producer, plans)
            for row in rows.to_pylist():
                partition = row["partition"]
                if partition not in offsets:
                    continue
                if row["kind"] == RESULT:
                    key = row["key"]
                    if partition in publish:
                        producer.produce(
                            self.topics.output, value=row["value"], key=key, partition=partition
                        )
                        written[self.topics.output] += 1
                    producer.produce(
                        self.topics.changelog,
                        value=row["changelog"],
                        key=key,
                        partition=partition,
                        on_delivery=delivered,
                    )
                    written[self.topics.changelog] += 1
                elif row["kind"] == DLQ and partition in publish:
                    written += self._dead_letter(
                        producer, row["key"], row["value"], row["reason"], partition, row["offset"]
                    )
                producer.poll(0)
            # The delivery reports give where this transaction's changelog records end; the
            # input offsets carry it, so the partition's next owner reads its changelog that
            # far before it counts the input after them (`state_restore`).
            _flush(producer, batch_id)
            committing = [
                TopicPartition(self.topics.input, p, o, commit_metadata(changelog_ends[p]))
                if p in changelog_ends
                else TopicPartition(self.topics.input, p, o)  # no changelog record: no metadata
                for p, o in sorted(offsets.items())
            ]
            # Bounded by our own deadline: librdkafka's is ignored while the group's
            # coordinator is lost (`app/clients/deadline.py`).
            call_with_deadline(
                partial(
                    producer.send_offsets_to_transaction,
                    committing,
                    self.member.group_metadata(),  # read now: a revocation may be waiting for us
                    TRANSACTION_TIMEOUT_S,
                ),
                OFFSETS_DEADLINE_S,
                f"batch {batch_id}: send_offsets_to_transaction",
            )
            producer.commit_transaction(TRANSACTION_TIMEOUT_S)
        except BaseException as exc:
            self._end_failed_transaction(batch_id, exc, begun)
            raise
        self.metrics.transaction(committed=True)
        return written, changelog_ends

    def _dead_letter(
        self,
        producer: Producer,
        key: bytes | None,
        value: bytes | None,
        reason: str,
        partition: int,
        offset: int | None,
    ) -> Counter[str]:
        """One input record that breaks the contract to the dead-letter topic, unchanged, with
        its reason and where it came from in the headers."""
        producer.produce(
            self.topics.dlq,
            value=value,
            key=key,
            headers=_dlq_headers(reason, self.topics.input, partition, offset),
        )
        self.metrics.dlq(reason)
        return Counter({self.topics.dlq: 1})

    def _pair_records(self, producer: Producer, plans: dict[int, PartitionPlan]) -> Counter[str]:
        """A side of a pair's take-over snapshots (before the batch's newer values) and its
        control records (releases, take-overs), in the batch's transaction."""
        assert self.pair is not None
        written: Counter[str] = Counter()
        for partition, plan in sorted(plans.items()):
            if plan.snapshot:
                for key, output in self.pair.snapshot(partition):
                    producer.produce(self.topics.output, value=output, key=key, partition=partition)
                    written[self.topics.output] += 1
                    producer.poll(0)
            if plan.dead_letters is not None:
                for message, reason in self.pair.dead_letters(partition, *plan.dead_letters):
                    written += self._dead_letter(
                        producer,
                        message.key(),
                        message.value(),
                        reason,
                        partition,
                        message.offset(),
                    )
            for name, record in plan.control:
                producer.produce(self.pair.control_topic, value=record, key=name, partition=0)
                written[self.pair.control_topic] += 1
        return written

    def _end_failed_transaction(self, batch_id: int, exc: BaseException, begun: bool) -> None:
        """Leave no transaction open after `exc`, and raise what the batch's failure means.

        Fenced (a newer producer has this transactional.id): `ProducerFencedError`, and the
        instance exits. Any other fatal error leaves the producer unusable: the next batch gets a
        new one (its `init_transactions` aborts what the old one left open). Anything else (an
        abortable or retriable Kafka error, a failure outside Kafka) is aborted, or, if the abort
        fails or no transaction began, the producer is replaced as well. A Kafka error becomes
        `TransactionAbortedError` (the batch is replayed); anything else propagates as it is.
        """
        self.metrics.transaction(committed=False)
        if isinstance(exc, CallAbandoned):
            # Mid-call, the producer takes no other call (an abort would wait behind it): the
            # next batch's new producer fences it, and its init_transactions aborts what it left.
            self._producer = None
            log.warning(
                "%s (librdkafka waits for a lost coordinator whatever its timeout); the producer "
                "is abandoned, a new one writes the batch again",
                exc,
            )
            raise ProducerAbandonedError(str(exc)) from exc
        error = exc.args[0] if isinstance(exc, KafkaException) else None
        if isinstance(error, KafkaError) and error.code() in FENCED_CODES:
            self.fenced = error
            log.error("batch %d: producer fenced (%s); batch not done", batch_id, error.str())
            raise ProducerFencedError(error.str()) from exc
        if isinstance(error, KafkaError) and error.fatal():
            log.error(
                "batch %d: fatal producer error (%s): a new producer for the next batch; this "
                "one will be replayed",
                batch_id,
                error.str(),
            )
            self._producer = None
            raise TransactionAbortedError(error.str()) from exc
        if not (begun and self._aborted(batch_id)):
            # Its state is unknown (no transaction began, or the abort failed): the next batch
            # gets a new producer, whose init_transactions aborts what this one left open.
            self._producer = None
        reason = error.str() if isinstance(error, KafkaError) else f"{type(exc).__name__}: {exc}"
        log.warning(
            "batch %d: transaction aborted (%s); batch not done, it will be replayed",
            batch_id,
            reason,
        )
        if isinstance(error, KafkaError):
            raise TransactionAbortedError(reason) from exc

    def _aborted(self, batch_id: int) -> bool:
        """Whether the open transaction could be aborted."""
        try:
            self.producer.abort_transaction(TRANSACTION_TIMEOUT_S)
        except KafkaException as exc:
            log.warning("batch %d: abort failed (%s)", batch_id, exc.args[0].str())
            return False
        return True

    def _report_restores(self, rows: pa.Table, end: SourceOffsets, batch_id: int) -> None:
        if all(pos.restore_from is None for pos in end.positions.values()):
            return  # no changelog read this batch
        records = _records_by_partition(rows, RESTORED)
        standby = {p: n for p, n in records.items() if not end.positions[p].active}
        if standby:
            self.metrics.standby_read(standby)
        restoring = end.restoring()
        if not restoring:
            return
        read_s = _sum_by_partition(rows, RESTORED, "read_us")
        # Spark writes the batch's offsets when it plans the batch: its age is the restore's.
        planned = batch_offsets_path(self.checkpoint_dir, batch_id).stat().st_mtime
        seconds = max(0.0, time.time() - planned)
        for p in sorted(restoring):
            read = read_s[p] / 1e6
            self.metrics.restore_done(p, records[p], seconds, read)
            start = end.positions[p].restore_from
            if not records[p]:
                log.info(
                    "partition %s-%d: nothing to restore (%s)",
                    self.topics.input,
                    p,
                    "its changelog is empty"
                    if start == FROM_BEGINNING
                    else f"this instance's copy is at the changelog's end, offset {start}",
                )
                continue
            log.info(
                "partition %s-%d: state restored from %d changelog records (%s): read in %.2f s "
                "(%.0f/s by the readers' own timer), %.2f s from planning to commit",
                self.topics.input,
                p,
                records[p],
                "the whole changelog, no copy here"
                if start == FROM_BEGINNING
                else f"the tail after this instance's copy at offset {start}",
                read,
                records[p] / read if read else 0.0,
                seconds,
            )


def _flush(producer: Producer, batch_id: int) -> None:
    """Wait until every record of the transaction is acknowledged (its delivery reports run)."""
    left = producer.flush(TRANSACTION_TIMEOUT_S)
    if left:
        raise KafkaException(
            KafkaError(
                KafkaError._TIMED_OUT,
                f"batch {batch_id}: {left} records not acknowledged within "
                f"{TRANSACTION_TIMEOUT_S:g} s; the transaction is aborted and the batch replayed",
            )
        )


def _records_by_partition(rows: pa.Table, kind: str) -> Counter[int]:
    """How many source records the rows of `kind` stand for, per partition."""
    return _sum_by_partition(rows, kind, "records")


def _sum_by_partition(rows: pa.Table, kind: str, column: str) -> Counter[int]:
    """The sum of `column` over the rows of `kind`, per partition (in Arrow: every batch asks
    this of all its rows, several times)."""
    of_kind = rows.filter(pc.equal(rows.column("kind"), kind))
    sums = of_kind.group_by("partition").aggregate([(column, "sum")])
    return Counter(
        dict(
            zip(
                sums.column("partition").to_pylist(),
                sums.column(f"{column}_sum").to_pylist(),
                strict=True,
            )
        )
    )


def _dlq_headers(
    reason: str, topic: str, partition: int, offset: int | None
) -> list[tuple[str, str | bytes | None]]:
    # The pairs typed as Producer.produce takes them (a list of (str, bytes) is not: invariant).
    values = (reason, topic, str(partition), str(offset))
    return [(name, value.encode("utf-8")) for name, value in zip(DLQ_HEADERS, values, strict=True)]
