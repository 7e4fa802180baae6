"""The KRaft cluster: quorum, broker settings, placement, probes, storage and security."""

from __future__ import annotations

import pytest

from contract import container_commands
from devkit.kafka_release import KAFKA_VERSION
from infra.kafka_cluster import heap_megabytes
from infra.presets import KAFKA_IMAGE
from infra.stack_settings import StackConfigError
from offline.render import RecordedStack, record_stack
from tests.infra.conftest import broker_settings, container_env, k8s_object, names_of


def test_the_broker_runs_kafkas_main_class_with_its_rendered_settings_not_an_images_scripts(
    stack: RecordedStack,
) -> None:
    (broker, *_) = k8s_object(stack, "StatefulSet", "kafka")["spec"]["template"]["spec"][
        "containers"
    ]
    assert broker["command"] == ["sh", "-c", container_commands.BROKER_SCRIPT]
    assert "args" not in broker
    script = container_commands.BROKER_SCRIPT
    assert "exec java $KAFKA_HEAP_OPTS" in script
    assert "-cp '/opt/kafka/libs/*' kafka.Kafka" in script
    # Nothing of an image's own start: no bin/ script, no /etc/kafka/docker, no KAFKA_* settings.
    assert "/bin/" not in script and "docker" not in script
    env = container_env(k8s_object(stack, "StatefulSet", "kafka"))
    assert sorted(name for name in env if name.startswith("KAFKA_")) == [
        "KAFKA_HEAP_OPTS",
        "KAFKA_NODE_ID",
    ]


def test_heap_is_half_the_memory_limit() -> None:
    assert heap_megabytes("1Gi") == 512
    assert heap_megabytes("8Gi") == 4096


def test_three_combined_nodes_start_in_parallel_with_a_quorum_from_pod_dns(
    stack: RecordedStack,
) -> None:
    sts = k8s_object(stack, "StatefulSet", "kafka")
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["serviceName"] == "kafka-headless"
    env = container_env(sts)
    settings = broker_settings(sts)
    assert settings["process.roles"] == "broker,controller"
    assert settings["controller.quorum.voters"] == ",".join(
        f"{i}@kafka-{i}.kafka-headless.streaming.svc.cluster.local:9093" for i in range(3)
    )
    assert env["KAFKA_NODE_ID"] == {
        "fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}
    }
    pod = "$(POD_NAME).kafka-headless.streaming.svc.cluster.local"
    assert settings["listeners"] == "CLIENT://:9092,INTERNAL://:9094,CONTROLLER://:9093"
    assert settings["advertised.listeners"] == f"CLIENT://{pod}:9092,INTERNAL://{pod}:9094"
    # node.id is the script's, from the pod's index.
    assert "node.id" not in settings
    names = [e["name"] for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]]
    # Kubernetes expands $(POD_NAME) only from a variable defined earlier in the list.
    assert names.index("POD_NAME") < names.index("SERVER_PROPERTIES")


def test_no_service_links_reach_the_brokers_settings(stack: RecordedStack) -> None:
    # An image whose start maps KAFKA_* variables to broker settings (the official one's) would
    # read the Service `kafka`'s KAFKA_PORT and KAFKA_SERVICE_HOST as `port=tcp://...`.
    pod = k8s_object(stack, "StatefulSet", "kafka")["spec"]["template"]["spec"]
    assert pod["enableServiceLinks"] is False


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("default.replication.factor", "3"),
        ("min.insync.replicas", "2"),
        ("offsets.topic.replication.factor", "3"),
        ("transaction.state.log.replication.factor", "3"),
        ("transaction.state.log.min.isr", "2"),
        ("unclean.leader.election.enable", "false"),
        ("auto.create.topics.enable", "false"),
        ("group.max.session.timeout.ms", "1800000"),
    ],
)
def test_broker_defaults_are_durable(stack: RecordedStack, setting: str, value: str) -> None:
    assert broker_settings(k8s_object(stack, "StatefulSet", "kafka"))[setting] == value


def test_initial_rebalance_delay_is_per_stack(dev: RecordedStack, prod: RecordedStack) -> None:
    name = "group.initial.rebalance.delay.ms"
    assert broker_settings(k8s_object(dev, "StatefulSet", "kafka"))[name] == "0"
    assert broker_settings(k8s_object(prod, "StatefulSet", "kafka"))[name] == "3000"


def test_headless_service_publishes_not_ready_addresses_for_the_quorum(
    stack: RecordedStack,
) -> None:
    headless = k8s_object(stack, "Service", "kafka-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    client = k8s_object(stack, "Service", "kafka")
    assert [p["port"] for p in client["spec"]["ports"]] == [9092]


def test_broker_volumes_are_retained_and_one_broker_may_be_disrupted(stack: RecordedStack) -> None:
    sts = k8s_object(stack, "StatefulSet", "kafka")
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["data"]
    assert k8s_object(stack, "PodDisruptionBudget", "kafka")["spec"]["maxUnavailable"] == 1


def test_anti_affinity_is_required_with_zone_spread_in_prod(prod: RecordedStack) -> None:
    pod = k8s_object(prod, "StatefulSet", "kafka")["spec"]["template"]["spec"]
    required = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required[0]["topologyKey"] == "kubernetes.io/hostname"
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"


def test_anti_affinity_is_only_preferred_on_a_one_node_dev_cluster(dev: RecordedStack) -> None:
    pod = k8s_object(dev, "StatefulSet", "kafka")["spec"]["template"]["spec"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" in pod["affinity"]["podAntiAffinity"]
    assert "topologySpreadConstraints" not in pod


def test_a_broker_is_ready_when_in_sync_as_its_sidecar_judges_no_jvm_per_probe(
    stack: RecordedStack,
) -> None:
    sts = k8s_object(stack, "StatefulSet", "kafka")
    containers = {c["name"]: c for c in sts["spec"]["template"]["spec"]["containers"]}
    kafka, sidecar = containers["kafka"], containers["broker-readiness"]
    assert kafka["readinessProbe"]["httpGet"] == {"path": "/ready", "port": 8090}
    assert "exec" not in kafka["readinessProbe"]
    assert "tcpSocket" in kafka["startupProbe"]
    assert "tcpSocket" in kafka["livenessProbe"]

    assert sidecar["name"] == "broker-readiness"
    processor = k8s_object(stack, "StatefulSet", names_of(stack).application_id)
    assert sidecar["image"] == processor["spec"]["template"]["spec"]["containers"][0]["image"]
    assert "command" not in sidecar  # the image's tini stays PID 1
    assert sidecar["args"][:3] == ["python", "-m", "app.admin.broker_readiness"]
    assert sidecar["args"][3:5] == ["--node-id", "$(KAFKA_NODE_ID)"]
    # Secured, it connects as its own user and waits for the bootstrap ACLs
    # (tests/infra/test_kafka_security.py).
    connect = ["--bootstrap-server", "localhost:9092"]
    if stack.stack == "prod":
        connect += [
            *("--command-config", "/etc/kafka/bootstrap/readiness-client.properties"),
            *(
                "--fallback-command-config",
                "/etc/kafka/bootstrap/readiness-previous-client.properties",
            ),
            *("--bootstrap-acls", "/etc/kafka/bootstrap/bootstrap-acls.json"),
        ]
    assert sidecar["args"][5:-2] == connect
    node_id = next(e for e in sidecar["env"] if e["name"] == "KAFKA_NODE_ID")
    assert node_id["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['apps.kubernetes.io/pod-index']"
    )
    assert sidecar["ports"] == [{"containerPort": 8090, "name": "readiness"}]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert sidecar[probe]["httpGet"] == {"path": "/live", "port": 8090}
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    assert sidecar["resources"]["requests"] == sidecar["resources"]["limits"]


def test_heap_and_resources_give_guaranteed_qos(stack: RecordedStack) -> None:
    container = k8s_object(stack, "StatefulSet", "kafka")["spec"]["template"]["spec"]["containers"][
        0
    ]
    resources = container["resources"]
    assert resources["requests"] == resources["limits"]
    heap = heap_megabytes(resources["limits"]["memory"])
    assert container_env(k8s_object(stack, "StatefulSet", "kafka"))["KAFKA_HEAP_OPTS"] == (
        f"-Xms{heap}m -Xmx{heap}m"
    )


def test_brokers_run_non_root_with_a_read_only_root(stack: RecordedStack) -> None:
    pod = k8s_object(stack, "StatefulSet", "kafka")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    for container in pod["containers"] + pod.get("initContainers", []):
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        if container["name"] != "broker-readiness":  # the processor's image, tested above
            assert container["image"] == KAFKA_IMAGE


def test_the_broker_image_is_the_release_the_tests_and_the_local_run_start() -> None:
    assert KAFKA_IMAGE.startswith(f"apache/kafka:{KAFKA_VERSION}@sha256:")


def test_only_brokers_and_labelled_clients_reach_kafka(stack: RecordedStack) -> None:
    policy = k8s_object(stack, "NetworkPolicy", "kafka")["spec"]
    peers = {
        tuple(sorted(rule["from"][0]["podSelector"]["matchLabels"].items())): sorted(
            p["port"] for p in rule["ports"]
        )
        for rule in policy["ingress"]
        if "podSelector" in rule["from"][0]
    }
    assert peers[(("stateful-streaming.io/kafka-client", "true"),)] == [9092]
    assert sorted(peers.values()) == [[9092], [9092, 9093, 9094]]
    # The readiness sidecars' /metrics: only from Prometheus' namespace, as the processor's.
    (metrics,) = [rule for rule in policy["ingress"] if "podSelector" not in rule["from"][0]]
    assert metrics == {
        "from": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ],
        "ports": [{"port": 8090, "protocol": "TCP"}],
    }
    processor = k8s_object(stack, "StatefulSet", names_of(stack).application_id)
    labels = processor["spec"]["template"]["metadata"]["labels"]
    assert labels["stateful-streaming.io/kafka-client"] == "true"
    job = next(o for o in stack.kubernetes_objects() if o["kind"] == "Job")
    assert job["spec"]["template"]["metadata"]["labels"]["stateful-streaming.io/kafka-client"] == (
        "true"
    )


def test_pulumi_waits_long_enough_for_a_full_roll(stack: RecordedStack) -> None:
    kafka = stack.find("kubernetes:apps/v1:StatefulSet", "kafka")
    # 3 brokers x (60 s grace + 310 s startup budget + 300 s for its replicas to catch up +
    # 60 s to become ready), plus 5 minutes.
    grace = 60 if stack.stack == "dev" else 120
    minutes = -(-3 * (grace + 310 + 300 + 60) // 60) + 5
    assert kafka.custom_timeouts == {"create": f"{minutes}m", "update": f"{minutes}m"}


def test_cluster_id_is_one_random_id_without_keepers(stack: RecordedStack) -> None:
    ids = [r for r in stack.resources if r.type == "random:index/randomId:RandomId"]
    assert len(ids) == 1
    # No keepers: no setting can ever force a new id (a replace is the only way RandomId changes).
    assert ids[0].props == {"byteLength": 16}
    assert ids[0].protect is (stack.stack == "prod")


def test_cluster_id_survives_any_change_to_the_cluster_settings(dev: RecordedStack) -> None:
    changed = record_stack(
        "dev",
        {"kafka": {"image": "apache/kafka:4.1.1", "memory": "2Gi", "storage": "5Gi"}},
    )
    before = dev.find("random:index/randomId:RandomId", "kafka-cluster-id")
    after = changed.find("random:index/randomId:RandomId", "kafka-cluster-id")
    # Same URN and same inputs: the engine diffs nothing, so the id in the state is kept.
    assert (after.urn, after.props) == (before.urn, before.props)
    cluster_id = container_env(k8s_object(changed, "StatefulSet", "kafka"))["CLUSTER_ID"]
    assert cluster_id == container_env(k8s_object(dev, "StatefulSet", "kafka"))["CLUSTER_ID"]
    # The mocked engine derives the value from stack and URN, the way the state keys it; it is
    # a valid KRaft cluster id: 16 bytes in URL-safe base64 without padding, 22 characters.
    assert len(cluster_id) == 22
    assert container_env(k8s_object(changed, "StatefulSet", "kafka"))["KAFKA_HEAP_OPTS"] == (
        "-Xms1024m -Xmx1024m"
    )


@pytest.mark.parametrize("scrape", ["podMonitor", "annotations"])
def test_prometheus_scrapes_the_brokers_sidecars_as_it_does_the_processor(scrape: str) -> None:
    stack = record_stack("prod", {"processor": {"metricsScrape": scrape}})
    sts = k8s_object(stack, "StatefulSet", "kafka")
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    monitors = [o for o in stack.kubernetes_objects() if o["kind"] == "PodMonitor"]
    if scrape == "annotations":
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == "8090"
        assert annotations["prometheus.io/path"] == "/metrics"
        assert not monitors
    else:
        assert "prometheus.io/scrape" not in annotations
        (kafka,) = [m for m in monitors if m["metadata"]["name"] == "kafka"]
        assert kafka["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
        assert kafka["spec"]["podMetricsEndpoints"] == [{"port": "readiness", "path": "/metrics"}]


def test_a_cluster_id_given_by_the_stack_replaces_the_generated_one() -> None:
    given = "q0SnoXu-RZ6ec4kCzx2w3A"
    stack = record_stack("dev", {"kafka": {"clusterId": given}})
    assert not [r for r in stack.resources if r.type.startswith("random:")]
    assert container_env(k8s_object(stack, "StatefulSet", "kafka"))["CLUSTER_ID"] == given
    assert stack.outputs["kafkaClusterId"] == given


@pytest.mark.parametrize(
    "bad", ["not-a-cluster-id", "q0SnoXu-RZ6ec4kCzx2w3B", "q0SnoXu+RZ6ec4kCzx2w3A"]
)
def test_a_cluster_id_kafka_would_refuse_is_refused_naming_the_setting(bad: str) -> None:
    with pytest.raises(StackConfigError, match=r"kafka\.clusterId = .*random-uuid"):
        record_stack("dev", {"kafka": {"clusterId": bad}})
