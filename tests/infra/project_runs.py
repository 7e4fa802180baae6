"""The project's own test suites, run in a project made from this one (a fork, a project
`pulumi new` generated) to show they pass there.

The project is made a git repository with the checkout's environments linked in, as a clone is
after `make setup`, so every test of the suites runs there. Its infra and policy tests (on two
pytest-xdist workers, as `make test` runs them) and the fast application unit tests run as
subprocesses side by side, to keep the outer test short (`make test` in full starts Apache
Kafka and Spark).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENVS = REPO / ".venv"
INFRA_PYTHON = VENVS / "infra" / "bin" / "python"
APP_PYTHON = VENVS / "app" / "bin" / "python"

# The application's tests that need neither a broker nor a Spark session and read the names,
# the contract, the aggregations or the rendered stacks (the rest start Apache Kafka or Spark).
APP_TESTS = (
    "tests/app/test_acl_reconciler.py",
    "tests/app/test_combine.py",
    "tests/app/test_contract_rows.py",
    "tests/app/test_dashboard.py",
    "tests/app/test_pipelines.py",
    "tests/app/test_processor_planning.py",
    "tests/app/test_rendered_stacks_start_check.py",
    "tests/app/test_settings.py",
)
# The names of the runs (their logs, their keys in the runs): the infra and policy tests, and the
# application's.
INFRA_AND_POLICIES = "infra-and-policies"
APP = "app"
# How `make test` spreads a tier over two workers (its XDIST): a file at a time, the files of the
# long tests first (tests/long_first.py).
XDIST = ("-n", "2", "--dist", "loadfile", "--no-loadscope-reorder")
# A hung run fails the test long before CI's own limit.
RUN_TIMEOUT_S = 600.0
# Set in every run's environment: a test inside a project run starts no suites of its own (the
# suites of a project inside a fork would run the same tests as the outer ones, at twice the cost).
INSIDE_A_PROJECT_RUN = "STATEFUL_STREAMING_INSIDE_A_PROJECT_RUN"


def set_up_like_a_clone(project: Path) -> None:
    """Make `project` a git repository with the checkout's environments linked in, as a clone
    is after `make setup`."""
    # `git ls-files` lists a clone's files for the tests that copy it (tests/infra/source_tree).
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    # Each environment linked, not the folder: .gitignore's `.venv/` ignores a folder only.
    (project / ".venv").mkdir()
    for environment in VENVS.iterdir():
        (project / ".venv" / environment.name).symlink_to(environment)


@dataclass
class Run:
    """A subprocess in the project, its output in a file (no pipe to fill up and block it)."""

    name: str
    project: Path
    process: subprocess.Popen[bytes]
    output: Path
    started: float

    def wait(self) -> tuple[int, str]:
        """The exit code and the output, once it ends (killed after RUN_TIMEOUT_S)."""
        try:
            code = self.process.wait(timeout=max(0.0, self.started + RUN_TIMEOUT_S - time.time()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            code = -9
        return code, self.output.read_text(encoding="utf-8", errors="replace")


def start(name: str, project: Path, command: Sequence[str]) -> Run:
    """Start `command` in the project with the project first on the import path (so its
    modules, not the checkout's, are the ones imported)."""
    env = {**os.environ, "PYTHONPATH": str(project), INSIDE_A_PROJECT_RUN: "1"}
    # The outer run's options (a junit file, say) are not the inner runs' to follow.
    env.pop("PYTEST_ADDOPTS", None)
    # Beside the project, not in it: the inner tests copy the project's files.
    output = project.parent / f"{name}.log"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            command, cwd=project, env=env, stdout=sink, stderr=subprocess.STDOUT
        )
    return Run(name, project, process, output, time.time())


def pytest_run(name: str, project: Path, python: Path, paths: Sequence[str]) -> Run:
    """The project's own tests at `paths`, in the environment of `python`."""
    command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    return start(name, project, [*command, *paths])


# Run by the main run alone: the mutation tier judges the pack, which a fork or a template
# project does not change (their renders meet the declaration in their own test_real_stacks),
# and takes minutes a run.
MAIN_RUN_ONLY = frozenset({"tests/policies/test_workload_mutations.py"})


def infra_and_policy_files(project: Path, excluded: Collection[str]) -> list[str]:
    """The project's infra and policy test files but the `excluded` ones (paths relative to the
    project)."""
    return [
        path.relative_to(project).as_posix()
        for folder in ("tests/infra", "tests/policies")
        for path in sorted((project / folder).glob("test_*.py"))
        if path.relative_to(project).as_posix() not in {*excluded, *MAIN_RUN_ONLY}
    ]


def suite_names() -> list[str]:
    """The names of the runs `start_suites` starts (the application's if its environment is
    there), known before they start: test ids."""
    return [INFRA_AND_POLICIES, APP]


def start_suites(project: Path, excluded: Collection[str]) -> dict[str, Run]:
    """Start the project's infra and policy tests (but the `excluded` files) and, where `make
    setup` built the application's environment, its fast unit tests (APP_TESTS)."""
    if os.environ.get(INSIDE_A_PROJECT_RUN):
        pytest.skip("inside a project run, whose test already runs these suites")
    if not INFRA_PYTHON.exists():
        pytest.skip(f"no infra environment at {INFRA_PYTHON} (make setup)")
    files = infra_and_policy_files(project, excluded)
    started = {
        INFRA_AND_POLICIES: pytest_run(INFRA_AND_POLICIES, project, INFRA_PYTHON, [*XDIST, *files])
    }
    if APP_PYTHON.exists():
        started[APP] = pytest_run(APP, project, APP_PYTHON, APP_TESTS)
    return started


def stop(runs: dict[str, Run]) -> None:
    """Kill the runs still going (a test that failed early leaves them to no one)."""
    for run in runs.values():
        if run.process.poll() is None:
            run.process.kill()
            run.process.wait()


def tail(output: str, lines: int = 60) -> str:
    """The end of a run's output: its failures' short summary and the last tracebacks."""
    return "\n".join(output.splitlines()[-lines:])


def passed(runs: dict[str, Run], name: str) -> str:
    """The run's output, asserting it exited 0 (its tail in the message if not)."""
    if name not in runs and name == APP:
        pytest.skip(f"no application environment at {APP_PYTHON} (make setup)")
    run = runs[name]
    code, output = run.wait()
    since = time.time() - run.started
    assert code == 0, (
        f"the {name} run in {run.project.name} (started {since:.0f} s ago) exited {code}:\n"
        f"{tail(output)}"
    )
    return output
