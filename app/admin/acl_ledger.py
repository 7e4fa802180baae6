"""The ACL ledger: a compacted topic (`ACL_LEDGER_TOPIC`) where the reconciler records each ACL it
created, keyed by the ACL itself, and a tombstone when it deletes one. The ledger is how the
reconciler knows an ACL is its own to delete; any other is refused (`app.admin.acl_reconciler`)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from app.admin.topic_reconciler import REQUEST_TIMEOUT_S, error_text
from contract.acl_specs import ACL_LEDGER_READER_GROUP, ACL_LEDGER_TOPIC, AclSpec

log = logging.getLogger(__name__)


def ledger_key(spec: AclSpec) -> bytes:
    """The ledger's key (and value) of `spec`: its JSON, keys sorted, so one ACL is one key."""
    return json.dumps(spec.to_dict(), sort_keys=True).encode()


def read_ledger(
    client_config: Mapping[str, str], timeout_s: float = REQUEST_TIMEOUT_S
) -> frozenset[AclSpec] | None:
    """The ACLs the ledger records as created (latest record per key, tombstones drop); None
    when the ledger topic does not exist yet."""
    consumer = Consumer(
        {
            **client_config,
            # librdkafka's consumer needs a group id and looks up its coordinator even when only
            # assigned (no join, no commit): the reconciler may DESCRIBE this one group.
            "group.id": ACL_LEDGER_READER_GROUP,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        metadata = consumer.list_topics(ACL_LEDGER_TOPIC, timeout=timeout_s).topics.get(
            ACL_LEDGER_TOPIC
        )
        if metadata is None or metadata.error is not None:
            return None
        ends = {}
        for partition in metadata.partitions:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(ACL_LEDGER_TOPIC, partition), timeout=timeout_s, cached=False
            )
            if high > low:
                ends[partition] = high
        entries: dict[bytes, AclSpec | None] = {}
        consumer.assign([TopicPartition(ACL_LEDGER_TOPIC, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"reading the ACL ledger {ACL_LEDGER_TOPIC}: partitions {sorted(ends)} "
                    f"not read to their end within {timeout_s:g} s"
                )
            for message in consumer.consume(500, 1.0):
                error = message.error()
                partition, offset = message.partition(), message.offset()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                if error is None and message.key() is not None:
                    value = message.value()
                    entries[message.key() or b""] = (
                        None if value is None else AclSpec.from_dict(json.loads(value))
                    )
                at_end = error is not None or (
                    offset is not None and offset + 1 >= ends.get(partition or 0, 0)
                )
                if partition in ends and at_end:
                    del ends[partition]
        return frozenset(spec for spec in entries.values() if spec is not None)
    finally:
        consumer.close()


def ledger_replication(brokers: int) -> int:
    """The ledger's replication factor: 3, as the pipeline's topics, or all a small cluster has."""
    return min(3, brokers)


def ledger_topic(brokers: int) -> NewTopic:
    """The ledger topic: compacted (the latest record per ACL is what counts), one partition."""
    replication = ledger_replication(brokers)
    return NewTopic(
        ACL_LEDGER_TOPIC,
        num_partitions=1,
        replication_factor=replication,
        config={
            "cleanup.policy": "compact",
            # A write survives one broker lost, and still goes on with one broker down.
            "min.insync.replicas": str(max(1, replication - 1)),
        },
    )


def create_ledger(admin: AdminClient, brokers: int, timeout_s: float) -> list[str]:
    """Create the ledger topic (one already there is fine); one failure text, or none."""
    topic = ledger_topic(brokers)
    log.info("creating the ACL ledger topic %s", ACL_LEDGER_TOPIC)
    future = admin.create_topics([topic], request_timeout=timeout_s)[ACL_LEDGER_TOPIC]
    try:
        future.result()
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            return [
                f"ACL ledger {ACL_LEDGER_TOPIC}: create failed ({error_text(exc)}); nothing "
                "about ACLs was applied. The reconciler needs CREATE on that topic"
            ]
    return []


def record(producer: Producer, spec: AclSpec, created: bool) -> None:
    """Write a ledger record: the spec when created, a tombstone when deleted."""
    # The spec is its own key: one record per ACL, whose latest value compaction keeps.
    entry = ledger_key(spec)
    producer.produce(ACL_LEDGER_TOPIC, key=entry, value=entry if created else None)
    producer.poll(0)
