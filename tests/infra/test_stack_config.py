"""Invalid settings fail before anything is deployed, with one message naming the setting."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from contract.stack_pipeline import PROJECT
from contract.topic_specs import PipelineNames
from infra.config import build_stack_config, load_stack_config
from infra.provider_settings import MUTABLE_KINDS
from infra.stack_settings import StackConfigError
from offline import render
from offline.render import main as render_main
from offline.render import record_stack
from tests.infra.conftest import k8s_object, names_of


@pytest.mark.parametrize(
    ("stack", "raw", "expected"),
    [
        (
            "prod",
            {"kafka": {"replicas": 1}},
            ["stateful-streaming:kafka.replicas = 1", "at least 3 brokers"],
        ),
        ("dev", {"kafka": {"replicas": 4}}, ["kafka.replicas = 4", "must be odd"]),
        (
            "dev",
            {"processor": {"replicas": 7}},
            ["processor.replicas = 7", "between 1 and topics.partitions (6)"],
        ),
        (
            "dev",
            {"processor": {"replica": 2}},
            ["processor.replica", "unknown key", "'replicas'"],
        ),
        ("dev", {"brokers": 3}, ["stateful-streaming:brokers", "unknown key", "'kafka'"]),
        (
            "prod",
            {"processor": {"stateful": False}},
            ["processor.membershipMode = 'handoff'", "must be static with stateful=false"],
        ),
        (
            "dev",
            {"topics": {"configs": {"changelog": {"cleanup.policy": "delete"}}}},
            ["stateful-streaming:topics", "needs cleanup.policy=compact", "found delete"],
        ),
        (
            "prod",
            {"topics": {"configs": {"output": {"unclean.leader.election.enable": "true"}}}},
            [
                f"topic {PipelineNames().output_topic}: unclean.leader.election.enable=true",
                "must be false",
            ],
        ),
        (
            "prod",
            {
                "security": {
                    "certificates": "cert-manager",
                    "issuerName": "shared-ca",
                    "issuerKind": "ClusterIssuer",
                }
            },
            ["security.issuerKind = 'ClusterIssuer'", "a prod stack needs a namespaced Issuer"],
        ),
        (
            "prod",
            {"processor": {"image": "ghcr.io/example/stateful-streaming-processor:0.1.0"}},
            ["processor.image = 'ghcr.io/example/", "pinned by digest", "@sha256:<64 hex digits>"],
        ),
        (
            "prod",
            {"kafka": {"image": "apache/kafka:4.1.1@sha256:0bc1bb24"}},
            ["kafka.image = 'apache/kafka:4.1.1@sha256:0bc1bb24'", "pinned by digest"],
        ),
        (
            "prod",
            {"security": {"clientListener": "PLAINTEXT"}},
            ["security.clientListener = 'PLAINTEXT'", "a prod stack needs SASL_SSL"],
        ),
        *(
            (
                "prod",
                {"kafka": {"configs": {key: value}}},
                [f"kafka.configs.{key} = {value!r}", "set by the program", "remove it"],
            )
            for key, value in (
                ("super.users", "User:CN=kafka-broker;User:page-view-counter"),
                ("listener.security.protocol.map", "CLIENT:PLAINTEXT"),
                ("allow.everyone.if.no.acl.found", "true"),
                ("authorizer.class.name", ""),
                ("listener.name.internal.ssl.client.auth", "none"),
                ("ssl.endpoint.identification.algorithm", ""),
                ("listeners", "CLIENT://:9092,EXTRA://:9095"),
                ("controller.quorum.voters", "0@elsewhere:9093"),
            )
        ),
        (
            "dev",
            {"kafka": {"configs": {"sasl.enabled.mechanisms": "PLAIN"}}},
            ["kafka.configs.sasl.enabled.mechanisms", "security.clientListener"],
        ),
        (
            "prod",
            {
                "processor": {
                    "properties": {"consumer.enable.ssl.certificate.verification": "false"}
                }
            },
            [
                "processor.properties.consumer.enable.ssl.certificate.verification = 'false'",
                "must be true",
                "the processor refuses it at start",
            ],
        ),
        (
            "prod",
            {"processor": {"properties": {"ssl.endpoint.identification.algorithm": "none"}}},
            ["processor.properties.ssl.endpoint.identification.algorithm = 'none'", "https"],
        ),
        ("dev", {"kafka": {"replicas": "three"}}, ["kafka.replicas = 'three'", "whole number"]),
        (
            "dev",
            {"processor": {"antiAffinity": "sometimes"}},
            ["processor.antiAffinity = 'sometimes'", "required, preferred"],
        ),
        (
            "dev",
            {"processor": {"metricsScrape": "prometheus"}},
            [
                "stateful-streaming:processor.metricsScrape = 'prometheus'",
                "must be one of podMonitor, annotations, none",
            ],
        ),
        (
            "prod",
            {"kafka": {"antiAffinity": "preferred"}},
            ["kafka.antiAffinity = 'preferred'", "required in prod"],
        ),
        (
            "dev",
            {"topics": {"replicationFactor": 5}},
            ["topics.replicationFactor = 5", "at most kafka.replicas (3)"],
        ),
        (
            "dev",
            {"topics": {"minInsyncReplicas": 3}},
            ["topics.minInsyncReplicas = 3", "between 1 and 2"],
        ),
        (
            "dev",
            {
                "processor": {
                    "membershipMode": "static",
                    "properties": {"consumer.session.timeout.ms": "10000"},
                }
            },
            ["consumer.session.timeout.ms = '10000'", "at least the restart budget, 195000 ms"],
        ),
        (
            "prod",
            {
                "processor": {
                    "membershipMode": "static",
                    "properties": {"consumer.max.poll.interval.ms": "300000"},
                }
            },
            [
                "consumer.max.poll.interval.ms = '300000'",
                "at least consumer.session.timeout.ms=475000",
                "librdkafka's rule",
            ],
        ),
        (
            "prod",
            {"processor": {"properties": {"consumer.session.timeout.ms": "475000"}}},
            [
                "consumer.session.timeout.ms = '475000'",
                "<= 12000 with membership.mode=handoff",
                "one that crashes holds its partitions, producing nothing, until its session "
                "expires",
            ],
        ),
        (
            "prod",
            {"processor": {"properties": {"consumer.session.timeout.ms": "5000"}}},
            [
                "consumer.session.timeout.ms = '5000'",
                "group.min.session.timeout.ms (6000)",
                "INVALID_SESSION_TIMEOUT",
            ],
        ),
        (
            "dev",
            {"processor": {"membershipMode": "static", "terminationGracePeriodSeconds": 3600}},
            ["consumer.session.timeout.ms", "group.max.session.timeout.ms (1800000)"],
        ),
        ("dev", {"kafka": {"memory": "lots"}}, ["kafka.memory = 'lots'", "quantity"]),
        (
            "dev",
            {"processor": {"numStandbyReplicas": 2}},
            [
                "stateful-streaming:processor.numStandbyReplicas = 2",
                "must be 0..1 (replicas - 1)",
                "an instance other than its owner",
            ],
        ),
        (
            "prod",
            {"processor": {"membershipMode": "static", "numStandbyReplicas": 3}},
            ["processor.numStandbyReplicas = 3", "must be 0..2"],
        ),
        (
            "dev",
            {"processor": {"membershipMode": "static", "numStandbyReplicas": -1}},
            ["processor.numStandbyReplicas = -1", "must be 0..1"],
        ),
        (
            "prod",
            {"processor": {"numStandbyReplicas": "one"}},
            ["processor.numStandbyReplicas = 'one'", "whole number"],
        ),
        ("staging", {}, ["stateful-streaming:profile = None", "dev, prod"]),
    ],
)
def test_invalid_setting_is_named_with_its_value_and_what_is_allowed(
    stack: str, raw: dict[str, Any], expected: list[str]
) -> None:
    with pytest.raises(StackConfigError) as error:
        build_stack_config(stack, raw)
    for fragment in expected:
        assert fragment in str(error.value)
    assert "Pulumi.<stack>.yaml" in str(error.value)


def test_presets_are_valid_as_they_are() -> None:
    dev = build_stack_config("dev", {})
    prod = build_stack_config("prod", {})
    assert (dev.kafka.replicas, dev.processor.replicas, dev.kafka.storage_class_name) == (
        3,
        2,
        "standard",
    )
    assert (prod.kafka.replicas, prod.processor.replicas, prod.kafka.anti_affinity) == (
        3,
        3,
        "required",
    )
    assert dev.broker_configs["group.initial.rebalance.delay.ms"] == "0"
    assert prod.broker_configs["group.initial.rebalance.delay.ms"] == "3000"


def test_strings_from_pulumi_config_set_are_accepted() -> None:
    config = build_stack_config(
        "dev", {"processor": {"replicas": "3", "stateful": "false", "membershipMode": "static"}}
    )
    assert (config.processor.replicas, config.processor.stateful) == (3, False)


def test_a_named_stack_can_use_a_preset_by_profile() -> None:
    assert build_stack_config("staging", {"profile": "prod"}).profile == "prod"


def test_the_program_refuses_an_invalid_stack_before_registering_anything() -> None:
    with pytest.raises(StackConfigError, match=r"processor\.replicas = 9"):
        record_stack("dev", {"processor": {"replicas": 9}})


def test_the_program_reads_a_dotted_key_and_refuses_an_unknown_one_as_the_cli_passes_them() -> None:
    # What `pulumi config set processor.replicas 3` (no --path) writes, in PULUMI_CONFIG.
    recorded = record_stack("dev", {"processor.replicas": "3"})
    processor = k8s_object(recorded, "StatefulSet", names_of(recorded).application_id)
    assert processor["spec"]["replicas"] == 3  # the dev preset's is 2
    with pytest.raises(StackConfigError, match=r"processor\.replica\b.*unknown key"):
        record_stack("dev", {"processor.replica": "3"})


def test_the_program_reads_its_config_as_an_automation_api_inline_program_gets_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An inline program's config arrives through set_all_config, not PULUMI_CONFIG.
    monkeypatch.delenv("PULUMI_CONFIG", raising=False)
    pulumi.runtime.reset_options(project=PROJECT, stack="dev")
    pulumi.runtime.set_all_config({f"{PROJECT}:processor": '{"replicas": 3}'}, [])
    try:
        assert load_stack_config().processor.replicas == 3
    finally:
        pulumi.runtime.set_all_config({}, [])


def test_render_cli_exits_non_zero_with_the_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert render_main(["--stack", "nope", "--out", "unused"]) == 2
    assert "Pulumi.nope.yaml not found" in capsys.readouterr().err


def test_handoff_with_one_replica_is_refused_naming_the_setting() -> None:
    with pytest.raises(StackConfigError) as error:
        build_stack_config(
            "dev",
            {"processor": {"membershipMode": "handoff", "replicas": 1, "numStandbyReplicas": 1}},
        )
    message = str(error.value)
    assert message.startswith("stateful-streaming:processor.replicas = 1")
    assert "at least 2 with membership.mode=handoff" in message
    assert "another instance to take the partitions over" in message


@pytest.mark.parametrize(
    ("stack", "processor"),
    [("dev", {"numStandbyReplicas": 0}), ("prod", {"numStandbyReplicas": 0})],
)
def test_handoff_without_a_standby_replica_is_refused_naming_the_setting(
    stack: str, processor: dict[str, Any]
) -> None:
    with pytest.raises(StackConfigError) as error:
        build_stack_config(stack, {"processor": processor})
    message = str(error.value)
    assert message.startswith("stateful-streaming:processor.numStandbyReplicas = 0")
    assert "at least 1 with membership.mode=handoff" in message
    assert "restores its whole changelog" in message


def test_presets_hand_off_onto_a_copy_on_every_other_replica() -> None:
    dev, prod = build_stack_config("dev", {}).processor, build_stack_config("prod", {}).processor
    # A copy on every other replica: every move lands on one, whatever the assignor decides.
    assert (dev.membership_mode, dev.num_standby_replicas) == ("handoff", dev.replicas - 1)
    assert (prod.membership_mode, prod.num_standby_replicas) == ("handoff", prod.replicas - 1)
    static_prod = build_stack_config("prod", {"processor": {"membershipMode": "static"}})
    assert static_prod.processor.num_standby_replicas == 2  # standby state helps a failover too


def test_unknown_membership_mode_names_the_allowed_values() -> None:
    with pytest.raises(StackConfigError, match=r"processor\.membershipMode = 'eager'"):
        build_stack_config("dev", {"processor": {"membershipMode": "eager"}})


def test_dev_runs_a_local_image_by_tag_and_prod_only_by_digest() -> None:
    local = {"processor": {"image": "stateful-streaming/processor:0.1.0"}}
    assert build_stack_config("dev", local).processor.image == "stateful-streaming/processor:0.1.0"
    with pytest.raises(StackConfigError, match=r"processor\.image"):
        build_stack_config("prod", local)
    pinned = {"processor": {"image": f"registry.example/processor@sha256:{'ab' * 32}"}}
    assert build_stack_config("prod", pinned).processor.image.endswith("ab" * 32)


@pytest.mark.parametrize("key", sorted(MUTABLE_KINDS))
@pytest.mark.parametrize("value", ["false", None])
def test_a_stack_whose_provider_would_replace_a_changed_config_map_or_secret_is_refused(
    key: str, value: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pulumi.yaml's provider settings are what keep a rotation from replacing the brokers:
    a stack without one (false, or unset as in another project file) is refused, naming it."""
    for variable, _ in MUTABLE_KINDS.values():
        monkeypatch.delenv(variable, raising=False)
    project = {k: v for k, v in render.load_project_config().items() if k != f"kubernetes:{key}"}
    if value is not None:
        project[f"kubernetes:{key}"] = value
    monkeypatch.setattr(render, "load_project_config", lambda: project)
    with pytest.raises(StackConfigError) as refused:
        record_stack("prod")
    message = str(refused.value)
    assert message.startswith(f"kubernetes:{key} = {value!r}: must be true (Pulumi.yaml sets it")
    assert f"`pulumi config set kubernetes:{key} true`, or {MUTABLE_KINDS[key][0]}=true" in message
    assert "a credentials rotation would restart every broker at once" in message
    # The provider reads its environment variable only where the setting is unset.
    monkeypatch.setenv(MUTABLE_KINDS[key][0], "true")
    if value is None:
        assert record_stack("prod").resources
    else:
        with pytest.raises(StackConfigError, match=f"kubernetes:{key} = 'false'"):
            record_stack("prod")


def test_prod_that_would_delete_its_data_on_destroy_is_refused_naming_the_setting() -> None:
    """The pack cannot see `retainOnDelete`: the stack holds prod to keeping its claims."""
    with pytest.raises(StackConfigError) as error:
        build_stack_config("prod", {"keepDataOnDestroy": False})
    message = str(error.value)
    assert message.startswith("stateful-streaming:keepDataOnDestroy = False")
    assert "`kubectl delete namespace <namespace>`" in message
    assert "Allowed in prod: true" in message
    assert build_stack_config("dev", {"keepDataOnDestroy": False}).keep_data_on_destroy is False


@pytest.mark.parametrize(
    ("stack", "key", "value"),
    [
        ("prod", "security.protocol", "PLAINTEXT"),
        ("prod", "consumer.security.protocol", "SSL"),
        ("dev", "security.protocol", "SASL_SSL"),
    ],
)
def test_a_processor_protocol_the_client_listener_does_not_speak_is_refused(
    stack: str, key: str, value: str
) -> None:
    """It would fail only once running, at its first connection in the middle of a roll."""
    with pytest.raises(StackConfigError) as error:
        build_stack_config(stack, {"processor": {"properties": {key: value}}})
    listener = "SASL_SSL" if stack == "prod" else "PLAINTEXT"
    assert str(error.value).startswith(f"stateful-streaming:processor.properties.{key} = '{value}'")
    assert f"Allowed: {listener}" in str(error.value)
