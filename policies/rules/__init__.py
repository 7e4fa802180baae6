"""The stateful-streaming CrossGuard rules, one module per subject.

Imported as `rules` when the Pulumi CLI runs the pack (the pack directory is then the program
directory and first on sys.path) and as `policies.rules` by the tests and the offline runner, so
every import inside this package is relative.

Importing the package itself needs nothing but the standard library: the processor image imports
`policies.rules.java_properties` (the one properties codec) without pulumi-policy installed, so
the rule modules are only imported by `all_policies`.
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
        credentials,
        group_membership,
        kafka_cluster,
        network,
        pod_security,
        processor,
        secret_mounts,
        stack,
        tls_verification,
        topics,
        workloads,
    )

    return [
        *kafka_cluster.POLICIES,
        *broker_security.POLICIES,
        *tls_verification.POLICIES,
        *topics.POLICIES,
        *processor.POLICIES,
        *acls.POLICIES,
        *group_membership.POLICIES,
        *workloads.POLICIES,
        *pod_security.POLICIES,
        *credentials.POLICIES,
        *secret_mounts.POLICIES,
        *network.POLICIES,
        *stack.POLICIES,
    ]
