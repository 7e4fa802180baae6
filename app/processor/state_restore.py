"""Restore and standby state: which partitions' state an instance keeps, and from where it reads.

An instance keeps the state of the partitions it owns (active) and warm copies of some it does not
own (standby, `num.standby.replicas`, Kafka Streams' name and meaning). Every kept partition's
state is built from its changelog (`SourceOffsets` holds the positions):

- **Copies file.** `<checkpoint>/state-copies.json` records, per kept partition, the restore
  epoch of its state rows and a changelog offset the state is known to reflect (Kafka Streams'
  `.checkpoint` file). The sink writes it after every batch (`record_batch`): the end of a
  changelog read, or after a written transaction, the offset after this instance's last
  changelog record of the partition. A batch whose results for a partition were NOT written
  (revoked mid-batch) leaves state the changelog does not have: the partition's entry is removed
  and its next copy is rebuilt from the beginning. The offset may lag the state (a crash before
  the file was replaced): re-reading changelog records the state already has sets the same
  values again, so a lower offset is always safe.
- **Planning** (`next_position`): an active partition that stays active reads input; a standby
  that stays a standby reads its changelog's new records each batch; any other partition that
  must be kept (gained by the group, or newly a standby) reads its changelog after its copy's
  offset, under the copy's epoch, or, without a copy, from the beginning under a new epoch.
- **A gained partition's state matches its committed offset.** Its input is read from the
  group's committed offset, so its changelog must be read up to the end of the transaction that
  committed it, no further back: the previous owner's last batch may still be committing when the
  partition arrives. So the committed offset is asked first (a `read_committed` client's
  OffsetFetch waits while a transaction holds it, KIP-447), and its commit metadata names the
  changelog offset that transaction wrote up to (`commit_metadata`). The changelog's last stable
  offset is read once it has reached that offset: the transaction's markers reach each
  partition on their own, after the commit returned. Read before the committed offset, or
  before the marker, it left out the last batch's changelog records while its input was counted
  as done: the counts of that batch were lost.
- **Who keeps which standby** (`standby_partitions`): the group's members in order of their
  names (`group.instance.id`, else `client.id`, which the processor sets to its pod name), as a
  ring; the `num.standby.replicas` members after a partition's owner keep its copies. With
  `num.standby.replicas` >= the other members, every member keeps a copy of every partition it
  does not own, so every move lands on a warm copy, whatever the assignor decides.
- **Warm before joining** (`warm_up_partitions`): a hand-off instance that is not in the group
  yet (a restart, a wiped volume, a scale-out's new pod) catches up, before it joins, the copies
  of every partition the group may hand it: the assignor (librdkafka's cooperative-sticky, or the
  broker's under KIP-848) balances counts and cannot see copies, so a newcomer without them
  would take partitions cold from members that hold them warm (Kafka Streams keeps those on
  the caught-up member and warms the newcomer first, KIP-441; the processor, which cannot steer
  the assignor, warms first instead).

The pages of one partition never appear in another (records are partitioned by key), so a
partition's copy changes only through its own changelog reads and batches.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.processor.atomic_file import replace_text
from app.processor.source_offsets import FROM_BEGINNING, PartitionPosition

COPIES_FILE = "state-copies.json"
CHANGELOG_END_KEY = "changelog_end"


@dataclass(frozen=True)
class CommittedInput:
    """The group's committed offset of an input partition, and the changelog offset after the
    records of the transaction that committed it. None: not recorded (an older version's commit,
    a reset), or that transaction wrote no changelog record of the partition; then the records
    of earlier transactions are marked already, since the broker begins no transaction of a
    producer before its last one's markers are written, and the next owner's plan waited for
    the previous owner's."""

    offset: int
    changelog_end: int | None = None


def commit_metadata(changelog_end: int) -> str:
    """The metadata a transaction commits an input partition's offset with."""
    return json.dumps({CHANGELOG_END_KEY: changelog_end})


def changelog_end_of(metadata: str | None) -> int | None:
    """The changelog offset recorded by `commit_metadata`; None for any other metadata (an
    older version's commit, a tool's reset)."""
    try:
        value = json.loads(metadata or "")[CHANGELOG_END_KEY]
    except (ValueError, TypeError, KeyError):
        return None
    return value if isinstance(value, int) and value >= 0 else None


@dataclass(frozen=True)
class StateCopy:
    """The state of one partition reflects its changelog up to `changelog_offset` (at least)."""

    restore_epoch: int
    changelog_offset: int


def copies_path(checkpoint_dir: Path) -> Path:
    """The copies file of the query whose checkpoint is `checkpoint_dir` (lost with it)."""
    return checkpoint_dir / COPIES_FILE


def read_copies(path: Path) -> dict[int, StateCopy]:
    """The copies file's entries (none before the first batch)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {
        int(p): StateCopy(int(entry["restore_epoch"]), int(entry["changelog_offset"]))
        for p, entry in data["partitions"].items()
    }


def write_copies(path: Path, copies: Mapping[int, StateCopy]) -> None:
    """Replace the copies file atomically."""
    entries = {
        str(p): {"restore_epoch": c.restore_epoch, "changelog_offset": c.changelog_offset}
        for p, c in sorted(copies.items())
    }
    replace_text(path, json.dumps({"partitions": entries}, sort_keys=True))


def record_batch(
    copies: Mapping[int, StateCopy],
    positions: Mapping[int, PartitionPosition],
    written: Mapping[int, int],
    unwritten: Sequence[int],
) -> dict[int, StateCopy]:
    """The copies after a batch.

    `positions`: the batch's end positions; `written`: per partition whose results this instance
    wrote, the offset after its last changelog record; `unwritten`: partitions whose state the
    batch changed without their results reaching the changelog.
    """
    result = dict(copies)
    for p, pos in positions.items():
        if pos.restore_from is not None:
            result[p] = StateCopy(pos.restore_epoch, pos.changelog_offset)
    for p, offset in written.items():
        result[p] = StateCopy(positions[p].restore_epoch, offset)
    for p in unwritten:
        result.pop(p, None)
    return result


def next_position(
    previous: PartitionPosition | None,
    active: bool,
    copy: StateCopy | None,
    changelog_end: Callable[[int], int],
    committed: Callable[[], CommittedInput],
    now_ms: int,
) -> PartitionPosition:
    """Where a kept partition that does not simply go on reading input stands after this batch.

    `active`: owned now (else a standby); `copy`: its entry in the copies file; `committed` asks
    for the group's committed input (stable), `changelog_end(at_least)` for the changelog's last
    stable offset once it is at least `at_least`. An active partition's committed input is asked
    first (see the module docstring); each is asked only when needed.
    """
    source = committed() if active else None
    end = changelog_end((source.changelog_end or 0) if source is not None else 0)
    if previous is not None and not previous.active:
        # A standby: its copy is exactly what the previous (committed) batch read.
        if not active and end <= previous.changelog_offset:
            return previous.settled()  # stays a standby, nothing new
        copy = StateCopy(previous.restore_epoch, previous.changelog_offset)
    if copy is not None and copy.changelog_offset <= end:
        start, epoch = copy.changelog_offset, copy.restore_epoch
    else:
        # No copy (or one beyond the changelog's end: the topic was recreated).
        start, epoch = FROM_BEGINNING, now_ms
    return PartitionPosition(
        source.offset if source is not None else None, end, epoch, restore_from=start
    )


@dataclass(frozen=True)
class Member:
    """One group member as the group describes it: its name and the partitions it owns."""

    name: str
    partitions: frozenset[int]


def standby_partitions(
    members: Sequence[Member], me: str, replicas: int, partitions: int
) -> set[int]:
    """The partitions whose copies member `me` keeps (see the module docstring); `partitions`:
    the topic's partition count."""
    ring = sorted(members, key=lambda m: m.name)
    names = [m.name for m in ring]
    if me not in names or replicas < 1:
        return set()
    mine = names.index(me)
    if replicas >= len(ring) - 1:
        # Every other member keeps every partition: a partition between two owners (owned by
        # nobody in a description taken mid-rebalance) is kept too.
        return set(range(partitions)) - ring[mine].partitions
    kept: set[int] = set()
    for step in range(1, replicas + 1):  # fewer than the other members (above)
        kept |= ring[(mine - step) % len(ring)].partitions
    return kept - ring[mine].partitions


def warm_up_partitions(
    members: Sequence[Member], me: str, replicas: int, partitions: int
) -> set[int]:
    """The partitions whose copies member `me` catches up before it joins the group of
    `members` (see the module docstring): those it will keep as a standby once in the ring, and
    those the assignor may move to it. With a copy on every other member, that is all of them;
    else the partitions of members owning more than their share after the join (the only ones
    a balancing assignor takes from) and any owned by nobody."""
    others = [m for m in members if m.name != me]
    if replicas < 1 or partitions < 1:
        return set()
    if replicas >= len(others):
        return set(range(partitions))
    ring = [*others, Member(me, frozenset())]
    share = partitions // len(ring)
    movable = {p for m in others if len(m.partitions) > share for p in m.partitions}
    owned = {p for m in others for p in m.partitions}
    unowned = set(range(partitions)) - owned
    return standby_partitions(ring, me, replicas, partitions) | movable | unowned
