"""The whole pack over the real dev and prod recordings, and mutations of them that each
reintroduce one of the seed lessons' mistakes."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from pulumi.output import Unknown

from tests.infra.conftest import names_of
from tests.policies.conftest import stack_config
from tests.policies.handmade_stack import edit_broker_settings

STACKS = ("dev", "prod")
# Dev runs PLAINTEXT, a visible stack setting (security.clientListener): the listener rule says
# so as an advisory, once per listener (client, inter-broker, controller), and nothing else fires.
EXPECTED_FINDINGS = {
    "dev": [("kafka-listener-encryption", "advisory")] * 3,
    "prod": [],
}


@pytest.mark.parametrize("stack", STACKS)
def test_real_stacks_have_no_mandatory_violations(run, recorded_stacks, stack: str) -> None:
    violations = run(recorded_stacks[stack].resources, stack_config(stack))
    assert [v for v in violations if v.mandatory] == []


@pytest.mark.parametrize("stack", STACKS)
def test_both_real_stacks_are_clean_but_for_dev_plaintext(run, recorded_stacks, stack: str) -> None:
    """Prod: not even an advisory finding (it keeps standby state: hand-off, one standby)."""
    violations = run(recorded_stacks[stack].resources, stack_config(stack))
    assert sorted((v.policy, v.level) for v in violations) == EXPECTED_FINDINGS[stack]


@pytest.mark.parametrize("stack", STACKS)
def test_a_preview_of_a_new_stack_runs_every_rule_with_the_same_findings(
    run, recorded_stacks, stack: str
) -> None:
    """Before the first `up`, what the random and TLS providers make is unknown (prod's
    certificate hash in the pods' annotations, a generated cluster id): a rule that reads such a
    value is skipped by the engine, so the pull request's preview would never have run it."""
    from offline.render import record_stack

    recorded = record_stack(stack, preview=True)
    if stack == "prod":  # else this test would prove nothing
        assert any(isinstance_deep(r.props, Unknown) for r in recorded.resources)
    preview = run(recorded.resources, stack_config(stack))
    assert [v.message for v in preview if "can't run policy" in v.message] == []
    assert sorted((v.policy, v.level) for v in preview) == EXPECTED_FINDINGS[stack]


def isinstance_deep(value: Any, kind: type) -> bool:
    """Whether `value` or anything inside it is a `kind`."""
    if isinstance(value, dict):
        return any(isinstance_deep(v, kind) for v in value.values())
    if isinstance(value, list):
        return any(isinstance_deep(v, kind) for v in value)
    return isinstance(value, kind)


@pytest.mark.parametrize("scrape", ["podMonitor", "annotations"])
def test_the_pack_passes_prod_with_each_metrics_scrape_choice(run, scrape: str) -> None:
    from offline.render import record_stack

    recorded = record_stack("prod", {"processor": {"metricsScrape": scrape}})
    assert run(recorded.resources, stack_config("prod")) == []


def test_the_pack_judges_prod_after_a_rotation_as_before_it(run, recorded_stacks) -> None:
    """Revision 2 renders SCRAM-SHA-256 clients, a new pair of reconciler and retire Jobs and
    the previous password in the reconciler's mount: the pack finds what it finds in revision
    1's (SCRAM-SHA-512), no more."""
    from offline.render import record_stack

    rotated = record_stack("prod", {"security": {"credentialsRevision": 2}})
    before = run(recorded_stacks["prod"].resources, stack_config("prod"))
    after = run(rotated.resources, stack_config("prod"))
    assert sorted((v.policy, v.level) for v in after) == sorted((v.policy, v.level) for v in before)


def test_prod_without_standby_state_is_blocked(run) -> None:
    from offline.render import record_stack

    recorded = record_stack(
        "prod", {"processor": {"membershipMode": "static", "numStandbyReplicas": 0}}
    )
    (violation,) = run(recorded.resources, stack_config("prod"))
    assert (violation.policy, violation.level) == ("standby-state", "mandatory")
    assert "num.standby.replicas in its properties is 0" in violation.message
    assert "processor.numStandbyReplicas" in violation.message


def _find(resources: list[Any], type_suffix: str, name: str) -> int:
    matches = [
        i for i, r in enumerate(resources) if r.type.endswith(type_suffix) and r.name == name
    ]
    assert len(matches) == 1, f"{type_suffix} {name}: {len(matches)} matches"
    return matches[0]


def _pod(props: dict[str, Any]) -> dict[str, Any]:
    return props["spec"]["template"]["spec"]


def _broker_settings(changes: dict[str, str]) -> Callable[[dict[str, Any]], None]:
    return lambda props: edit_broker_settings(_pod(props)["containers"][0], changes)


def _env(value_by_name: dict[str, str]) -> Callable[[dict[str, Any]], None]:
    def edit(props: dict[str, Any]) -> None:
        env = _pod(props)["containers"][0]["env"]
        env[:] = [e for e in env if e["name"] not in value_by_name]
        env.extend({"name": k, "value": v} for k, v in value_by_name.items())

    return edit


def _property(key: str, value: str | None) -> Callable[[dict[str, Any]], None]:
    def edit(props: dict[str, Any]) -> None:
        text = props["data"]["processor.properties"]
        text = re.sub(rf"(?m)^{re.escape(key)}=.*\n", "", text)
        props["data"]["processor.properties"] = text + (f"{key}={value}\n" if value else "")

    return edit


def _properties(**value_by_key: str | None) -> Callable[[dict[str, Any]], None]:
    def edit(props: dict[str, Any]) -> None:
        for key, value in value_by_key.items():
            _property(key, value)(props)

    return edit


def _topics(edit_topic: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def edit(props: dict[str, Any]) -> None:
        data = json.loads(props["data"]["topics.json"])
        for topic in data["topics"]:
            edit_topic(topic)
        props["data"]["topics.json"] = json.dumps(data)

    return edit


def _changelog(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    def edit(topic: dict[str, Any]) -> None:
        if topic["role"] == "changelog":
            topic["configs"][key] = value

    return edit


def _below_budget(props: dict[str, Any]) -> None:
    # The recorded value is the computed budget plus a margin; 45 s (the client default) is below.
    _property("consumer.session.timeout.ms", "45000")(props)


def _set(*path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(props: dict[str, Any]) -> None:
        target = props
        for key in path[:-1]:
            target = target.setdefault(key, {})
        if value is None:
            target.pop(path[-1], None)
        else:
            target[path[-1]] = value

    return edit


# A logical name that is the stack's application id (the processor's PodDisruptionBudget's): a
# stack file may set the id, so a mutation names it by this stand-in, resolved per stack.
APPLICATION_ID = "<the stack's application id>"

# (mutation id, resource (type suffix, logical name), edit of its props, rule that must fire)
MUTATIONS: list[tuple[str, tuple[str, str], Callable[[dict[str, Any]], None] | None, str]] = [
    ("processor-as-deployment", (":StatefulSet", "processor"), None, "workload-shapes"),
    (
        "min-ready-seconds-0",
        (":StatefulSet", "processor"),
        _set("spec", "minReadySeconds", value=0),
        "processor-min-ready-seconds",
    ),
    (
        "no-volume-claim-templates",
        (":StatefulSet", "processor"),
        _set("spec", "volumeClaimTemplates", value=None),
        "processor-state-volume",
    ),
    (
        "changelog-cleanup-delete",
        (":ConfigMap", "topics-specs"),
        _topics(_changelog("cleanup.policy", "delete")),
        "changelog-compacted",
    ),
    (
        "changelog-segment-1GiB",
        (":ConfigMap", "topics-specs"),
        _topics(_changelog("segment.bytes", str(2**30))),
        "changelog-segment-size",
    ),
    (
        "replication-factor-2",
        (":ConfigMap", "topics-specs"),
        _topics(lambda t: t.update(replication_factor=2)),
        "topic-durability",
    ),
    (
        "topic-min-insync-1",
        (":ConfigMap", "topics-specs"),
        _topics(lambda t: t["configs"].update({"min.insync.replicas": "1"})),
        "topic-durability",
    ),
    (
        "broker-min-insync-1",
        (":StatefulSet", "kafka"),
        _broker_settings({"min.insync.replicas": "1"}),
        "kafka-durability-configs",
    ),
    (
        "one-broker",
        (":StatefulSet", "kafka"),
        _set("spec", "replicas", value=1),
        "kafka-quorum-size",
    ),
    (
        "session-timeout-below-budget",
        (":ConfigMap", "processor-config"),
        _below_budget,
        "group-session-timeout",
    ),
    (
        "static-member-without-instance-id",
        (":ConfigMap", "processor-config"),
        _properties(**{"membership.mode": "static", "consumer.group.instance.id": None}),
        "group-static-membership",
    ),
    (
        "handoff-without-standby",
        (":ConfigMap", "processor-config"),
        _properties(
            **{
                "membership.mode": "handoff",
                "consumer.group.instance.id": None,
                "num.standby.replicas": "0",
            }
        ),
        "group-static-membership",
    ),
    (
        "eager-assignor",
        (":ConfigMap", "processor-config"),
        _property("consumer.partition.assignment.strategy", "range"),
        "group-cooperative-assignor",
    ),
    (
        "processor-replicas-above-partitions",
        (":StatefulSet", "processor"),
        _set("spec", "replicas", value=100),
        "processor-replicas-within-partitions",
    ),
    (
        "missing-pdb",
        (":PodDisruptionBudget", APPLICATION_ID),
        None,
        "statefulset-pdb",
    ),
    (
        "max-unavailable-2",
        (":StatefulSet", "processor"),
        _set(
            "spec",
            "updateStrategy",
            value={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}},
        ),
        "statefulset-rolling-update",
    ),
    (
        "unclean-leader-election",
        (":StatefulSet", "kafka"),
        _broker_settings({"unclean.leader.election.enable": "true"}),
        "kafka-durability-configs",
    ),
    (
        "literal-key-password",
        (":StatefulSet", "kafka"),
        _env({"ssl.key.password": "hunter2"}),
        "credentials-in-secrets",
    ),
    (
        "literal-sasl-password",
        (":ConfigMap", "processor-config"),
        _property("sasl.password", "hunter2"),
        "credentials-in-secrets",
    ),
]


def _mutated(resources: tuple[Any, ...], mutation: str, target: tuple[str, str], edit) -> list[Any]:
    result = copy.deepcopy(list(resources))
    index = _find(result, *target)
    resource = result[index]
    if mutation == "missing-pdb":
        del result[index]
    elif mutation == "processor-as-deployment":
        props = resource.props
        props["kind"] = "Deployment"
        for key in ("serviceName", "volumeClaimTemplates", "persistentVolumeClaimRetentionPolicy"):
            props["spec"].pop(key, None)
        props["spec"].pop("updateStrategy", None)
        props["spec"].pop("podManagementPolicy", None)
        result[index] = dataclasses.replace(resource, type="kubernetes:apps/v1:Deployment")
    else:
        edit(resource.props)
    return result


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize(
    ("mutation", "target", "edit", "rule"), MUTATIONS, ids=[m[0] for m in MUTATIONS]
)
def test_mutation_of_the_real_stack_is_caught_by_its_rule(
    run, recorded_stacks, stack, mutation, target, edit, rule
) -> None:
    recording = recorded_stacks[stack].resources
    untouched = copy.deepcopy(recording)
    type_suffix, name = target
    if name == APPLICATION_ID:
        name = names_of(recorded_stacks[stack]).application_id
    resources = _mutated(recording, mutation, (type_suffix, name), edit)
    violations = run(resources, stack_config(stack))
    caught = [v for v in violations if v.policy == rule]
    assert caught, f"{rule} did not fire; got {[(v.policy, v.message) for v in violations]}"
    assert all(v.mandatory for v in caught)
    assert all("Fix: " in v.message for v in caught)
    # The copy was mutated, not the recording the other tests share.
    assert recording == untouched


@pytest.mark.parametrize("stack", STACKS)
def test_the_pack_passes_each_stack_under_the_consumer_group_protocol(run, stack: str) -> None:
    """KIP-848: no client-side session, the group's own configs for the reconciler, the
    reconciler's right to set them, brokers whose bounds admit them: nothing more found."""
    from offline.render import record_stack

    recorded = record_stack(stack, {"processor.groupProtocol": "consumer"})
    violations = run(recorded.resources, stack_config(stack))
    assert sorted((v.policy, v.level) for v in violations) == EXPECTED_FINDINGS[stack]


def test_a_kip848_groups_own_session_too_long_for_a_hand_off_is_blocked(run) -> None:
    from offline.render import record_stack

    recorded = record_stack("prod", {"processor.groupProtocol": "consumer"})
    resources = recorded.resources
    specs = next(r for r in resources if "topics.json" in r.props.get("data", {}))

    def longer(props: dict[str, Any]) -> None:
        data = json.loads(props["data"]["topics.json"])
        data["groups"][0]["configs"]["consumer.session.timeout.ms"] = "45000"
        props["data"]["topics.json"] = json.dumps(data)

    longer(specs.props)
    caught = [
        v for v in run(resources, stack_config("prod")) if v.policy == "group-session-timeout"
    ]
    assert caught and all(v.mandatory for v in caught)
    group = names_of(recorded).application_id
    assert f"data[topics.json] group {group}" in caught[0].message
    assert "consumer.session.timeout.ms is 45000" in caught[0].message
