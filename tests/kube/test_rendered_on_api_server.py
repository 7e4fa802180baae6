"""The rendered stacks against a real Kubernetes API server: `make test-kube`.

Takes any cluster (`KUBECONFIG`, `kubectl` on PATH): the local control plane of
`make kube-up` (kube-apiserver and kwok nodes on 127.0.0.1, pods Ready without containers) or
kind. The manifests are the program's own, rendered under Pulumi's mocks, each stack in a
namespace of its own. What only a real API server checks: the schema and its defaulting,
Pod Security admission (`restricted`, enforced on every pod the controllers create), and the
StatefulSet controller's rolling update (highest ordinal first, each pod after `minReadySeconds`).
The Pulumi engine's own `preview`, `up` and `destroy` over the same API server are
`tests/engine/`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.clients.waiting import wait_until
from offline.render import record_stack, write_manifests

# Created before what lives in them, then by what refers to what (Pulumi orders by dependency;
# `kubectl apply -f dir/` would go alphabetically).
KIND_ORDER = (
    "Namespace",
    "ServiceAccount",
    "ConfigMap",
    "Secret",
    "Service",
    "NetworkPolicy",
    "PodDisruptionBudget",
    "StatefulSet",
    "Job",
)
# Pods on simulated nodes are Ready at once; a roll of 2 processors waits minReadySeconds twice.
DEADLINE_S = 180.0


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> str:
    """Run kubectl; a failure names the command and what the server said."""
    result = subprocess.run(
        ["kubectl", *args], input=stdin, capture_output=True, text=True, timeout=120, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout + result.stderr


@pytest.fixture(scope="session", autouse=True)
def cluster() -> None:
    if not os.environ.get("KUBECONFIG") or shutil.which("kubectl") is None:
        pytest.fail(
            "make test-kube needs a cluster: KUBECONFIG=... and kubectl on PATH "
            "(`export KUBECONFIG=$(make -s kube-up)` starts a local one)"
        )
    kubectl("get", "--raw", "/readyz")


def rendered(stack: str, namespace: str, tmp: Path, **overrides: Any) -> list[dict[str, Any]]:
    """The stack's manifests in `namespace`, in the order they can be created."""
    out = tmp / f"{stack}-{namespace}"
    write_manifests(record_stack(stack, {"namespace": namespace, **overrides}), out)
    objects = [yaml.safe_load(path.read_text()) for path in sorted(out.glob("*.yaml"))]
    return sorted(objects, key=lambda o: KIND_ORDER.index(o["kind"]))


def apply(objects: list[dict[str, Any]], *extra: str) -> str:
    return kubectl(
        "apply", "--server-side", "--field-manager=test-kube", *extra, "-f", "-",
        stdin=yaml.safe_dump_all(objects),
    )  # fmt: skip


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"tc-{uuid.uuid4().hex[:8]}"
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


def get(kind: str, namespace: str, name: str) -> dict[str, Any]:
    return json.loads(kubectl("get", kind, name, "-n", namespace, "-o", "json"))


def test_prod_passes_the_api_servers_validation_and_pod_security_without_a_warning(
    namespace: str, tmp_path: Path
) -> None:
    objects = rendered("prod", namespace, tmp_path)
    apply(objects[:1])  # the namespace, for real: a dry run of what lives in it needs it
    output = apply(objects[1:], "--dry-run=server")
    warnings = [
        line
        for line in output.splitlines()
        if line.startswith("Warning:")
        # The rendered Secrets hold `[secret]` where Pulumi would put the key and certificates.
        and "failed to find any PEM data" not in line
    ]
    assert warnings == [], warnings
    assert output.count("serverside-applied (server dry run)") == len(objects) - 1


def test_dev_comes_up_under_pod_security_restricted(namespace: str, tmp_path: Path) -> None:
    objects = rendered("dev", namespace, tmp_path)
    apply(objects)
    labels = get("namespace", "", namespace)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    sets = [o["metadata"]["name"] for o in objects if o["kind"] == "StatefulSet"]
    jobs = [o["metadata"]["name"] for o in objects if o["kind"] == "Job"]

    def ready() -> dict[str, tuple[int, int]]:
        """Each StatefulSet's (ready, wanted) replicas and each Job's (succeeded, 1)."""
        state = {}
        for name in sets:
            status = get("statefulset", namespace, name)
            state[name] = (status["status"].get("readyReplicas", 0), status["spec"]["replicas"])
        for name in jobs:
            state[name] = (get("job", namespace, name)["status"].get("succeeded", 0), 1)
        return state

    def all_ready() -> bool:
        return all(done == wanted for done, wanted in ready().values())

    wait_until(
        all_ready,
        DEADLINE_S,
        "every StatefulSet ready and the topic Job complete",
        interval_s=1.0,
        seen=ready,
    )


def test_a_processor_change_rolls_its_pods_highest_ordinal_first_after_min_ready_seconds(
    namespace: str, tmp_path: Path
) -> None:
    objects = rendered("dev", namespace, tmp_path)
    apply(objects)
    processor = next(
        o for o in objects if o["kind"] == "StatefulSet" and o["metadata"]["name"] != "kafka"
    )
    name, replicas = processor["metadata"]["name"], processor["spec"]["replicas"]
    min_ready = processor["spec"]["minReadySeconds"]

    def rolled_out() -> bool:
        status = get("statefulset", namespace, name)["status"]
        return (
            status.get("updatedReplicas") == replicas
            and status.get("availableReplicas") == replicas
            and status.get("currentRevision") == status.get("updateRevision")
        )

    wait_until(
        rolled_out,
        DEADLINE_S,
        f"{name} available",
        interval_s=1.0,
        seen=lambda: get("statefulset", namespace, name),
    )
    changed = rendered("dev", namespace, tmp_path, processor={"cpu": "1500m"})
    before = math.floor(time.time())  # creationTimestamp has whole seconds
    apply([o for o in changed if o["kind"] in ("ConfigMap", "StatefulSet")])
    wait_until(
        lambda: (
            rolled_out()
            and all(created(namespace, f"{name}-{i}") >= before for i in range(replicas))
        ),
        DEADLINE_S,
        f"{name} rolled",
        interval_s=1.0,
        seen=lambda: get("statefulset", namespace, name)["status"],
    )
    starts = [created(namespace, f"{name}-{i}") for i in reversed(range(replicas))]
    assert starts == sorted(starts), f"not highest ordinal first: {starts}"
    gaps = [later - earlier for earlier, later in pairwise(starts)]
    # creationTimestamp has whole seconds: a gap of minReadySeconds may read one second less.
    assert all(gap >= min_ready - 1 for gap in gaps), f"{gaps} s apart; minReady {min_ready} s"


def created(namespace: str, pod: str) -> float:
    stamp = get("pod", namespace, pod)["metadata"]["creationTimestamp"]
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
