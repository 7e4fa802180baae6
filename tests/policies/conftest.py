"""Shared fixtures: the pack, the per-stack configs, and each real stack recorded once."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from pulumi_policy import Policy

from policies.evaluate import Violation, evaluate
from policies.rules import all_policies

REPO = Path(__file__).resolve().parents[2]

Evaluate = Callable[..., list[Violation]]


@pytest.fixture(scope="session")
def policies() -> list[Policy]:
    return all_policies()


def stack_config(stack: str) -> dict[str, Any]:
    """The thresholds file of a stack."""
    return json.loads((REPO / "policies" / f"config.{stack}.json").read_text())


@pytest.fixture(scope="session")
def run(policies: list[Policy]) -> Evaluate:
    """Evaluate resources through the engine's argument objects (prod thresholds by default)."""

    def run(resources: Iterable[Any], config: Mapping[str, Any] | None = None) -> list[Violation]:
        return evaluate(resources, policies, stack_config("prod") if config is None else config)

    return run


@pytest.fixture(scope="session")
def recorded_stacks() -> dict[str, Any]:
    """dev and prod, each recorded once per session (tests mutate deep copies)."""
    from infra.render import record_stack

    return {stack: record_stack(stack) for stack in ("dev", "prod")}
