"""`devkit/kube/node.py down` after the dev stack ran on the node: nothing of it survives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from devkit.kube import control_plane, node
from tests.node import machine_state
from tests.node.conftest import NODE


def test_no_component_asked_the_machines_resolver_anything(kubeconfig: str) -> None:
    """A lookup through the machine's resolver is a packet to an address outside the machine;
    a component that tried one names that address in its log (Go's resolver errors do)."""
    resolvers = [
        line.split()[1]
        for line in Path("/etc/resolv.conf").read_text().splitlines()
        if line.startswith("nameserver")
    ]
    logs = [*node.LOGS.glob("*.log"), *Path(control_plane.LOGS).glob("*.log")]
    asked = [
        f"{log.name}: {line.strip()[:300]}"
        for log in logs
        for line in log.read_text(errors="replace").splitlines()
        if any(f"{address}:53" in line for address in resolvers)
    ]
    assert logs and asked == [], "\n".join(asked[:10])


def test_down_leaves_no_rule_setting_mount_link_or_cgroup_behind(
    kubeconfig: str, machine_before: dict[str, object]
) -> None:
    down = subprocess.run(
        [sys.executable, str(NODE), "down"], capture_output=True, text=True, timeout=300
    )
    assert down.returncode == 0, down.stderr
    print(f"\n{down.stdout.strip()}")
    left = machine_state.differences(machine_before, machine_state.snapshot())
    assert left == [], "\n".join(left)
