"""A test stuck where pytest-timeout cannot reach it ends the run with every thread's stack (a
pytest plugin, `-p tests.hang_watchdog`).

pytest-timeout's signal method fails a test that runs too long by raising in the main thread,
which only happens once that thread runs Python again. A call stuck inside librdkafka (a
consumer's `close()` has no timeout) never does, and the stuck test would hold the run until CI's
own limit, with nothing in the log to say where. So each test also arms faulthandler's watchdog
thread for a grace (`hang_watchdog_grace_s`, 120 s) after pytest-timeout's limit, through
pytest-timeout's own timer hooks: it writes every thread's stack to the terminal and exits with
status 1. The brokers the tests start die with their parent.
"""

from __future__ import annotations

import faulthandler
import os
import sys
from typing import IO, Any

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


def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> None:
    """Arm the watchdog beside pytest-timeout's own timer, from its settings (command line,
    environment, marker or ini); None, so that pytest-timeout still sets its own."""
    if _terminal is not None:
        grace_s = float(item.config.getini(GRACE_OPTION))
        faulthandler.dump_traceback_later(settings.timeout + grace_s, exit=True, file=_terminal)


def pytest_timeout_cancel_timer(item: pytest.Item) -> None:
    """Disarm it whenever pytest-timeout cancels its own (the test's end, a debugger)."""
    faulthandler.cancel_dump_traceback_later()
