"""The readers' per-range fold: one row per page, every rejected record on its own."""

from __future__ import annotations

import pytest

from app.processor.combine import INPUT, RESTORE, RangeFold, contract_violation


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
    fold = RangeFold(INPUT)
    view = b'{"page": "%s"}'
    for offset, page in enumerate([b"/a", b"/b", b"/a", b"/a", b"/b"]):
        fold.add(page, view % page, offset + 10)
    columns = fold.columns()
    assert columns["key"] == [b"/a", b"/b"]
    assert columns["records"] == [3, 2]
    assert columns["offset"] == [13, 14]
    assert columns["reason"] == [None, None]
    assert columns["value"] == [None, None]  # a count needs no value


def test_rejected_records_pass_one_by_one_with_offset_value_and_reason() -> None:
    fold = RangeFold(INPUT)
    fold.add(b"/a", b'{"page": "/a"}', 0)
    fold.add(b"/a", b"not json", 1)
    fold.add(None, b"{}", 2)
    fold.add(b"/a", b'{"page": "/a"}', 3)
    columns = fold.columns()
    assert list(zip(columns["key"], columns["offset"], columns["records"], strict=True)) == [
        (b"/a", 3, 2),
        (b"/a", 1, 1),
        (None, 2, 1),
    ]
    assert columns["value"][1:] == [b"not json", b"{}"]
    assert columns["reason"] == [None, "invalid-value", "null-key"]
    assert len(fold) == 3


def test_restore_range_keeps_the_newest_value_per_page() -> None:
    fold = RangeFold(RESTORE)
    for offset, (page, count) in enumerate([(b"/a", b"1"), (b"/b", b"4"), (b"/a", b"2")]):
        fold.add(page, count, offset)
    columns = fold.columns()
    assert dict(zip(columns["key"], columns["value"], strict=True)) == {b"/a": b"2", b"/b": b"4"}
    assert columns["records"] == [2, 1]
    assert columns["offset"] == [2, 1]
