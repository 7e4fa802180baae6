"""The real node's tier: the local control plane with a node whose pods run in containers."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from devkit.kube.engine_stack import ROOT
from tests.node import machine_state

NODE = ROOT / "devkit" / "kube" / "node.py"


@pytest.fixture(scope="session")
def machine_before() -> dict[str, object]:
    """The machine as it was before the node started."""
    if os.geteuid() != 0:
        pytest.skip("the real node needs root (containers, a bridge, mounts); CI runs it as root")
    return machine_state.snapshot()


@pytest.fixture(scope="session")
def kubeconfig(machine_before: dict[str, object]) -> Iterator[str]:
    """`devkit/kube/node.py up`'s cluster, stopped with `down` at the end whatever happened."""
    needs = subprocess.run(
        [sys.executable, str(NODE), "missing"], capture_output=True, text=True, check=False
    )
    if needs.returncode != 0:
        pytest.fail(f"the real node cannot start here; missing:\n{needs.stdout}")
    started = subprocess.run(
        [sys.executable, str(NODE), "up"], capture_output=True, text=True, timeout=600, check=False
    )
    sys.stderr.write(started.stderr)
    if started.returncode != 0:  # `up` stopped what it had started (a refusal started nothing)
        pytest.fail(f"the real node did not start:\n{started.stderr[-4000:]}")
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([sys.executable, str(NODE), "down"], timeout=300, check=False)
