"""The seeds' bar on a real Kubernetes node: the hand-off processor rolled by `pulumi up`, through
Kubernetes' own StatefulSet controller, while page views flow.

    python -m devkit.bench node-rollout [--rate 1000] [--keys 10000] [--replicas 3]
        [--standby-replicas 2] [--membership-mode handoff] [--processor-cpu 400m]
        [--broker-cpu 150m] [--out build/bench]

1. The local control plane and its node (`devkit/kube/node.py up`; `make tools node-parts` builds
   them): the pods run in containers of the project's images under a kubelet.
2. The dev stack by `pulumi up` (`devkit/kube/engine_stack.py`, in the program's environment), with
   the processor in hand-off mode (`--replicas`, `--standby-replicas`; or `--membership-mode
   static`, which one replica needs) and the topics' partitions.
3. On the machine, through the cluster's DNS (`devkit/kube/node.py run`): the load generator at
   `--rate` over `--keys` pages, and the output topic read against its truth
   (`devkit.truth`). Once every partition's output flows, a processor setting changes and
   `pulumi up` runs again: the StatefulSet controller replaces the pods one at a time, highest
   ordinal first, each once the one before has been Ready for minReadySeconds, and `up` returns
   when the roll is over. The pods are sampled from the API server every second meanwhile.
4. The row: per partition, the longest time without output from the roll's start to `--tail-s`
   after `up` returned; the share of views later than 10 s (the seeds' bar); whether the output
   ends exact; the roll's timeline from the API server, each gap placed on it; and each pod's
   start, process start to first committed batch, as its log reports it (before the roll: the
   first start; after: the restart in a container under the pod's CPU limit, its state kept on
   its volume). The processor pods' logs are kept in `<out>/pods/`.
   `devkit/kube/node.py down` at the end, whatever happened.

The node has the machine's 2 cores, and requests are limits (Guaranteed pods): 3 brokers of
150m beside their readiness sidecars of 100m, and 3 processors of 400m, 1,950m in all; the table
names what each got. The bench itself (the load generator, the output's reader) runs on the same
cores, as the local bench's does. Speeds are reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from app.clients.waiting import poll_until
from app.processor.aggregation import load_aggregation
from app.processor.startup import read_start_line
from contract.container_commands import PROPERTIES_FILE
from contract.java_properties import load_properties
from contract.processor_keys import DEFAULTS, MEMBERSHIP_HANDOFF, MEMBERSHIP_STATIC
from contract.topic_specs import PipelineNames
from devkit.bench import plots
from devkit.bench.measure import LATE_S, PeriodicSampler, late_percent, percentile
from devkit.bench.restart_cases import BenchParams
from devkit.bench.table import write_table
from devkit.kafka_release import KAFKA_VERSION
from devkit.kube import images
from devkit.kube.kubectl import kubectl_json, kubectl_logs
from devkit.loadgen import LoadGenerator, LoadSettings, producer_config
from devkit.local.observe import OutputTail
from devkit.local.pipeline import LoadThread
from devkit.truth import OutputRecord, Truth, check_output

log = logging.getLogger("devkit.bench.node_rollout")

ROOT = Path(__file__).resolve().parents[2]
NODE = ROOT / "devkit" / "kube" / "node.py"
PROGRAM_PYTHON = ROOT / ".venv" / "infra" / "bin" / "python"
NAMESPACE = "bench-node"
CLUSTER_ID = "bN7kq2xRT0uOZlYw3sVh1g"
PROCESSOR = PipelineNames().application_id
BROKER_IMAGE = images.broker_image(KAFKA_VERSION)
PRESETS_GRACE_S = 60  # dev's processor.terminationGracePeriodSeconds
STEADY_S = 20.0  # every partition's output seen within the last LIVE_S, this long, before the roll
LIVE_S = 3.0
COLUMNS = (
    "case",
    "broker",
    "workload",
    "pods (CPU each)",
    "produced",
    "match",
    "duplicates",
    "zero output s (max)",
    "zero output s per partition",
    "late > 10 s %",
    "p99 latency s (roll)",
    "max latency s (roll)",
    "up returned s",
    "roll by the API server (s from up)",
    "process start to first committed batch s (first starts; the roll's)",
)


@dataclass(frozen=True)
class NodeParams:
    """The workload and what the node gives it."""

    rate: float = 1000.0
    keys: int = 10_000
    partitions: int = 6
    replicas: int = 3
    standby_replicas: int = 2
    membership_mode: str = MEMBERSHIP_HANDOFF
    processor_cpu: str = "400m"
    broker_cpu: str = "150m"
    tail_s: float = 30.0
    ready_timeout_s: float = 900.0

    def settings(self, roll: int) -> dict[str, Any]:
        """The stack's overrides; each `roll` changes the processor's pod template (so the
        StatefulSet controller replaces its pods) and nothing the processing notices."""
        return {
            "namespace": NAMESPACE,
            "kafka": {"clusterId": CLUSTER_ID, "image": BROKER_IMAGE, "cpu": self.broker_cpu},
            "topics": {"partitions": self.partitions},
            "processor": {
                "replicas": self.replicas,
                "membershipMode": self.membership_mode,
                "numStandbyReplicas": self.standby_replicas,
                "cpu": self.processor_cpu,
                # a second more to stop in: a new pod template, nothing the run notices
                "terminationGracePeriodSeconds": PRESETS_GRACE_S + roll,
            },
        }

    @property
    def workload(self) -> str:
        return (
            f"{self.rate:g} views/s over {self.keys:,} pages, {self.partitions} partitions, "
            f"{self.membership_mode}, {self.replicas} instances, {self.standby_replicas} standbys"
        )


def engine(command: str, workdir: Path, kubeconfig: str, settings: Mapping[str, Any]) -> dict:
    """`pulumi up` or `destroy` of the dev stack (`devkit/kube/engine_stack.py`); its summary."""
    argv = [
        str(PROGRAM_PYTHON),
        "-m",
        "devkit.kube.engine_stack",
        command,
        "--workdir",
        str(workdir),
    ]
    argv += ["--stack", "dev", "--kubeconfig", kubeconfig, "--settings", json.dumps(settings)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"pulumi {command} of the bench's dev stack failed (exit {done.returncode}): "
            f"{(lines[-1] if lines else done.stderr.strip())[-3000:]}"
        )
    summary: dict = json.loads(lines[-1])
    return summary


@dataclass
class PodLife:
    """One processor pod as the API server showed it: seconds since the roll's start."""

    name: str
    created: float
    ready: float | None = None
    terminating: float | None = None
    gone: float | None = None


def processor_pods(kubeconfig: str) -> list[dict[str, Any]]:
    """The processor's pods as the API server has them now."""
    pods: list[dict[str, Any]] = kubectl_json(
        kubeconfig, "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={PROCESSOR}"
    )["items"]
    return pods


@dataclass
class PodSampler(PeriodicSampler):
    """The processor's pods from the API server, every second."""

    kubeconfig: str
    t0: float
    pods: dict[str, PodLife] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__("pods", 1.0)
        self._lock = threading.Lock()

    def take(self) -> None:
        try:
            items = processor_pods(self.kubeconfig)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            log.warning("sampling the pods: %s; next second", exc)
            return
        now = time.time() - self.t0
        with self._lock:
            seen = set()
            for pod in items:
                uid, meta = pod["metadata"]["uid"], pod["metadata"]
                seen.add(uid)
                life = self.pods.setdefault(
                    uid, PodLife(meta["name"], _stamp(meta["creationTimestamp"]) - self.t0)
                )
                ready = [c for c in pod["status"].get("conditions", []) if c["type"] == "Ready"]
                if life.ready is None and ready and ready[0]["status"] == "True":
                    life.ready = _stamp(ready[0]["lastTransitionTime"]) - self.t0
                if life.terminating is None and meta.get("deletionTimestamp"):
                    life.terminating = now
            for uid, life in self.pods.items():
                if uid not in seen and life.gone is None:
                    life.gone = now

    def timeline(self) -> list[PodLife]:
        """Every pod seen, by when it was created."""
        with self._lock:
            return sorted(self.pods.values(), key=lambda p: p.created)


@dataclass(frozen=True)
class PodStart:
    """A processor pod's start as its log reports it (`app/processor/startup.py`)."""

    pod: str
    seconds: float
    phases: dict[str, float]

    def __str__(self) -> str:
        steps = ", ".join(f"{name} {took:.1f}" for name, took in self.phases.items())
        return f"{self.pod} {self.seconds:.1f} s ({steps})"


def pod_starts(kubeconfig: str, logs: Path) -> dict[str, PodStart]:
    """The processor pods that committed their first batch, by uid: each one's start. Every
    pod's log is copied to `logs` (`<pod>-<uid>.log`), since a replaced pod's log goes with it."""
    pods = processor_pods(kubeconfig)
    logs.mkdir(parents=True, exist_ok=True)
    starts = {}
    for pod in pods:
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        text = kubectl_logs(kubeconfig, NAMESPACE, name)
        (logs / f"{name}-{uid[:8]}.log").write_text(text)
        read = read_start_line(text)
        if read is not None:
            starts[uid] = PodStart(name, *read)
    return starts


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def longest_gaps(
    records: Sequence[OutputRecord], partitions: int, since_ms: int, until_ms: int
) -> dict[int, tuple[float, float]]:
    """Per partition, where its longest stretch without output in [since, until] started (in
    seconds from `since`, negative when it began before) and how long it was: `zero_output_gaps`'
    measure (a gap open at `since` counts from the partition's last output before), placed."""
    ordered = sorted(records, key=lambda r: r.timestamp_ms)
    before = {r.partition: r.timestamp_ms for r in ordered if r.timestamp_ms < since_ms}
    last = {p: before.get(p, since_ms) for p in range(partitions)}
    longest = {p: (last[p], 0) for p in range(partitions)}
    for record in ordered:
        p, at = record.partition, record.timestamp_ms
        if since_ms <= at <= until_ms and p in last:
            if at - last[p] > longest[p][1]:
                longest[p] = (last[p], at - last[p])
            last[p] = at
    for p in range(partitions):
        if until_ms - last[p] > longest[p][1]:
            longest[p] = (last[p], until_ms - last[p])
    return {p: ((s - since_ms) / 1000, length / 1000) for p, (s, length) in longest.items()}


def measure(params: NodeParams, kubeconfig: str, workdir: Path, out: Path) -> bool:
    """Steps 3 and 4 (run under the cluster's DNS); whether the output was exact."""
    maps = kubectl_json(kubeconfig, "configmaps", "-n", NAMESPACE)["items"]
    (text,) = [m["data"][PROPERTIES_FILE] for m in maps if PROPERTIES_FILE in m.get("data", {})]
    properties = load_properties(text)
    bootstrap = properties["bootstrap.servers"]
    truth = Truth(
        load_aggregation(properties.get("aggregation.class", DEFAULTS["aggregation.class"]))
    )
    tail = OutputTail(bootstrap, properties["output.topic"]).start()
    tail.attach(truth)
    load = LoadSettings(
        topic=properties["input.topic"],
        rate=params.rate,
        keys=params.keys,
        seed=BenchParams().seed,
        record_timestamps=True,
    )
    loader = LoadThread(LoadGenerator(load, producer_config(bootstrap), truth=truth)).start()
    started = time.time()
    try:
        steady = _wait_steady(tail, params)
        log.info("every partition's output flows, %.0f s after the load started", steady - started)
        first = pod_starts(kubeconfig, out / "pods")
        t0 = time.time()
        with PodSampler(kubeconfig=kubeconfig, t0=t0) as sampler:
            summary_up = engine("up", workdir, kubeconfig, params.settings(roll=1))
            returned = time.time() - t0
            log.info("the roll's `pulumi up` returned after %.0f s: %s", returned, summary_up)
            time.sleep(params.tail_s)  # the load runs on: what the output shows after the roll
        rolled = [s for uid, s in pod_starts(kubeconfig, out / "pods").items() if uid not in first]
        summary = loader.stop()
        end = t0 + returned + params.tail_s
        if not tail.wait_until_caught_up(300.0):
            log.warning("the output was not read to its end within 300 s")
        poll_until(
            lambda: check_output(summary.truth, tail.snapshot()[0]).ok, 300.0, interval_s=2.0
        )
        check = check_output(summary.truth, tail.snapshot()[0])
    finally:
        loader.stop_event.set()
        tail.stop()
    window = (int(t0 * 1000), int(end * 1000))
    gaps = longest_gaps(tail.records, tail.partitions, *window)
    during = [lat for lat in summary.truth.latencies if window[0] <= lat.output_ms <= window[1]]
    seconds = [lat.seconds for lat in during]
    pods = sampler.timeline()
    row = {
        "case": "pulumi up rolls the processor (StatefulSet controller)",
        "broker": f"Apache Kafka {KAFKA_VERSION}, 3 brokers in pods on one node",
        "workload": params.workload,
        "pods (CPU each)": f"brokers {params.broker_cpu}, processors {params.processor_cpu}",
        "produced": check.produced,
        "match": "yes" if check.ok else "NO",
        "duplicates": check.duplicates,
        "zero output s (max)": max(g for _, g in gaps.values()),
        "zero output s per partition": " ".join(
            f"{p}:{g:.1f}@{s:.0f}" for p, (s, g) in sorted(gaps.items())
        ),
        "late > 10 s %": late_percent(seconds),
        "p99 latency s (roll)": percentile(seconds, 0.99),
        "max latency s (roll)": max(seconds, default=None),
        "up returned s": round(returned, 1),
        "roll by the API server (s from up)": "; ".join(_life(p) for p in pods),
        "process start to first committed batch s (first starts; the roll's)": (
            f"{_seconds(first.values())}; {_seconds(rolled)}"
        ),
    }
    print(write_table(out, "node-rollout", COLUMNS, [row]), flush=True)
    print("the roll, pod by pod (seconds from the start of `pulumi up`):")
    for pod in pods:
        print(f"  {_life(pod)}")
    print("each pod's start, process start to first committed batch (its phases, seconds):")
    for pod_start in [*first.values(), *rolled]:
        print(f"  {pod_start}")
    print("the longest gap per partition (seconds, and where it started: seconds from `up`):")
    for p, (start, length) in sorted(gaps.items()):
        print(f"  partition {p}: {length:.1f} s from {start:.1f} s")
    marks = {f"{p.name} stopping": t0 + p.terminating for p in pods if p.terminating is not None}
    marks |= {f"{p.name} Ready": t0 + p.ready for p in pods if p.ready is not None and p.ready > 0}
    plots.output_gaps(
        out / "node-rollout.png",
        f"pulumi up rolls the processor on a real node ({params.workload})",
        [r for r in tail.records if t0 - 30 <= r.timestamp_ms / 1000 <= end],
        t0,
        marks | {"up returned": t0 + returned},
        LATE_S,
    )
    return check.ok


def _seconds(starts: Iterable[PodStart]) -> str:
    return " ".join(f"{s.pod}:{s.seconds:.1f}" for s in sorted(starts, key=lambda s: s.pod)) or "-"


def _life(pod: PodLife) -> str:
    parts = [f"{pod.name} created {pod.created:.0f}"]
    if pod.ready is not None:
        parts.append(f"Ready {pod.ready:.0f}")
    if pod.terminating is not None:
        parts.append(f"terminating {pod.terminating:.0f}")
    if pod.gone is not None:
        parts.append(f"gone {pod.gone:.0f}")
    return ", ".join(parts)


def _wait_steady(tail: OutputTail, params: NodeParams) -> float:
    """When every partition's output had been live (a record within LIVE_S) for STEADY_S."""
    since: list[float | None] = [None]

    def steady() -> float | None:
        now_ms = int(time.time() * 1000)
        newest = {}
        for record in tail.records[-5000:]:
            newest[record.partition] = record.timestamp_ms
        live = len(newest) == tail.partitions and all(
            now_ms - t <= LIVE_S * 1000 for t in newest.values()
        )
        if not live:
            since[0] = None
            return None
        began = since[0] = since[0] or time.time()
        return time.time() if time.time() - began >= STEADY_S else None

    found = poll_until(
        steady,
        params.ready_timeout_s,
        interval_s=1.0,
        progress=lambda: log.info("waiting for every partition's output (%d read)", tail.read),
    )
    if found is None:
        raise RuntimeError(
            f"the processor's output did not flow on all {tail.partitions} partitions within "
            f"{params.ready_timeout_s:g} s; see `kubectl logs -n {NAMESPACE} {PROCESSOR}-0`"
        )
    return found


def run(params: NodeParams, out: Path) -> int:
    """Steps 1 to 4, the node stopped at the end; 0 when the output was exact."""
    missing = subprocess.run(
        [sys.executable, str(NODE), "missing"], capture_output=True, text=True, check=False
    )
    if missing.returncode != 0:
        log.error(
            "the real node cannot start here (%s): build its parts with `make tools node-parts` "
            "(as root), then run node-rollout again",
            missing.stdout.strip(),
        )
        return 2
    workdir = out / "stack"
    shutil.rmtree(workdir, ignore_errors=True)  # a new cluster: no state of an earlier run
    up = subprocess.run(
        [sys.executable, str(NODE), "up"], capture_output=True, text=True, timeout=900, check=False
    )
    if up.returncode != 0:
        log.error(
            "`devkit/kube/node.py up` failed (it stopped what it started):\n%s", up.stderr[-3000:]
        )
        return 2
    kubeconfig = up.stdout.strip().splitlines()[-1]
    try:
        deployed = engine("up", workdir, kubeconfig, params.settings(roll=0))
        log.info("the dev stack is up on the node in %.0f s: %s", deployed["seconds"], deployed)
        inner = [sys.executable, "-m", "devkit.bench.node_rollout", "--measure", kubeconfig]
        inner += ["--params", json.dumps(asdict(params)), "--out", str(out)]
        done = subprocess.run([sys.executable, str(NODE), "run", "--", *inner], cwd=ROOT)
        return done.returncode
    finally:
        subprocess.run([sys.executable, str(NODE), "down"], timeout=600, check=False)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload's options, defaulting to `NodeParams`."""
    defaults = NodeParams()
    parser.add_argument("--rate", type=float, default=defaults.rate, help="page views per second")
    parser.add_argument("--keys", type=int, default=defaults.keys, help="distinct pages")
    parser.add_argument("--partitions", type=int, default=defaults.partitions)
    parser.add_argument("--replicas", type=int, default=defaults.replicas, help="processor pods")
    parser.add_argument("--standby-replicas", type=int, default=defaults.standby_replicas)
    parser.add_argument(
        "--membership-mode",
        choices=(MEMBERSHIP_HANDOFF, MEMBERSHIP_STATIC),
        default=defaults.membership_mode,
        help="the processor's (one replica needs static: a hand-off needs another instance)",
    )
    parser.add_argument("--processor-cpu", default=defaults.processor_cpu, help="each pod's")
    parser.add_argument("--broker-cpu", default=defaults.broker_cpu, help="each broker's")
    parser.add_argument("--tail-s", type=float, default=defaults.tail_s)
    parser.add_argument("--out", type=Path, default=Path("build/bench"))


def params_of(args: argparse.Namespace) -> NodeParams:
    """The parsed options as `NodeParams`."""
    return NodeParams(
        rate=args.rate,
        keys=args.keys,
        partitions=args.partitions,
        replicas=args.replicas,
        standby_replicas=args.standby_replicas,
        membership_mode=args.membership_mode,
        processor_cpu=args.processor_cpu,
        broker_cpu=args.broker_cpu,
        tail_s=args.tail_s,
    )


def main() -> int:
    """The measuring step, under the cluster's DNS (`run` starts it so)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stdout
    )
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure", metavar="KUBECONFIG", required=True)
    parser.add_argument("--params", type=json.loads, required=True, help="NodeParams, as JSON")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    out = args.out.resolve()
    return 0 if measure(NodeParams(**args.params), args.measure, out / "stack", out) else 1


if __name__ == "__main__":
    sys.exit(main())
