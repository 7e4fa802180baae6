"""`make bench` reproduces the tables of docs/benchmarks.md: every table names its command there,
that command is the one `devkit.bench.tables` runs, and every command parses."""

from __future__ import annotations

import re

import pytest

from devkit.bench.__main__ import parse_args
from devkit.bench.tables import TABLES, DocTable
from devkit.local.instances import REPO_ROOT

DOCS = (REPO_ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
COMMAND = re.compile(r'^Command[^:]*: `make bench ARGS="--only ([a-z0-9,-]+)"`(.*)$', re.MULTILINE)


def _sections() -> dict[str, str]:
    """The `###` sections of the docs, by heading."""
    parts = re.split(r"^### (.+)$", DOCS, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_each_tables_command_is_quoted_in_full_under_its_heading(table: DocTable) -> None:
    section = _sections()[table.heading]
    quoted = {m.group(1): m.group(2) for m in COMMAND.finditer(section)}
    assert table.name in quoted, f"no Command line for {table.name} under {table.heading!r}"
    assert f"`{table.command}`" in quoted[table.name]


def test_every_table_section_names_the_command_behind_it() -> None:
    tables = DOCS.split("## The benchmark tables", 1)[1]
    headings = re.findall(r"^### (.+)$", tables, flags=re.MULTILINE)
    assert headings
    sections = _sections()
    for heading in [*headings, "Restarts with the state kept"]:
        named = [n for m in COMMAND.finditer(sections[heading]) for n in m.group(1).split(",")]
        assert named, f"{heading!r}: no `Command: make bench ...` line"
        assert set(named) <= {t.name for t in TABLES}, (heading, named)


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_each_tables_command_parses(table: DocTable) -> None:
    args = parse_args([*table.argv, "--out", "build/bench"])
    assert args.bench == table.argv[0]


def test_make_bench_runs_every_table_by_default() -> None:
    assert parse_args(["tables"]).only == [t.name for t in TABLES]
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    assert "-m devkit.bench tables $(ARGS)" in makefile
