"""Where a moved partition's time without output goes, from the instances' own logs.

A partition that moves from one instance to another is without output from the old owner's last
commit of it to the new owner's first. The instances log each step (`sink`: a batch's commit and
its input offsets; `membership`: a rebalance's assigned partitions; `kafka_source`: a gained
partition's planning), so the gap splits into:

- **rebalance**: the old owner's last commit to the group's assignment to the new owner (the old
  owner's leaving, the heartbeat that tells the others, the join and sync);
- **wait**: the assignment to the first batch that plans the partition (the batch running when
  it came, and the trigger's next tick);
- **first batch**: that batch, from its planning to its commit (the changelog's tail after the
  new owner's copy, the input since the old owner's last commit, and the transaction).

The new owner's restore line (`sink`) says whether the move landed on a copy of the partition's
state there (warm: its changelog's tail, or nothing, to read) or read the whole changelog (cold).
Its start line (`app.processor`) says whether the move's first batch was the first it committed
since its process started (a just-started taker: its input path runs for the first time then, as
its warm-up batches read only changelogs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

_STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO "
_COMMIT = re.compile(_STAMP + r"app\.processor\.sink: batch \d+: committed .*? offsets \{([^}]*)\}")
_ASSIGNED = re.compile(_STAMP + r"app\.processor\.group_member: rebalance: assigned \[([^\]]*)\]")
_PLANNED = re.compile(_STAMP + r"app\.processor\.kafka_source: partition \S+-(\d+) \(gained\)")
_STARTED = re.compile(_STAMP + r"app\.processor: starting ")
_RESTORED = re.compile(
    _STAMP + r"app\.processor\.sink: partition \S+-(\d+): "
    r"(?:state restored from (\d+) changelog records \(([^)]*)\)|nothing to restore)"
)
# The restore line of a partition that had no copy of its state here.
_COLD = "no copy here"


@dataclass(frozen=True)
class Move:
    """One partition's move from one instance to another, as their logs tell it."""

    partition: int
    source: str
    target: str
    last_commit: float  # the source's last commit of the partition
    assigned: float  # the group gave it to the target
    planned: float  # the target's batch planned it
    first_commit: float  # the target's first commit of it
    restored: int = 0  # changelog records the target read to restore it
    cold: bool = False  # no copy of its state at the target: the whole changelog read
    fresh: bool = False  # the target's first commit since its process started

    @property
    def gap(self) -> float:
        """Seconds without a commit of the partition."""
        return self.first_commit - self.last_commit

    @property
    def phases(self) -> tuple[float, float, float]:
        """Rebalance, wait and first batch, in seconds (they add up to the gap)."""
        return (
            self.assigned - self.last_commit,
            self.planned - self.assigned,
            self.first_commit - self.planned,
        )

    def describe(self) -> str:
        """e.g. `p3 a->b: 3.3 = 0.9 rebalance + 1.0 wait + 1.4 first batch`."""
        rebalance, wait, first = self.phases
        return (
            f"p{self.partition} {self.source}->{self.target}: {self.gap:.1f} = "
            f"{rebalance:.1f} rebalance + {wait:.1f} wait + {first:.1f} first batch"
        )


@dataclass(frozen=True)
class LogEvent:
    """A commit, an assignment or a gained partition's planning, from one instance's log."""

    at: float
    instance: str
    kind: str  # "commit", "assigned", "planned", "restored" or "started"
    partitions: frozenset[int]
    records: int = 0  # "restored": changelog records read
    cold: bool = False  # "restored": without a copy here


def _stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _partitions(text: str) -> frozenset[int]:
    return frozenset(int(p.split(":")[0]) for p in text.split(",") if p.strip())


def read_events(lines: Iterable[str], instance: str) -> list[LogEvent]:
    """The commits, assignments, plannings and restores of gained partitions, and the process's
    starts, in one instance's log."""
    events = []
    for line in lines:
        started = _STARTED.match(line)
        if started is not None:
            events.append(LogEvent(_stamp(started.group(1)), instance, "started", frozenset()))
            continue
        for kind, pattern in (("commit", _COMMIT), ("assigned", _ASSIGNED), ("planned", _PLANNED)):
            match = pattern.match(line)
            if match is not None:
                at, partitions = _stamp(match.group(1)), _partitions(match.group(2))
                events.append(LogEvent(at, instance, kind, partitions))
                break
        else:
            restored = _RESTORED.match(line)
            if restored is not None:
                stamp, records, source = restored.group(1, 3, 4)
                events.append(
                    LogEvent(_stamp(stamp), instance, "restored", _partitions(restored.group(2)),
                             int(records or 0), _COLD in (source or ""))
                )  # fmt: skip
    return events


def read_logs(logs: Mapping[str, Path]) -> list[LogEvent]:
    """Every instance's events (`logs`: instance name -> its log), in time order."""
    events: list[LogEvent] = []
    for instance, path in logs.items():
        with path.open(encoding="utf-8", errors="replace") as lines:
            events.extend(read_events(lines, instance))
    return sorted(events, key=lambda e: e.at)


def moves(events: Sequence[LogEvent], since: float, until: float) -> list[Move]:
    """Every move whose new owner was assigned the partition in [since, until], complete in the
    events (`read_logs`: the old owner's last commit before it, the new owner's planning and
    commit after)."""
    found = []
    for assigned in events:
        if assigned.kind != "assigned" or not since <= assigned.at <= until:
            continue
        mine = [e for e in events if e.at >= assigned.at and e.instance == assigned.instance]
        for p in sorted(assigned.partitions):
            before = [
                e
                for e in events
                if e.kind == "commit" and p in e.partitions and e.at <= assigned.at
                and e.instance != assigned.instance
            ]  # fmt: skip
            planned = next((e for e in mine if e.kind == "planned" and p in e.partitions), None)
            if not before or planned is None:
                continue
            commits = [e for e in mine if e.kind == "commit" and p in e.partitions]
            first = next((e for e in commits if e.at >= planned.at), None)
            restored = next((e for e in mine if e.kind == "restored" and p in e.partitions), None)
            if first is not None:
                last = before[-1]
                fresh = _first_since_start(events, assigned.instance, first.at)
                found.append(Move(p, last.instance, assigned.instance, last.at, assigned.at,
                                  planned.at, first.at,
                                  restored.records if restored else 0,
                                  restored.cold if restored else False, fresh))  # fmt: skip
    return found


def _first_since_start(events: Sequence[LogEvent], instance: str, at: float) -> bool:
    """Whether `instance`'s commit at `at` was its first since its process last started."""
    mine = [e for e in events if e.instance == instance and e.at < at]
    started = max((e.at for e in mine if e.kind == "started"), default=None)
    return started is not None and not any(e.kind == "commit" and e.at >= started for e in mine)


def warm_share(found: list[Move]) -> str | None:
    """The table cell: how many moves landed on a copy, and the changelog records the cold
    ones read."""
    if not found:
        return None
    cold = [m for m in found if m.cold]
    read = sum(m.restored for m in found)
    text = f"{len(found) - len(cold)} of {len(found)}, {read:,} changelog records read"
    if cold:
        text += f" (cold: {', '.join(f'p{m.partition} {m.restored:,} records' for m in cold)})"
    return text


def fresh_share(found: list[Move]) -> str | None:
    """The table cell: how many moves went to a just-started instance (their first batch its
    first since the start), and the longest gap of those and of the others."""
    if not found:
        return None
    fresh = [m.gap for m in found if m.fresh]
    others = [m.gap for m in found if not m.fresh]
    return (
        f"{len(fresh)} of {len(found)}, longest {_longest(fresh)}; "
        f"onto running instances, longest {_longest(others)}"
    )


def _longest(gaps: Sequence[float]) -> str:
    return f"{max(gaps):.1f} s" if gaps else "none"


def summary(found: list[Move]) -> str | None:
    """The table cell: the longest move, and how many there were."""
    if not found:
        return None
    worst = max(found, key=lambda m: m.gap)
    return f"{worst.describe()} (longest of {len(found)} moves)"
