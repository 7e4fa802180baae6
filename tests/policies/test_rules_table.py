"""The rules table (docs/policies.md) says what the pack does: one row per policy, each row's
level as config.dev.json and config.prod.json set it, and every threshold it names
(`` `name` value ``) with the value that stack's config gives it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from policies.rules import all_policies

ROOT = Path(__file__).resolve().parents[2]
TABLE_HEADER = "| policy | level | dev | prod |"
# A threshold as the table names it: `minNodes` 3, `maxSegmentBytes` 64 MiB.
NAMED_VALUE = re.compile(r"`(\w+)` (\d+(?:\.\d+)?)(?: (MiB))?")
BARE_VALUE = re.compile(r"(\d+(?:\.\d+)?)(?: (MiB))?")
UNITS = {"": 1, "MiB": 1024 * 1024}
CELL_SEPARATOR = re.compile(r"(?<!\\)\|")


def _rows() -> dict[str, dict[str, str]]:
    text = (ROOT / "docs" / "policies.md").read_text(encoding="utf-8")
    lines = text.split(f"\n{TABLE_HEADER}\n", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    rows = {}
    for line in lines:
        name, level, dev, prod = (cell.strip() for cell in CELL_SEPARATOR.split(line)[1:-1])
        rows[name.strip("`")] = {"level": level, "dev": dev, "prod": prod}
    return rows


ROWS = _rows()
POLICIES = {p.name: p for p in all_policies()}
CONFIGS = {
    stack: json.loads((ROOT / "policies" / f"config.{stack}.json").read_text(encoding="utf-8"))
    for stack in ("dev", "prod")
}


def _value(stack: str, policy: str, key: str) -> Any:
    """What `stack`'s policy config gives `key`: its own value, else the schema's default."""
    config = CONFIGS[stack].get(policy, {})
    if key in config:
        return config[key]
    schema = POLICIES[policy].config_schema
    return schema.properties[key]["default"] if schema else None


def _thresholds(policy: str) -> set[str]:
    schema = POLICIES[policy].config_schema
    return set(schema.properties) if schema else set()


def _number(digits: str, unit: str | None) -> float:
    return float(digits) * UNITS[unit or ""]


def test_the_table_has_one_row_per_policy_of_the_pack_and_no_other() -> None:
    assert set(ROWS) == set(POLICIES)


@pytest.mark.parametrize("policy", list(POLICIES))
def test_each_rows_level_is_what_the_stack_configs_set(policy: str) -> None:
    dev, prod = (CONFIGS[stack][policy]["enforcementLevel"] for stack in ("dev", "prod"))
    expected = dev if dev == prod else f"{dev} in dev, {prod} in prod"
    assert ROWS[policy]["level"] == expected


@pytest.mark.parametrize("policy", [p for p in POLICIES if _thresholds(p)])
def test_each_threshold_a_row_names_has_the_value_of_that_stacks_config(policy: str) -> None:
    row, thresholds = ROWS[policy], _thresholds(policy)
    named = {
        stack: [
            (key, _number(digits, unit))
            for key, digits, unit in NAMED_VALUE.findall(row[stack])
            if key in thresholds
        ]
        for stack in ("dev", "prod")
    }
    for stack in ("dev", "prod"):
        for key, value in named[stack]:
            assert value == _value(stack, policy, key), f"{policy}: {stack} says {key} {value}"
    prod = row["prod"]
    bare = BARE_VALUE.fullmatch(prod)
    if prod == "same":
        for key, _ in named["dev"]:
            assert _value("prod", policy, key) == _value("dev", policy, key), f"{policy}: {key}"
    elif bare and len(named["dev"]) == 1:
        ((key, _),) = named["dev"]
        assert _number(*bare.groups()) == _value("prod", policy, key), f"{policy}: prod {key}"
