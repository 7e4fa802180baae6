"""The manifests `python -m offline.render` writes, run on a `pod_runtime.Node` as a cluster would.

The two images are made of what this machine has, the way their Dockerfiles make them:

- the broker's image: the release's jars at /opt/kafka/libs (`contract.container_commands.
  KAFKA_LIBS`) and this machine's Java on the PATH, what the rendered broker command needs of
  any image (the official `apache/kafka` one holds the same).
- the processor image: this repository at /app, the application environment at /opt/venv, this
  machine's Java at /opt/java, and the final stage's ENV, WORKDIR, USER and ENTRYPOINT read from
  the repository's Dockerfile.

The controllers: a StatefulSet's pods are `<name>-<ordinal>` with the pod-name and pod-index
labels and their claims; `Parallel` starts them together, `OrderedReady` one after another,
each Ready for `minReadySeconds` first; a Job's pod is retried up to `backoffLimit`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from app.devkit.kafka_release import KafkaRelease
from contract.container_commands import KAFKA_LIBS
from tests.app.pod_runtime import Image, Node, PodSpec, RunningPod

REPO = Path(__file__).resolve().parents[2]
INFRA_PYTHON = REPO / ".venv" / "infra" / "bin" / "python"
PROCESSOR_IMAGE_FOLDERS = {"/app": REPO, "/opt/venv": Path(sys.prefix)}


def render(stack: str, out: Path, overrides: Mapping[str, Any] | None = None) -> None:
    """`python -m offline.render --stack <stack> --out <out> [--override KEY=JSON ...]`, in the
    infra environment."""
    options = [f"--override={key}={json.dumps(value)}" for key, value in (overrides or {}).items()]
    result = subprocess.run(
        [str(INFRA_PYTHON), "-m", "offline.render", "--stack", stack, "--out", str(out), *options],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"rendering the {stack} stack with {INFRA_PYTHON} (made by `make setup`) "
            f"exited {result.returncode}:\n{result.stderr[-3000:]}"
        )


@dataclass(frozen=True)
class Manifests:
    """The rendered objects, by kind and name."""

    objects: tuple[dict[str, Any], ...]

    @classmethod
    def load(cls, folder: Path) -> Manifests:
        """Every YAML document in the folder."""
        docs = []
        for path in sorted(folder.glob("*.yaml")):
            docs += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
        return cls(tuple(docs))

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """Every object of that kind."""
        return [o for o in self.objects if o["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        """The object of that kind and name (KeyError names what exists)."""
        for obj in self.of_kind(kind):
            if obj["metadata"]["name"] == name:
                return obj
        names = [o["metadata"]["name"] for o in self.of_kind(kind)]
        raise KeyError(f"no {kind} {name!r}; rendered: {names}")

    def config_maps(self) -> dict[str, dict[str, str]]:
        """ConfigMap data by name."""
        return {c["metadata"]["name"]: c.get("data", {}) for c in self.of_kind("ConfigMap")}


# -- Images --------------------------------------------------------------------------------


def java_home() -> Path:
    """This machine's Java: $JAVA_HOME, else the `java` on PATH."""
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"])
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("no Java: set JAVA_HOME or put java on PATH")
    return Path(os.path.realpath(java)).parents[1]


def _final_stage(dockerfile: Path) -> list[str]:
    """The Dockerfile's instructions after its last FROM, continuation lines joined."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text(encoding="utf-8"))
    lines = [line.strip() for line in text.splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    last_from = max(i for i, line in enumerate(instructions) if line.upper().startswith("FROM "))
    return instructions[last_from + 1 :]


def interpreter_folders(folder: Path) -> dict[str, Path]:
    """The Python the application environment links to, reachable by any user (the image has
    its own under /usr/local): if a parent is closed to others (/root), a stand-in replaces it."""
    base = Path(sys.base_prefix)
    closed = next((p for p in reversed(base.parents) if not p.stat().st_mode & 0o001), None)
    if closed is None:
        return {}
    stand_in = folder / "interpreter-parent"
    inner = stand_in / base.relative_to(closed)
    inner.mkdir(parents=True, exist_ok=True)
    for path in [inner, *inner.relative_to(stand_in).parents]:
        (stand_in / path).chmod(0o755)
    return {str(closed): stand_in, str(base): base}


def image_accounts(instructions: list[str], folder: Path) -> dict[str, Path]:
    """/etc/passwd and /etc/group with the users and groups the stage's `useradd`/`groupadd`
    create (Java takes `user.home` from there; without an entry it is "?")."""
    text = " ".join(instructions)
    users = re.findall(
        r"useradd --uid (\d+) --gid (\d+) .*?--home-dir (\S+) --shell (\S+) (\w+)", text
    )
    groups = re.findall(r"groupadd --gid (\d+) (\w+)", text)
    folder.mkdir(parents=True, exist_ok=True)
    passwd, group = folder / "passwd", folder / "group"
    passwd.write_text(
        Path("/etc/passwd").read_text(encoding="utf-8")
        + "".join(f"{n}:x:{u}:{g}::{home}:{shell}\n" for u, g, home, shell, n in users),
        encoding="utf-8",
    )
    group.write_text(
        Path("/etc/group").read_text(encoding="utf-8")
        + "".join(f"{n}:x:{g}:\n" for g, n in groups),
        encoding="utf-8",
    )
    for path in (passwd, group):
        path.chmod(0o644)
    return {"/etc/passwd": passwd, "/etc/group": group}


def processor_image(name: str, folder: Path, dockerfile: Path = REPO / "Dockerfile") -> Image:
    """The processor image as its Dockerfile's final stage describes it, from local folders."""
    stage = _final_stage(dockerfile)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    workdir, uid, entrypoint, cmd = "/", 0, (), ()
    for instruction in stage:
        keyword, _, rest = instruction.partition(" ")
        keyword = keyword.upper()
        if keyword == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                env[key] = re.sub(
                    r"\$(\w+)|\$\{(\w+)\}", lambda m: env.get(m[1] or m[2], ""), value
                )
        elif keyword == "WORKDIR":
            workdir = rest.strip()
        elif keyword == "USER":
            uid = int(rest.strip().split(":")[0])
        elif keyword == "ENTRYPOINT":
            entrypoint = tuple(yaml.safe_load(rest))
        elif keyword == "CMD":
            cmd = tuple(yaml.safe_load(rest))
    folders = {
        **PROCESSOR_IMAGE_FOLDERS,
        env.get("JAVA_HOME", "/opt/java"): java_home(),
        **interpreter_folders(folder),
        **image_accounts(stage, folder / "processor-accounts"),
    }
    return Image(name, folders, env, workdir, uid, entrypoint, cmd)


def kafka_image(name: str, release: KafkaRelease) -> Image:
    """A broker image: Apache Kafka's jars where the official image holds them, and a Java
    runtime on the PATH as eclipse-temurin (its base) puts it."""
    return Image(
        name,
        {KAFKA_LIBS: release.libs, "/opt/java/openjdk": java_home()},
        {
            "PATH": "/opt/java/openjdk/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
            "/sbin:/bin",
            "JAVA_HOME": "/opt/java/openjdk",
        },
        uid=1000,  # the official image's appuser
    )


# -- Controllers ---------------------------------------------------------------------------


def stateful_set_pods(sts: Mapping[str, Any], claims_folder: Path) -> list[PodSpec]:
    """The pods the StatefulSet controller creates, with their claims."""
    meta, spec = sts["metadata"], sts["spec"]
    template = spec["template"]
    pods = []
    for ordinal in range(int(spec.get("replicas", 1))):
        name = f"{meta['name']}-{ordinal}"
        labels = {
            **template["metadata"].get("labels", {}),
            "statefulset.kubernetes.io/pod-name": name,
            "apps.kubernetes.io/pod-index": str(ordinal),
        }
        claims = {
            claim["metadata"]["name"]: claims_folder / f"{claim['metadata']['name']}-{name}"
            for claim in spec.get("volumeClaimTemplates", [])
        }
        pods.append(
            PodSpec(name, meta["namespace"], labels, template["spec"], spec["serviceName"], claims)
        )
    return pods


def publish_dns(node: Node, manifests: Manifests, pods: list[PodSpec]) -> None:
    """Cluster DNS for these pods: each pod's FQDN, each Service's name for the pods it selects."""
    for pod in pods:
        if pod.fqdn:
            node.publish(pod.fqdn, [pod.name])
    for service in manifests.of_kind("Service"):
        selector = service["spec"].get("selector", {})
        meta = service["metadata"]
        selected = [p.name for p in pods if selector.items() <= p.labels.items()]
        if selected and meta["namespace"] == pods[0].namespace:
            node.publish(f"{meta['name']}.{meta['namespace']}.svc.cluster.local", selected)


def _wait_available(node: Node, pod: RunningPod, min_ready_s: float, timeout_s: float) -> None:
    """Wait until the pod is available: Ready, then Ready for minReadySeconds without a break."""
    node.wait(lambda: pod.ready, timeout_s, f"pod {pod.spec.name} Ready")
    since = time.monotonic()
    node.wait(
        lambda: not pod.ready or time.monotonic() - since >= min_ready_s,
        timeout_s,
        f"pod {pod.spec.name} available",
    )
    if not pod.ready:
        raise RuntimeError(f"pod {pod.spec.name} lost readiness within minReadySeconds")


def start_stateful_set(
    node: Node, sts: Mapping[str, Any], pods: list[PodSpec], timeout_s: float
) -> list[RunningPod]:
    """Create the pods as the StatefulSet controller does under its pod management policy."""
    running = []
    ordered = sts["spec"].get("podManagementPolicy", "OrderedReady") == "OrderedReady"
    min_ready_s = float(sts["spec"].get("minReadySeconds", 0))
    for pod in pods:
        started = node.run_pod(pod)
        running.append(started)
        if ordered:
            _wait_available(node, started, min_ready_s, timeout_s)
    if not ordered:
        node.wait(
            lambda: all(p.ready for p in running), timeout_s, f"{sts['metadata']['name']} Ready"
        )
    return running


def run_to_completion(node: Node, pod: PodSpec, timeout_s: float) -> tuple[int, str]:
    """Run a one-container pod until it exits, then delete it: (exit code, its output)."""
    running = node.run_pod(pod)
    (container,) = running.containers.values()
    try:
        code = container.process.wait(timeout=timeout_s)
    finally:
        output = container.log_path.read_text(encoding="utf-8", errors="replace")
        node.delete_pod(pod.name)
    return code, output


def run_job(node: Node, job: Mapping[str, Any], timeout_s: float) -> list[str]:
    """Run the Job's pod until it succeeds (retried up to `backoffLimit`); each try's output."""
    meta, spec = job["metadata"], job["spec"]
    template = spec["template"]
    outputs = []
    for attempt in range(int(spec.get("backoffLimit", 6)) + 1):
        pod = PodSpec(
            f"{meta['name']}-{attempt}",
            meta["namespace"],
            {**template["metadata"].get("labels", {}), "job-name": meta["name"]},
            template["spec"],
        )
        code, output = run_to_completion(node, pod, timeout_s)
        outputs.append(output)
        if code == 0:
            return outputs
    raise RuntimeError(f"job {meta['name']} failed {len(outputs)} times; last:\n{outputs[-1]}")
