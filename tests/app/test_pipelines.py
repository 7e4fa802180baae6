"""The repository's aggregations keep the promises the machinery relies on: a fold of a range in
one piece or in two gives the same state, the changelog value restores the state whole, the
generated records keep the input contract, and every dead-letter reason is documented."""

from __future__ import annotations

import json
import random

import pytest

from app.pipelines.distinct_users import DistinctUsers
from app.pipelines.page_view_count import PageViewCount
from app.pipelines.product_revenue import ProductRevenue
from app.processor.aggregation import Aggregation, load_aggregation

AGGREGATIONS = [PageViewCount(), ProductRevenue(), DistinctUsers()]
MALFORMED = [(None, b"{}"), (b"", b"{}"), (b"\xff", b"{}"), (b"k", None), (b"k", b"nope")]


def _records(aggregation: Aggregation, n: int) -> list[tuple[bytes, bytes]]:
    rnd = random.Random(3)
    key = aggregation.key_name(0).encode()
    values = {
        PageViewCount: lambda i: {"page": key.decode(), "n": i},
        ProductRevenue: lambda i: {"amount_cents": rnd.randrange(-100, 1000)},
        DistinctUsers: lambda i: {"user": f"u{rnd.randrange(7)}"},
    }[type(aggregation)]
    return [(key, json.dumps(values(i)).encode()) for i in range(n)]


def _fold(aggregation: Aggregation, records: list[tuple[bytes, bytes]]) -> object:
    partial = None
    for key, value in records:
        partial = aggregation.fold(partial, key, value)
        assert not isinstance(partial, str), partial
    return aggregation.decode_partial(aggregation.encode_partial(partial))


@pytest.mark.parametrize("aggregation", AGGREGATIONS, ids=lambda a: type(a).__name__)
def test_folding_a_range_whole_or_in_two_gives_the_same_state(aggregation: Aggregation) -> None:
    records = _records(aggregation, 50)
    whole = aggregation.update(None, _fold(aggregation, records))
    split = aggregation.update(
        aggregation.update(None, _fold(aggregation, records[:17])), _fold(aggregation, records[17:])
    )
    assert aggregation.output_value(whole) == aggregation.output_value(split)
    assert aggregation.changelog_value(whole) == aggregation.changelog_value(split)


@pytest.mark.parametrize("aggregation", AGGREGATIONS, ids=lambda a: type(a).__name__)
def test_the_changelog_value_restores_the_state_whole(aggregation: Aggregation) -> None:
    state = aggregation.update(None, _fold(aggregation, _records(aggregation, 20)))
    restored = aggregation.restore(aggregation.changelog_value(state))
    assert aggregation.changelog_value(restored) == aggregation.changelog_value(state)
    assert aggregation.output_value(restored) == aggregation.output_value(state)


@pytest.mark.parametrize("aggregation", AGGREGATIONS, ids=lambda a: type(a).__name__)
def test_the_generated_records_keep_the_input_contract_and_the_malformed_ones_break_it(
    aggregation: Aggregation,
) -> None:
    rnd = random.Random(1)
    for index in range(20):
        key = aggregation.key_name(index)
        value = aggregation.generate_value(key, rnd, 1_700_000_000_000)
        assert not isinstance(aggregation.fold(None, key.encode(), value), str), (key, value)
        malformed = aggregation.malformed_values(key)
        assert malformed, f"{type(aggregation).__name__} gives no malformed records"
        for reason, bad in malformed.items():
            assert aggregation.fold(None, key.encode(), bad) == reason, (key, bad)
            assert reason in aggregation.reasons


@pytest.mark.parametrize("aggregation", AGGREGATIONS, ids=lambda a: type(a).__name__)
def test_every_dead_letter_reason_is_documented(aggregation: Aggregation) -> None:
    for key, value in MALFORMED:
        reason = aggregation.fold(None, key, value)
        assert isinstance(reason, str) and reason in aggregation.reasons, (key, value, reason)


def test_the_published_value_can_differ_from_the_restored_state() -> None:
    users = DistinctUsers()
    state = users.update(None, {"u1", "u2"})
    assert users.output_value(state) == b"2"
    assert users.restore(users.changelog_value(state)) == {"u1", "u2"}


def test_aggregation_class_names_a_subclass_or_fails_naming_it() -> None:
    assert isinstance(load_aggregation("app.pipelines.product_revenue.ProductRevenue"), Aggregation)
    for wrong in ("app.pipelines.nope.Nope", "json.JSONDecoder", "nodots"):
        with pytest.raises(ValueError, match=f"aggregation.class='{wrong}'"):
            load_aggregation(wrong)
