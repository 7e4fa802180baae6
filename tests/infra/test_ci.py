"""CI: every workflow action pinned by full commit SHA (its release in a comment), the
workflows clean under actionlint, the checks CI runs the README's (`make test`, `make lint`), the
kind deployment the README's, and each dependency update aimed at a value that exists."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devkit.kube.go_tools import BIN as GO_TOOLS_BIN
from infra.presets import PRESETS
from tests.infra.source_tree import source_files

REPO = Path(__file__).resolve().parents[2]
ACTIONLINT = GO_TOOLS_BIN / "actionlint"
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


@pytest.mark.skipif(not ACTIONLINT.exists(), reason="no actionlint (`make tools` builds it)")
def test_the_workflows_pass_actionlint() -> None:
    lint = subprocess.run(
        [str(ACTIONLINT), "-no-color", *map(str, WORKFLOWS)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


# Mistakes actionlint must catch in the kind workflow: (what is replaced, by what, what the
# report names). The second, a `run:` script that word-splits a variable, it reports only
# through shellcheck (SC2086).
BREAKAGES = {
    "an unknown context": ("${{ env.IMAGE }}", "${{ envs.IMAGE }}", "envs"),
    "an unquoted variable in a script": (
        'run: kind load docker-image "$IMAGE" --name "$CLUSTER"',
        "run: kind load docker-image $IMAGE",
        "SC2086",
    ),
}


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_actionlint_refuses_a_broken_workflow(tmp_path: Path, breakage: str) -> None:
    if not ACTIONLINT.exists():
        pytest.skip("no actionlint (`make tools` builds it)")
    old, new, named = BREAKAGES[breakage]
    if named.startswith("SC") and shutil.which("shellcheck") is None:
        pytest.skip("no shellcheck (`make lint-packages`, as root)")
    broken = tmp_path / ".github" / "workflows" / "broken.yml"
    broken.parent.mkdir(parents=True)
    text = (REPO / ".github" / "workflows" / "kind-deploy.yml").read_text()
    assert old in text
    broken.write_text(text.replace(old, new, 1))
    lint = subprocess.run(
        [str(ACTIONLINT), "-no-color", str(broken)], capture_output=True, text=True, timeout=120
    )
    assert lint.returncode == 1 and named in lint.stdout, lint.stdout + lint.stderr


def test_the_kind_workflow_deploys_the_dev_presets_image_and_rolls_the_processor() -> None:
    path = REPO / ".github" / "workflows" / "kind-deploy.yml"
    workflow = yaml.safe_load(path.read_text())
    dev = PRESETS["dev"]["processor"]
    assert workflow["env"]["IMAGE"] == dev["image"]
    commands = "\n".join(step.get("run", "") for step in _steps(path))
    # The README's kind route, step for step, and a roll of a processor setting.
    readme = (REPO / "README.md").read_text()
    assert f"kind load docker-image {dev['image']} --name streaming" in readme
    assert "pulumi up --stack dev" in readme and "pulumi up --yes --stack dev" in commands
    assert "pulumi config set --stack dev --path 'processor." in commands
    assert "pulumi destroy --yes --stack dev" in commands


def _java_regex(pattern: str) -> re.Pattern[str]:
    """Renovate's patterns are JavaScript's: `(?<name>...)` is Python's `(?P<name>...)`."""
    return re.compile(pattern.replace("(?<", "(?P<"))


RENOVATE = json.loads((REPO / "renovate.json").read_text())
MANAGERS = RENOVATE["customManagers"]
# What Renovate sees: the repository's files, not a checkout's environments.
SOURCE_FILES = source_files()


def _matches(manager: dict[str, Any]) -> list[re.Match[str]]:
    """Where a custom manager's patterns match in the files it names."""
    files = [
        REPO / path
        for pattern in manager["managerFilePatterns"]
        for path in SOURCE_FILES
        if re.search(pattern.strip("/"), path)
    ]
    return [
        match
        for path in files
        for pattern in manager["matchStrings"]
        for match in _java_regex(pattern).finditer(path.read_text())
    ]


@pytest.mark.parametrize("manager", MANAGERS, ids=[m["description"] for m in MANAGERS])
def test_each_renovate_manager_matches_exactly_the_value_it_updates(
    manager: dict[str, Any],
) -> None:
    (match,) = _matches(manager)
    assert match.group("currentValue")


def test_renovate_moves_the_kafka_image_and_its_release_together() -> None:
    (kafka,) = [r for r in RENOVATE["packageRules"] if r.get("groupName") == "Apache Kafka"]
    dep_names = {
        manager.get("depNameTemplate") or match.group("depName")
        for manager in MANAGERS
        for match in _matches(manager)
    }
    assert set(kafka["matchDepNames"]) == dep_names
