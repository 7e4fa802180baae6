"""How long one processor pod may be gone during a restart, and the session that must outlast it.

terminationGracePeriodSeconds (the old pod shuts down) + the startup probe budget
(initialDelaySeconds + failureThreshold x periodSeconds: the longest the new pod may take to
start) + minReadySeconds (the controller waits that long before moving on). A static member's
session must not expire within it, and a roll of N pods takes N times it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Kubernetes' defaults for the fields the budget reads.
DEFAULT_GRACE_SECONDS = 30.0
DEFAULT_PERIOD_SECONDS = 10.0
DEFAULT_FAILURE_THRESHOLD = 3.0

# A dynamic member (hand-off mode, stateless) leaves the group when it stops, so its session only
# decides how long a crashed one holds its partitions. 10 s leaves ten 1 s heartbeats of slack
# (librdkafka sends them from its own thread, so a long batch never delays them).
DYNAMIC_SESSION_TIMEOUT_MS = 10_000


def probe_budget_seconds(
    initial_delay_seconds: float | None,
    failure_threshold: float | None,
    period_seconds: float | None,
) -> float:
    """initialDelaySeconds + failureThreshold x periodSeconds, with Kubernetes' defaults."""
    return (initial_delay_seconds or 0.0) + (failure_threshold or DEFAULT_FAILURE_THRESHOLD) * (
        period_seconds or DEFAULT_PERIOD_SECONDS
    )


@dataclass(frozen=True)
class RestartBudget:
    """The three parts of one pod's worst-case restart, in seconds."""

    grace_seconds: float
    startup_seconds: float
    min_ready_seconds: float
    startup_source: str = "startupProbe budget"  # which probe the startup budget came from

    @property
    def total_seconds(self) -> float:
        """The whole budget."""
        return self.grace_seconds + self.startup_seconds + self.min_ready_seconds

    @property
    def total_ms(self) -> int:
        """The whole budget in milliseconds, as session timeouts are written."""
        return round(self.total_seconds * 1000)

    def explain(self) -> str:
        """The sum with its parts, for messages (`... + minReadySeconds 30 = 120 s`)."""
        return (
            f"terminationGracePeriodSeconds {_fmt(self.grace_seconds)} + {self.startup_source} "
            f"{_fmt(self.startup_seconds)} + minReadySeconds {_fmt(self.min_ready_seconds)} "
            f"= {_fmt(self.total_seconds)} s"
        )


def session_timeout_ms(*, static_member: bool, budget: RestartBudget, margin_seconds: float) -> int:
    """The session timeout a member's failure path needs.

    A static member is waited for: its session covers the worst-case restart plus a margin, or
    every pod restart rebalances. A dynamic member leaves the group on SIGTERM, so its session
    only decides how long a crashed one holds its partitions.
    """
    if static_member:
        return round((budget.total_seconds + margin_seconds) * 1000)
    return DYNAMIC_SESSION_TIMEOUT_MS


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
