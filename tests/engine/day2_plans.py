"""What Pulumi's engine plans for each documented day-2 change of a running stack: the tables of
docs/operations.md ("What each day-2 change does"), computed by `pulumi preview` and held to
the docs, so that a replacement cannot creep in unseen.

A change's row names, by their Pulumi names, the resources the plan replaces, updates in place,
creates and deletes. A StatefulSet updated rolls its pods one at a time (Kubernetes' own
controller); one replaced is deleted with its pods, all at once. `DAY2_TABLES_WRITE=1` writes
the computed tables into the docs instead of comparing.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from devkit.kube.engine_stack import ROOT, EngineRun, EngineStack
from infra.config import merge_settings
from infra.presets import KAFKA_IMAGE

DOC = ROOT / "docs" / "operations.md"
WRITE = os.environ.get("DAY2_TABLES_WRITE") == "1"
REPLACE_OPS = {"replace", "create-replacement", "delete-replaced"}


@dataclass(frozen=True)
class Day2Change:
    """A documented change: how the docs name it, and the settings it takes over the running
    stack's (nested as in a stack file)."""

    change: str
    settings: Mapping[str, Any]


def changes_of(replicas: int, partitions: int, secured: bool) -> list[Day2Change]:
    """The documented changes a stack of `replicas` processors and `partitions` partitions can
    take, and a secured stack's too. Each stack starts on the release before the current one
    (tests/infra/conftest.py), so an upgrade is a change it can preview."""
    changes = [
        Day2Change("a processor setting (`processor.cpu`)", {"processor": {"cpu": "1500m"}}),
        Day2Change("a processor property (`processor.properties`)",
                   {"processor": {"properties": {"trigger.interval.ms": "500"}}}),
        Day2Change("more processor replicas (`processor.replicas` + 1)",
                   {"processor": {"replicas": replicas + 1}}),
        Day2Change("a broker setting (`kafka.configs`)",
                   {"kafka": {"configs": {"group.initial.rebalance.delay.ms": "1000"}}}),
        Day2Change("a Kafka upgrade (`kafka.image`)", {"kafka": {"image": KAFKA_IMAGE}}),
        Day2Change("twice the partitions (`topics.partitions` with "
                   "`topics.allowPartitionIncrease`)",
                   {"topics": {"partitions": 2 * partitions, "allowPartitionIncrease": True}}),
    ]  # fmt: skip
    if secured:
        changes += [
            Day2Change("a password rotation (`security.credentialsRevision` 1 to 2)",
                       {"security": {"credentialsRevision": 2}}),
            Day2Change("a CA rollover, step 1 (`security.trustedCaGenerations: [1, 2]`)",
                       {"security": {"trustedCaGenerations": [1, 2]}}),
        ]  # fmt: skip
    return changes


@dataclass(frozen=True)
class Plan:
    """What the engine planned for one change, by Pulumi name (`Kind name`)."""

    change: str
    replaced: tuple[str, ...]
    updated: tuple[str, ...]
    created: tuple[str, ...]
    deleted: tuple[str, ...]


def plan_of(change: str, run: EngineRun) -> Plan:
    """The plan of a preview, from the engine's steps."""
    ops: dict[str, set[str]] = {}
    for step in run.steps:
        if step.type.startswith("pulumi:") or ":" not in step.type:
            continue  # the stack, a provider, a StackReference read
        ops.setdefault(f"{step.type.rsplit(':', 1)[-1]} {step.name}", set()).add(step.op)

    def named(wanted: set[str]) -> tuple[str, ...]:
        return tuple(sorted(n for n, o in ops.items() if o & wanted and not o & REPLACE_OPS))

    return Plan(
        change,
        replaced=tuple(sorted(n for n, o in ops.items() if o & REPLACE_OPS)),
        updated=named({"update"}),
        created=named({"create"}),
        deleted=named({"delete"}),
    )


def preview_plans(stack: EngineStack, changes: Sequence[Day2Change]) -> list[Plan]:
    """Each change previewed alone on the running stack, its settings put back after."""
    running = copy.deepcopy(stack.overrides)
    plans = []
    try:
        for change in changes:
            stack.overrides = copy.deepcopy(merge_settings(running, change.settings))
            stack.write_settings()
            run = stack.preview()
            assert run.errors() == [], f"{change.change}: {run.errors()}"
            plans.append(plan_of(change.change, run))
            print(f"{stack.stack_file}: {change.change}: {plans[-1]} ({run.seconds:.1f} s)")
    finally:
        stack.overrides = running
        stack.write_settings()
    return plans


def _cell(names: Sequence[str]) -> str:
    return "<br>".join(f"`{n}`" for n in names) if names else "none"


def table(plans: Sequence[Plan]) -> str:
    """The docs' table of a stack's plans."""
    rows = [
        "| change | replaced | updated in place | created | deleted |",
        "| --- | --- | --- | --- | --- |",
    ]
    rows += [
        f"| {p.change} | {_cell(p.replaced)} | {_cell(p.updated)} | {_cell(p.created)} "
        f"| {_cell(p.deleted)} |"
        for p in plans
    ]
    return "\n".join(rows) + "\n"


def _markers(stack: str) -> tuple[str, str]:
    return f"<!-- day-2 plans of {stack}: generated by tests/engine -->\n", "<!-- end -->\n"


def documented_table(stack: str) -> str:
    """The table docs/operations.md shows for `stack`."""
    begin, end = _markers(stack)
    found = re.search(re.escape(begin) + "(.*?)" + re.escape(end), DOC.read_text(), re.S)
    assert found, f"{DOC} has no {begin.strip()} ... {end.strip()} section"
    return found[1]


def check_documented(stack: str, plans: Sequence[Plan]) -> None:
    """The docs' table is the one computed (or, with DAY2_TABLES_WRITE=1, becomes it)."""
    computed, shown = table(plans), documented_table(stack)
    if WRITE and computed != shown:
        begin, end = _markers(stack)
        text = DOC.read_text()
        DOC.write_text(text.replace(begin + shown + end, begin + computed + end))
        return
    assert computed == shown, (
        f"the engine plans differ from docs/operations.md's table of {stack} (a new "
        "replacement, or an update the docs do not name). Computed:\n"
        f"{computed}\nIf the change is intended, run the engine tier with DAY2_TABLES_WRITE=1."
    )


def check_stack(stack: EngineStack, replicas: int, partitions: int, *, secured: bool) -> None:
    """Every documented change of a running stack previewed, its plans as the docs' table, and
    none replacing a StatefulSet."""
    plans = preview_plans(stack, changes_of(replicas, partitions, secured))
    check_documented(stack.stack_file, plans)
    for plan in plans:
        assert not [n for n in plan.replaced if n.startswith("StatefulSet ")], plan
