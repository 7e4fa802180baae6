"""A KIP-848 group's own configs (its session and heartbeat), set by the reconciler Job.

Under the consumer group protocol the broker owns a group's session timeout and heartbeat
interval: each group may have its own, as GROUP configs (`consumer.session.timeout.ms`,
`consumer.heartbeat.interval.ms`), within the brokers' `group.consumer.min/max.*` bounds. The
Pulumi program computes them from the StatefulSet's restart budget, as it computes a classic
member's client settings, and writes them into the reconciler's specs (`groups`); the Job
reads each group's configs, sets only the keys that differ (IncrementalAlterConfigs, SET), and
leaves every other key alone. A group need not exist yet: its configs wait for its first member.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from app.admin.topic_reconciler import REQUEST_TIMEOUT_S, plan_table
from contract.topic_specs import GroupConfigSpec

log = logging.getLogger("app.admin.reconcile")

GROUP = "GROUP"


class GroupConfigError(RuntimeError):
    """Kafka refused or failed some group configs; `failures` names each."""

    def __init__(self, failures: Sequence[str]) -> None:
        super().__init__("; ".join(failures))
        self.failures = list(failures)


@dataclass(frozen=True)
class GroupStep:
    """One group config that differs from its spec."""

    group: str
    key: str
    current: str | None  # None: not set on the group (the brokers' default applies)
    wanted: str

    def describe(self) -> str:
        """`consumer.session.timeout.ms: 45000 (the brokers' default) -> 10000`."""
        current = "the brokers' default" if self.current is None else self.current
        return f"{self.key}: {current} -> {self.wanted}"


def read(
    admin: AdminClient, groups: Sequence[GroupConfigSpec], timeout_s: float = REQUEST_TIMEOUT_S
) -> dict[str, dict[str, str]]:
    """Each group's configs that are set on the group itself (not the brokers' defaults)."""
    if not groups:
        return {}
    futures = admin.describe_configs([ConfigResource(GROUP, g.group) for g in groups])
    found: dict[str, dict[str, str]] = {}
    for resource, future in futures.items():
        entries = future.result(timeout_s)
        found[resource.name] = {
            key: entry.value
            for key, entry in entries.items()
            if entry.value is not None and not entry.is_default
        }
    return found


def plan(
    groups: Sequence[GroupConfigSpec], current: Mapping[str, Mapping[str, str]]
) -> list[GroupStep]:
    """The keys each group's spec names that differ from what the group has."""
    return [
        GroupStep(spec.group, key, current.get(spec.group, {}).get(key), wanted)
        for spec in groups
        for key, wanted in sorted(spec.configs.items())
        if current.get(spec.group, {}).get(key) != wanted
    ]


def apply(
    admin: AdminClient, steps: Sequence[GroupStep], timeout_s: float = REQUEST_TIMEOUT_S
) -> int:
    """Set the steps' keys (SET, one request per group); how many were set."""
    by_group: dict[str, list[GroupStep]] = {}
    for step in steps:
        by_group.setdefault(step.group, []).append(step)
    resources = [
        ConfigResource(
            GROUP,
            group,
            incremental_configs=[
                ConfigEntry(s.key, s.wanted, incremental_operation=AlterConfigOpType.SET)
                for s in group_steps
            ],
        )
        for group, group_steps in by_group.items()
    ]
    failures = []
    applied = 0
    for resource, future in admin.incremental_alter_configs(resources).items():
        try:
            future.result(timeout_s)
        except KafkaException as exc:
            keys = ", ".join(s.key for s in by_group[resource.name])
            failures.append(
                f"group {resource.name}: setting {keys} failed: {exc.args[0].str()}; check the "
                "brokers' group.consumer.* bounds and the reconciler's ALTER_CONFIGS on the group"
            )
            continue
        applied += len(by_group[resource.name])
        for step in by_group[resource.name]:
            log.info("group %s: %s", step.group, step.describe())
    if failures:
        raise GroupConfigError(failures)
    return applied


def format_table(groups: Sequence[GroupConfigSpec], steps: Sequence[GroupStep]) -> str:
    """The plan for people: every group's differing keys, or that it is up to date."""
    changed = {s.group for s in steps}
    rows = [(s.group, "set", s.describe()) for s in steps]
    rows += [(g.group, "up to date", ", ".join(sorted(g.configs))) for g in groups
             if g.group not in changed]  # fmt: skip
    return plan_table("GROUP", rows)
