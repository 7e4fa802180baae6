"""The stack's outputs: what an operator and the tools read back, and what the next `up` checks
its changes against (`infra.deployed_stack`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi

from contract.acl_specs import PAIR_SWITCH_USER
from contract.java_properties import format_properties
from contract.topic_specs import TopicRole
from infra import cluster_identity, metadata_version, security_transitions, stateful_volumes
from infra.kafka_cluster import KafkaCluster
from infra.kafka_credentials import KafkaCredentials
from infra.metadata_version import MetadataVersion
from infra.processor import Processor
from infra.stack_settings import StackConfig
from infra.topics import TopicReconciliation


def one_or_all(names: Sequence[str]) -> str | list[str]:
    """An output's name, or the list of them where a pair has one per side (its changelogs,
    its StatefulSets)."""
    return names[0] if len(names) == 1 else list(names)


def stack_outputs(
    config: StackConfig,
    kafka: KafkaCluster,
    credentials: KafkaCredentials | None,
    topics: TopicReconciliation,
    finalized: MetadataVersion,
    processors: Sequence[Processor],
) -> dict[str, Any]:
    """Every output of the stack, by name."""
    specs = config.topic_specs
    outputs: dict[str, Any] = {
        "namespace": config.namespace,
        "bootstrapServers": kafka.bootstrap_servers,
        # What kafka.clusterId must say for a new stack to adopt the brokers' volumes after a
        # destroy.
        cluster_identity.DEPLOYED_OUTPUT: kafka.cluster_id,
        "topics": {
            role.value: one_or_all([s.name for s in specs if s.role is role])
            for role in dict.fromkeys(s.role for s in specs)
        },
        "inputTopic": next(s.name for s in specs if s.role is TopicRole.INPUT),
        "processorName": one_or_all([p.name for p in processors]),
        "topicJob": topics.job_name,
        "clientListener": config.security.client_listener,
        # What the next run checks its changes against: the finalized release, the security
        # settings' state, and each claim template's size and storage class.
        metadata_version.DEPLOYED_OUTPUT: finalized.release,
        security_transitions.DEPLOYED_OUTPUT: security_transitions.deployed_state(config.security),
        stateful_volumes.DEPLOYED_OUTPUT: pulumi.Output.all(
            kafka.volumes, *(p.volumes for p in processors)
        ).apply(lambda parts: {key: entry for part in parts for key, entry in part.items()}),
    }
    if config.processor.pair:
        # What `python -m app.admin.pair_switch` and `pair_release` take: --control-topic,
        # --groups.
        outputs["pairControlTopic"] = config.names.pair_control_topic
        outputs["pairGroups"] = {
            d.side: d.application_id for d in config.processor.deployments if d.side
        }
    if credentials is not None:
        # Secret names only: `kubectl get secret <name> -o jsonpath='{.data.password}'` for a
        # value.
        outputs["userSecrets"] = credentials.user_secrets
        outputs["tlsSecret"] = credentials.tls_secret
        if config.processor.pair:
            # The switch's --command-config, for a pod that mounts its Secret and the CA where
            # the workloads do: the mechanism follows security.credentialsRevision, the password
            # is a reference to the mounted file (docs/operations.md, "Releasing with the pair").
            switch_access = credentials.client_access(PAIR_SWITCH_USER)
            outputs["pairSwitchClientProperties"] = format_properties(switch_access.properties)
    return outputs
