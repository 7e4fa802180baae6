"""The figures DESIGN.md gives for the sink are the sink's own constants, named beside them
(`4 s, sink.OFFSETS_DEADLINE_S`; `sink.TRANSACTION_ATTEMPTS = 3`), so the prose cannot drift: a
planted deadline or retry count that differs from the code is caught."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.processor import sink

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "DESIGN.md"
# `4 s,\n    `sink.NAME`` and `` `sink.NAME` = 3``, across a line break.
SECONDS = re.compile(r"(\d+(?:\.\d+)?) s,\s+`sink\.([A-Z_]+)`")
EQUALS = re.compile(r"`sink\.([A-Z_]+)` = (\d+(?:\.\d+)?)")
NAMED = {"OFFSETS_DEADLINE_S", "TRANSACTION_ATTEMPTS"}


def wrong_figures(text: str) -> list[str]:
    """The sink figures in `text` that differ from the constants they name."""
    figures = [(name, value) for value, name in SECONDS.findall(text)]
    figures += EQUALS.findall(text)
    missing = NAMED - {name for name, _ in figures}
    wrong = [f"{name}: DESIGN.md no longer gives it beside its figure" for name in sorted(missing)]
    return wrong + [
        f"{name}: DESIGN.md says {value}, app/processor/sink.py has {getattr(sink, name)}"
        for name, value in figures
        if float(value) != float(getattr(sink, name))
    ]


def test_every_sink_figure_in_the_design_is_the_constant_it_names() -> None:
    assert wrong_figures(DESIGN.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("name", "figure", "planted"),
    [
        (
            "OFFSETS_DEADLINE_S",
            rf"\b{sink.OFFSETS_DEADLINE_S:g} s,(\s+`sink\.OFFSETS_DEADLINE_S`)",
            rf"{sink.OFFSETS_DEADLINE_S + 1:g} s,\1",
        ),
        (
            "TRANSACTION_ATTEMPTS",
            rf"(`sink\.TRANSACTION_ATTEMPTS`) = {sink.TRANSACTION_ATTEMPTS}",
            rf"\1 = {sink.TRANSACTION_ATTEMPTS - 1}",
        ),
    ],
    ids=["a deadline", "a retry count"],
)
def test_a_planted_figure_that_differs_from_the_code_is_caught(
    name: str, figure: str, planted: str
) -> None:
    drifted, count = re.subn(figure, planted, DESIGN.read_text(encoding="utf-8"))
    assert count == 1, f"DESIGN.md no longer has {figure!r}"
    assert any(f.startswith(f"{name}: DESIGN.md says") for f in wrong_figures(drifted))
