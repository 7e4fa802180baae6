"""The readers' per-range fold: one row per key with its partial, every rejected record on its
own; and the page-view count's input contract."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from app.pipelines.page_view_count import PageViewCount, contract_violation
from app.processor.combine import INPUT, RESTORE, RangeFold


@dataclass(frozen=True)
class Record:
    """A record as `consume()` hands it over (the methods `RangeFold` reads of a Message)."""

    key_: bytes | None
    value_: bytes | None
    offset_: int

    def error(self) -> None:
        return None

    def key(self) -> bytes | None:
        return self.key_

    def value(self) -> bytes | None:
        return self.value_

    def offset(self) -> int:
        return self.offset_


def fold(kind: str, records: list[tuple[bytes | None, bytes | None, int]]) -> RangeFold:
    """`records` folded as one range that ends after the last of them."""
    folded = RangeFold(kind, PageViewCount())
    end = max(offset for _, _, offset in records) + 1
    folded.add_messages([Record(*r) for r in records], end, check=pytest.fail)
    return folded


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, b'{"page": "/page/1"}', "null-key"),
        (b"\xff\xfe", b'{"page": "x"}', "invalid-key"),
        (b"", b'{"page": ""}', "invalid-key"),
        (b"/page/1", None, "null-value"),
        (b"/page/1", b"not json", "invalid-value"),
        (b"/page/1", b"\xff{}", "invalid-value"),
        (b"/page/1", b"[1, 2]", "invalid-value"),
        (b"/page/1", b'{"page": "/page/2"}', "page-mismatch"),
        (b"7", b'{"page": 8}', "page-mismatch"),
        (b"/page/1", b'{"page": "/page/1", "user": "u1"}', None),
        (b"/page/1", b'{"user": "u1"}', None),
        (b"7", b'{"page": 7}', None),
    ],
)
def test_contract_violation_names_the_reason(
    key: bytes | None, value: bytes | None, reason: str | None
) -> None:
    assert contract_violation(key, value) == reason


def test_input_range_folds_to_one_row_per_page_with_its_count_and_last_offset() -> None:
    view = b'{"page": "%s"}'
    pages = [b"/a", b"/b", b"/a", b"/a", b"/b"]
    columns = fold(INPUT, [(p, view % p, n + 10) for n, p in enumerate(pages)]).columns()
    assert columns["key"] == [b"/a", b"/b"]
    assert columns["records"] == [3, 2]
    assert columns["offset"] == [13, 14]
    assert columns["reason"] == [None, None]
    assert columns["value"] == [b"3", b"2"]  # the partials: how many views


def test_rejected_records_pass_one_by_one_with_offset_value_and_reason() -> None:
    folded = fold(
        INPUT,
        [(b"/a", b'{"page": "/a"}', 0), (b"/a", b"not json", 1), (None, b"{}", 2),
         (b"/a", b'{"page": "/a"}', 3)],
    )  # fmt: skip
    columns = folded.columns()
    assert list(zip(columns["key"], columns["offset"], columns["records"], strict=True)) == [
        (b"/a", 3, 2),
        (b"/a", 1, 1),
        (None, 2, 1),
    ]
    assert columns["value"][1:] == [b"not json", b"{}"]
    assert columns["reason"] == [None, "invalid-value", "null-key"]
    assert len(folded) == 3


def test_restore_range_keeps_the_newest_value_per_page() -> None:
    columns = fold(RESTORE, [(b"/a", b"1", 0), (b"/b", b"4", 1), (b"/a", b"2", 2)]).columns()
    assert dict(zip(columns["key"], columns["value"], strict=True)) == {b"/a": b"2", b"/b": b"4"}
    assert columns["records"] == [2, 1]
    assert columns["offset"] == [2, 1]


def test_records_at_or_past_the_range_end_are_not_folded() -> None:
    folded = RangeFold(INPUT, PageViewCount())
    view = b'{"page": "/a"}'
    folded.add_messages([Record(b"/a", view, 5), Record(b"/a", view, 6)], 6, check=pytest.fail)
    assert folded.columns()["records"] == [1]
