"""docs/benchmarks.md shows each table's current run, and its introduction cannot contradict them.

Each section that holds a table (a `Command:` line for each) names one broker release and one day
per table; earlier runs go to benchmark-history.md, and a link there is not counted. The index at
the top lists every such section with that release and day, and names the project's release as
`devkit/kafka_release.py` pins it. A planted history line or a contradicting introduction is
caught (the tests at the end plant one of each)."""

from __future__ import annotations

import re

import pytest

from devkit.kafka_release import KAFKA_VERSION
from devkit.local.instances import REPO_ROOT

DOC = REPO_ROOT / "docs" / "benchmarks.md"
HISTORY_LINK = re.compile(r"\[[^\]]*\]\(benchmark-history\.md[^)]*\)")
RELEASE = re.compile(r"\b(?:Apache\s+Kafka|Kafka\s+Streams)\s+(\d+\.\d+\.\d+)")
DAY = re.compile(r"\b20\d\d-\d\d-\d\d\b")
COMMAND = re.compile(r"^Command[^:]*: `make (?:bench|run) ", flags=re.MULTILINE)
INDEX_ROW = re.compile(r"^\| \[(.+)\]\(#[^)]+\) \| Apache Kafka (\S+) \| ([^|]+) \|$", re.MULTILINE)
PROJECT_RELEASE = re.compile(r"The project's release is Apache\s+Kafka\s+(\d+\.\d+\.\d+)")


def _sections(text: str) -> dict[str, str]:
    """The `##` and `###` sections, by heading, links to the history taken out."""
    parts = re.split(r"^#{2,3} (.+)$", text, flags=re.MULTILINE)
    return {
        heading: HISTORY_LINK.sub("", body)
        for heading, body in zip(parts[1::2], parts[2::2], strict=True)
    }


def drift(text: str) -> list[str]:
    """Where the benchmarks doc's introduction and sections disagree, or a section shows history."""
    found = []
    release = PROJECT_RELEASE.search(text)
    if release is None or release.group(1) != KAFKA_VERSION:
        said = release.group(1) if release else "nothing"
        found.append(f"introduction: the project's release is {KAFKA_VERSION}, it says {said}")
    index = {title: (broker, day.strip()) for title, broker, day in INDEX_ROW.findall(text)}
    for heading, body in _sections(text).items():
        tables = len(COMMAND.findall(body))
        if not tables:
            continue
        releases = sorted(set(RELEASE.findall(body)))
        days = sorted(set(DAY.findall(body)))
        if len(releases) != 1:
            found.append(f"{heading!r}: names the releases {releases}; one run names one")
        if not days or len(days) > tables:
            found.append(
                f"{heading!r}: {len(days)} days ({', '.join(days)}) for {tables} table(s): "
                "a table shows one run; move earlier runs to benchmark-history.md"
            )
        listed = index.pop(heading, None)
        shown = (", ".join(releases), ", ".join(days))
        if listed != shown:
            found.append(f"{heading!r}: the index says {listed}, the section shows {shown}")
    found += [f"{title!r}: in the index, but no section with a table" for title in index]
    return found


def test_the_introduction_and_every_section_agree_on_each_tables_run() -> None:
    assert drift(DOC.read_text(encoding="utf-8")) == []


def _plant(text: str, heading: str, line: str) -> str:
    """`line` added as a paragraph at the end of the section under `heading`."""
    start = text.index(f"### {heading}\n")
    end = text.find("\n### ", start + 1)
    return f"{text[:end]}\n{line}\n{text[end:]}"


def test_a_planted_history_line_is_caught() -> None:
    text = _plant(
        DOC.read_text(encoding="utf-8"),
        "Crashes in hand-off mode",
        "The same command on 2026-11-20 left a partition without output for 21.3 s.",
    )
    assert any("'Crashes in hand-off mode': 2 days" in f for f in drift(text)), drift(text)


@pytest.mark.parametrize(
    ("old", "new", "caught"),
    [
        (
            f"The project's release is Apache Kafka {KAFKA_VERSION}.",
            "The project's release is Apache Kafka 4.1.1.",
            "introduction: the project's release",
        ),
        (
            "| [Broker restarts](#broker-restarts) | Apache Kafka 4.1.0 |",
            f"| [Broker restarts](#broker-restarts) | Apache Kafka {KAFKA_VERSION} |",
            "'Broker restarts': the index says",
        ),
    ],
    ids=["the project's release", "a table's broker"],
)
def test_an_introduction_that_contradicts_a_table_is_caught(
    old: str, new: str, caught: str
) -> None:
    text = DOC.read_text(encoding="utf-8")
    assert old in text
    assert any(f.startswith(caught) for f in drift(text.replace(old, new))), caught
