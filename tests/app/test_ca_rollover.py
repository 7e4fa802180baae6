"""A CA rollover in phases, on a real 3-node Apache Kafka secured as prod renders it.

Every listener is TLS and the brokers' INTERNAL and CONTROLLER listeners require a client
certificate, so the brokers verify each other with the CA in their trust store. Phase 1 puts the
new CA beside the old one in every trust store (the brokers roll, then the clients); phase 2 moves
each broker to a certificate from the new CA, one at a time; phase 3 drops the old CA. At every
step the replicas stay in sync and a client writes with `acks=all`. The last test is the control:
a broker switched in one step (new certificate, only the new CA) is refused by the others and
stays out of every ISR, the split the phases avoid. "Certificates." in docs/security.md names
the settings that run them on a stack (`security.caGeneration`, `security.trustedCaGenerations`).
"""

from __future__ import annotations

import shutil
import socket
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from app.clients.waiting import wait_until
from contract.kafka_security import TLS_CA_FILE
from devkit.kraft_cluster import ClusterSecurity, KraftCluster
from devkit.local_tls import CertificateAuthority, write_broker_tls

pytestmark = [pytest.mark.timeout(900)]

USER, PASSWORD = "writer", "writer-Pw-1"
TOPIC = "ca-rollover"
# A roll waits for every replica to be back in sync: three JVMs share two cores here.
ROLL_DEADLINE_S = 240.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KraftCluster]:
    work = tmp_path_factory.mktemp("ca-rollover")
    security = ClusterSecurity(scram_users={USER: PASSWORD})
    with KraftCluster(work_dir=work / "cluster", security=security) as cluster:
        create_topic_for_writer(cluster)
        yield cluster


def create_topic_for_writer(cluster: KraftCluster) -> None:
    """The topic, replicated to every broker, and the writer's right to write it."""
    admin = AdminClient({**cluster.superuser_configs(), "log_level": 2})
    admin.create_topics([NewTopic(TOPIC, 3, 3, config={"min.insync.replicas": "2"})])[
        TOPIC
    ].result()
    writes = AclBinding(
        ResourceType.TOPIC,
        TOPIC,
        ResourcePatternType.LITERAL,
        f"User:{USER}",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([writes]).values():
        future.result()


def trust_store(cluster: KraftCluster, directory: Path) -> str:
    """A copy of the brokers' current trust bundle: a client reads its CA file once, at start."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{uuid.uuid4().hex}-{TLS_CA_FILE}"
    shutil.copy(cluster.ca_file, path)
    return str(path)


def write_in_sync(cluster: KraftCluster, ca_location: str, records: int = 20) -> None:
    """Write `records` with acks=all from a new client that trusts `ca_location`; every one is
    acknowledged by the in-sync replicas, whichever CA signed their brokers' certificates."""
    producer = Producer(
        {
            **cluster.client_configs(USER, PASSWORD),
            "ssl.ca.location": ca_location,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": 60000,
        }
    )
    failures: list[str] = []
    for i in range(records):
        producer.produce(
            TOPIC,
            key=str(i).encode(),
            value=b"x",
            on_delivery=lambda err, msg: (
                failures.append(f"{msg.partition()}: {err}") if err else None
            ),
        )
    assert producer.flush(90) == 0, "records still unacknowledged after 90 s"
    assert failures == []


def served_issuer(port: int, ca_pem: bytes) -> str:
    """The issuer's CN of the certificate served on `port`, verified against `ca_pem` alone."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        certificate = tls.getpeercert()
    assert certificate, f"127.0.0.1:{port} served no certificate"
    issuer: Any = certificate["issuer"]  # ((("commonName", "..."),),): one pair per RDN
    return str(dict(rdn[0] for rdn in issuer)["commonName"])


def roll(cluster: KraftCluster) -> None:
    """Restart every broker in turn, each after the previous has every replica back in sync."""
    for node in cluster.nodes:
        cluster.restart_node(node.node_id, timeout_s=ROLL_DEADLINE_S)


@pytest.fixture(scope="module")
def authorities(cluster: KraftCluster) -> tuple[bytes, CertificateAuthority]:
    """The cluster's original CA (its certificate) and the CA that replaces it."""
    return cluster.ca_file.read_bytes(), CertificateAuthority.new("ca-rollover generation 2")


def test_phase_1_the_new_ca_joins_every_trust_store_while_the_old_certificates_serve(
    cluster: KraftCluster, authorities: tuple[bytes, CertificateAuthority], tmp_path: Path
) -> None:
    old_ca, new_ca = authorities
    old_client = trust_store(cluster, tmp_path)
    cluster.ca_file.write_bytes(old_ca + new_ca.pem)
    roll(cluster)
    write_in_sync(cluster, old_client)  # the brokers still serve the old CA's certificate
    write_in_sync(cluster, trust_store(cluster, tmp_path))


def test_phase_2_brokers_move_to_the_new_ca_one_at_a_time_and_stay_in_sync(
    cluster: KraftCluster, authorities: tuple[bytes, CertificateAuthority], tmp_path: Path
) -> None:
    old_ca, new_ca = authorities
    client = trust_store(cluster, tmp_path)  # both CAs: the clients rolled after phase 1
    write_broker_tls(cluster.tls_dir, signer=new_ca, trusted=[old_ca, new_ca.pem])
    for node in cluster.nodes:
        cluster.restart_node(node.node_id, timeout_s=ROLL_DEADLINE_S)
        # Mixed: this broker serves the new CA's certificate, the ones not yet rolled the
        # old CA's; replication and the quorum between them held (every replica in sync).
        assert served_issuer(node.broker_port, new_ca.pem) == "ca-rollover generation 2"
        write_in_sync(cluster, client)


def test_phase_3_the_old_ca_leaves_the_trust_stores(
    cluster: KraftCluster, authorities: tuple[bytes, CertificateAuthority], tmp_path: Path
) -> None:
    _, new_ca = authorities
    cluster.ca_file.write_bytes(new_ca.pem)
    roll(cluster)
    write_in_sync(cluster, trust_store(cluster, tmp_path))


def test_a_broker_switched_in_one_step_is_refused_by_the_others(
    cluster: KraftCluster, tmp_path: Path
) -> None:
    client = trust_store(cluster, tmp_path)  # phase 3's: the CA the other brokers still use
    switched, others = cluster.nodes[0], cluster.nodes[1:]
    logs = [node.log_dir / "server.log" for node in others]
    sizes = {path: path.stat().st_size for path in logs}
    # Another CA's certificate and only that CA in the trust store, without phase 1 first.
    write_broker_tls(cluster.tls_dir, signer=CertificateAuthority.new("one-step CA"))
    cluster.stop_node(switched.node_id)
    cluster.start_node(switched.node_id)

    def refused() -> bool:
        return any(
            "SSL handshake failed" in path.read_bytes()[sizes[path] :].decode(errors="replace")
            for path in logs
        )

    wait_until(
        refused,
        ROLL_DEADLINE_S,
        "the other brokers to refuse the switched broker's TLS",
        interval_s=0.5,
    )
    admin = AdminClient({**cluster.client_configs(USER, PASSWORD), "ssl.ca.location": client})
    description = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(timeout=60)
    in_sync = {replica.id for partition in description.partitions for replica in partition.isr}
    assert switched.node_id not in in_sync
