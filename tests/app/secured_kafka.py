"""What the tests of a secured Apache Kafka (`KraftCluster(security=...)`) share: the brokers'
pods' two helpers, run on this host.

Deny by default holds for the topic reconciler and the readiness user too: on a fresh secured
cluster their ACLs come from each broker pod's `grant-acls` container (the rendered
`infra/bootstrap_grants.py` script, with `kafka-acls.sh` from the release's jars), and each
readiness sidecar (`python -m app.admin.broker_readiness`, as its own SCRAM user) answers ready only
once they exist, as prod runs them; so these tests start both before they run the reconciler.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from app.clients.waiting import wait_until
from contract import acl_grants, acl_specs
from contract.acl_specs import KafkaUser
from contract.container_commands import KAFKA_LIBS, SCRAM_MECHANISM_FILE, USERS_DIR
from devkit.kraft_cluster import KraftCluster
from devkit.local_ports import free_port
from infra import bootstrap_grants
from tests.app.processor_harness import REPO

# Each sidecar answers 200 once its broker is in sync and the ACLs are granted: three JVMs, their
# clients and a JVM per line of the grants share two cores here.
SIDECAR_DEADLINE_S = 240.0
# Where the grant script of `readiness_sidecars` finds the bootstrap files: a mount path of this
# test's own, pointed at a local folder as the rendered ones are.
BOOTSTRAP_MOUNT = "/pod/bootstrap"


def localize(text: str, mounts: Mapping[str, Path]) -> str:
    """`text` with every path under a mount path pointing into that mount's local folder."""
    if not mounts:
        return text
    paths = "|".join(re.escape(p) for p in sorted(mounts, key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w./-])({paths})(?=[/:\s\"']|\Z)")
    return pattern.sub(lambda m: str(mounts[m[1]]), text)


def release_mounts(cluster: KraftCluster) -> dict[str, Path]:
    """The image's `KAFKA_LIBS` as this machine holds it: the cluster's release jars (the
    rendered tools run `java -cp '<KAFKA_LIBS>/*' <main class>`, `java` from PATH)."""
    return {KAFKA_LIBS: cluster.release.libs}


def grant_command(
    script: str, cluster: KraftCluster, node_id: int, mounts: Mapping[str, Path], state: Path
) -> list[str]:
    """A `grant-acls` container's `sh -c` script, run here for node `node_id`: its mount paths
    point at local folders (`mounts`), its `/tmp` at `state`, Kafka's jars at the cluster's
    release, and the broker it connects to (`localhost:<port>`) is this node's INTERNAL
    listener."""
    local = localize(
        script, {**mounts, bootstrap_grants.STATE_DIR: state, **release_mounts(cluster)}
    )
    local, found = re.subn(r"\blocalhost:\d+", cluster.node(node_id).admin_endpoint, local)
    assert found == 1, f"the grant script names its broker once, as localhost:<port>:\n{script}"
    return ["sh", "-c", local]


@dataclass
class BrokerPod:
    """One broker's two helpers as started here, and where they write."""

    node_id: int
    port: int  # the readiness sidecar's HTTP port
    sidecar_log: Path
    grant_log: Path | None = None
    grant: subprocess.Popen[bytes] | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def answer(self, path: str) -> tuple[int, bytes]:
        """The sidecar's status and body for `path` (0 when it does not answer)."""
        try:
            with urllib.request.urlopen(self.url(path), timeout=10) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as refused:
            return int(refused.code), bytes(refused.read())
        except OSError:
            return 0, b""

    def ready(self) -> bool:
        return self.answer("/ready")[0] == 200


def _start(command: Sequence[str], log_file: Path) -> subprocess.Popen[bytes]:
    with log_file.open("wb") as out:
        # Its own process group: the grant script's kafka-acls.sh JVM stops with it.
        return subprocess.Popen(
            command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)


@dataclass
class BrokerPods:
    """Every broker's readiness sidecar, started; the grant containers once `start_grants`."""

    pods: list[BrokerPod]
    grant_commands: Mapping[int, Sequence[str]]
    log_dir: Path
    stack: ExitStack

    def start_grants(self) -> None:
        """Start each broker's grant container (its script, run here)."""
        for pod in self.pods:
            pod.grant_log = self.log_dir / f"grant-acls-{pod.node_id}.log"
            pod.grant = _start(self.grant_commands[pod.node_id], pod.grant_log)
            self.stack.callback(_stop, pod.grant)

    def wait_ready(self, deadline_s: float = SIDECAR_DEADLINE_S) -> None:
        """Wait until every sidecar answers 200 on /ready."""
        for pod in self.pods:
            wait_until(
                pod.ready,
                deadline_s,
                f"the readiness sidecar of node {pod.node_id} to answer 200 on /ready (logs "
                f"{pod.sidecar_log}, {pod.grant_log})",
                seen=partial(pod.answer, "/ready"),
                interval_s=0.5,
            )

    def logs(self) -> list[Path]:
        """The sidecars' and the grant containers' log files."""
        return [p for pod in self.pods for p in (pod.sidecar_log, pod.grant_log) if p]


@contextmanager
def broker_pods(
    cluster: KraftCluster,
    sidecar_args: Mapping[int, Sequence[str]],
    grant_commands: Mapping[int, Sequence[str]],
    log_dir: Path,
    deadline_s: float = SIDECAR_DEADLINE_S,
    *,
    grant: bool = True,
) -> Iterator[BrokerPods]:
    """Per node its readiness sidecar (`python -m app.admin.broker_readiness` +
    `sidecar_args[id]`, on a free port) and, unless `grant` is false (the test starts them), its
    grant container (`grant_commands[id]`), then waits until every sidecar answers 200 on /ready."""
    with ExitStack() as stack:
        pods = []
        for node in cluster.nodes:
            port = free_port()
            pod = BrokerPod(node.node_id, port, log_dir / f"sidecar-{node.node_id}.log")
            command = [sys.executable, "-m", "app.admin.broker_readiness",
                       *sidecar_args[node.node_id],
                       "--port", str(port), "--host", "127.0.0.1"]  # fmt: skip
            stack.callback(_stop, _start(command, pod.sidecar_log))
            pods.append(pod)
        running = BrokerPods(pods, grant_commands, log_dir, stack)
        if grant:
            running.start_grants()
            running.wait_ready(deadline_s)
        yield running


def readiness_files(
    cluster: KraftCluster,
    bootstrap_users: Sequence[KafkaUser],
    readiness_password: str,
    folder: Path,
) -> Path:
    """The bootstrap ConfigMap's files for the pods' helpers, written from the program's own
    functions (`infra.bootstrap_grants`, `contract.acl_specs`) into `folder`; beside them the
    readiness user's password and the bootstrap users' (`users/`, as bootstrapped)."""
    bootstrap, user, users = folder / "bootstrap", folder / "kafka-user", folder / "users"
    for directory in (bootstrap, user, users, folder / "tmp"):
        directory.mkdir(parents=True, exist_ok=True)
    (user / "password").write_text(readiness_password, encoding="utf-8")
    assert cluster.security is not None, "the grant containers run on a secured cluster"
    for name in (u.name for u in bootstrap_users):
        (users / name).write_text(cluster.security.scram_users[name], encoding="utf-8")
    readiness = cluster.client_configs(acl_specs.BROKER_READINESS_USER, f"${{dir:{user}:password}}")
    files = {
        "bootstrap-acls.json": acl_specs.dumps(list(bootstrap_users)),
        acl_grants.GRANTS_FILE: acl_grants.grant_lines(list(bootstrap_users)),
        bootstrap_grants.GRANT_CLIENT_FILE: bootstrap_grants.grant_client_properties(
            str(cluster.tls_dir)
        ),
        SCRAM_MECHANISM_FILE: cluster.security.scram_mechanism,
        "readiness-client.properties": "".join(
            f"{key}={value}\n" for key, value in readiness.items() if key != "bootstrap.servers"
        ),
    }
    for name, text in files.items():
        (bootstrap / name).write_text(text, encoding="utf-8")
    return bootstrap


@contextmanager
def readiness_sidecars(
    cluster: KraftCluster,
    bootstrap_users: Sequence[KafkaUser],
    readiness_password: str,
    log_dir: Path,
    deadline_s: float = SIDECAR_DEADLINE_S,
) -> Iterator[BrokerPods]:
    """Every broker's grant container and readiness sidecar as the program makes them, with
    files written here (not from a render); yields once every sidecar answers 200 on /ready."""
    script = bootstrap_grants.grant_script(BOOTSTRAP_MOUNT, "localhost:9094")
    sidecars, grants = {}, {}
    for node in cluster.nodes:
        folder = log_dir / f"pod-{node.node_id}"
        bootstrap = readiness_files(cluster, bootstrap_users, readiness_password, folder)
        sidecars[node.node_id] = [
            "--node-id", str(node.node_id),
            "--bootstrap-server", f"127.0.0.1:{node.broker_port}",
            "--command-config", str(bootstrap / "readiness-client.properties"),
            "--bootstrap-acls", str(bootstrap / "bootstrap-acls.json"),
        ]  # fmt: skip
        mounts = {BOOTSTRAP_MOUNT: bootstrap, USERS_DIR: folder / "users"}
        grants[node.node_id] = grant_command(script, cluster, node.node_id, mounts, folder / "tmp")
    with broker_pods(cluster, sidecars, grants, log_dir, deadline_s) as pods:
        yield pods
