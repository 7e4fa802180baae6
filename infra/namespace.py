"""The stack's namespace: every pod in it runs restricted, and every resource waits for it."""

from __future__ import annotations

from functools import partial
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra import cluster_identity, deployed_stack, metadata_version, security_transitions
from infra.stack_settings import StackConfig


def restricted_namespace(
    config: StackConfig, deployed: pulumi.Output[dict[str, Any]]
) -> k8s.core.v1.Namespace:
    """The namespace under the "restricted" Pod Security Standard, made only once the changes
    that are safe only as a step from the last `up` (`deployed`, its outputs) have passed."""
    return k8s.core.v1.Namespace(
        config.namespace,
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=config.namespace,
            labels={
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/warn": "restricted",
            },
        ),
        opts=pulumi.ResourceOptions(
            # Deleting a namespace deletes its claims, whatever the StatefulSets' retention says.
            retain_on_delete=config.keep_data_on_destroy,
            # A rotation or rollover that skips a step, an image below the finalized
            # metadata.version, or another cluster id than the running one, is refused here,
            # before anything changes.
            depends_on=deployed_stack.refused_steps(
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
            ),
        ),
    )
