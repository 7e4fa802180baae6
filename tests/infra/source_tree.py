"""The repository's files as a clone of the working tree would have them, for tests that start
a project from this one (`pulumi new`, a fork's edits), and its Python files parsed."""

from __future__ import annotations

import ast
import gc
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def source_files() -> list[str]:
    """The tracked and the new files (not the ignored ones: no environment, no build), as paths
    relative to the repository."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    return [item.decode() for item in listed if item]


def copy_source_tree(destination: Path) -> Path:
    """Copy the source files as the working tree has them (uncommitted edits included) to
    `destination`; a tracked file deleted in the working tree is left out."""
    for name in source_files():
        source = REPO / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def parse_module(path: Path) -> ast.Module:
    """A Python file's syntax tree, parsed with the garbage collector held off.

    CPython 3.11's AST constructor keeps its recursion depth in state shared by every parse
    (python/cpython#106905): a parse started inside another one corrupts it, and the outer one
    fails with "SystemError: AST constructor recursion depth mismatch". A collection mid-parse
    can start one: the program's tests leave failed asyncio futures behind (a refused stack
    setting under Pulumi's mocks), and finalizing one logs its traceback, whose carets 3.11
    finds by parsing the line.
    """
    source = path.read_text(encoding="utf-8")
    gc.collect()
    gc.disable()
    try:
        return ast.parse(source, filename=str(path))
    finally:
        gc.enable()
