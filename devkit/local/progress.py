"""Live progress of a local run: one sample every few seconds, printed as two short lines."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from devkit.local.instances import InstanceStatus
from devkit.local.observe import PartitionLag


@dataclass(frozen=True)
class Sample:
    """The pipeline at one moment."""

    at: float  # time.monotonic()
    lag: dict[int, PartitionLag]
    instances: tuple[InstanceStatus, ...]
    latest: dict[str, bytes]  # the output's newest value per key
    output_records: int
    duplicates: int

    @property
    def end_total(self) -> int:
        """Input records in the topic."""
        return sum(p.end for p in self.lag.values())

    @property
    def committed_total(self) -> int:
        """Input records the group has committed (processed, exactly once)."""
        return sum(p.committed or 0 for p in self.lag.values())

    @property
    def lag_total(self) -> int:
        """Input records not processed yet."""
        return sum(p.lag for p in self.lag.values())


def describe_instance(status: InstanceStatus) -> str:
    """`page-view-counter-0 ready [0, 1]` or why it is not ready."""
    if not status.running:
        return f"{status.name} down"
    if status.partitions is None:
        return f"{status.name} joining"
    state = "ready" if status.ready else "not ready"
    return f"{status.name} {state} {list(status.partitions)}"


def format_progress(
    previous: Sample | None, current: Sample, started: float, busiest: Sequence[str] = ()
) -> str:
    """Rates since the previous sample, lag, the output (the `busiest` keys' values) and every
    instance."""
    elapsed = current.at - started
    if previous is None:
        rate_in = rate_out = 0.0
    else:
        span = max(current.at - previous.at, 1e-9)
        rate_in = (current.end_total - previous.end_total) / span
        rate_out = (current.committed_total - previous.committed_total) / span
    shown = " ".join(
        f"{key}={current.latest[key].decode('utf-8', 'replace')}"
        for key in busiest
        if key in current.latest
    )
    instances = " | ".join(describe_instance(s) for s in current.instances)
    return (
        f"[{elapsed:5.0f} s] in {rate_in:6.0f}/s  processed {rate_out:6.0f}/s  "
        f"lag {current.lag_total:6d}  output: {len(current.latest)} keys, "
        f"duplicates {current.duplicates}\n"
        f"          {instances}\n"
        f"          busiest keys: {shown or 'none in the output yet'}"
    )


def now() -> float:
    """The clock samples use."""
    return time.monotonic()
