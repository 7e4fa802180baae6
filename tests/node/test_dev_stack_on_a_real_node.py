"""The dev stack by `pulumi up` onto a real node: the brokers, the Jobs and the processor run as
containers of the project's images under a kubelet, and a roll is driven by Kubernetes' own
StatefulSet controller while data flows.

One stack, one story, in file order. The clients the tests run on the machine (the load
generator, the counting consumer) resolve the pods' names through the cluster's DNS
(`devkit/kube/node.py run`), as a pod would.

The node has the machine's 2 cores: dev's requests (3 brokers of 500m beside a readiness sidecar
of 100m, 2 processors of 1 CPU) do not fit, so the brokers get 250m and the processors 450m
(requests are limits: Guaranteed), 1,950m in all. The roll lowers the processors to 400m: a roll
replaces one pod at a time, and a new pod larger than the old would not fit beside it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.clients.waiting import wait_until
from contract import container_commands
from contract.java_properties import load_properties
from devkit.kafka_release import KAFKA_VERSION
from devkit.kube import images, node
from devkit.kube.engine_stack import ROOT, EngineStack
from devkit.kube.kubectl import kubectl_json
from infra.presets import PRESETS
from tests.engine.test_dev_stack import ready_since, stamp, storage_class_expands
from tests.infra.conftest import names_of

NAMESPACE = "node-dev"
CLUSTER_ID = "q0SnoXu-RZ6ec4kCzx2w3A"
PROCESSOR = names_of("dev").application_id
BROKER_IMAGE = images.broker_image(KAFKA_VERSION)
SETTINGS: dict[str, Any] = {
    "namespace": NAMESPACE,
    "kafka": {"clusterId": CLUSTER_ID, "image": BROKER_IMAGE, "cpu": "250m"},
    "processor": {"cpu": "450m"},
}
APP_PYTHON = ROOT / ".venv" / "app" / "bin" / "python"
LOAD_RATE = 200  # records/s, over 100 keys: the node's 2 cores also run the brokers


def cluster_dns(*argv: str | Path) -> list[str]:
    """`argv` run on the machine, resolving the cluster's names (`devkit/kube/node.py run`)."""
    return [sys.executable, str(ROOT / "devkit" / "kube" / "node.py"), "run", "--", *map(str, argv)]


def with_cluster_dns(*argv: str | Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """A command on the machine that resolves the cluster's names; its output."""
    return subprocess.run(
        cluster_dns(*argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )


def kubectl(kubeconfig: str, *args: str, timeout: float = 120) -> str:
    """A kubectl command against the node's cluster; its output (it must succeed)."""
    done = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr.strip()[-2000:]}"
    return done.stdout


def in_broker(kubeconfig: str, pod: str, *argv: str) -> str:
    """A command in a broker pod's `kafka` container (`kubectl exec`); its output."""
    return kubectl(kubeconfig, "exec", "-n", NAMESPACE, pod, "-c", "kafka", "--", *argv)


def pods(kubeconfig: str, app: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/name={app}"
    found = kubectl_json(kubeconfig, "pods", "-n", NAMESPACE, "-l", selector)["items"]
    return sorted(found, key=lambda p: p["metadata"]["name"])


@pytest.fixture(scope="module")
def deployed(kubeconfig: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineStack]:
    stack = EngineStack(tmp_path_factory.mktemp("node-dev"), "dev", kubeconfig, SETTINGS)
    run = stack.up()
    assert run.errors() == [], run.errors()
    print(f"up of a new dev stack on the real node: {run.seconds:.1f} s, {run.changes}")
    yield stack


def processor_properties(kubeconfig: str) -> dict[str, str]:
    """The processor's rendered properties, from its ConfigMap on the API server."""
    maps = kubectl_json(kubeconfig, "configmaps", "-n", NAMESPACE)["items"]
    for config_map in maps:
        text = (config_map.get("data") or {}).get("processor.properties")
        if text:
            return load_properties(text)
    names = [m["metadata"]["name"] for m in maps]
    raise AssertionError(f"no ConfigMap holds processor.properties: {names}")


def test_up_runs_every_pod_in_a_container_of_the_projects_images(
    deployed: EngineStack, kubeconfig: str
) -> None:
    brokers, processors = pods(kubeconfig, "kafka"), pods(kubeconfig, PROCESSOR)
    assert len(brokers) == 3 and len(processors) == 2
    for pod in brokers + processors:
        assert pod["spec"]["nodeName"] == node.NAME
        for status in pod["status"]["containerStatuses"]:
            assert status["ready"], (pod["metadata"]["name"], status)
            assert status["containerID"].startswith("containerd://"), status
            assert status["restartCount"] == 0, (pod["metadata"]["name"], status)

    def images_of(pods: list[dict[str, Any]], container: str) -> set[str]:
        return {
            c["image"]
            for p in pods
            for c in p["status"]["containerStatuses"]
            if c["name"] == container
        }

    assert images_of(brokers, "kafka") == {BROKER_IMAGE}
    # the brokers' readiness sidecar runs the processor's image, as the topic Job does
    assert images_of(brokers, "broker-readiness") == {images.PROCESSOR_IMAGE}
    assert images_of(processors, "processor") == {images.PROCESSOR_IMAGE}
    jobs = kubectl_json(kubeconfig, "jobs", "-n", NAMESPACE)["items"]
    assert jobs and all(j["status"].get("succeeded") == 1 for j in jobs), [
        (j["metadata"]["name"], j["status"]) for j in jobs
    ]
    rows = [
        f"{p['metadata']['name']:<28} created {p['metadata']['creationTimestamp']} "
        f"Ready {p['status']['conditions'][-1]['lastTransitionTime']}"
        for p in brokers + processors
    ]
    print("\npods of the dev stack on the real node:\n" + "\n".join(rows))


def topic_specs(kubeconfig: str) -> list[dict[str, Any]]:
    """The topics the reconciler Job was given, from its ConfigMap on the API server."""
    maps = kubectl_json(kubeconfig, "configmaps", "-n", NAMESPACE)["items"]
    (specs,) = [m["data"]["topics.json"] for m in maps if "topics.json" in (m.get("data") or {})]
    found: list[dict[str, Any]] = json.loads(specs)["topics"]
    return found


def rendered_settings(pod: dict[str, Any]) -> dict[str, str]:
    """The server.properties the program rendered for a broker (its `SERVER_PROPERTIES`)."""
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == "kafka"]
    env = {var["name"]: var.get("value") for var in container["env"]}
    return load_properties(env[container_commands.SERVER_PROPERTIES_VARIABLE])


def test_the_brokers_boot_through_their_rendered_command_and_form_the_quorum(
    deployed: EngineStack, kubeconfig: str
) -> None:
    quorum = in_broker(
        kubeconfig,
        "kafka-0",
        *container_commands.kafka_tool("org.apache.kafka.tools.MetadataQuorumCommand"),
        "--bootstrap-controller",
        "localhost:9093",
        "describe",
        "--status",
    )
    voters = re.search(r"CurrentVoters:\s*\[(.*)\]", quorum)
    assert voters, quorum
    assert sorted(int(v) for v in re.findall(r'"id":\s*(\d+)', voters.group(1))) == [0, 1, 2]
    assert re.search(r"LeaderId:\s*[0-2]\b", quorum), quorum
    for pod in pods(kubeconfig, "kafka"):
        name = pod["metadata"]["name"]
        log = kubectl(kubeconfig, "logs", "-n", NAMESPACE, name, "-c", "kafka")
        # The rendered script formatted the claim at the first start, then ran the broker.
        index = pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"]
        data = container_commands.DATA_DIR
        assert f"formatting {data}/logs as node {index}" in log, log[-3000:]
        assert "Kafka Server started" in log, log[-3000:]
        in_broker(kubeconfig, name, "test", "-f", f"{data}/logs/meta.properties")


def test_every_rendered_broker_setting_is_in_server_properties_and_nothing_else(
    deployed: EngineStack, kubeconfig: str
) -> None:
    for pod in pods(kubeconfig, "kafka"):
        name, spec = pod["metadata"]["name"], pod["spec"]
        fqdn = f"{spec['hostname']}.{spec['subdomain']}.{NAMESPACE}.svc.cluster.local"
        expected = {
            **rendered_settings(pod),
            "node.id": pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"],
            "advertised.listeners": f"CLIENT://{fqdn}:9092,INTERNAL://{fqdn}:9094",
        }
        written = load_properties(
            in_broker(kubeconfig, name, "cat", f"{container_commands.STATE_DIR}/server.properties")
        )
        different = sorted(k for k in written.keys() & expected.keys() if written[k] != expected[k])
        assert written == expected, (
            f"{name}: server.properties differs from the rendered settings: "
            f"extra {sorted(written.keys() - expected.keys())}, "
            f"missing {sorted(expected.keys() - written.keys())}, different {different}"
        )


def test_the_running_brokers_and_topics_have_the_rendered_configuration(
    deployed: EngineStack, kubeconfig: str
) -> None:
    specs = topic_specs(kubeconfig)
    described = with_cluster_dns(
        APP_PYTHON,
        "-m",
        "tests.app.deployment_client",
        "describe",
        "--bootstrap-servers",
        processor_properties(kubeconfig)["bootstrap.servers"],
        "--topics",
        ",".join(spec["name"] for spec in specs),
    )
    assert described.returncode == 0, described.stderr[-3000:]
    state = json.loads(described.stdout.strip().splitlines()[-1])
    assert state["brokers"] == [0, 1, 2]
    rendered = rendered_settings(pods(kubeconfig, "kafka")[0])
    for broker_id in state["brokers"]:
        running = state["configs"][f"broker:{broker_id}"]
        for key, value in rendered.items():
            if value is None or "$(" in value or key not in running:
                continue  # per-pod values are checked in server.properties
            assert running[key] == value, (
                f"broker {broker_id}: {key}={running[key]!r}, rendered {value!r}"
            )
    for spec in specs:
        assert state["topics"][spec["name"]] == {
            "partitions": spec["partitions"],
            "replicas": [spec["replication_factor"]],
        }
        running = state["configs"][f"topic:{spec['name']}"]
        for key, value in spec["configs"].items():
            assert running[key] == value, f"topic {spec['name']}: {key}={running[key]!r}"


def test_the_metadata_version_job_ran_kafkas_features_tool_from_the_brokers_image(
    deployed: EngineStack, kubeconfig: str
) -> None:
    jobs = kubectl_json(kubeconfig, "jobs", "-n", NAMESPACE)["items"]
    (finalize,) = [
        j
        for j in jobs
        if j["spec"]["template"]["spec"]["containers"][0]["name"] == container_commands.FINALIZE
    ]
    assert finalize["spec"]["template"]["spec"]["containers"][0]["image"] == BROKER_IMAGE
    output = kubectl(kubeconfig, "logs", "-n", NAMESPACE, f"job/{finalize['metadata']['name']}")
    # Already at the image's release on a new cluster: nothing to raise, and it says so.
    assert "metadata.version" in output, output


def startup_budget(container: dict[str, Any]) -> float:
    """The seconds the kubelet gives a container's startup probe before it restarts it."""
    probe = container.get("startupProbe") or container.get("readinessProbe") or {}
    return float(
        probe.get("initialDelaySeconds", 0)
        + probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)
    )


def test_every_probe_passed_under_the_kubelet_within_its_startup_budget(
    deployed: EngineStack, kubeconfig: str
) -> None:
    rows = []
    for pod in pods(kubeconfig, "kafka") + pods(kubeconfig, PROCESSOR):
        name = pod["metadata"]["name"]
        statuses = {s["name"]: s for s in pod["status"]["containerStatuses"]}
        ready = ready_since(pod)
        for container in pod["spec"]["containers"]:
            status = statuses[container["name"]]
            assert status["ready"] and status["restartCount"] == 0, (name, status)
            started = stamp(status["state"]["running"]["startedAt"])
            budget = startup_budget(container)
            # The pod is Ready once its last container is: an upper bound of each one's start.
            assert ready - started <= budget, (
                f"{name}/{container['name']}: Ready {ready - started:.0f} s after its start, "
                f"the startup probe allows {budget:.0f} s"
            )
            where = f"{name}/{container['name']}"
            rows.append(f"{where:<44} Ready {ready - started:4.0f} s after start, of {budget:.0f}")
    print("\nprobes under the kubelet (dev stack, real node, Apache Kafka 4.3.1):")
    print("\n".join(rows))


# Run in a broker pod: the routes it has, and what a name outside the cluster resolves to. Neither
# sends a packet off the machine: the routes are read from /proc, the query goes to the node's
# CoreDNS, which has no forwarder.
OUTSIDE_PROBE = """
import socket
routes = [line.split()[1] for line in open("/proc/net/route").read().splitlines()[1:]]
try:
    socket.getaddrinfo("example.com", 443)
    outside = "resolved"
except socket.gaierror as exc:
    outside = exc.args[1]
print(routes, outside)
"""


def test_a_pod_has_no_route_off_the_machine_and_no_outside_name_resolves(
    deployed: EngineStack, kubeconfig: str
) -> None:
    pod = pods(kubeconfig, "kafka")[0]["metadata"]["name"]
    # the broker image's Python is Debian's (the base of both images)
    probe = in_broker(kubeconfig, pod, "python3", "-c", OUTSIDE_PROBE)
    print(f"\nfrom {pod}: {probe.strip()}")
    assert "00000000" not in probe.split("]")[0], f"a default route: {probe}"
    assert "resolved" not in probe, probe
    # Through the cluster's DNS: the client Service to its ClusterIP (kube-proxy's), each broker
    # by its stable name to its pod on the bridge (the pod's own name is in its /etc/hosts).
    (service,) = [
        a.rsplit(":", 1)[0]
        for a in processor_properties(kubeconfig)["bootstrap.servers"].split(",")
    ]
    brokers = [
        f"{b['spec']['hostname']}.{b['spec']['subdomain']}.{NAMESPACE}.svc.cluster.local"
        for b in pods(kubeconfig, "kafka")
    ]
    resolve = f"import socket; print([socket.gethostbyname(h) for h in {[service, *brokers]!r}])"
    resolved = in_broker(kubeconfig, pod, "python3", "-c", resolve)
    addresses = resolved.strip().strip("[]").replace("'", "").split(", ")
    assert addresses[0].startswith("10.96."), f"{service}: {resolved}"
    assert all(a.startswith("10.244.0.") for a in addresses[1:]), f"{brokers}: {resolved}"


def load_and_count(kubeconfig: str, scratch: Path, count: int) -> dict[str, Any]:
    """`count` records from the load generator, then the output checked against its truth."""
    properties = processor_properties(kubeconfig)
    summary = scratch / "summary.json"
    sent = with_cluster_dns(
        APP_PYTHON,
        "-m",
        "devkit.loadgen",
        "--bootstrap-servers",
        properties["bootstrap.servers"],
        "--topic",
        properties["input.topic"],
        "--rate",
        str(LOAD_RATE),
        "--keys",
        "100",
        "--count",
        str(count),
        "--summary-json",
        summary,
    )
    assert sent.returncode == 0, sent.stderr[-3000:]
    return counted_output(kubeconfig, summary)


def counted_output(kubeconfig: str, summary: Path) -> dict[str, Any]:
    """The output topic against the load generator's truth, once exact or after 10 minutes."""
    properties = processor_properties(kubeconfig)
    bootstrap = properties["bootstrap.servers"]
    deadline = time.monotonic() + 600
    while True:
        counted = with_cluster_dns(
            APP_PYTHON,
            "-m",
            "tests.app.deployment_client",
            "counts",
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            properties["output.topic"],
            "--summary",
            summary,
            "--timeout-s",
            "30",
        )
        assert counted.returncode == 0, counted.stderr[-3000:]
        result: dict[str, Any] = json.loads(counted.stdout.strip().splitlines()[-1])
        if result["ok"] or time.monotonic() > deadline:
            return result


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The load generator's summary, kept for the count after a destroy and a new `up`."""
    return tmp_path_factory.mktemp("node-load")


def test_the_processor_pods_count_exactly_what_the_load_generator_sent(
    deployed: EngineStack, kubeconfig: str, scratch: Path
) -> None:
    result = load_and_count(kubeconfig, scratch, 3000)
    assert result["ok"], result["describe"]


def test_a_processor_change_is_rolled_by_the_stateful_set_controller_and_up_waits_for_it(
    deployed: EngineStack, kubeconfig: str
) -> None:
    sts = kubectl_json(kubeconfig, "statefulset", PROCESSOR, "-n", NAMESPACE)
    min_ready = sts["spec"]["minReadySeconds"]
    before = {p["metadata"]["uid"] for p in pods(kubeconfig, PROCESSOR)}
    deployed.set(processor={"cpu": "400m"})
    started = time.time()
    run = deployed.up()
    returned = time.time()
    assert run.errors() == [], run.errors()
    # by its Pulumi name, `processor`
    assert run.ops("StatefulSet") == {"kafka": {"same"}, "processor": {"update"}}, run.steps
    after = pods(kubeconfig, PROCESSOR)
    assert not before & {p["metadata"]["uid"] for p in after}, "a pod was not replaced"
    created = [stamp(p["metadata"]["creationTimestamp"]) for p in reversed(after)]
    assert created == sorted(created), f"not highest ordinal first: {created}"
    ready = [ready_since(p) for p in reversed(after)]
    timeline = ", ".join(
        f"{p['metadata']['name']} created {c - started:.0f} s, Ready {r - started:.0f} s"
        for p, c, r in zip(reversed(after), created, ready, strict=True)
    )
    print(
        f"\nprocessor roll on the real node (StatefulSet controller, minReadySeconds "
        f"{min_ready}): {timeline}; up returned at {returned - started:.0f} s"
    )
    assert returned >= max(ready) + min_ready - 1, f"up returned before the roll: {timeline}"


def test_a_broker_setting_rolls_the_brokers_one_at_a_time_each_back_in_sync_first(
    deployed: EngineStack, kubeconfig: str, scratch: Path
) -> None:
    properties = processor_properties(kubeconfig)
    topics = [spec["name"] for spec in topic_specs(kubeconfig)]
    over = scratch / "broker-roll-over"
    # The in-sync replicas of every partition, sampled all through the roll from the machine
    watch = subprocess.Popen(
        cluster_dns(
            *(APP_PYTHON, "-m", "tests.app.deployment_client", "isr", "--until", over),
            *("--bootstrap-servers", properties["bootstrap.servers"], "--topics", ",".join(topics)),
        ),
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    before = {p["metadata"]["uid"] for p in pods(kubeconfig, "kafka")}
    configs = {**PRESETS["dev"]["kafka"]["configs"], "num.io.threads": "4"}
    deployed.set(kafka={**deployed.overrides["kafka"], "configs": configs})
    started = time.time()
    try:
        run = deployed.up()
    finally:
        over.touch()
        watched, _ = watch.communicate(timeout=120)
    returned = time.time()
    assert run.errors() == [], run.errors()
    assert run.ops("StatefulSet") == {"kafka": {"update"}, "processor": {"same"}}, run.steps
    after = pods(kubeconfig, "kafka")
    assert not before & {p["metadata"]["uid"] for p in after}, "a broker was not replaced"
    created = [stamp(p["metadata"]["creationTimestamp"]) for p in reversed(after)]
    ready = [ready_since(p) for p in reversed(after)]
    timeline = ", ".join(
        f"{p['metadata']['name']} created {c - started:.0f} s, Ready {r - started:.0f} s"
        for p, c, r in zip(reversed(after), created, ready, strict=True)
    )
    isr = json.loads(watched.strip().splitlines()[-1])
    print(
        f"\nbroker roll on the real node (StatefulSet controller; Ready = back in every ISR): "
        f"{timeline}; up returned at {returned - started:.0f} s; ISR sampled {isr}"
    )
    # One at a time, highest ordinal first: each broker replaced only once the one before it
    # was Ready, which the readiness sidecar gives only once it is back in every ISR.
    assert all(c >= r for c, r in zip(created[1:], ready, strict=False)), timeline
    # So no partition ever fell below min.insync.replicas, and producers never stopped.
    assert isr["samples"] > 0 and isr["smallest_isr"] >= 2, isr
    assert isr["short"] > 0, f"no sample saw a broker out of sync: {isr}"


def uids(kubeconfig: str, app: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(kubeconfig, app)}


def test_a_disk_resize_grows_every_claim_and_keeps_the_pods_running(
    deployed: EngineStack, kubeconfig: str
) -> None:
    storage_class_expands(kubeconfig, "standard", True)
    sizes = {"kafka": ("data", "3Gi"), PROCESSOR: ("state", "2Gi")}
    before = {app: uids(kubeconfig, app) for app in sizes}
    deployed.set(
        kafka={**deployed.overrides["kafka"], "storage": "3Gi"},
        processor={**deployed.overrides["processor"], "storage": "2Gi"},
    )
    run = deployed.up()
    assert run.errors() == [], run.errors()
    replaced = run.ops("StatefulSet")
    assert all("replace" in replaced[name] for name in ("kafka", "processor")), replaced
    for app, (template, size) in sizes.items():
        assert uids(kubeconfig, app) == before[app], f"{app}: the resize restarted pods"
        claims = kubectl_json(kubeconfig, "persistentvolumeclaims", "-n", NAMESPACE)["items"]
        grown = {
            c["metadata"]["name"]: c["spec"]["resources"]["requests"]["storage"]
            for c in claims
            if c["metadata"]["name"].startswith(f"{template}-{app}-")
        }
        assert grown and set(grown.values()) == {size}, grown
    print(f"\ndisk resize on the real node: {run.seconds:.0f} s, the same pods, claims grown")


def test_destroy_keeps_the_claims_and_the_next_up_finds_the_data_in_them(
    deployed: EngineStack, kubeconfig: str, scratch: Path
) -> None:
    claims = {
        c["metadata"]["name"]: c["spec"]["volumeName"]
        for c in kubectl_json(kubeconfig, "persistentvolumeclaims", "-n", NAMESPACE)["items"]
    }
    assert len(claims) == 5, claims  # 3 brokers' and 2 processors'
    run = deployed.destroy(run_program=True)
    assert run.errors() == [], run.errors()
    wait_until(
        lambda: not pods(kubeconfig, "kafka") and not pods(kubeconfig, PROCESSOR),
        180,
        "every pod of the stack gone",
        interval_s=1.0,
    )
    run = deployed.up()
    assert run.errors() == [], run.errors()
    again = {
        c["metadata"]["name"]: c["spec"]["volumeName"]
        for c in kubectl_json(kubeconfig, "persistentvolumeclaims", "-n", NAMESPACE)["items"]
    }
    assert again == claims, "the new pods did not get the claims (and volumes) they had"
    for pod in pods(kubeconfig, "kafka"):
        log = kubectl(kubeconfig, "logs", "-n", NAMESPACE, pod["metadata"]["name"], "-c", "kafka")
        assert "formatting" not in log, f"{pod['metadata']['name']} formatted its claim again"
    # The counts made before the destroy, read back from the brokers' volumes
    result = counted_output(kubeconfig, scratch / "summary.json")
    assert result["ok"], result["describe"]
    print(f"\nafter destroy and up ({run.seconds:.0f} s): the same claims, {result['describe']}")
