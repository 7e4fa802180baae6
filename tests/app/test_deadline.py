"""A call bounded by our own deadline: its result, its exception, or abandoned when it hangs."""

from __future__ import annotations

import threading

import pytest

from app.clients.deadline import CallAbandoned, call_with_deadline


def test_a_call_that_returns_in_time_gives_its_result_or_its_exception() -> None:
    assert call_with_deadline(lambda: 42, 30, "answer") == 42
    with pytest.raises(ZeroDivisionError):
        call_with_deadline(lambda: 1 / 0, 30, "division")


def test_a_call_past_the_deadline_is_abandoned_and_left_running() -> None:
    release = threading.Event()
    finished = threading.Event()

    def hangs() -> None:
        release.wait(60)
        finished.set()

    with pytest.raises(CallAbandoned, match=r"hangs: no answer within 0\.2 s"):
        call_with_deadline(hangs, 0.2, "hangs")
    assert not finished.is_set()
    release.set()  # the abandoned call still ends by itself
    assert finished.wait(30)
