"""Each stack is recorded once per session under Pulumi's mocks; tests read the recording."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.clients.java_properties import parse_properties
from infra.render import RecordedStack, record_stack, write_manifests
from policies.contract.topic_specs import PipelineNames


def k8s_object(stack: RecordedStack, kind: str, name: str) -> dict[str, Any]:
    """The recorded Kubernetes object of that kind and `metadata.name`."""
    for obj in stack.kubernetes_objects():
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    known = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in stack.kubernetes_objects())
    raise KeyError(f"no {kind}/{name}; recorded: {known}")


def processor_properties(stack: RecordedStack) -> dict[str, str]:
    """The processor's properties file as the stack renders it."""
    app = PipelineNames().application_id
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


@pytest.fixture(scope="session")
def dev() -> RecordedStack:
    return record_stack("dev")


@pytest.fixture(scope="session")
def prod() -> RecordedStack:
    return record_stack("prod")


@pytest.fixture(scope="session", params=["dev", "prod"])
def stack(request: pytest.FixtureRequest, dev: RecordedStack, prod: RecordedStack) -> RecordedStack:
    return {"dev": dev, "prod": prod}[request.param]


@pytest.fixture(scope="session")
def manifests(
    tmp_path_factory: pytest.TempPathFactory, dev: RecordedStack, prod: RecordedStack
) -> Iterator[dict[str, Path]]:
    out = tmp_path_factory.mktemp("manifests")
    for recorded in (dev, prod):
        write_manifests(recorded, out / recorded.stack)
    yield {"dev": out / "dev", "prod": out / "prod"}
