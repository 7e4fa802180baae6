"""The stack: a namespace, a KRaft Kafka cluster, its credentials, the pipeline's topics and
ACLs, and the processor.

This file only reads the stack configuration and wires the components; each concern lives in
its own module (`infra/kafka_credentials.py`, `infra/kafka_cluster.py`, `infra/topics.py`,
`infra/processor.py`).
"""

import sys
from functools import partial
from pathlib import Path

# `pulumi up` runs this file with only infra/ on the path; the project root makes `infra.*` and
# `policies.contract.topic_specs` importable exactly as the tests and the offline render import
# them.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import pulumi  # noqa: E402
import pulumi_kubernetes as k8s  # noqa: E402

from infra import (  # noqa: E402
    deployed_stack,
    metadata_version,
    security_transitions,
    stateful_volumes,
    workload,
)
from infra.alert_rules import AlertRules, AlertRulesArgs  # noqa: E402
from infra.config import load_stack_config  # noqa: E402
from infra.kafka_cluster import KafkaCluster, KafkaClusterArgs, broker_dns_names  # noqa: E402
from infra.kafka_credentials import (  # noqa: E402
    ClientAccess,
    KafkaCredentials,
    KafkaCredentialsArgs,
)
from infra.processor import Processor, ProcessorArgs  # noqa: E402
from infra.processor_properties import processor_properties  # noqa: E402
from infra.topics import (  # noqa: E402
    RECONCILER_USER,
    ScramRetirement,
    ScramRetirementArgs,
    TopicReconciliation,
    TopicReconciliationArgs,
)
from policies.contract.acl_specs import BROKER_READINESS_USER, PAIR_SWITCH_USER  # noqa: E402
from policies.contract.java_properties import format_properties  # noqa: E402
from policies.contract.topic_specs import TopicRole  # noqa: E402


def one_or_all(names: list[str]) -> str | list[str]:
    """A stack output's name, or the list of them where a pair has one per side (its
    changelogs, its StatefulSets)."""
    return names[0] if len(names) == 1 else names


config = load_stack_config()

# What the last `pulumi up` left (its outputs): some changes are safe only as a step from it.
deployed = deployed_stack.deployed_outputs()
namespace = k8s.core.v1.Namespace(
    config.namespace,
    metadata=k8s.meta.v1.ObjectMetaArgs(
        name=config.namespace,
        # Every pod here runs under the "restricted" Pod Security Standard.
        labels={
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/warn": "restricted",
        },
    ),
    opts=pulumi.ResourceOptions(
        # Deleting a namespace deletes its claims, whatever the StatefulSets' retention says.
        retain_on_delete=config.keep_data_on_destroy,
        # Every resource waits for the namespace: a rotation or rollover that skips a step, or
        # an image below the finalized metadata.version, is refused before anything changes.
        depends_on=deployed_stack.refused_steps(
            deployed,
            {
                security_transitions.DEPLOYED_OUTPUT: partial(
                    security_transitions.refuse_skipped_steps, config.security
                ),
                metadata_version.DEPLOYED_OUTPUT: partial(
                    metadata_version.refuse_downgrade, config.kafka
                ),
            },
        ),
    ),
)
in_namespace = pulumi.ResourceOptions(depends_on=[namespace])
deployed_volumes = deployed_stack.deployed_output(deployed, stateful_volumes.DEPLOYED_OUTPUT)

# TLS and one SCRAM user per workload, unless the stack runs PLAINTEXT (security.clientListener).
credentials = None
if config.security.secured:
    credentials = KafkaCredentials(
        "kafka-credentials",
        KafkaCredentialsArgs(
            namespace=config.namespace,
            cluster="kafka",
            security=config.security,
            users=config.kafka_users,
            dns_names=broker_dns_names("kafka", config.namespace, config.kafka.replicas),
        ),
        opts=in_namespace,
    )

kafka = KafkaCluster(
    "kafka",
    KafkaClusterArgs(
        namespace=config.namespace,
        config=config.kafka,
        broker_configs=config.broker_configs,
        protect_cluster_id=config.profile == "prod",
        readiness_image=config.processor.image,
        readiness_image_pull_policy=config.processor.image_pull_policy,
        security=config.security,
        credentials=credentials,
        # The reconciler's own ACLs and the readiness user's, granted in the brokers' pods: the
        # reconciler manages everyone else's, and the readiness sidecars judge before it runs.
        bootstrap_users=[
            user
            for user in config.kafka_users
            if user.name in (RECONCILER_USER, BROKER_READINESS_USER)
        ],
        readiness_user=BROKER_READINESS_USER,
        # Prometheus scrapes the brokers' sidecars as it does the processor.
        metrics_scrape=config.processor.metrics_scrape,
        metrics_namespace=config.processor.metrics_namespace,
        deployed_volumes=deployed_volumes,
    ),
    opts=in_namespace,
)

topic_specs = config.topic_specs
topics = TopicReconciliation(
    "topics",
    TopicReconciliationArgs(
        namespace=config.namespace,
        specs=topic_specs,
        bootstrap_servers=kafka.bootstrap_servers,
        image=config.processor.image,
        image_pull_policy=config.processor.image_pull_policy,
        allow_partition_increase=config.topics.allow_partition_increase,
        kafka_egress=kafka.client_egress,
        users=config.kafka_users,
        credentials=credentials,
        groups=config.group_config_specs,
    ),
    # The Job runs once the brokers are ready (Pulumi waits for the StatefulSet roll).
    opts=pulumi.ResourceOptions(depends_on=[kafka.stateful_set]),
)

# An upgrade's last step: the cluster's metadata.version raised to the release every broker
# runs, once the roll is over (Pulumi waits for the StatefulSet's roll).
finalized = metadata_version.MetadataVersion(
    "kafka-metadata-version",
    metadata_version.MetadataVersionArgs(
        namespace=config.namespace,
        kafka=config.kafka,
        bootstrap_servers=kafka.bootstrap_servers,
        kafka_egress=kafka.client_egress,
        credentials=credentials,
    ),
    # On a secured cluster it logs in with the password the reconciler's Job has set.
    opts=pulumi.ResourceOptions(depends_on=[kafka.stateful_set, topics]),
)

# One processor deployment, or the two sides of an active/standby pair (processor.pair), each
# with its own user, group, changelog, image and pods, kept out of each other's zones.
processors = []
for deployment in config.processor.deployments:
    access = (
        # Pinned: the processor rolls on a rotation and reads its password at start.
        credentials.client_access(deployment.application_id, pinned=True)
        if credentials
        else ClientAccess()
    )
    processors.append(
        Processor(
            "processor" if deployment.side is None else f"processor-{deployment.side}",
            ProcessorArgs(
                namespace=config.namespace,
                config=config.processor,
                properties=processor_properties(
                    config, kafka.bootstrap_servers, access.properties, deployment
                ),
                kafka_egress=kafka.client_egress,
                deployment=deployment,
                access=access,
                partner=workload.PairPartner(deployment.partner, config.pair_zone_anti_affinity)
                if deployment.partner is not None
                else None,
                deployed_volumes=deployed_volumes,
            ),
            # The processor starts against topics that exist with the right configs.
            opts=pulumi.ResourceOptions(depends_on=[topics]),
        )
    )

if credentials is not None:
    # A rotation's last step: the previous revision's SCRAM credentials go once every workload
    # that logs in with them has moved onto the new ones. The processor rolls (Pulumi waits for
    # the StatefulSet's roll); the brokers' readiness sidecars do not, they follow the in-place
    # update of their password file once the reconciler's Job has set it
    # (app.admin.broker_readiness).
    ScramRetirement(
        "scram-retirement",
        ScramRetirementArgs(
            reconciliation=topics,
            credentials=credentials,
            bootstrap_servers=kafka.bootstrap_servers,
            namespace=config.namespace,
            image=config.processor.image,
            image_pull_policy=config.processor.image_pull_policy,
        ),
        opts=pulumi.ResourceOptions(
            depends_on=[topics, *(p.stateful_set for p in processors), kafka.stateful_set]
        ),
    )

if config.processor.metrics_scrape == "podMonitor":
    # Where the PodMonitors go, the alerts on what they scrape go too (dashboards/alerts.yaml).
    AlertRules("alerts", AlertRulesArgs(namespace=config.namespace), opts=in_namespace)

pulumi.export("namespace", config.namespace)
pulumi.export("bootstrapServers", kafka.bootstrap_servers)
# What kafka.clusterId must say for a new stack to adopt the brokers' volumes after a destroy.
pulumi.export("kafkaClusterId", kafka.cluster_id)


pulumi.export(
    "topics",
    {
        role.value: one_or_all([s.name for s in topic_specs if s.role is role])
        for role in dict.fromkeys(s.role for s in topic_specs)
    },
)
pulumi.export("inputTopic", next(s.name for s in topic_specs if s.role is TopicRole.INPUT))
pulumi.export("processorName", one_or_all([p.name for p in processors]))
if config.processor.pair:
    # What `python -m app.admin.pair_switch` and `pair_release` take: --control-topic, --groups.
    pulumi.export("pairControlTopic", config.names.pair_control_topic)
    pulumi.export(
        "pairGroups", {d.side: d.application_id for d in config.processor.deployments if d.side}
    )
    if credentials is not None:
        # Their --command-config, for a pod that mounts the switch's Secret and the CA where the
        # workloads do: the mechanism follows security.credentialsRevision, the password is a
        # reference to the mounted file (docs/operations.md, "Releasing with the pair").
        switch_access = credentials.client_access(PAIR_SWITCH_USER)
        pulumi.export("pairSwitchClientProperties", format_properties(switch_access.properties))
pulumi.export("topicJob", topics.job_name)
pulumi.export(metadata_version.DEPLOYED_OUTPUT, finalized.release)
# What the next run checks its changes against (above): the security settings' state, and each
# claim template's size and storage class.
pulumi.export(
    security_transitions.DEPLOYED_OUTPUT, security_transitions.deployed_state(config.security)
)
pulumi.export(
    stateful_volumes.DEPLOYED_OUTPUT,
    pulumi.Output.all(kafka.volumes, *(p.volumes for p in processors)).apply(
        lambda parts: {key: entry for part in parts for key, entry in part.items()}
    ),
)
pulumi.export("clientListener", config.security.client_listener)
if credentials is not None:
    # Secret names only: `kubectl get secret <name> -o jsonpath='{.data.password}'` for a value.
    pulumi.export("userSecrets", credentials.user_secrets)
    pulumi.export("tlsSecret", credentials.tls_secret)
