"""The dev stack's rendered manifests, executed: pods as local processes (`tests.app.pod_runtime`),
changing only what a cluster provides. The brokers boot through the official image's start path
with exactly the rendered environment and form the quorum; the topics Job reconciles; two
processor pods count exactly; every rendered probe answers as the manifests expect.

Needs root, an unpacked Apache Kafka 4.x distribution ($KAFKA_HOME: the image's start path runs
its bin/ scripts and copies its config/, which the project's Maven-resolved release, jars only,
does not have) and the docker/ folder of Apache Kafka's repository at that release
($KAFKA_DOCKER_DIR); skips, saying which, otherwise. Neither is on a registry this project's
machines reach; `tests/cluster/` and `tests/engine/` run the manifests on a real API server.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.devkit.kafka_release import KAFKA_HOME_ENV
from contract.java_properties import load_properties
from contract.topic_specs import PipelineNames
from tests.app.pod_runtime import Node, PodSpec, RunningPod, missing_requirements
from tests.app.rendered_deployment import (
    KAFKA_DOCKER_DIR_ENV,
    Manifests,
    kafka_docker_dir,
    kafka_image,
    processor_image,
    publish_dns,
    render,
    run_job,
    run_to_completion,
    start_stateful_set,
    stateful_set_pods,
)

STACK = "dev"
START_TIMEOUT_S = 600.0
# The image's wrapper turns every KAFKA_* variable into a broker setting except these (its
# `ExcludeServerPropsEnv`): they are the JVM's and log4j's.
NOT_BROKER_SETTINGS = {
    "KAFKA_VERSION",
    "KAFKA_HEAP_OPTS",
    "KAFKA_LOG4J_OPTS",
    "KAFKA_OPTS",
    "KAFKA_JMX_OPTS",
    "KAFKA_JVM_PERFORMANCE_OPTS",
    "KAFKA_GC_LOG_OPTS",
    "KAFKA_LOG4J_ROOT_LOGLEVEL",
    "KAFKA_LOG4J_LOGGERS",
    "KAFKA_TOOLS_LOG4J_LOGLEVEL",
    "KAFKA_JMX_HOSTNAME",
}
LOAD_RECORDS = 3000


def broker_setting(variable: str) -> str:
    """`KAFKA_MIN_INSYNC_REPLICAS` -> `min.insync.replicas`, as the image's wrapper reads it."""
    name = variable.removeprefix("KAFKA_").lower()
    return re.sub("_+", lambda m: {1: ".", 2: "_", 3: "-"}[len(m.group(0))], name)


@dataclass
class Deployment:
    """The running dev stack: its node, manifests and pods."""

    node: Node
    manifests: Manifests
    brokers: list[RunningPod]
    processors: list[RunningPod]
    job_output: str
    processor_image: str
    scratch: Path

    def toolbox(self, *args: str, timeout_s: float = 300.0) -> str:
        """A command in a pod of the processor's image (`kubectl run`); its output."""
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "toolbox",
                    "image": self.processor_image,
                    "args": list(args),
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                }
            ],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        }
        code, output = run_to_completion(
            self.node, PodSpec("toolbox", "streaming", {}, spec), timeout_s
        )
        assert code == 0, f"toolbox {list(args)} exited {code}:\n{output[-3000:]}"
        return output

    def toolbox_json(self, *args: str) -> dict[str, Any]:
        """The last line of a toolbox command's output, as JSON."""
        return dict(json.loads(self.toolbox(*args).strip().splitlines()[-1]))


def _requirements() -> tuple[Path, Path]:
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    if not os.environ.get(KAFKA_HOME_ENV):
        pytest.skip(
            f"needs {KAFKA_HOME_ENV}: an unpacked Apache Kafka 4.x distribution (bin/ and "
            "config/ for the official image's start path; the Maven release has jars only)"
        )
    docker_dir = kafka_docker_dir()
    if docker_dir is None:
        pytest.skip(
            f"needs {KAFKA_DOCKER_DIR_ENV}: the docker/ folder of Apache Kafka's repository "
            "(the official image's start scripts), at the distribution's release"
        )
    return Path(os.environ[KAFKA_HOME_ENV]), docker_dir


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The dev stack rendered and started as the cluster's controllers would start it."""
    kafka_home, docker_dir = _requirements()
    folder = tmp_path_factory.mktemp("deployment")
    render(STACK, folder / "manifests")
    manifests = Manifests.load(folder / "manifests")
    kafka_sts = manifests.get("StatefulSet", "kafka")
    processor_sts = manifests.get("StatefulSet", PipelineNames().application_id)
    kafka_image_name = kafka_sts["spec"]["template"]["spec"]["containers"][0]["image"]
    processor_image_name = processor_sts["spec"]["template"]["spec"]["containers"][0]["image"]
    images = {
        kafka_image_name: kafka_image(kafka_image_name, kafka_home, docker_dir, folder / "images"),
        processor_image_name: processor_image(processor_image_name, folder / "images"),
    }
    node = Node(folder / "node", images, manifests.of_kind("Service"), manifests.config_maps())
    with node:
        kafka_pods = stateful_set_pods(kafka_sts, folder / "claims")
        processor_pods = stateful_set_pods(processor_sts, folder / "claims")
        publish_dns(node, manifests, kafka_pods + processor_pods)
        brokers = start_stateful_set(node, kafka_sts, kafka_pods, START_TIMEOUT_S)
        (job,) = manifests.of_kind("Job")
        job_output = run_job(node, job, START_TIMEOUT_S)[-1]
        processors = start_stateful_set(node, processor_sts, processor_pods, START_TIMEOUT_S)
        yield Deployment(
            node,
            manifests,
            brokers,
            processors,
            job_output,
            processor_image_name,
            node.folder / "pods" / "toolbox" / "volumes" / "scratch",
        )


def test_the_brokers_boot_through_the_image_start_path_and_form_the_quorum(
    deployment: Deployment,
) -> None:
    output = deployment.node.exec(
        "kafka-0",
        "kafka",
        [
            "/opt/kafka/bin/kafka-metadata-quorum.sh",
            "--bootstrap-controller",
            "localhost:9093",
            "describe",
            "--status",
        ],
        timeout_s=120,
    )
    voters = re.search(r"CurrentVoters:\s*\[(.*)\]", output)
    assert voters, output
    assert sorted(int(v) for v in re.findall(r'"id":\s*(\d+)', voters.group(1))) == [0, 1, 2]
    assert re.search(r"LeaderId:\s*[0-2]\b", output), output
    for broker in deployment.brokers:
        log = broker.containers["kafka"].log_path.read_text(encoding="utf-8", errors="replace")
        # The official image's scripts ran, and the wrapper formatted the storage.
        assert "===> Configuring ..." in log and "===> Launching ..." in log, log[-3000:]
        assert (broker.spec.claims["data"] / "logs" / "meta.properties").exists()


def test_every_rendered_broker_setting_is_in_server_properties_and_nothing_else(
    deployment: Deployment,
) -> None:
    for broker in deployment.brokers:
        env = json.loads((broker.folder / "container-kafka.json").read_text())["env"]
        rendered = {
            var["name"]
            for var in broker.spec.spec["containers"][0]["env"]
            if var["name"].startswith("KAFKA_")
        }
        expected = {broker_setting(name): env[name] for name in rendered - NOT_BROKER_SETTINGS}
        written = load_properties(
            (broker.folder / "volumes" / "config" / "server.properties").read_text()
        )
        different = sorted(k for k in written.keys() & expected.keys() if written[k] != expected[k])
        assert written == expected, (
            f"{broker.spec.name}: server.properties differs from the rendered environment: "
            f"extra {sorted(written.keys() - expected.keys())}, "
            f"missing {sorted(expected.keys() - written.keys())}, different {different}"
        )
        index = broker.spec.labels["apps.kubernetes.io/pod-index"]
        assert written["node.id"] == index
        assert written["advertised.listeners"] == (
            f"CLIENT://{broker.spec.fqdn}:9092,INTERNAL://{broker.spec.fqdn}:9094"
        )


def test_the_running_brokers_and_topics_have_the_rendered_configuration(
    deployment: Deployment,
) -> None:
    specs = json.loads(
        deployment.manifests.config_maps()[
            deployment.manifests.of_kind("Job")[0]["spec"]["template"]["spec"]["volumes"][0][
                "configMap"
            ]["name"]
        ]["topics.json"]
    )["topics"]
    bootstrap = _processor_properties(deployment)["bootstrap.servers"]
    state = deployment.toolbox_json(
        "python",
        "-m",
        "tests.app.deployment_client",
        "describe",
        "--bootstrap-servers",
        bootstrap,
        "--topics",
        ",".join(spec["name"] for spec in specs),
    )
    assert state["brokers"] == [0, 1, 2]
    rendered = {
        broker_setting(var["name"]): var.get("value")
        for var in deployment.brokers[0].spec.spec["containers"][0]["env"]
        if var["name"].startswith("KAFKA_") and var["name"] not in NOT_BROKER_SETTINGS
    }
    for broker_id in state["brokers"]:
        running = state["configs"][f"broker:{broker_id}"]
        for key, value in rendered.items():
            if value is None or "$(" in value or key not in running:
                continue  # per-pod values are checked in server.properties
            assert running[key] == value, (
                f"broker {broker_id}: {key}={running[key]!r}, rendered {value!r}"
            )
    for spec in specs:
        layout = state["topics"][spec["name"]]
        assert layout == {
            "partitions": spec["partitions"],
            "replicas": [spec["replication_factor"]],
        }
        running = state["configs"][f"topic:{spec['name']}"]
        for key, value in spec["configs"].items():
            assert running[key] == value, f"topic {spec['name']}: {key}={running[key]!r}"


def _processor_properties(deployment: Deployment) -> dict[str, str]:
    volume = deployment.processors[0].folder / "volumes" / "config"
    return load_properties((volume / "processor.properties").read_text())


def test_two_rendered_processor_pods_count_exactly(deployment: Deployment) -> None:
    properties = _processor_properties(deployment)
    bootstrap = properties["bootstrap.servers"]
    deployment.toolbox(
        "python",
        "-m",
        "app.devkit.loadgen",
        "--bootstrap-servers",
        bootstrap,
        "--topic",
        properties["input.topic"],
        "--rate",
        "300",
        "--keys",
        "100",
        "--count",
        str(LOAD_RECORDS),
        "--summary-json",
        "/scratch/summary.json",
    )
    result: dict[str, Any] = {}

    def exact() -> bool:
        result.update(
            deployment.toolbox_json(
                "python",
                "-m",
                "tests.app.deployment_client",
                "counts",
                "--bootstrap-servers",
                bootstrap,
                "--topic",
                properties["output.topic"],
                "--summary",
                "/scratch/summary.json",
                "--timeout-s",
                "30",
            )
        )
        return bool(result["ok"])

    deployment.node.wait(exact, 300, "the output to match the load exactly")
    assert result["ok"], result["describe"]
    # Both pods took part: each owns partitions and is Ready.
    assert all(pod.ready for pod in deployment.processors)


def test_every_rendered_probe_answers_and_startup_budgets_cover_the_start(
    deployment: Deployment,
) -> None:
    rows = []
    for container in deployment.node.containers():
        assert not container.restart_reasons, container.restart_reasons
        assert container.process.poll() is None, container.log_tail()
        for kind, record in container.probes.items():
            assert record.first_success_s is not None, (
                f"{container.pod.spec.name}/{container.name}: {kind} probe "
                f"{record.describe()} never succeeded: {record.last_error}"
            )
            if kind == "startup":
                assert record.first_success_s <= record.budget_s, (
                    f"{container.pod.spec.name}/{container.name}: started after "
                    f"{record.first_success_s:.0f} s, the startup probe allows "
                    f"{record.budget_s:.0f} s"
                )
            rows.append(
                f"{container.pod.spec.name + '/' + container.name:<30} {kind:<9} "
                f"{record.describe():<22} first success {record.first_success_s:6.1f} s "
                f"{'of ' + format(record.budget_s, '.0f') + ' s' if kind == 'startup' else '':<9} "
                f"failures {record.failures}"
            )
        assert container.ready, f"{container.pod.spec.name}/{container.name} not Ready"
    print("\nprobes of the rendered dev deployment (pods as local processes, Apache Kafka):")
    print("\n".join(rows))
