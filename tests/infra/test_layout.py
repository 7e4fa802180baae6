"""The repository's layers: the contract and the pack import neither the program nor the
application, the application does not import the program, the image's packages leave the
developer kit alone, `infra/` holds the program and nothing else, and no module imports itself
through others (imports inside functions count: they run too; those under `if TYPE_CHECKING:`
do not)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.source_tree import parse_module

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "contract", "devkit", "infra", "offline", "policies")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in (REPO / package).rglob("*.py")
        if "__pycache__" not in path.parts
    }


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[str]:
    """The repository modules `name` imports, wherever in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = parse_module(path)
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        yield from (target for target in targets if target in MODULES)


GRAPH = {name: set(_imports(name, path)) - {name} for name, path in MODULES.items()}


@pytest.mark.parametrize(
    ("importer", "forbidden"),
    [
        ("contract", ("app", "devkit", "infra", "offline", "policies")),
        ("policies", ("app", "devkit", "infra", "offline")),
        ("infra", ("app", "devkit", "offline")),
        ("app", ("devkit", "infra", "offline")),
        ("app.processor", ("app.admin",)),
        ("app.admin", ("app.processor",)),
        ("app.clients", ("app.processor", "app.admin")),
    ],
)
def test_no_import_runs_against_the_layers(importer: str, forbidden: tuple[str, ...]) -> None:
    wrong = sorted(
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        if name == importer or name.startswith(f"{importer}.")
        for target in targets
        if any(target == f or target.startswith(f"{f}.") for f in forbidden)
    )
    assert not wrong, wrong


def test_every_module_in_infra_is_part_of_the_program() -> None:
    reached, todo = set(), ["infra.__main__"]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(GRAPH[name])
    left_over = sorted(
        name for name in MODULES if name.startswith("infra.") and name not in reached
    )
    assert not left_over, f"not imported by infra/__main__.py: {left_over}"


def test_no_module_imports_itself_through_others() -> None:
    cycles = []
    for start in GRAPH:
        stack: list[tuple[str, tuple[str, ...]]] = [(start, (start,))]
        seen: set[str] = set()
        while stack:
            node, path = stack.pop()
            for nxt in GRAPH[node]:
                if nxt == start:
                    cycles.append(" -> ".join((*path, start)))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, (*path, nxt)))
    assert not cycles, sorted(cycles)[:10]
