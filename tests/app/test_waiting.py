"""The one wait of the image's processes, the developer kit and the tests
(`app.clients.waiting`)."""

from __future__ import annotations

import itertools
import time

import pytest

from app.clients.waiting import poll_until, wait_until


def test_wait_until_returns_the_first_truthy_value_of_the_condition() -> None:
    answers = iter([None, 0, "", "found"])
    assert wait_until(lambda: next(answers), 5, "an answer", interval_s=0.001) == "found"


def test_a_condition_that_already_holds_is_asked_once_without_sleeping() -> None:
    calls: list[float] = []

    def holds() -> bool:
        calls.append(time.monotonic())
        return True

    started = time.monotonic()
    assert wait_until(holds, 5, "at once") is True
    assert len(calls) == 1 and time.monotonic() - started < 0.1  # not one interval (0.1 s)


def test_a_timeout_names_what_was_awaited_and_the_timeout() -> None:
    with pytest.raises(TimeoutError) as raised:
        wait_until(lambda: False, 0.05, "the broker to start", interval_s=0.01)
    assert str(raised.value) == "the broker to start: not within 0.05 s"


def test_a_timeout_adds_what_seen_returns_text_as_it_is_anything_else_as_its_repr() -> None:
    with pytest.raises(TimeoutError) as raised:
        wait_until(lambda: None, 0, "ready", seen=lambda: "503\nnot in sync")
    assert str(raised.value) == "ready: not within 0 s; last seen: 503\nnot in sync"
    with pytest.raises(TimeoutError) as raised:
        wait_until(lambda: None, 0, "ready", seen=lambda: {"kafka-0": "pending"})
    assert str(raised.value) == "ready: not within 0 s; last seen: {'kafka-0': 'pending'}"


def test_a_failing_seen_does_not_hide_the_timeout() -> None:
    def broken() -> object:
        raise KeyError("missing")

    with pytest.raises(TimeoutError, match=r"^ready: not within 0 s; last seen: unknown \(KeyE"):
        wait_until(lambda: None, 0, "ready", seen=broken)


def test_a_zero_timeout_still_asks_the_condition_once() -> None:
    assert wait_until(lambda: 7, 0, "seven") == 7


def test_the_condition_is_asked_once_more_at_the_deadline() -> None:
    calls: list[float] = []

    def never() -> None:
        calls.append(time.monotonic())

    started = time.monotonic()
    assert poll_until(never, 0.05, interval_s=10) is None
    assert len(calls) >= 2 and calls[-1] - started >= 0.05
    assert time.monotonic() - started < 1  # not a sleep of the whole interval


def test_an_error_in_the_condition_ends_the_wait_at_once() -> None:
    def broken() -> bool:
        raise RuntimeError("the process exited")

    with pytest.raises(RuntimeError, match="the process exited"):
        wait_until(broken, 5, "never")


def test_poll_until_answers_none_on_timeout_instead_of_raising() -> None:
    assert poll_until(lambda: False, 0.02, interval_s=0.005) is None
    assert poll_until(lambda: [1], 0.02) == [1]


def test_progress_is_reported_after_the_first_miss_then_at_most_every_progress_every_s() -> None:
    answers = iter([None] * 5 + ["done"])
    reports: list[float] = []
    started = time.monotonic()
    assert (
        poll_until(
            lambda: next(answers),
            5,
            interval_s=0.02,
            progress=lambda: reports.append(time.monotonic() - started),
            progress_every_s=0.05,
        )
        == "done"
    )
    # Five misses 0.02 s apart: a report at the first, then one per 0.05 s at most.
    assert 1 <= len(reports) <= 3
    assert all(b - a >= 0.05 for a, b in itertools.pairwise(reports))


def test_no_progress_report_when_the_first_answer_holds() -> None:
    reports: list[str] = []
    assert poll_until(lambda: True, 5, progress=lambda: reports.append("waiting")) is True
    assert reports == []
