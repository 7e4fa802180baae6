"""The long tests first (a pytest plugin, `-p tests.long_first`).

`make test` runs the infra and policy tiers on two pytest-xdist workers, which take a file at a
time in collection order (`--dist loadfile --no-loadscope-reorder`): a file of minutes taken
last would leave the other worker idle for its whole length. So the files that hold a test marked
`long` are collected first; the files keep their order otherwise, and so do their tests.
"""

from __future__ import annotations

import pytest

MARKER = "long"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: minutes of its own; its file is collected before the others"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the files that hold a long test to the front (a stable sort)."""
    long_files = {item.path for item in items if item.get_closest_marker(MARKER)}
    items.sort(key=lambda item: item.path not in long_files)
