"""The stack: a namespace, a KRaft Kafka cluster, its credentials, the pipeline's topics and
ACLs, the processor, and their outputs. This file reads the configuration and wires the
components; each concern lives in its own module."""

import sys
from pathlib import Path

# `pulumi up` runs this file with only infra/ on the path; the project root makes `infra.*` and
# `contract.*` importable exactly as the tests and the offline render import them.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import pulumi

from contract.acl_specs import BROKER_READINESS_USER
from infra import cluster_identity, deployed_stack, preflight, stateful_volumes
from infra.alert_rules import AlertRules, AlertRulesArgs
from infra.config import load_stack_config
from infra.kafka_cluster import KafkaCluster, KafkaClusterArgs, broker_dns_names
from infra.kafka_credentials import KafkaCredentials, KafkaCredentialsArgs
from infra.metadata_version import MetadataVersion, MetadataVersionArgs
from infra.namespace import restricted_namespace
from infra.processor import processors_of
from infra.provider_settings import check_provider_settings
from infra.reconciler_jobs import RECONCILER_USER
from infra.scram_retirement import ScramRetirement, ScramRetirementArgs
from infra.stack_outputs import stack_outputs
from infra.topics import TopicReconciliation, TopicReconciliationArgs

config = load_stack_config()
check_provider_settings()
# What the last `pulumi up` left (its outputs): some changes are safe only as a step from it.
deployed = deployed_stack.deployed_outputs()
deployed_volumes = deployed_stack.deployed_output(deployed, stateful_volumes.DEPLOYED_OUTPUT)
# Every resource waits for the namespace, and the namespace for the pre-flight refusals.
namespace = restricted_namespace(config, after=preflight.passed(config, deployed))
in_namespace = pulumi.ResourceOptions(depends_on=[namespace])

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
        deployed_cluster_id=deployed_stack.deployed_output(
            deployed, cluster_identity.DEPLOYED_OUTPUT
        ),
    ),
    opts=in_namespace,
)

# Pulumi returns from a StatefulSet's update once its roll is over: what depends on
# `kafka.stateful_set` runs against brokers that all run the new template.
topics = TopicReconciliation(
    "topics",
    TopicReconciliationArgs(
        namespace=config.namespace,
        specs=config.topic_specs,
        bootstrap_servers=kafka.bootstrap_servers,
        image=config.processor.image,
        image_pull_policy=config.processor.image_pull_policy,
        allow_partition_increase=config.topics.allow_partition_increase,
        kafka_egress=kafka.client_egress,
        users=config.kafka_users,
        credentials=credentials,
        groups=config.group_config_specs,
    ),
    opts=pulumi.ResourceOptions(depends_on=[kafka.stateful_set]),
)

# An upgrade's last step: metadata.version raised to the release every broker runs. On a
# secured cluster it logs in with the password the reconciler's Job has set.
finalized = MetadataVersion(
    "kafka-metadata-version",
    MetadataVersionArgs(
        namespace=config.namespace,
        kafka=config.kafka,
        bootstrap_servers=kafka.bootstrap_servers,
        kafka_egress=kafka.client_egress,
        credentials=credentials,
    ),
    opts=pulumi.ResourceOptions(depends_on=[kafka.stateful_set, topics]),
)

# The processor starts against topics that exist with the right configs.
processors = processors_of(
    config, kafka, credentials, deployed_volumes, pulumi.ResourceOptions(depends_on=[topics])
)

if credentials is not None:
    # A rotation's last step: the previous revision's SCRAM credentials go once every workload
    # that logs in with them has moved onto the new ones. The processor rolls; the brokers'
    # readiness sidecars follow the in-place update of their password file once the
    # reconciler's Job has set it (app.admin.broker_readiness).
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
    # Where the PodMonitors go, the alerts on what they scrape go too (infra/alert_rules.py).
    AlertRules("alerts", AlertRulesArgs(config=config), opts=in_namespace)

for name, value in stack_outputs(config, kafka, credentials, topics, finalized, processors).items():
    pulumi.export(name, value)
