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
import pytest

@pytest.mark.timeout(3)
def test_slow_but_within_its_limit():
    time.sleep(1.5)
"""


def run(pytester: pytest.Pytester, source: str) -> pytest.RunResult:
    pytester.makepyfile(source)
    pytester._monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return pytester.runpytest_subprocess(
        "-p", "tests.hang_watchdog", "-o", "hang_watchdog_grace_s=1", timeout=60
    )


def test_a_test_stuck_beyond_pytest_timeouts_reach_ends_the_run_with_its_stack(
    pytester: pytest.Pytester,
) -> None:
    result = run(pytester, STUCK_IN_C)
    assert result.ret == 1
    output = result.stdout.str() + result.stderr.str()
    assert "test_stuck_where_no_signal_reaches_it" in output  # the stuck frame, by name
    assert "Timeout (0:00:02)!" in output  # faulthandler's header: limit 1 s + grace 1 s
    assert "test_never_reached" not in output.replace("def test_never_reached", "")


def test_a_test_within_its_limit_is_left_alone(pytester: pytest.Pytester) -> None:
    result = run(pytester, SLOW_BUT_DONE)
    result.assert_outcomes(passed=1)
