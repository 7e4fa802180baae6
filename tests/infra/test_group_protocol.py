"""`processor.groupProtocol`: the classic protocol, or Kafka 4's consumer group protocol (KIP-848)
end to end in the program: the client settings the protocol allows, the group's own session
and heartbeat for the reconciler Job (and its right to set them), and brokers whose bounds admit
them; a stack that contradicts itself fails `pulumi up` naming the setting."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from contract import acl_specs, membership
from contract.processor_keys import CLASSIC_PROTOCOL_ONLY, DEFAULTS
from contract.topic_specs import loads_groups
from infra.config import build_stack_config
from infra.stack_settings import StackConfigError
from offline.render import RecordedStack, record_stack
from tests.infra.conftest import broker_settings, k8s_object, names_of
from tests.infra.conftest import processor_properties as properties

KIP848 = {"processor.groupProtocol": "consumer"}
HEARTBEAT_MS = int(DEFAULTS["consumer.heartbeat.interval.ms"])


@cache
def consumer_stack(stack: str) -> RecordedStack:
    return record_stack(stack, KIP848)


def _topics_config_map(stack: RecordedStack) -> dict[str, Any]:
    return next(
        o
        for o in stack.kubernetes_objects()
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("topics-")
    )


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_consumer_protocol_renders_no_client_side_session_heartbeat_or_assignor(
    stack: str,
) -> None:
    rendered = properties(consumer_stack(stack))
    assert rendered["consumer.group.protocol"] == "consumer"
    assert not set(CLASSIC_PROTOCOL_ONLY) & set(rendered), rendered


def test_the_classic_protocol_keeps_its_client_settings(stack: RecordedStack) -> None:
    rendered = properties(stack)
    assert rendered["consumer.group.protocol"] == "classic"
    assert {"consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"} <= set(rendered)
    assert "groups" not in json.loads(_topics_config_map(stack)["data"]["topics.json"])


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_reconciler_sets_the_groups_session_from_the_restart_budget(stack: str) -> None:
    config = build_stack_config(stack, KIP848)
    recorded = consumer_stack(stack)
    (group,) = loads_groups(_topics_config_map(recorded)["data"]["topics.json"])
    # The processor's group is its application id, which the stack file may set.
    assert group.group == names_of(recorded).application_id
    session = config.processor.computed_session_timeout_ms
    assert group.configs == {
        membership.GROUP_SESSION_TIMEOUT_KEY: str(session),
        membership.GROUP_HEARTBEAT_INTERVAL_KEY: str(min(HEARTBEAT_MS, session // 3)),
    }


def test_a_static_members_session_and_a_handoff_members_differ_as_their_failure_paths() -> None:
    static_dev = {**KIP848, "processor.membershipMode": "static"}
    static = build_stack_config("dev", static_dev).processor.group_configs
    handoff = build_stack_config("prod", KIP848).processor.group_configs
    key = membership.GROUP_SESSION_TIMEOUT_KEY
    # A static member's covers a pod's restart (minutes); a hand-off member's ends soon after
    # a crash (its stopping pods leave the group).
    assert (
        int(static[key]) > 60_000 >= membership.MAX_HANDOFF_SESSION_TIMEOUT_MS >= int(handoff[key])
    )


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_brokers_bounds_admit_the_groups_own_configs(stack: str) -> None:
    env = broker_settings(k8s_object(consumer_stack(stack), "StatefulSet", "kafka"))
    group = build_stack_config(stack, KIP848).processor.group_configs
    for key, ((low_key, _), (high_key, _)) in membership.KIP848_BOUNDS.items():
        low, high = int(env[low_key]), int(env[high_key])
        assert low <= int(group[key]) <= high, (key, low, group[key], high)


def test_the_reconciler_may_set_the_configs_of_the_group_it_configures_and_no_other() -> None:
    def reconciler_groups(recorded: RecordedStack) -> set[tuple[str, str]]:
        users = acl_specs.loads(_topics_config_map(recorded)["data"]["acls.json"])
        (reconciler,) = [u for u in users if u.name == "topic-reconciler"]
        return {
            (acl.resource_name, acl.operation.value)
            for acl in reconciler.acls
            if acl.resource_type is acl_specs.ResourceType.GROUP
        }

    app = names_of(consumer_stack("prod")).application_id
    configured = reconciler_groups(consumer_stack("prod"))
    assert {(app, "ALTER_CONFIGS"), (app, "DESCRIBE_CONFIGS")} <= configured
    assert not {name for name, _ in reconciler_groups(record_stack("prod"))} & {app}


def test_the_protocol_in_the_properties_instead_of_the_setting_fails_naming_the_setting() -> None:
    with pytest.raises(StackConfigError) as raised:
        build_stack_config("dev", {"processor.properties": {"consumer.group.protocol": "consumer"}})
    assert "processor.properties.consumer.group.protocol" in str(raised.value)
    assert "set processor.groupProtocol instead" in str(raised.value)


def test_a_broker_bound_that_refuses_the_groups_session_fails_naming_the_bound() -> None:
    # A static member's session covers a pod's restart: longer than this bound.
    narrow = {
        **KIP848,
        "processor.membershipMode": "static",
        "kafka.configs": {"group.consumer.max.session.timeout.ms": "60000"},
    }
    with pytest.raises(StackConfigError) as raised:
        build_stack_config("dev", narrow)
    message = str(raised.value)
    assert "kafka.configs.group.consumer.max.session.timeout.ms" in message
    assert "consumer.session.timeout.ms=" in message


def test_an_unknown_protocol_names_the_allowed_ones() -> None:
    with pytest.raises(StackConfigError) as raised:
        build_stack_config("dev", {"processor.groupProtocol": "kip848"})
    assert "processor.groupProtocol" in str(raised.value)
    assert "classic, consumer" in str(raised.value)
