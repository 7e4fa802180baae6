"""An active/standby pair of processor deployments (docs/operations.md): two complete
deployments, sides a and b (`pair.side`), each its own consumer group, state and transactional
ids, both consuming all input; only the active one publishes, and which one that is lives in
the pair's compacted control topic (`pair.control.topic`).

A pair is recognised by `pair.side`, never by counting deployments: the sides of one control
topic are partners; sides left over are paired with each other (and then reported for their
different control topics), and a side that still has no partner is a finding.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pulumi_policy import StackValidationArgs

from contract.java_properties import env_reference
from contract.processor_keys import (
    PAIR_CONTROL_TOPIC_KEY,
    PAIR_SIDE_KEY,
    PAIR_SIDES,
    TRANSACTIONAL_ID_KEY,
)
from contract.workload_shapes import NAMESPACE_NAME_LABEL

from .config import MANDATORY, Threshold, stack_rule
from .manifests import (
    CONFIG_MAP,
    env_field_ref,
    get,
    items,
    label,
    name_of,
    namespace_of,
    pod_labels,
    pod_spec,
    processor_container,
)
from .messages import violation
from .stack_view import ProcessorDeployment, StackView
from .topics import TOPICS_KEY, is_compacted, topics_of

Finding = tuple[str, str | None]

ZONE_TOPOLOGY = "topology.kubernetes.io/zone"
_ANTI_AFFINITY = "spec.template.spec.affinity.podAntiAffinity"
_SETTING = "stack setting processor.pair: true renders both sides"


def side_of(processor: ProcessorDeployment) -> str | None:
    """The processor's side of a pair, a or b; None for a single deployment (or a value the
    contract refuses, which `processor-settings-contract` reports)."""
    side = processor.properties.get(PAIR_SIDE_KEY, "").strip()
    return side if side in PAIR_SIDES else None


def control_topic_of(processor: ProcessorDeployment) -> str:
    """The processor's `pair.control.topic` ("" when absent)."""
    return processor.properties.get(PAIR_CONTROL_TOPIC_KEY, "").strip()


@dataclass(frozen=True)
class Pair:
    """Two processor deployments that are sides a and b of one pair."""

    a: ProcessorDeployment
    b: ProcessorDeployment


def _matched(
    sides: Sequence[ProcessorDeployment],
) -> tuple[list[Pair], list[ProcessorDeployment]]:
    """Sides a and b paired in the order they come, and those without a partner."""
    a_sides = [p for p in sides if side_of(p) == PAIR_SIDES[0]]
    b_sides = [p for p in sides if side_of(p) == PAIR_SIDES[1]]
    pairs = [Pair(a, b) for a, b in zip(a_sides, b_sides, strict=False)]
    return pairs, a_sides[len(b_sides) :] + b_sides[len(a_sides) :]


def pairs_of(
    processors: Iterable[ProcessorDeployment],
) -> tuple[list[Pair], list[ProcessorDeployment]]:
    """The pairs among the processors, and the sides left without a partner: partners by
    their control topic first, then what is left by side alone."""
    by_topic: dict[str, list[ProcessorDeployment]] = {}
    for processor in processors:
        if side_of(processor) is not None:
            by_topic.setdefault(control_topic_of(processor), []).append(processor)
    pairs: list[Pair] = []
    left: list[ProcessorDeployment] = []
    for sides in by_topic.values():
        found, unmatched = _matched(sides)
        pairs += found
        left += unmatched
    found, alone = _matched(left)
    return pairs + found, alone


def _transactional_ids(processor: ProcessorDeployment) -> str | None:
    """What the side's transactional ids are: `<StatefulSet name>-<ordinal>` when they are the
    pod names (`${env:POD_NAME}` from the downward API), else the file's value (None: absent,
    which the processor refuses at start)."""
    value = processor.properties.get(TRANSACTIONAL_ID_KEY, "").strip()
    workload = processor.workload
    container = processor_container(pod_spec(workload.resource_type, workload.props)) or {}
    variable = env_reference(value)
    if variable and env_field_ref(container, variable) == "metadata.name":
        return f"{name_of(workload.props)}-<ordinal>"
    return value or None


@dataclass(frozen=True)
class _PairKey:
    """A property the two sides must differ in (`_DISTINCT`) or share (`_SAME`), and why."""

    key: str
    why: str


_DISTINCT = (
    _PairKey(
        "application.id",
        "the application id is the side's consumer group: with one id the sides join one "
        "group and split the input, so neither holds the state the other would take over with "
        f"({_SETTING}, <application id>-a and -b)",
    ),
    _PairKey(
        "changelog.topic",
        "each side restores its state from its own changelog: two sides writing one interleave "
        f"their counts, and a restore from it is neither side's state ({_SETTING}, "
        "<application id>-<side>-counts-changelog)",
    ),
)
_SAME = (
    _PairKey(
        "input.topic",
        "both sides consume all input: a side that reads other records holds other state, and "
        "a switch to it publishes other results",
    ),
    _PairKey(
        "output.topic",
        "a switch moves publishing from one side to the other on the one output topic; with "
        "two, the output's readers lose the table at every switch",
    ),
    _PairKey(
        PAIR_CONTROL_TOPIC_KEY,
        "the active side is named in one control topic that both sides read: with two, both "
        "sides can take themselves for the active one (and both publish), or neither",
    ),
)


def identity_findings(pair: Pair) -> list[Finding]:
    """What makes two sides not a pair: a shared group, changelog or transactional ids, a
    different input, output or control topic. Reported on side b, naming side a."""
    a, b = pair.a, pair.b
    subject, urn = b.properties_subject
    partner = f"side {side_of(a)}'s ({label(a.workload.resource_type, a.workload.props)})"
    findings: list[Finding] = []
    for distinct in _DISTINCT:
        value = b.properties.get(distinct.key, "").strip()
        if value and value == a.properties.get(distinct.key, "").strip():
            findings.append(
                (
                    violation(
                        subject,
                        distinct.key,
                        f"{value}, the same as {partner}",
                        f"its own {distinct.key}, other than side {side_of(a)}'s",
                        distinct.why,
                    ),
                    urn,
                )
            )
    for same in _SAME:
        value, expected = (p.properties.get(same.key, "").strip() for p in (b, a))
        if value and expected and value != expected:
            findings.append(
                (
                    violation(
                        subject,
                        same.key,
                        value,
                        f"the same {same.key} as {partner}: {expected}",
                        same.why,
                    ),
                    urn,
                )
            )
    ids = _transactional_ids(b)
    if ids is not None and ids == _transactional_ids(a):
        workload = b.workload
        findings.append(
            (
                violation(
                    label(workload.resource_type, workload.props),
                    f"its transactional ids ({TRANSACTIONAL_ID_KEY})",
                    f"{ids}, the same as {partner}",
                    f"transactional ids of its own: a StatefulSet name other than side "
                    f"{side_of(a)}'s, with {TRANSACTIONAL_ID_KEY}=${{env:POD_NAME}}",
                    "a producer that starts fences every other producer with its "
                    "transactional id: two sides with the same pod names fence each other at "
                    "every pod start and abort each other's transactions; name each side's "
                    f"StatefulSet after its own application id ({_SETTING})",
                ),
                workload.urn,
            )
        )
    return findings


def _selects(selector: Any, labels: Mapping[str, Any]) -> bool:
    """Whether a Kubernetes label selector (`matchLabels` and `matchExpressions`) selects
    `labels`; an absent selector selects nothing, an empty one everything."""
    if not isinstance(selector, Mapping):
        return False
    match_labels = get(selector, "matchLabels", default={})
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    for expression in items(selector, "matchExpressions"):
        key, operator = get(expression, "key"), get(expression, "operator")
        values = items(expression, "values")
        present = key in labels
        matched = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }.get(str(operator), False)
        if not matched:
            return False
    return True


def _term_covers(term: Any, namespace: str, partner: ProcessorDeployment) -> bool:
    """Whether an anti-affinity term keeps a pod out of the zones of `partner`'s pods."""
    if get(term, "topologyKey") != ZONE_TOPOLOGY:
        return False
    workload = partner.workload
    if not _selects(get(term, "labelSelector"), pod_labels(workload.resource_type, workload.props)):
        return False
    partner_namespace = namespace_of(workload.props)
    names = [str(n) for n in items(term, "namespaces")]
    namespace_selector = get(term, "namespaceSelector")
    if not names and namespace_selector is None:
        return partner_namespace == namespace  # a term without either: the pod's namespace
    return partner_namespace in names or _selects(
        namespace_selector, {NAMESPACE_NAME_LABEL: partner_namespace}
    )


def zone_findings(processor: ProcessorDeployment, partner: ProcessorDeployment) -> list[Finding]:
    """Side `processor`'s pods keep out of every zone that holds a pod of `partner`: a required
    anti-affinity term on the zone selecting the partner's pods."""
    workload = processor.workload
    namespace = namespace_of(workload.props)
    anti = get(pod_spec(workload.resource_type, workload.props), "affinity", "podAntiAffinity")
    required = items(anti, "requiredDuringSchedulingIgnoredDuringExecution")
    preferred = [
        get(t, "podAffinityTerm")
        for t in items(anti, "preferredDuringSchedulingIgnoredDuringExecution")
    ]
    if any(_term_covers(term, namespace, partner) for term in required):
        return []
    partner_label = label(partner.workload.resource_type, partner.workload.props)
    preferred_only = any(_term_covers(term, namespace, partner) for term in preferred)
    found = "preferred only" if preferred_only else "absent"
    return [
        (
            violation(
                label(workload.resource_type, workload.props),
                f"{_ANTI_AFFINITY}.requiredDuringSchedulingIgnoredDuringExecution, a term "
                f"against side {side_of(partner)}'s pods on {ZONE_TOPOLOGY}",
                found,
                f"a required term with topologyKey {ZONE_TOPOLOGY} whose labelSelector selects "
                f"the pods of side {side_of(partner)} ({partner_label})",
                "a pair is there so that one side survives what stops the other: sides that "
                "share a zone go down together with it; add the term to both sides "
                "(processor.pair renders it, required in a prod stack)",
            ),
            workload.urn,
        )
    ]


def _lone_side(processor: ProcessorDeployment) -> Finding:
    side = side_of(processor)
    other = next(s for s in PAIR_SIDES if s != side)
    subject, urn = processor.properties_subject
    topic = control_topic_of(processor) or "its pair.control.topic"
    return (
        violation(
            subject,
            PAIR_SIDE_KEY,
            f"{side}, with no side {other} in the stack for it",
            f"a partner: a processor deployment with {PAIR_SIDE_KEY}={other} and "
            f"{PAIR_CONTROL_TOPIC_KEY}={topic}",
            f"deploy both sides ({_SETTING}), or, for a single deployment, leave out "
            f"{PAIR_SIDE_KEY} and {PAIR_CONTROL_TOPIC_KEY} (processor.pair: false): a side alone "
            "publishes only while the control topic names it, and no side stands by to take over",
        ),
        urn,
    )


def _missing_control_topic(processor: ProcessorDeployment) -> Finding:
    subject, urn = processor.properties_subject
    return (
        violation(
            subject,
            PAIR_CONTROL_TOPIC_KEY,
            "absent",
            f"the pair's control topic (with {PAIR_SIDE_KEY}={side_of(processor)})",
            "name the compacted topic that says which side publishes; the processor refuses "
            f"to start as a side without it ({_SETTING} and the topic)",
        ),
        urn,
    )


def _uncompacted_control_topics(
    view: StackView, control_topics: Sequence[str]
) -> Iterator[Finding]:
    """A control topic the stack declares keeps its last record per key forever."""
    for config_map in view.of_type(CONFIG_MAP):
        topics = topics_of(config_map.resource_type, config_map.props)
        for topic in topics if isinstance(topics, list) else ():
            policy = topic.configs.get("cleanup.policy", "delete")
            if topic.name in control_topics and not is_compacted(policy):
                yield (
                    violation(
                        f"{label(config_map.resource_type, config_map.props)} "
                        f"data[{TOPICS_KEY}] topic {topic.name}",
                        "configs[cleanup.policy]",
                        policy,
                        f"a list that includes compact (the {PAIR_CONTROL_TOPIC_KEY} of a pair)",
                        "set cleanup.policy=compact: with delete, the record naming the active "
                        "side expires after retention.ms, and then no side knows whether it "
                        "publishes",
                    ),
                    config_map.urn,
                )


def correct_pairs(view: StackView) -> list[Pair]:
    """The stack's pairs whose sides are two deployments of one pipeline: their own group,
    changelog and transactional ids, the same input, output and control topic."""
    pairs, _ = pairs_of(view.processors())
    return [
        pair
        for pair in pairs
        if control_topic_of(pair.a) and control_topic_of(pair.b) and not identity_findings(pair)
    ]


def zone_redundant_sides(view: StackView) -> set[str]:
    """The workloads (URNs) of the sides of correct pairs that keep out of their partner's zones
    by a required term: the other side, whole in another zone, is such a side's zone redundancy,
    in place of a zone spread of its own (`statefulset-spread`)."""
    return {
        side.workload.urn
        for pair in correct_pairs(view)
        for side, partner in ((pair.a, pair.b), (pair.b, pair.a))
        if not zone_findings(side, partner)
    }


def check_pair(args: StackValidationArgs, cfg: Mapping[str, Any]) -> Iterator[Finding]:
    """Sides of a pair come in twos, each its own deployment of the same pipeline, and (where
    required) never in the same zone."""
    view = StackView(args.resources)
    processors = view.processors()
    pairs, alone = pairs_of(processors)
    for processor in processors:
        if side_of(processor) is not None and not control_topic_of(processor):
            yield _missing_control_topic(processor)
    for processor in alone:
        yield _lone_side(processor)
    for pair in pairs:
        yield from identity_findings(pair)
        if cfg["requireZoneAntiAffinity"]:
            yield from zone_findings(pair.a, pair.b)
            yield from zone_findings(pair.b, pair.a)
    control_topics = [
        topic
        for pair in pairs
        for topic in dict.fromkeys((control_topic_of(pair.a), control_topic_of(pair.b)))
        if topic
    ]
    yield from _uncompacted_control_topics(view, control_topics)


POLICIES = [
    stack_rule(
        name="processor-pair",
        description=(
            "An active/standby pair (pair.side a and b) is two deployments of the same "
            "pipeline: each side has a partner, its own application.id (group), changelog and "
            "transactional ids (StatefulSet name), the same input, output and "
            "pair.control.topic as the other, a compacted control topic, and, where required "
            "(prod), a required pod anti-affinity on topology.kubernetes.io/zone against the "
            "other side's pods: one zone's outage leaves one side whole."
        ),
        level=MANDATORY,
        check=check_pair,
        thresholds=[
            Threshold(
                "requireZoneAntiAffinity",
                "boolean",
                True,
                "Require each side's pods to keep out of the other side's zones.",
            )
        ],
    ),
]
