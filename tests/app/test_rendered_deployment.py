"""The dev stack's rendered manifests, executed: pods as local processes (`tests.app.pod_runtime`),
changing only what a cluster provides. The brokers boot through their rendered command (Kafka's
own main class on the release's jars, with exactly the rendered environment) and form the
quorum; the topics Job reconciles; two processor pods count exactly; every rendered probe
answers as the manifests expect.

Needs root (`pod_runtime.missing_requirements` says what else); the broker image is the project's
Apache Kafka release, jars only, as the rendered command needs nothing more.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.devkit.kafka_release import ensure as ensure_release
from contract import container_commands
from contract.java_properties import load_properties
from contract.topic_specs import PipelineNames
from tests.app.pod_runtime import Node, PodSpec, RunningPod, missing_requirements
from tests.app.rendered_deployment import (
    Manifests,
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
LOAD_RECORDS = 3000


@dataclass
class Deployment:
    """The running dev stack: its node, manifests and pods."""

    node: Node
    manifests: Manifests
    brokers: list[RunningPod]
    processors: list[RunningPod]
    job_output: str
    finalize_output: str
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


def _job(manifests: Manifests, container: str) -> dict[str, Any]:
    """The rendered Job whose container is `container`."""
    (job,) = [
        j
        for j in manifests.of_kind("Job")
        if j["spec"]["template"]["spec"]["containers"][0]["name"] == container
    ]
    return job


def _rendered_settings(broker: RunningPod) -> dict[str, str]:
    """The server.properties the program rendered for a broker (its `SERVER_PROPERTIES`)."""
    (container, *_) = broker.spec.spec["containers"]
    env = {var["name"]: var.get("value") for var in container["env"]}
    return load_properties(env[container_commands.SERVER_PROPERTIES_VARIABLE])


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The dev stack rendered and started as the cluster's controllers would start it."""
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("deployment")
    render(STACK, folder / "manifests")
    manifests = Manifests.load(folder / "manifests")
    kafka_sts = manifests.get("StatefulSet", "kafka")
    processor_sts = manifests.get("StatefulSet", PipelineNames().application_id)
    kafka_image_name = kafka_sts["spec"]["template"]["spec"]["containers"][0]["image"]
    processor_image_name = processor_sts["spec"]["template"]["spec"]["containers"][0]["image"]
    images = {
        kafka_image_name: kafka_image(kafka_image_name, ensure_release()),
        processor_image_name: processor_image(processor_image_name, folder / "images"),
    }
    node = Node(folder / "node", images, manifests.of_kind("Service"), manifests.config_maps())
    with node:
        kafka_pods = stateful_set_pods(kafka_sts, folder / "claims")
        processor_pods = stateful_set_pods(processor_sts, folder / "claims")
        publish_dns(node, manifests, kafka_pods + processor_pods)
        brokers = start_stateful_set(node, kafka_sts, kafka_pods, START_TIMEOUT_S)
        job_output = run_job(node, _job(manifests, container_commands.RECONCILE), START_TIMEOUT_S)[
            -1
        ]
        # After the brokers and the topics, as Pulumi orders it: Kafka's own features tool.
        finalize_output = run_job(
            node, _job(manifests, container_commands.FINALIZE), START_TIMEOUT_S
        )[-1]
        processors = start_stateful_set(node, processor_sts, processor_pods, START_TIMEOUT_S)
        yield Deployment(
            node,
            manifests,
            brokers,
            processors,
            job_output,
            finalize_output,
            processor_image_name,
            node.folder / "pods" / "toolbox" / "volumes" / "scratch",
        )


def test_the_brokers_boot_through_their_rendered_command_and_form_the_quorum(
    deployment: Deployment,
) -> None:
    output = deployment.node.exec(
        "kafka-0",
        "kafka",
        [
            *container_commands.kafka_tool("org.apache.kafka.tools.MetadataQuorumCommand"),
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
        # The rendered script formatted the storage at the first start, then ran the broker.
        index = broker.spec.labels["apps.kubernetes.io/pod-index"]
        assert f"formatting /var/lib/kafka/data/logs as node {index}" in log, log[-3000:]
        assert "Kafka Server started" in log, log[-3000:]
        assert (broker.spec.claims["data"] / "logs" / "meta.properties").exists()


def test_the_metadata_version_job_runs_kafkas_features_tool_from_the_brokers_jars(
    deployment: Deployment,
) -> None:
    # Already at the image's release on a new cluster: nothing to raise, and it says so.
    assert "metadata.version" in deployment.finalize_output, deployment.finalize_output


def test_every_rendered_broker_setting_is_in_server_properties_and_nothing_else(
    deployment: Deployment,
) -> None:
    for broker in deployment.brokers:
        index = broker.spec.labels["apps.kubernetes.io/pod-index"]
        expected = {
            **_rendered_settings(broker),
            "node.id": index,
            "advertised.listeners": (
                f"CLIENT://{broker.spec.fqdn}:9092,INTERNAL://{broker.spec.fqdn}:9094"
            ),
        }
        written = load_properties(
            (broker.folder / "volumes" / "tmp" / "server.properties").read_text()
        )
        different = sorted(k for k in written.keys() & expected.keys() if written[k] != expected[k])
        assert written == expected, (
            f"{broker.spec.name}: server.properties differs from the rendered settings: "
            f"extra {sorted(written.keys() - expected.keys())}, "
            f"missing {sorted(expected.keys() - written.keys())}, different {different}"
        )


def test_the_running_brokers_and_topics_have_the_rendered_configuration(
    deployment: Deployment,
) -> None:
    reconcile = _job(deployment.manifests, container_commands.RECONCILE)
    specs = json.loads(
        deployment.manifests.config_maps()[
            reconcile["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
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
    rendered = _rendered_settings(deployment.brokers[0])
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
