"""workload-rbac: no Role or ClusterRole is bound to what the stack's workloads run as, on the
real pulumi_policy objects over the rendered dev and prod stacks."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.infra.conftest import names_of
from tests.policies.conftest import Evaluate, stack_config
from tests.policies.handmade_stack import Resource

RULE = "workload-rbac"
BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
CLUSTER_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
# The processor's service account, named after its application id (a fork renames it): the
# cases name it so, and the test fills it in from the rendered stack.
PROCESSOR_ACCOUNT = "{processor}"


def _binding(kind: str, subject: dict[str, Any], role: str = "cluster-admin") -> Resource:
    metadata: dict[str, Any] = {"name": "debug"}
    if kind == BINDING:
        metadata["namespace"] = "streaming"
    return Resource(
        type=kind,
        name="debug-binding",
        props={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": kind.rsplit(":", 1)[1],
            "metadata": metadata,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [subject],
        },
    )


def _findings(run: Evaluate, recorded_stacks, stack: str, binding: Resource) -> list[str]:
    resources = [*copy.deepcopy(list(recorded_stacks[stack].resources)), binding]
    return [v.message for v in run(resources, stack_config(stack)) if v.policy == RULE]


@pytest.mark.parametrize("stack", ["dev", "prod"])
@pytest.mark.parametrize(
    ("kind", "subject", "reached"),
    [
        (
            BINDING,
            {"kind": "ServiceAccount", "name": PROCESSOR_ACCOUNT},
            f"service account streaming/{PROCESSOR_ACCOUNT}",
        ),
        (
            CLUSTER_BINDING,
            {"kind": "ServiceAccount", "name": "kafka", "namespace": "streaming"},
            "service account streaming/kafka",
        ),
        (
            BINDING,
            {"kind": "Group", "name": "system:serviceaccounts:streaming"},
            "group system:serviceaccounts:streaming (every service account of streaming)",
        ),
        (
            CLUSTER_BINDING,
            {"kind": "Group", "name": "system:authenticated"},
            "group system:authenticated (every workload's service account)",
        ),
    ],
    ids=["processor-account", "brokers-account-cluster-wide", "namespace-group", "everyone"],
)
def test_a_role_bound_to_what_a_workload_runs_as_is_refused(
    run, recorded_stacks, stack: str, kind: str, subject: dict[str, Any], reached: str
) -> None:
    processor = names_of(recorded_stacks[stack]).application_id
    subject = {key: value.format(processor=processor) for key, value in subject.items()}
    (message,) = _findings(run, recorded_stacks, stack, _binding(kind, subject))
    reached = reached.format(processor=processor)
    assert f"subjects[0] is {reached}, bound to ClusterRole cluster-admin" in message
    assert "Fix: remove the binding" in message


def test_a_binding_of_an_account_no_workload_runs_as_passes(run, recorded_stacks) -> None:
    subject = {"kind": "ServiceAccount", "name": "ci-deployer", "namespace": "streaming"}
    assert _findings(run, recorded_stacks, "prod", _binding(BINDING, subject, "view")) == []


def test_the_rendered_stacks_bind_nothing(run, recorded_stacks) -> None:
    for stack in ("dev", "prod"):
        resources = recorded_stacks[stack].resources
        assert not [r for r in resources if "rbac.authorization" in r.type]
        assert [v for v in run(resources, stack_config(stack)) if v.policy == RULE] == []
