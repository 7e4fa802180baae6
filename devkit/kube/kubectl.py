"""`kubectl get` as JSON against the local cluster: for the engine and node tiers and the
benchmarks on the real node alike. Standard library only."""

from __future__ import annotations

import json
import subprocess
from typing import Any


def kubectl_json(kubeconfig: str, *args: str) -> Any:
    """`kubectl get ... -o json` against the cluster `kubeconfig` names; its document."""
    result = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "get", *args, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl get {' '.join(args)}: {result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout)


def kubectl_logs(kubeconfig: str, namespace: str, pod: str) -> str:
    """`kubectl logs` of `pod`'s container in `namespace`; empty when it has not started yet."""
    result = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "logs", "-n", namespace, pod],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.stdout if result.returncode == 0 else ""
