"""The `python` Spark starts for every Python process of this instance, when the fork server runs.

Spark starts its Python processes as `<python> -m <module> [args]` with pipes for stdin and
stdout and an environment of its own. This script (started with `python -S`: the standard
library only, a few milliseconds) hands exactly that to the fork server
(`app.processor.python_forkserver`): the arguments, environment, working directory and its
three standard streams. A fork of a process that imported everything already runs the module,
and this process stands in for it toward Spark: it forwards Spark's signals and exits with the
fork's exit status. With no fork server to reach, or another command line, it becomes the real
interpreter (`exec`), exactly what Spark asked for.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from types import FrameType

SOCKET_ENV = "PROCESSOR_PYTHON_FORKSERVER"


def become_python(argv: list[str]) -> None:
    """Replace this process with the interpreter running `argv`, site and all."""
    os.execv(sys.executable, [sys.executable, *argv])


def main(argv: list[str]) -> int:
    """Run `argv` in a fork of the fork server, or in this interpreter if there is none."""
    path = os.environ.get(SOCKET_ENV, "")
    if argv[:1] != ["-m"] or len(argv) < 2 or not path:
        become_python(argv)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.connect(path)
    except OSError:
        server.close()
        become_python(argv)
    request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    socket.send_fds(server, [len(request).to_bytes(8, "big") + request], [0, 1, 2])
    replies = server.makefile("r", encoding="ascii")
    answer = replies.readline()
    if not answer:  # the server went away before it forked: nothing runs yet
        become_python(argv)
    pid = int(answer)

    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    status = replies.readline().strip()
    code = int(status) if status else 1
    if code < 0:  # ended by a signal: end the same way
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
