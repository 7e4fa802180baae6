"""The README's "Fork it" table, performed: a copy of the repository gets the edits the table
names for a fork (the project's name, the application id and the topics, the aggregation) and
its infra, policy and fast application tests pass there, under the new names, and so does its
local run's rolled test (the README's first command, small, on a local Apache Kafka): the tests
that start the pipeline must not assume the example's names.

Each edit is a text substitution that must find its old text exactly once, in a file the
README's row still names: when the README and the files drift apart, this test says where.
The copy is a git repository (as a clone is) with the checkout's environments linked in (as
`make setup` leaves them), so every test of the suites runs there; the test runs the suites in
parallel, to keep it short in CI.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.stack_pipeline import PROJECT
from contract.topic_specs import PipelineNames
from tests.infra.project_runs import (
    APP,
    APP_PYTHON,
    INFRA_AND_POLICIES,
    INFRA_PYTHON,
    REPO,
    Run,
    passed,
    pytest_run,
    set_up_like_a_clone,
    start,
    start_suites,
    stop,
)
from tests.infra.source_tree import copy_source_tree

THIS = Path(__file__).relative_to(REPO).as_posix()
# The fork's local run, rolled, and how its pipeline is chosen (one Spark run; the KIP-848 and
# Ctrl-C cases test the machinery, not the names).
LOCAL_RUN = "local-run"
LOCAL_RUN_TESTS = ["tests/app/test_local_run.py", "-k", "not kip848 and not ctrl_c"]

# The fork: a shop's revenue per product, summed by the repository's second example pipeline.
PROJECT_NAME = "shop-revenue"
FORK_NAMES = PipelineNames("product-revenue", "orders", "revenue-per-product")
AGGREGATION = "app.pipelines.product_revenue.ProductRevenue"
# The stack file's `processor.properties` naming it, under a `stateful-streaming:processor:` key.
STACK_AGGREGATION = f"    properties:\n      aggregation.class: {AGGREGATION}\n"

# What the fork's program reports, run by the infra environment in the copy: where its modules
# come from, the names, and what each stack renders (the processor's properties, the components).
PROBE = """
import dataclasses, json, sys
import app, infra, policies
from contract.java_properties import parse_properties
from contract.stack_pipeline import PROJECT
from offline.render import record_stack
from contract.topic_specs import PipelineNames

stacks = {}
for stack in ("dev", "prod"):
    recorded = record_stack(stack)
    [text] = [
        o["data"]["processor.properties"]
        for o in recorded.kubernetes_objects()
        if o["kind"] == "ConfigMap" and "processor.properties" in o.get("data", {})
    ]
    stacks[stack] = {
        "properties": {e.key: e.value for e in parse_properties(text)},
        "types": sorted({r.type for r in recorded.resources if r.type.startswith(PROJECT + ":")}),
    }
json.dump(
    {
        "modules": [m.__file__ for m in (app, infra, policies)],
        "names": dataclasses.asdict(PipelineNames()),
        "stacks": stacks,
    },
    sys.stdout,
)
"""


@dataclass(frozen=True)
class Edit:
    """One edit a fork makes: `old` replaced by `new` in `path`, where the README's row `row`
    says to make it (its "where" cell must contain `named`)."""

    row: str
    named: str
    path: str
    old: str
    new: str


def fork_table() -> dict[str, str]:
    """The README's "Fork it" table: each row's "what" -> its "where"."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "\n## Fork it\n" in readme, "README.md has no section ## Fork it"
    section = readme.split("\n## Fork it\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith(("| what |", "| --- |")):
            cells = line.strip().removeprefix("| ").removesuffix(" |").split(" | ")
            assert len(cells) == 3, f"README, Fork it: not a row of what | where | notes: {line}"
            rows[cells[0]] = cells[1]
    return rows


def fork_edits() -> list[Edit]:
    """The edits, as the README's table names them."""
    project = yaml.safe_load((REPO / "Pulumi.yaml").read_text(encoding="utf-8"))["name"]
    original = PipelineNames()
    aggregation = "`aggregation.class` (stack: `processor.properties`)"
    return [
        Edit(
            "the project name",
            "`Pulumi.yaml`",
            "Pulumi.yaml",
            f"name: {project}\ndescription:",
            f"name: {PROJECT_NAME}\ndescription:",
        ),
        Edit(
            "the project name",
            "`pyproject.toml`'s name",
            "pyproject.toml",
            f'[project]\nname = "{project}"\n',
            f'[project]\nname = "{PROJECT_NAME}"\n',
        ),
        *(
            Edit(
                "application id and topic names",
                "`PipelineNames` in `contract/topic_specs.py`",
                "contract/topic_specs.py",
                f'    {field.name}: str = "{getattr(original, field.name)}"\n',
                f'    {field.name}: str = "{getattr(FORK_NAMES, field.name)}"\n',
            )
            for field in dataclasses.fields(PipelineNames)
        ),
        # The same names as the defaults of `pulumi new`'s prompts: a fork made by cloning keeps
        # the `template:` section (`pulumi new` drops it, see tests/infra/test_template.py).
        *(
            Edit(
                "application id and topic names",
                "`template:` in `Pulumi.yaml`",
                "Pulumi.yaml",
                f"      default: {getattr(original, field.name)}\n",
                f"      default: {getattr(FORK_NAMES, field.name)}\n",
            )
            for field in dataclasses.fields(PipelineNames)
        ),
        # The settings table shows the presets' values, names included (test_settings_table.py).
        Edit(
            "application id and topic names",
            "the settings table in `docs/operations.md`",
            "docs/operations.md",
            f"| {original.input_topic}, {original.output_topic} | same |",
            f"| {FORK_NAMES.input_topic}, {FORK_NAMES.output_topic} | same |",
        ),
        Edit(
            "application id and topic names",
            "the settings table in `docs/operations.md`",
            "docs/operations.md",
            f"| {original.application_id} | same |",
            f"| {FORK_NAMES.application_id} | same |",
        ),
        # dev sets no processor section: the fork adds one after the stack's last setting.
        Edit(
            "the aggregation",
            aggregation,
            "Pulumi.dev.yaml",
            f"  {PROJECT}:namespace: streaming\n",
            f"  {PROJECT}:namespace: streaming\n  {PROJECT}:processor:\n{STACK_AGGREGATION}",
        ),
        Edit(
            "the aggregation",
            aggregation,
            "Pulumi.prod.yaml",
            f"  {PROJECT}:processor:\n",
            f"  {PROJECT}:processor:\n{STACK_AGGREGATION}",
        ),
    ]


def apply(edit: Edit, table: dict[str, str], fork: Path) -> None:
    """Make the edit in the fork, failing loudly where the README or the file has moved on."""
    assert edit.row in table, f"README, Fork it: no row {edit.row!r}; rows: {sorted(table)}"
    assert edit.named in table[edit.row], (
        f"README, Fork it, row {edit.row!r} no longer names {edit.named}: {table[edit.row]}"
    )
    path = fork / edit.path
    text = path.read_text(encoding="utf-8")
    found = text.count(edit.old)
    assert found == 1, f"{edit.path}: {edit.old!r} found {found} times, expected once"
    path.write_text(text.replace(edit.old, edit.new), encoding="utf-8")


def type_token_files(table: dict[str, str]) -> dict[str, set[str]]:
    """The files the README's type-token row names -> the type tokens each defines."""
    files = re.findall(r"`(infra/\w+\.py)`", table["the components' type tokens"])
    assert files, table["the components' type tokens"]
    token = re.compile(rf'"({re.escape(PROJECT)}:\w+:\w+)"')
    return {name: set(token.findall((REPO / name).read_text(encoding="utf-8"))) for name in files}


@pytest.fixture(scope="module")
def fork(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the working tree with the fork's edits, a git repository with the checkout's
    environments linked in."""
    if not INFRA_PYTHON.exists():
        pytest.skip(f"no infra environment at {INFRA_PYTHON} (make setup)")
    fork = copy_source_tree(tmp_path_factory.mktemp("fork") / PROJECT_NAME)
    table = fork_table()
    for edit in fork_edits():
        apply(edit, table, fork)
    set_up_like_a_clone(fork)
    return fork


@pytest.fixture(scope="module")
def runs(fork: Path) -> Iterator[dict[str, Run]]:
    """The fork's probe and test suites, started at once (they run side by side)."""
    # The suites first: where they skip, no probe is left running.
    started = start_suites(fork, excluded={THIS})
    started["probe"] = start("probe", fork, [str(INFRA_PYTHON), "-c", PROBE])
    if APP in started:
        probe = "import json, app, policies; print(json.dumps([app.__file__, policies.__file__]))"
        started["app probe"] = start("app-probe", fork, [str(APP_PYTHON), "-c", probe])
        started[LOCAL_RUN] = pytest_run(LOCAL_RUN, fork, APP_PYTHON, LOCAL_RUN_TESTS)
    yield started
    stop(started)


def under(fork: Path, files: list[str]) -> list[str]:
    """The files not inside the fork (imported from elsewhere, such as the checkout)."""
    return [name for name in files if not Path(name).resolve().is_relative_to(fork.resolve())]


def test_the_forks_program_renders_its_new_names_and_aggregation(
    fork: Path, runs: dict[str, Run]
) -> None:
    report: dict[str, Any] = json.loads(passed(runs, "probe"))
    assert under(fork, report["modules"]) == [], "the probe imported the checkout, not the fork"
    assert report["names"] == dataclasses.asdict(FORK_NAMES)
    for stack, rendered in report["stacks"].items():
        properties = rendered["properties"]
        assert properties["aggregation.class"] == AGGREGATION, stack
        assert (
            properties["application.id"],
            properties["input.topic"],
            properties["output.topic"],
            properties["changelog.topic"],
        ) == (
            FORK_NAMES.application_id,
            FORK_NAMES.input_topic,
            FORK_NAMES.output_topic,
            FORK_NAMES.changelog_topic,
        ), stack


def test_the_fork_keeps_the_components_type_tokens(fork: Path, runs: dict[str, Run]) -> None:
    tokens = type_token_files(fork_table())
    for name in tokens:
        assert (fork / name).read_bytes() == (REPO / name).read_bytes(), f"the fork edited {name}"
    defined = set().union(*tokens.values())
    assert f"{PROJECT}:kafka:KafkaCluster" in defined
    report: dict[str, Any] = json.loads(passed(runs, "probe"))
    for stack, rendered in report["stacks"].items():
        registered = set(rendered["types"])
        assert registered and registered <= defined, (stack, registered - defined)


@pytest.mark.long
def test_the_forks_infra_and_policy_tests_pass(runs: dict[str, Run]) -> None:
    passed(runs, INFRA_AND_POLICIES)


def test_the_forks_application_unit_tests_pass(fork: Path, runs: dict[str, Run]) -> None:
    if APP not in runs:
        pytest.skip(f"no application environment at {APP_PYTHON} (make setup)")
    modules = json.loads(passed(runs, "app probe"))
    assert under(fork, modules) == [], "the application's tests imported the checkout"
    passed(runs, APP)


def test_an_edit_whose_text_has_moved_fails_naming_the_file(tmp_path: Path) -> None:
    table = fork_table()
    (edit,) = [e for e in fork_edits() if e.path == "pyproject.toml"]
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "renamed-already"\n')
    with pytest.raises(AssertionError, match=r"pyproject\.toml: .* found 0 times, expected once"):
        apply(edit, table, tmp_path)
    moved = dataclasses.replace(edit, named="`a file the README does not name`")
    with pytest.raises(AssertionError, match="no longer names `a file the README does not"):
        apply(moved, table, tmp_path)


def test_the_forks_local_run_rolls_exactly_under_its_names(runs: dict[str, Run]) -> None:
    if LOCAL_RUN not in runs:
        pytest.skip(f"no application environment at {APP_PYTHON} (make setup)")
    passed(runs, LOCAL_RUN)
