"""A test stuck where pytest-timeout cannot reach it ends the run with every thread's stack (a
pytest plugin, `-p tests.hang_watchdog`).

pytest-timeout's signal method fails a test that runs too long by raising in the main thread,
which only happens once that thread runs Python again. A call stuck inside librdkafka (a
consumer's `close()` has no timeout) never does, and the stuck test would hold the run until CI's
own limit, with nothing in the log to say where. So each test also arms faulthandler's watchdog
thread for a grace (`hang_watchdog_grace_s`, 120 s) after pytest-timeout's limit: it writes every
thread's stack to the terminal and exits with status 1. The brokers the tests start die with
their parent.
"""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Generator
from typing import IO

import pytest

GRACE_OPTION = "hang_watchdog_grace_s"

_terminal: IO[str] | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        GRACE_OPTION,
        "seconds after pytest-timeout's limit before a stuck test ends the run with its stacks",
        default="120",  # pytest-timeout's own failure, and the test's teardown, go first
    )


def pytest_configure(config: pytest.Config) -> None:
    """Keep a copy of the terminal's stderr: during a test, fd 2 is pytest's capture file."""
    global _terminal
    if sys.__stderr__ is not None:
        _terminal = os.fdopen(os.dup(sys.__stderr__.fileno()), "w")


def pytest_unconfigure(config: pytest.Config) -> None:
    global _terminal
    if _terminal is not None:
        _terminal.close()
        _terminal = None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Arm the watchdog for the test's setup, call and teardown; disarm it after."""
    limit_s = _limit_s(item.config, item.get_closest_marker("timeout"))
    if _terminal is None or limit_s <= 0:
        return (yield)
    grace_s = float(item.config.getini(GRACE_OPTION))
    faulthandler.dump_traceback_later(limit_s + grace_s, exit=True, file=_terminal)
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()


def _limit_s(config: pytest.Config, marker: pytest.Mark | None) -> float:
    """pytest-timeout's limit for a test: its `timeout` marker's, else the `timeout` ini
    option's; 0 when there is none."""
    if marker is not None and marker.args:
        return float(marker.args[0] or 0)
    return float(config.getini("timeout") or 0)
