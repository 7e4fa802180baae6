"""Which broker coordinates what for a pipeline: its consumer group, its producers' transactions.

A broker's loss costs a pipeline differently by the role the broker had for it, so the broker
cases of the bench pick their victim by role. The group's coordinator comes from
`DescribeGroups`; a transactional id's coordinator is the leader of the `__transaction_state`
partition that holds the id's record (Kafka places the id by its hash; the record is where it
landed), which works for every client whatever its transactional ids look like (the processor's
are its instances' names, Kafka Streams' `<application.id>-<process id>-<thread>`).
"""

from __future__ import annotations

import struct
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from app.clients.kafka_retry import Retrying

TRANSACTION_STATE_TOPIC = "__transaction_state"
GROUP_COORDINATOR = "group-coordinator"
TRANSACTION_COORDINATOR = "transaction-coordinator"
NEITHER = "neither"
ROLES = (GROUP_COORDINATOR, TRANSACTION_COORDINATOR, NEITHER)


@dataclass(frozen=True)
class Coordinators:
    """A pipeline's coordinators: its group's, and each broker's count of its transactional ids."""

    group: int
    transactions: Mapping[int, int]

    def pick(self, role: str, nodes: Sequence[int]) -> tuple[int, str]:
        """The broker that has `role`, and how it was chosen (for the table's note)."""
        described = f"group coordinator {self.group}, transaction coordinators " + (
            ", ".join(f"{b} ({n} ids)" for b, n in sorted(self.transactions.items())) or "none"
        )
        if role == GROUP_COORDINATOR:
            return self.group, described
        if role == TRANSACTION_COORDINATOR:
            # The one with the most of the pipeline's ids; not the group's if another has any.
            ranked = sorted(
                self.transactions, key=lambda b: (b != self.group, self.transactions[b])
            )
            if not ranked:
                raise LookupError(f"no transactional id of the pipeline found ({described})")
            return ranked[-1], described
        if role == NEITHER:
            free = [n for n in nodes if n != self.group and n not in self.transactions]
            if not free:
                raise LookupError(f"every broker coordinates something ({described})")
            return free[-1], described
        raise ValueError(f"broker role {role!r}; allowed: {', '.join(ROLES)}")


def transactional_id(key: bytes | None) -> str | None:
    """The transactional id a `__transaction_state` record's key names (int16 version, then
    the id as an int16-length string); None for a key of another shape."""
    if key is None or len(key) < 4:
        return None
    (length,) = struct.unpack_from(">h", key, 2)
    if length < 0 or len(key) < 4 + length:
        return None
    return key[4 : 4 + length].decode("utf-8", errors="replace")


def find(
    client: Mapping[str, str], group_id: str, id_prefix: str, timeout_s: float = 30.0
) -> Coordinators:
    """The coordinators of the group `group_id` and of the transactional ids that start with
    `id_prefix`, from the brokers `client` (librdkafka settings) reaches."""
    admin = AdminClient(dict(client))
    # A coordinator that has just moved or started answers "load in progress" for a moment.
    retrying = Retrying(timeout_s, budget_name="the bench's wait for its coordinators")
    description = retrying(
        f"the coordinator of group {group_id}",
        lambda: admin.describe_consumer_groups([group_id])[group_id].result(timeout=timeout_s),
    )
    topic = admin.list_topics(TRANSACTION_STATE_TOPIC, timeout=timeout_s).topics[
        TRANSACTION_STATE_TOPIC
    ]
    leaders = {p.id: p.leader for p in topic.partitions.values()}
    consumer = Consumer(
        {
            **client,
            "group.id": f"coordinators-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        pending = {}  # each partition with records: its end, until read up to it
        for p in leaders:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(TRANSACTION_STATE_TOPIC, p), timeout=timeout_s
            )
            if high > low:
                pending[p] = high
        consumer.assign(
            [TopicPartition(TRANSACTION_STATE_TOPIC, p, 0) for p in pending]  # from the start
        )
        ids: dict[str, int] = {}
        while pending:
            message = consumer.poll(timeout_s)
            if message is None:
                raise TimeoutError(f"{TRANSACTION_STATE_TOPIC}: no record within {timeout_s} s")
            if message.error():
                continue
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None  # a consumed record has both
            name = transactional_id(message.key())
            if name is not None and name.startswith(id_prefix):
                ids[name] = partition
            if offset + 1 >= pending.get(partition, 0):
                pending.pop(partition, None)
    finally:
        consumer.close()
    return Coordinators(
        group=int(description.coordinator.id),
        transactions=Counter(leaders[p] for p in ids.values()),
    )
