"""A Ctrl-C or a SIGTERM stops a test run: it prints its summary and stops what it started.

The test runs pytest on a test that holds a one-node Apache Kafka (a process in a session of its
own, as every broker and instance the tests start is) and interrupts it once the broker is up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.clients.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 120.0

HOLDS_A_BROKER = """
import os
import threading
from pathlib import Path

from devkit.kraft_cluster import KraftCluster


def test_holds_a_broker_until_interrupted():
    with KraftCluster(nodes=1) as cluster:
        Path(os.environ["BROKER_PID_FILE"]).write_text(str(cluster.nodes[0].process.pid))
        threading.Event().wait(600)
"""

# The interrupted run gets Python's own Ctrl-C handler even where its parent ignores SIGINT (a
# background job of a non-interactive shell does, and so do its children).
RUN_PYTEST = (
    "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.exit(pytest.main(sys.argv[1:]))"
)


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_run_prints_its_summary_and_stops_the_processes_it_started(
    signum: signal.Signals, tmp_path: Path
) -> None:
    test_file = tmp_path / "test_holds.py"
    test_file.write_text(HOLDS_A_BROKER)
    pid_file = tmp_path / "broker.pid"
    run = subprocess.Popen(
        [sys.executable, "-c", RUN_PYTEST, "-p", "tests.stop_on_sigterm", "-p",
         "no:cacheprovider", str(test_file)],
        cwd=ROOT,
        env={**os.environ, "BROKER_PID_FILE": str(pid_file), "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # the signal goes to it alone, as a terminal's goes to make's
    )  # fmt: skip
    try:
        wait_until(
            lambda: pid_file.exists() and pid_file.read_text().strip() != "",
            DEADLINE_S,
            "the interrupted run's broker to start",
            seen=lambda: f"no broker pid yet; the run's exit code: {run.poll()}",
            interval_s=0.1,
        )
        broker_pid = int(pid_file.read_text())
        run.send_signal(signum)
        output, _ = run.communicate(timeout=DEADLINE_S)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    text = output.decode(errors="replace")
    try:
        assert "KeyboardInterrupt" in text, text
        assert "no tests ran" in text or "interrupted" in text, text  # the summary line
        wait_until(
            lambda: not alive(broker_pid),
            30,
            f"the end of its broker (pid {broker_pid})",
            interval_s=0.5,
        )
    finally:
        if alive(broker_pid):  # left behind: this test's failure, not the next one's
            os.kill(broker_pid, signal.SIGKILL)
