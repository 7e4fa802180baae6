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
