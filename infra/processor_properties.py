"""The processor's properties file (`processor.properties`), rendered from the stack config.

The layout follows Kafka Streams: common keys plain, consumer settings prefixed `consumer.`,
producer settings `producer.`, Spark settings under their own `spark.` names. `${env:NAME}` is
Kafka's EnvVarConfigProvider syntax, resolved by the processor from the pod's environment.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.topic_specs import TopicRole
from infra.config import StackConfig

STATE_DIR = "/var/lib/processor"
HEALTH_PORT = 8080
PROPERTIES_DIR = "/etc/processor"
PROPERTIES_FILE = "processor.properties"

# Kafka's default heartbeat; the session timeout here is minutes, so a third of it would let a
# member miss a rebalance for far too long.
HEARTBEAT_INTERVAL_MS = 3000


def processor_properties(config: StackConfig, bootstrap_servers: str) -> dict[str, str]:
    """Every processor setting for this stack, the stack's `properties` overrides applied last."""
    processor = config.processor
    topics = {spec.role: spec.name for spec in config.topic_specs}
    session_timeout_ms = processor.computed_session_timeout_ms
    consumer = {
        "consumer.group.protocol": "classic",
        "consumer.session.timeout.ms": str(session_timeout_ms),
        "consumer.heartbeat.interval.ms": str(min(HEARTBEAT_INTERVAL_MS, session_timeout_ms // 3)),
        # Only the partitions that move pause during a rebalance.
        "consumer.partition.assignment.strategy": "cooperative-sticky",
        "consumer.isolation.level": "read_committed",
        "consumer.max.poll.interval.ms": "300000",
        "consumer.enable.auto.commit": "false",
    }
    if processor.stateful:
        # Static membership: a pod that restarts within the session timeout keeps its partitions.
        consumer["consumer.group.instance.id"] = "${env:POD_NAME}"
    properties = {
        "application.id": processor.application_id,
        "bootstrap.servers": bootstrap_servers,
        "input.topic": topics[TopicRole.INPUT],
        "output.topic": topics[TopicRole.OUTPUT],
        "changelog.topic": topics[TopicRole.CHANGELOG],
        "dlq.topic": topics[TopicRole.DLQ],
        "processing.guarantee": "exactly_once_v2",
        "stateful": str(processor.stateful).lower(),
        "state.dir": STATE_DIR,
        "health.port": str(HEALTH_PORT),
        "trigger.interval.ms": "1000",
        "max.records.per.batch": "50000",
        **consumer,
        "producer.transactional.id": "${env:POD_NAME}",
        "producer.transaction.timeout.ms": "60000",
        "producer.acks": "all",
        "producer.enable.idempotence": "true",
        "spark.master": f"local[{processor.cores}]",
        # About twice the cores: the default 200 made each batch about 7x slower. Fixed in the
        # checkpoint at first start.
        "spark.sql.shuffle.partitions": str(2 * processor.cores),
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.local.dir": "/tmp/spark",
    }
    return {**properties, **processor.properties}


def format_properties(properties: Mapping[str, str]) -> str:
    """Java properties text, one `key=value` a line, in the given order."""
    lines = []
    for key, value in properties.items():
        escaped = value.replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"{key}={escaped}")
    return "\n".join(lines) + "\n"


def parse_properties(text: str) -> dict[str, str]:
    """The inverse of `format_properties` (comments and blank lines skipped)."""
    properties = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        key, _, value = stripped.partition("=")
        properties[key.strip()] = value.strip().replace("\\n", "\n").replace("\\\\", "\\")
    return properties
