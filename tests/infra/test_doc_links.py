"""Every relative link in the Markdown docs leads somewhere: the file exists and, with an
anchor, the file has that heading (GitHub's anchors); so does every reference in prose, in the
docs and in the code's comments (`README, "Fork it"`, `docs/security.md, "Certificates"`). No
doc points at a tracker's issue or a lesson a reader of the repository cannot open, and the
README stays one screenful of pointers (150 lines)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", flags=re.MULTILINE | re.DOTALL)
# `README, "Fork it"`, `README's "Fork it"`, `docs/security.md, "Certificates"`.
PROSE_REFERENCE = re.compile(r"\b(README|[\w/-]+\.md)(?:'s|,) \"([^\"]+)\"")
SOURCES = ["app", "devkit", "infra", "policies", "contract", "offline", "tests"]


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a document's headings (a repeated one gets -1, -2, ...)."""
    seen: Counter[str] = Counter()
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", markdown), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return found


def test_github_anchors_are_made_as_github_makes_them() -> None:
    text = "# A title\n## Active/standby pair\n### `make run`: the local run\n## A title\n"
    assert anchors(text) == {"a-title", "activestandby-pair", "make-run-the-local-run", "a-title-1"}


def broken_links(doc: Path, text: str) -> list[str]:
    """The relative links of `text` (the document `doc`) that lead to no file or heading."""
    broken = []
    for target in LINK.findall(FENCE.sub("", text)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        where = f"{doc.relative_to(REPO)}: ({target})"
        if not linked.exists():
            broken.append(f"{where}: no file {linked.relative_to(REPO)}")
        elif (
            anchor
            and linked.suffix == ".md"
            and anchor not in anchors(text if linked == doc else linked.read_text(encoding="utf-8"))
        ):
            broken.append(f"{where}: no heading with the anchor #{anchor}")
    return broken


def test_every_relative_link_in_the_docs_leads_to_a_file_and_heading() -> None:
    broken = [link for doc in DOCS for link in broken_links(doc, doc.read_text(encoding="utf-8"))]
    assert broken == [], "\n".join(broken)


def test_a_planted_link_to_a_readme_section_that_no_longer_exists_is_caught() -> None:
    design = REPO / "docs" / "DESIGN.md"
    planted = design.read_text(encoding="utf-8") + "\n[Quick start](../README.md#quick-start)\n"
    assert broken_links(design, planted) == [
        "docs/DESIGN.md: (../README.md#quick-start): no heading with the anchor #quick-start"
    ]


def test_no_doc_points_at_an_issue_or_lesson_outside_the_repository() -> None:
    pointer = re.compile(r"\b(?:issue|lesson)s? #?\d+", flags=re.IGNORECASE)
    found = [
        f"{doc.relative_to(REPO)}:{number}: {match.group(0)}"
        for doc in DOCS
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1)
        for match in pointer.finditer(line)
    ]
    assert found == [], "\n".join(found)


def test_the_readme_is_at_most_150_lines() -> None:
    lines = len((REPO / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= 150, f"README.md has {lines} lines; details belong in docs/"


def _titles(markdown: str) -> set[str]:
    """A document's headings and bold paragraph leads (`**Rotated.**`, `3. **Restore**`)."""
    text = FENCE.sub("", markdown)
    found = re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)
    found += re.findall(r"^(?:- |\d+\. )?\*\*([^*]+)\*\*", text, flags=re.MULTILINE)
    return {_normal(title) for title in found}


def _normal(title: str) -> str:
    return title.replace("`", "").strip().rstrip(".:").lower()


def _has_title(document: Path, title: str) -> bool:
    """Whether `title` is one of the document's titles, or the start of one."""
    wanted = _normal(title)
    return any(t == wanted or t.startswith(wanted + " ") for t in _titles(document.read_text()))


def _referenced(name: str) -> Path | None:
    if name == "README":
        return REPO / "README.md"
    for candidate in (REPO / name, REPO / "docs" / name):
        if candidate.is_file():
            return candidate
    return None


def broken_references(path: Path, text: str) -> list[str]:
    """The prose references of `text` (the file `path`) to a document or heading that is gone."""
    broken = []
    for number, line in enumerate(text.splitlines(), start=1):
        for name, title in PROSE_REFERENCE.findall(line):
            where = f'{path.relative_to(REPO)}:{number}: {name}, "{title}"'
            document = _referenced(name)
            if document is None:
                broken.append(f"{where}: no document {name}")
            elif not _has_title(document, title):
                broken.append(f"{where}: {document.relative_to(REPO)} has no such heading")
    return broken


def test_every_reference_in_prose_names_a_heading_its_document_has() -> None:
    files = DOCS + [p for folder in SOURCES for p in sorted((REPO / folder).rglob("*.py"))]
    broken = [ref for path in files for ref in broken_references(path, path.read_text("utf-8"))]
    assert broken == [], "\n".join(broken)


def test_a_planted_prose_reference_to_a_readme_section_that_no_longer_exists_is_caught() -> None:
    # Put together here, so that this file's own text holds no such reference.
    name, title = "README", "Quick start"
    planted = f'The steps are in the {name}, "{title}".\n'
    assert broken_references(REPO / "docs" / "operations.md", planted) == [
        f'docs/operations.md:1: {name}, "{title}": README.md has no such heading'
    ]
