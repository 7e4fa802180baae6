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
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import logging
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
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

    def close(self) -> None:
        """Stop the server (its children are Spark's, and end with their launchers)."""
        if self.process.poll() is None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()


def start(folder: Path | None = None) -> ForkServer:
    """Start the server in `folder` (default: <temp dir>/processor-forkserver; it imports for
    2-3 s) and set the environment Spark's Python processes inherit to reach it."""
    folder = folder or Path(tempfile.gettempdir()) / "processor-forkserver"
    folder.mkdir(parents=True, exist_ok=True)
    socket_path = folder / f"forkserver-{os.getpid()}.sock"
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()
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
    python_exec = folder / f"python-{os.getpid()}"
    python_exec.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -S "{LAUNCHER}" "$@"\n', encoding="utf-8"
    )
    python_exec.chmod(0o755)
    os.environ[SOCKET_ENV] = str(socket_path)
    log.info("Python fork server starting (pid %d, %s)", process.pid, socket_path)
    return ForkServer(process, socket_path, python_exec)


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[1]), int(sys.argv[2])))
