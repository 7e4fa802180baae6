"""The processor judges its properties file by the contract's rows
(`contract/processor_keys.py`), as the Pulumi program and the pack do
(`tests/policies/test_contract_rows.py`): its defaults are the rows' defaults, and a value a row
refuses stops it at start, naming the key."""

from __future__ import annotations

import pytest

from app.processor.settings import SettingsError, parse_settings
from contract.processor_keys import DEFAULTS, KEYS, Key, KeyType, SetBy

BASE = """\
application.id=page-view-counter
bootstrap.servers=kafka:9092
input.topic=page-views
output.topic=page-view-counts
changelog.topic=page-view-counter-counts-changelog
dlq.topic=page-view-counter-dlq
consumer.group.instance.id=p-0
producer.transactional.id=p-0
"""
CHECKED = [key for key in KEYS if key.type is not KeyType.STRING or key.set_by is SetBy.PROCESSOR]


def test_the_processor_runs_with_the_rows_defaults() -> None:
    settings = parse_settings(BASE, env={})
    assert {k: settings.properties[k] for k in DEFAULTS} == dict(DEFAULTS)


@pytest.mark.parametrize("key", CHECKED, ids=lambda key: key.name)
def test_a_value_its_row_refuses_stops_the_processor_naming_the_key(key: Key) -> None:
    bad = "x" if key.set_by is SetBy.PROCESSOR else key.invalid_example()
    with pytest.raises(SettingsError) as error:
        parse_settings(BASE + f"{key.name}={bad}\n", env={})
    assert any(
        p.startswith(f"{key.name}={bad!r}") and str(key.problem(bad)) in p
        for p in error.value.problems
    ), error.value.problems
