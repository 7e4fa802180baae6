"""A broker is ready when it is an unfenced member of the cluster and in sync on what it hosts.

Node 1 of the tests' 3-node Apache Kafka (PLAINTEXT) shows the answers and the HTTP endpoint; a
restart shows the point of it: a restarted broker is not ready until it is back in every ISR,
and the others stay ready meanwhile. The secured cluster's sidecars (their own user, the
bootstrap ACLs, the certificates' expiry) are tested in test_rendered_prod_on_secured_kafka.py.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from app.admin.broker_readiness import (
    OUT_OF_SYNC_METRIC,
    AdminSource,
    BootstrapAcls,
    BrokerReadiness,
    ReadinessCache,
    expiry_metrics,
    judge,
    serve,
    sync_metrics,
)
from app.clients.waiting import wait_until
from devkit.kraft_cluster import KraftCluster
from devkit.local_ports import HOST, free_port

NODE_ID = 1  # the node the judging sidecar sits beside
DEADLINE_S = 180.0


@pytest.fixture(scope="module")
def admin(kraft_cluster: KraftCluster) -> Iterator[AdminClient]:
    """An admin client of node 1 alone, as its readiness sidecar has (`localhost:<port>`)."""
    node = kraft_cluster.node(NODE_ID)
    client = AdminClient({"bootstrap.servers": f"{HOST}:{node.broker_port}"})
    topic = "hosted-by-every-node"
    client.create_topics([NewTopic(topic, 2, 3)])[topic].result(timeout=30)
    # Created is not yet in this broker's metadata: wait until node 1 sees both partitions.
    wait_until(
        lambda: judge(client, NODE_ID).hosted >= 2,
        DEADLINE_S,
        f"{topic} in the metadata",
        interval_s=0.5,
    )
    yield client
    client.delete_topics([topic])[topic].result(timeout=30)


def test_a_broker_in_sync_on_what_it_hosts_is_ready(admin: AdminClient) -> None:
    readiness = judge(admin, NODE_ID)
    assert readiness.ready, readiness.reason
    assert readiness.hosted >= 2 and readiness.lagging == ()
    assert f"in sync on all {readiness.hosted} partitions on node {NODE_ID}" in readiness.reason


def test_a_node_the_cluster_does_not_list_is_not_ready_and_says_so(admin: AdminClient) -> None:
    readiness = judge(admin, 7)
    assert not readiness.ready
    assert "node 7 is not an unfenced broker of the cluster (brokers [1, 2, 3])" in (
        readiness.reason
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "No such file"), ('{"users": [{"name": "x"}]}', "fields must be name, purpose, acls")],
)
def test_a_broker_whose_bootstrap_acls_cannot_be_read_is_not_ready_and_says_which_file(
    admin: AdminClient, tmp_path: Path, content: str | None, problem: str
) -> None:
    path = tmp_path / "bootstrap-acls.json"
    if content is not None:
        path.write_text(content)
    readiness = ReadinessCache(lambda: admin, NODE_ID, bootstrap_acls=BootstrapAcls(path)).current()
    assert not readiness.ready
    assert readiness.reason.startswith(f"bootstrap ACLs {path}: unreadable (")
    assert problem in readiness.reason
    assert "mount the kafka-bootstrap ConfigMap there" in readiness.reason


def test_a_broker_that_does_not_answer_is_not_ready() -> None:
    silent = AdminClient({"bootstrap.servers": f"127.0.0.1:{free_port()}", "log_level": 0})
    readiness = judge(silent, 1, timeout_s=1.0)
    assert not readiness.ready
    assert readiness.reason.startswith("no metadata from the broker")


def test_the_probe_endpoint_answers_as_the_kubelet_reads_it(admin: AdminClient) -> None:
    server = serve(ReadinessCache(lambda: admin, NODE_ID), "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        with urllib.request.urlopen(f"{base}/ready", timeout=30) as response:
            assert response.status == 200
            assert json.loads(response.read())["ready"] is True
        with urllib.request.urlopen(f"{base}/live", timeout=30) as response:
            assert response.status == 200
        with urllib.request.urlopen(f"{base}/metrics", timeout=30) as response:
            assert response.status == 200
            # In sync; no TLS, so no certificate to expire and no expiry series.
            families = list(text_string_to_metric_families(response.read().decode()))
            assert [(f.name, [s.value for s in f.samples]) for f in families] == [
                (OUT_OF_SYNC_METRIC, [0.0])
            ]
        unready = serve(ReadinessCache(lambda: admin, 7), "127.0.0.1", 0)
        with unready, pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{unready.port}/ready", timeout=30)
        assert refused.value.code == 503  # the kubelet's "not ready"
        assert "node 7" in json.loads(refused.value.read())["reason"]
    finally:
        server.stop()


def test_the_replicas_out_of_sync_are_counted_only_where_the_partitions_were_read() -> None:
    def exported(readiness: BrokerReadiness) -> list[float]:
        return [sample.value for m in sync_metrics(readiness) for sample in m.samples]

    assert exported(BrokerReadiness(True, "in sync", 6)) == [0.0]
    lagging = BrokerReadiness(False, "2 of the 6 ...", 6, ("page-views-0", "page-views-3"))
    assert exported(lagging) == [2.0]
    # The broker did not answer: how many are out of sync is unknown, not 0.
    assert exported(BrokerReadiness(False, "no metadata from the broker: ...")) == []


def test_a_restarted_broker_is_ready_only_once_back_in_every_isr(
    kraft_cluster: KraftCluster,
) -> None:
    cluster = AdminClient({"bootstrap.servers": kraft_cluster.bootstrap_servers})
    topic = "readiness-roll"
    cluster.create_topics([NewTopic(topic, 6, 3)])[topic].result(timeout=60)
    first, rolled = kraft_cluster.nodes[0], kraft_cluster.nodes[-1]
    # Each judge asks the broker it runs beside, as the sidecar does.
    beside_first = AdminClient({"bootstrap.servers": f"{HOST}:{first.broker_port}"})
    beside_rolled = AdminClient(
        {"bootstrap.servers": f"{HOST}:{rolled.broker_port}", "log_level": 0}
    )
    wait_until(lambda: judge(beside_rolled, rolled.node_id).ready, DEADLINE_S, "all in sync",
               interval_s=0.5,
               seen=lambda: judge(beside_rolled, rolled.node_id).reason)  # fmt: skip

    kraft_cluster.stop_node(rolled.node_id)
    try:
        # Writes go on without it (min.insync.replicas=2): its replicas fall behind.
        producer = Producer({"bootstrap.servers": kraft_cluster.bootstrap_servers, "acks": "all"})
        for i in range(600):
            producer.produce(topic, value=b"%d" % i, partition=i % 6)
        assert producer.flush(60) == 0
        assert not judge(beside_rolled, rolled.node_id, timeout_s=2.0).ready
        wait_until(
            lambda: judge(beside_first, rolled.node_id).reason.startswith(
                f"node {rolled.node_id} is not an unfenced broker"
            ),
            DEADLINE_S,
            "the cluster to fence the stopped node",
            seen=lambda: judge(beside_first, rolled.node_id).reason,
            interval_s=0.5,
        )
        assert judge(beside_first, first.node_id).ready  # the others stay ready
    finally:
        kraft_cluster.start_node(rolled.node_id)
    wait_until(lambda: judge(beside_rolled, rolled.node_id).ready, DEADLINE_S,
               "the restarted node to be ready", interval_s=0.5,
               seen=lambda: judge(beside_rolled, rolled.node_id).reason)  # fmt: skip
    # Ready means what it says: the node is in the ISR of every partition it hosts.
    metadata = cluster.list_topics(timeout=30)
    hosted = [
        p for t in metadata.topics.values() for p in t.partitions.values()
        if rolled.node_id in p.replicas
    ]  # fmt: skip
    assert hosted and all(rolled.node_id in p.isrs for p in hosted)
    kraft_cluster.wait_until_fully_replicated(DEADLINE_S)


def test_a_changed_command_config_is_used_only_once_it_connects(
    kraft_cluster: KraftCluster, tmp_path: Path
) -> None:
    """A rotated password reaches the file before the cluster knows it: the open client goes on."""
    config = tmp_path / "readiness-client.properties"
    config.write_text("client.id=broker-readiness\n")
    source = AdminSource(f"{HOST}:{kraft_cluster.node(NODE_ID).broker_port}", config, env={})
    first = source()
    assert source.tls_target is None and expiry_metrics(source.tls_target) == []
    # Settings this PLAINTEXT listener refuses (a TLS handshake) stand in for a new password.
    config.write_text("client.id=broker-readiness\nsecurity.protocol=SSL\n")
    assert source() is first
    assert judge(source(), NODE_ID).ready
    config.write_text("client.id=broker-readiness-2\n")
    assert source() is not first  # it answers: the new client is the one now
    assert judge(source(), NODE_ID).ready
