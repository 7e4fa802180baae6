"""Measurements over a run: a timeline of samples, and what the output topic shows afterwards.

- `Timeline` samples the group's lag per partition and every instance's endpoints on a thread.
- The latencies (event time to output, per input record) are the run's `Truth`'s
  (`devkit.truth`), which matches each output record to the input records it covers.
- `zero_output_gaps` is the longest stretch without any output record per partition.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Self

from devkit.local.instances import InstanceStatus
from devkit.local.observe import OutputGaps, PartitionLag
from devkit.local.pipeline import LocalPipeline
from devkit.truth import OutputRecord

SAMPLE_INTERVAL_S = 0.5
# The field's bar: 99.99 % of aggregates available within 10 seconds (DESIGN.md).
LATE_S = 10.0


@dataclass(frozen=True)
class TimelineSample:
    """The pipeline at one wall-clock moment."""

    at: float  # time.time()
    lag: Mapping[int, PartitionLag]
    instances: tuple[InstanceStatus, ...]


class PeriodicSampler:
    """Calls `take()` every `interval_s` on a daemon thread, from `start()` until `stop()`.

    As a context manager it stops on the way out, also on an error or a Ctrl-C: before the
    clients it samples with are closed, not after.
    """

    def __init__(self, name: str, interval_s: float) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Self:
        """Start sampling."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (a no-op once stopped or before a start)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def take(self) -> object:
        """One sample now, kept by the subclass."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.take()


class Timeline(PeriodicSampler):
    """Samples lag and instance status every `interval_s` on a daemon thread."""

    def __init__(self, pipeline: LocalPipeline, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        super().__init__("timeline", interval_s)
        self.pipeline = pipeline
        self.samples: list[TimelineSample] = []
        # One sample at a time: the sampler thread and `take()` callers share the clients.
        self._lock = threading.Lock()

    def take(self) -> TimelineSample:
        """One sample now (also appended to `samples`)."""
        assert self.pipeline.lag is not None
        with self._lock:
            sample = TimelineSample(
                at=time.time(),
                lag=self.pipeline.lag.read(),
                instances=tuple(i.status() for i in self.pipeline.instances),
            )
            self.samples.append(sample)
        return sample


def zero_output_gaps(
    records: Sequence[OutputRecord], partitions: Sequence[int], since_ms: int, until_ms: int
) -> dict[int, float]:
    """Per partition, the longest time in [since, until] with no output record (seconds): the
    local run's live `OutputGaps`, fed after the fact."""
    gaps = OutputGaps(partitions)
    for record in sorted(records, key=lambda r: r.timestamp_ms):
        if record.timestamp_ms >= until_ms:
            break
        if gaps.since_ms is None and record.timestamp_ms > since_ms:
            gaps.open(since_ms)
        if record.partition in partitions:
            gaps.record(record.partition, record.timestamp_ms)
    if gaps.since_ms is None:
        gaps.open(since_ms)
    gaps.close(until_ms)
    return gaps.seconds(until_ms)


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The `fraction` quantile (nearest rank); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[index]


def late_percent(seconds: Sequence[float]) -> float | None:
    """The share of latencies beyond the bar (`LATE_S`), in percent; None for no latencies."""
    if not seconds:
        return None
    return round(100 * sum(s > LATE_S for s in seconds) / len(seconds), 3)


def metric_delta(before: InstanceStatus | None, after: InstanceStatus | None, name: str) -> float:
    """How much a counter grew between two statuses of one process (0 when unknown)."""
    if after is None:
        return 0.0
    return after.metric(name) - (before.metric(name) if before is not None else 0.0)
