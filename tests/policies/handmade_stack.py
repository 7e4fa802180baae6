"""A small compliant stack built by hand in the shapes the Pulumi program registers.

The rule tests mutate copies of it, so each rule is proven on its own, independently of
`infra/`; the tests in test_real_stacks.py then run the same pack over the real recordings.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PROJECT = "stateful-streaming"
NAMESPACE = "streaming"

PROCESSOR_PROPERTIES = """\
# processor.properties (the contract shared by infra, app and policies)
application.id=page-view-counter
bootstrap.servers=kafka.streaming.svc.cluster.local:9092
input.topic=page-views
output.topic=page-view-counts
changelog.topic=page-view-counter-counts-changelog
dlq.topic=page-view-counter-dlq
processing.guarantee=exactly_once_v2
stateful=true
state.dir=/var/lib/processor
consumer.group.instance.id=${env:POD_NAME}
consumer.group.protocol=classic
consumer.session.timeout.ms=200000
consumer.heartbeat.interval.ms=10000
consumer.partition.assignment.strategy=cooperative-sticky
consumer.isolation.level=read_committed
spark.sql.streaming.stateStore.providerClass=\
org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider
spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=true
num.standby.replicas=1
"""


@dataclass
class Resource:
    """The fields of `infra.render.RecordedResource` the evaluation reads."""

    type: str
    name: str
    props: dict[str, Any]
    parent: str | None = None
    custom_timeouts: dict[str, str] | None = None
    protect: bool = False
    dependencies: tuple[str, ...] = field(default_factory=tuple)

    @property
    def urn(self) -> str:
        return f"urn:pulumi:test::{PROJECT}::{self.type}::{self.name}"


def _meta(name: str, **labels: str) -> dict[str, Any]:
    return {"name": name, "namespace": NAMESPACE, "labels": labels or {"app": name}}


def _security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def _container(name: str, image: str, command: list[str], env: list[dict[str, Any]], probe: dict):
    return {
        "name": name,
        "image": image,
        "args": command,
        "env": env,
        "resources": {
            "requests": {"cpu": "500m", "memory": "2Gi"},
            "limits": {"memory": "2Gi"},
        },
        "securityContext": _security(),
        "startupProbe": {**probe, "periodSeconds": 5, "failureThreshold": 12},
        "readinessProbe": {**probe, "periodSeconds": 5},
        "livenessProbe": {**probe, "periodSeconds": 10},
        "volumeMounts": [],
    }


def _statefulset(name: str, container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(name),
        "spec": {
            "replicas": 3,
            "serviceName": f"{name}-headless",
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "RollingUpdate"},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Retain",
                "whenScaled": "Retain",
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}],
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 90,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "labelSelector": {"matchLabels": {"app": name}},
                                    "topologyKey": "kubernetes.io/hostname",
                                }
                            ]
                        }
                    },
                    "topologySpreadConstraints": [
                        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone"}
                    ],
                    "containers": [container],
                    "volumes": [],
                },
            },
            **spec,
        },
    }


def _headless(name: str, publish_not_ready: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"clusterIP": "None", "selector": {"app": name}}
    if publish_not_ready:
        spec["publishNotReadyAddresses"] = True
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(f"{name}-headless"),
        "spec": spec,
    }


def _pdb(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": name}}},
    }


KAFKA_ENV = {
    "KAFKA_PROCESS_ROLES": "broker,controller",
    "KAFKA_DEFAULT_REPLICATION_FACTOR": "3",
    "KAFKA_MIN_INSYNC_REPLICAS": "2",
    "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "3",
    "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "3",
    "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "2",
    "KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE": "false",
    "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
    "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "3000",
    "KAFKA_GROUP_MAX_SESSION_TIMEOUT_MS": "1800000",
    "KAFKA_HEAP_OPTS": "-Xms1g -Xmx1g",
}

TOPICS = {
    "topics": [
        {
            "name": "page-views",
            "partitions": 6,
            "replication_factor": 3,
            "role": "input",
            "configs": {"min.insync.replicas": "2"},
        },
        {
            "name": "page-view-counts",
            "partitions": 6,
            "replication_factor": 3,
            "role": "output",
            "configs": {"min.insync.replicas": "2", "cleanup.policy": "compact"},
        },
        {
            "name": "page-view-counter-counts-changelog",
            "partitions": 6,
            "replication_factor": 3,
            "role": "changelog",
            "configs": {
                "min.insync.replicas": "2",
                "cleanup.policy": "compact",
                "segment.bytes": "67108864",
            },
        },
        {
            "name": "page-view-counter-dlq",
            "partitions": 1,
            "replication_factor": 3,
            "role": "dlq",
            "configs": {"min.insync.replicas": "2"},
        },
    ]
}


def handmade_stack() -> list[Resource]:
    """Kafka, topics and the processor, compliant with every rule at its default threshold."""
    kafka_container = _container(
        "kafka",
        "apache/kafka:4.1.0",
        ["/etc/kafka/docker/run"],
        [{"name": k, "value": v} for k, v in KAFKA_ENV.items()],
        {"exec": {"command": ["/opt/kafka/bin/kafka-broker-api-versions.sh"]}},
    )
    kafka = _statefulset("kafka", kafka_container, podManagementPolicy="Parallel")
    kafka["spec"]["serviceName"] = "kafka-headless"

    processor_container = _container(
        "processor",
        "ghcr.io/example/processor:0.1.0",
        ["python", "-m", "app.processor", "--properties", "/etc/processor/processor.properties"],
        [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            },
        ],
        {"httpGet": {"path": "/ready", "port": 8080}},
    )
    processor_container["volumeMounts"] = [
        {"name": "state", "mountPath": "/var/lib/processor"},
        {"name": "config", "mountPath": "/etc/processor"},
    ]
    processor = _statefulset("page-view-counter", processor_container, minReadySeconds=30)
    processor["spec"]["volumeClaimTemplates"] = [{"metadata": {"name": "state"}, "spec": {}}]
    processor["spec"]["template"]["spec"]["volumes"] = [
        {"name": "config", "configMap": {"name": "page-view-counter-config"}}
    ]
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta("page-view-counter-config"),
        "data": {"processor.properties": PROCESSOR_PROPERTIES},
    }
    topics = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta("topics-specs"),
        "data": {"topics.json": json.dumps(TOPICS)},
    }
    # Roll budgets: kafka 90 + 0+12x5 + 0 = 150 s x 3; processor 90 + 60 + 30 = 180 s x 3.
    return [
        Resource(
            "kubernetes:apps/v1:StatefulSet", "kafka", kafka, custom_timeouts={"update": "30m"}
        ),
        Resource("kubernetes:core/v1:Service", "kafka-headless", _headless("kafka", True)),
        Resource("kubernetes:policy/v1:PodDisruptionBudget", "kafka", _pdb("kafka")),
        Resource("kubernetes:core/v1:ConfigMap", "topics-specs", topics),
        Resource(
            "kubernetes:apps/v1:StatefulSet",
            "processor",
            processor,
            custom_timeouts={"update": "30m"},
        ),
        Resource(
            "kubernetes:core/v1:Service", "processor-headless", _headless("page-view-counter")
        ),
        Resource(
            "kubernetes:policy/v1:PodDisruptionBudget", "processor", _pdb("page-view-counter")
        ),
        Resource("kubernetes:core/v1:ConfigMap", "processor-config", config_map),
    ]


def changed(
    resources: list[Resource], name: str, edit: Callable[[Resource], Any], type_suffix: str = ""
) -> list[Resource]:
    """A deep copy of `resources` where `edit` has changed the resource with that logical name."""
    result = copy.deepcopy(resources)
    matches = [r for r in result if r.name == name and r.type.endswith(type_suffix)]
    assert len(matches) == 1, f"{len(matches)} resources named {name!r}{type_suffix}"
    edit(matches[0])
    return result
