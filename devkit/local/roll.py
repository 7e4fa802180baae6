"""A rolling update of the local instances, done the way the StatefulSet controller does one.

The controller creates the pods in order (`podManagementPolicy: OrderedReady`, the processor's):
pod N+1 only once pod N is Ready. In a rolling update it replaces the pod with the highest
ordinal first and moves to the next one only once the new pod is Ready and has stayed Ready for
`minReadySeconds` (an available pod); a pod that turns unready starts that clock again.
`roll_instances` does the same with the local processes (`ProcessorProcess`): SIGTERM, start
again, wait; the benchmarks' rollout cases use it. `LocalController` is the local run's
controller: the ordered start, then one roll mid-run.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from devkit.local.instances import ProcessorProcess
from devkit.local.observe import OutputTail
from devkit.local.pipeline import LocalPipeline

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.5
# How long a replaced instance may take to be ready again (a Spark start, a busy machine).
READY_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class RollStep:
    """Where a roll is: the instance being replaced, and what it waits for."""

    instance: str
    position: int  # 1-based, in roll order
    of: int
    waiting_for: str  # "stop", "ready", "min ready"


class RollFailed(RuntimeError):
    """An instance did not become available within the roll's deadline."""


def roll_instances(
    instances: Sequence[ProcessorProcess],
    min_ready_s: float,
    ready_timeout_s: float,
    on_step: Callable[[RollStep], None] = lambda step: None,
    cancel: threading.Event | None = None,
) -> None:
    """Replace every instance, highest ordinal first, each once the one before is available
    (ready for `min_ready_s` without a break). Raises `RollFailed` naming the instance that was
    not available within `ready_timeout_s`; returns early when `cancel` is set."""
    cancel = cancel or threading.Event()
    order = sorted(instances, key=lambda i: i.index, reverse=True)
    for position, instance in enumerate(order, start=1):
        if cancel.is_set():
            return
        on_step(RollStep(instance.name, position, len(order), "stop"))
        log.info("roll %d/%d: replacing %s", position, len(order), instance.name)
        instance.stop()
        instance.start()
        on_step(RollStep(instance.name, position, len(order), "ready"))
        min_ready = RollStep(instance.name, position, len(order), "min ready")
        wait_available(
            instance, min_ready_s, ready_timeout_s, cancel, functools.partial(on_step, min_ready)
        )


def start_in_order(
    instances: Sequence[ProcessorProcess],
    ready_timeout_s: float,
    on_step: Callable[[RollStep], None] = lambda step: None,
    cancel: threading.Event | None = None,
) -> None:
    """Start every instance not running yet, lowest ordinal first, each once the one before is
    ready (`OrderedReady`). Raises `RollFailed` naming an instance not ready in time."""
    cancel = cancel or threading.Event()
    order = sorted(instances, key=lambda i: i.index)
    for position, instance in enumerate(order, start=1):
        if cancel.is_set():
            return
        if not instance.running:
            instance.start()
            log.info("started %s (%d/%d), log %s", instance.name, position, len(order),
                     instance.log_path)  # fmt: skip
        on_step(RollStep(instance.name, position, len(order), "ready"))
        wait_available(instance, 0.0, ready_timeout_s, cancel)


def wait_available(
    instance: ProcessorProcess,
    min_ready_s: float,
    ready_timeout_s: float,
    cancel: threading.Event,
    on_ready: Callable[[], None] = lambda: None,
) -> None:
    """Wait until `instance` has been ready for `min_ready_s` without a break (or `cancel`);
    `on_ready` runs each time it turns ready. Raises `RollFailed` when it exits or times out."""
    deadline = time.monotonic() + ready_timeout_s
    ready_since: float | None = None
    while not cancel.wait(POLL_INTERVAL_S):
        if not instance.running:
            raise RollFailed(
                f"{instance.name} exited with code {instance.returncode} after its start; "
                f"see its log {instance.log_path}"
            )
        if instance.status().ready:
            if ready_since is None:
                ready_since = time.monotonic()
                on_ready()
            if time.monotonic() - ready_since >= min_ready_s:
                return
        else:
            ready_since = None
        if time.monotonic() > deadline:
            raise RollFailed(
                f"{instance.name} was not ready for {min_ready_s:g} s in a row within "
                f"{ready_timeout_s:g} s of its start; see its log {instance.log_path}"
            )


# How long a wait for the instances to catch up goes on before the display says what to change.
CATCH_UP_HINT_AFTER_S = 60.0


class CatchUpWait:
    """The wait before a roll: every instance ready and the group's lag at most about two
    batches' worth of the load's `rate` (`bar` records).

    Rolling a group that is behind would measure its backlog, not the roll. On a machine too
    busy for the load the lag never gets there: `describe` says what the wait is for and what
    to change, and with a `timeout_s` the wait ends, failed, instead of going on unseen."""

    def __init__(self, rate: float, timeout_s: float | None) -> None:
        self.bar = round(2 * rate) + 100
        self.rate = rate
        self.timeout_s = timeout_s
        self.since: float | None = None
        self.missing: str = "the first look at the group"

    def settled(self, not_ready: Sequence[str], lag: int, at: float) -> bool:
        """Whether the roll may begin, from what the instances and the group show `at` (a
        `time.monotonic()`); raises `RollFailed` once the wait is past its timeout."""
        if self.since is None:
            self.since = at
        if not_ready:
            self.missing = f"{', '.join(not_ready)} not ready"
        elif lag > self.bar:
            self.missing = (
                f"the group's lag at most {self.bar:,} records (about two batches at "
                f"{self.rate:g} records/s), now {lag:,}"
            )
        else:
            return True
        if self.timeout_s is not None and at - self.since > self.timeout_s:
            raise RollFailed(
                f"no roll: waited {self.timeout_s:g} s for {self.missing}. {self._advice()}"
            )
        return False

    def describe(self, at: float) -> str:
        """One line for the live display: what the roll waits for, since when, what to do."""
        waited = 0.0 if self.since is None else at - self.since
        line = f"the roll waits for {self.missing} ({waited:.0f} s so far)"
        if waited >= CATCH_UP_HINT_AFTER_S:
            line += f". {self._advice()}"
        if self.timeout_s is not None:
            line += f"; gives up after {self.timeout_s:g} s"
        return line

    def _advice(self) -> str:
        return (
            "The instances do not keep up with the load on this machine (see `uptime` and their "
            "logs): run again with a lower --rate or fewer --keys"
        )


class LocalController:
    """The local run's StatefulSet controller, on a thread: start the instances in order
    (`start_in_order`); then, unless `after_s` is None, once every instance is ready and the
    group has caught up (`catch_up`), `after_s` later, roll them (`roll_instances`) and
    measure the output's longest gap per partition over the roll (`OutputTail.open_gaps`)."""

    def __init__(
        self,
        pipeline: LocalPipeline,
        after_s: float | None,
        min_ready_s: float,
        catch_up: CatchUpWait,
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> None:
        self.pipeline = pipeline
        self.after_s = after_s
        self.min_ready_s = min_ready_s
        self.catch_up = catch_up
        self.ready_timeout_s = ready_timeout_s
        self.step: RollStep | None = None
        self.started_ms: int | None = None
        self.ended_ms: int | None = None
        self.error: str | None = None
        self._started_all = False
        self._caught_up_at: float | None = None
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)

    def start(self) -> LocalController:
        """Start the instances, then wait for the moment to roll."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Cancel what is left of the start or the roll (an instance being started finishes
        starting)."""
        self._cancel.set()
        self._thread.join()
        if self.started_ms is not None and self.ended_ms is None:
            self.ended_ms = now_ms()
            self._output().close_gaps(self.ended_ms)

    @property
    def busy(self) -> bool:
        """Whether it is still starting, waiting to roll or rolling."""
        return self._thread.is_alive()

    @property
    def done(self) -> bool:
        """Whether the roll has ended (every instance replaced, or failed)."""
        return self.ended_ms is not None

    def gaps(self) -> dict[int, float]:
        """Per partition, the longest time without output since the roll began (so far)."""
        return self._output().gap_seconds(now_ms()) if self.started_ms is not None else {}

    def describe(self) -> str:
        """One line for the live display."""
        if self.error is not None:
            return f"failed: {self.error}"
        if self.started_ms is None:
            if self._cancel.is_set():
                return "stopped before the roll"
            step = self.step
            if step is not None and not self._started_all:
                return f"starting in order: {step.instance} ({step.position}/{step.of})"
            if self.after_s is None:
                return "no roll (--no-roll)"
            if self._caught_up_at is not None:
                left = self.after_s - (time.monotonic() - self._caught_up_at)
                return f"caught up: the roll begins in {max(0.0, left):.0f} s"
            return self.catch_up.describe(time.monotonic())
        gaps = self.gaps()
        spread = " ".join(f"{p}:{g:.1f}" for p, g in sorted(gaps.items()))
        longest = max(gaps.values(), default=0.0)
        if self.ended_ms is not None:
            took = (self.ended_ms - self.started_ms) / 1000
            return (
                f"roll done in {took:.0f} s; longest time without output per partition during "
                f"it (s): {spread} (max {longest:.1f})"
            )
        step = self.step
        where = f"{step.instance} ({step.position}/{step.of}) {step.waiting_for}" if step else ""
        return f"rolling: {where}; longest time without output so far (s): {spread}"

    def _output(self) -> OutputTail:
        assert self.pipeline.output is not None
        return self.pipeline.output

    def _settled(self) -> bool:
        assert self.pipeline.lag is not None
        not_ready = [i.name for i in self.pipeline.instances if not i.status().ready]
        lag = self.pipeline.lag.total() if not not_ready else 0
        return self.catch_up.settled(not_ready, lag, time.monotonic())

    def _run(self) -> None:
        try:
            start_in_order(
                self.pipeline.instances, self.ready_timeout_s, self._on_step, self._cancel
            )
        except RollFailed as exc:
            self.error = str(exc)
            log.error("the start stopped: %s", exc)
            return
        self._started_all = True
        if self.after_s is None:
            return
        try:
            while not self._settled():
                if self._cancel.wait(POLL_INTERVAL_S):
                    return
        except RollFailed as exc:
            self.error = str(exc)
            log.error("%s", exc)
            return
        self._caught_up_at = time.monotonic()
        if self._cancel.wait(self.after_s):
            return
        self.started_ms = now_ms()
        self._output().open_gaps(self.started_ms)
        log.info("rolling every instance, highest ordinal first")
        try:
            roll_instances(
                self.pipeline.instances,
                self.min_ready_s,
                self.ready_timeout_s,
                on_step=self._on_step,
                cancel=self._cancel,
            )
        except RollFailed as exc:
            self.error = str(exc)
            log.error("the roll stopped: %s", exc)
        if not self._cancel.is_set():
            self.ended_ms = now_ms()
            self._output().close_gaps(self.ended_ms)

    def _on_step(self, step: RollStep) -> None:
        self.step = step


def now_ms() -> int:
    """Wall-clock milliseconds, the clock of the output records' timestamps."""
    return int(time.time() * 1000)
