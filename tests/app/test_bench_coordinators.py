"""The bench's broker roles: which broker coordinates a pipeline's group and its transactions,
read from a real Apache Kafka."""

from __future__ import annotations

import struct
import uuid

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from app.clients.waiting import wait_until
from devkit.bench.coordinators import (
    GROUP_COORDINATOR,
    NEITHER,
    TRANSACTION_COORDINATOR,
    Coordinators,
    find,
    transactional_id,
)


def test_a_transaction_state_key_names_its_transactional_id() -> None:
    name = "page-view-counter-2"
    assert transactional_id(struct.pack(">hh", 0, len(name)) + name.encode()) == name
    assert transactional_id(b"\x00") is None
    assert transactional_id(struct.pack(">hh", 0, 40) + b"short") is None


def test_roles_pick_the_group_coordinator_the_busiest_other_txn_coordinator_or_neither() -> None:
    found = Coordinators(group=1, transactions={1: 3, 2: 1})
    assert found.pick(GROUP_COORDINATOR, [1, 2, 3])[0] == 1
    assert found.pick(TRANSACTION_COORDINATOR, [1, 2, 3])[0] == 2  # not the group's if another
    assert found.pick(NEITHER, [1, 2, 3])[0] == 3


def test_the_coordinators_of_a_pipeline_are_the_brokers_kafka_names(kafka_bootstrap: str) -> None:
    app_id = f"coordinators-{uuid.uuid4().hex[:6]}"
    client = {"bootstrap.servers": kafka_bootstrap}
    producers = []
    for index in range(2):
        producer = Producer({**client, "transactional.id": f"{app_id}-{index}"})
        producer.init_transactions(60)
        producers.append(producer)
    consumer = Consumer({**client, "group.id": app_id, "log_level": "0"})
    consumer.subscribe(["__consumer_offsets"])
    try:
        admin = AdminClient(dict(client))

        def described() -> bool:
            consumer.poll(0.2)
            try:
                group = admin.describe_consumer_groups([app_id])[app_id].result(timeout=30)
            except KafkaException:  # the coordinator still loading the group
                return False
            return bool(group.members)

        wait_until(described, 60, f"group {app_id} to have its member", interval_s=0.5)
        found = find(client, app_id, app_id)
    finally:
        consumer.close()
    group = admin.describe_consumer_groups([app_id])[app_id].result(timeout=30)
    assert found.group == group.coordinator.id
    assert sum(found.transactions.values()) == 2, found
    brokers = {b.id for b in admin.list_topics(timeout=30).brokers.values()}
    assert set(found.transactions) <= brokers
