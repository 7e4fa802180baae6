"""The workload declaration (`contract.workload_shapes`) is the program's, both ways: every
rendered stack fits it (the pack's `workload-shapes` over the real stacks, in tests/policies),
and every item it declares is rendered by dev or prod; an allowance nothing renders is a hole
review would never see used."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from contract.workload_shapes import WORKLOADS, shape_of
from offline.render import record_stack

_LISTS = ("initContainers", "containers")


def _rendered_items(stack: str) -> Iterator[tuple[str, ...]]:
    """Each workload's, container's and pod's items, as (role, what, name[, detail])."""
    for resource in record_stack(stack).resources:
        if resource.type.split(":")[-1] not in ("StatefulSet", "Job"):
            continue
        spec: dict[str, Any] = resource.props["spec"]["template"]["spec"]
        shape = shape_of({c["name"] for key in _LISTS for c in spec.get(key, [])})
        assert shape is not None, resource.name
        yield shape.role, "workload", shape.kind
        for volume in spec.get("volumes", []):
            yield shape.role, "volume", volume["name"]
        for claim in resource.props["spec"].get("volumeClaimTemplates", []):
            yield shape.role, "claim", claim["metadata"]["name"]
        for key in _LISTS:
            for container in spec.get(key, []):
                name = container["name"]
                yield shape.role, "container", name
                for env in container.get("env", []):
                    yield shape.role, f"{name} env", env["name"]
                for port in container.get("ports", []):
                    yield shape.role, f"{name} port", port["name"], str(int(port["containerPort"]))
                for mount in container.get("volumeMounts", []):
                    yield shape.role, f"{name} mount", mount["name"], mount["mountPath"]


def _declared_items() -> Iterator[tuple[str, ...]]:
    for shape in WORKLOADS:
        yield shape.role, "workload", shape.kind
        for volume in shape.volumes:
            yield shape.role, "volume", volume
        for claim in shape.claims:
            yield shape.role, "claim", claim
        for container in shape.containers:
            yield shape.role, "container", container.name
            for env in container.env:
                yield shape.role, f"{container.name} env", env
            for port, number in container.ports.items():
                yield shape.role, f"{container.name} port", port, str(number)
            for volume, mount in container.mounts.items():
                yield shape.role, f"{container.name} mount", volume, mount.path


@pytest.fixture(scope="module")
def rendered() -> set[tuple[str, ...]]:
    return {item for stack in ("dev", "prod") for item in _rendered_items(stack)}


def test_every_declared_item_is_rendered_by_dev_or_prod(rendered: set[tuple[str, ...]]) -> None:
    assert sorted(set(_declared_items()) - rendered) == []


def test_every_rendered_item_is_declared(rendered: set[tuple[str, ...]]) -> None:
    assert sorted(rendered - set(_declared_items())) == []
