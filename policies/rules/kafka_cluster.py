"""Rules for the KRaft Kafka cluster: quorum, pod management, broker durability configs, heap."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import ResourceValidationArgs, StackValidationArgs

from contract.broker_keys import KAFKA_DEFAULTS
from contract.container_commands import HEAP_OPTS_VARIABLE, SERVER_PROPERTIES_VARIABLE

from .config import ADVISORY, MANDATORY, Threshold, resource_rule, stack_rule
from .manifests import (
    STATEFUL_SET,
    containers,
    env,
    fmt,
    get,
    is_kafka_broker,
    java_bytes,
    kafka_configs,
    label,
    number,
    pod_spec,
    quantity,
)
from .messages import violation
from .stack_view import StackView

# Where a finding places a broker setting: the broker container's rendered server.properties.
SERVER_PROPERTIES = f"env {SERVER_PROPERTIES_VARIABLE}"


def broker_configs(resource_type: str, props: Mapping[str, Any]) -> dict[str, str]:
    """The cluster's broker configs over Kafka's defaults (from the first Kafka container)."""
    configs = dict(KAFKA_DEFAULTS)
    for container in containers(pod_spec(resource_type, props)):
        found = kafka_configs(container)
        if found:
            configs.update(found)
            break
    return configs


def is_kafka_statefulset(args: ResourceValidationArgs) -> bool:
    """Whether a resource rule is looking at the Kafka StatefulSet."""
    return args.resource_type == STATEFUL_SET and is_kafka_broker(args.resource_type, args.props)


def check_quorum_size(args: ResourceValidationArgs, cfg: Mapping[str, Any]) -> Iterator[str]:
    """An odd number of combined broker+controller nodes, at least the minimum."""
    if not is_kafka_statefulset(args):
        return
    replicas = number(get(args.props, "spec", "replicas"))
    replicas = 1.0 if replicas is None else replicas
    if replicas < cfg["minNodes"] or replicas % 2 == 0:
        yield violation(
            label(args.resource_type, args.props),
            "spec.replicas",
            fmt(replicas),
            f"an odd number >= {fmt(cfg['minNodes'])}",
            "run 3 (or 5) KRaft nodes: the controller quorum needs a majority, and replication "
            "factor 3 with min.insync.replicas=2 needs 3 brokers to survive losing one",
        )


def check_pod_management(args: ResourceValidationArgs, _: Mapping[str, Any]) -> Iterator[str]:
    """Parallel pod management: the quorum needs all nodes up before any becomes ready."""
    if not is_kafka_statefulset(args):
        return
    value = get(args.props, "spec", "podManagementPolicy", default="OrderedReady")
    if value != "Parallel":
        yield violation(
            label(args.resource_type, args.props),
            "spec.podManagementPolicy",
            value,
            "Parallel",
            "set podManagementPolicy: Parallel; with OrderedReady node 0 waits to be ready "
            "for a quorum that nodes 1 and 2 (never started) must form, and a cold start hangs",
        )


def check_durability(args: ResourceValidationArgs, cfg: Mapping[str, Any]) -> Iterator[str]:
    """Replication and ISR defaults that survive one broker down, no unclean elections."""
    if not is_kafka_statefulset(args):
        return
    subject = label(args.resource_type, args.props)
    configs = broker_configs(args.resource_type, args.props)
    min_rf, min_isr = cfg["minReplicationFactor"], cfg["minInsyncReplicas"]
    floors = {
        "default.replication.factor": min_rf,
        "offsets.topic.replication.factor": min_rf,
        "transaction.state.log.replication.factor": min_rf,
        "min.insync.replicas": min_isr,
        "transaction.state.log.min.isr": min_isr,
    }
    for key, floor in floors.items():
        value = number(configs[key])
        if value is None or value < floor:
            yield violation(
                subject,
                f"broker config {key} ({SERVER_PROPERTIES})",
                configs[key],
                f">= {fmt(floor)}",
                f"set {key}={fmt(floor)}: with fewer replicas or in-sync replicas an "
                "acknowledged write can be lost with one broker",
            )
    rf, isr = number(configs["default.replication.factor"]), number(configs["min.insync.replicas"])
    if rf is not None and isr is not None and isr >= rf:
        yield violation(
            subject,
            "broker config min.insync.replicas",
            configs["min.insync.replicas"],
            f"below default.replication.factor ({configs['default.replication.factor']})",
            "keep min.insync.replicas = replication factor - 1, or one broker down (a rolling "
            "update) blocks every acks=all producer",
        )
    if configs["unclean.leader.election.enable"].strip().lower() != "false":
        yield violation(
            subject,
            f"broker config unclean.leader.election.enable ({SERVER_PROPERTIES})",
            configs["unclean.leader.election.enable"],
            "false",
            "set unclean.leader.election.enable=false: an out-of-sync replica becoming "
            "leader silently drops acknowledged records",
        )


def check_auto_create(args: ResourceValidationArgs, _: Mapping[str, Any]) -> Iterator[str]:
    """Topics come from the reconciler only."""
    if not is_kafka_statefulset(args):
        return
    value = broker_configs(args.resource_type, args.props)["auto.create.topics.enable"]
    if value.strip().lower() != "false":
        yield violation(
            label(args.resource_type, args.props),
            f"broker config auto.create.topics.enable ({SERVER_PROPERTIES})",
            value,
            "false",
            "set auto.create.topics.enable=false: a typo in a topic name otherwise creates "
            "a topic with the broker defaults (not compacted, not co-partitioned)",
        )


def check_rebalance_delay(args: ResourceValidationArgs, cfg: Mapping[str, Any]) -> Iterator[str]:
    """A cold start waits for more members before the first assignment."""
    if not is_kafka_statefulset(args):
        return
    key = "group.initial.rebalance.delay.ms"
    value = broker_configs(args.resource_type, args.props)[key]
    if (number(value) or 0.0) < cfg["minDelayMs"]:
        yield violation(
            label(args.resource_type, args.props),
            f"broker config {key} ({SERVER_PROPERTIES})",
            value,
            f">= {fmt(cfg['minDelayMs'])} ms",
            f"set {key}={fmt(cfg['minDelayMs'])}: when all processors start together "
            "the group otherwise rebalances once per joining member",
        )


def check_heap(args: ResourceValidationArgs, cfg: Mapping[str, Any]) -> Iterator[str]:
    """-Xmx about half the memory limit: the rest is page cache, which Kafka's reads live on."""
    if not is_kafka_statefulset(args):
        return
    subject = label(args.resource_type, args.props)
    for container in containers(pod_spec(args.resource_type, args.props)):
        if not kafka_configs(container):
            continue
        limit = quantity(get(container, "resources", "limits", "memory"))
        opts = env(container).get(HEAP_OPTS_VARIABLE, "")
        match = re.search(r"-Xmx(\S+)", opts)
        heap = java_bytes(match.group(1)) if match else None
        low, high = cfg["minHeapFraction"], cfg["maxHeapFraction"]
        if heap is None or limit is None or not low * limit <= heap <= high * limit:
            found = f"-Xmx{match.group(1)}" if match else "absent"
            limit_text = get(container, "resources", "limits", "memory", default="absent")
            yield violation(
                subject,
                f"container {container.get('name', '?')} env {HEAP_OPTS_VARIABLE}",
                found,
                f"between {fmt(low)} and {fmt(high)} of limits.memory ({limit_text})",
                "set KAFKA_HEAP_OPTS=-Xms<half the limit> -Xmx<half the limit>: a larger heap "
                "starves the page cache, a heap above the limit gets the pod OOM-killed",
            )


def check_grace_period(args: ResourceValidationArgs, cfg: Mapping[str, Any]) -> Iterator[str]:
    """Time for a controlled shutdown (leadership moves away before the process exits)."""
    if not is_kafka_statefulset(args):
        return
    grace = number(get(pod_spec(args.resource_type, args.props), "terminationGracePeriodSeconds"))
    grace = 30.0 if grace is None else grace
    if grace < cfg["minSeconds"]:
        yield violation(
            label(args.resource_type, args.props),
            "spec.template.spec.terminationGracePeriodSeconds",
            fmt(grace),
            f">= {fmt(cfg['minSeconds'])}",
            "give the broker time for a controlled shutdown; a SIGKILL mid-shutdown leaves "
            "leaders to be re-elected by timeout and log recovery on the next start",
        )


def check_headless_service(
    args: StackValidationArgs, _: Mapping[str, Any]
) -> Iterator[tuple[str, str | None]]:
    """The governing Service publishes not-ready addresses: nodes find each other before ready."""
    view = StackView(args.resources)
    for cluster in view.kafka_clusters():
        if cluster.resource_type != STATEFUL_SET:
            continue
        service = view.governing_service(cluster)
        if service is None:
            continue  # stack-pdb-and-headless-service reports the missing Service
        if get(service.props, "spec", "publishNotReadyAddresses") is not True:
            yield (
                violation(
                    label(service.resource_type, service.props),
                    "spec.publishNotReadyAddresses",
                    get(service.props, "spec", "publishNotReadyAddresses", default="absent"),
                    "true",
                    "set publishNotReadyAddresses: true on the headless Service; the controller "
                    "quorum resolves its voters by pod DNS name before any pod is ready",
                ),
                service.urn,
            )


POLICIES = [
    resource_rule(
        name="kafka-quorum-size",
        description=(
            "The KRaft cluster has an odd number of combined broker+controller nodes, at least "
            "3: a controller quorum needs a majority, and replication factor 3 needs 3 brokers."
        ),
        level=MANDATORY,
        check=check_quorum_size,
        thresholds=[Threshold("minNodes", "integer", 3, "Minimum number of KRaft nodes.", 1)],
    ),
    resource_rule(
        name="kafka-parallel-pod-management",
        description=(
            "The Kafka StatefulSet uses podManagementPolicy: Parallel: the quorum needs all "
            "nodes running before any is ready, which OrderedReady never allows."
        ),
        level=MANDATORY,
        check=check_pod_management,
    ),
    resource_rule(
        name="kafka-durability-configs",
        description=(
            "Broker defaults keep acknowledged data: replication factor 3 for user, offsets and "
            "transaction topics, min.insync.replicas 2 (below the replication factor), and no "
            "unclean leader election."
        ),
        level=MANDATORY,
        check=check_durability,
        thresholds=[
            Threshold("minReplicationFactor", "integer", 3, "Minimum replication factors.", 1),
            Threshold("minInsyncReplicas", "integer", 2, "Minimum min.insync.replicas.", 1),
        ],
    ),
    resource_rule(
        name="kafka-auto-create-topics-disabled",
        description=(
            "auto.create.topics.enable=false: topics are declared and reconciled, never created "
            "by a typo with the broker defaults."
        ),
        level=ADVISORY,
        check=check_auto_create,
    ),
    resource_rule(
        name="kafka-initial-rebalance-delay",
        description=(
            "group.initial.rebalance.delay.ms gives a cold-starting group time to gather its "
            "members before the first assignment (one rebalance instead of one per member)."
        ),
        level=ADVISORY,
        check=check_rebalance_delay,
        thresholds=[
            Threshold("minDelayMs", "integer", 3000, "Minimum group.initial.rebalance.delay.ms.", 0)
        ],
    ),
    resource_rule(
        name="kafka-heap-size",
        description=(
            "KAFKA_HEAP_OPTS sets -Xmx to about half the memory limit: Kafka reads from the page "
            "cache, and a heap above the limit is an OOM kill."
        ),
        level=ADVISORY,
        check=check_heap,
        thresholds=[
            Threshold("minHeapFraction", "number", 0.25, "Lowest -Xmx / memory limit.", 0),
            Threshold("maxHeapFraction", "number", 0.75, "Highest -Xmx / memory limit.", 0),
        ],
    ),
    resource_rule(
        name="kafka-grace-period",
        description=(
            "Kafka pods get a termination grace period long enough for a controlled shutdown."
        ),
        level=ADVISORY,
        check=check_grace_period,
        thresholds=[
            Threshold("minSeconds", "integer", 60, "Minimum terminationGracePeriodSeconds.", 0)
        ],
    ),
    stack_rule(
        name="kafka-headless-service-publishes-not-ready",
        description=(
            "The Kafka StatefulSet's headless Service sets publishNotReadyAddresses: true, so "
            "the nodes resolve each other by DNS while the quorum forms."
        ),
        level=MANDATORY,
        check=check_headless_service,
    ),
]
