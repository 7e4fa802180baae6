"""The stateful-streaming CrossGuard rules, one module per subject.

Imported as `policies.rules` everywhere (`policies/__main__.py` registers the pack directory as
`policies` when the Pulumi CLI runs it); the keys, defaults and rules the pack shares with the
program and the processor are in `contract`. The rule modules are imported only by
`all_policies`, so importing the package needs nothing but the standard library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pulumi_policy import Policy

PACK_NAME = "stateful-streaming"


def all_policies() -> list[Policy]:
    """Every policy of the pack, in report order."""
    from . import (
        acls,
        broker_security,
        commands,
        credentials,
        group_membership,
        image_sources,
        kafka_cluster,
        network,
        pair,
        pod_security,
        processor,
        rbac,
        secret_mounts,
        stack,
        tls_verification,
        topics,
        workload_shapes,
        workloads,
    )

    return [
        *kafka_cluster.POLICIES,
        *broker_security.POLICIES,
        *tls_verification.POLICIES,
        *topics.POLICIES,
        *processor.POLICIES,
        *pair.POLICIES,
        *acls.POLICIES,
        *commands.POLICIES,
        *image_sources.POLICIES,
        *workload_shapes.POLICIES,
        *group_membership.POLICIES,
        *workloads.POLICIES,
        *pod_security.POLICIES,
        *credentials.POLICIES,
        *secret_mounts.POLICIES,
        *rbac.POLICIES,
        *network.POLICIES,
        *stack.POLICIES,
    ]
