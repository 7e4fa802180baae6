"""The planner's word back to the group member: a batch planned that Spark has not logged yet.

A revocation lets the batch in flight commit the revoked partitions first (`group_member`). A
batch is in flight from the moment the source's `latestOffset` reads the assignment, but Spark's
checkpoint shows it only once the offset log has it (`walCommit`, 60-120 ms later): a revocation
in between saw no running batch, gave the partitions up at once, and the batch then computed
them, could not write them ("partitions [..] no longer owned: not written") and left this
instance's copy of their state to be rebuilt from the changelog.

So the planner holds a lock (`planning`) from reading the assignment until it has recorded what
it planned: a batch or none, and after which batch Spark had marked done (`Planned`). A member
that publishes a revocation and then takes the same lock (`BatchProgress.unfinished`) finds
every planning that read the assignment before the revocation recorded. Spark plans a batch only
once the one before is marked done, so that record names the only batch that can still carry
the revoked partitions.
"""

from __future__ import annotations

import fcntl
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from app.processor.atomic_file import replace_text
from app.processor.source_offsets import (
    batch_offsets_path,
    last_committed_batch,
    running_batch,
)

log = logging.getLogger(__name__)

FILE_NAME = "planned.json"
LOCK_NAME = "planning.lock"
LOCK_POLL_S = 0.01


@dataclass(frozen=True)
class Planned:
    """One planning step's outcome: whether it planned a batch, and the newest batch Spark had
    marked done when it did (-1: none), whose successor that batch is."""

    batch: bool
    after: int

    @property
    def batch_id(self) -> int | None:
        """The id Spark gives the planned batch (None: the step planned nothing)."""
        return self.after + 1 if self.batch else None


def _planned_path(checkpoint_dir: Path) -> Path:
    return checkpoint_dir / FILE_NAME


@contextmanager
def _locked(checkpoint_dir: Path, timeout_s: float | None) -> Iterator[bool]:
    """Hold the planning lock (yields False if `timeout_s` passed without it)."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    with open(checkpoint_dir / LOCK_NAME, "a") as lock:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | (0 if deadline is None else fcntl.LOCK_NB))
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() > deadline:
                    yield False
                    return
                time.sleep(LOCK_POLL_S)
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def planning(checkpoint_dir: Path) -> Iterator[Callable[[bool], None]]:
    """The planner's side: hold the lock around reading the assignment and planning, and call
    the function it yields with whether a batch was planned (before the lock is let go)."""
    with _locked(checkpoint_dir, None):

        def record(batch: bool) -> None:
            done = last_committed_batch(checkpoint_dir)
            planned = Planned(batch, -1 if done is None else done)
            replace_text(_planned_path(checkpoint_dir), json.dumps(asdict(planned)))

        yield record


def read_planned(checkpoint_dir: Path) -> Planned | None:
    """The last planning step's record (None: no step since the query started)."""
    try:
        data = json.loads(_planned_path(checkpoint_dir).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return Planned(bool(data["batch"]), int(data["after"]))


class BatchProgress:
    """Where the query in `checkpoint_dir` stands, for a revocation to wait on."""

    def __init__(self, checkpoint_dir: Path) -> None:
        self.checkpoint_dir = checkpoint_dir

    def forget_planned(self) -> None:
        """Drop the record of a query that stopped: what it planned and did not log is planned
        again by the next one, with the assignment of then."""
        _planned_path(self.checkpoint_dir).unlink(missing_ok=True)

    def unfinished(self, timeout_s: float) -> int | None:
        """The newest batch that is planned (waiting up to `timeout_s` for a planning step in
        progress to finish) or logged, and not marked done."""
        with _locked(self.checkpoint_dir, timeout_s) as locked:
            if not locked:
                log.warning(
                    "the source's planning did not finish within %.0f s: waiting only for the "
                    "batch in Spark's offset log (%s)",
                    timeout_s,
                    self.checkpoint_dir,
                )
            planned = read_planned(self.checkpoint_dir) if locked else None
        logged = running_batch(self.checkpoint_dir)
        pending = None if planned is None else planned.batch_id
        if pending is not None and self.done(pending):
            pending = None
        return max((b for b in (logged, pending) if b is not None), default=None)

    def logged(self, batch_id: int) -> bool:
        """Whether Spark logged the batch `batch_id`'s offsets (it runs, or ran)."""
        return batch_offsets_path(self.checkpoint_dir, batch_id).exists()

    def done(self, batch_id: int) -> bool:
        """Whether Spark marked the batch `batch_id` (or a later one) done."""
        done = last_committed_batch(self.checkpoint_dir)
        return done is not None and done >= batch_id
