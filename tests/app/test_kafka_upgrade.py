"""A Kafka upgrade as the StatefulSet rolls a new image: each node stopped and started on the new
release with its storage, the next once every replica is back in sync, under acks=all load; then
`metadata.version` finalized, after which the old release cannot come back. On Apache Kafka's own
jars: the previous release this project ran (`PREVIOUS_VERSION`) to the current one."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from app.clients.waiting import wait_until
from devkit.kafka_release import KAFKA_VERSION, PREVIOUS_VERSION
from devkit.kafka_release import ensure as ensure_release
from devkit.kraft_cluster import KraftCluster, KraftClusterError
from tests.app.processor_harness import read_committed

PARTITIONS = 3


class Load:
    """acks=all, idempotent writes of numbered records until stopped; when each was acked."""

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(
            {"bootstrap.servers": bootstrap_servers, "enable.idempotence": True, "linger.ms": 5}
        )
        self.acked: dict[int, list[tuple[float, int]]] = defaultdict(list)  # partition: (t, n)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="upgrade-load", daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(60)
        self.producer.flush(60)

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.errors.append(error.str())
        else:
            value = message.value() or b""
            self.acked[message.partition() or 0].append((time.monotonic(), int(value)))

    def _run(self) -> None:
        number = 0
        while not self._stop.is_set():
            self.producer.produce(
                self.topic, str(number).encode(), partition=number % PARTITIONS,
                on_delivery=self._delivered,
            )  # fmt: skip
            number += 1
            self.producer.poll(0.002)

    def longest_gap_s(self, since: float) -> dict[int, float]:
        """Per partition, the longest time between two acks after `since`."""
        gaps = {}
        for partition, acks in self.acked.items():
            times = [since] + [t for t, _ in acks if t >= since]
            gaps[partition] = max(b - a for a, b in itertools.pairwise(times))
        return gaps


def test_a_rolling_upgrade_keeps_every_acked_record_and_finalizes_only_after_the_roll() -> None:
    old, new = ensure_release(version=PREVIOUS_VERSION), ensure_release()
    with KraftCluster(release=old) as cluster:
        topic = f"upgrade-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(30)
        before = cluster.metadata_version()
        with Load(cluster.bootstrap_servers, topic) as load:
            wait_until(lambda: len(load.acked) == PARTITIONS, 60, "acks on every partition")
            rolled_at = time.monotonic()
            refused = ""
            for node in reversed(cluster.nodes):  # the StatefulSet's order: highest first
                cluster.upgrade_node(node.node_id, new)
                if node is cluster.nodes[1]:
                    # The Job run too early, with a node still on the old release: Kafka
                    # itself refuses, and nothing changes.
                    with pytest.raises(KraftClusterError) as too_early:
                        cluster.finalize_release(new)
                    refused = str(too_early.value)
            roll_s = time.monotonic() - rolled_at
            # Until finalized the cluster still speaks the old release's metadata.version.
            assert cluster.metadata_version() == before
            started = time.monotonic()
            finalized = cluster.finalize_release(new)
            finalize_s = time.monotonic() - started
            # Again, as a new stack's first Job runs on a cluster already there: nothing to do.
            assert cluster.finalize_release(new) == finalized
            gaps = load.longest_gap_s(rolled_at)
        print(
            f"\nApache Kafka {PREVIOUS_VERSION} -> {KAFKA_VERSION}: 3 nodes rolled in "
            f"{roll_s:.0f} s under acks=all load; metadata.version {before} -> {finalized} "
            f"by the stack's Job command in {finalize_s:.1f} s (a node on {PREVIOUS_VERSION}: "
            + next((line for line in refused.splitlines() if "metadata.version" in line), "?")
            + "); "
            "longest time without an ack per partition: "
            + " ".join(f"{p}:{g:.1f}" for p, g in sorted(gaps.items()))
        )
        assert finalized != before
        assert "metadata.version" in refused, refused
        assert finalized.startswith(".".join(KAFKA_VERSION.split(".")[:2]))
        assert load.errors == []
        acked = sorted(n for acks in load.acked.values() for _, n in acks)
        read = [int(r.value or b"") for r in read_committed(cluster.bootstrap_servers, topic)]
        assert sorted(read) == acked

        # Finalized: a node of the old release no longer starts on this storage, and says why.
        victim = cluster.nodes[-1]
        cluster.stop_node(victim.node_id)
        logs = (victim.log_dir / "server.log", victim.console_path)
        offsets = [path.stat().st_size for path in logs]
        victim.release = old
        cluster.start_node(victim.node_id)
        process = victim.process
        assert process is not None
        assert process.wait(120) != 0
        victim.process = None
        # What 4.1.1 says: it cannot read the newer metadata ("UnsupportedVersionException:
        # Can't read version 4 of BrokerEndpoint"), or names the metadata.version.
        said = [
            line
            for path, offset in zip(logs, offsets, strict=True)
            for line in path.read_bytes()[offset:].decode(errors="replace").splitlines()
            if any(
                reason in line
                for reason in ("UnsupportedVersion", "metadata.version", "MetadataVersion")
            )
            and ("ERROR" in line or "Exception" in line)
        ]
        assert said, cluster.log_tails()
        print(f"Apache Kafka {PREVIOUS_VERSION} on the finalized storage: {said[0]}")
