"""What `pulumi up` and `pulumi destroy` do to the volumes: claims that grow, templates that
replace their StatefulSet without its pods, a namespace that outlives the stack."""

from __future__ import annotations

import json

import pytest

from infra.render import RecordedStack, record_stack
from infra.workload import WAIT_FOR_ANNOTATION
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
