"""The rules table (docs/policies.md) says what the pack does: one row per policy, each row's
level as config.dev.json and config.prod.json set it, and every threshold it names
(`` `name` value ``) with the value that stack's config gives it."""

from __future__ import annotations

import re

import pytest

from policies.evaluate import PolicyInfo, resolved_levels
from policies.rules import all_policies
from tests.policies.conftest import REPO, stack_config, thresholds_of

TABLE_HEADER = "| policy | level | dev | prod |"
# A threshold as the table names it: `minNodes` 3, `maxSegmentBytes` 64 MiB.
NAMED_VALUE = re.compile(r"`(\w+)` (\d+(?:\.\d+)?)(?: (MiB))?")
BARE_VALUE = re.compile(r"(\d+(?:\.\d+)?)(?: (MiB))?")
UNITS = {"": 1, "MiB": 1024 * 1024}
CELL_SEPARATOR = re.compile(r"(?<!\\)\|")
STACKS = ("dev", "prod")
# The pack's policies by name, for parametrizing; the tests judge what the pack serves.
NAMES = [p.name for p in all_policies()]
WITH_THRESHOLDS = [p.name for p in all_policies() if p.config_schema]


def _rows() -> dict[str, dict[str, str]]:
    text = (REPO / "docs" / "policies.md").read_text(encoding="utf-8")
    lines = text.split(f"\n{TABLE_HEADER}\n", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    rows = {}
    for line in lines:
        name, level, dev, prod = (cell.strip() for cell in CELL_SEPARATOR.split(line)[1:-1])
        rows[name.strip("`")] = {"level": level, "dev": dev, "prod": prod}
    return rows


ROWS = _rows()


def _number(digits: str, unit: str | None) -> float:
    return float(digits) * UNITS[unit or ""]


def _served(policies: tuple[PolicyInfo, ...], name: str) -> PolicyInfo:
    return next(p for p in policies if p.name == name)


def test_the_table_has_one_row_per_policy_of_the_pack_and_no_other(
    policies: tuple[PolicyInfo, ...],
) -> None:
    assert set(ROWS) == {p.name for p in policies}


@pytest.mark.parametrize("name", NAMES)
def test_each_rows_level_is_what_the_stack_configs_set(
    policies: tuple[PolicyInfo, ...], name: str
) -> None:
    dev, prod = (resolved_levels(policies, stack_config(stack))[name] for stack in STACKS)
    expected = dev if dev == prod else f"{dev} in dev, {prod} in prod"
    assert ROWS[name]["level"] == expected


@pytest.mark.parametrize("name", WITH_THRESHOLDS)
def test_each_threshold_a_row_names_has_the_value_of_that_stacks_config(
    policies: tuple[PolicyInfo, ...], name: str
) -> None:
    row, policy = ROWS[name], _served(policies, name)
    values = {stack: thresholds_of(policy, stack_config(stack)) for stack in STACKS}
    named = {
        stack: [
            (key, _number(digits, unit)) for key, digits, unit in NAMED_VALUE.findall(row[stack])
        ]
        for stack in STACKS
    }
    for stack in STACKS:
        for key, value in named[stack]:
            assert key in values[stack], f"{name}: {stack} names {key}, not one of its thresholds"
            assert value == values[stack][key], f"{name}: {stack} says {key} {value}"
    prod = row["prod"]
    bare = BARE_VALUE.fullmatch(prod)
    if prod == "same":
        for key, _ in named["dev"]:
            assert values["prod"][key] == values["dev"][key], f"{name}: {key}"
    elif bare and len(named["dev"]) == 1:
        ((key, _),) = named["dev"]
        assert _number(*bare.groups()) == values["prod"][key], f"{name}: prod {key}"
