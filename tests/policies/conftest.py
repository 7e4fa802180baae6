"""Shared fixtures: the pack, the per-stack configs, and each real stack recorded once."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from policies.evaluate import AnalyzerProcess, PolicyInfo, Violation

REPO = Path(__file__).resolve().parents[2]

Evaluate = Callable[..., list[Violation]]
# The handmade stack (handmade_stack.py) is a small stack for each rule's own cases, not a render
# of the program: `workload-shapes`, which holds every render to the workload declaration, is
# left out of its runs and proven on the renders (test_workload_mutations.py, test_real_stacks.py).
HANDMADE_URN = "urn:pulumi:test::"
SHAPES_RULE = "workload-shapes"


@pytest.fixture(scope="session")
def pack() -> Iterator[AnalyzerProcess]:
    """The pack launched once, as the CLI launches it (`policies/analyzer`), served over gRPC."""
    with AnalyzerProcess() as pack:
        yield pack


@pytest.fixture(scope="session")
def policies(pack: AnalyzerProcess) -> tuple[PolicyInfo, ...]:
    """Every policy as the pack describes it to the engine."""
    return pack.policies


def stack_config(stack: str) -> dict[str, Any]:
    """The thresholds file of a stack."""
    return json.loads((REPO / "policies" / f"config.{stack}.json").read_text())


def thresholds_of(policy: PolicyInfo, config: Mapping[str, Any]) -> dict[str, Any]:
    """A policy's thresholds under a config file: its values over the schema's defaults."""
    entry = config.get(policy.name, {})
    given = entry if isinstance(entry, dict) else {}
    return {
        name: given.get(name, field["default"]) for name, field in policy.config_properties.items()
    }


def findings_of(
    run: Evaluate, stack: Iterable[Any], rules: Collection[str], config: str = "prod"
) -> list[Violation]:
    """Every finding on `stack` under a stack's config, asserting each is one of `rules` (the
    rules a test file proves; the others are proven in their own files)."""
    violations = run(stack, stack_config(config))
    assert {v.policy for v in violations} <= set(rules), violations
    return violations


def levels_of(run: Evaluate, stack: Iterable[Any], rule: str) -> dict[str, set[str]]:
    """The levels of `rule`'s findings on `stack` under the dev and the prod config."""
    return {
        config: {v.level for v in run(stack, stack_config(config)) if v.policy == rule}
        for config in ("dev", "prod")
    }


@pytest.fixture(scope="session")
def run(pack: AnalyzerProcess) -> Evaluate:
    """Evaluate resources in the pack's own process (prod thresholds by default)."""

    def run(resources: Iterable[Any], config: Mapping[str, Any] | None = None) -> list[Violation]:
        resources = list(resources)
        config = stack_config("prod") if config is None else config
        if any(str(getattr(r, "urn", "")).startswith(HANDMADE_URN) for r in resources):
            config = {**config, SHAPES_RULE: "disabled"}
        return pack.evaluate(resources, config)

    return run


@pytest.fixture(scope="session")
def recorded_stacks() -> dict[str, Any]:
    """dev and prod, each recorded once per session (tests mutate deep copies)."""
    from offline.render import record_stack

    return {stack: record_stack(stack) for stack in ("dev", "prod")}
