"""The pack on an active/standby pair (`processor-pair`, and the pair in `standby-state`,
`statefulset-spread` and `kafka-least-privilege`), through the engine's argument objects: the
rendered pair stacks pass, and each breach of a pair, made in a copy of the rendered prod pair,
is found and named.

The pair is recognised by `pair.side` (a, b), never by counting deployments: two processors with
their own application ids but no sides are no pair, and a side without a partner is a finding.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from offline.render import record_stack
from tests.infra.conftest import PAIR, names_of, pair_stack
from tests.policies.conftest import Evaluate, stack_config
from tests.policies.handmade_stack import changed, with_properties

RULE = "processor-pair"
ZONE = "topology.kubernetes.io/zone"
STS, CONFIG_MAP = ":StatefulSet", ":ConfigMap"
# The dev stack runs PLAINTEXT, which the listener rule reports as advisories (and nothing else).
PLAINTEXT = [("kafka-listener-encryption", "advisory")] * 3

# Recorded resources, which `handmade_stack.changed` copies and edits as it does its own.
Resources = list[Any]
Edit = Callable[[Any], None]


class Sides(NamedTuple):
    """The rendered prod pair's names (its stack file may set them): its sides' application ids
    (their StatefulSets' names) and the topics both read and write. The cases' texts name them
    as `{a}`, `{input}`, ..."""

    a: str
    b: str
    input: str
    output: str
    control: str


def _sides() -> Sides:
    names = names_of(pair_stack("prod"))
    app = names.application_id
    return Sides(
        f"{app}-a", f"{app}-b", names.input_topic, names.output_topic, names.pair_control_topic
    )


def _prod_pair() -> Resources:
    return list(pair_stack("prod").resources)


def _side(side: str) -> str:
    """The side's StatefulSet's logical name (its ConfigMap's is `<it>-config`)."""
    return f"processor-{side}"


def _findings(run: Evaluate, resources: Resources, rule: str = RULE, stack: str = "prod"):
    return [v for v in run(resources, stack_config(stack)) if v.policy == rule]


def _without_zone_term(*, keep_preferred: bool = False) -> Edit:
    """Drop the required zone term against the other side (keep it as a preferred one)."""

    def edit(resource: Any) -> None:
        anti = resource.props["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        required = anti["requiredDuringSchedulingIgnoredDuringExecution"]
        zone = [t for t in required if t["topologyKey"] == ZONE]
        required[:] = [t for t in required if t["topologyKey"] != ZONE]
        if keep_preferred:
            anti["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": 100, "podAffinityTerm": term} for term in zone
            ]

    return edit


def _control_topic(key: str, value: str) -> Edit:
    """Set a config of the control topic in the reconciler's topics.json."""

    def edit(resource: Any) -> None:
        data = json.loads(resource.props["data"]["topics.json"])
        for topic in data["topics"]:
            if topic["role"] == "pair-control":
                topic["configs"][key] = value
        resource.props["data"]["topics.json"] = json.dumps(data)

    return edit


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_a_rendered_pair_passes_the_whole_pack(run: Evaluate, stack: str, protocol: str) -> None:
    recorded = (
        pair_stack(stack)
        if protocol == "classic"
        else record_stack(stack, {**PAIR, "processor.groupProtocol": protocol})
    )
    violations = run(recorded.resources, stack_config(stack))
    assert sorted((v.policy, v.level) for v in violations) == (PLAINTEXT if stack == "dev" else [])


# (case, side whose resource is edited, its type, its edit given the sides' names, the finding)
BREACHES: list[tuple[str, str, str, Callable[[Sides], Edit], str]] = [
    (
        "same-application-id",
        "b",
        CONFIG_MAP,
        lambda sides: with_properties({"application.id": sides.a}),
        "data[processor.properties]: application.id is {a}, the same as side a's (StatefulSet "
        "streaming/{a}); required: its own application.id, other than side a's. Fix: the "
        "application id is the side's consumer group",
    ),
    (
        "same-changelog",
        "b",
        CONFIG_MAP,
        lambda sides: with_properties({"changelog.topic": f"{sides.a}-counts-changelog"}),
        "changelog.topic is {a}-counts-changelog, the same as side a's (StatefulSet "
        "streaming/{a}); required: its own changelog.topic, other than side a's",
    ),
    (
        "different-input",
        "b",
        CONFIG_MAP,
        lambda _: with_properties({"input.topic": "other-views"}),
        "input.topic is other-views; required: the same input.topic as side a's (StatefulSet "
        "streaming/{a}): {input}. Fix: both sides consume all input",
    ),
    (
        "different-output",
        "b",
        CONFIG_MAP,
        lambda _: with_properties({"output.topic": "other-counts"}),
        "output.topic is other-counts; required: the same output.topic as side a's",
    ),
    (
        "different-control-topic",
        "b",
        CONFIG_MAP,
        lambda _: with_properties({"pair.control.topic": "other-control"}),
        "pair.control.topic is other-control; required: the same pair.control.topic as side a's",
    ),
    (
        "no-control-topic",
        "a",
        CONFIG_MAP,
        lambda _: with_properties({"pair.control.topic": None}),
        "data[processor.properties]: pair.control.topic is absent; required: the pair's control "
        "topic (with pair.side=a)",
    ),
    (
        "no-zone-anti-affinity",
        "a",
        STS,
        lambda _: _without_zone_term(),
        "StatefulSet streaming/{a}: spec.template.spec.affinity.podAntiAffinity."
        "requiredDuringSchedulingIgnoredDuringExecution, a term against side b's pods on "
        "topology.kubernetes.io/zone is absent; required: a required term with topologyKey "
        "topology.kubernetes.io/zone whose labelSelector selects the pods of side b (StatefulSet "
        "streaming/{b})",
    ),
    (
        "zone-anti-affinity-preferred-only",
        "b",
        STS,
        lambda _: _without_zone_term(keep_preferred=True),
        "a term against side a's pods on topology.kubernetes.io/zone is preferred only",
    ),
]


@pytest.mark.parametrize(
    ("case", "side", "suffix", "edit", "expected"), BREACHES, ids=[b[0] for b in BREACHES]
)
def test_each_breach_of_a_pair_is_found_naming_the_resource_key_value_and_fix(
    run: Evaluate,
    case: str,
    side: str,
    suffix: str,
    edit: Callable[[Sides], Edit],
    expected: str,
) -> None:
    recording = _prod_pair()
    untouched = copy.deepcopy(recording)
    sides = _sides()
    name = _side(side) + ("-config" if suffix == CONFIG_MAP else "")
    findings = _findings(run, changed(recording, name, edit(sides), suffix))
    messages = [v.message for v in findings]
    assert any(expected.format(**sides._asdict()) in m for m in messages), messages
    assert all(v.mandatory and " Fix: " in v.message for v in findings)
    # A copy was changed, not the recording the other tests share.
    assert recording == untouched


def test_sides_whose_pods_share_names_share_transactional_ids(run: Evaluate) -> None:
    """Side b as a StatefulSet of side a's name in another namespace: its pods, and so its
    transactional ids, are side a's, and each side's producers fence the other's."""
    sides = _sides()

    def elsewhere(**metadata: str) -> Edit:
        return lambda r: r.props["metadata"].update(namespace="streaming-b", **metadata)

    resources = changed(_prod_pair(), _side("b"), elsewhere(name=sides.a), STS)
    resources = changed(resources, f"{_side('b')}-config", elsewhere(), CONFIG_MAP)
    messages = [v.message for v in _findings(run, resources)]
    assert any(
        m.startswith(
            f"StatefulSet streaming-b/{sides.a}: its transactional ids (producer.transactional.id)"
            f" is {sides.a}-<ordinal>, the same as side a's (StatefulSet streaming/{sides.a}); "
            "required: transactional ids of its own: a StatefulSet name other than side a's"
        )
        for m in messages
    ), messages


def test_a_side_without_its_partner_is_a_finding(run: Evaluate) -> None:
    alone = [r for r in _prod_pair() if r.name != _side("b")]
    (violation,) = _findings(run, alone)
    assert violation.mandatory
    assert violation.message.startswith(f"ConfigMap streaming/{_sides().a}-config-")
    assert "pair.side is a, with no side b in the stack for it; required: a partner: a " in (
        violation.message
    )
    assert f"pair.control.topic={_sides().control}" in violation.message
    assert "Fix: deploy both sides (stack setting processor.pair: true" in violation.message


def test_dev_does_not_require_the_sides_apart_in_zones(run: Evaluate) -> None:
    resources = changed(_prod_pair(), _side("a"), _without_zone_term(), STS)
    assert [v.level for v in _findings(run, resources)] == ["mandatory"]
    assert _findings(run, resources, stack="dev") == []


def test_a_control_topic_that_is_not_compacted_is_a_finding(run: Evaluate) -> None:
    resources = changed(
        _prod_pair(), "topics-specs", _control_topic("cleanup.policy", "delete"), CONFIG_MAP
    )
    (violation,) = _findings(run, resources)
    control = _sides().control
    assert f"data[topics.json] topic {control}: configs[cleanup.policy] is delete" in (
        violation.message
    )


# --- statefulset-spread: the pair is a side's zone redundancy, when the sides keep apart ------

SPREAD = "statefulset-spread"


def _without_spread(resource: Any) -> None:
    resource.props["spec"]["template"]["spec"].pop("topologySpreadConstraints", None)


def _spread_subjects(run: Evaluate, resources: Resources) -> list[str]:
    """The StatefulSets `statefulset-spread` finds without a zone spread, by name."""
    return sorted(
        v.message.split(":")[0].removeprefix("StatefulSet streaming/")
        for v in _findings(run, resources, SPREAD)
        if "topologySpreadConstraints" in v.message
    )


def test_the_spread_rule_accepts_a_correct_pair_and_still_requires_a_single_deployments(
    run: Evaluate,
) -> None:
    assert _findings(run, _prod_pair(), SPREAD) == []
    single: Resources = list(record_stack("prod").resources)
    app = names_of(pair_stack("prod")).application_id
    assert _spread_subjects(run, changed(single, "processor", _without_spread, STS)) == [app]


def test_a_side_without_the_term_against_the_other_side_needs_its_own_spread(
    run: Evaluate,
) -> None:
    resources = changed(_prod_pair(), _side("a"), _without_zone_term(), STS)
    (violation,) = _findings(run, resources, SPREAD)
    sides = _sides()
    assert violation.message.startswith(
        f"StatefulSet streaming/{sides.a}: spec.template.spec.topologySpreadConstraints is absent; "
        "required: a constraint on topology.kubernetes.io/zone, or, as a side of an "
        "active/standby pair, a required pod anti-affinity term on topology.kubernetes.io/zone "
        "against the other side's pods (processor-pair)"
    ), violation.message
    # A preferred term is not enough: it lets both sides into one zone.
    preferred = changed(_prod_pair(), _side("b"), _without_zone_term(keep_preferred=True), STS)
    assert _spread_subjects(run, preferred) == [sides.b]


@pytest.mark.parametrize(
    ("edited", "edit"),
    [
        (("b",), lambda sides: with_properties({"application.id": sides.a})),
        (("a", "b"), lambda _: with_properties({"pair.side": None, "pair.control.topic": None})),
    ],
    ids=["sides-sharing-a-group", "two-deployments-without-sides"],
)
def test_a_zone_term_against_a_workload_that_is_no_correct_partner_is_no_zone_redundancy(
    run: Evaluate, edited: tuple[str, ...], edit: Callable[[Sides], Edit]
) -> None:
    resources = _prod_pair()
    for side in edited:
        resources = changed(resources, f"{_side(side)}-config", edit(_sides()), CONFIG_MAP)
    assert _spread_subjects(run, resources) == sorted((_sides().a, _sides().b))


# --- standby-state: a correct pair stands in for standby replicas, and only a correct one ---

NO_STANDBY = {"processor.membershipMode": "static", "processor.numStandbyReplicas": 0}


def test_standby_state_accepts_a_correct_pair_without_standby_replicas(run: Evaluate) -> None:
    recorded = record_stack("prod", {**PAIR, **NO_STANDBY})
    assert run(recorded.resources, stack_config("prod")) == []
    # The same processor alone is blocked: a correct pair is what makes the difference.
    single = record_stack("prod", NO_STANDBY)
    assert {v.policy for v in run(single.resources, stack_config("prod"))} == {"standby-state"}


@pytest.mark.parametrize(
    ("edited", "edit"),
    [
        (("b",), lambda sides: with_properties({"application.id": sides.a})),
        (("a", "b"), lambda _: with_properties({"pair.side": None, "pair.control.topic": None})),
    ],
    ids=["sides-sharing-a-group", "two-deployments-without-sides"],
)
def test_standby_state_accepts_no_pair_that_is_not_a_correct_one(
    run: Evaluate, edited: tuple[str, ...], edit: Callable[[Sides], Edit]
) -> None:
    resources: Resources = list(record_stack("prod", {**PAIR, **NO_STANDBY}).resources)
    for side in edited:
        resources = changed(resources, f"{_side(side)}-config", edit(_sides()), CONFIG_MAP)
    standby = _findings(run, resources, "standby-state")
    assert len(standby) == 2, standby
    assert all(v.mandatory for v in standby)
    assert "or a side of an active/standby pair (pair.side a and b" in standby[0].message


# --- kafka-least-privilege: the sides' and the switch's rights -------------------------------


def _acl(user: str, resource_type: str, name: str, operation: str) -> Edit:
    def edit(resource: Any) -> None:
        data = json.loads(resource.props["data"]["acls.json"])
        (found,) = [u for u in data["users"] if u["name"] == user]
        found["acls"].append(
            {
                "principal": f"User:{user}",
                "resource_type": resource_type,
                "resource_name": name,
                "pattern_type": "LITERAL",
                "operation": operation,
            }
        )
        resource.props["data"]["acls.json"] = json.dumps(data)

    return edit


# (user, resource type, name, operation, what the finding says), names as `Sides` fields.
EXCESS = [
    (
        "pair-switch",
        "TOPIC",
        "{output}",
        "WRITE",
        "a topic other than its own ({control}, {input}), more than the pair switch pair-switch "
        "needs",
    ),
    ("pair-switch", "GROUP", "{a}", "READ", "READ on group {a}, where it needs only DESCRIBE"),
    ("{a}", "TOPIC", "{b}-counts-changelog", "READ", "a topic other than its own"),
    ("{b}", "GROUP", "{a}", "READ", "a group other than its own ({b})"),
]


@pytest.mark.parametrize(
    ("user", "resource_type", "name", "operation", "found"),
    EXCESS,
    ids=[
        "switch-writes-output",
        "switch-joins-a-group",
        "side-reads-the-others-state",
        "side-joins-the-others-group",
    ],
)
def test_a_right_beyond_a_sides_or_the_switchs_own_is_a_finding(
    run: Evaluate, user: str, resource_type: str, name: str, operation: str, found: str
) -> None:
    names = _sides()._asdict()
    acl = _acl(user.format(**names), resource_type, name.format(**names), operation)
    resources = changed(_prod_pair(), "topics-specs", acl, CONFIG_MAP)
    messages = [v.message for v in _findings(run, resources, "kafka-least-privilege")]
    assert len(messages) == 1, messages
    assert found.format(**names) in messages[0]


def test_the_switchs_acls_without_a_pair_belong_to_no_known_user(run: Evaluate) -> None:
    """Two deployments without sides: the switch's rights come from the sides' control topic."""
    resources = _prod_pair()
    for side in ("a", "b"):
        resources = changed(
            resources,
            f"{_side(side)}-config",
            with_properties({"pair.side": None, "pair.control.topic": None}),
            CONFIG_MAP,
        )
    messages = [v.message for v in _findings(run, resources, "kafka-least-privilege")]
    assert any(
        "is for User:pair-switch, a principal the pack cannot attribute" in m for m in messages
    )
