"""The Kafka facts the processor's design rests on, measured on a real Apache Kafka with plain
confluent-kafka clients.

- A static member (`group.instance.id`) replaced within its session timeout gets its partitions
  back and nobody else notices: no rebalance, no callback on the other members. This is why a
  StatefulSet pod that restarts in time costs no rebalance.
- A static member that stays away longer than its session timeout loses its partitions, and
  only then: with cooperative-sticky the survivors are only *given* partitions, none revoked.
- A dynamic member leaves on close, so its partitions move at once (the stateless case).
- Transactions: a second producer with the same `transactional.id` fences the first, and
  `send_offsets_to_transaction` commits the group's offsets atomically with the output, and
  refuses the group metadata of a member that was replaced (a zombie pod).
- The processor's own group member: a revocation waits for the running transaction, which
  commits with the revoking generation (as Kafka Streams commits in `onPartitionsRevoked`); a
  hand-off member's empty assignment counts only once the group settled so (more members than
  partitions), never the empty first step of a join; a crash of the process that describes the
  group is logged and the next one describes it.

Timings are printed, not asserted; the only bounds asserted are the ones that define the
behaviour ("no callback at all", "not before the session timeout", "far before it").
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from app.clients.waiting import wait_until
from app.processor import assignment_file
from app.processor.group_member import GroupMember
from app.processor.metrics import ProcessorMetrics
from app.processor.planned_batch import BatchProgress, planning

PARTITIONS = 6
# Short enough to keep the module at a few minutes, above the broker's minimum (6 s).
SESSION_TIMEOUT_S = 10.0
# Dynamic members get a long timeout, so "left at once" cannot be mistaken for an expiry.
DYNAMIC_SESSION_TIMEOUT_S = 30.0
# With the classic protocol a member learns that the group is rebalancing from its next
# heartbeat, so every rebalance takes about one to two heartbeat intervals.
HEARTBEAT_INTERVAL_S = 3.0
# librdkafka's statistics carry its join state; a member has settled once its last few
# statistics, taken after the split, all say "steady".
STATISTICS_INTERVAL_MS = 100
STEADY_SAMPLES = 3


@dataclass
class RebalanceEvent:
    at: float
    kind: str  # "assign" or "revoke"
    partitions: frozenset[int]


@dataclass
class Member:
    """A consumer-group member that records every rebalance callback with its time."""

    name: str
    consumer: Consumer = field(init=False)
    events: list[RebalanceEvent] = field(default_factory=list)
    assigned: set[int] = field(default_factory=set)
    join_states: list[str] = field(default_factory=list)  # librdkafka's, one per statistics

    def on_stats(self, stats: str) -> None:
        self.join_states.append(json.loads(stats).get("cgrp", {}).get("join_state", "none"))

    def settled_since(self, samples: int) -> bool:
        """librdkafka's join state was "steady" in every statistics after the first `samples`
        seen, at least STEADY_SAMPLES of them: no rebalance of its own still under way."""
        recent = self.join_states[samples:]
        return len(recent) >= STEADY_SAMPLES and set(recent[-STEADY_SAMPLES:]) == {"steady"}

    def on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        new = frozenset(p.partition for p in partitions)
        self.events.append(RebalanceEvent(time.monotonic(), "assign", new))
        self.assigned |= new

    def on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = frozenset(p.partition for p in partitions)
        self.events.append(RebalanceEvent(time.monotonic(), "revoke", gone))
        self.assigned -= gone

    def events_since(self, since: float) -> list[RebalanceEvent]:
        return [event for event in self.events if event.at >= since]


@dataclass(frozen=True)
class ConsumerGroup:
    """A fresh consumer group with the membership settings under test. With the classic
    protocol the client sets the session timeout, heartbeat and assignor; with the consumer
    protocol (KIP-848) they are group configs on the broker and the assignment is always
    incremental (cooperative)."""

    bootstrap: str
    topic: str
    protocol: str = "classic"
    session_timeout_s: float = SESSION_TIMEOUT_S
    name: str = field(default_factory=lambda: f"group-{uuid.uuid4().hex[:8]}")

    def __post_init__(self) -> None:
        if self.protocol == "consumer":
            self._configure_on_broker()

    def join(self, name: str, static: bool) -> Member:
        """A member subscribed to the topic; static (`group.instance.id` = `name`) or not."""
        member = Member(name)
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.name,
            "group.protocol": self.protocol,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "statistics.interval.ms": STATISTICS_INTERVAL_MS,
            "stats_cb": member.on_stats,
        }
        if self.protocol == "classic":
            config["partition.assignment.strategy"] = "cooperative-sticky"
            config["session.timeout.ms"] = int(self.session_timeout_s * 1000)
            config["heartbeat.interval.ms"] = int(HEARTBEAT_INTERVAL_S * 1000)
        if static:
            config["group.instance.id"] = name
        member.consumer = Consumer(config)
        member.consumer.subscribe(
            [self.topic], on_assign=member.on_assign, on_revoke=member.on_revoke
        )
        return member

    def _configure_on_broker(self) -> None:
        group = ConfigResource(
            "GROUP",
            self.name,
            incremental_configs=[
                ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
                for key, value in {
                    "consumer.session.timeout.ms": str(int(self.session_timeout_s * 1000)),
                    "consumer.heartbeat.interval.ms": str(int(HEARTBEAT_INTERVAL_S * 1000)),
                }.items()
            ],
        )
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        try:
            admin.incremental_alter_configs([group])[group].result(30)
        except KafkaException as exc:
            pytest.skip(
                f"the cluster refuses consumer.session.timeout.ms={self.session_timeout_s:.0f} s"
                f" for a KIP-848 group ({exc.args[0].str()}); lower the broker's "
                "group.consumer.min.session.timeout.ms and group.consumer.min.heartbeat."
                "interval.ms (the test cluster, devkit.kraft_cluster, does)"
            )


def poll_until(
    members: Iterable[Member], done: Callable[[], bool], timeout_s: float, what: str
) -> float:
    """Poll every member (callbacks run inside poll) until `done()`; the time it took."""
    members = list(members)
    started = time.monotonic()
    while not done():
        if time.monotonic() - started > timeout_s:
            state = {
                m.name: f"{sorted(m.assigned)} ({m.join_states[-1] if m.join_states else '?'})"
                for m in members
            }
            raise AssertionError(
                f"{what} not within {timeout_s:.0f} s; assignments (join state): {state}"
            )
        for member in members:
            member.consumer.poll(0.05)
    return time.monotonic() - started


def poll_for(members: Iterable[Member], seconds: float) -> None:
    """Keep the members polling (heartbeating, handling callbacks) for `seconds`."""
    members = list(members)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for member in members:
            member.consumer.poll(0.05)


def create_topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    name = f"semantics-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(30)
    return name


def form_group(group: ConsumerGroup, static: bool) -> tuple[Member, Member]:
    """Members A (the first, so the group leader) and B sharing the topic half and half, both
    settled: a member closed while its own part of a rebalance is still under way (A may not
    have served the split's second step yet when B has) is not what these tests measure."""
    a = group.join("member-a", static)
    poll_until([a], lambda: len(a.assigned) == PARTITIONS, 60, "A owning every partition")
    b = group.join("member-b", static)
    joined = poll_until(
        [a, b],
        lambda: len(a.assigned) == len(b.assigned) == PARTITIONS // 2,
        60,
        "A and B sharing the partitions",
    )
    a_seen, b_seen = len(a.join_states), len(b.join_states)
    settled = poll_until(
        [a, b],
        lambda: a.settled_since(a_seen) and b.settled_since(b_seen),
        60,
        "A and B settling in the split",
    )
    print(
        f"\n[{group.protocol}] B joined, incremental rebalance to 3 + 3: {joined:.2f} s "
        f"(both steady {settled:.2f} s later)"
    )
    return a, b


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    return create_topic(kafka_bootstrap)


@pytest.fixture(params=["classic", "consumer"])
def group_protocol(request: pytest.FixtureRequest) -> str:
    """`group.protocol`: the classic rebalance protocol and the consumer protocol (KIP-848)."""
    return str(request.param)


def test_static_member_replaced_within_session_timeout_causes_no_rebalance(
    kafka_bootstrap: str, topic: str, group_protocol: str
) -> None:
    group = ConsumerGroup(kafka_bootstrap, topic, group_protocol)
    a, b = form_group(group, static=True)
    owned_by_a = set(a.assigned)

    closed = time.monotonic()
    a.consumer.close()  # a static member does not leave the group on close
    replacement = group.join("member-a", static=True)
    rejoined = poll_until(
        [replacement, b], lambda: replacement.assigned == owned_by_a, 30, "A' getting A's share"
    )
    # Stay past the moment the old member's session would have expired.
    poll_for([replacement, b], max(0.0, SESSION_TIMEOUT_S + 2 - (time.monotonic() - closed)))
    print(
        f"[{group_protocol}] static replacement: A' had A's {len(owned_by_a)} partitions "
        f"{rejoined:.2f} s after A closed; B saw {len(b.events_since(closed))} rebalance callbacks"
    )

    assert b.events_since(closed) == []
    assert b.assigned == set(range(PARTITIONS)) - owned_by_a
    assert [e.kind for e in replacement.events] == ["assign"]
    replacement.consumer.close()
    b.consumer.close()


def test_static_member_away_past_session_timeout_loses_only_its_partitions(
    kafka_bootstrap: str, topic: str, group_protocol: str
) -> None:
    group = ConsumerGroup(kafka_bootstrap, topic, group_protocol)
    a, b = form_group(group, static=True)
    owned_by_a = set(a.assigned)
    owned_by_b = set(b.assigned)

    closed = time.monotonic()
    a.consumer.close()
    moved = poll_until(
        [b], lambda: b.assigned == set(range(PARTITIONS)), 3 * SESSION_TIMEOUT_S, "takeover"
    )
    events = b.events_since(closed)
    print(
        f"[{group_protocol}] static member away: B took A's partitions {moved:.2f} s after "
        f"A closed (session.timeout.ms {SESSION_TIMEOUT_S * 1000:.0f}); B's callbacks: "
        f"{[(e.kind, sorted(e.partitions), round(e.at - closed, 2)) for e in events]}"
    )

    # Nothing moves while the member may still come back (its last heartbeat may have been up
    # to one heartbeat interval before the close).
    assert moved >= SESSION_TIMEOUT_S - HEARTBEAT_INTERVAL_S
    # Cooperative: B is only given A's partitions; none of its own is revoked, not even briefly.
    assert {p for e in events if e.kind == "assign" for p in e.partitions} == owned_by_a
    assert all(not e.partitions for e in events if e.kind == "revoke")
    assert owned_by_b <= b.assigned
    b.consumer.close()


def test_dynamic_member_leaves_on_close_and_its_partitions_move_at_once(
    kafka_bootstrap: str, topic: str, group_protocol: str
) -> None:
    group = ConsumerGroup(kafka_bootstrap, topic, group_protocol, DYNAMIC_SESSION_TIMEOUT_S)
    a, b = form_group(group, static=False)
    owned_by_a = set(a.assigned)

    closed = time.monotonic()
    a.consumer.close()  # a dynamic member sends LeaveGroup
    moved = poll_until(
        [b], lambda: b.assigned == set(range(PARTITIONS)), DYNAMIC_SESSION_TIMEOUT_S, "takeover"
    )
    print(
        f"[{group_protocol}] dynamic member left: B took A's partitions {moved:.2f} s after "
        f"A closed (session.timeout.ms {DYNAMIC_SESSION_TIMEOUT_S * 1000:.0f})"
    )

    # Before the earliest moment an expiry could have moved them.
    assert moved < DYNAMIC_SESSION_TIMEOUT_S - HEARTBEAT_INTERVAL_S
    assert {p for e in b.events_since(closed) if e.kind == "assign" for p in e.partitions} == (
        owned_by_a
    )
    b.consumer.close()


def transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 60000,
            "acks": "all",
            "enable.idempotence": True,
        }
    )
    producer.init_transactions(30)
    return producer


def committed_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    """The values a read_committed reader sees in `topic` (waits for `expected` of them,
    then a little longer so that records which should not be there get a chance to show)."""
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    reader.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    quiet_until = float("inf")
    while time.monotonic() < min(deadline, quiet_until):
        message = reader.poll(0.2)
        if message is not None and message.error() is None:
            value = message.value()
            assert value is not None, f"a record of {topic} without a value"  # all have one
            values.append(value)
        if len(values) >= expected and quiet_until == float("inf"):
            quiet_until = time.monotonic() + 2
    reader.close()
    return values


def test_second_producer_with_same_transactional_id_fences_the_first(kafka_bootstrap: str) -> None:
    output = create_topic(kafka_bootstrap, partitions=1)
    transactional_id = f"processor-0-{uuid.uuid4().hex[:6]}"
    zombie = transactional_producer(kafka_bootstrap, transactional_id)
    zombie.begin_transaction()
    zombie.produce(output, b"from the zombie")
    zombie.flush(10)

    successor = transactional_producer(kafka_bootstrap, transactional_id)  # bumps the epoch
    successor.begin_transaction()
    successor.produce(output, b"from the successor")
    successor.commit_transaction(30)

    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    error: KafkaError = raised.value.args[0]
    print(f"\nthe fenced producer's commit failed: {error.name()} (fatal={error.fatal()})")
    assert error.fatal()
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)
    assert committed_values(kafka_bootstrap, output, expected=1) == [b"from the successor"]


def consume(member: Member, count: int) -> list[Message]:
    messages: list[Message] = []
    deadline = time.monotonic() + 30
    while len(messages) < count and time.monotonic() < deadline:
        message = member.consumer.poll(0.2)
        if message is not None and message.error() is None:
            messages.append(message)
    assert len(messages) == count
    return messages


def produce_input(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, key=f"page-{i}".encode(), value=b"1")
    assert producer.flush(30) == 0


def position(message: Message) -> tuple[str, int, int]:
    """A consumed message's topic, partition and offset (the client sets them on every one)."""
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    assert topic is not None and partition is not None and offset is not None, (
        f"a consumed message without its position: {topic}-{partition}@{offset}"
    )
    return topic, partition, offset


def next_offsets(messages: list[Message]) -> list[TopicPartition]:
    """What a consumer commits after `messages`: the next offset to read, per partition."""
    ends: dict[tuple[str, int], int] = {}
    for message in messages:
        topic, partition, offset = position(message)
        ends[(topic, partition)] = max(ends.get((topic, partition), 0), offset + 1)
    return [TopicPartition(topic, partition, end) for (topic, partition), end in ends.items()]


def test_offsets_sent_to_a_transaction_are_committed_with_it(kafka_bootstrap: str) -> None:
    source = create_topic(kafka_bootstrap, partitions=3)
    output = create_topic(kafka_bootstrap, partitions=3)
    produce_input(kafka_bootstrap, source, 30)
    member = ConsumerGroup(kafka_bootstrap, source).join("processor-0", static=True)
    messages = consume(member, 30)
    offsets = next_offsets(messages)

    producer = transactional_producer(kafka_bootstrap, f"processor-0-{uuid.uuid4().hex[:6]}")
    producer.begin_transaction()
    for message in messages:
        _, partition, _ = position(message)
        producer.produce(output, key=message.key(), value=b"1", partition=partition)
    producer.send_offsets_to_transaction(offsets, member.consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)

    committed = member.consumer.committed([TopicPartition(source, p) for p in range(3)], 10)
    assert sorted((tp.partition, tp.offset) for tp in committed) == sorted(
        (tp.partition, tp.offset) for tp in offsets
    )
    assert len(committed_values(kafka_bootstrap, output, expected=30)) == 30
    member.consumer.close()


def test_group_metadata_of_a_replaced_static_member_cannot_commit_offsets(
    kafka_bootstrap: str,
) -> None:
    source = create_topic(kafka_bootstrap, partitions=3)
    produce_input(kafka_bootstrap, source, 3)
    group = ConsumerGroup(kafka_bootstrap, source)
    old = group.join("processor-0", static=True)
    offsets = next_offsets(consume(old, 3))
    zombie_metadata = old.consumer.consumer_group_metadata()
    old.consumer.close()
    # The pod came back under the same name: the old process is a zombie now.
    replacement = group.join("processor-0", static=True)
    poll_until([replacement], lambda: len(replacement.assigned) == 3, 30, "the replacement")

    producer = transactional_producer(kafka_bootstrap, f"processor-0-{uuid.uuid4().hex[:6]}")
    producer.begin_transaction()
    with pytest.raises(KafkaException) as raised:
        producer.send_offsets_to_transaction(offsets, zombie_metadata, 30)
        producer.commit_transaction(30)
    error: KafkaError = raised.value.args[0]
    print(
        f"\nthe zombie's transactional offset commit failed: {error.name()} "
        f"(fatal={error.fatal()}, abortable={error.txn_requires_abort()})"
    )
    committed = replacement.consumer.committed([TopicPartition(source, p) for p in range(3)], 10)
    assert all(tp.offset < 0 for tp in committed)  # nothing was committed for the group
    replacement.consumer.close()


def test_a_revocation_waits_for_the_running_transaction_which_commits_its_offsets(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The processor's `GroupMember`: while the sink holds the partitions, a cooperative
    revocation waits, and the transaction commits with the revoking generation's metadata
    (no deadlock between the sink and the rebalance callback, no abort)."""
    source = create_topic(kafka_bootstrap)
    output = create_topic(kafka_bootstrap, partitions=1)
    group_id = f"member-{uuid.uuid4().hex[:8]}"
    member = owning_member(kafka_bootstrap, source, group_id, tmp_path / "assignment.json")
    producer = transactional_producer(kafka_bootstrap, f"processor-0-{uuid.uuid4().hex[:6]}")
    newcomer = ConsumerGroup(kafka_bootstrap, source, name=group_id).join(
        "processor-1", static=True
    )

    with member.hold() as owned:
        producer.begin_transaction()
        producer.produce(output, value=b"written while a revocation waits")
        # The newcomer's join makes the member revoke half of its partitions: that waits.
        poll_for([newcomer], 3 * HEARTBEAT_INTERVAL_S)
        assert newcomer.assigned == set(), "partitions moved while the transaction held them"
        producer.send_offsets_to_transaction(
            [TopicPartition(source, p, 0) for p in sorted(owned)], member.group_metadata(), 30
        )
        producer.commit_transaction(30)

    poll_until([newcomer], lambda: len(newcomer.assigned) == PARTITIONS // 2, 60, "the handover")
    assert member.assignment() == set(range(PARTITIONS)) - newcomer.assigned
    committed = newcomer.consumer.committed(
        [TopicPartition(source, p) for p in range(PARTITIONS)], 10
    )
    assert [tp.offset for tp in committed] == [0] * PARTITIONS
    assert committed_values(kafka_bootstrap, output, expected=1) == [
        b"written while a revocation waits"
    ]
    newcomer.consumer.close()
    member.close()


def owning_member(
    bootstrap: str,
    topic: str,
    group_id: str,
    channel: Path,
    batches: BatchProgress | None = None,
) -> GroupMember:
    """The processor's `GroupMember`, static, once it owns every partition of `topic`."""
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "group.instance.id": "processor-0",
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": str(int(SESSION_TIMEOUT_S * 1000)),
        "heartbeat.interval.ms": "1000",
        "isolation.level": "read_committed",
        "enable.auto.commit": "false",
    }
    member = GroupMember(config, topic, channel, ProcessorMetrics(), batches=batches).start()
    wait_until(
        lambda: member.assignment() == set(range(PARTITIONS)),
        60,
        "the member to own every partition",
        interval_s=0.2,
        seen=member.assignment,
    )
    return member


def test_a_revocation_during_a_planning_step_waits_for_the_batch_it_plans(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A batch is in flight from the source's planning step, before Spark logs its offsets: a
    revocation that comes while the source plans with the revoked partitions waits for the step
    to record its batch and for that batch to be marked done; only then do they move."""
    source = create_topic(kafka_bootstrap)
    group_id = f"member-{uuid.uuid4().hex[:8]}"
    channel = tmp_path / "assignment.json"
    checkpoint = tmp_path / "checkpoint"
    member = owning_member(kafka_bootstrap, source, group_id, channel, BatchProgress(checkpoint))
    holding, recorded = threading.Event(), threading.Event()

    def plan_a_batch() -> None:  # the source's `latestOffset`, with every partition planned
        with planning(checkpoint) as record:
            holding.set()
            recorded.wait(120)
            record(True)

    planner = threading.Thread(target=plan_a_batch)
    planner.start()
    assert holding.wait(30)
    newcomer = ConsumerGroup(kafka_bootstrap, source, name=group_id).join(
        "processor-1", static=True
    )

    def published() -> set[int]:
        assignment = assignment_file.read(channel)
        return set() if assignment is None else set(assignment.partitions)

    # The revocation withdraws half of the partitions from the next plans at once...
    poll_until([newcomer], lambda: len(published()) == PARTITIONS // 2, 60, "the revocation")
    revoked = set(range(PARTITIONS)) - published()
    # ...and waits for the planning step, then for the batch it planned (batch 0).
    poll_for([newcomer], 2 * HEARTBEAT_INTERVAL_S)
    assert newcomer.assigned == set(), "partitions moved while the source planned with them"
    recorded.set()
    planner.join(30)
    poll_for([newcomer], 2 * HEARTBEAT_INTERVAL_S)
    assert newcomer.assigned == set(), "partitions moved before the planned batch was done"
    for log in ("offsets", "commits"):  # Spark logs batch 0, then marks it done
        (checkpoint / log).mkdir(parents=True, exist_ok=True)
        (checkpoint / log / "0").write_text("v1\n{}\n")
    poll_until([newcomer], lambda: newcomer.assigned == revoked, 60, "the handover")
    newcomer.consumer.close()
    member.close()


class _SettledAtEachRebalance(ProcessorMetrics):
    """The member's metrics, which also note, at each of its assignment changes (on its own
    thread, as the change happens), what it owns and whether that counts as settled."""

    def __init__(self) -> None:
        super().__init__()
        self.member: GroupMember | None = None
        self.changes: list[tuple[frozenset[int], frozenset[int] | None]] = []

    def rebalance(self, assigned: Iterable[Any], revoked: Iterable[Any]) -> None:
        super().rebalance(assigned, revoked)
        if self.member is not None:
            owned = frozenset(self.member.assignment())
            self.changes.append((owned, self.member.settled_assignment()))


def _handoff_member(
    bootstrap: str,
    topic: str,
    group_id: str,
    name: str,
    channel: Path,
    standby_replicas: int = 1,
    metrics: ProcessorMetrics | None = None,
) -> GroupMember:
    """The processor's member as a hand-off instance runs it: dynamic, named by client.id."""
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "client.id": name,
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": str(int(DYNAMIC_SESSION_TIMEOUT_S * 1000)),
        "heartbeat.interval.ms": "1000",
        "isolation.level": "read_committed",
        "enable.auto.commit": "false",
    }
    member = GroupMember(
        config,
        topic,
        channel,
        metrics or ProcessorMetrics(),
        standby_replicas=standby_replicas,
        confirm_empty_assignment=True,
    )
    if isinstance(metrics, _SettledAtEachRebalance):
        metrics.member = member  # before the join: its first change must be noted too
    return member.start()


def test_a_joining_hand_off_member_is_settled_only_once_it_owns_partitions(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Cooperative-sticky hands a joining member nothing first (the partitions it is to take
    are revoked from their owner in that rebalance): that empty step is no settled assignment."""
    topic = create_topic(kafka_bootstrap)
    group = ConsumerGroup(kafka_bootstrap, topic, session_timeout_s=DYNAMIC_SESSION_TIMEOUT_S)
    owner = group.join("owner", static=False)
    poll_until([owner], lambda: len(owner.assigned) == PARTITIONS, 60, "the owner of all")
    metrics = _SettledAtEachRebalance()
    member = _handoff_member(
        kafka_bootstrap, topic, group.name, "processor-1", tmp_path / "a", metrics=metrics
    )
    seen: list[frozenset[int] | None] = []

    def settled_with_partitions() -> bool:
        seen.append(member.settled_assignment())
        return bool(seen[-1])

    try:
        poll_until([owner], settled_with_partitions, 60, "the member's settled assignment")
        # It went through the empty first step (noted as it happened, on the member's thread,
        # not by sampling, which a quick second rebalance can slip past), unsettled there.
        assert metrics.changes[0] == (frozenset(), None), metrics.changes
        assert frozenset() not in seen, seen
        assert member.assignment() == set(range(PARTITIONS)) - owner.assigned
    finally:
        member.close()
        owner.consumer.close()


def test_a_hand_off_member_beyond_the_partition_count_settles_owning_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, partitions=2)
    group = ConsumerGroup(kafka_bootstrap, topic, session_timeout_s=DYNAMIC_SESSION_TIMEOUT_S)
    owners = [group.join(f"owner-{i}", static=False) for i in range(2)]
    poll_until(owners, lambda: all(len(o.assigned) == 1 for o in owners), 60, "one each")
    member = _handoff_member(kafka_bootstrap, topic, group.name, "processor-2", tmp_path / "a")
    try:
        poll_until(owners, lambda: member.settled_assignment() == frozenset(), 60, "settled")
        assert member.assignment() == set()
        assert sorted(p for o in owners for p in o.assigned) == [0, 1]
    finally:
        member.close()
        for owner in owners:
            owner.consumer.close()


def test_hand_off_members_leaving_at_once_hand_every_partition_over_and_close(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Two of three hand-off members stop together (the end of a local run, a scale-down): each
    gives its partitions back before it closes, however the rebalances of the other's leave
    interleave with its own, and the third owns them all long before a session could expire."""
    topic = create_topic(kafka_bootstrap)
    group_id = f"group-{uuid.uuid4().hex[:8]}"
    members = [
        _handoff_member(kafka_bootstrap, topic, group_id, f"processor-{i}", tmp_path / str(i))
        for i in range(3)
    ]
    stayer, *leavers = members
    try:
        wait_until(
            lambda: (
                sorted(p for m in members for p in m.assignment()) == list(range(PARTITIONS))
                and all(m.assignment() for m in members)
            ),
            60,
            "the 3 members sharing the partitions",
        )
        started = time.monotonic()
        for member in leavers:
            member.leave()
        threads = [threading.Thread(target=member.close) for member in leavers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(DYNAMIC_SESSION_TIMEOUT_S)
        closed = time.monotonic() - started
        assert not any(member._thread.is_alive() for member in leavers), "a close hung"
        assert all(member.assignment() == set() for member in leavers)
        wait_until(
            lambda: stayer.assignment() == set(range(PARTITIONS)),
            DYNAMIC_SESSION_TIMEOUT_S - HEARTBEAT_INTERVAL_S,
            "the stayer owning every partition",
        )
        print(
            f"2 hand-off members left at once: closed in {closed:.2f} s, the third owned "
            f"everything {time.monotonic() - started:.2f} s after the leave"
        )
    finally:
        for member in members:
            member.close()


def _describer_pids() -> set[int]:
    """This process's children that describe a group (`app.processor.group_describer`)."""
    pids = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii") as stat:
                parent = int(stat.read().rsplit(") ", 1)[1].split()[1])
            with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                command = cmdline.read()
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
        if parent == os.getpid() and b"app.processor.group_describer" in command:
            pids.add(int(entry.name))
    return pids


def _replaced(crashed: int) -> bool:
    """Whether a describing process other than `crashed` runs."""
    return bool(_describer_pids() - {crashed})


def test_a_crash_of_the_group_description_is_a_logged_retry_not_the_members_end(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """librdkafka 2.16.0 crashed in describe_consumer_groups (a segfault, an assertion) around
    a coordinator change: the member describes the group in a child process, so a crash there
    (here: the child killed as a crash would end it) leaves the member in the group, and the
    next description, in a new process, still follows the group's changes."""
    caplog.set_level(logging.WARNING, logger="app.processor.group_describer")
    topic = create_topic(kafka_bootstrap)
    group = ConsumerGroup(kafka_bootstrap, topic, session_timeout_s=DYNAMIC_SESSION_TIMEOUT_S)
    channel = tmp_path / "assignment.json"
    member = _handoff_member(kafka_bootstrap, topic, group.name, "processor-0", channel)
    others: list[Member] = []

    def standby() -> set[int]:
        published = assignment_file.read(channel)
        return set(published.standby) if published is not None else set()

    def join_other() -> Member:
        other = group.join("other", static=False)
        others.append(other)
        # The ring puts the other member after this one: this one keeps the other's copies.
        poll_until(
            [other],
            lambda: len(other.assigned) == PARTITIONS // 2 and standby() == other.assigned,
            60,
            "the member keeping the other member's copies",
        )
        return other

    try:
        first = join_other()
        for crash in (signal.SIGSEGV, signal.SIGABRT, signal.SIGSEGV):
            (crashed,) = _describer_pids()
            os.kill(crashed, crash)
            # A new process describes the group at the next request (every 5 s at most).
            poll_until(
                [first],
                partial(_replaced, crashed),
                60,
                f"a process to describe the group after {crash.name} ended pid {crashed}",
            )
        assert member.assignment() == set(range(PARTITIONS)) - first.assigned
        # The group changes after the crashes: the descriptions follow it.
        first.consumer.close()
        wait_until(
            lambda: member.assignment() == set(range(PARTITIONS)),
            60,
            "the member owning all",
            interval_s=0.5,
        )
        join_other()
    finally:
        member.close()
        for other in others:
            other.consumer.close()
    crashes = [r.getMessage() for r in caplog.records if "before answering" in r.getMessage()]
    assert len(crashes) == 3, crashes
    assert "ended with signal SIGSEGV" in crashes[0] and "signal SIGABRT" in crashes[1]
    assert _describer_pids() == set()  # closed with the member
