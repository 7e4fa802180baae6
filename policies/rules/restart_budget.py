"""One pod's worst-case restart, read from a workload's manifest (the formula is the contract's:
`contract/restart_budget.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.restart_budget import DEFAULT_GRACE_SECONDS, RestartBudget, probe_budget_seconds

from .manifests import containers, get, number, pod_spec


def probe_budget(probe: Mapping[str, Any]) -> float:
    """initialDelaySeconds + failureThreshold x periodSeconds of one probe."""
    return probe_budget_seconds(
        number(probe.get("initialDelaySeconds")),
        number(probe.get("failureThreshold")),
        number(probe.get("periodSeconds")),
    )


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
