"""The consumer-group membership rules, stated once.

Each rule takes plain values (what the processor will run with, and what the caller knows of its
deployment) and returns `Breach`es. The processor calls them at start on its properties file,
the Pulumi program at `pulumi up` on the properties it renders, the pack in review on the
rendered stack; each frames the breach its own way (a setting name, a manifest field).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .processor_keys import (
    CLASSIC_PROTOCOL_ONLY,
    INSTANCE_ID_KEY,
    MEMBERSHIP_HANDOFF,
    MEMBERSHIP_STATIC,
    PROTOCOL_CONSUMER,
)
from .restart_budget import DYNAMIC_SESSION_TIMEOUT_MS, RestartBudget

# The longest session a hand-off member may have: a crash stops its partitions that long (a
# stopping member leaves the group at once).
MAX_HANDOFF_SESSION_TIMEOUT_MS = 12_000
# Kafka's own guidance: a heartbeat at most a third of the session, so one or two lost
# heartbeats do not expire the member.
MIN_SESSION_TO_HEARTBEAT_RATIO = 3
# Kafka's defaults for the brokers' bounds on a classic member's session.
BROKER_MIN_SESSION_TIMEOUT_MS = 6_000
BROKER_MAX_SESSION_TIMEOUT_MS = 1_800_000


@dataclass(frozen=True)
class Breach:
    """One rule broken: the key at fault, its value, what the rule allows, and why."""

    key: str
    found: str
    required: str
    why: str

    def message(self) -> str:
        """`must be <required>: <why>`, for callers that name the key and value themselves."""
        return f"must be {self.required}: {self.why}"


def is_static_member(stateful: bool, mode: str) -> bool:
    """Whether the processor joins with a group.instance.id (stateful, static mode)."""
    return stateful and mode == MEMBERSHIP_STATIC


def is_handoff(stateful: bool, mode: str) -> bool:
    """Whether a stopping instance hands its partitions (and their state) to the others."""
    return stateful and mode == MEMBERSHIP_HANDOFF


def instance_id_breaches(*, stateful: bool, mode: str, instance_id: str | None) -> list[Breach]:
    """A static member has a group.instance.id; a dynamic one (stateless, hand-off) has none."""
    present = bool(instance_id and instance_id.strip())
    if is_static_member(stateful, mode) and not present:
        return [
            Breach(
                INSTANCE_ID_KEY,
                "absent",
                "set, e.g. ${env:POD_NAME} (static membership)",
                "a stateful processor with membership.mode=static is a static member: a restart "
                "within the session timeout must keep its partitions and their state",
            )
        ]
    if not is_static_member(stateful, mode) and present:
        return [
            Breach(
                INSTANCE_ID_KEY,
                str(instance_id),
                "absent for a stateless processor (stateful=false) or with membership.mode=handoff",
                "a dynamic member leaves the group on close, so its partitions move at once "
                "instead of after the session timeout; remove it",
            )
        ]
    return []


def standby_breach(*, standby_replicas: int, replicas: int | None) -> Breach | None:
    """Each standby copy lives on an instance other than its owner: at most replicas - 1."""
    if replicas is None or 0 <= standby_replicas <= replicas - 1:
        return None
    return Breach(
        "num.standby.replicas",
        str(standby_replicas),
        f"0..{max(replicas - 1, 0)} (replicas - 1)",
        "each standby copy of a partition lives on an instance other than its owner, so "
        f"{replicas} instance(s) keep at most {max(replicas - 1, 0)} copies; before a scale-in "
        "to fewer than num.standby.replicas + 1 instances, lower num.standby.replicas",
    )


def handoff_breaches(
    *, stateful: bool, mode: str, standby_replicas: int, replicas: int | None
) -> list[Breach]:
    """A hand-off needs state to hand over (stateful), another instance (replicas >= 2) to
    take it, and a warm copy there (standby >= 1)."""
    if mode == MEMBERSHIP_HANDOFF and not stateful:
        return [
            Breach(
                "membership.mode",
                mode,
                f"{MEMBERSHIP_STATIC} with stateful=false",
                "a hand-off hands partitions over with their state, and a stateless processor "
                "keeps none; set stateful=true to hand state over, or membership.mode=static "
                "(a stateless processor leaves the group on close in either mode)",
            )
        ]
    if not is_handoff(stateful, mode):
        return []
    breaches = []
    if replicas is not None and replicas < 2:
        breaches.append(
            Breach(
                "replicas",
                str(replicas),
                "at least 2 with membership.mode=handoff",
                "a hand-off needs another instance to take the partitions over; run at least 2 "
                "replicas or set membership.mode=static",
            )
        )
    if standby_replicas < 1:
        breaches.append(
            Breach(
                "num.standby.replicas",
                str(standby_replicas),
                "at least 1 with membership.mode=handoff",
                "a hand-off moves partitions to instances that must hold warm copies of their "
                "state, otherwise each moved partition restores its whole changelog; set "
                "num.standby.replicas=1 or membership.mode=static",
            )
        )
    return breaches


def session_breaches(
    *,
    stateful: bool,
    mode: str,
    session_ms: int,
    budget: RestartBudget | None,
    margin_ms: float = 0,
    max_handoff_session_ms: int = MAX_HANDOFF_SESSION_TIMEOUT_MS,
    broker_min_ms: int | None = BROKER_MIN_SESSION_TIMEOUT_MS,
    broker_max_ms: int | None = BROKER_MAX_SESSION_TIMEOUT_MS,
    key: str = "consumer.session.timeout.ms",
    min_key: str = "group.min.session.timeout.ms",
    max_key: str = "group.max.session.timeout.ms",
) -> list[Breach]:
    """The session fits the mode's failure path and the brokers' bounds.

    A static member's covers one pod's worst-case restart (`budget`; None where it is unknown,
    as at the processor's start), or every restart rebalances. A hand-off member's is short, or
    a crash stops its partitions until it expires. The brokers refuse a join outside their
    bounds (INVALID_SESSION_TIMEOUT).
    """
    breaches = []
    found = str(session_ms)
    if is_static_member(stateful, mode) and budget is not None:
        needed = budget.total_ms + round(margin_ms)
        if session_ms < needed:
            margin = f" + margin {round(margin_ms)} ms" if margin_ms else ""
            breaches.append(
                Breach(
                    key,
                    found,
                    f"at least the restart budget, {needed} ms ({budget.explain()}{margin})",
                    "a static member's session that ends before the pod is back expires it, and "
                    "every pod restart rebalances",
                )
            )
    if is_handoff(stateful, mode) and session_ms > max_handoff_session_ms:
        breaches.append(
            Breach(
                key,
                found,
                f"<= {max_handoff_session_ms} with membership.mode=handoff",
                "a hand-off member that stops leaves the group at once, but one that crashes "
                "holds its partitions, producing nothing, until its session expires; "
                f"{DYNAMIC_SESSION_TIMEOUT_MS} ms is the computed value",
            )
        )
    low = broker_min_ms is not None and session_ms < broker_min_ms
    high = broker_max_ms is not None and session_ms > broker_max_ms
    if low or high:
        breaches.append(
            Breach(
                key,
                found,
                f"within the brokers' {min_key} ({broker_min_ms}) and {max_key} ({broker_max_ms})",
                "the broker refuses a member's join outside its bounds (INVALID_SESSION_TIMEOUT); "
                f"change the session timeout or the brokers' {min_key}/{max_key}",
            )
        )
    return breaches


def heartbeat_breach(
    *,
    session_ms: int,
    heartbeat_ms: int,
    ratio: float = MIN_SESSION_TO_HEARTBEAT_RATIO,
    key: str = "consumer.heartbeat.interval.ms",
    session_key: str = "consumer.session.timeout.ms",
) -> Breach | None:
    """The heartbeat is at most a third (1/ratio) of the session."""
    if heartbeat_ms * ratio <= session_ms:
        return None
    return Breach(
        key,
        str(heartbeat_ms),
        f"at most a third of {session_key}={session_ms} (<= {int(session_ms // ratio)})",
        "so that a missed heartbeat or two does not end the session",
    )


def poll_interval_breach(*, session_ms: int, max_poll_ms: int) -> Breach | None:
    """max.poll.interval.ms is at least the session timeout (librdkafka refuses less)."""
    if max_poll_ms >= session_ms:
        return None
    return Breach(
        "consumer.max.poll.interval.ms",
        str(max_poll_ms),
        f"at least consumer.session.timeout.ms={session_ms}",
        "librdkafka's rule: it refuses a smaller one, so the processor would fail at start",
    )


def classic_only_breaches(protocol: str, properties: Mapping[str, str]) -> list[Breach]:
    """Under KIP-848 the broker owns the session, heartbeat and assignor: the client has none."""
    if protocol != PROTOCOL_CONSUMER:
        return []
    return [
        Breach(
            key,
            properties[key],
            "absent with consumer.group.protocol=consumer (KIP-848)",
            "the broker owns it (group.consumer.session.timeout.ms, "
            "group.consumer.heartbeat.interval.ms, group.consumer.assignors) and the client "
            "refuses to start with it; remove it",
        )
        for key in CLASSIC_PROTOCOL_ONLY
        if key in properties
    ]


# KIP-848: a group's own session and heartbeat, set on the GROUP resource (IncrementalAlterConfigs;
# the reconciler Job does it), each within the brokers' `group.consumer.min/max.*` bounds.
GROUP_SESSION_TIMEOUT_KEY = "consumer.session.timeout.ms"
GROUP_HEARTBEAT_INTERVAL_KEY = "consumer.heartbeat.interval.ms"
# Kafka's defaults for those bounds: (broker key, default).
KIP848_BOUNDS = {
    GROUP_SESSION_TIMEOUT_KEY: (
        ("group.consumer.min.session.timeout.ms", 45_000),
        ("group.consumer.max.session.timeout.ms", 60_000),
    ),
    GROUP_HEARTBEAT_INTERVAL_KEY: (
        ("group.consumer.min.heartbeat.interval.ms", 5_000),
        ("group.consumer.max.heartbeat.interval.ms", 15_000),
    ),
}


def kip848_group_configs(*, session_ms: int, heartbeat_ms: int) -> dict[str, str]:
    """A KIP-848 group's own configs: the session the restart budget needs, its heartbeat."""
    return {
        GROUP_SESSION_TIMEOUT_KEY: str(session_ms),
        GROUP_HEARTBEAT_INTERVAL_KEY: str(heartbeat_ms),
    }


def kip848_bounds_admitting(group_configs: Mapping[str, str]) -> dict[str, str]:
    """The brokers' bounds widened just enough to admit the group's configs (Kafka's defaults
    where they already do): what a cluster hosting the group renders; none for no configs."""
    bounds = {}
    for key, ((low_key, low), (high_key, high)) in KIP848_BOUNDS.items():
        if key not in group_configs:
            continue
        value = int(group_configs[key])
        bounds[low_key] = str(min(low, value))
        bounds[high_key] = str(max(high, value))
    return bounds


def kip848_bound_breaches(
    group_configs: Mapping[str, str], broker_configs: Mapping[str, str]
) -> list[Breach]:
    """A group config outside the brokers' bounds: the broker refuses to set it."""
    found = []
    for key, ((low_key, low), (high_key, high)) in KIP848_BOUNDS.items():
        value = int(group_configs[key])
        lowest = int(broker_configs.get(low_key, low))
        highest = int(broker_configs.get(high_key, high))
        if not lowest <= value <= highest:
            found.append(
                Breach(
                    low_key if value < lowest else high_key,
                    str(lowest if value < lowest else highest),
                    f"a bound admitting the group's {key}={value}",
                    "the broker refuses a group config outside its group.consumer.* bounds, so "
                    "the reconciler Job would fail; widen the bound or leave it to the program",
                )
            )
    return found
