"""The test runs' watchdog (`tests/hang_watchdog.py`), run by pytest itself in a subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest_plugins = ["pytester"]

STUCK_IN_C = """
import signal, time
import pytest

@pytest.mark.timeout(1)
def test_stuck_where_no_signal_reaches_it():
    # As a call inside librdkafka: pytest-timeout's SIGALRM never runs Python code here.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(120)

def test_never_reached():
    pass
"""

SLOW_BUT_DONE = """
import time

def test_slow_but_within_its_limit():
    time.sleep(2.5)
"""


def run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, source: str, *args: str
) -> pytest.RunResult:
    pytester.makepyfile(source)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return pytester.runpytest_subprocess(
        "-p", "tests.hang_watchdog", "-o", "hang_watchdog_grace_s=1", *args, timeout=60
    )


def test_a_test_stuck_beyond_pytest_timeouts_reach_ends_the_run_with_its_stack(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(pytester, monkeypatch, STUCK_IN_C)
    assert result.ret == 1
    output = result.stdout.str() + result.stderr.str()
    assert "test_stuck_where_no_signal_reaches_it" in output  # the stuck frame, by name
    assert "Timeout (0:00:02)!" in output  # faulthandler's header: limit 1 s + grace 1 s
    assert "test_never_reached" not in output.replace("def test_never_reached", "")


def test_a_test_within_the_limit_pytest_timeout_was_given_is_left_alone(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The ini's 1 s (+ 1 s grace) would end a 2.5 s test; the command line's 4 s is the limit.
    result = run(pytester, monkeypatch, SLOW_BUT_DONE, "-o", "timeout=1", "--timeout=4")
    result.assert_outcomes(passed=1)
