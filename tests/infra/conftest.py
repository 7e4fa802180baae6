"""Each stack is recorded once per session under Pulumi's mocks; tests read the recording."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from contract.container_commands import SERVER_PROPERTIES_VARIABLE
from contract.java_properties import load_properties, parse_properties
from contract.topic_specs import PipelineNames
from infra.config import stack_config_from_cli
from infra.stack_settings import StackConfig
from offline.render import RecordedStack, load_stack_file, record_stack, write_manifests

# The broker image of the release this project ran before (devkit/kafka_release.py's
# PREVIOUS_VERSION), which stacks upgrade from.
PREVIOUS_KAFKA_IMAGE = (
    "apache/kafka:4.1.1@sha256:0bc1bb2478f45b6cea78864df86acdc11e8df2c5172477819a4d12942cbe5d40"
)


def stack_config_of(stack: RecordedStack | str) -> StackConfig:
    """The configuration the program runs with for `stack`, read as
    `infra.config.load_stack_config` reads what the CLI passes (JSON where it parses): a
    recording's (its stack file and any overrides), or a stack file's, by the stack's name, as
    `offline.render` and `offline.policy_check` render it without overrides.

    The stack's own, not the presets: a stack may name its pipeline (`pulumi new`'s prompts
    write `processor.applicationId` and the topics into `Pulumi.<stack>.yaml`), and a test of a
    rendered stack checks the names that stack renders.
    """
    if isinstance(stack, str):
        name, config = stack, load_stack_file(stack)
    else:
        name, config = stack.stack, stack.config
    return stack_config_from_cli(name, config)


def names_of(stack: RecordedStack | str) -> PipelineNames:
    """The application id and the topic names `stack` renders with (see `stack_config_of`)."""
    config = stack_config_of(stack)
    return PipelineNames(
        application_id=config.processor.application_id,
        input_topic=config.topics.input_topic,
        output_topic=config.topics.output_topic,
    )


def k8s_object(stack: RecordedStack, kind: str, name: str) -> dict[str, Any]:
    """The recorded Kubernetes object of that kind and `metadata.name`."""
    for obj in stack.kubernetes_objects():
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    known = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in stack.kubernetes_objects())
    raise KeyError(f"no {kind}/{name}; recorded: {known}")


def processor_properties(stack: RecordedStack, application_id: str | None = None) -> dict[str, str]:
    """A processor deployment's properties file as the stack renders it: the deployment named
    `application_id` (a side of a pair), by default the stack's only one."""
    app = application_id or names_of(stack).application_id
    config_map = next(
        o
        for o in stack.kubernetes_objects()
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith(f"{app}-config-")
    )
    # The processor's own parser (java.util.Properties' format), so the test reads what it reads.
    return {e.key: e.value for e in parse_properties(config_map["data"]["processor.properties"])}


def container_env(obj: dict[str, Any], container: int = 0) -> dict[str, Any]:
    """A workload's container env as name -> value (or the valueFrom source)."""
    env = obj["spec"]["template"]["spec"]["containers"][container]["env"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env}


def broker_settings(obj: dict[str, Any]) -> dict[str, str]:
    """The brokers' server.properties as a StatefulSet renders it (its `SERVER_PROPERTIES`)."""
    return load_properties(container_env(obj)[SERVER_PROPERTIES_VARIABLE])


@pytest.fixture(scope="session")
def dev() -> RecordedStack:
    return record_stack("dev")


@pytest.fixture(scope="session")
def prod() -> RecordedStack:
    return record_stack("prod")


@pytest.fixture(scope="session", params=["dev", "prod"])
def stack(request: pytest.FixtureRequest, dev: RecordedStack, prod: RecordedStack) -> RecordedStack:
    return {"dev": dev, "prod": prod}[request.param]


# The stack setting that deploys the processor as an active/standby pair.
PAIR = {"processor.pair": True}


@cache
def pair_stack(stack: str) -> RecordedStack:
    """`stack` (its stack file as it is) with the processor as an active/standby pair, recorded
    once per session."""
    return record_stack(stack, PAIR)


@pytest.fixture(scope="session")
def manifests(
    tmp_path_factory: pytest.TempPathFactory, dev: RecordedStack, prod: RecordedStack
) -> Iterator[dict[str, Path]]:
    """Each stack's manifests, and each stack's as a pair (`<stack>-pair`), one folder each."""
    out = tmp_path_factory.mktemp("manifests")
    for recorded in (dev, prod):
        write_manifests(recorded, out / recorded.stack)
        write_manifests(pair_stack(recorded.stack), out / f"{recorded.stack}-pair")
    yield {name: out / name for name in ("dev", "prod", "dev-pair", "prod-pair")}
