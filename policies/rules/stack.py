"""Stack-wide rules: every StatefulSet has its PDB and governing headless Service; prod keeps
standby state for the processor (`num.standby.replicas`) or runs it as an active/standby pair."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import StackValidationArgs

from .config import MANDATORY, Threshold, stack_rule
from .manifests import fmt, get, label, number, pod_labels
from .messages import violation
from .pair import correct_pairs
from .stack_view import STANDBY_KEY, StackView, selects

Finding = tuple[str, str | None]


def check_pdb(args: StackValidationArgs, cfg: Mapping[str, Any]) -> Iterator[Finding]:
    """A PodDisruptionBudget that lets at most one pod be evicted at a time."""
    view = StackView(args.resources)
    for statefulset in view.statefulsets():
        subject = label(statefulset.resource_type, statefulset.props)
        replicas = number(get(statefulset.props, "spec", "replicas")) or 1.0
        pdbs = view.pdbs_for(statefulset)
        if not pdbs:
            yield (
                violation(
                    subject,
                    "PodDisruptionBudget",
                    "none selects its pods",
                    f"a PDB with maxUnavailable <= {fmt(cfg['maxUnavailable'])}",
                    "add a PodDisruptionBudget (maxUnavailable: 1) with the StatefulSet's "
                    "selector: without it a node drain evicts every replica at once",
                ),
                statefulset.urn,
            )
            continue
        for pdb in pdbs:
            max_unavailable = number(get(pdb.props, "spec", "maxUnavailable"))
            min_available = number(get(pdb.props, "spec", "minAvailable"))
            allowed = (
                max_unavailable
                if max_unavailable is not None
                else replicas - (min_available if min_available is not None else 0.0)
            )
            if allowed > cfg["maxUnavailable"]:
                found = (
                    f"maxUnavailable {fmt(max_unavailable)}"
                    if max_unavailable is not None
                    else f"minAvailable {get(pdb.props, 'spec', 'minAvailable', default='absent')}"
                )
                yield (
                    violation(
                        label(pdb.resource_type, pdb.props),
                        "spec",
                        f"{found} (allows {fmt(allowed)} of {fmt(replicas)} pods down)",
                        f"at most {fmt(cfg['maxUnavailable'])} pod down",
                        "set maxUnavailable: 1 (not a percentage or a minAvailable that goes "
                        "stale when replicas change)",
                    ),
                    pdb.urn,
                )


def check_headless_service(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """`spec.serviceName` names a headless Service selecting the pods (stable pod DNS names)."""
    view = StackView(args.resources)
    for statefulset in view.statefulsets():
        subject = label(statefulset.resource_type, statefulset.props)
        name = get(statefulset.props, "spec", "serviceName")
        service = view.governing_service(statefulset)
        problem = None
        if service is None:
            problem = f"{name or 'absent'} (no such Service in this stack)"
        elif get(service.props, "spec", "clusterIP") != "None":
            problem = f"{name}, whose clusterIP is {get(service.props, 'spec', 'clusterIP')}"
        elif not selects(
            get(service.props, "spec", "selector"),
            pod_labels(statefulset.resource_type, statefulset.props),
        ):
            problem = f"{name}, whose selector does not select the pods"
        if problem:
            yield (
                violation(
                    subject,
                    "spec.serviceName",
                    problem,
                    "a headless Service (clusterIP: None) selecting the StatefulSet's pods",
                    "declare the governing headless Service: it gives each pod the stable DNS "
                    "name that KRaft voters and static members are known by",
                ),
                statefulset.urn,
            )


def check_standby(args: StackValidationArgs, cfg: Mapping[str, Any]) -> Iterator[Finding]:
    """Standby state, or a side of a correct active/standby pair (recognised by `pair.side`
    a and b, judged by `processor-pair`): the other side holds the whole state warm."""
    if not cfg["required"]:
        return
    view = StackView(args.resources)
    paired = {side.workload.urn for pair in correct_pairs(view) for side in (pair.a, pair.b)}
    for processor in view.processors():
        if not processor.stateful or processor.standby_replicas >= 1:
            continue
        workload = processor.workload
        if workload.urn in paired:
            continue
        yield (
            violation(
                label(workload.resource_type, workload.props),
                f"{STANDBY_KEY} in its properties",
                processor.standby_found,
                ">= 1, or a side of an active/standby pair (pair.side a and b, each its own "
                "application.id, changelog and StatefulSet, the same input, output and "
                "pair.control.topic: the processor-pair rule)",
                f"set {STANDBY_KEY}=1 (stack setting processor.numStandbyReplicas): each "
                "partition's state then has a warm copy on another instance, so a failover or "
                "a hand-off restores only the changelog tail instead of the whole changelog; or "
                "deploy the processor as a pair (stack setting processor.pair: true)",
            ),
            workload.urn,
        )


POLICIES = [
    stack_rule(
        name="statefulset-pdb",
        description=(
            "Every StatefulSet has a PodDisruptionBudget allowing at most one pod down: node "
            "drains and evictions take one Kafka replica or one processor at a time."
        ),
        level=MANDATORY,
        check=check_pdb,
        thresholds=[Threshold("maxUnavailable", "integer", 1, "Most pods a PDB may let go.", 1)],
    ),
    stack_rule(
        name="statefulset-headless-service",
        description=(
            "Every StatefulSet's serviceName names a headless Service selecting its pods: the "
            "stable per-pod DNS names that KRaft voters and static members rely on."
        ),
        level=MANDATORY,
        check=check_headless_service,
    ),
    stack_rule(
        name="standby-state",
        description=(
            "Where required (prod), the processor keeps standby state (num.standby.replicas >= "
            "1: a warm copy of each partition's state on another instance, so a partition that "
            "moves restores only the changelog tail) or runs as a correct active/standby pair "
            "of deployments (pair.side a and b, see processor-pair)."
        ),
        level=MANDATORY,
        check=check_standby,
        thresholds=[Threshold("required", "boolean", True, "Require standby state on this stack.")],
    ),
]
