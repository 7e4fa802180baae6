"""What `pulumi up` and `pulumi destroy` do to the volumes: claims that grow, templates that
replace their StatefulSet without its pods, a namespace that outlives the stack."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.workload import WAIT_FOR_ANNOTATION
from offline.render import RecordedStack, record_stack
from tests.infra.conftest import k8s_object, names_of

PATCH = "kubernetes:core/v1:PersistentVolumeClaimPatch"
# Each StatefulSet by its role: the brokers, or the processor (named by the stack's pipeline).
ROLES = ("kafka", "processor")


def statefulset_name(stack: RecordedStack | str, role: str) -> str:
    return "kafka" if role == "kafka" else names_of(stack).application_id


@pytest.mark.parametrize(("role", "template"), [("kafka", "data"), ("processor", "state")])
def test_every_pods_claim_is_patched_to_its_templates_size(
    stack: RecordedStack, role: str, template: str
) -> None:
    app = statefulset_name(stack, role)
    sts = k8s_object(stack, "StatefulSet", app)
    size = sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
    patches = sorted(
        (r.props["metadata"]["name"], r.props["spec"]["resources"]["requests"]["storage"])
        for r in stack.resources
        if r.type == PATCH and r.props["metadata"]["name"].startswith(f"{template}-{app}-")
    )
    replicas = sts["spec"]["replicas"]
    assert patches == [(f"{template}-{app}-{i}", size) for i in range(replicas)]


@pytest.mark.parametrize("role", ROLES)
def test_a_claim_template_change_replaces_the_statefulset_deleting_it_first(
    stack: RecordedStack, role: str
) -> None:
    app = statefulset_name(stack, role)
    sts = next(
        r
        for r in stack.resources
        if r.type == "kubernetes:apps/v1:StatefulSet" and r.props["metadata"]["name"] == app
    )
    assert sts.replace_on_changes == ("spec.volumeClaimTemplates",)
    # The name is fixed: the old object must go before the new one can be created.
    assert sts.delete_before_replace


@pytest.mark.parametrize(("role", "partition"), [("kafka", 0), ("processor", 1)])
def test_up_waits_for_every_pod_updated_and_available(role: str, partition: int) -> None:
    stack = record_stack("dev", {"processor": {"partition": partition}})
    sts = k8s_object(stack, "StatefulSet", statefulset_name(stack, role))
    replicas = sts["spec"]["replicas"]
    updated = replicas - (partition if role == "processor" else 0)
    assert json.loads(sts["metadata"]["annotations"][WAIT_FOR_ANNOTATION]) == [
        f"jsonpath={{.status.replicas}}={replicas}",
        f"jsonpath={{.status.updatedReplicas}}={updated}",
        f"jsonpath={{.status.availableReplicas}}={replicas}",
    ]


@pytest.mark.parametrize(("keep", "retained"), [({}, True), ({"keepDataOnDestroy": False}, False)])
def test_destroy_leaves_the_namespace_unless_the_stack_says_otherwise(
    keep: dict[str, bool], retained: bool
) -> None:
    stack = record_stack("dev", keep)
    (namespace,) = [r for r in stack.resources if r.type == "kubernetes:core/v1:Namespace"]
    assert namespace.retain_on_delete is retained


def deployed_at(stack: RecordedStack, role: str, storage: str) -> dict[str, Any]:
    """The stack's outputs as its last `pulumi up` left them, with `role`'s claims at `storage`."""
    volumes = dict(stack.outputs["volumes"])
    key = next(k for k in volumes if k.startswith(f"{statefulset_name(stack, role)}/"))
    volumes[key] = {**volumes[key], "storage": storage}
    return {"volumes": volumes}


def test_the_stack_records_each_templates_size_and_class_for_the_next_preview(
    dev: RecordedStack,
) -> None:
    app = statefulset_name(dev, "processor")
    assert dev.outputs["volumes"] == {
        "kafka/data": {"storage": "2Gi", "storageClassName": "standard"},
        f"{app}/state": {"storage": "1Gi", "storageClassName": "standard"},
    }


@pytest.mark.parametrize("role", ROLES)
def test_a_claim_grows_on_a_class_that_allows_expansion(dev: RecordedStack, role: str) -> None:
    grown = record_stack(
        "dev",
        {role: {"storage": "5Gi"}},
        deployed=deployed_at(dev, role, "1Gi"),
        storage_classes={"standard": {"allowVolumeExpansion": True}},
    )
    sts = k8s_object(grown, "StatefulSet", statefulset_name(grown, role))
    (template,) = sts["spec"]["volumeClaimTemplates"]
    assert template["spec"]["resources"]["requests"]["storage"] == "5Gi"


@pytest.mark.parametrize("role", ROLES)
def test_a_grow_on_a_class_without_expansion_is_refused_naming_the_setting(
    dev: RecordedStack, role: str
) -> None:
    with pytest.raises(Exception, match=rf"stateful-streaming:{role}\.storage = '5Gi'") as refused:
        record_stack(
            "dev",
            {role: {"storage": "5Gi"}},
            deployed=deployed_at(dev, role, "1Gi"),
            storage_classes={"standard": {"allowVolumeExpansion": False}},
        )
    message = str(refused.value)
    assert "on storage class 'standard', which does not allow volume expansion" in message
    assert "kubectl patch storageclass standard" in message
    assert f"otherwise keep {role}.storage at 1Gi" in message


@pytest.mark.parametrize("role", ROLES)
def test_a_smaller_claim_is_refused_naming_the_setting(dev: RecordedStack, role: str) -> None:
    with pytest.raises(Exception, match=r"are 8Gi and a claim never shrinks\. Keep 8Gi or more"):
        record_stack("dev", {role: {"storage": "5Gi"}}, deployed=deployed_at(dev, role, "8Gi"))


def test_an_unchanged_size_reads_no_storage_class(dev: RecordedStack) -> None:
    again = record_stack("dev", deployed={"volumes": dev.outputs["volumes"]})
    assert not [r for r in again.resources if r.type.endswith(":StorageClass")]
