"""What the local run and the benchmarks watch from outside the processors, as Kafka shows it.

- `GroupLag`: per input partition, the end offset and the group's committed offset (the lag
  graphs of the articles). Read with a consumer that never joins the group, so it does not
  disturb the membership it observes, and keeps answering while an instance is down.
- `OutputTail`: the output topic read with `isolation.level=read_committed` from the beginning,
  on a background thread: every count record with its partition and timestamp, the newest count
  per page, and the records that repeat or go back (duplicates: exactly-once forbids them).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from app.kafka_retry import Retrying
from app.topics import librdkafka_logger

CLIENT_TIMEOUT_S = 10.0
# How long a moving group coordinator or partition leader, or an open transaction, may keep the
# offsets out of reach (a new cluster's offsets topic, a new topic's leaders, a broker restart).
MOVING_WAIT_S = 60.0

log = logging.getLogger(__name__)


def _observer_config(
    bootstrap_servers: str, group_id: str, client_config: Mapping[str, str]
) -> dict[str, object]:
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
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while True:
        metadata = consumer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
        found = metadata.topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return len(found.partitions)
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"topic {topic} not found within {CLIENT_TIMEOUT_S:g} s: "
                f"{found.error if found else 'no metadata'}; was it created?"
            )
        time.sleep(0.5)


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
        self._consumer = Consumer(
            _observer_config(bootstrap_servers, group_id, client_config or {})
        )
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

    def total(self) -> int:
        """The lag summed over partitions."""
        return sum(p.lag for p in self.read().values())

    def close(self) -> None:
        """Release the client."""
        self._consumer.close()


@dataclass(frozen=True)
class CountRecord:
    """One record of the output topic: a page's new count."""

    partition: int
    offset: int
    timestamp_ms: int
    page: str
    count: int


class OutputTail:
    """Reads the output topic on a background thread (see the module docstring)."""

    def __init__(
        self, bootstrap_servers: str, topic: str, client_config: Mapping[str, str] | None = None
    ) -> None:
        config = {
            **_observer_config(
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
        self.records: list[CountRecord] = []
        self.latest: dict[str, int] = {}
        self.duplicates: list[CountRecord] = []
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
            page = message.key().decode("utf-8")  # type: ignore[attr-defined]
            record = CountRecord(
                partition=partition,
                offset=message.offset(),  # type: ignore[attr-defined]
                timestamp_ms=message.timestamp()[1],  # type: ignore[attr-defined]
                page=page,
                count=int(message.value()),  # type: ignore[attr-defined]
            )
            self.records.append(record)
            if record.count <= self.latest.get(page, 0):
                self.duplicates.append(record)
            self.latest[page] = max(record.count, self.latest.get(page, 0))

    def snapshot(self) -> tuple[dict[str, int], int, int]:
        """(newest count per page, records read, duplicates found) now."""
        self._raise_if_failed()
        with self._lock:
            return dict(self.latest), len(self.records), len(self.duplicates)

    def wait_until_caught_up(self, timeout_s: float, quiet_s: float = 2.0) -> bool:
        """Wait until every partition is read to its end and nothing arrived for `quiet_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._raise_if_failed()
            with self._lock:
                done = all(self._at_end.values())
                quiet = time.monotonic() - self._changed_at >= quiet_s
            if done and quiet:
                return True
            time.sleep(0.2)
        return False

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"reading {self.topic} failed: {self._error}") from self._error

    def stop(self) -> None:
        """Stop reading and close the client."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=CLIENT_TIMEOUT_S)


@dataclass(frozen=True)
class CountCheck:
    """The output's final counts against what was produced."""

    produced: int
    counted: int
    missing_pages: tuple[str, ...]  # produced, never counted
    wrong_pages: tuple[tuple[str, int, int], ...]  # (page, expected, counted)
    duplicates: int

    @property
    def ok(self) -> bool:
        """Every page counted exactly, no duplicate in the output."""
        return not self.missing_pages and not self.wrong_pages and self.duplicates == 0

    def describe(self) -> str:
        """One line for people."""
        verdict = "OK" if self.ok else "MISMATCH"
        line = (
            f"{verdict}: produced {self.produced} valid page views, counted {self.counted}, "
            f"duplicates {self.duplicates}"
        )
        if self.missing_pages:
            line += f", {len(self.missing_pages)} pages never counted"
        if self.wrong_pages:
            shown = ", ".join(f"{p}: {e} expected, {c} counted" for p, e, c in self.wrong_pages[:3])
            line += f", {len(self.wrong_pages)} pages wrong ({shown})"
        return line


def check_counts(
    expected: Mapping[str, int], counted: Mapping[str, int], duplicates: int
) -> CountCheck:
    """Compare the expected count per page with the newest count in the output."""
    missing = tuple(sorted(p for p in expected if expected[p] and p not in counted))
    wrong = tuple(
        sorted(
            (p, expected.get(p, 0), c)
            for p, c in counted.items()
            if p not in missing and c != expected.get(p, 0)
        )
    )
    return CountCheck(
        produced=sum(expected.values()),
        counted=sum(counted.values()),
        missing_pages=missing,
        wrong_pages=wrong,
        duplicates=duplicates,
    )
