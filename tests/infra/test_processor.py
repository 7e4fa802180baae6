"""The processor StatefulSet, its properties file and the session timeout computed from it."""

from __future__ import annotations

from typing import Any

import pytest

from offline.render import RecordedStack, record_stack
from tests.infra.conftest import container_env, k8s_object, names_of
from tests.infra.conftest import processor_properties as properties


def app(stack: RecordedStack) -> str:
    """The processor's name in `stack`: its application id, which the stack may set."""
    return names_of(stack).application_id


def processor(stack: RecordedStack, kind: str = "StatefulSet") -> dict[str, Any]:
    """The processor's object of that kind (each is named after the application id)."""
    return k8s_object(stack, kind, app(stack))


def pod_spec(stack: RecordedStack) -> dict[str, Any]:
    return processor(stack)["spec"]["template"]["spec"]


def test_replicas_follow_the_stack(dev: RecordedStack, prod: RecordedStack) -> None:
    assert processor(dev)["spec"]["replicas"] == 2
    assert processor(prod)["spec"]["replicas"] == 3


def test_rolls_one_pod_at_a_time_and_waits_for_it(stack: RecordedStack) -> None:
    spec = processor(stack)["spec"]
    assert spec["minReadySeconds"] == (10 if stack.stack == "dev" else 30)
    assert spec["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert spec["podManagementPolicy"] == "OrderedReady"
    assert processor(stack, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_canary_partition_is_a_setting() -> None:
    canary = record_stack("dev", {"processor": {"partition": 1}})
    strategy = processor(canary)["spec"]["updateStrategy"]
    assert strategy["rollingUpdate"] == {"partition": 1}


def test_state_claim_is_mounted_where_the_checkpoint_lives(stack: RecordedStack) -> None:
    spec = processor(stack)["spec"]
    assert [t["metadata"]["name"] for t in spec["volumeClaimTemplates"]] == ["state"]
    assert spec["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    mounts = {m["name"]: m["mountPath"] for m in pod_spec(stack)["containers"][0]["volumeMounts"]}
    assert mounts["state"] == properties(stack)["state.dir"] == "/var/lib/processor"
    assert mounts["config"] == "/etc/processor"
    assert mounts["tmp"] == "/tmp"


def test_pod_name_is_the_instance_id(stack: RecordedStack) -> None:
    env = container_env(processor(stack))
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    props = properties(stack)
    # Both presets hand off: a dynamic member, no static id (see the membership tests).
    assert "consumer.group.instance.id" not in props
    assert props["producer.transactional.id"] == "${env:POD_NAME}"


def test_properties_carry_the_group_and_state_settings(stack: RecordedStack) -> None:
    props = properties(stack)
    assert props["application.id"] == app(stack)
    assert props["bootstrap.servers"] == "kafka.streaming.svc.cluster.local:9092"
    assert props["changelog.topic"] == f"{app(stack)}-counts-changelog"
    assert props["dlq.topic"] == f"{app(stack)}-dlq"
    assert props["consumer.partition.assignment.strategy"] == "cooperative-sticky"
    assert props["consumer.isolation.level"] == "read_committed"
    assert props["processing.guarantee"] == "exactly_once_v2"
    assert props["spark.sql.streaming.stateStore.providerClass"].endswith(
        "RocksDBStateStoreProvider"
    )
    assert props["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"


def test_max_poll_interval_is_raised_to_a_session_timeout_above_the_default(
    dev: RecordedStack,
) -> None:
    # librdkafka (and the processor at start) refuse max.poll.interval.ms < session.timeout.ms.
    dev_props = properties(dev)
    assert int(dev_props["consumer.session.timeout.ms"]) <= 300000
    assert dev_props["consumer.max.poll.interval.ms"] == "300000"
    static_prod = properties(record_stack("prod", {"processor": {"membershipMode": "static"}}))
    assert int(static_prod["consumer.session.timeout.ms"]) > 300000
    assert (
        static_prod["consumer.max.poll.interval.ms"] == static_prod["consumer.session.timeout.ms"]
    )


def test_spark_parallelism_follows_the_cpu_limit(dev: RecordedStack, prod: RecordedStack) -> None:
    assert properties(dev)["spark.master"] == "local[1]"
    assert properties(dev)["spark.sql.shuffle.partitions"] == "1"
    assert properties(prod)["spark.master"] == "local[2]"
    assert properties(prod)["spark.sql.shuffle.partitions"] == "2"


def restart_budget_seconds(stack: RecordedStack) -> int:
    sts = processor(stack)["spec"]
    pod = sts["template"]["spec"]
    startup = pod["containers"][0]["startupProbe"]
    return (
        pod["terminationGracePeriodSeconds"]
        + startup["initialDelaySeconds"]
        + startup["periodSeconds"] * startup["failureThreshold"]
        + sts["minReadySeconds"]
    )


def test_a_static_members_session_covers_the_restart_of_one_pod(stack: RecordedStack) -> None:
    static = record_stack(stack.stack, {"processor": {"membershipMode": "static"}})
    props = properties(static)
    session = int(props["consumer.session.timeout.ms"])
    assert session == (restart_budget_seconds(static) + 15) * 1000
    assert int(props["consumer.heartbeat.interval.ms"]) <= session // 3


def test_a_handoff_members_session_ends_soon_after_a_crash(stack: RecordedStack) -> None:
    handoff = record_stack(
        stack.stack,
        {"processor": {"membershipMode": "handoff", "replicas": 2, "numStandbyReplicas": 1}},
    )
    props = properties(handoff)
    # A stopping hand-off member leaves the group; only a crashed one waits for its session,
    # which must end well inside the 30 s failover target, not after the restart budget.
    assert props["consumer.session.timeout.ms"] == "10000"
    assert int(props["consumer.heartbeat.interval.ms"]) <= 10000 // 3
    assert restart_budget_seconds(handoff) * 1000 > 10000


@pytest.mark.parametrize(
    "change",
    [
        {"terminationGracePeriodSeconds": 200},
        {"minReadySeconds": 90},
        {"startupProbe": {"failureThreshold": 60}},
        {"startupProbe": {"periodSeconds": 7, "initialDelaySeconds": 30}},
    ],
)
def test_a_static_members_session_follows_the_statefulset_it_protects(
    change: dict[str, Any],
) -> None:
    static = {"membershipMode": "static"}
    before = record_stack("dev", {"processor": static})
    changed = record_stack("dev", {"processor": {**change, **static}})
    session = int(properties(changed)["consumer.session.timeout.ms"])
    assert session == (restart_budget_seconds(changed) + 15) * 1000
    assert session > int(properties(before)["consumer.session.timeout.ms"])


def test_a_stateless_processor_has_no_static_membership() -> None:
    stateless = record_stack("dev", {"processor": {"stateful": False, "membershipMode": "static"}})
    props = properties(stateless)
    assert props["stateful"] == "false"
    assert "consumer.group.instance.id" not in props


def test_changed_properties_roll_the_pods_through_a_new_config_map(dev: RecordedStack) -> None:
    changed = record_stack("dev", {"processor": {"properties": {"trigger.interval.ms": "500"}}})
    assert properties(changed)["trigger.interval.ms"] == "500"
    volumes = {v["name"]: v for v in pod_spec(changed)["volumes"]}
    before = {v["name"]: v for v in pod_spec(dev)["volumes"]}
    assert volumes["config"]["configMap"]["name"] != before["config"]["configMap"]["name"]


def test_probes_use_the_health_port(stack: RecordedStack) -> None:
    container = pod_spec(stack)["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": 8080}
    assert container["livenessProbe"]["httpGet"] == {"path": "/live", "port": 8080}
    assert container["startupProbe"]["httpGet"]["port"] == 8080
    assert container["args"] == [
        "python",
        "-m",
        "app.processor",
        "--properties",
        "/etc/processor/processor.properties",
    ]


def test_processor_runs_as_uid_10001_with_least_privilege(stack: RecordedStack) -> None:
    pod = pod_spec(stack)
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    assert processor(stack, "ServiceAccount")["automountServiceAccountToken"] is False
    security = pod["containers"][0]["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    resources = pod["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"]


def test_headless_service_and_metrics_ingress(stack: RecordedStack) -> None:
    service = processor(stack, "Service")["spec"]
    assert service["clusterIP"] == "None"
    policy = processor(stack, "NetworkPolicy")["spec"]
    assert policy["ingress"][0]["ports"] == [{"port": 8080, "protocol": "TCP"}]


def test_pulumi_waits_for_every_pod_to_restart_in_turn(stack: RecordedStack) -> None:
    replicas = processor(stack)["spec"]["replicas"]
    minutes = -(-replicas * restart_budget_seconds(stack) // 60) + 5
    timeouts = stack.find("kubernetes:apps/v1:StatefulSet", "processor").custom_timeouts
    assert timeouts == {"create": f"{minutes}m", "update": f"{minutes}m"}


def test_topic_job_runs_the_reconciler_after_kafka(stack: RecordedStack) -> None:
    job = next(o for o in stack.kubernetes_objects() if o["kind"] == "Job")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:7] == [
        "python",
        "-m",
        "app.admin.reconcile",
        "--bootstrap-servers",
        "kafka.streaming.svc.cluster.local:9092",
        "--specs",
        "/etc/topics/topics.json",
    ]
    assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    kafka = stack.find("kubernetes:apps/v1:StatefulSet", "kafka")
    topics = next(r for r in stack.resources if r.type.endswith(":TopicReconciliation"))
    assert kafka.urn in topics.dependencies


def test_a_spec_change_is_a_new_job(dev: RecordedStack) -> None:
    more = record_stack("dev", {"topics": {"allowPartitionIncrease": True, "partitions": 8}})
    jobs = [next(o for o in s.kubernetes_objects() if o["kind"] == "Job") for s in (dev, more)]
    assert jobs[0]["metadata"]["name"] != jobs[1]["metadata"]["name"]
    assert jobs[1]["spec"]["template"]["spec"]["containers"][0]["args"][-1] == (
        "--allow-partition-increase"
    )


def test_handoff_mode_renders_a_member_that_leaves_the_group() -> None:
    stack = record_stack(
        "dev", {"processor": {"membershipMode": "handoff", "numStandbyReplicas": 1}}
    )
    props = properties(stack)
    assert props["membership.mode"] == "handoff"
    assert props["num.standby.replicas"] == "1"
    assert "consumer.group.instance.id" not in props
    assert props["producer.transactional.id"] == "${env:POD_NAME}"  # fencing stays per pod


def test_both_presets_hand_off_with_a_copy_on_every_other_replica(
    dev: RecordedStack, prod: RecordedStack
) -> None:
    dev_props, prod_props = properties(dev), properties(prod)
    assert (dev_props["membership.mode"], dev_props["num.standby.replicas"]) == ("handoff", "1")
    assert (prod_props["membership.mode"], prod_props["num.standby.replicas"]) == ("handoff", "2")
    assert "consumer.group.instance.id" not in dev_props | prod_props


def test_static_mode_names_each_pod_its_static_member() -> None:
    props = properties(record_stack("dev", {"processor": {"membershipMode": "static"}}))
    assert props["membership.mode"] == "static"
    assert props["consumer.group.instance.id"] == "${env:POD_NAME}"


def test_standby_replicas_are_a_setting() -> None:
    stack = record_stack("prod", {"processor": {"numStandbyReplicas": 1}})
    assert properties(stack)["num.standby.replicas"] == "1"


def test_pods_of_the_processor_image_keep_its_entrypoint(stack: RecordedStack) -> None:
    """`command` would replace the image's ENTRYPOINT (tini), leaving Python as PID 1."""
    image = pod_spec(stack)["containers"][0]["image"]
    containers = [
        container
        for obj in stack.kubernetes_objects()
        if obj["kind"] in ("StatefulSet", "Job")
        for container in obj["spec"]["template"]["spec"]["containers"]
        if container["image"] == image
    ]
    names = ["broker-readiness", "processor", "reconcile"]
    # A secured stack's retire Job ends a SCRAM rotation (infra/scram_retirement.py).
    names += ["retire"] if stack.stack == "prod" else []
    assert sorted(c["name"] for c in containers) == names
    for container in containers:
        assert "command" not in container, container["name"]
        assert container["args"][:2] == ["python", "-m"], container["name"]


def _scrape_setting(stack: RecordedStack) -> tuple[list[dict[str, Any]], dict[str, str] | None]:
    """The processor's PodMonitors and its pod template's annotations (the brokers' are in
    test_kafka_cluster.py)."""
    monitors = [
        o
        for o in stack.kubernetes_objects()
        if o["kind"] == "PodMonitor" and o["metadata"]["name"] == app(stack)
    ]
    template = processor(stack)["spec"]["template"]
    annotations = template["metadata"].get("annotations") or {}
    for rolls_on in ("credentials-revision", "trust"):  # a secured stack's
        annotations.pop(f"stateful-streaming.io/{rolls_on}", None)
    return monitors, annotations or None


def test_metrics_scraping_is_opt_in(stack: RecordedStack) -> None:
    assert _scrape_setting(stack) == ([], None)


def test_pod_monitor_scrapes_every_processor_pod_on_the_health_port() -> None:
    recorded = record_stack("prod", {"processor": {"metricsScrape": "podMonitor"}})
    (monitor,), annotations = _scrape_setting(recorded)
    assert annotations is None
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == "streaming"
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "health", "path": "/metrics"}]
    pod_labels = processor(recorded)["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ports = pod_spec(recorded)["containers"][0]["ports"]
    assert {"name": "health", "containerPort": 8080} in ports


def test_scrape_annotations_name_the_metrics_port_and_path() -> None:
    recorded = record_stack("dev", {"processor": {"metricsScrape": "annotations"}})
    assert _scrape_setting(recorded) == (
        [],
        {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": "8080",
            "prometheus.io/path": "/metrics",
        },
    )
