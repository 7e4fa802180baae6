"""`processor.pair`: the processor as an active/standby pair (docs/operations.md). Two complete
deployments, sides a and b, each its own StatefulSet, group, changelog, transactional ids and
user, both reading the same input and writing the same output and dead-letter topics; the pair's
compacted control topic, which both sides read and write and the switch writes; the sides kept
out of each other's zones in prod. A stack without the setting renders as it did."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contract import acl_specs
from contract.acl_specs import PAIR_SWITCH_USER, ResourceType
from contract.processor_keys import PAIR_SIDES
from contract.topic_specs import TopicRole, loads, loads_groups
from infra.config import build_stack_config
from infra.stack_settings import PairImagesConfig, StackConfigError
from offline.render import RecordedStack, record_stack
from tests.infra.conftest import PAIR, k8s_object, names_of, pair_stack, stack_config_of
from tests.infra.conftest import processor_properties as properties

STACKS = ("dev", "prod")
ZONE = "topology.kubernetes.io/zone"


def _sides(stack: RecordedStack) -> dict[str, str]:
    """Side -> its application id (the StatefulSet's name)."""
    app = names_of(stack).application_id
    return {side: f"{app}-{side}" for side in PAIR_SIDES}


def _specs_config_map(stack: RecordedStack) -> dict[str, Any]:
    return next(
        o
        for o in stack.kubernetes_objects()
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("topics-")
    )


def _grants(stack: RecordedStack, user: str) -> set[tuple[str, str, str, str]]:
    """(resource type, name, pattern, operation) of every ACL `user` holds in acls.json."""
    users = acl_specs.loads(_specs_config_map(stack)["data"]["acls.json"])
    (found,) = [u for u in users if u.name == user]
    return {
        (acl.resource_type.value, acl.resource_name, acl.pattern_type.value, acl.operation.value)
        for acl in found.acls
    }


def _by_name(stack: RecordedStack) -> dict[tuple[str, str], dict[str, Any]]:
    """The manifests by kind and name (the order they are registered in varies)."""
    return {(o["kind"], o["metadata"]["name"]): o for o in stack.kubernetes_objects()}


def _anti_affinity(stack: RecordedStack, name: str) -> dict[str, Any]:
    statefulset = k8s_object(stack, "StatefulSet", name)
    anti: dict[str, Any] = statefulset["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    return anti


@pytest.mark.parametrize("stack", STACKS)
def test_a_pair_is_two_statefulsets_named_after_their_sides_and_no_single_one(stack: str) -> None:
    recorded = pair_stack(stack)
    statefulsets = {
        o["metadata"]["name"] for o in recorded.kubernetes_objects() if o["kind"] == "StatefulSet"
    }
    assert statefulsets == {"kafka", *_sides(recorded).values()}
    for name in _sides(recorded).values():
        for kind in ("Service", "PodDisruptionBudget", "ServiceAccount", "NetworkPolicy"):
            assert k8s_object(recorded, kind, name)["metadata"]["name"] == name


@pytest.mark.parametrize("stack", STACKS)
def test_each_side_has_its_own_group_changelog_and_transactional_ids(stack: str) -> None:
    recorded = pair_stack(stack)
    names = names_of(recorded)
    for side, app in _sides(recorded).items():
        rendered = properties(recorded, app)
        assert rendered["application.id"] == app
        assert rendered["changelog.topic"] == f"{app}-counts-changelog"
        assert rendered["pair.side"] == side
        assert rendered["pair.control.topic"] == names.pair_control_topic
        # The transactional ids are the pod names, `<app>-<side>-<ordinal>`.
        assert rendered["producer.transactional.id"] == "${env:POD_NAME}"
        assert k8s_object(recorded, "StatefulSet", app)["spec"]["serviceName"] == app
        # The pipeline's own topics are both sides'.
        assert (rendered["input.topic"], rendered["output.topic"], rendered["dlq.topic"]) == (
            names.input_topic,
            names.output_topic,
            names.dlq_topic,
        )


@pytest.mark.parametrize("stack", STACKS)
def test_the_control_topic_is_one_compacted_partition_replicated_as_the_others(
    stack: str,
) -> None:
    recorded = pair_stack(stack)
    config = stack_config_of(recorded)
    # What the reconciler Job reads, parsed by the reconciler's own parser: no code of its own
    # knows roles, so the control topic is created like any other.
    specs = loads(_specs_config_map(recorded)["data"]["topics.json"])
    (control,) = [s for s in specs if s.role is TopicRole.PAIR_CONTROL]
    assert control.name == names_of(recorded).pair_control_topic
    assert control.partitions == 1
    assert {s.replication_factor for s in specs} == {config.topics.replication_factor}
    assert dict(control.configs) == {
        "cleanup.policy": "compact",
        "min.insync.replicas": str(config.topics.min_insync_replicas),
    }
    changelogs = [s for s in specs if s.role is TopicRole.CHANGELOG]
    assert [s.name for s in changelogs] == [
        f"{app}-counts-changelog" for app in _sides(recorded).values()
    ]
    assert {s.partitions for s in changelogs} == {config.topics.partitions}


def test_each_side_is_its_own_user_with_its_own_rights_and_the_control_topic() -> None:
    recorded = pair_stack("prod")
    names = names_of(recorded)
    sides = _sides(recorded)
    users = {u.name for u in acl_specs.loads(_specs_config_map(recorded)["data"]["acls.json"])}
    assert users == {*sides.values(), "topic-reconciler", "observer", "broker-readiness"} | {
        PAIR_SWITCH_USER
    }
    for app in sides.values():
        changelog = f"{app}-counts-changelog"
        assert _grants(recorded, app) == {
            ("TOPIC", names.input_topic, "LITERAL", "READ"),
            ("TOPIC", changelog, "LITERAL", "READ"),
            ("TOPIC", changelog, "LITERAL", "WRITE"),
            ("TOPIC", names.output_topic, "LITERAL", "WRITE"),
            ("TOPIC", names.dlq_topic, "LITERAL", "WRITE"),
            ("TOPIC", names.pair_control_topic, "LITERAL", "READ"),
            ("TOPIC", names.pair_control_topic, "LITERAL", "WRITE"),
            ("GROUP", app, "LITERAL", "READ"),
            ("TRANSACTIONAL_ID", f"{app}-", "PREFIXED", "WRITE"),
        }
        rendered = properties(recorded, app)
        assert rendered["sasl.username"] == app
        volumes = {
            v["name"]: v
            for v in k8s_object(recorded, "StatefulSet", app)["spec"]["template"]["spec"]["volumes"]
        }
        assert volumes["kafka-user"]["secret"]["secretName"] == f"kafka-user-{app}"
        assert k8s_object(recorded, "Secret", f"kafka-user-{app}")
    # The observer sees both sides' lag.
    observed = {n for t, n, _, _ in _grants(recorded, "observer") if t == "GROUP"}
    assert observed == set(sides.values())


def test_the_switch_is_its_own_user_that_writes_the_control_topic_and_reads_the_lag() -> None:
    recorded = pair_stack("prod")
    names = names_of(recorded)
    control = names.pair_control_topic
    assert _grants(recorded, PAIR_SWITCH_USER) == {
        ("TOPIC", control, "LITERAL", "READ"),
        ("TOPIC", control, "LITERAL", "WRITE"),
        ("GROUP", acl_specs.pair_switch_reader_group(control), "LITERAL", "DESCRIBE"),
        *(("GROUP", app, "LITERAL", "DESCRIBE") for app in _sides(recorded).values()),
        ("TOPIC", names.input_topic, "LITERAL", "DESCRIBE"),
    }
    assert k8s_object(recorded, "Secret", f"kafka-user-{PAIR_SWITCH_USER}")
    # Not the reconciler's: it keeps its rights, and gets no write on the control topic.
    reconciler = _grants(recorded, "topic-reconciler")
    assert ("TOPIC", control, "LITERAL", "WRITE") not in reconciler
    assert ("TOPIC", control, "LITERAL", "CREATE") in reconciler


def _selects(name: str) -> dict[str, Any]:
    """The labelSelector of a pod (anti-)affinity term on workload `name`'s pods."""
    return {"matchLabels": {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": name}}


def _placement(stack: RecordedStack, name: str) -> dict[str, Any]:
    """A StatefulSet's pod affinity, anti-affinity and spread, as rendered."""
    spec = k8s_object(stack, "StatefulSet", name)["spec"]["template"]["spec"]
    return {
        "affinity": spec["affinity"],
        "spread": spec.get("topologySpreadConstraints"),
    }


def _other(sides: dict[str, str], side: str) -> str:
    (other,) = [name for s, name in sides.items() if s != side]
    return other


def test_a_prod_side_packs_into_a_zone_of_its_own_instead_of_spreading_over_zones() -> None:
    """Three zones hold a pair: a side prefers its own pods' zone, must keep out of the other
    side's zones and keeps its replicas on different nodes; it has no zone spread of its own,
    which would take every zone and leave the other side none."""
    recorded, single = pair_stack("prod"), record_stack("prod")
    app = names_of(single).application_id
    # The single deployment keeps its zone spread (nothing changes without processor.pair).
    assert [c["topologyKey"] for c in _placement(single, app)["spread"]] == [ZONE]
    sides = _sides(recorded)
    for side, name in sides.items():
        placement = _placement(recorded, name)
        assert placement["spread"] is None
        assert placement["affinity"] == {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": _selects(name), "topologyKey": "kubernetes.io/hostname"},
                    {"labelSelector": _selects(_other(sides, side)), "topologyKey": ZONE},
                ]
            },
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {"labelSelector": _selects(name), "topologyKey": ZONE},
                    }
                ]
            },
        }


def test_dev_sides_only_prefer_other_zones_as_kind_has_one() -> None:
    recorded = pair_stack("dev")
    sides = _sides(recorded)
    for side, name in sides.items():
        placement = _placement(recorded, name)
        assert placement["spread"] is None
        anti = placement["affinity"]["podAntiAffinity"]
        assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
        preferred = [
            t["podAffinityTerm"] for t in anti["preferredDuringSchedulingIgnoredDuringExecution"]
        ]
        assert preferred == [
            {"labelSelector": _selects(name), "topologyKey": "kubernetes.io/hostname"},
            {"labelSelector": _selects(_other(sides, side)), "topologyKey": ZONE},
        ]
        own_zone = placement["affinity"]["podAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ]
        assert [t["podAffinityTerm"]["labelSelector"] for t in own_zone] == [_selects(name)]


def test_a_side_has_no_zone_spread_even_where_the_stack_asks_for_one() -> None:
    recorded = record_stack("dev", {**PAIR, "processor.zoneSpread": True})
    for name in _sides(recorded).values():
        assert _placement(recorded, name)["spread"] is None


@pytest.mark.parametrize("stack", STACKS)
def test_the_outputs_name_both_sides_and_the_control_topic(stack: str) -> None:
    recorded = pair_stack(stack)
    names = names_of(recorded)
    sides = list(_sides(recorded).values())
    assert recorded.outputs["processorName"] == sides
    assert recorded.outputs["pairControlTopic"] == names.pair_control_topic
    # pair_switch's and pair_release's --groups a=...,b=...
    assert recorded.outputs["pairGroups"] == _sides(recorded)
    # A PLAINTEXT stack's switch needs no --command-config.
    assert ("pairSwitchClientProperties" in recorded.outputs) == (stack == "prod")
    assert recorded.outputs["topics"] == {
        "input": names.input_topic,
        "output": names.output_topic,
        "changelog": [f"{app}-counts-changelog" for app in sides],
        "dlq": names.dlq_topic,
        "pair-control": names.pair_control_topic,
    }


@pytest.mark.parametrize(("revision", "mechanism"), [(1, "SCRAM-SHA-512"), (2, "SCRAM-SHA-256")])
def test_the_switchs_client_properties_log_in_with_the_current_revisions_password(
    revision: int, mechanism: str
) -> None:
    recorded = record_stack("prod", {**PAIR, "security.credentialsRevision": revision})
    text = recorded.outputs["pairSwitchClientProperties"]
    assert dict(line.split("=", 1) for line in text.splitlines()) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.username": PAIR_SWITCH_USER,
        # The Secret's `password` key, the current revision's, where the workloads mount it.
        "sasl.password": "${dir:/etc/kafka-user:password}",
        "ssl.ca.location": "/etc/kafka-ca/ca.crt",
    }
    assert recorded.outputs["userSecrets"][PAIR_SWITCH_USER] == f"kafka-user-{PAIR_SWITCH_USER}"


def test_a_rotation_retires_the_old_passwords_only_after_both_sides_rolled() -> None:
    recorded = pair_stack("prod")
    retirement = recorded.find("stateful-streaming:topics:ScramRetirement", "scram-retirement")
    statefulsets = {
        r.urn
        for r in recorded.resources
        if r.type == "kubernetes:apps/v1:StatefulSet" and r.name.startswith("processor-")
    }
    assert len(statefulsets) == 2
    assert statefulsets <= set(retirement.dependencies)


def test_under_kip_848_the_reconciler_sets_each_sides_group_configs() -> None:
    recorded = record_stack("prod", {**PAIR, "processor.groupProtocol": "consumer"})
    groups = loads_groups(_specs_config_map(recorded)["data"]["topics.json"])
    sides = _sides(recorded)
    assert [g.group for g in groups] == list(sides.values())
    configured = {
        name
        for kind, name, _, op in _grants(recorded, "topic-reconciler")
        if kind == ResourceType.GROUP.value and op == "ALTER_CONFIGS"
    }
    assert configured == set(sides.values())


@pytest.mark.parametrize("stack", STACKS)
def test_a_single_deployment_has_no_side_no_control_topic_and_no_switch(stack: str) -> None:
    recorded = record_stack(stack)
    app = names_of(recorded).application_id
    rendered = properties(recorded)
    # Neither pair key, not even a default: the file renders as before pairs existed.
    assert [key for key in rendered if key.startswith("pair.")] == []
    specs = loads(_specs_config_map(recorded)["data"]["topics.json"])
    assert [s.role for s in specs] == [
        TopicRole.INPUT,
        TopicRole.OUTPUT,
        TopicRole.CHANGELOG,
        TopicRole.DLQ,
    ]
    assert recorded.outputs["processorName"] == app
    assert {"pairControlTopic", "pairGroups", "pairSwitchClientProperties"}.isdisjoint(
        recorded.outputs
    )
    assert "pair-switch" not in json.dumps(recorded.outputs)
    # Saying false is the default: the same manifests.
    explicit = record_stack(stack, {"processor.pair": False})
    assert _by_name(explicit) == _by_name(recorded)


def test_a_pair_setting_that_is_not_a_boolean_names_the_allowed_values() -> None:
    with pytest.raises(StackConfigError) as raised:
        build_stack_config("dev", {"processor": {"pair": "both"}})
    assert str(raised.value).startswith(
        "stateful-streaming:processor.pair = 'both': must be true or false"
    )


@pytest.mark.parametrize(
    ("key", "value"), [("pair.side", "a"), ("pair.control.topic", "other-control")]
)
def test_a_pair_key_in_the_processor_properties_is_refused_naming_the_setting(
    key: str, value: str
) -> None:
    with pytest.raises(StackConfigError) as raised:
        build_stack_config("prod", {"processor": {"properties": {key: value}}})
    message = str(raised.value)
    assert message.startswith(f"stateful-streaming:processor.properties.{key} = {value!r}: ")
    assert "set processor.pair instead (now false; allowed: true, false)" in message


def test_the_control_topic_takes_configs_by_its_role() -> None:
    config = build_stack_config(
        "prod",
        {
            "processor": {"pair": True},
            "topics": {"configs": {"pair-control": {"segment.bytes": "1048576"}}},
        },
    )
    (control,) = [s for s in config.topic_specs if s.role is TopicRole.PAIR_CONTROL]
    assert control.configs["segment.bytes"] == "1048576"
    with pytest.raises(StackConfigError) as raised:
        build_stack_config("prod", {"topics": {"configs": {"control": {"a": "b"}}}})
    assert "roles: input, output, changelog, dlq, pair-control" in str(raised.value)


# --- processor.pairImages: a release upgrades one side at a time ------------------------------

# The next release's image, pinned by digest as prod requires.
NEXT_IMAGE = "ghcr.io/example/stateful-streaming-processor:0.2.0@sha256:" + "1" * 64


def _image(stack: RecordedStack, name: str) -> str:
    statefulset = k8s_object(stack, "StatefulSet", name)
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    image: str = container["image"]
    return image


def test_both_sides_run_the_processor_image_unless_pair_images_say_otherwise() -> None:
    recorded = pair_stack("prod")
    image = stack_config_of(recorded).processor.image
    assert {_image(recorded, name) for name in _sides(recorded).values()} == {image}


@pytest.mark.parametrize("side", PAIR_SIDES)
def test_a_sides_new_image_changes_that_sides_statefulset_and_nothing_else(side: str) -> None:
    before = pair_stack("prod")
    after = record_stack("prod", {**PAIR, "processor.pairImages": {side: NEXT_IMAGE}})
    sides = _sides(before)
    changed = {
        key
        for key in _by_name(before).keys() | _by_name(after).keys()
        if _by_name(before).get(key) != _by_name(after).get(key)
    }
    # One `pulumi up` rolls this side alone; the other side, the brokers (whose readiness
    # sidecars run processor.image) and the Jobs render unchanged.
    assert changed == {("StatefulSet", sides[side])}
    assert _image(after, sides[side]) == NEXT_IMAGE
    assert _image(after, _other(sides, side)) == _image(before, _other(sides, side))


def test_after_a_release_the_new_image_moves_into_processor_image_without_a_roll() -> None:
    """The release leaves both pairImages at the new image; setting processor.image to it and
    removing pairImages renders the sides' StatefulSets as they are, so nothing rolls."""
    released = record_stack(
        "prod", {**PAIR, "processor.pairImages": dict.fromkeys(PAIR_SIDES, NEXT_IMAGE)}
    )
    folded = record_stack("prod", {**PAIR, "processor.image": NEXT_IMAGE})
    for name in _sides(released).values():
        assert _image(released, name) == NEXT_IMAGE
        assert k8s_object(folded, "StatefulSet", name) == k8s_object(released, "StatefulSet", name)


@pytest.mark.parametrize(
    ("stack", "processor", "expected"),
    [
        (
            "dev",
            {"pairImages": {"a": "stateful-streaming/processor:next"}},
            "stateful-streaming:processor.pairImages = {'a': 'stateful-streaming/processor:next'}: "
            "allowed only with processor.pair: true (now false)",
        ),
        (
            "dev",
            {"pair": True, "pairImages": {"c": "stateful-streaming/processor:next"}},
            "stateful-streaming:processor.pairImages.c = 'stateful-streaming/processor:next': "
            "unknown key; known keys: ['a', 'b']",
        ),
        (
            "dev",
            {"pair": True, "pairImages": {"b": " "}},
            "stateful-streaming:processor.pairImages.b = ' ': must be an image reference",
        ),
        (
            "prod",
            {
                "pair": True,
                "pairImages": {"b": "ghcr.io/example/stateful-streaming-processor:0.2.0"},
            },
            "stateful-streaming:processor.pairImages.b = "
            "'ghcr.io/example/stateful-streaming-processor:0.2.0': a prod stack runs images "
            "pinned by digest",
        ),
    ],
    ids=["without-a-pair", "unknown-side", "empty", "prod-tag-without-digest"],
)
def test_a_pair_image_that_cannot_run_fails_naming_the_setting(
    stack: str, processor: dict[str, Any], expected: str
) -> None:
    with pytest.raises(StackConfigError) as raised:
        build_stack_config(stack, {"processor": processor})
    assert str(raised.value).startswith(expected), str(raised.value)


def test_pair_images_name_exactly_the_pairs_sides() -> None:
    assert tuple(PairImagesConfig.model_fields) == PAIR_SIDES
