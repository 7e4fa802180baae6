"""`make test`'s background build (devkit/kube/niced_build.py): niced in an autogroup of its own,
its exit status and log handed over by `wait`, and `stop` ending everything it started."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "devkit" / "kube" / "niced_build.py"


def niced_build(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"NICED_BUILD_DIR": str(state), "PATH": "/usr/bin:/bin"},
    )


def test_wait_hands_over_the_builds_log_and_exit_status(tmp_path: Path) -> None:
    started = niced_build(tmp_path, "start", "--", "sh", "-c", "nice; echo built; exit 3")
    assert started.returncode == 0, started.stderr
    waited = niced_build(tmp_path, "wait")
    assert waited.returncode == 3
    # the log, after any "waiting for the background build" progress lines
    log = [line for line in waited.stdout.splitlines() if not line.startswith("waiting for")]
    assert log[:2] == ["19", "built"]


def test_a_build_waited_for_makes_way_for_the_next_with_a_log_of_its_own(tmp_path: Path) -> None:
    """`make test` builds the tools, waits, then builds the node's parts."""
    niced_build(tmp_path, "start", "--", "sh", "-c", "echo first-build")
    assert niced_build(tmp_path, "wait").returncode == 0
    started = niced_build(tmp_path, "start", "--", "sh", "-c", "echo second-build; exit 4")
    assert started.returncode == 0, started.stderr
    waited = niced_build(tmp_path, "wait")
    assert waited.returncode == 4
    assert "second-build" in waited.stdout and "first-build" not in waited.stdout


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="no autogroups here")
def test_the_build_runs_in_an_autogroup_of_its_own_at_nice_19(tmp_path: Path) -> None:
    niced_build(tmp_path, "start", "--", "cat", "/proc/self/autogroup")
    # empty in the root autogroup: a process whose ancestors never started a session (CI's)
    own = Path("/proc/self/autogroup").read_text().strip()
    waited = niced_build(tmp_path, "wait").stdout.splitlines()
    lines = [line for line in waited if line.startswith("/autogroup")]
    if not lines and not own:
        pytest.skip("the kernel keeps every session in the root autogroup: nice 19 alone")
    (line,) = lines
    group, _, niceness = line.split()
    assert group != own.split(" ")[0]
    assert niceness == "19"


def test_stop_ends_the_build_and_what_it_started(tmp_path: Path) -> None:
    marker = f"sleep 3{tmp_path.stat().st_ino % 1000:03d}"
    niced_build(tmp_path, "start", "--", "sh", "-c", f"{marker} & wait")
    deadline = time.monotonic() + 60
    while not subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout:
        assert time.monotonic() < deadline, "the build's child never started"
        time.sleep(0.2)
    niced_build(tmp_path, "stop")
    while (found := subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)).stdout:
        assert time.monotonic() < deadline, f"left running: {found.stdout}"
        time.sleep(0.2)
