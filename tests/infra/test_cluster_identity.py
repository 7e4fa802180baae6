"""The KRaft cluster id of a running stack never changes (`infra.cluster_identity`): the brokers
take the id the last `up` exported, and another `kafka.clusterId` is refused at preview."""

from __future__ import annotations

import pytest

from offline.render import RecordedStack, record_stack
from tests.infra.conftest import container_env, k8s_object

RUNNING = "q0SnoXu-RZ6ec4kCzx2w3A"
OTHER = "MkU3OEVBNTcwNTJENDM2Qg"


def _brokers_id(stack: RecordedStack) -> str:
    return container_env(k8s_object(stack, "StatefulSet", "kafka"))["CLUSTER_ID"]


@pytest.mark.parametrize("preview", [True, False], ids=["preview", "up"])
def test_another_cluster_id_on_a_running_stack_is_refused_naming_both(
    prod: RecordedStack, preview: bool
) -> None:
    deployed = {**prod.outputs, "kafkaClusterId": RUNNING}
    with pytest.raises(Exception, match=r"kafka\.clusterId = 'MkU3OEVBNTcwNTJENDM2Qg'") as refused:
        record_stack("prod", {"kafka": {"clusterId": OTHER}}, deployed=deployed, preview=preview)
    message = str(refused.value)
    assert f"the running cluster's id is {RUNNING}" in message
    assert f"Allowed on a running stack: no kafka.clusterId, or {RUNNING}" in message


def test_the_running_id_given_again_passes(prod: RecordedStack) -> None:
    deployed = {**prod.outputs, "kafkaClusterId": RUNNING}
    stack = record_stack("prod", {"kafka": {"clusterId": RUNNING}}, deployed=deployed)
    assert _brokers_id(stack) == RUNNING


@pytest.mark.parametrize("stack_name", ["dev", "prod"])
def test_a_running_cluster_keeps_its_id_whatever_becomes_of_the_generated_one(
    stack_name: str,
) -> None:
    """A generated id replaced (keepers added, its protection dropped and it deleted) makes
    another value; the brokers still get the running one, at preview as at `up`."""
    fresh = record_stack(stack_name)
    assert _brokers_id(fresh) != RUNNING  # the mocks generate another one
    deployed = {**fresh.outputs, "kafkaClusterId": RUNNING}
    for preview in (True, False):
        running = record_stack(stack_name, deployed=deployed, preview=preview)
        assert _brokers_id(running) == RUNNING, f"preview={preview}"
        assert running.outputs["kafkaClusterId"] == RUNNING or preview


def test_a_new_stack_takes_the_setting_or_generates_one(dev: RecordedStack) -> None:
    assert record_stack("dev", {"kafka": {"clusterId": OTHER}}).outputs["kafkaClusterId"] == OTHER
    assert len(_brokers_id(dev)) == 22
