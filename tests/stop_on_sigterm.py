"""A SIGTERM ends a test run the way a Ctrl-C does (a pytest plugin, `-p tests.stop_on_sigterm`).

The brokers, clusters and processor instances the tests start run in sessions of their own, so
that a Ctrl-C reaches pytest alone and the fixtures stop them in order. A SIGTERM (a CI job
cancelled, `timeout`, `kill`) would otherwise end pytest at once, without the teardown, and leave
them running: as a KeyboardInterrupt it runs the teardown and prints the summary.
"""

from __future__ import annotations

import signal
from types import FrameType

import pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"{signal.Signals(signum).name}: stopping the test run")


def pytest_configure(config: pytest.Config) -> None:
    """Turn SIGTERM into a KeyboardInterrupt for the run's lifetime."""
    signal.signal(signal.SIGTERM, _interrupt)
