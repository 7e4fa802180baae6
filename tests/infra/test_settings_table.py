"""The settings table (docs/operations.md, "Stack settings in full") names every stack setting
of every preset, and no other, with each preset's value as `PRESETS` holds it."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from infra.presets import PRESETS

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
SECTION = "## Stack settings in full"
# Sections whose values are free-form maps (configs, properties) or small groups of fields that
# the table names as one (a probe's three numbers).
GROUPED = ("configs", "properties", "startupProbe")


def _settings(preset: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in preset.items():
        if isinstance(value, Mapping) and value and key not in GROUPED:
            yield from _settings(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def _rows() -> Iterator[tuple[list[str], dict[str, str]]]:
    """Each row's keys, and its cells by column name."""
    section = OPERATIONS.read_text(encoding="utf-8").split(f"\n{SECTION}\n", 1)[1]
    lines = [line for line in section.split("\n## ", 1)[0].splitlines() if line.startswith("|")]
    header = _cells(lines[0])
    for line in lines[2:]:
        cells = dict(zip(header, _cells(line), strict=True))
        keys = re.findall(r"`([^`]+)`", cells["key"])
        yield [re.sub(r"\.<[^>]*>$", "", key) for key in keys], cells


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]


def _value(key: str, value: Any) -> str:
    """A preset value as the table writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping) and key.endswith("Probe"):
        return ", ".join(str(number) for number in value.values())
    if isinstance(value, Mapping):
        return ", ".join(f"`{k}: {v}`" for k, v in value.items()) or "{}"
    if isinstance(value, list):
        return f"[{', '.join(str(item) for item in value)}]"
    if value == "":
        return '""'
    if isinstance(value, str) and "/" in value:  # an image: its digest shortened
        name, _, digest = value.partition("@sha256:")
        return f"`{name}@sha256:{digest[:12]}...`" if digest else f"`{name}`"
    return str(value)


def _cell(keys: list[str], profile: str) -> str:
    """What a row's cell for `profile` must read."""
    preset = PRESETS[profile]
    values = []
    for key in keys:
        if key == "profile":
            values.append(profile)
            continue
        value: Any = preset
        for part in key.split("."):
            value = value[part]
        values.append(_value(key, value))
    separator = "; " if any(key.endswith("Probe") for key in keys) else ", "
    return separator.join(values)


def test_the_settings_table_names_every_setting_of_every_preset() -> None:
    presets = {key for preset in PRESETS.values() for key in _settings(preset)}
    named = [key for keys, _ in _rows() for key in keys]
    assert sorted(set(named)) == sorted(presets | {"profile"})
    assert len(named) == len(set(named)), "a setting in two rows"


def test_every_value_in_the_settings_table_is_the_presets() -> None:
    wrong = []
    for keys, cells in _rows():
        expected_dev, expected_prod = _cell(keys, "dev"), _cell(keys, "prod")
        if expected_prod == expected_dev and "profile" not in keys:
            expected_prod = "same"
        if (cells["dev"], cells["prod"]) != (expected_dev, expected_prod):
            wrong.append(f"{', '.join(keys)}: | {expected_dev} | {expected_prod} |")
    assert wrong == [], "rows whose dev | prod cells differ from PRESETS; they should read:\n" + (
        "\n".join(wrong)
    )
