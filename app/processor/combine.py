"""Pre-aggregation in the source's readers: each planned range becomes one row per key.

The aggregation's `fold` is associative, so a reader folds the records of its range before
anything crosses into the JVM, the shuffle and the Python stateful processor, which then see one
row per key and range instead of one per record (the per-row cost of those three was most of a
batch):

- input: one row per key, with the key's partial (`Aggregation.encode_partial`), how many
  records it stands for (`records`) and the last offset;
- restore: the newest changelog value per key (the highest offset wins, as a restore must), with
  how many changelog records were read for it;
- a record that breaks the input contract passes unchanged, one row with `records = 1` and its
  reason, so the dead-letter topic receives every one of them with its own offset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from app.processor.aggregation import Aggregation

INPUT = "input"
RESTORE = "restore"


@dataclass
class RangeFold:
    """The combined rows of one planned range, built from its records in offset order."""

    kind: str
    aggregation: Aggregation
    # key -> [records, last offset, partial (input) or newest changelog value (restore)];
    # insertion order keeps the output stable
    keys: dict[Any, list] = field(default_factory=dict)
    rejected: list[tuple[bytes | None, bytes | None, int, str]] = field(default_factory=list)

    def add_messages(self, messages: Iterable[Any], end: int, check: Callable[[Any], None]) -> None:
        """Fold confluent-kafka messages below offset `end`; `check(error)` raises a fatal one
        and returns for one to skip (end of partition)."""
        keys = self.keys
        restore = self.kind == RESTORE
        fold = self.aggregation.fold
        for message in messages:
            error = message.error()
            if error is not None:
                check(error)
                continue
            offset = message.offset()
            if offset >= end:
                break
            key = message.key()
            entry = keys.get(key)
            if restore:
                folded = message.value()  # a restore sets the newest state: keep the value
            else:
                folded = fold(None if entry is None else entry[2], key, message.value())
                if type(folded) is str:  # a dead-letter reason
                    self.rejected.append((key, message.value(), offset, folded))
                    continue
            if entry is None:
                keys[key] = [1, offset, folded]
            else:
                entry[0] += 1
                entry[1] = offset
                entry[2] = folded

    def __len__(self) -> int:
        return len(self.keys) + len(self.rejected)

    @property
    def records(self) -> int:
        """How many records the rows stand for."""
        return sum(entry[0] for entry in self.keys.values()) + len(self.rejected)

    def columns(self) -> dict[str, list]:
        """The rows as columns: key, value, offset, records, reason."""
        keys: list[bytes | None] = list(self.keys)
        entries = self.keys.values()
        if self.kind == RESTORE:
            values: list[bytes | None] = [entry[2] for entry in entries]
        else:
            encode = self.aggregation.encode_partial
            values = [encode(entry[2]) for entry in entries]
        offsets: list[int] = [entry[1] for entry in entries]
        records: list[int] = [entry[0] for entry in entries]
        reasons: list[str | None] = [None] * len(keys)
        for key, value, offset, reason in self.rejected:
            keys.append(key)
            values.append(value)
            offsets.append(offset)
            records.append(1)
            reasons.append(reason)
        return {
            "key": keys,
            "value": values,
            "offset": offsets,
            "records": records,
            "reason": reasons,
        }
