"""How long one pod of a StatefulSet may be gone during a restart, computed from the StatefulSet.

terminationGracePeriodSeconds (the old pod shuts down) + the startup probe budget
(initialDelaySeconds + failureThreshold x periodSeconds: the longest the new pod may take to
start) + minReadySeconds (the controller waits that long before moving on). A consumer group
must not expire the member within this time, and a roll of N pods takes N times it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .manifests import containers, fmt, get, number, pod_spec

# Kubernetes' defaults for the fields the budget reads.
DEFAULT_GRACE_SECONDS = 30.0
DEFAULT_PERIOD_SECONDS = 10.0
DEFAULT_FAILURE_THRESHOLD = 3.0


@dataclass(frozen=True)
class RestartBudget:
    """The three parts of one pod's worst-case restart, in seconds."""

    grace_seconds: float
    startup_seconds: float
    min_ready_seconds: float
    startup_source: str  # which probe the startup budget came from

    @property
    def total_seconds(self) -> float:
        """The whole budget."""
        return self.grace_seconds + self.startup_seconds + self.min_ready_seconds

    def explain(self) -> str:
        """`terminationGracePeriodSeconds 60 + startupProbe 0+30x2 + minReadySeconds 30 = 150 s`."""
        return (
            f"terminationGracePeriodSeconds {fmt(self.grace_seconds)} + {self.startup_source} "
            f"{fmt(self.startup_seconds)} + minReadySeconds {fmt(self.min_ready_seconds)} "
            f"= {fmt(self.total_seconds)} s"
        )


def probe_budget(probe: Mapping[str, Any]) -> float:
    """initialDelaySeconds + failureThreshold x periodSeconds of one probe."""
    delay = number(probe.get("initialDelaySeconds")) or 0.0
    failures = number(probe.get("failureThreshold")) or DEFAULT_FAILURE_THRESHOLD
    period = number(probe.get("periodSeconds")) or DEFAULT_PERIOD_SECONDS
    return delay + failures * period


def restart_budget(resource_type: str, props: Mapping[str, Any]) -> RestartBudget:
    """The worst-case restart of one pod of this workload.

    Without a startup probe the readiness probe gates the start the same way, so its budget
    stands in (and the source says so).
    """
    spec = pod_spec(resource_type, props)
    grace = number(get(spec, "terminationGracePeriodSeconds"))
    startup, source = 0.0, "no startup or readiness probe"
    for container in containers(spec):
        for probe_kind in ("startupProbe", "readinessProbe"):
            probe = container.get(probe_kind)
            if isinstance(probe, Mapping):
                budget = probe_budget(probe)
                if budget > startup:
                    startup, source = budget, f"{probe_kind} budget"
                break
    return RestartBudget(
        grace_seconds=DEFAULT_GRACE_SECONDS if grace is None else grace,
        startup_seconds=startup,
        min_ready_seconds=number(get(props, "spec", "minReadySeconds")) or 0.0,
        startup_source=source,
    )
