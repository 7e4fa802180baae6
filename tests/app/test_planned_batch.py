"""A batch is in flight from the planning step that reads the assignment, before Spark logs it:
what a revocation waits for (`app/processor/planned_batch.py`), on real files and locks."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from app.processor.planned_batch import BatchProgress, Planned, planning, read_planned

DEADLINE_S = 60.0


def log_batch(checkpoint: Path, kind: str, batch_id: int) -> None:
    """What Spark writes: `offsets/<id>` when it logs a planned batch, `commits/<id>` when done."""
    (checkpoint / kind).mkdir(parents=True, exist_ok=True)
    (checkpoint / kind / str(batch_id)).write_text("v1\n{}\n")


def test_a_planned_batch_is_unfinished_before_spark_logs_it_until_spark_marks_it_done(
    tmp_path: Path,
) -> None:
    checkpoint = tmp_path / "checkpoint"
    progress = BatchProgress(checkpoint)
    assert progress.unfinished(DEADLINE_S) is None
    log_batch(checkpoint, "offsets", 0)
    log_batch(checkpoint, "commits", 0)
    with planning(checkpoint) as record:
        record(True)
    assert read_planned(checkpoint) == Planned(batch=True, after=0)
    assert progress.unfinished(DEADLINE_S) == 1 and not progress.logged(1)
    log_batch(checkpoint, "offsets", 1)
    assert progress.unfinished(DEADLINE_S) == 1 and progress.logged(1)
    log_batch(checkpoint, "commits", 1)
    assert progress.unfinished(DEADLINE_S) is None
    assert progress.done(1) and not progress.done(2)


def test_a_planning_step_that_planned_nothing_leaves_nothing_to_wait_for(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    log_batch(checkpoint, "offsets", 4)
    log_batch(checkpoint, "commits", 4)
    with planning(checkpoint) as record:
        record(False)
    assert read_planned(checkpoint) == Planned(batch=False, after=4)
    assert BatchProgress(checkpoint).unfinished(DEADLINE_S) is None


def test_the_waiter_takes_the_planning_lock_so_a_step_in_progress_is_recorded_first(
    tmp_path: Path,
) -> None:
    checkpoint = tmp_path / "checkpoint"
    progress = BatchProgress(checkpoint)
    holding, go = threading.Event(), threading.Event()
    answers: list[int | None] = []

    def planner() -> None:
        with planning(checkpoint) as record:
            holding.set()
            go.wait(DEADLINE_S)
            record(True)

    planning_thread = threading.Thread(target=planner)
    planning_thread.start()
    assert holding.wait(DEADLINE_S)
    waiter = threading.Thread(target=lambda: answers.append(progress.unfinished(DEADLINE_S)))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive(), "the waiter answered while the planner held the lock"
    go.set()
    waiter.join(DEADLINE_S)
    planning_thread.join(DEADLINE_S)
    assert answers == [0]  # the batch the planner recorded: the first, none done before it


def test_a_planning_step_that_never_ends_leaves_only_the_logged_batch_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    checkpoint = tmp_path / "checkpoint"
    log_batch(checkpoint, "offsets", 7)
    holding, release = threading.Event(), threading.Event()

    def planner() -> None:
        with planning(checkpoint):
            holding.set()
            release.wait(DEADLINE_S)

    planning_thread = threading.Thread(target=planner)
    planning_thread.start()
    try:
        assert holding.wait(DEADLINE_S)
        with caplog.at_level(logging.WARNING, logger="app.processor.planned_batch"):
            assert BatchProgress(checkpoint).unfinished(0.2) == 7
        assert "planning did not finish within 0 s" in caplog.text
    finally:
        release.set()
        planning_thread.join(DEADLINE_S)


def test_a_new_query_forgets_what_the_stopped_one_planned_and_never_logged(
    tmp_path: Path,
) -> None:
    checkpoint = tmp_path / "checkpoint"
    log_batch(checkpoint, "offsets", 2)
    log_batch(checkpoint, "commits", 2)
    with planning(checkpoint) as record:
        record(True)
    progress = BatchProgress(checkpoint)
    assert progress.unfinished(DEADLINE_S) == 3
    progress.forget_planned()
    assert read_planned(checkpoint) is None
    assert progress.unfinished(DEADLINE_S) is None
