"""The fork server Spark's Python processes start from: a process started through its launcher
behaves as `python -m <module>` would, toward Spark (arguments, environment, working directory,
standard streams, exit status, signals), with or without a server to reach."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.clients.waiting import wait_until
from app.processor import python_forkserver
from app.processor.forkserver_launch import SOCKET_ENV
from tests.app.processor_harness import REPO

PROBE = """
import os, sys, time
print("argv", sys.argv[1:])
print("env", os.environ.get("PROBE_VALUE"))
print("cwd", os.getcwd())
print("stdin", sys.stdin.read().strip())
print("pid", os.getpid(), flush=True)
if sys.argv[1:2] == ["sleep"]:
    time.sleep(600)
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
"""


@pytest.fixture(scope="module")
def forkserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[python_forkserver.ForkServer]:
    """A real fork server (it preloads pyspark, pandas and pyarrow) and its launcher."""
    before = os.environ.get(SOCKET_ENV)
    server = python_forkserver.start(tmp_path_factory.mktemp("forkserver"))
    try:
        wait_until(server.socket_path.exists, 120, "the fork server to listen", interval_s=0.5)
        yield server
    finally:
        server.close()
        if before is None:
            os.environ.pop(SOCKET_ENV, None)
        else:
            os.environ[SOCKET_ENV] = before


@pytest.fixture
def probe_module(tmp_path: Path) -> Path:
    """A module `forkserver_probe` on a path only the launcher's PYTHONPATH names."""
    folder = tmp_path / "modules"
    folder.mkdir()
    (folder / "forkserver_probe.py").write_text(PROBE, encoding="utf-8")
    return folder


def _launch(
    python_exec: Path, modules: Path, cwd: Path, *args: str, server: Path | None, exit_code: int = 0
) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(modules),
        "PROBE_VALUE": "from-the-launcher",
        "PROBE_EXIT": str(exit_code),
    }
    env.pop(SOCKET_ENV, None)
    if server is not None:
        env[SOCKET_ENV] = str(server)
    return subprocess.Popen(
        [str(python_exec), "-m", "forkserver_probe", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
    )


@pytest.mark.parametrize("through_server", [True, False], ids=["forked", "no-server"])
def test_a_launched_module_sees_the_launchers_arguments_environment_streams_and_exit_code(
    forkserver: python_forkserver.ForkServer,
    probe_module: Path,
    tmp_path: Path,
    through_server: bool,
) -> None:
    server = forkserver.socket_path if through_server else tmp_path / "no-such.sock"
    process = _launch(
        forkserver.python_exec, probe_module, tmp_path, "a", "b", server=server, exit_code=3
    )
    out, err = process.communicate("hello from stdin", timeout=120)
    assert process.returncode == 3, err
    assert "argv ['a', 'b']" in out
    assert "env from-the-launcher" in out
    assert f"cwd {tmp_path}" in out
    assert "stdin hello from stdin" in out
    pid = int(out.split("pid ")[1].split()[0])
    # Forked by the server: a process other than the launcher; without one: the launcher itself.
    assert (pid != process.pid) is through_server


def _sleeping_child(
    forkserver: python_forkserver.ForkServer, modules: Path, cwd: Path
) -> tuple[subprocess.Popen[str], int]:
    """A launcher whose forked probe sleeps, and the forked process's pid."""
    process = _launch(forkserver.python_exec, modules, cwd, "sleep", server=forkserver.socket_path)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.close()
    for line in process.stdout:
        if line.startswith("pid "):
            return process, int(line.split()[1])
    raise AssertionError("the probe printed no pid")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for this purpose: its parent (the server) reaps it at once.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except OSError:  # gone between the two looks (ENOENT, or ESRCH while it exits)
        return False


def test_sigterm_to_the_launcher_ends_the_forked_process_the_same_way(
    forkserver: python_forkserver.ForkServer, probe_module: Path, tmp_path: Path
) -> None:
    process, child = _sleeping_child(forkserver, probe_module, tmp_path)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == -signal.SIGTERM
    wait_until(lambda: not _alive(child), 30, f"forked process {child} to end", interval_s=0.5)


def test_a_killed_launcher_takes_its_forked_process_with_it(
    forkserver: python_forkserver.ForkServer, probe_module: Path, tmp_path: Path
) -> None:
    process, child = _sleeping_child(forkserver, probe_module, tmp_path)
    process.kill()  # what Spark's destroyForcibly does
    process.wait(timeout=30)
    wait_until(lambda: not _alive(child), 30, f"forked process {child} to end", interval_s=0.5)


def test_the_server_ends_with_the_process_that_started_it(tmp_path: Path) -> None:
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from pathlib import Path\n"
            "from app.processor import python_forkserver\n"
            "server = python_forkserver.start(Path(sys.argv[1]))\n"
            "print(server.process.pid, flush=True)\n"
            "time.sleep(600)\n",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert starter.stdout is not None
    server_pid = int(starter.stdout.readline())
    starter.kill()
    starter.wait(timeout=30)
    wait_until(
        lambda: not _alive(server_pid), 60, f"fork server {server_pid} to end", interval_s=0.5
    )


# An instance as `app.processor` runs one: the server started in `folder`, its own folder
# printed, then closed once stdin closes (a normal stop), unless it is killed first.
INSTANCE = """
import sys
from pathlib import Path
from app.processor import python_forkserver
server = python_forkserver.start(Path(sys.argv[1]))
print(server.directory, flush=True)
sys.stdin.read()
server.close()
"""


@dataclass
class Instance:
    process: subprocess.Popen[str]
    directory: Path

    def stop(self) -> None:
        """A normal stop: the instance closes its fork server."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=60) == 0


def _start_instance(folder: Path) -> Instance:
    process = subprocess.Popen(
        [sys.executable, "-c", INSTANCE, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert process.stdout is not None
    directory = Path(process.stdout.readline().strip())
    assert directory.parent == folder, directory
    # Listening: the socket is there too, as in a running instance.
    wait_until(
        (directory / "server.sock").exists, 120, f"the fork server in {directory}", interval_s=0.5
    )
    return Instance(process, directory)


def _dead_pid() -> int:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)  # fmt: skip
    return int(finished.stdout)


def test_a_stopped_instance_leaves_nothing_and_a_killed_ones_files_go_at_the_next_start(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "fs"  # short: a Unix socket's path has at most 107 bytes
    _start_instance(folder).stop()
    assert list(folder.iterdir()) == []

    killed = _start_instance(folder)
    killed.process.kill()
    killed.process.wait(timeout=30)
    left = sorted(p.name for p in killed.directory.iterdir())
    assert left == ["owner.lock", "python", "server.sock"]  # nothing removes them on SIGKILL
    # The files of versions before the per-instance folders: by pid, a gone one's and a live one's.
    gone, live = _dead_pid(), os.getpid()
    old_layout = [folder / f"forkserver-{gone}.sock", folder / f"python-{gone}"]
    kept_old = folder / f"python-{live}"
    for path in [*old_layout, kept_old]:
        path.write_text("")

    running = _start_instance(folder)
    assert not killed.directory.exists()
    assert not any(path.exists() for path in old_layout)
    assert kept_old.exists()
    kept_old.unlink()
    # A running instance's folder is locked: another start leaves it alone.
    other = _start_instance(folder)
    assert running.directory.exists() and other.directory.exists()
    running.stop()
    other.stop()
    assert list(folder.iterdir()) == []
