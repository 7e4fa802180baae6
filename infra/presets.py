"""Every default of a stack, in one place: `PRESETS` by profile (dev, prod). A stack file sets only
what differs from its profile's preset."""

from __future__ import annotations

from typing import Any

from contract.topic_specs import (
    PipelineNames,
)

# The broker image, pinned by digest (the index digest of Docker Hub's apache/kafka:4.3.1, the
# release whose jars `devkit/kafka_release.py` runs locally): a tag can be pushed again, and a
# roll would then run two versions side by side.
KAFKA_IMAGE = (
    "apache/kafka:4.3.1@sha256:77e3df9054047a88b520d0cc46e16696d3b22022e1d580aeccd2632df6532837"
)
# Where the prod stack expects the processor image your CI pushes, pinned by the digest that
# `docker push` printed; the zeros are the example's placeholder, which a fork replaces.
EXAMPLE_PROCESSOR_IMAGE = "ghcr.io/example/stateful-streaming-processor:0.1.0@sha256:" + "0" * 64


# The pipeline's default names (a fork renames them in `contract/topic_specs.py`).
PIPELINE = PipelineNames()

_BASE: dict[str, Any] = {
    "namespace": "streaming",
    "keepDataOnDestroy": True,
    "kafka": {
        "replicas": 3,
        "image": KAFKA_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "storageClassName": "standard",
        "storage": "2Gi",
        "cpu": "500m",
        "memory": "1Gi",
        "antiAffinity": "preferred",
        "zoneSpread": False,
        "terminationGracePeriodSeconds": 60,
        # Log recovery after an unclean stop can take minutes on a large disk.
        "startupProbe": {"initialDelaySeconds": 10, "periodSeconds": 10, "failureThreshold": 30},
        "configs": {"group.initial.rebalance.delay.ms": "0"},
        "clusterId": "",
        "metadataVersion": "",
    },
    "topics": {
        "inputTopic": PIPELINE.input_topic,
        "outputTopic": PIPELINE.output_topic,
        "partitions": 6,
        "replicationFactor": 3,
        "minInsyncReplicas": 2,
        # 64 MiB: the active segment is never compacted, so this bounds what a restore replays.
        "changelogSegmentBytes": 64 * 1024 * 1024,
        "dlqPartitions": 1,
        "allowPartitionIncrease": False,
        "configs": {},
    },
    "processor": {
        "applicationId": PIPELINE.application_id,
        "image": "stateful-streaming/processor:0.1.0",
        "imagePullPolicy": "IfNotPresent",
        "replicas": 2,
        "stateful": True,
        # A rollout with static membership stops each restarted pod's partitions for its
        # whole restart, 10-37 s; a hand-off moves them at once, to their standby copy, 2-5 s
        # without output (docs/benchmarks.md, "Membership in the dev stack"). A copy on each
        # other replica (replicas - 1): the assignor does not know where copies are, so with
        # fewer a moved partition may restore its whole changelog (docs/benchmarks.md, "Warm
        # copies": the copies double the changelog reads, no measurable CPU).
        "membershipMode": "handoff",
        "groupProtocol": "classic",
        "numStandbyReplicas": 1,
        "cpu": "1",
        "memory": "2Gi",
        "storageClassName": "standard",
        "storage": "1Gi",
        "antiAffinity": "preferred",
        "zoneSpread": False,
        "podManagementPolicy": "OrderedReady",
        "minReadySeconds": 10,
        # The longest batch (a few seconds) plus stopping the query and closing the consumer.
        "terminationGracePeriodSeconds": 60,
        # SparkSession start (3-10 s) plus a restore from the changelog.
        "startupProbe": {"initialDelaySeconds": 5, "periodSeconds": 5, "failureThreshold": 24},
        "partition": 0,
        "sessionTimeoutMarginSeconds": 15,
        # Opt-in: a PodMonitor needs the Prometheus Operator's CRD, annotations a scrape job
        # that reads them; neither is there on every cluster.
        "metricsScrape": "none",
        "metricsNamespace": "monitoring",
        "properties": {},
        # Opt-in: two complete deployments cost twice the processor's resources.
        "pair": False,
        "pairImages": {},
    },
    "security": {
        "clientListener": "PLAINTEXT",
        "certificates": "generated",
        "issuerName": "",
        "issuerKind": "Issuer",
        "credentialsRevision": 1,
        "caGeneration": 1,
        "trustedCaGenerations": [],
    },
}

# Every default, per profile: `dev` fits a kind cluster on a laptop, `prod` a real cluster.
PRESETS: dict[str, dict[str, Any]] = {
    "dev": _BASE,
    "prod": {
        **_BASE,
        "kafka": {
            **_BASE["kafka"],
            "imagePullPolicy": "Always",
            "storageClassName": "",
            "storage": "100Gi",
            "cpu": "2",
            "memory": "8Gi",
            "antiAffinity": "required",
            "zoneSpread": True,
            "terminationGracePeriodSeconds": 120,
            # A cold start waits this long for more members before the first assignment.
            "configs": {"group.initial.rebalance.delay.ms": "3000"},
        },
        "topics": {**_BASE["topics"], "partitions": 12},
        "processor": {
            **_BASE["processor"],
            "image": EXAMPLE_PROCESSOR_IMAGE,
            "imagePullPolicy": "Always",
            "replicas": 3,
            "numStandbyReplicas": 2,  # replicas - 1, as dev's
            "cpu": "2",
            "memory": "4Gi",
            "storageClassName": "",
            "storage": "20Gi",
            "antiAffinity": "required",
            "zoneSpread": True,
            "minReadySeconds": 30,
            "terminationGracePeriodSeconds": 120,
            "startupProbe": {
                "initialDelaySeconds": 10,
                "periodSeconds": 10,
                "failureThreshold": 30,
            },
        },
        "security": {**_BASE["security"], "clientListener": "SASL_SSL"},
    },
}
