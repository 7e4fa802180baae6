"""The stack's namespace: every pod in it runs restricted, and every resource waits for it."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from infra.stack_settings import StackConfig


def restricted_namespace(
    config: StackConfig, after: pulumi.Input[Sequence[pulumi.Resource]]
) -> k8s.core.v1.Namespace:
    """The namespace under the "restricted" Pod Security Standard, made only `after` the
    pre-flight refusals have passed (`infra.preflight`)."""
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
            depends_on=after,
        ),
    )
