"""An upgrade's last step, `metadata.version` finalized by a Job after the brokers' roll, and the
refusal of any way below it (`infra.metadata_version`)."""

from __future__ import annotations

from typing import Any

import pytest

from contract import container_commands
from contract.java_properties import load_properties
from infra.config import build_stack_config
from infra.presets import KAFKA_IMAGE
from infra.stack_settings import StackConfigError
from offline.render import RecordedStack, record_stack
from tests.infra.conftest import PREVIOUS_KAFKA_IMAGE, k8s_object

RELEASE = KAFKA_IMAGE.split(":")[1].rsplit(".", 1)[0]  # "4.3"


def finalize_job(stack: RecordedStack) -> dict[str, Any]:
    (job,) = [
        o
        for o in stack.kubernetes_objects()
        if o["kind"] == "Job" and o["metadata"]["name"].startswith("kafka-metadata-version-")
    ]
    return job


def test_the_job_finalizes_the_images_release_on_the_brokers_own_image(
    stack: RecordedStack,
) -> None:
    job = finalize_job(stack)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == KAFKA_IMAGE
    tool = container_commands.kafka_tool(container_commands.FEATURE_COMMAND)
    assert container["command"][: len(tool)] == list(tool)
    assert container["command"][-3:] == ["upgrade", "--release-version", RELEASE]
    assert container["command"][len(tool) : len(tool) + 2] == [
        "--bootstrap-server",
        "kafka.streaming.svc.cluster.local:9092",
    ]
    assert stack.outputs["kafkaMetadataVersion"] == RELEASE


def test_the_job_runs_only_after_the_brokers_roll(stack: RecordedStack) -> None:
    (component,) = [r for r in stack.resources if r.type.endswith(":MetadataVersion")]
    (kafka,) = [r for r in stack.resources if r.type.endswith(":StatefulSet") and r.name == "kafka"]
    # The SDK registers the component, and so its Job, once the StatefulSet's update has
    # returned: every broker rolled and back in every ISR (tests/engine/ shows the order).
    assert kafka.urn in component.dependencies
    # A new release or image is a new Job (Jobs are immutable), named after what it runs.
    moved = record_stack(stack.stack, {"kafka": {"metadataVersion": "4.1"}})
    assert finalize_job(moved)["metadata"]["name"] != finalize_job(stack)["metadata"]["name"]
    assert moved.outputs["kafkaMetadataVersion"] == "4.1"


def test_on_a_secured_cluster_it_logs_in_as_the_reconciler_with_a_password_file(
    prod: RecordedStack,
) -> None:
    job = finalize_job(prod)
    client = k8s_object(prod, "ConfigMap", job["metadata"]["name"])
    settings = load_properties(client["data"][container_commands.FEATURES_CLIENT_FILE])
    assert settings["security.protocol"] == "SASL_SSL"
    assert 'username="topic-reconciler"' in settings["sasl.jaas.config"]
    # The password is Kafka's DirectoryConfigProvider's reference to the mounted Secret's file.
    assert 'password="${dir:' in settings["sasl.jaas.config"]
    assert settings["config.providers"] == "dir"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert "--command-config" in container["command"]
    secrets = {
        v["secret"]["secretName"]
        for v in job["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    }
    assert secrets == {"kafka-user-topic-reconciler", "kafka-tls"}


@pytest.mark.parametrize(
    ("kafka", "expected"),
    [
        ({"metadataVersion": "4.3.1"}, ["kafka.metadataVersion = '4.3.1'", "as X.Y (4.3)"]),
        ({"metadataVersion": "9.0"}, ["kafka.metadataVersion = '9.0'", f"({RELEASE})"]),
        (
            {"image": "registry.example/kafka@sha256:" + "a" * 64},
            ["kafka.image = 'registry.example/kafka@sha256:", "set kafka.metadataVersion"],
        ),
    ],
)
def test_a_metadata_version_the_image_cannot_run_is_refused_naming_the_setting(
    kafka: dict[str, str], expected: list[str]
) -> None:
    with pytest.raises(StackConfigError) as error:
        build_stack_config("dev", {"kafka": kafka})
    for fragment in expected:
        assert fragment in str(error.value)


def test_an_image_without_a_release_in_its_tag_names_it_by_the_setting() -> None:
    image = "registry.example/kafka@sha256:" + "a" * 64
    config = build_stack_config("dev", {"kafka": {"image": image, "metadataVersion": "4.3"}})
    assert config.kafka.metadata_version == "4.3"


def test_an_image_below_the_finalized_release_is_refused_at_preview(dev: RecordedStack) -> None:
    deployed = {**dev.outputs, "kafkaMetadataVersion": RELEASE}
    with pytest.raises(Exception, match="an upgrade has no way back") as refused:
        record_stack(
            "dev", {"kafka": {"image": PREVIOUS_KAFKA_IMAGE}}, deployed=deployed, preview=True
        )
    message = str(refused.value)
    assert f"kafka.image = '{PREVIOUS_KAFKA_IMAGE}'" in message
    assert f"finalized at {RELEASE}" in message
    assert f"Keep an image of release {RELEASE} or later" in message


def test_a_lower_metadata_version_is_refused_and_the_way_forward_passes(
    dev: RecordedStack,
) -> None:
    running_previous = {**dev.outputs, "kafkaMetadataVersion": "4.1"}
    # Before the finalize: the old image can come back, and the upgrade goes ahead.
    record_stack("dev", {"kafka": {"image": PREVIOUS_KAFKA_IMAGE}}, deployed=running_previous)
    upgraded = record_stack("dev", {}, deployed=running_previous)
    assert upgraded.outputs["kafkaMetadataVersion"] == RELEASE
    deployed = {**dev.outputs, "kafkaMetadataVersion": RELEASE}
    with pytest.raises(Exception, match=r"kafka\.metadataVersion = '4\.1'") as refused:
        record_stack("dev", {"kafka": {"metadataVersion": "4.1"}}, deployed=deployed)
    assert "never lowers it" in str(refused.value)
