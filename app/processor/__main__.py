"""`python -m app.processor --properties FILE [--set key=value ...]`: run one processor instance.

Exit codes: 0 stopped cleanly (SIGTERM/SIGINT), 1 failed, 2 invalid settings or usage,
3 fenced (another process runs with this instance's identity).
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from app.clients import LOG_FORMAT
from app.processor import python_daemon, python_forkserver
from app.processor.settings import SettingsError, load_settings

EXIT_USAGE = 2


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--set wants key=value, got {text!r}")
    return key.strip(), value


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, validate the settings, run the instance; the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m app.processor",
        description="The stateful page-view processor: one instance (one pod).",
        epilog="exit codes: 0 stopped cleanly, 1 failed, 2 invalid settings or usage, 3 fenced",
    )
    parser.add_argument("--properties", type=Path, required=True, metavar="FILE")
    parser.add_argument(
        "--set",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting of the file (repeatable)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format=LOG_FORMAT,
        stream=sys.stderr,
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # `kill -USR1 <pid>` prints every thread's stack: what a stuck instance is waiting for.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        settings = load_settings(args.properties, overrides=dict(args.set))
    except SettingsError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    logging.getLogger("app.processor").info(
        "starting %s (instance %s) with %s",
        settings.application_id,
        settings.instance_id or "dynamic",
        settings.source,
    )
    # Read by every Python process Spark starts (they inherit this environment).
    os.environ[python_daemon.GC_FREEZE_ENV] = "true" if settings.python_gc_freeze else "false"
    # Before the imports below (pyspark, pyarrow: about 1.5 s): the fork server's own imports
    # run beside them on the second core instead of beside the JVM's start.
    forkserver = python_forkserver.start() if settings.python_forkserver else None
    try:
        from app.processor.lifecycle import ProcessorInstance

        return ProcessorInstance(settings, forkserver).run()
    finally:
        # `run` closes it too; this is for a failure before `run` (the health port taken).
        if forkserver is not None:
            forkserver.close()


if __name__ == "__main__":
    sys.exit(main())
