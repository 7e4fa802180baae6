"""The local cluster's processes: each in a session of its own, its output in a log, its pid in a
file, and stopped by that pid alone (never by name: the machine is shared)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


def sh(*argv: str | Path, check: bool = True) -> subprocess.CompletedProcess:
    """`argv` run to its end, its output captured as text (`check`: a failure raises)."""
    return subprocess.run([str(a) for a in argv], check=check, capture_output=True, text=True)


@dataclass(frozen=True)
class Processes:
    """Pid files in `run`, logs in `logs`, every process started in `cwd`."""

    run: Path
    logs: Path
    cwd: Path

    def pidfile(self, name: str) -> Path:
        return self.run / f"{name}.pid"

    def running_pid(self, name: str) -> int | None:
        """The pid in the pid file, if that process is alive and still runs the binary `name`
        (a zombie or a reused pid is not ours)."""
        try:
            pid = int(self.pidfile(name).read_text())
            exe = os.readlink(f"/proc/{pid}/exe")
        except (OSError, ValueError):
            return None
        return pid if Path(exe.removesuffix(" (deleted)")).name == name else None

    def start(self, name: str, argv: Sequence[str | Path]) -> None:
        """`argv` in a session of its own (a terminal's Ctrl-C does not reach it), as `name`."""
        with open(self.logs / f"{name}.log", "ab") as log:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                [str(a) for a in argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.cwd,
                start_new_session=True,
            )
        self.pidfile(name).write_text(f"{proc.pid}\n")

    def stop(self, name: str, timeout: float = 15) -> str | None:
        """SIGTERM, then SIGKILL after `timeout` seconds; `name (pid)` if it was running."""
        pid = self.running_pid(name)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.running_pid(name) == pid:
                time.sleep(0.1)
            if self.running_pid(name) == pid:
                os.kill(pid, signal.SIGKILL)
        self.pidfile(name).unlink(missing_ok=True)
        return None if pid is None else f"{name} ({pid})"
