"""The contract's rows (`contract/processor_keys.py`) are what the Pulumi program and the
pack judge a processor setting by: a value a row refuses fails `pulumi up` naming the setting, and
fails the pack naming the key. (`tests/app/test_contract_rows.py` proves the processor's side.)"""

from __future__ import annotations

import pytest

from contract.processor_keys import DEFAULTS, KEYS, Key, KeyType, SetBy
from infra.config import build_stack_config
from infra.processor_properties import processor_properties
from infra.stack_settings import StackConfigError
from tests.policies.handmade_stack import changed, handmade_stack, with_properties

# Every row with a check: a type, a range, allowed values, or a key the processor sets itself.
CHECKED = [key for key in KEYS if key.type is not KeyType.STRING or key.set_by is SetBy.PROCESSOR]


def _id(key: Key) -> str:
    return key.name


def _bad(key: Key) -> str:
    return "x" if key.set_by is SetBy.PROCESSOR else key.invalid_example()


def test_the_rows_cover_types_ranges_choices_and_owned_keys() -> None:
    kinds = {(key.type, key.set_by is SetBy.PROCESSOR) for key in CHECKED}
    assert {(KeyType.INT, False), (KeyType.BOOL, False), (KeyType.ENUM, False)} <= kinds
    assert any(owned for _, owned in kinds)
    for key in CHECKED:
        assert key.problem(_bad(key)) is not None, key.name
        if key.default is not None:
            assert key.problem(key.default) is None, key.name


@pytest.mark.parametrize("key", CHECKED, ids=_id)
def test_a_value_its_row_refuses_fails_the_stack_naming_the_setting(key: Key) -> None:
    with pytest.raises(StackConfigError) as error:
        build_stack_config("dev", {"processor": {"properties": {key.name: _bad(key)}}})
    assert str(error.value).startswith(f"stateful-streaming:processor.properties.{key.name} = ")
    assert str(key.problem(_bad(key))) in str(error.value)


@pytest.mark.parametrize("key", CHECKED, ids=_id)
def test_a_value_its_row_refuses_fails_the_pack_naming_the_key(run, key: Key) -> None:
    stack = changed(handmade_stack(), "processor-config", with_properties({key.name: _bad(key)}))
    mandatory = [v for v in run(stack) if v.level == "mandatory"]
    assert any(key.name in v.message and _bad(key) in v.message for v in mandatory), [
        v.message for v in mandatory
    ]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_program_writes_out_every_default_of_the_contract(stack: str) -> None:
    rendered = processor_properties(build_stack_config(stack, {}), "kafka:9092", {})
    assert set(DEFAULTS) <= set(rendered)
    overridden_by_stack = {k.name for k in KEYS if k.set_by is SetBy.STACK}
    assert {
        name: value
        for name, value in rendered.items()
        if name in DEFAULTS and name not in overridden_by_stack
    } == {name: value for name, value in DEFAULTS.items() if name not in overridden_by_stack}


def test_the_pack_judges_an_absent_key_by_the_contracts_default(run) -> None:
    """Leaving out a key the group rules read means the processor runs with the row's default,
    and the pack judges exactly that (not librdkafka's own default)."""
    judged = (
        "consumer.partition.assignment.strategy",
        "consumer.isolation.level",
        "consumer.heartbeat.interval.ms",
    )
    stack = changed(handmade_stack(), "processor-config", with_properties(dict.fromkeys(judged)))
    assert run(stack) == []
