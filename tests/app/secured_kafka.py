"""What the tests of a secured Apache Kafka (`KraftCluster(security=...)`) share.

Deny by default holds for the topic reconciler too: on a fresh secured cluster its own ACLs come
from the brokers' readiness sidecars (`python -m app.broker_readiness --grant-acls`), as prod
runs them, so these tests start the sidecars before they run the reconciler.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from app.kraft_cluster import KraftCluster, free_port
from tests.app.processor_harness import REPO, wait_until

# Each sidecar answers 200 once its broker is in sync and the ACLs are granted: three JVMs and
# their clients share two cores here.
SIDECAR_DEADLINE_S = 240.0


@contextmanager
def readiness_sidecars(
    cluster: KraftCluster, grants: Path, log_dir: Path, deadline_s: float = SIDECAR_DEADLINE_S
) -> Iterator[list[Path]]:
    """One `app.broker_readiness` per broker with the prod sidecar's arguments (the broker's
    certificate on its INTERNAL listener, the ACLs file `grants` to grant); yields their log
    files (in `log_dir`) once every one answers 200 on /ready."""
    started: list[tuple[subprocess.Popen[bytes], int, Path]] = []
    try:
        for node in cluster.nodes:
            port, log_file = free_port(), log_dir / f"sidecar-{node.node_id}.log"
            with log_file.open("wb") as out:
                sidecar = subprocess.Popen(
                    [sys.executable, "-m", "app.broker_readiness", "--node-id", str(node.node_id),
                     "--bootstrap-server", node.admin_endpoint,
                     "--tls-dir", str(cluster.tls_dir), "--grant-acls", str(grants),
                     "--port", str(port), "--host", "127.0.0.1"],
                    cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                )  # fmt: skip
            started.append((sidecar, port, log_file))
        for _, port, log_file in started:
            wait_until(
                partial(_ready, port),
                deadline_s,
                f"the readiness sidecar on :{port} to answer 200 on /ready (log {log_file})",
            )
        yield [log_file for _, _, log_file in started]
    finally:
        for sidecar, _, _ in started:
            sidecar.terminate()
            sidecar.wait(30)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False
