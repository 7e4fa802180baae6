"""The source's readers on Apache Kafka: the ranges of one task, read with one consumer, the
ranges of different partitions at once, give each range exactly its committed records."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from app.clients.kafka_retry import FIRST_ASK_S, Retrying
from app.pipelines.page_view_count import PageViewCount, PageViews
from app.processor.combine import INPUT, RESTORE
from app.processor.kafka_source import KafkaRange, read_ranges

AGGREGATION = PageViewCount()
SAMPLE = PageViews()
TIMEOUT_S = 60.0
Record = tuple[int, bytes, bytes]  # offset, key, value


@pytest.fixture(scope="module")
def topics(kafka_bootstrap: str) -> Iterator[tuple[str, str]]:
    """A changelog written in transactions (one aborted) and an input written plainly."""
    changelog, input_topic = (f"reads-{name}-{uuid.uuid4().hex[:6]}" for name in ("cl", "in"))
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics(
        [NewTopic(changelog, 3, 3), NewTopic(input_topic, 2, 3)], operation_timeout=30
    ).values():
        future.result()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": changelog})
    producer.init_transactions(TIMEOUT_S)
    for batch in range(12):
        producer.begin_transaction()
        for i in range(90):
            key = SAMPLE.key_name((batch * 7 + i) % 150).encode()
            value = AGGREGATION.changelog_value(batch)  # a count's state: the count
            producer.produce(changelog, key=key, value=value, partition=i % 3)
        if batch == 5:
            assert producer.flush(TIMEOUT_S) == 0  # the aborted records on the log, then the marker
            producer.abort_transaction(TIMEOUT_S)
        else:
            producer.commit_transaction(TIMEOUT_S)
    plain = Producer({"bootstrap.servers": kafka_bootstrap})
    rng = random.Random(5)
    for i in range(3000):
        page = SAMPLE.key_name(i % 40)
        value = SAMPLE.generate_value(page, rng, 1_700_000_000_000 + i)
        plain.produce(input_topic, key=page.encode(), value=value, partition=i % 2)
    assert plain.flush(TIMEOUT_S) == 0
    yield changelog, input_topic
    admin.delete_topics([changelog, input_topic])


def _reader(bootstrap: str, config: Mapping[str, str] | None = None) -> Consumer:
    """A consumer that reads by `assign()` and never commits: a close needs no coordinator
    (librdkafka's close waits for an auto-commit's coordinator without a timeout)."""
    return Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
         **(config or {})}
    )  # fmt: skip


def _committed(bootstrap: str, topic: str, partition: int) -> list[Record]:
    """Every committed record of the partition, by a consumer of its own."""
    consumer = _reader(bootstrap, {"isolation.level": "read_committed"})
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), TIMEOUT_S)
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        records: list[Record] = []
        while consumer.position([TopicPartition(topic, partition)])[0].offset < end:
            for message in consumer.consume(1000, timeout=1.0):
                assert message.error() is None, message.error()
                offset, key, value = message.offset(), message.key(), message.value()
                assert offset is not None and key is not None and value is not None
                records.append((offset, key, value))
        return records
    finally:
        consumer.close()


def _expected(work: KafkaRange, records: Sequence[Record]) -> dict[bytes, tuple[int, int, bytes]]:
    """key -> (records, last offset, value) of the range: the newest value for a restore, the
    encoded fold for input."""
    begin = 0 if work.begin == OFFSET_BEGINNING else work.begin
    rows: dict[bytes, tuple[int, int, Any]] = {}
    for offset, key, value in records:
        if begin <= offset < work.end:
            count, _, partial = rows.get(key, (0, 0, None))
            folded = value if work.kind == RESTORE else AGGREGATION.fold(partial, key, value)
            rows[key] = (count + 1, offset, folded)
    if work.kind == INPUT:
        return {k: (n, o, AGGREGATION.encode_partial(p)) for k, (n, o, p) in rows.items()}
    return rows


def test_ranges_of_several_partitions_read_at_once_fold_exactly_their_committed_records(
    kafka_bootstrap: str, topics: tuple[str, str]
) -> None:
    changelog, input_topic = topics
    committed = {
        (topic, p): _committed(kafka_bootstrap, topic, p)
        for topic, count in ((changelog, 3), (input_topic, 2))
        for p in range(count)
    }
    reader = _reader(
        kafka_bootstrap, {"isolation.level": "read_committed", "fetch.wait.max.ms": "10"}
    )
    in_end = [committed[(input_topic, p)][-1][0] + 1 for p in range(2)]
    ranges = [
        *(KafkaRange(changelog, p, OFFSET_BEGINNING, committed[(changelog, p)][-1][0] + 2,
                     RESTORE, 1) for p in range(3)),  # the last commit marker ends the range
        KafkaRange(input_topic, 0, 0, 600, INPUT, 0),  # a partition split in two ranges
        KafkaRange(input_topic, 0, 600, in_end[0], INPUT, 0),
        KafkaRange(input_topic, 1, 100, in_end[1] - 100, INPUT, 0),  # records past the end
    ]  # fmt: skip
    try:
        # Twice with the same consumer: a range read to its end is paused, and a pause outlives
        # unassign(), so the second read proves the reader leaves its consumer clean.
        for attempt in range(2):
            batches = list(read_ranges(reader, ranges, Retrying(TIMEOUT_S), AGGREGATION))
            assert len(batches) == len(ranges), attempt
            # A partition's ranges come in their order; the batch's own rows say which it is.
            by_partition: dict[tuple[str, int], list[dict]] = {}
            for batch in batches:
                rows = batch.to_pylist()
                assert len({(r["kind"], r["partition"]) for r in rows}) == 1
                assert sum(r["read_us"] for r in rows) > 0
                by_partition.setdefault((rows[0]["kind"], rows[0]["partition"]), []).append(
                    {r["key"]: (r["records"], r["offset"], r["value"]) for r in rows}
                )
            for work in ranges:
                got = by_partition[(work.kind, work.partition)].pop(0)
                assert got == _expected(work, committed[(work.topic, work.partition)]), work
    finally:
        reader.close()


def test_a_restore_of_an_empty_changelog_partition_yields_nothing(
    kafka_bootstrap: str, topics: tuple[str, str]
) -> None:
    changelog, _ = topics
    empty = f"{changelog}-empty"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(empty, 1, 3)], operation_timeout=30)[empty].result()
    reader = _reader(kafka_bootstrap)
    try:
        work = KafkaRange(empty, 0, OFFSET_BEGINNING, 0, RESTORE, 1)
        assert list(read_ranges(reader, [work], Retrying(TIMEOUT_S), AGGREGATION)) == []
    finally:
        reader.close()
        admin.delete_topics([empty])


def test_a_restore_reads_from_each_partitions_log_start_after_deleted_records(
    kafka_bootstrap: str,
) -> None:
    """A restore from the beginning starts where each partition's log starts now, asked of the
    leaders at once: records deleted before it (retention, `deleteRecords`) are not waited for,
    and a partition whose records are all deleted yields nothing."""
    topic = f"reads-deleted-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3)], operation_timeout=30)[topic].result()
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(300):
        key = SAMPLE.key_name(i % 25).encode()
        producer.produce(topic, key=key, value=AGGREGATION.changelog_value(i), partition=i % 3)
    assert producer.flush(TIMEOUT_S) == 0
    deleted = {0: 40, 1: 100}  # partition 1: every record (100 a partition)
    for future in admin.delete_records(
        [TopicPartition(topic, p, offset) for p, offset in deleted.items()]
    ).values():
        future.result()
    reader = _reader(kafka_bootstrap)
    try:
        ranges = [KafkaRange(topic, p, OFFSET_BEGINNING, 100, RESTORE, 1) for p in range(3)]
        batches = list(read_ranges(reader, ranges, Retrying(TIMEOUT_S), AGGREGATION))
        records = {
            rows[0]["partition"]: sum(r["records"] for r in rows)
            for rows in (batch.to_pylist() for batch in batches)
        }
        assert records == {0: 100 - deleted[0], 2: 100}
    finally:
        reader.close()
        admin.delete_topics([topic])


class FirstAskTimesOut:
    """A real consumer whose first `offsets_for_times` times out, as librdkafka's sometimes
    waits about 0.7 s for a new consumer's first lookup (`kafka_retry.FIRST_ASK_S`)."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.asks: list[float] = []

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float) -> Any:
        self.asks.append(timeout)
        if len(self.asks) == 1:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return self.consumer.offsets_for_times(partitions, timeout=timeout)


def test_a_first_offsets_lookup_that_times_out_quickly_is_asked_again_at_once(
    kafka_bootstrap: str, topics: tuple[str, str]
) -> None:
    changelog, _ = topics
    reader = _reader(kafka_bootstrap)
    slow = FirstAskTimesOut(reader)
    episodes: list[str] = []
    try:
        first = Retrying(TIMEOUT_S, on_episode=episodes.append).first_offsets(
            "first offsets",
            cast(Consumer, slow),
            [TopicPartition(changelog, p) for p in range(3)],
            TIMEOUT_S,
        )
    finally:
        reader.close()
    assert first == {(changelog, p): 0 for p in range(3)}
    assert slow.asks == [FIRST_ASK_S, TIMEOUT_S]  # the second ask with the call's whole timeout
    assert episodes == []  # not a retry: no backoff, no warning
