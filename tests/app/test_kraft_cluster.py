"""The Apache Kafka test cluster is what the production design says: three KRaft nodes, topics
replicated three times with min.insync.replicas 2, and acks=all writes that survive one node."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigEntry, ConfigResource, NewTopic

from app.clients.waiting import wait_until
from devkit.kraft_cluster import SHUTDOWN_TIMEOUT_S, KraftCluster
from devkit.kraft_shutdown import SHUTDOWN_APPROVED


def create_topic(admin: AdminClient, partitions: int) -> str:
    """A fresh topic with the broker's default replication factor (the cluster's defaults)."""
    name = f"kraft-test-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions)])[name].result(30)
    # The controller answers before every broker knows the topic: wait until the metadata has
    # a leader for each partition, as the topic reconciler does.

    def led() -> bool:
        try:
            found = admin.list_topics(name, timeout=10).topics.get(name)
        except KafkaException as exc:  # UNKNOWN_TOPIC_OR_PART from a broker not told yet
            found = None
            print(f"topic {name} not known yet: {exc.args[0].str()}")
        leaders = [p.leader for p in found.partitions.values()] if found else []
        return len(leaders) == partitions and min(leaders) >= 0

    wait_until(led, 30, f"a leader for every partition of topic {name}", interval_s=0.2)
    return name


def test_every_node_is_a_registered_broker(kraft_cluster: KraftCluster) -> None:
    admin = AdminClient({"bootstrap.servers": kraft_cluster.bootstrap_servers})
    cluster = admin.describe_cluster(request_timeout=10).result()
    assert sorted(node.id for node in cluster.nodes) == [1, 2, 3]
    assert cluster.cluster_id == kraft_cluster.cluster_id


def test_new_topic_gets_three_replicas_and_min_insync_two(kraft_cluster: KraftCluster) -> None:
    admin = AdminClient({"bootstrap.servers": kraft_cluster.bootstrap_servers})
    topic = create_topic(admin, partitions=3)

    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    assert [sorted(p.replicas) for p in partitions] == [[1, 2, 3]] * 3
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described: dict[str, ConfigEntry] = {}

    def describe() -> bool:
        # Asked of any broker: one the controller has not told about the topic yet answers
        # UNKNOWN_TOPIC_OR_PART for a moment.
        try:
            described.update(admin.describe_configs([resource])[resource].result(10))
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
        return bool(described)

    wait_until(describe, 30, f"the configs of topic {topic}", interval_s=0.2)
    configs = described
    assert configs["min.insync.replicas"].value == "2"
    assert configs["unclean.leader.election.enable"].value == "false"


def test_acks_all_produce_survives_the_loss_of_one_node(kraft_cluster: KraftCluster) -> None:
    admin = AdminClient({"bootstrap.servers": kraft_cluster.bootstrap_servers})
    topic = create_topic(admin, partitions=3)
    # Kill the leader of partition 0: its writes must move to a new leader, not fail.
    victim = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    records = 300
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _message: object) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer(
        {
            "bootstrap.servers": kraft_cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
        }
    )
    try:
        killed = time.monotonic()
        kraft_cluster.kill_node(victim)
        for i in range(records):
            producer.produce(
                topic,
                key=str(i).encode(),
                value=str(i).encode(),
                partition=i % 3,
                on_delivery=on_delivery,
            )
        assert producer.flush(60) == 0
        print(
            f"\n{records} acks=all records delivered {time.monotonic() - killed:.1f} s "
            f"after node {victim} was killed"
        )
        assert errors == []

        consumer = Consumer(
            {
                "bootstrap.servers": kraft_cluster.bootstrap_servers,
                "group.id": f"reader-{topic}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([topic])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(seen) < records and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                value = message.value()
                assert value is not None, f"a record of {topic} without a value"  # all have one
                seen.add(value)
        consumer.close()
        assert len(seen) == records
    finally:
        restarted = time.monotonic()
        kraft_cluster.start_node(victim)
        kraft_cluster.wait_until_fully_replicated()
        print(
            f"node {victim} back, all replicas in sync and leading again after "
            f"{time.monotonic() - restarted:.1f} s"
        )
    # Back where they were, as the tests after this one expect: no leader (and so no group
    # coordinator) left to move at the controller's next imbalance check, minutes later.
    partitions = admin.list_topics(timeout=10).topics[topic].partitions.values()
    assert victim in {p.leader for p in partitions}
    assert all(p.leader == p.replicas[0] for p in partitions)


def test_a_shutdown_stops_every_node_by_a_controlled_shutdown_in_time() -> None:
    with KraftCluster() as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        create_topic(admin, partitions=3)  # leaders to move away, as a run's topics have
        report = cluster.shutdown()
        assert all(node.process is None for node in cluster.nodes)
        print(report.describe())
        assert report.late == [], cluster.log_tails()
        # At most the last node outlives its quorum: the approval of two needs the third.
        assert len(report.orphaned) <= 1
        assert sorted(report.stopped + report.orphaned) == [1, 2, 3]
        for node in cluster.nodes:
            log = (node.log_dir / "server.log").read_text(encoding="utf-8")
            assert "Beginning controlled shutdown" in log, f"node {node.node_id}"
            if node.node_id in report.stopped:
                assert SHUTDOWN_APPROVED in log, f"node {node.node_id}"


def test_a_node_whose_quorum_left_is_killed_at_once_and_named() -> None:
    with KraftCluster() as cluster:
        cluster.stop_node(2)
        cluster.stop_node(3)  # approved by nodes 1 and 3: a quorum still
        report = cluster.shutdown()
        assert report.orphaned == [1]
        assert report.stopped == [] and report.late == []
        # Kafka's broker would wait 5 minutes for the approval; the shutdown does not.
        assert report.took_s < SHUTDOWN_TIMEOUT_S / 2
        assert "node(s) 1 killed: their controlled shutdown waited for a controller quorum" in (
            report.describe()
        )
