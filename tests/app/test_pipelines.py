"""The repository's aggregations keep the promises the machinery relies on: a fold of a range in
one piece or in two gives the same state, the changelog value restores the state whole, the
records of its input sample keep the input contract, and every dead-letter reason is documented.

Every aggregation of `app/pipelines/` is checked, found by its module: a fork's new one is, with
nothing to add here (its records come from the `InputSample` beside it, as the load's do)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import random

import pytest

import app.pipelines
from app.pipelines.distinct_users import DistinctUsers
from app.processor.aggregation import Aggregation, Total, load_aggregation
from app.processor.input_sample import input_sample_for
from contract.processor_keys import DEFAULTS


def _pipelines_aggregations() -> list[Aggregation]:
    """An instance of every concrete `Aggregation` defined in a module of `app/pipelines/`."""
    found = []
    for module_info in pkgutil.iter_modules(app.pipelines.__path__, "app.pipelines."):
        module = importlib.import_module(module_info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            defined_here = cls.__module__ == module.__name__
            if defined_here and issubclass(cls, Aggregation) and not inspect.isabstract(cls):
                found.append(cls())
    return found


AGGREGATIONS = _pipelines_aggregations()
MALFORMED = [(None, b"{}"), (b"", b"{}"), (b"\xff", b"{}"), (b"k", None), (b"k", b"nope")]


def _records(aggregation: Aggregation, n: int) -> list[tuple[bytes, bytes]]:
    """`n` records of one key, as the load generator makes them."""
    rnd = random.Random(3)
    sample = input_sample_for(aggregation)
    key = sample.key_name(0)
    return [
        (key.encode(), sample.generate_value(key, rnd, 1_700_000_000_000 + i)) for i in range(n)
    ]


def test_the_processors_default_aggregation_is_among_those_checked() -> None:
    found = {f"{type(a).__module__}.{type(a).__name__}" for a in AGGREGATIONS}
    assert DEFAULTS["aggregation.class"] in found, found


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
    sample = input_sample_for(aggregation)
    for index in range(20):
        key = sample.key_name(index)
        value = sample.generate_value(key, rnd, 1_700_000_000_000)
        assert not isinstance(aggregation.fold(None, key.encode(), value), str), (key, value)
        malformed = sample.malformed_values(key)
        assert malformed, f"{type(sample).__name__} gives no malformed records"
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


def test_an_aggregation_without_an_input_sample_is_refused_with_what_to_write() -> None:
    class Unsampled(DistinctUsers):
        pass

    # A subclass finds the sample of the class it extends...
    assert type(input_sample_for(Unsampled())).aggregation is DistinctUsers

    class Bare(Total):
        def fold(self, partial: int | None, key: bytes | None, value: bytes | None) -> int:
            return (partial or 0) + 1

    # ...and one with none says where it goes and what it names.
    with pytest.raises(LookupError, match=r"no InputSample for Bare: write one beside it"):
        input_sample_for(Bare())
