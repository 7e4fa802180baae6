"""What the local run and the benchmarks watch from outside the processors, as Kafka shows it.

- `GroupLag`: per input partition, the end offset and the group's committed offset (the lag
  graphs of the articles). Read with a consumer that never joins the group, so it does not
  disturb the membership it observes, and keeps answering while an instance is down.
- `OutputTail`: the output topic read with `isolation.level=read_committed` from the beginning,
  on a background thread: every record with its partition and timestamp and the newest value
  per key, each judged by the run's `Truth` once one is attached (duplicates, latencies).
- `OutputGaps`: per partition, the longest time without an output record in a window (a roll),
  kept up to date as records arrive, so a live display can show it while the window is open.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from app.admin.reconcile import librdkafka_logger
from app.clients.kafka_retry import Retrying
from app.clients.pair_control import read_to_end
from app.clients.waiting import poll_until, wait_until
from app.processor.sink import DLQ_REASON_HEADER
from devkit.truth import OutputRecord, Truth

CLIENT_TIMEOUT_S = 10.0
# How long a moving group coordinator or partition leader, or an open transaction, may keep the
# offsets out of reach (a new cluster's offsets topic, a new topic's leaders, a broker restart).
MOVING_WAIT_S = 60.0

log = logging.getLogger(__name__)


def observer_config(
    bootstrap_servers: str, group_id: str, client_config: Mapping[str, str]
) -> dict[str, object]:
    """A consumer that watches and never commits (read_committed: what downstream sees)."""
    return {
        **client_config,
        "bootstrap.servers": bootstrap_servers,
        "group.id": group_id,
        "enable.auto.commit": "false",
        "isolation.level": "read_committed",
        "logger": librdkafka_logger(),
    }


def partition_count(consumer: Consumer, topic: str) -> int:
    """The topic's partition count (a clear error if it does not exist)."""
    # A broker learns a new topic a moment after the controller created it: ask again.
    found = None

    def partitions() -> int:
        nonlocal found
        found = consumer.list_topics(topic, timeout=CLIENT_TIMEOUT_S).topics.get(topic)
        return len(found.partitions) if found is not None and found.error is None else 0

    return wait_until(
        partitions,
        CLIENT_TIMEOUT_S,
        f"topic {topic} in the metadata (was it created?)",
        interval_s=0.5,
        seen=lambda: found.error if found else "no metadata",
    )


@dataclass(frozen=True)
class PartitionLag:
    """One input partition: end offset, group's committed offset (None: nothing committed)."""

    end: int
    committed: int | None

    @property
    def lag(self) -> int:
        """Records not yet committed by the group."""
        return self.end - (self.committed or 0)


class GroupLag:
    """The consumer group's lag per input partition (see the module docstring)."""

    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str,
        topic: str,
        client_config: Mapping[str, str] | None = None,
    ) -> None:
        # group.id names the group whose committed offsets are read; no subscribe: no join.
        self._consumer = Consumer(observer_config(bootstrap_servers, group_id, client_config or {}))
        self.group_id = group_id
        self.topic = topic
        self.partitions = partition_count(self._consumer, topic)
        self._retrying = Retrying(MOVING_WAIT_S, budget_name="MOVING_WAIT_S")

    def read(self) -> dict[int, PartitionLag]:
        """End and committed offset of every partition now."""
        committed = self._retrying.committed_offsets(
            f"group {self.group_id}: committed offsets",
            self._consumer,
            self.topic,
            range(self.partitions),
            CLIENT_TIMEOUT_S,
        )
        result = {}
        for tp in committed:
            _, high = self._retrying.watermark_offsets(
                f"{self.topic}-{tp.partition}: end offset",
                self._consumer,
                self.topic,
                tp.partition,
                CLIENT_TIMEOUT_S,
            )
            result[tp.partition] = PartitionLag(high, tp.offset if tp.offset >= 0 else None)
        return result

    def ends(self) -> dict[int, int]:
        """Every partition's end offset now (no committed offsets: they can wait on a crashed
        member's open transaction)."""
        return {
            p: self._retrying.watermark_offsets(
                f"{self.topic}-{p}: end offset", self._consumer, self.topic, p, CLIENT_TIMEOUT_S
            )[1]
            for p in range(self.partitions)
        }

    def total(self) -> int:
        """The lag summed over partitions."""
        return sum(p.lag for p in self.read().values())

    def close(self) -> None:
        """Release the client."""
        self._consumer.close()


class SlowestLag:
    """Several groups reading the same topic (an active/standby pair's sides), read as one: per
    partition, the group furthest behind."""

    def __init__(self, groups: Sequence[GroupLag]) -> None:
        self.groups = list(groups)
        self.group_id = ",".join(g.group_id for g in groups)
        self.topic = groups[0].topic
        self.partitions = groups[0].partitions

    def read(self) -> dict[int, PartitionLag]:
        """Per partition, the end offset and the lowest committed offset of the groups."""
        reads = [g.read() for g in self.groups]
        return {
            p: min((r[p] for r in reads), key=lambda lag: lag.committed or -1) for p in reads[0]
        }

    def ends(self) -> dict[int, int]:
        """Every partition's end offset now."""
        return self.groups[0].ends()

    def total(self) -> int:
        """The lag summed over partitions."""
        return sum(p.lag for p in self.read().values())

    def close(self) -> None:
        """Release the clients."""
        for group in self.groups:
            group.close()


@dataclass
class OutputGaps:
    """Per partition, the longest time without output between `open()` and `close()`: what a
    downstream reader of the table saw of a roll. A partition's last record before the window
    starts its first gap. The benchmarks' `zero_output_gaps` is the same measure after the fact."""

    partitions: Sequence[int]
    since_ms: int | None = None
    until_ms: int | None = None
    _last_ms: dict[int, int] = field(default_factory=dict)
    _longest_ms: dict[int, int] = field(default_factory=dict)

    def open(self, at_ms: int) -> None:
        """Start the window now: every partition's current gap counts from its last output."""
        self.since_ms, self.until_ms = at_ms, None
        self._longest_ms = {}
        for p in self.partitions:
            self._last_ms.setdefault(p, at_ms)

    def close(self, at_ms: int) -> None:
        """End the window: the gaps open now end here."""
        if self.since_ms is not None and self.until_ms is None:
            for p in self.partitions:
                self._extend(p, at_ms)
            self.until_ms = at_ms

    def record(self, partition: int, timestamp_ms: int) -> None:
        """An output record of `partition` at `timestamp_ms`."""
        if self.since_ms is not None and self.until_ms is None:
            self._extend(partition, timestamp_ms)
        self._last_ms[partition] = max(timestamp_ms, self._last_ms.get(partition, timestamp_ms))

    def seconds(self, now_ms: int) -> dict[int, float]:
        """The longest gap of each partition so far (an open one counts up to `now_ms`);
        empty before the window opens."""
        if self.since_ms is None:
            return {}
        end = now_ms if self.until_ms is None else self.until_ms
        return {
            p: max(self._longest_ms.get(p, 0), end - self._last_ms.get(p, end)) / 1000
            for p in self.partitions
        }

    def _extend(self, partition: int, until_ms: int) -> None:
        gap = until_ms - self._last_ms.get(partition, until_ms)
        self._longest_ms[partition] = max(self._longest_ms.get(partition, 0), gap)


class OutputTail:
    """Reads the output topic on a background thread (see the module docstring).

    `keep_records=False` keeps the newest values and `gaps` but not every record: a run that
    lasts hours (the local run) does not grow without bound."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        client_config: Mapping[str, str] | None = None,
        keep_records: bool = True,
    ) -> None:
        config = {
            **observer_config(
                bootstrap_servers, f"output-tail-{uuid.uuid4().hex[:8]}", client_config or {}
            ),
            "enable.partition.eof": "true",
        }
        self._consumer = Consumer(config)
        self.topic = topic
        self.partitions = partition_count(self._consumer, topic)
        self._consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(self.partitions)]
        )
        self.keep_records = keep_records
        self.records: list[OutputRecord] = []
        self.read = 0
        self.first_read_at: float | None = None  # time.monotonic() of the first record read
        self.gaps = OutputGaps(range(self.partitions))
        self.latest: dict[str, bytes] = {}
        self.truth: Truth | None = None
        self._at_end: dict[int, bool] = dict.fromkeys(range(self.partitions), False)
        self._changed_at = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="output-tail", daemon=True)

    def start(self) -> OutputTail:
        """Start reading."""
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for message in self._consumer.consume(1000, timeout=0.2):
                    self._take(message)
        except BaseException as exc:  # reported by the next caller that asks
            self._error = exc
        finally:
            self._consumer.close()

    def _take(self, message: object) -> None:
        error = message.error()  # type: ignore[attr-defined]
        partition = message.partition()  # type: ignore[attr-defined]
        with self._lock:
            self._changed_at = time.monotonic()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    self._at_end[partition] = True
                    return
                if not error.fatal():
                    # Metadata moving under load (a leader election, a topic not yet known to
                    # this broker): librdkafka retries by itself.
                    log.warning("reading %s: %s; librdkafka retries", self.topic, error.str())
                    return
                raise KafkaException(error)
            self._at_end[partition] = False
            record = OutputRecord(
                partition=partition,
                offset=message.offset(),  # type: ignore[attr-defined]
                timestamp_ms=message.timestamp()[1],  # type: ignore[attr-defined]
                key=message.key().decode("utf-8"),  # type: ignore[attr-defined]
                value=message.value() or b"",  # type: ignore[attr-defined]
            )
            self.read += 1
            if self.first_read_at is None:
                self.first_read_at = time.monotonic()
            if self.keep_records:
                self.records.append(record)
            self.gaps.record(partition, record.timestamp_ms)
            self.latest[record.key] = record.value
            if self.truth is not None:
                self.truth.observe(record)

    def attach(self, truth: Truth) -> None:
        """Judge every record read from now on by `truth` (the records before it: another
        run's, on a reused cluster)."""
        with self._lock:
            self.truth = truth

    def snapshot(self) -> tuple[dict[str, bytes], int, int]:
        """(newest value per key, records read, duplicates found) now."""
        self._raise_if_failed()
        with self._lock:
            repeated = self.truth.repeated() if self.truth is not None else 0
            return dict(self.latest), self.read, repeated

    def wait_until_caught_up(self, timeout_s: float, quiet_s: float = 2.0) -> bool:
        """Wait until every partition is read to its end and nothing arrived for `quiet_s`;
        whether it came to that within `timeout_s`."""

        def caught_up() -> bool:
            self._raise_if_failed()
            with self._lock:
                done = all(self._at_end.values())
                return done and time.monotonic() - self._changed_at >= quiet_s

        return poll_until(caught_up, timeout_s, interval_s=0.2) is not None

    def open_gaps(self, at_ms: int) -> None:
        """Start measuring the output's gaps (`gaps`) now."""
        with self._lock:
            self.gaps.open(at_ms)

    def close_gaps(self, at_ms: int) -> dict[int, float]:
        """Stop measuring; the longest gap per partition in the window (seconds)."""
        with self._lock:
            self.gaps.close(at_ms)
            return self.gaps.seconds(at_ms)

    def gap_seconds(self, now_ms: int) -> dict[int, float]:
        """The longest gap per partition in the window so far (seconds)."""
        with self._lock:
            return self.gaps.seconds(now_ms)

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"reading {self.topic} failed: {self._error}") from self._error

    def stop(self) -> None:
        """Stop reading and close the client."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=CLIENT_TIMEOUT_S)


def dead_letter_reasons(
    bootstrap_servers: str,
    topic: str,
    client_config: Mapping[str, str] | None = None,
    timeout_s: float = MOVING_WAIT_S,
) -> Counter[str]:
    """Per reason (the `dlq.reason` header), the committed records of the dead-letter `topic`,
    read to its end (once the instances have stopped: no transaction is left open)."""
    group = f"dlq-read-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(observer_config(bootstrap_servers, group, client_config or {}))
    reasons: Counter[str] = Counter()
    try:
        for p in range(partition_count(consumer, topic)):
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
            for message in read_to_end(consumer, TopicPartition(topic, p), timeout_s):
                reason = dict(message.headers() or []).get(DLQ_REASON_HEADER)
                reasons[reason.decode() if isinstance(reason, bytes) else "(no reason header)"] += 1
    finally:
        consumer.close()
    return reasons
