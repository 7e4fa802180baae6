"""A benchmark's result table: printed as Markdown, written as Markdown and CSV."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path

Row = Mapping[str, object]


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def markdown(columns: Sequence[str], rows: Sequence[Row]) -> str:
    """A GitHub-flavoured Markdown table, one line per row."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(" --- " for _ in columns) + "|"]
    for row in rows:
        cells = (_cell(row.get(c)).replace("|", "\\|") for c in columns)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_table(out_dir: Path, name: str, columns: Sequence[str], rows: Sequence[Row]) -> str:
    """Write `<name>.md` and `<name>.csv` into `out_dir`; the Markdown text."""
    out_dir.mkdir(parents=True, exist_ok=True)
    text = markdown(columns, rows)
    (out_dir / f"{name}.md").write_text(text, encoding="utf-8")
    with (out_dir / f"{name}.csv").open("w", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(out, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: _cell(row.get(c)) for c in columns})
    return text
