"""The stateful-streaming CrossGuard rules, one module per subject.

Imported as `rules` when the Pulumi CLI runs the pack (the pack directory is then the program
directory and first on sys.path) and as `policies.rules` by the tests and the offline runner, so
every import inside this package is relative.
"""

from __future__ import annotations

from pulumi_policy import Policy

from . import group_membership, kafka_cluster, processor, stack, topics, workloads

PACK_NAME = "stateful-streaming"


def all_policies() -> list[Policy]:
    """Every policy of the pack, in report order."""
    return [
        *kafka_cluster.POLICIES,
        *topics.POLICIES,
        *processor.POLICIES,
        *group_membership.POLICIES,
        *workloads.POLICIES,
        *stack.POLICIES,
    ]
