"""Pre-aggregation in the source's readers: each planned range becomes one row per page.

A count is associative, so a reader folds the records of its range before anything crosses into
the JVM, the shuffle and the Python stateful processor, which then see one row per page and range
instead of one per record (the per-row cost of those three was most of a batch):

- input: one row per page, with how many records it stands for (`records`) and the last offset;
- restore: the newest changelog value per page (the highest offset wins, as a restore must), with
  how many changelog records were read for it;
- a record that breaks the input contract passes unchanged, one row with `records = 1` and its
  reason, so the dead-letter topic receives every one of them with its own offset.

THIS module is, with `counting.py`, the part a fork replaces: it holds the input contract (the
dead-letter reasons, documented in `counting.py`) and how one range of records is combined.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

INPUT = "input"
RESTORE = "restore"

# Per record, this is the hot loop of the whole processor (hundreds of thousands a second): the
# contract is checked inline with orjson, which parses strictly (UTF-8, no NaN), as Spark's
# parse_json does.
_CONTAINERS = (dict, list)


def contract_violation(key: bytes | None, value: bytes | None) -> str | None:
    """Why a page view breaks the input contract (`counting.py`), or None when it is fine."""
    if key is None:
        return "null-key"
    try:
        page = key.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid-key"
    if not page:
        return "invalid-key"
    if value is None:
        return "null-value"
    try:
        view = orjson.loads(value)
    except orjson.JSONDecodeError:
        return "invalid-value"
    if type(view) is not dict:
        return "invalid-value"
    named = view.get("page")
    if named is None or isinstance(named, _CONTAINERS):
        return None  # no page field to compare (an object or array is not a page name)
    if (named if isinstance(named, str) else orjson.dumps(named).decode()) != page:
        return "page-mismatch"
    return None


@dataclass
class RangeFold:
    """The combined rows of one planned range, built from its records in offset order."""

    kind: str
    # page -> [records, last offset, value]; insertion order keeps the output stable
    pages: dict[Any, list] = field(default_factory=dict)
    rejected: list[tuple[bytes | None, bytes | None, int, str]] = field(default_factory=list)

    def add_messages(self, messages: Iterable[Any], end: int, check: Callable[[Any], None]) -> None:
        """Fold confluent-kafka messages below offset `end`; `check(error)` raises a fatal one
        and returns for one to skip (end of partition)."""
        pages = self.pages
        restore = self.kind == RESTORE
        for message in messages:
            error = message.error()
            if error is not None:
                check(error)
                continue
            offset = message.offset()
            if offset >= end:
                break
            key = message.key()
            if restore:
                value = message.value()  # a restore sets the newest count: keep the value
            else:
                value = None
                reason = contract_violation(key, message.value())
                if reason is not None:
                    self.rejected.append((key, message.value(), offset, reason))
                    continue
            entry = pages.get(key)
            if entry is None:
                pages[key] = [1, offset, value]
            else:
                entry[0] += 1
                entry[1] = offset
                entry[2] = value

    def __len__(self) -> int:
        return len(self.pages) + len(self.rejected)

    def columns(self) -> dict[str, list]:
        """The rows as columns: key, value, offset, records, reason."""
        keys: list[bytes | None] = list(self.pages)
        values: list[bytes | None] = [entry[2] for entry in self.pages.values()]
        offsets: list[int] = [entry[1] for entry in self.pages.values()]
        records: list[int] = [entry[0] for entry in self.pages.values()]
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
