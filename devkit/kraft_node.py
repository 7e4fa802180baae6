"""One node of the local KRaft cluster: the broker settings of the production design (and what the
tests change), its files and its server.properties."""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from contract import kafka_security
from contract.broker_keys import durable_broker_configs
from devkit.kafka_release import KafkaRelease
from devkit.local_ports import HOST

# The broker logs to server.log in its node's folder; the storage tool only its warnings.
BROKER_LOG4J2 = """\
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
"""
TOOLS_LOG4J2 = """\
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = err
"""

# The broker configuration of the production design (DESIGN.md, "Kafka cluster"): the contract's
# durable settings for 3 nodes, and the share coordinator's log (Kafka 4.1 creates it on demand).
PRODUCTION_BROKER_CONFIGS: Mapping[str, str] = {
    **durable_broker_configs(replication_factor=3, min_insync_replicas=2),
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}

# What differs for tests, and why: nothing here changes a semantic the tests check.
TEST_BROKER_CONFIGS: Mapping[str, str] = {
    # A test group forms at once; production stacks wait a few seconds for a cold start.
    "group.initial.rebalance.delay.ms": "0",
    # Let groups of the consumer protocol (KIP-848) use session timeouts and heartbeats as short
    # as the classic protocol allows (defaults: at least 45 s and 5 s), to keep tests short.
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.min.heartbeat.interval.ms": "250",
    # The same for Kafka Streams' streams groups (KIP-1071), the benchmarks' reference.
    "group.streams.min.session.timeout.ms": "6000",
    "group.streams.min.heartbeat.interval.ms": "250",
    # The internal topics are created on first use (the first group, the first transaction):
    # 6 partitions instead of 50 make that a second on a new cluster instead of several.
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.num.partitions": "6",
    # Fewer threads than the defaults (3 network, 8 I/O): three brokers share two cores.
    "num.network.threads": "2",
    "num.io.threads": "2",
}


def kafka_uuid() -> str:
    """A random id in Kafka's text form (base64url of 16 bytes, no padding), as
    `kafka-storage.sh random-uuid` prints it; like Kafka, never one starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass
class KraftNode:
    """One combined broker+controller process and the files that belong to it."""

    node_id: int
    broker_port: int
    controller_port: int
    directory: Path
    # The INTERNAL (inter-broker, SSL) listener's port of a secured cluster; 0 without security.
    internal_port: int = 0
    directory_id: str = field(default_factory=kafka_uuid)
    process: subprocess.Popen[bytes] | None = None
    # The release this node runs once `upgrade_node` moved it; None: the cluster's.
    release: KafkaRelease | None = None

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def log_dir(self) -> Path:
        """Where Kafka's log4j files go (server.log, controller.log, ...)."""
        return self.directory / "logs"

    @property
    def console_path(self) -> Path:
        """The process's stdout and stderr (JVM errors before logging starts land here)."""
        return self.directory / "console.log"

    @property
    def controller_endpoint(self) -> str:
        return f"{HOST}:{self.controller_port}"

    @property
    def admin_endpoint(self) -> str:
        """Where the cluster's own checks connect: INTERNAL when secured, else the broker port."""
        return f"{HOST}:{self.internal_port or self.broker_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def server_properties(
    node: KraftNode, voters: str, broker_configs: Mapping[str, str], tls_dir: Path | None
) -> str:
    """The node's server.properties: a combined broker+controller of the quorum at `voters`,
    secured as prod is when `tls_dir` holds the cluster's TLS files, plain otherwise."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.bootstrap.servers": voters,
        **_listener_settings(node, tls_dir),
        "log.dirs": str(node.data_dir),
        **broker_configs,
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def _listener_settings(node: KraftNode, tls_dir: Path | None) -> dict[str, str]:
    if tls_dir is None:
        return {
            "listeners": f"PLAINTEXT://{HOST}:{node.broker_port},"
            f"CONTROLLER://{node.controller_endpoint}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{node.broker_port},"
            f"CONTROLLER://{node.controller_endpoint}",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        }
    # What prod renders (contract.kafka_security), on this node's loopback ports.
    ports = (node.broker_port, node.internal_port, node.controller_port)
    return {
        "listeners": kafka_security.listeners(*ports, host=HOST),
        "advertised.listeners": kafka_security.listeners(*ports, host=HOST),
        **kafka_security.broker_security_configs(kafka_security.SASL_SSL, str(tls_dir)),
    }
