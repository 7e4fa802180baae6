"""The engine tier's cluster: the one `KUBECONFIG` names, or a local control plane started here."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.kube.engine_stack import ROOT, tools_missing

CONTROL_PLANE = ROOT / "devkit" / "kube" / "control_plane.py"


@pytest.fixture(scope="session")
def kubeconfig() -> Iterator[str]:
    """A cluster for the engine: `KUBECONFIG` if set (kind, a real one), else `kube-up`'s."""
    missing = tools_missing(
        "pulumi", "pulumi-resource-kubernetes", "kube-apiserver", "etcd", "kwok"
    )
    if missing:
        pytest.fail(
            f"the engine tier needs {', '.join(missing)} from `make tools` (Go builds, tens of "
            "minutes cold; `make test` runs it)"
        )
    given = os.environ.get("ENGINE_KUBECONFIG")
    if given:
        yield given
        return
    started = subprocess.run(
        [sys.executable, str(CONTROL_PLANE), "up"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if started.returncode != 0:
        pytest.fail(f"the local control plane did not start:\n{started.stderr[-3000:]}")
    sys.stderr.write(started.stderr)
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([sys.executable, str(CONTROL_PLANE), "down"], timeout=120, check=False)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path / "workspace"
