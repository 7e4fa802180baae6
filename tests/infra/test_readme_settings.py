"""The README's settings table names every stack setting the program reads, and no other."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from infra.config import PRESETS

README = Path(__file__).resolve().parents[2] / "README.md"
# Sections whose values are free-form maps (configs, properties) or small groups of fields that
# the table names as one (a probe's three numbers).
GROUPED = ("configs", "properties", "startupProbe")


def _settings(preset: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in preset.items():
        if isinstance(value, Mapping) and value and key not in GROUPED:
            yield from _settings(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def _table_keys() -> set[str]:
    section = README.read_text(encoding="utf-8").split("## Settings", 1)[1].split("\n## ", 1)[0]
    keys: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            keys |= {k.removesuffix(".<role>") for k in re.findall(r"`([^`]+)`", first_cell)}
    return keys


def test_the_readme_settings_table_names_every_setting_of_every_preset() -> None:
    presets = {key for preset in PRESETS.values() for key in _settings(preset)}
    assert _table_keys() == presets | {"profile"}


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


def _rows() -> Iterator[tuple[list[str], str, str]]:
    section = README.read_text(encoding="utf-8").split("## Settings", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.split("|")[1:-1]]
            keys = [k.removesuffix(".<role>") for k in re.findall(r"`([^`]+)`", cells[0])]
            yield keys, cells[1], cells[2]


def test_every_value_in_the_readme_settings_table_is_the_presets() -> None:
    wrong = []
    for keys, dev, prod in _rows():
        expected_dev, expected_prod = _cell(keys, "dev"), _cell(keys, "prod")
        if expected_prod == expected_dev and "profile" not in keys:
            expected_prod = "same"
        if (dev, prod) != (expected_dev, expected_prod):
            wrong.append(f"{', '.join(keys)}: | {expected_dev} | {expected_prod} |")
    assert wrong == [], "rows whose dev | prod cells differ from PRESETS; they should read:\n" + (
        "\n".join(wrong)
    )
