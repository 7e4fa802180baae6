"""The Kafka source's offsets, as Spark stores them in the checkpoint's offsets log.

One JSON object per micro-batch (Spark writes it to `<checkpoint>/offsets/<batchId>` before the
batch runs; its last line is the source's offsets):

    {"page-views": {"0": 120, "1": 40},
     "page-view-counter-counts-changelog": {"0": 55, "1": 0},
     "@restore.epoch": {"0": 1767225600000, "1": 1767225600000}}

- `<input topic>`: per owned partition, the input offset the batch reads up to (exclusive).
- `<changelog topic>`: per owned partition, the changelog offset the state was restored up to.
- `@restore.epoch` (`@` cannot occur in a topic name): per owned partition, when its state was
  last restored (epoch milliseconds). A partition whose epoch differs from the previous batch's
  (or that the previous batch did not have) is restored in this batch: its changelog is read
  from the beginning up to the changelog offset above, and no input is read for it yet. State
  rows carry the epoch they were written under, so a key left over from an earlier ownership of
  the partition (and missing from the changelog) is known to be stale.

- `@warm-up` (optional): `{"token": N}`, the token of the last warm-up batch (an empty batch a
  restarted instance runs before it joins the group, so that its first real batch finds Python
  workers, plans and state stores ready). It only has to differ from the previous batch's for
  Spark to run a batch; it never changes which records are read.

Only owned partitions appear: the offsets of the last committed batch are therefore also the
record of which partitions' state the checkpoint holds. Keys are strings (JSON) in numeric order
so that the same offsets always serialise the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

EPOCH_KEY = "@restore.epoch"
WARM_UP_KEY = "@warm-up"


@dataclass(frozen=True)
class PartitionPosition:
    """Where one owned input partition stands after a batch."""

    input_offset: int
    changelog_offset: int
    restore_epoch: int


@dataclass(frozen=True)
class SourceOffsets:
    """The positions of every owned partition (the source's offset for one micro-batch)."""

    input_topic: str
    changelog_topic: str
    positions: Mapping[int, PartitionPosition] = field(default_factory=dict)
    warm_up: int = 0

    def to_dict(self) -> dict[str, dict[str, int]]:
        """The JSON-ready form Spark stores (stable key order)."""
        ordered = sorted(self.positions.items())
        data = {
            self.input_topic: {str(p): pos.input_offset for p, pos in ordered},
            self.changelog_topic: {str(p): pos.changelog_offset for p, pos in ordered},
            EPOCH_KEY: {str(p): pos.restore_epoch for p, pos in ordered},
        }
        if self.warm_up:
            data[WARM_UP_KEY] = {"token": self.warm_up}
        return data

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Mapping[str, int]], input_topic: str, changelog_topic: str
    ) -> SourceOffsets:
        """Parse Spark's form; an empty dict (the initial offset) means no partition is held.

        Positions of other topics (a renamed input topic) are ignored: their partitions are then
        restored and read from the group's committed offsets, as for a new checkpoint.
        """
        inputs = data.get(input_topic, {})
        changelog = data.get(changelog_topic, {})
        epochs = data.get(EPOCH_KEY, {})
        positions = {
            int(p): PartitionPosition(
                input_offset=int(offset),
                changelog_offset=int(changelog.get(p, 0)),
                restore_epoch=int(epochs.get(p, 0)),
            )
            for p, offset in inputs.items()
        }
        warm_up = int(data.get(WARM_UP_KEY, {}).get("token", 0))
        return cls(input_topic, changelog_topic, positions, warm_up)

    def restoring(self, previous: SourceOffsets) -> set[int]:
        """Partitions this batch restores: new since `previous`, or with a new restore epoch."""
        return {
            p
            for p, pos in self.positions.items()
            if p not in previous.positions
            or previous.positions[p].restore_epoch != pos.restore_epoch
        }


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


def last_committed_batch(checkpoint_dir: Path) -> int | None:
    """The id of the newest batch Spark marked done (`<checkpoint>/commits/<id>`), if any."""
    commits = checkpoint_dir / "commits"
    if not commits.is_dir():
        return None
    ids = [int(entry.name) for entry in commits.iterdir() if entry.name.isdigit()]
    return max(ids, default=None)


def last_committed_offsets(
    checkpoint_dir: Path, input_topic: str, changelog_topic: str
) -> SourceOffsets:
    """The source's offsets of the newest batch Spark marked done (empty before the first)."""
    batch = last_committed_batch(checkpoint_dir)
    if batch is None:
        return SourceOffsets(input_topic, changelog_topic)
    return read_batch_offsets(checkpoint_dir, batch, input_topic, changelog_topic)


def held_partitions(checkpoint_dir: Path, input_topic: str, changelog_topic: str) -> set[int]:
    """Partitions whose state the checkpoint holds: those of the last committed batch."""
    return set(last_committed_offsets(checkpoint_dir, input_topic, changelog_topic).positions)
