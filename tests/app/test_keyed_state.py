"""The stateful operator's fold of one bucket (`keyed_state.fold_bucket`): what a batch's rows do
to the stored keys, with the restore and stale-state rules of DESIGN.md, "Restore"."""

from __future__ import annotations

import pytest
from pyspark.sql import Row

from app.processor.aggregation import Aggregation
from app.processor.combine import INPUT, RESTORE
from app.processor.keyed_state import RESTORED, RESULT, Bucket, fold_bucket

EPOCH = 7


class Appended(Aggregation[bytes, bytes]):
    """Order matters: the state is every partial appended, so a wrong order shows."""

    def fold(self, partial: bytes | None, key: bytes | None, value: bytes | None) -> bytes | str:
        return (partial or b"") + (value or b"")

    def encode_partial(self, partial: bytes) -> bytes:
        return partial

    def decode_partial(self, data: bytes) -> bytes:
        return data

    def update(self, state: bytes | None, partial: bytes) -> bytes:
        return (state or b"") + partial

    def changelog_value(self, state: bytes) -> bytes:
        return b"c:" + state

    def restore(self, value: bytes) -> bytes:
        return value.removeprefix(b"c:")

    def output_value(self, state: bytes) -> bytes:
        return b"o:" + state


def row(kind: str, key: bytes, value: bytes, offset: int, epoch: int = EPOCH, **extra: int) -> Row:
    return Row(
        key=key,
        value=value,
        partition=3,
        offset=offset,
        records=extra.get("records", 1),
        kind=kind,
        restore_epoch=epoch,
        reason=None,
        read_us=extra.get("read_us", 0),
    )


def results(output: list[Row]) -> dict[bytes, tuple[bytes, bytes, int, int]]:
    return {r.key: (r.value, r.changelog, r.offset, r.records) for r in output if r.kind == RESULT}


def test_input_updates_the_stored_keys_in_offset_order_and_keeps_the_others() -> None:
    stored = Bucket(EPOCH, {b"a": b"c:1", b"b": b"c:9"})
    rows = [row(INPUT, b"a", b"3", 30, records=4), row(INPUT, b"a", b"2", 20, records=5)]

    bucket, output = fold_bucket(Appended(), stored, rows)

    assert results(output) == {b"a": (b"o:123", b"c:123", 30, 9)}
    assert bucket.entries == {b"a": b"c:123", b"b": b"c:9"}
    assert bucket.epoch == EPOCH


def test_the_newest_restore_of_a_key_sets_it_before_the_input_and_is_counted_once() -> None:
    rows = [
        row(INPUT, b"a", b"5", 100),
        row(RESTORE, b"a", b"c:new", 12, records=3, read_us=400),
        row(RESTORE, b"a", b"c:old", 4, records=2, read_us=100),
        row(RESTORE, b"b", b"c:b", 8, records=1),
    ]

    bucket, output = fold_bucket(Appended(), Bucket(EPOCH, {b"a": b"c:stored"}), rows)

    assert results(output) == {b"a": (b"o:new5", b"c:new5", 100, 1)}
    assert bucket.entries == {b"a": b"c:new5", b"b": b"c:b"}
    (restored,) = [r for r in output if r.kind == RESTORED]
    assert (restored.records, restored.read_us, restored.partition) == (6, 500, 3)


def test_a_bucket_stored_under_another_restore_epoch_is_stale_and_starts_empty() -> None:
    stored = Bucket(EPOCH - 1, {b"a": b"c:stale", b"gone": b"c:stale"})
    rows = [row(RESTORE, b"b", b"c:b", 1), row(INPUT, b"a", b"1", 50)]

    bucket, output = fold_bucket(Appended(), stored, rows)

    assert results(output) == {b"a": (b"o:1", b"c:1", 50, 1)}
    assert bucket == Bucket(EPOCH, {b"b": b"c:b", b"a": b"c:1"})


def test_a_bucket_without_state_starts_empty() -> None:
    bucket, output = fold_bucket(Appended(), None, [row(INPUT, b"a", b"1", 0)])

    assert results(output) == {b"a": (b"o:1", b"c:1", 0, 1)}
    assert bucket == Bucket(EPOCH, {b"a": b"c:1"})


def test_rows_of_two_restore_epochs_in_one_bucket_are_refused() -> None:
    rows = [row(INPUT, b"a", b"1", 0), row(INPUT, b"b", b"1", 1, epoch=EPOCH + 1)]

    with pytest.raises(ValueError, match=r"restore epochs \[7, 8\]"):
        fold_bucket(Appended(), None, rows)


def test_a_bucket_reads_back_what_it_stored() -> None:
    bucket = Bucket(EPOCH, {b"a": b"1", None: b"2", b"\x00\xff": b""})

    assert Bucket.load(bucket.stored()) == bucket
    assert Bucket.load(None) is None
