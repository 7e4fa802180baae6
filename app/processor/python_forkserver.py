"""A fork server for every Python process Spark starts in this instance (`python.forkserver`).

A start spawns a Python process pair for each planning step of the Python data source
(`lookup_data_sources`, `create_data_source`, `plan_data_source_read`: pyspark's own daemon,
hard-coded for planners, and a fork of it), one for the streaming source runner, one for
`transformWithState`'s driver side, and one preloading daemon per kind of task: each imports
pyspark, pandas and pyarrow first, about 1-3 s on 2 cores, one after another on the start's
critical path. Python's multiprocessing solves the same problem with a fork server; this is one:

- `serve` imports all of it once, in a single thread (`python_daemon.preload`), then listens on
  a Unix socket and forks a child per request, which runs the requested module as `python -m`
  would, in the requester's environment, working directory and standard streams.
- Spark's `pythonExec` becomes a small script that runs `forkserver_launch.py`, which sends its
  command line, environment and streams, then stands in for the child toward Spark (signals,
  exit status). Without a reachable server it `exec`s the real interpreter: a server that is
  not up yet, or gone, costs the old start time, never a failure.

The server ends with the instance (it asks the kernel for SIGTERM when its parent dies) and
kills a child whose launcher is gone (Spark killed it).

Files: each instance's socket and launcher script are in a folder of its own,
`<temp dir>/processor-forkserver/<pid>-<random>/`, which `ForkServer.close` removes. A killed
instance removes nothing, so the folder holds a lock file the instance keeps locked (`flock`)
while it runs: the kernel releases it however the instance ends, and every start removes the
folders whose lock it can take. A lock rather than the pid, because pids repeat (in a
container the instance is often pid 1 after every restart, on the same emptyDir /tmp).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import importlib
import json
import logging
import os
import re
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

from app.processor import python_daemon
from app.processor.forkserver_launch import SOCKET_ENV

log = logging.getLogger(__name__)

LAUNCHER = Path(__file__).with_name("forkserver_launch.py")
# What Spark's planner and runner processes import, beside what the task daemon preloads.
PRELOADED = (
    "pyspark.daemon",
    "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.streaming.python_streaming_source_runner",
    "pyspark.sql.streaming.transform_with_state_driver_worker",
)
_PR_SET_PDEATHSIG = 1
_LENGTH_BYTES = 8
FOLDER_NAME = "processor-forkserver"
LOCK_NAME = "owner.lock"
# An instance's folder while it is being set up (before its lock is in place): a start that
# finds one this old was killed in those few microseconds.
_STAGING_PREFIX = ".staging-"
_STAGING_GRACE_S = 60.0
# What versions before the per-instance folders left: `forkserver-<pid>.sock`, `python-<pid>`.
_OLD_LAYOUT = re.compile(r"(?:forkserver-(\d+)\.sock|python-(\d+))")


def _end_with_parent(parent: int) -> None:
    """SIGTERM when the process that started this one ends (Linux; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it ended before the request above
        sys.exit(0)


def _receive(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    """One launcher's request: (its JSON, its stdin/stdout/stderr descriptors)."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    if len(data) < _LENGTH_BYTES:
        raise ConnectionError("launcher closed before its request")
    length = int.from_bytes(data[:_LENGTH_BYTES], "big")
    body = data[_LENGTH_BYTES:]
    while len(body) < length:
        chunk = conn.recv(length - len(body))
        if not chunk:
            raise ConnectionError("launcher closed during its request")
        body += chunk
    return json.loads(body), list(fds)


def _run_child(request: dict[str, object], fds: list[int]) -> None:
    """In the fork: become `python -m <module> args` as the launcher asked; never returns."""
    code = 1
    try:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update(env)
        for entry in reversed(env.get("PYTHONPATH", "").split(os.pathsep)):
            if entry and entry not in sys.path:
                sys.path.insert(0, entry)
        os.chdir(str(request["cwd"]))
        argv = request["argv"]
        assert isinstance(argv, list)
        module = str(argv[1])
        sys.argv = [module, *map(str, argv[2:])]
        with warnings.catch_warnings():
            # runpy's note that the module was imported before it runs as __main__: by design.
            warnings.filterwarnings("ignore", category=RuntimeWarning, module="runpy")
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def serve(path: Path, parent: int) -> int:
    """Preload, then fork a child per launcher request until `parent` ends."""
    _end_with_parent(parent)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    python_daemon.preload()
    for module in PRELOADED:
        importlib.import_module(module)
    if python_daemon.threads() != 1:
        print(
            f"app.processor.python_forkserver: {python_daemon.threads()} threads after the "
            "imports; a fork could hang, so Spark starts its Python processes itself "
            "(set python.forkserver=false to skip this)",
            file=sys.stderr,
        )
        return 1
    python_daemon.freeze_preloaded()
    # A child's exit wakes the loop at once (its launcher waits for the status).
    wakeup, wakeup_writer = socket.socketpair()
    wakeup_writer.setblocking(False)
    signal.set_wakeup_fd(wakeup_writer.fileno())
    signal.signal(signal.SIGCHLD, lambda *_: None)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)
    # pid -> its launcher's connection; None once the launcher is gone and the child killed.
    children: dict[int, socket.socket | None] = {}
    while True:
        launchers = [c for c in children.values() if c is not None]
        readable, _, _ = select.select([listener, wakeup, *launchers], [], [], 5.0)
        for conn in readable:
            if conn is wakeup:
                conn.recv(4096)
            elif conn is listener:
                _fork_for(listener, children, (wakeup, wakeup_writer))
            else:  # the launcher is gone (killed by Spark): so goes its child
                pid = next(p for p, c in children.items() if c is conn)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                # Not watched any more: until the child is reaped its EOF reads ready forever.
                conn.close()
                children[pid] = None
        _reap(children)


def _fork_for(
    listener: socket.socket,
    children: dict[int, socket.socket | None],
    wakeup: tuple[socket.socket, socket.socket],
) -> None:
    conn, _ = listener.accept()
    try:
        request, fds = _receive(conn)
    except (OSError, ValueError) as exc:
        print(f"app.processor.python_forkserver: bad request: {exc}", file=sys.stderr)
        conn.close()
        return
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        for own in (listener, conn, *wakeup, *children.values()):
            if own is not None:
                own.close()
        _run_child(request, fds)
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    conn.sendall(f"{pid}\n".encode())


def _reap(children: dict[int, socket.socket | None]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()


@dataclass
class ForkServer:
    """A running fork server and the `pythonExec` that reaches it."""

    process: subprocess.Popen[bytes]
    socket_path: Path
    python_exec: Path
    # This instance's folder (the socket and launcher are in it) and its lock (see the module
    # docstring); -1 once closed.
    directory: Path
    lock_fd: int

    def close(self) -> None:
        """Stop the server (its children are Spark's, and end with their launchers) and remove
        this instance's files. Idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)
        if self.lock_fd < 0:
            return
        # Removed while still locked: no other start takes it for a dead instance's meanwhile.
        shutil.rmtree(self.directory, ignore_errors=True)
        os.close(self.lock_fd)
        self.lock_fd = -1


def default_folder() -> Path:
    """Where instances keep their fork servers' files: <temp dir>/processor-forkserver."""
    return Path(tempfile.gettempdir()) / FOLDER_NAME


def remove_stale(folder: Path) -> list[Path]:
    """Remove what instances that are gone left in `folder` (a killed one removes nothing);
    the paths removed. Another running instance's folder is locked, and kept."""
    removed: list[Path] = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(_STAGING_PREFIX):
            stale = _age_s(entry) > _STAGING_GRACE_S
        elif entry.is_dir() and not entry.is_symlink():
            stale = _owner_gone(entry)
        else:
            old = _OLD_LAYOUT.fullmatch(entry.name)
            stale = old is not None and not _pid_alive(int(old.group(1) or old.group(2)))
        if not stale:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError, PermissionError):
                entry.unlink()
        if not os.path.lexists(entry):
            removed.append(entry)
    return removed


def _owner_gone(directory: Path) -> bool:
    """Whether the instance that locked `directory` is gone (its lock can be taken)."""
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDWR)
    except FileNotFoundError:  # never an instance's (those get their lock before their name)
        return True
    except OSError:  # another user's: not ours to judge
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: the instance runs
        return False
    finally:
        os.close(fd)
    return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _age_s(path: Path) -> float:
    try:
        return time.time() - path.lstat().st_mtime
    except FileNotFoundError:
        return 0.0


def _claim(folder: Path) -> tuple[Path, int]:
    """A folder of this instance's own in `folder`, locked for as long as the process lives."""
    staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=folder))
    lock_fd = os.open(staging / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock_fd, fcntl.LOCK_EX)  # nobody else knows the name yet: never waits
    directory = folder / f"{os.getpid()}-{staging.name.removeprefix(_STAGING_PREFIX)}"
    staging.rename(directory)
    return directory, lock_fd


def start(folder: Path | None = None) -> ForkServer:
    """Start the server with its files in a folder of this instance's own in `folder`
    (default: `default_folder()`), after removing what gone instances left there; it imports
    for 2-3 s. Sets the environment Spark's Python processes inherit to reach it."""
    folder = folder or default_folder()
    folder.mkdir(parents=True, exist_ok=True)
    removed = remove_stale(folder)
    if removed:
        log.info(
            "removed %d fork server files of instances that are gone from %s: %s",
            len(removed),
            folder,
            ", ".join(p.name for p in removed),
        )
    directory, lock_fd = _claim(folder)
    socket_path = directory / "server.sock"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.processor.python_forkserver",
            str(socket_path),
            str(os.getpid()),
        ],
        stdin=subprocess.DEVNULL,
    )
    python_exec = directory / "python"
    python_exec.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -S "{LAUNCHER}" "$@"\n', encoding="utf-8"
    )
    python_exec.chmod(0o755)
    os.environ[SOCKET_ENV] = str(socket_path)
    log.info("Python fork server starting (pid %d, %s)", process.pid, socket_path)
    return ForkServer(process, socket_path, python_exec, directory, lock_fd)


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[1]), int(sys.argv[2])))
