"""The KRaft cluster id: chosen once, never changed on a running stack.

Every broker's storage is formatted with the cluster id (`kafka-storage.sh format
--cluster-id`), and a broker refuses storage formatted with another one: a new id on a running
cluster would not move the running brokers, but every broker formatted after it (a lost volume,
a scale-out) would form a cluster of its own. So the brokers take the id the stack's last `up`
exported (`kafkaClusterId`, `infra.deployed_stack`) before anything else: a replaced or
unprotected generated id, or a `kafka.clusterId` set later, cannot change it; a
`kafka.clusterId` that differs from it is refused at preview. A new stack takes `kafka.clusterId`
(the id of the volumes it adopts) or generates one.
"""

from __future__ import annotations

from typing import Any

import pulumi

from infra.stack_settings import KafkaConfig, setting_error

# The stack output that records the running cluster's id.
DEPLOYED_OUTPUT = "kafkaClusterId"


def running_cluster_id(running: Any) -> str:
    """The id the last `up` exported; "" on a new stack."""
    return running if isinstance(running, str) else ""


def refuse_new_cluster_id(kafka: KafkaConfig, running: Any) -> None:
    """StackConfigError when `kafka.clusterId` names another id than the running cluster's."""
    current = running_cluster_id(running)
    if current and kafka.cluster_id and kafka.cluster_id != current:
        raise setting_error(
            "kafka.clusterId",
            kafka.cluster_id,
            f"the running cluster's id is {current} (the last `pulumi up` exported it as "
            f"{DEPLOYED_OUTPUT}), and a broker formatted with another id (a lost volume, a "
            "scale-out) would not join it. Allowed on a running stack: no kafka.clusterId, or "
            f"{current}",
        )


def cluster_id(deployed: pulumi.Input[Any], chosen: pulumi.Input[str]) -> pulumi.Output[str]:
    """The running cluster's id where the stack runs one, else `chosen` (the setting, or the
    generated id): only a new stack reads `chosen`, so preview shows no change of the id."""
    return pulumi.Output.from_input(deployed).apply(
        lambda running: running_cluster_id(running) or pulumi.Output.from_input(chosen)
    )
