"""Reading the rolling-restart benchmark's timeline: when the pipeline has settled before a case,
and what a sample says about readiness, assignment, copies and progress."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from confluent_kafka.admin import AdminClient

from app.admin.broker_readiness import judge
from app.clients.waiting import poll_until
from devkit.bench.measure import Timeline, TimelineSample
from devkit.bench.restart_cases import BenchParams
from devkit.local.instances import InstanceStatus
from devkit.local.observe import PartitionLag


def first_sample(
    timeline: Timeline, timeout_s: float, condition: Callable[[TimelineSample], bool]
) -> TimelineSample | None:
    """The first sample (taken every half second) for which `condition(sample)` holds; None
    when none did within `timeout_s`."""

    def holding() -> TimelineSample | None:
        sample = timeline.take()
        return sample if condition(sample) else None

    return poll_until(holding, timeout_s, interval_s=0.5)


def wait_settled(
    timeline: Timeline, params: BenchParams, copies: int = 1, standbys: int = 0
) -> TimelineSample | None:
    """A sample once every instance is ready, the lag is caught up, the `standbys` copies of
    every partition are built, and the group's assignment (every partition owned once, by each
    of `copies` groups: a pair's sides) stayed the same for `steady_s` in which every partition
    was processed: a case must not begin while partitions still move after the start, or
    before the copies it would hand them to exist."""
    deadline = time.monotonic() + params.ready_timeout_s
    while (remaining := deadline - time.monotonic()) > 0:
        first = first_sample(
            timeline,
            remaining,
            lambda s: (
                all_ready(s)
                and caught_up(s, params)
                and fully_assigned(s, params, copies)
                and copies_built(s, params, standbys, copies)
            ),
        )
        if first is None:
            return None
        time.sleep(params.steady_s)
        last = timeline.take()
        if (
            all_ready(last)
            and assignment(last) == assignment(first)
            and advanced(last, first.lag, range(params.partitions))
        ):
            return last
    return None


def judged_ready(admin: AdminClient, node_id: int) -> bool:
    """Whether node `node_id` is ready as its pod's readiness sidecar judges it."""
    return judge(admin, node_id).ready


def assignment(sample: TimelineSample) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple((s.name, tuple(sorted(s.partitions or ()))) for s in sample.instances)


def fully_assigned(sample: TimelineSample, params: BenchParams, copies: int = 1) -> bool:
    owned = sorted(p for _, partitions in assignment(sample) for p in partitions)
    return owned == sorted(list(range(params.partitions)) * copies)


def copies_built(
    sample: TimelineSample, params: BenchParams, standbys: int, groups: int = 1
) -> bool:
    """Whether every partition has its `standbys` copies in each of `groups` groups (at most one
    on each of a group's other instances) that their keepers' copies files record."""
    wanted = min(standbys, params.instances - 1) * groups
    if wanted < 1:
        return True
    built = Counter(
        p for s in sample.instances for p in (set(s.standby) & s.copies) - set(s.partitions or ())
    )
    return all(built[p] >= wanted for p in range(params.partitions))


def instance_status(sample: TimelineSample, name: str) -> InstanceStatus:
    return next(s for s in sample.instances if s.name == name)


def all_ready(sample: TimelineSample) -> bool:
    return all(s.ready for s in sample.instances)


def total_lag(sample: TimelineSample) -> int:
    return sum(p.lag for p in sample.lag.values())


def caught_up(sample: TimelineSample, params: BenchParams) -> bool:
    """Every partition committed something, and the lag is at most `caught_up_s` of input."""
    committed = all(p.committed is not None for p in sample.lag.values())
    return committed and total_lag(sample) <= params.rate * params.caught_up_s


def at_ends(lags: Mapping[int, PartitionLag], ends: Mapping[int, int]) -> dict[int, PartitionLag]:
    """`lags` with each partition's committed offset raised to `ends` (a position to pass)."""
    return {
        p: PartitionLag(lag.end, max(lag.committed or 0, ends.get(p, 0) - 1))
        for p, lag in lags.items()
    }


def advanced(
    sample: TimelineSample, before: Mapping[int, PartitionLag], partitions: Sequence[int]
) -> bool:
    """Every one of `partitions` committed past where it stood at `before`: processed again."""
    return all((sample.lag[p].committed or 0) > (before[p].committed or 0) for p in partitions)
