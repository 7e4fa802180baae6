"""The Kafka source's offsets, as Spark stores them in the checkpoint's offsets log.

One JSON object per micro-batch (Spark writes it to `<checkpoint>/offsets/<batchId>` before the
batch runs; its last line is the source's offsets):

    {"page-views": {"0": 120},
     "page-view-counter-counts-changelog": {"0": 55, "1": 310},
     "@restore.epoch": {"0": 1767225600000, "1": 1767225600000},
     "@restore.from": {"1": 290}}

- `<input topic>`: per active partition (owned: its input is read), the input offset the batch
  reads up to (exclusive).
- `<changelog topic>`: per partition whose state the instance keeps (active or standby), the
  changelog offset its state was last read up to: for a standby after every batch, for an
  active partition when it was restored.
- `@restore.epoch` (`@` cannot occur in a topic name): per kept partition, when its state was
  last rebuilt from the beginning of its changelog (epoch milliseconds). State rows carry the
  epoch they were written under, so a key left over from an earlier copy of the partition (and
  missing from the changelog) is known to be stale.
- `@restore.from`: the partitions whose changelog this batch reads, and where the read starts:
  -2 (the beginning: a full restore under a new epoch) or an offset (the tail after a copy, under
  the copy's epoch). It ends at the partition's changelog offset above. `state_restore.py`
  decides which partitions do.
- `@input.from` (optional): per gained partition, where this batch's input read starts (the
  group's committed offset); the same batch reads its changelog first: the keyed state sets each
  restored key's state before it adds the input.

- `@nudge` (optional): `{"token": N}`, the group member's last nudge (`Assignment.nudge`): a new
  one runs a batch even when no input arrived, so that a side of a pair acts on its control
  topic at once. Like the warm-up token it never changes which records are read.

- `@warm-up` (optional): `{"token": N}`, the token of the last warm-up batch (a batch a restarted
  instance runs before it joins the group, so that its first real batch finds Python workers,
  plans and state stores ready, and its copies caught up). It only has to differ from the
  previous batch's for Spark to run a batch; it never changes which records are read.

Only kept partitions appear: the offsets of the last committed batch are therefore also the
record of which partitions' state the checkpoint holds (active or standby). Keys are strings
(JSON) in numeric order so that the same offsets always serialise the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

EPOCH_KEY = "@restore.epoch"
FROM_KEY = "@restore.from"
INPUT_FROM_KEY = "@input.from"
WARM_UP_KEY = "@warm-up"
NUDGE_KEY = "@nudge"
# `restore_from` of a full restore: the changelog's first record, whatever its offset (the value
# of Kafka's OFFSET_BEGINNING, which the readers pass on).
FROM_BEGINNING = -2


@dataclass(frozen=True)
class PartitionPosition:
    """Where one kept partition stands after a batch (see the module docstring)."""

    input_offset: int | None  # None: a standby (its input is not read here)
    changelog_offset: int
    restore_epoch: int
    restore_from: int | None = None  # where this batch's changelog read starts, if it has one
    # Where this batch's input read starts when the previous batch did not read the partition's
    # input (gained): the group's committed offset.
    input_from: int | None = None

    @property
    def active(self) -> bool:
        """Whether the instance owns the partition (reads its input)."""
        return self.input_offset is not None

    def settled(self) -> PartitionPosition:
        """The same position with no changelog read (what the next batch starts from)."""
        return replace(self, restore_from=None, input_from=None)


@dataclass(frozen=True)
class SourceOffsets:
    """The positions of every kept partition (the source's offset for one micro-batch)."""

    input_topic: str
    changelog_topic: str
    positions: Mapping[int, PartitionPosition] = field(default_factory=dict)
    warm_up: int = 0
    nudge: int = 0

    def to_dict(self) -> dict[str, dict[str, int]]:
        """The JSON-ready form Spark stores (stable key order)."""
        ordered = sorted(self.positions.items())
        data = {
            self.input_topic: {
                str(p): pos.input_offset for p, pos in ordered if pos.input_offset is not None
            },
            self.changelog_topic: {str(p): pos.changelog_offset for p, pos in ordered},
            EPOCH_KEY: {str(p): pos.restore_epoch for p, pos in ordered},
            FROM_KEY: {
                str(p): pos.restore_from for p, pos in ordered if pos.restore_from is not None
            },
        }
        gained = {str(p): pos.input_from for p, pos in ordered if pos.input_from is not None}
        if gained:
            data[INPUT_FROM_KEY] = gained
        if self.warm_up:
            data[WARM_UP_KEY] = {"token": self.warm_up}
        if self.nudge:
            data[NUDGE_KEY] = {"token": self.nudge}
        return data

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Mapping[str, int]], input_topic: str, changelog_topic: str
    ) -> SourceOffsets:
        """Parse Spark's form; an empty dict (the initial offset) means no partition is kept.

        Positions of other topics (a renamed input topic) are ignored: their partitions are then
        restored and read from the group's committed offsets, as for a new checkpoint.
        """
        inputs = data.get(input_topic, {})
        changelog = data.get(changelog_topic, {})
        epochs = data.get(EPOCH_KEY, {})
        starts = data.get(FROM_KEY, {})
        input_starts = data.get(INPUT_FROM_KEY, {})
        kept = set(inputs) | (set(changelog) if input_topic in data else set())
        positions = {
            int(p): PartitionPosition(
                input_offset=int(inputs[p]) if p in inputs else None,
                changelog_offset=int(changelog.get(p, 0)),
                restore_epoch=int(epochs.get(p, 0)),
                restore_from=int(starts[p]) if p in starts else None,
                input_from=int(input_starts[p]) if p in input_starts else None,
            )
            for p in kept
        }
        warm_up = int(data.get(WARM_UP_KEY, {}).get("token", 0))
        nudge = int(data.get(NUDGE_KEY, {}).get("token", 0))
        return cls(input_topic, changelog_topic, positions, warm_up, nudge)

    def active(self) -> set[int]:
        """The partitions whose input is read (owned)."""
        return {p for p, pos in self.positions.items() if pos.active}

    def restoring(self) -> set[int]:
        """Active partitions whose state this batch reads from the changelog (gained)."""
        return {
            p for p, pos in self.positions.items() if pos.active and pos.restore_from is not None
        }

    def input_ranges(self, previous: SourceOffsets) -> dict[int, tuple[int, int]]:
        """Per partition whose input this batch reads: [begin, end) (begin == end: nothing new).

        It begins where the previous batch ended, or, for a gained partition, at `input_from`.
        """
        ranges = {}
        for p, pos in self.positions.items():
            if pos.input_offset is None:
                continue
            before = previous.positions.get(p)
            if pos.input_from is not None:
                ranges[p] = (pos.input_from, pos.input_offset)
            elif pos.restore_from is None and before is not None and before.active:
                assert before.input_offset is not None
                ranges[p] = (before.input_offset, pos.input_offset)
        return ranges

    def settled(self) -> SourceOffsets:
        """The same offsets with no changelog or gained-input read."""
        return replace(self, positions={p: pos.settled() for p, pos in self.positions.items()})

    def with_legacy_restores(self, previous: SourceOffsets) -> SourceOffsets:
        """Offsets written before `@restore.from` existed (every partition active): a partition
        new since `previous`, or with a new epoch, was restored from the beginning."""
        return replace(
            self,
            positions={
                p: pos
                if p in previous.positions
                and previous.positions[p].restore_epoch == pos.restore_epoch
                else replace(pos, restore_from=FROM_BEGINNING)
                for p, pos in self.positions.items()
            },
        )


def batch_offsets_path(checkpoint_dir: Path, batch_id: int) -> Path:
    """The offsets log entry of micro-batch `batch_id`."""
    return checkpoint_dir / "offsets" / str(batch_id)


def read_batch_offsets(
    checkpoint_dir: Path, batch_id: int, input_topic: str, changelog_topic: str
) -> SourceOffsets:
    """The source's offsets for `batch_id` from the checkpoint (empty before the first batch).

    The file's first line is the log version, the second the batch metadata, then one line per
    source; this query has one source, so its offsets are the last line.
    """
    path = batch_offsets_path(checkpoint_dir, batch_id)
    if batch_id < 0 or not path.exists():
        return SourceOffsets(input_topic, changelog_topic)
    last_line = path.read_text(encoding="utf-8").strip().splitlines()[-1]
    return SourceOffsets.from_dict(json.loads(last_line), input_topic, changelog_topic)


def newest_batch(log_dir: Path) -> int | None:
    """The highest batch id in one of Spark's checkpoint logs (`offsets/`, `commits/`), if any."""
    if not log_dir.is_dir():
        return None
    return max((int(e.name) for e in log_dir.iterdir() if e.name.isdigit()), default=None)


def last_committed_batch(checkpoint_dir: Path) -> int | None:
    """The id of the newest batch Spark marked done (`<checkpoint>/commits/<id>`), if any."""
    return newest_batch(checkpoint_dir / "commits")


def running_batch(checkpoint_dir: Path) -> int | None:
    """The batch Spark planned and has not marked done (its offsets exist, its commit not)."""
    planned = newest_batch(checkpoint_dir / "offsets")
    if planned is None:
        return None
    done = last_committed_batch(checkpoint_dir)
    return planned if done is None or planned > done else None


def last_committed_offsets(
    checkpoint_dir: Path, input_topic: str, changelog_topic: str
) -> SourceOffsets:
    """The source's offsets of the newest batch Spark marked done (empty before the first)."""
    batch = last_committed_batch(checkpoint_dir)
    if batch is None:
        return SourceOffsets(input_topic, changelog_topic)
    return read_batch_offsets(checkpoint_dir, batch, input_topic, changelog_topic)


def held_partitions(checkpoint_dir: Path, input_topic: str, changelog_topic: str) -> set[int]:
    """Active partitions whose state the checkpoint holds: those of the last committed batch."""
    return last_committed_offsets(checkpoint_dir, input_topic, changelog_topic).active()
