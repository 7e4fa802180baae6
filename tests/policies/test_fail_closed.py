"""The pack fails closed: its own levels and thresholds are prod's, and only a config relaxes them.

`pulumi preview --policy-pack policies` without `--policy-pack-config` must block what the prod
config blocks; `config.dev.json` is the one place that lowers a level or a threshold.
"""

from __future__ import annotations

import copy
from typing import Any

from policies.evaluate import PolicyInfo, resolved_levels
from tests.policies.conftest import Evaluate, stack_config, thresholds_of

LISTENERS = "kafka-listener-encryption"


def test_without_a_config_every_policy_has_its_prod_level(policies: tuple[PolicyInfo, ...]) -> None:
    assert resolved_levels(policies, {}) == resolved_levels(policies, stack_config("prod"))


def test_without_a_config_every_threshold_has_its_prod_value(
    policies: tuple[PolicyInfo, ...],
) -> None:
    prod = stack_config("prod")
    differing = {
        p.name: (thresholds_of(p, {}), thresholds_of(p, prod))
        for p in policies
        if thresholds_of(p, {}) != thresholds_of(p, prod)
    }
    assert differing == {}


def test_dev_relaxes_only_through_its_config_file(policies: tuple[PolicyInfo, ...]) -> None:
    dev = resolved_levels(policies, stack_config("dev"))
    prod = resolved_levels(policies, stack_config("prod"))
    relaxed = {name for name in prod if prod[name] == "mandatory" and dev[name] == "advisory"}
    assert LISTENERS in relaxed, "dev runs PLAINTEXT listeners and says so in config.dev.json"
    assert all(prod[name] != "advisory" or dev[name] == "advisory" for name in prod), (
        "dev is never stricter than prod"
    )


def test_an_all_plaintext_stack_is_blocked_when_no_config_is_given(
    run: Evaluate, recorded_stacks: dict[str, Any]
) -> None:
    dev = recorded_stacks["dev"].resources
    violations = [v for v in run(copy.deepcopy(dev), {}) if v.policy == LISTENERS]
    assert violations, "the dev stack's PLAINTEXT listeners pass the pack without a config"
    assert all(v.mandatory for v in violations)
    relaxed = run(copy.deepcopy(dev), stack_config("dev"))
    assert all(not v.mandatory for v in relaxed if v.policy == LISTENERS)
