"""A small compliant stack built by hand in the shapes the Pulumi program registers.

The rule tests mutate copies of it, so each rule is proven on its own, independently of
`infra/`; the tests in test_real_stacks.py then run the same pack over the real recordings.
Its security is what prod renders (docs/security.md): TLS listeners with SASL/SCRAM for the
clients, StandardAuthorizer, the pipeline's ACLs (`contract.acl_specs`) beside the topic
specs, passwords and the broker's key in Secrets, and in ConfigMaps only `${dir:...}` references to
the files of the mounted Secrets.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contract import container_commands
from contract.acl_specs import BROKER_READINESS_USER, dumps, pipeline_users
from contract.java_properties import format_properties, load_properties
from contract.topic_specs import TopicSpec

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
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.username=page-view-counter
sasl.password=${dir:/etc/kafka-user:password}
ssl.ca.location=/etc/kafka-ca/ca.crt
"""

# The topic reconciler's own client settings (its ConfigMap's client.properties).
RECONCILER_PROPERTIES = """\
bootstrap.servers=kafka.streaming.svc.cluster.local:9092
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.username=topic-reconciler
sasl.password=${dir:/etc/kafka-user:password}
ssl.ca.location=/etc/kafka-ca/ca.crt
"""
# Split so that no secret scanner takes this file for one holding a key.
PEM_PRIVATE_KEY_BLOCK = (
    "-----BEGIN " + "PRIVATE KEY-----\nMIIBfake\n-----END " + "PRIVATE KEY-----\n"
)

# The brokers' image (`kafka.image`): what every container the contract puts on it runs.
KAFKA_IMAGE = (
    "apache/kafka:4.3.1@sha256:77e3df9054047a88b520d0cc46e16696d3b22022e1d580aeccd2632df6532837"
)


@dataclass
class Resource:
    """The fields of `offline.render.RecordedResource` the evaluation reads."""

    type: str
    name: str
    props: dict[str, Any]
    parent: str | None = None
    custom_timeouts: dict[str, str] | None = None
    protect: bool = False
    delete_before_replace: bool = False
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


def _container(
    runs: container_commands.ContainerCommand,
    image: str,
    env: list[dict[str, Any]],
    probe: dict[str, Any],
) -> dict[str, Any]:
    """A container running the contract's `runs` (what `container-commands` requires)."""
    return {
        "name": runs.name,
        "image": image,
        **({"command": list(runs.command)} if runs.command else {}),
        **({"args": list(runs.args)} if runs.args else {}),
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
    wait_for = json.dumps(
        [
            "jsonpath={.status.updatedReplicas}=3",
            "jsonpath={.status.availableReplicas}=3",
        ]
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {**_meta(name), "annotations": {"pulumi.com/waitFor": wait_for}},
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
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 1000,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "serviceAccountName": name,
                    "automountServiceAccountToken": False,
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


def _namespace() -> dict[str, Any]:
    """The stack's namespace, enforcing the restricted Pod Security Standard."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": NAMESPACE,
            "labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/warn": "restricted",
            },
        },
    }


def _service_account(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(name),
        "automountServiceAccountToken": False,
    }


def tcp(*ports: int) -> list[dict[str, Any]]:
    """NetworkPolicy ports."""
    return [{"port": port, "protocol": "TCP"} for port in ports]


# Name lookups, the one destination outside the namespace every pod may reach.
DNS_EGRESS = {
    "to": [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ],
    "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
}


def network_policy(
    name: str, ingress: list[dict[str, Any]], egress: list[dict[str, Any]]
) -> dict[str, Any]:
    """An Ingress and Egress NetworkPolicy for the pods labelled `app: name` (DNS allowed)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(name),
        "spec": {
            "podSelector": {"matchLabels": {"app": name}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": [*egress, DNS_EGRESS],
        },
    }


def _pdb(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": name}}},
    }


# The brokers' server.properties (the broker container's SERVER_PROPERTIES).
BROKER_SETTINGS = {
    "process.roles": "broker,controller",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "unclean.leader.election.enable": "false",
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "3000",
    "group.max.session.timeout.ms": "1800000",
    # Prod's listeners and authorizer (contract.kafka_security.broker_security_configs).
    "listeners": "CLIENT://:9092,INTERNAL://:9094,CONTROLLER://:9093",
    "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL",
    "inter.broker.listener.name": "INTERNAL",
    "controller.listener.names": "CONTROLLER",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "false",
    "super.users": "User:CN=kafka-broker",
    "ssl.keystore.type": "PEM",
    "ssl.keystore.location": "/etc/kafka/tls/tls-combined.pem",
    "ssl.truststore.type": "PEM",
    "ssl.truststore.location": "/etc/kafka/tls/ca.crt",
    "listener.name.client.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.client.scram-sha-256.sasl.jaas.config": (
        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    ),
    "listener.name.client.scram-sha-512.sasl.jaas.config": (
        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    ),
    "listener.name.internal.ssl.client.auth": "required",
    "listener.name.controller.ssl.client.auth": "required",
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


def _secret(name: str, string_data: dict[str, str], secret_type: str = "Opaque") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(name),
        "type": secret_type,
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in string_data.items()},
    }


def acls_json() -> str:
    """The reconciler's acls.json: the pipeline's real users and ACLs, as infra renders them,
    but for the brokers' readiness user: these handmade brokers run no readiness sidecar (the
    rendered prod stack's tests cover it)."""
    topics = [TopicSpec.from_dict(topic) for topic in TOPICS["topics"]]
    users = pipeline_users(application_id="page-view-counter", topics=topics)
    return dumps([user for user in users if user.name != BROKER_READINESS_USER])


def handmade_stack() -> list[Resource]:
    """Kafka, topics and the processor, compliant with every rule at its default threshold."""
    # The image's own start; ready as the program's brokers are, by their readiness sidecar's
    # judgement (which these handmade brokers leave out: the rendered stacks have it).
    kafka_container = _container(
        container_commands.kafka_broker(),
        KAFKA_IMAGE,
        [
            {
                "name": container_commands.SERVER_PROPERTIES_VARIABLE,
                "value": format_properties(BROKER_SETTINGS),
            },
            {"name": container_commands.HEAP_OPTS_VARIABLE, "value": "-Xms1g -Xmx1g"},
        ],
        {"httpGet": {"path": "/ready", "port": container_commands.READINESS_PORT}},
    )
    kafka_container["volumeMounts"] = [{"name": "tls", "mountPath": "/etc/kafka/tls"}]
    kafka = _statefulset("kafka", kafka_container, podManagementPolicy="Parallel")
    kafka["spec"]["serviceName"] = "kafka-headless"
    kafka["spec"]["template"]["spec"]["volumes"] = [
        {"name": "tls", "secret": {"secretName": "kafka-tls"}}
    ]

    processor_container = _container(
        container_commands.processor(),
        f"ghcr.io/example/processor:0.1.0@sha256:{'1' * 64}",
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
        {"name": "kafka-user", "mountPath": "/etc/kafka-user"},
        {"name": "kafka-ca", "mountPath": "/etc/kafka-ca"},
    ]
    processor = _statefulset("page-view-counter", processor_container, minReadySeconds=30)
    processor["spec"]["volumeClaimTemplates"] = [{"metadata": {"name": "state"}, "spec": {}}]
    processor["spec"]["template"]["spec"]["volumes"] = [
        {"name": "config", "configMap": {"name": "page-view-counter-config"}},
        {
            "name": "kafka-user",
            "secret": {
                "secretName": "kafka-user-page-view-counter",
                "items": [{"key": "password", "path": "password"}],
            },
        },
        {
            "name": "kafka-ca",
            "secret": {"secretName": "kafka-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]},
        },
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
        "data": {
            "topics.json": json.dumps(TOPICS),
            "acls.json": acls_json(),
            "client.properties": RECONCILER_PROPERTIES,
        },
    }
    tls = _secret(
        "kafka-tls",
        {
            "tls.crt": "certificate",
            "tls.key": PEM_PRIVATE_KEY_BLOCK,
            "ca.crt": "ca certificate",
            "tls-combined.pem": PEM_PRIVATE_KEY_BLOCK,
        },
        "kubernetes.io/tls",
    )
    brokers = {"podSelector": {"matchLabels": {"app": "kafka"}}}
    kafka_network = network_policy(
        "kafka",
        ingress=[
            {"from": [brokers], "ports": tcp(9092, 9093, 9094)},
            {
                "from": [{"podSelector": {"matchLabels": {"app": "page-view-counter"}}}],
                "ports": tcp(9092),
            },
        ],
        egress=[{"to": [brokers], "ports": tcp(9093, 9094)}],
    )
    processor_network = network_policy(
        "page-view-counter",
        ingress=[
            {
                "from": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                        }
                    }
                ],
                "ports": tcp(8080),
            }
        ],
        egress=[{"to": [brokers], "ports": tcp(9092)}],
    )
    # Roll budgets: kafka 90 + 0+12x5 + 0 = 150 s x 3; processor 90 + 60 + 30 = 180 s x 3.
    return [
        Resource("kubernetes:core/v1:Namespace", "namespace", _namespace()),
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
        Resource("kubernetes:core/v1:ServiceAccount", "kafka-account", _service_account("kafka")),
        Resource(
            "kubernetes:core/v1:ServiceAccount",
            "processor-account",
            _service_account("page-view-counter"),
        ),
        Resource("kubernetes:networking.k8s.io/v1:NetworkPolicy", "kafka-network", kafka_network),
        Resource(
            "kubernetes:networking.k8s.io/v1:NetworkPolicy",
            "processor-network",
            processor_network,
        ),
        Resource("kubernetes:core/v1:Secret", "kafka-tls", tls),
        *(
            Resource(
                "kubernetes:core/v1:Secret",
                f"kafka-user-{user}",
                _secret(f"kafka-user-{user}", {"password": f"generated-{user}-password"}),
            )
            for user in ("page-view-counter", "topic-reconciler", "observer")
        ),
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


Edit = Callable[[Resource], None]


def pod(r: Resource) -> dict[str, Any]:
    """The pod spec of a workload's template."""
    return r.props["spec"]["template"]["spec"]


def first_container(r: Resource) -> dict[str, Any]:
    """The workload's first (main) container."""
    return pod(r)["containers"][0]


def with_env(name: str, value: str | None) -> Edit:
    """Set (or with None remove) a literal env var of the first container."""

    def edit(r: Resource) -> None:
        env = first_container(r)["env"]
        env[:] = [e for e in env if e["name"] != name]
        if value is not None:
            env.append({"name": name, "value": value})

    return edit


def broker_settings(container: Mapping[str, Any]) -> dict[str, str]:
    """A broker container's server.properties, as its SERVER_PROPERTIES holds them."""
    env = {e["name"]: e.get("value") for e in container["env"]}
    return load_properties(env[container_commands.SERVER_PROPERTIES_VARIABLE])


def broker_settings_of(r: Resource) -> dict[str, str]:
    """The brokers' server.properties, as their workload's first container holds them."""
    return broker_settings(first_container(r))


def edit_broker_settings(container: dict[str, Any], changes: Mapping[str, str | None]) -> None:
    """Set (or with None remove) settings of a broker container's SERVER_PROPERTIES, in place."""
    (var,) = [
        e for e in container["env"] if e["name"] == container_commands.SERVER_PROPERTIES_VARIABLE
    ]
    settings = load_properties(var["value"])
    for key, value in changes.items():
        settings.pop(key, None)
        if value is not None:
            settings[key] = value
    var["value"] = format_properties(settings)


def with_broker_setting(key: str, value: str | None) -> Edit:
    """Set (or with None remove) one setting of the brokers' server.properties."""
    return lambda r: edit_broker_settings(first_container(r), {key: value})


def with_properties(replace: Mapping[str, str | None], file: str = "processor.properties") -> Edit:
    """Set (or with None remove) keys of a properties file in a ConfigMap."""

    def edit(r: Resource) -> None:
        lines = r.props["data"][file].replace("\\\n", "").splitlines()
        kept = [line for line in lines if line.split("=", 1)[0] not in replace]
        kept += [f"{k}={v}" for k, v in replace.items() if v is not None]
        r.props["data"][file] = "\n".join(kept) + "\n"

    return edit


def with_acl(
    resource_type: str,
    resource_name: str,
    operation: str,
    pattern_type: str = "LITERAL",
    principal: str = "User:page-view-counter",
) -> Edit:
    """Add an ACL to the reconciler ConfigMap's acls.json, listed under the processor's user."""

    def edit(r: Resource) -> None:
        data = json.loads(r.props["data"]["acls.json"])
        user = next(u for u in data["users"] if u["name"] == "page-view-counter")
        user["acls"].append(
            {
                "principal": principal,
                "resource_type": resource_type,
                "resource_name": resource_name,
                "pattern_type": pattern_type,
                "operation": operation,
            }
        )
        r.props["data"]["acls.json"] = json.dumps(data)

    return edit
