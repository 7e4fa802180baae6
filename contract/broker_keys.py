"""The broker keys the deployments set or the rules read, one row each: Kafka's own default (what a
broker runs with when the key is not set, which the pack assumes for a key it does not find) and
the durable value every deployment of this project sets (the Pulumi program's brokers and the
developer kit's local Apache Kafka alike).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class BrokerKey:
    """One broker key: Kafka's default, this project's value (None: Kafka's), and why."""

    name: str
    kafka_default: str
    durable: str | None
    doc: str


# `durable` values that depend on the cluster's size are filled in by `durable_broker_configs`.
_SIZED = "sized"

KEYS: tuple[BrokerKey, ...] = (
    BrokerKey("default.replication.factor", "1", _SIZED, "every topic on every broker"),
    BrokerKey("min.insync.replicas", "1", _SIZED, "an acks=all write survives a broker's loss"),
    BrokerKey("offsets.topic.replication.factor", "3", _SIZED, "the committed offsets"),
    BrokerKey("transaction.state.log.replication.factor", "3", _SIZED, "the transactions' log"),
    BrokerKey("transaction.state.log.min.isr", "2", _SIZED, "the transactions' log"),
    BrokerKey(
        "unclean.leader.election.enable",
        "false",
        "false",
        "a replica that missed writes never becomes leader: exactly-once needs every commit",
    ),
    BrokerKey(
        "auto.create.topics.enable",
        "true",
        "false",
        "topics come from the reconciler only: a typo in a client must not create one",
    ),
    BrokerKey("group.initial.rebalance.delay.ms", "3000", None, "a cold start waits for members"),
    BrokerKey("group.min.session.timeout.ms", "6000", None, "the classic protocol's bounds"),
    BrokerKey(
        "group.max.session.timeout.ms",
        "1800000",
        "1800000",
        "Kafka's default, made explicit: the processor's session timeout is checked against it",
    ),
    BrokerKey("group.consumer.session.timeout.ms", "45000", None, "KIP-848: the broker's session"),
    BrokerKey("group.consumer.min.session.timeout.ms", "45000", None, "KIP-848's bounds"),
    BrokerKey("group.consumer.max.session.timeout.ms", "60000", None, "KIP-848's bounds"),
    BrokerKey("group.consumer.heartbeat.interval.ms", "5000", None, "KIP-848: the heartbeat"),
    BrokerKey("listeners", "PLAINTEXT://:9092", None, "the listeners (`kafka_security`)"),
    BrokerKey(
        "listener.security.protocol.map",
        "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
        None,
        "each listener's protocol (`kafka_security`)",
    ),
    BrokerKey("security.inter.broker.protocol", "PLAINTEXT", None, "(`kafka_security`)"),
    BrokerKey("ssl.client.auth", "none", None, "(`kafka_security`)"),
    BrokerKey("sasl.enabled.mechanisms", "GSSAPI", None, "(`kafka_security`)"),
    BrokerKey("authorizer.class.name", "", None, "(`kafka_security`)"),
    BrokerKey("allow.everyone.if.no.acl.found", "false", None, "(`kafka_security`)"),
    BrokerKey("super.users", "", None, "(`kafka_security`)"),
)

KAFKA_DEFAULTS: Mapping[str, str] = MappingProxyType({k.name: k.kafka_default for k in KEYS})


def durable_broker_configs(replication_factor: int, min_insync_replicas: int) -> dict[str, str]:
    """What every deployment sets, sized for a cluster that replicates `replication_factor`
    times and acknowledges a write with `min_insync_replicas` in sync."""
    sized = {
        "default.replication.factor": replication_factor,
        "min.insync.replicas": min_insync_replicas,
        "offsets.topic.replication.factor": replication_factor,
        "transaction.state.log.replication.factor": replication_factor,
        "transaction.state.log.min.isr": min_insync_replicas,
    }
    return {
        key.name: str(sized[key.name]) if key.durable == _SIZED else str(key.durable)
        for key in KEYS
        if key.durable is not None
    }
