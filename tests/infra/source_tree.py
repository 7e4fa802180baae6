"""The repository's files as a clone of the working tree would have them, for tests that start
a project from this one (`pulumi new`, a fork's edits)."""

from __future__ import annotations

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
