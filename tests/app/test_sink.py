"""The sink's transactions: a failure inside one leaves none open, so the next batch commits.

Real clients on the tests' Apache Kafka: the processor's `GroupMember` joins a group, its
`TransactionalSink` writes batches; no Spark (the rows are what a batch's plan would produce).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from app.clients.waiting import wait_until
from app.processor import assignment_file
from app.processor import sink as sink_module
from app.processor.assignment_file import Assignment
from app.processor.group_member import GroupMember
from app.processor.kafka_source import GroupAssignedReader, SourceOptions
from app.processor.keyed_state import RESULT
from app.processor.metrics import ProcessorMetrics
from app.processor.sink import (
    FENCED_CODES,
    TRANSACTION_ATTEMPTS,
    ProducerFencedError,
    SinkTopics,
    TransactionAbortedError,
    TransactionalSink,
)
from app.processor.source_offsets import SourceOffsets
from app.processor.state_restore import CommittedInput, changelog_end_of
from contract.processor_keys import DEFAULTS
from tests.app.processor_harness import read_committed

PARTITIONS = 2
DEADLINE_S = 120.0


@pytest.fixture(scope="module")
def bootstrap(kafka_bootstrap: str) -> str:
    return kafka_bootstrap


@contextmanager
def joined_sink(
    bootstrap: str, tmp_path: Path, replication: int = 1
) -> Iterator[TransactionalSink]:
    """A `TransactionalSink` whose `GroupMember` owns every partition of new topics."""
    prefix = f"sink-{uuid.uuid4().hex[:6]}"
    topics = SinkTopics(f"{prefix}-in", f"{prefix}-out", f"{prefix}-changelog", f"{prefix}-dlq")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics(
        [
            NewTopic(name, PARTITIONS, replication)
            for name in (topics.input, topics.output, topics.changelog)
        ]
        + [NewTopic(topics.dlq, 1, replication)]
    )
    for future in created.values():
        future.result(timeout=30)
    consumer = {
        "bootstrap.servers": bootstrap,
        "group.id": prefix,
        "isolation.level": "read_committed",
        "enable.auto.commit": "false",
        "partition.assignment.strategy": "cooperative-sticky",
    }
    metrics = ProcessorMetrics()
    member = GroupMember(consumer, topics.input, tmp_path / "assignment.json", metrics).start()

    def assigned_with_metadata() -> bool:
        """Every partition assigned, and the metadata the transactions commit offsets with."""
        if member.assignment() != set(range(PARTITIONS)):
            return False
        try:
            member.group_metadata()
        except RuntimeError:
            return False
        return True

    wait_until(
        assigned_with_metadata,
        DEADLINE_S,
        f"an assignment of {topics.input} and its group metadata",
        interval_s=0.1,
        seen=member.assignment,
    )
    producer = {
        "bootstrap.servers": bootstrap,
        "transactional.id": prefix,
        "enable.idempotence": "true",
        "acks": "all",
    }
    try:
        yield TransactionalSink(producer, topics, tmp_path / "checkpoint", member, metrics)
    finally:
        member.close()


@pytest.fixture
def sink(bootstrap: str, tmp_path: Path) -> Iterator[TransactionalSink]:
    with joined_sink(bootstrap, tmp_path) as joined:
        yield joined


def result(page: str | None, value: object, partition: int = 0) -> dict[str, object]:
    """One result row: a page's new count as output and changelog value."""
    encoded = str(value).encode() if isinstance(value, int) else value
    return {
        "partition": partition,
        "kind": RESULT,
        "key": None if page is None else page.encode(),
        "value": encoded,
        "changelog": encoded,
    }


def counts(pages: dict[str, int]) -> pa.Table:
    """A batch's result rows: one count per page, all in partition 0."""
    return pa.Table.from_pylist([result(page, n) for page, n in pages.items()])


def transactions(sink: TransactionalSink, result: str) -> float:
    return sink.metrics.transactions.labels(result=result)._value.get()


class _FailingOn:
    """The sink's producer, except that producing `key` raises: a bug while a batch is written,
    not a Kafka error."""

    def __init__(self, producer: object, key: bytes) -> None:
        self._producer, self._key = producer, key

    def __getattr__(self, name: str) -> object:
        return getattr(self._producer, name)

    def produce(self, *args: object, **kwargs: object) -> None:
        if kwargs.get("key") == self._key:
            raise ValueError("a bug while writing the batch")
        self._producer.produce(*args, **kwargs)  # type: ignore[attr-defined]


def test_a_failure_inside_a_transaction_leaves_none_open(
    sink: TransactionalSink, bootstrap: str
) -> None:
    producer = sink._producer
    sink._producer = _FailingOn(producer, b"/b")  # type: ignore[assignment]
    try:
        with pytest.raises(ValueError):  # not a Kafka error: it propagates as it is
            sink._transaction(1, counts({"/a": 1, "/b": 2}), {0: 1})
    finally:
        sink._producer = producer
    assert transactions(sink, "aborted") == 1

    written, _ = sink._transaction(2, counts({"/b": 5}), {0: 2})  # begins: nothing left open
    assert written[sink.topics.output] == 1
    output = read_committed(bootstrap, sink.topics.output)
    assert [(r.key, r.value) for r in output] == [(b"/b", b"5")]  # "/a" was aborted
    assert sink.member.committed([0]) == {0: 2}


def test_a_kafka_error_inside_a_transaction_aborts_it_and_the_batch_can_be_replayed(
    sink: TransactionalSink, bootstrap: str
) -> None:
    # The output topic was recreated under the processor with fewer partitions than the input:
    # librdkafka refuses a count for partition 1, a Kafka error inside the transaction.
    narrow = f"{sink.topics.output}-narrow"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(narrow, 1, 1)])[narrow].result(timeout=30)
    mismatched = pa.Table.from_pylist([result("/a", 1), result("/z", 1, partition=1)])
    wide = sink.topics
    sink.topics = replace(wide, output=narrow)
    try:
        with pytest.raises(TransactionAbortedError):
            sink._transaction(1, mismatched, {0: 1, 1: 1})
    finally:
        sink.topics = wide
    assert transactions(sink, "aborted") == 1
    assert read_committed(bootstrap, narrow) == []  # "/a" was aborted with it

    written, _ = sink._transaction(1, counts({"/a": 1}), {0: 1})  # the replay commits
    assert written[sink.topics.output] == 1
    output = read_committed(bootstrap, sink.topics.output)
    assert [(r.key, r.value) for r in output] == [(b"/a", b"1")]


class _StuckOffsets:
    """The sink's producer, except that `send_offsets_to_transaction` waits until released, as
    librdkafka's does, past its timeout, while the group's coordinator is lost."""

    def __init__(self, producer: object, release: threading.Event) -> None:
        self._producer, self._release = producer, release

    def __getattr__(self, name: str) -> object:
        return getattr(self._producer, name)

    def send_offsets_to_transaction(self, *args: object) -> None:
        self._release.wait(60)
        self._producer.send_offsets_to_transaction(*args)  # type: ignore[attr-defined]


def test_a_stuck_offset_commit_is_abandoned_and_a_new_producer_writes_the_batch(
    sink: TransactionalSink, bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sink_module, "OFFSETS_DEADLINE_S", 1.0)
    release = threading.Event()
    stuck = sink._producer
    sink._producer = _StuckOffsets(stuck, release)  # type: ignore[assignment]
    try:
        with pytest.raises(TransactionAbortedError):
            sink._transaction(1, counts({"/a": 1}), {0: 1})
        assert sink._producer is None  # abandoned: mid-call, it takes no abort
        # The new producer fences the stuck one and aborts its transaction ("/a" once).
        written, _ = sink._transaction(1, counts({"/a": 1}), {0: 1})
    finally:
        release.set()  # the stuck call ends, refused: its producer was fenced
    assert written[sink.topics.output] == 1
    output = read_committed(bootstrap, sink.topics.output)
    assert [(r.key, r.value) for r in output] == [(b"/a", b"1")]
    assert sink.member.committed([0]) == {0: 1}


def test_abandoned_producers_do_not_use_up_the_batchs_attempts(
    sink: TransactionalSink, bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lost coordinator can outlast several deadlines (its broker's session, then the moves):
    # each abandoned producer is Kafka not answering yet, not a failed attempt, and the batch is
    # written again until `task.timeout.ms`, not failed after TRANSACTION_ATTEMPTS.
    monkeypatch.setattr(sink_module, "OFFSETS_DEADLINE_S", 0.5)
    release = threading.Event()
    made: list[object] = []
    new_producer = sink._new_producer

    def producer_stuck_at_first() -> object:
        producer = new_producer()
        made.append(producer)
        return _StuckOffsets(producer, release) if len(made) <= TRANSACTION_ATTEMPTS else producer

    monkeypatch.setattr(sink, "_new_producer", producer_stuck_at_first)
    sink._producer = None
    try:
        written, _ = sink._transaction_with_retries(1, counts({"/a": 1}), {0: 1}, None)
    finally:
        release.set()
    assert len(made) == TRANSACTION_ATTEMPTS + 1
    assert written[sink.topics.output] == 1
    output = read_committed(bootstrap, sink.topics.output)
    assert [(r.key, r.value) for r in output] == [(b"/a", b"1")]
    assert sink.member.committed([0]) == {0: 1}


def test_a_fenced_producer_is_known_by_its_error_code_and_never_replaced(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    with joined_sink(kafka_bootstrap, tmp_path, replication=3) as sink:
        sink._transaction(1, counts({"/a": 1}), {0: 1})
        # A successor with the same transactional.id (the pod's replacement) fences this one.
        successor = Producer(sink._config)
        successor.init_transactions(60)
        with pytest.raises(ProducerFencedError):
            sink._transaction(2, counts({"/a": 2}), {0: 2})
        assert sink.fenced is not None and sink.fenced.code() in FENCED_CODES, sink.fenced
        assert sink._producer is not None  # kept: a new one would fence the successor back


def test_committed_offsets_carry_where_the_transaction_s_changelog_records_end(
    sink: TransactionalSink,
) -> None:
    # Partition 1's input held nothing valid (a dead letter): no changelog record, no metadata.
    _, ends = sink._transaction(1, counts({"/a": 1, "/b": 1}), {0: 1, 1: 1})
    assert ends == {0: 2}  # changelog records at offsets 0 and 1
    found = sink.member._offsets_client.committed(
        [TopicPartition(sink.topics.input, p) for p in (0, 1)], 30
    )
    assert [(tp.offset, changelog_end_of(tp.metadata)) for tp in found] == [(1, 2), (1, None)]


class _HeldCommit:
    """The sink's producer, except that `commit_transaction` waits until released: the
    previous owner's last transaction, its offsets sent, not committed yet."""

    def __init__(self, producer: object, release: threading.Event) -> None:
        self._producer, self._release = producer, release
        self.offsets_sent = threading.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self._producer, name)

    def send_offsets_to_transaction(self, *args: object) -> None:
        self._producer.send_offsets_to_transaction(*args)  # type: ignore[attr-defined]
        self.offsets_sent.set()

    def commit_transaction(self, *args: object) -> None:
        self._release.wait(60)
        self._producer.commit_transaction(*args)  # type: ignore[attr-defined]


def test_a_partition_gained_while_its_last_transaction_commits_is_planned_from_that_commit(
    sink: TransactionalSink, bootstrap: str, tmp_path: Path
) -> None:
    """The next owner's plan: input from the committed offset, changelog at least to the end of
    the transaction that committed it; never the input after a batch on a state without it."""
    sink._transaction(1, counts({"/a": 1}), {0: 1})
    release = threading.Event()
    held = _HeldCommit(sink._producer, release)
    sink._producer = held  # type: ignore[assignment]
    last: dict[str, dict[int, int]] = {}
    committing = threading.Thread(
        target=lambda: last.setdefault("ends", sink._transaction(2, counts({"/a": 2}), {0: 2})[1])
    )
    committing.start()
    planned: dict[str, SourceOffsets] = {}
    try:
        assert held.offsets_sent.wait(DEADLINE_S)
        source = GroupAssignedReader(
            SourceOptions(
                input_topic=sink.topics.input,
                changelog_topic=sink.topics.changelog,
                assignment_path=str(tmp_path / "gained.json"),
                checkpoint_path=str(tmp_path / "gained-checkpoint"),
                max_records_per_batch=1000,
                read_tasks=1,
                consumer_config={
                    "bootstrap.servers": bootstrap,
                    "group.id": sink.member._config["group.id"],
                    "isolation.level": "read_committed",
                },
                task_timeout_ms=int(DEADLINE_S * 1000),
                aggregation_class=DEFAULTS["aggregation.class"],
            )
        )
        asked = threading.Event()
        committed_input = source._committed_input

        def asking(partition: int) -> CommittedInput:
            asked.set()
            return committed_input(partition)

        source._committed_input = asking  # type: ignore[method-assign]
        assignment_file.publish(
            Path(source.options.assignment_path),
            Assignment(sink.topics.input, (0,), generation=1),
        )

        def plan() -> None:
            end = source.latestOffset({}, source.getDefaultReadLimit())
            planned["end"] = SourceOffsets.from_dict(end, sink.topics.input, sink.topics.changelog)

        planning = threading.Thread(target=plan)
        planning.start()
        assert asked.wait(DEADLINE_S)
    finally:
        release.set()
        committing.join(DEADLINE_S)
    planning.join(DEADLINE_S)
    position = planned["end"].positions[0]
    assert position.input_from == 2
    assert position.changelog_offset >= last["ends"][0], (position, last)
