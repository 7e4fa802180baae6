"""The figures DESIGN.md gives for the sink are the sink's own constants, named beside them
(`4 s, sink.OFFSETS_DEADLINE_S`; `sink.TRANSACTION_ATTEMPTS = 3`), so the prose cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

from app.processor import sink

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "DESIGN.md"
# `4 s,\n    `sink.NAME`` and `` `sink.NAME` = 3``, across a line break.
SECONDS = re.compile(r"(\d+(?:\.\d+)?) s,\s+`sink\.([A-Z_]+)`")
EQUALS = re.compile(r"`sink\.([A-Z_]+)` = (\d+(?:\.\d+)?)")


def test_every_sink_figure_in_the_design_is_the_constant_it_names() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    figures = [(name, value) for value, name in SECONDS.findall(text)]
    figures += EQUALS.findall(text)
    assert {name for name, _ in figures} >= {"OFFSETS_DEADLINE_S", "TRANSACTION_ATTEMPTS"}
    wrong = [
        f"{name}: DESIGN.md says {value}, app/processor/sink.py has {getattr(sink, name)}"
        for name, value in figures
        if float(value) != float(getattr(sink, name))
    ]
    assert wrong == [], "\n".join(wrong)
