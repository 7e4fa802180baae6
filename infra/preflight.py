"""The changes that are safe only as a step from the last `pulumi up`, refused before any change.

A rotation or rollover that skips a step (`security_transitions`), an image below the finalized
metadata.version (`metadata_version`), another cluster id than the running one
(`cluster_identity`): each is judged against the output the last `up` left, and the namespace,
which every other resource waits for, waits for all of them.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pulumi

from infra import cluster_identity, deployed_stack, metadata_version, security_transitions
from infra.stack_settings import StackConfig


def passed(
    config: StackConfig, deployed: pulumi.Output[dict[str, Any]]
) -> pulumi.Output[list[pulumi.Resource]]:
    """No resources, once every refusal has passed: what the namespace depends on."""
    return deployed_stack.refused_steps(
        deployed,
        {
            security_transitions.DEPLOYED_OUTPUT: partial(
                security_transitions.refuse_skipped_steps, config.security
            ),
            metadata_version.DEPLOYED_OUTPUT: partial(
                metadata_version.refuse_downgrade, config.kafka
            ),
            cluster_identity.DEPLOYED_OUTPUT: partial(
                cluster_identity.refuse_new_cluster_id, config.kafka
            ),
        },
    )
