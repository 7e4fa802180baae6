"""Build in the background, on the CPU the foreground leaves idle.

    python3 devkit/kube/niced_build.py start -- make tools
    ... the application's tests ...
    python3 devkit/kube/niced_build.py wait      # its log, then its exit status
    python3 devkit/kube/niced_build.py stop      # when the foreground failed

`make test` builds the Go tools (about half an hour cold) while the application's tests run:
those wait on Kafka and Spark for a third of their time, and need none of it; then, once it
has waited for them, the node's parts while the tests that need the tools run. One build at a
time: `start` again once `wait` has handed the last one over.

`nice` alone does not yield the CPU here: with `kernel.sched_autogroup_enabled` the scheduler
shares the CPU evenly between sessions (the tests' Kafka nodes run in sessions of their own),
and nice counts only inside a session. So the build runs in a session of its own
whose autogroup is niced to 19 (`/proc/self/autogroup`, the process's own setting; no sysctl
changes). Where the kernel has no autogroups it runs at nice 19 as it is.

Standard library only: it runs before any environment exists.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("NICED_BUILD_DIR", ROOT / ".venv" / "niced-build"))
PID, STATUS, LOG = STATE / "pid", STATE / "status", STATE / "build.log"
# The build's shell: its own autogroup at the lowest priority, then the command, then its status.
_SCRIPT = (
    "echo 19 > /proc/self/autogroup 2>/dev/null; renice -n 19 $$ >/dev/null; "
    '"$@"; echo $? > "$STATUS"'
)


def start(command: list[str]) -> None:
    """Start `command` in a session of its own, niced, its output in LOG."""
    if PID.exists() and _alive(int(PID.read_text())):
        raise SystemExit(f"a build is running (pid {PID.read_text().strip()}): wait or stop it")
    STATE.mkdir(parents=True, exist_ok=True)
    STATUS.unlink(missing_ok=True)
    with LOG.open("wb") as log:
        process = subprocess.Popen(
            ["sh", "-c", _SCRIPT, "sh", *command],
            env={**os.environ, "STATUS": str(STATUS)},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    PID.write_text(str(process.pid))
    print(f"building in the background (pid {process.pid}, log {LOG}): {' '.join(command)}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a child of ours that exited is a zombie until reaped: not running
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def wait() -> int:
    """Wait for the build, print its log, and return its exit status."""
    if not PID.exists():
        raise SystemExit(f"no background build to wait for ({PID} is absent): start one first")
    pid, started, last = int(PID.read_text()), time.monotonic(), 0.0
    while _alive(pid):
        if time.monotonic() - last >= 60:
            waited = time.monotonic() - started
            print(
                f"waiting for the background build (pid {pid}, log {LOG}), {waited:.0f} s",
                flush=True,
            )
            last = time.monotonic()
        time.sleep(2)
    sys.stdout.write(LOG.read_text(errors="replace"))
    PID.unlink()
    if not STATUS.exists():
        print(f"the background build (pid {pid}) ended without a status: it was killed")
        return 1
    status = int(STATUS.read_text().strip() or 1)
    print(f"background build: exit {status} after waiting {time.monotonic() - started:.0f} s")
    return status


def stop() -> None:
    """Stop the build and everything it started (its session's process group)."""
    if not PID.exists():
        return
    pid = int(PID.read_text())
    if _alive(pid):
        os.killpg(pid, signal.SIGTERM)
        print(f"stopped the background build (pid {pid}); its log: {LOG}")
    PID.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["start", "wait", "stop"])
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- and the build's command")
    args = parser.parse_args()
    if args.action == "start":
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            parser.error("start needs a command: start -- make tools")
        start(command)
    elif args.action == "wait":
        sys.exit(wait())
    else:
        stop()


if __name__ == "__main__":
    main()
