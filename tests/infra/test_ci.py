"""CI: every workflow action pinned by full commit SHA (its release in a comment), and the
checks CI runs are the README's: `make test` and `make lint`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
PINNED = re.compile(r"^\s*-?\s*uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$")


def _steps(workflow: Path) -> list[dict[str, Any]]:
    jobs = yaml.safe_load(workflow.read_text())["jobs"]
    return [step for job in jobs.values() for step in job.get("steps", [])]


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=[w.name for w in WORKFLOWS])
def test_every_action_is_pinned_by_commit_sha_with_its_release_in_a_comment(
    workflow: Path,
) -> None:
    uses = [line for line in workflow.read_text().splitlines() if "uses:" in line]
    assert uses, workflow.name
    assert [line for line in uses if not PINNED.match(line)] == []


def test_ci_runs_the_readmes_test_command_and_the_linters() -> None:
    commands = [step.get("run") for step in _steps(REPO / ".github" / "workflows" / "ci.yml")]
    assert "make test" in commands
    assert "make lint" in commands
    assert "make test" in (REPO / "README.md").read_text()


def test_ci_entry_point_is_exactly_the_readmes_test_command() -> None:
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    commands = [line for line in lines if line and not line.startswith(("#", "set ", "cd "))]
    assert commands == ["make test"]
