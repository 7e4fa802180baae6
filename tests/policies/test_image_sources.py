"""image-sources: each container runs the image of the setting the contract names for it
(`contract.container_commands.IMAGE_SOURCES`), on the real pulumi_policy objects over the
rendered stacks: a foreign image pinned by digest is refused where it would run a Job's or an
init container's command with the pod's credentials."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from contract import container_commands as contract
from offline.render import record_stack
from tests.policies.conftest import stack_config

RULE = "image-sources"
FOREIGN = "registry.example/tools:1.0@sha256:" + "f" * 64
NEXT_RELEASE = "ghcr.io/example/stateful-streaming-processor:0.2.0@sha256:" + "1" * 64
Props = dict[str, Any]


def _container(resources: list[Any], kind: str, prefix: str, name: str) -> Props:
    (found,) = [
        c
        for r in resources
        if r.type.endswith(f":{kind}") and r.props["metadata"]["name"].startswith(prefix)
        for c in r.props["spec"]["template"]["spec"].get("initContainers", [])
        + r.props["spec"]["template"]["spec"]["containers"]
        if c["name"] == name
    ]
    return found


def _findings(run, resources: list[Any], stack: str = "prod") -> list[str]:
    return [v.message for v in run(resources, stack_config(stack)) if v.policy == RULE]


@pytest.mark.parametrize(
    ("kind", "workload", "container", "setting"),
    [
        ("Job", "topics-", contract.RECONCILE, "processor.image"),
        ("StatefulSet", "kafka", contract.FORMAT_STORAGE, "kafka.image"),
        ("StatefulSet", "kafka", contract.GRANT_ACLS, "kafka.image"),
        ("Job", "kafka-metadata-version-", contract.FINALIZE, "kafka.image"),
        ("StatefulSet", "kafka", contract.BROKER_READINESS, "processor.image"),
    ],
    ids=["reconciler-job", "format-init", "grant-container", "metadata-version-job", "sidecar"],
)
def test_a_foreign_image_pinned_by_digest_is_refused(
    run, recorded_stacks, kind: str, workload: str, container: str, setting: str
) -> None:
    resources = copy.deepcopy(list(recorded_stacks["prod"].resources))
    target = _container(resources, kind, workload, container)
    target["image"] = FOREIGN
    (message,) = _findings(run, resources)
    assert f"container {container} image is {FOREIGN}; required: " in message
    assert f"the image of {setting} (contract/container_commands.py, IMAGE_SOURCES)" in message


def _pair(image_of_side: Callable[[str], str] | None = None) -> list[Any]:
    images = {"a": NEXT_RELEASE} if image_of_side is None else {"a": image_of_side("a")}
    return list(
        record_stack("prod", {"processor.pair": True, "processor.pairImages": images}).resources
    )


def test_a_pair_side_on_another_release_of_the_image_passes(run) -> None:
    assert _findings(run, _pair()) == []


def test_a_pair_side_from_another_registry_is_refused(run) -> None:
    resources = _pair(lambda side: FOREIGN)
    (message,) = _findings(run, resources)
    assert f"container processor image is {FOREIGN}; required: a release of " in message
    assert "ghcr.io/example/stateful-streaming-processor" in message


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_rendered_stacks_run_each_container_on_its_settings_image(
    run, recorded_stacks, stack: str
) -> None:
    assert _findings(run, list(recorded_stacks[stack].resources), stack) == []
