"""Rules for the stream processor: a StatefulSet with its state on a PVC, rolled slowly."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import ResourceValidationArgs, StackValidationArgs

from contract.java_properties import load_properties
from contract.processor_keys import key_problems

from .config import MANDATORY, Threshold, resource_rule, stack_rule
from .group_membership import JUDGED_KEYS
from .manifests import (
    CONFIG_MAP,
    STATEFUL_SET,
    fmt,
    get,
    is_processor,
    items,
    label,
    number,
    pod_spec,
    processor_container,
)
from .messages import violation
from .stack_view import PROPERTIES_KEY, StackView
from .topics import topics_of

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
_CHANGELOG_CHECKPOINTING_KEY = (
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
)


def _processor_statefulset(args: ResourceValidationArgs) -> bool:
    return args.resource_type == STATEFUL_SET and is_processor(args.resource_type, args.props)


def check_min_ready_seconds(args: ResourceValidationArgs, cfg: Mapping[str, Any]) -> Iterator[str]:
    """The roll waits after each pod is ready, so it cannot outrun the consumer group."""
    if not _processor_statefulset(args):
        return
    found = number(get(args.props, "spec", "minReadySeconds")) or 0.0
    if found < cfg["minSeconds"]:
        yield violation(
            label(args.resource_type, args.props),
            "spec.minReadySeconds",
            fmt(found),
            f">= {fmt(cfg['minSeconds'])}",
            f"set minReadySeconds: {fmt(cfg['minSeconds'])} (GA since Kubernetes 1.25): the "
            "next pod must not stop before this one has rejoined the group and caught up",
        )


def check_state_volume(
    args: StackValidationArgs, _: Mapping[str, Any]
) -> Iterator[tuple[str, str | None]]:
    """A claim template mounted where `state.dir` (the Spark checkpoint) lives."""
    for processor in StackView(args.resources).processors():
        workload = processor.workload
        if not processor.stateful or workload.resource_type != STATEFUL_SET:
            continue
        state_dir = processor.properties.get("state.dir")
        templates = {
            get(t, "metadata", "name")
            for t in items(workload.props, "spec", "volumeClaimTemplates")
        }
        container = processor_container(pod_spec(workload.resource_type, workload.props)) or {}
        mounts = {
            get(m, "mountPath"): get(m, "name")
            for m in items(container, "volumeMounts")
            if get(m, "name") in templates
        }
        covered = state_dir and any(
            posixpath.commonpath([str(path), state_dir]) == posixpath.normpath(str(path))
            for path in mounts
        )
        if not covered:
            yield (
                violation(
                    label(workload.resource_type, workload.props),
                    f"volumeMounts of a volumeClaimTemplate at state.dir ({state_dir})",
                    ", ".join(f"{name} at {path}" for path, name in mounts.items())
                    or f"no claim template mounted (templates: {sorted(map(str, templates))})",
                    "a volumeClaimTemplate mounted at state.dir or a parent of it",
                    "add a volumeClaimTemplate (e.g. `state`) and mount it at state.dir; the "
                    "checkpoint (offsets log and RocksDB) on an emptyDir is lost with the pod",
                ),
                workload.urn,
            )


def check_grace_period(args: ResourceValidationArgs, cfg: Mapping[str, Any]) -> Iterator[str]:
    """SIGTERM lets the current batch finish and the consumer close."""
    if not _processor_statefulset(args):
        return
    grace = number(get(pod_spec(args.resource_type, args.props), "terminationGracePeriodSeconds"))
    grace = 30.0 if grace is None else grace
    needed = cfg["longestBatchSeconds"] + cfg["shutdownSeconds"]
    if grace < needed:
        yield violation(
            label(args.resource_type, args.props),
            "spec.template.spec.terminationGracePeriodSeconds",
            fmt(grace),
            f">= longest batch {fmt(cfg['longestBatchSeconds'])} s + shutdown "
            f"{fmt(cfg['shutdownSeconds'])} s = {fmt(needed)} s",
            "raise terminationGracePeriodSeconds: a SIGKILL mid-batch aborts its transaction and "
            "the next start redoes the batch",
        )


def check_replicas_within_partitions(
    args: StackValidationArgs, _: Mapping[str, Any]
) -> Iterator[tuple[str, str | None]]:
    """No more processor pods than input partitions: a member beyond the count owns nothing."""
    view = StackView(args.resources)
    partitions: dict[str, float] = {}
    for resource in view.of_type(CONFIG_MAP):
        topics = topics_of(resource.resource_type, resource.props)
        for topic in topics if isinstance(topics, list) else ():
            partitions[topic.name] = topic.partitions
    for processor in view.processors():
        workload = processor.workload
        input_topic = processor.properties.get("input.topic")
        replicas = number(get(workload.props, "spec", "replicas"))
        replicas = 1.0 if replicas is None else replicas
        # An input topic this stack does not declare is someone else's: nothing to compare.
        if input_topic not in partitions or replicas <= partitions[input_topic]:
            continue
        yield (
            violation(
                label(workload.resource_type, workload.props),
                "spec.replicas",
                fmt(replicas),
                f"<= the partition count of its input topic {input_topic} "
                f"({fmt(partitions[input_topic])})",
                "lower spec.replicas (or add partitions to every co-partitioned topic first): "
                "the group gives each partition to one member, so a pod beyond the partition "
                "count owns nothing and only holds a volume and its CPU",
            ),
            workload.urn,
        )


def check_state_store(args: ResourceValidationArgs, _: Mapping[str, Any]) -> Iterator[str]:
    """RocksDB state store with changelog checkpointing."""
    if args.resource_type != CONFIG_MAP:
        return
    text = get(args.props, "data", PROPERTIES_KEY)
    if not isinstance(text, str):
        return
    properties = load_properties(text)
    if properties.get("stateful", "true").lower() == "false":
        return
    subject = f"{label(args.resource_type, args.props)} data[{PROPERTIES_KEY}]"
    expected = {_PROVIDER_KEY: ROCKSDB_PROVIDER, _CHANGELOG_CHECKPOINTING_KEY: "true"}
    for key, wanted in expected.items():
        found = properties.get(key)
        if (found or "").lower() != wanted.lower():
            yield violation(
                subject,
                key,
                found or "absent",
                wanted,
                f"set {key}={wanted}: the default HDFS-backed store keeps all state on the JVM "
                "heap and snapshots it whole; RocksDB with changelog checkpointing uploads only "
                "the changes of each batch",
            )


def check_settings_contract(args: ResourceValidationArgs, _: Mapping[str, Any]) -> Iterator[str]:
    """Every contract key in the properties file has a value its row accepts."""
    if args.resource_type != CONFIG_MAP:
        return
    text = get(args.props, "data", PROPERTIES_KEY)
    if not isinstance(text, str):
        return
    subject = f"{label(args.resource_type, args.props)} data[{PROPERTIES_KEY}]"
    properties = load_properties(text)
    for key, problem in key_problems(properties):
        if key in JUDGED_KEYS:
            continue  # the group-* rules report it, with their own fix
        yield violation(
            subject,
            key,
            properties[key],
            f"what its row in the contract accepts ({problem})",
            "change or remove it: the processor checks the same row at start and refuses to "
            "run (contract/processor_keys.py)",
        )


POLICIES = [
    resource_rule(
        name="processor-settings-contract",
        description=(
            "Every key of the processor's properties file that the contract defines has a value "
            "its row accepts (type, range, allowed values), and none that the processor sets "
            "itself: the processor checks the same rows at start and refuses to run."
        ),
        level=MANDATORY,
        check=check_settings_contract,
    ),
    resource_rule(
        name="processor-min-ready-seconds",
        description=(
            "The processor StatefulSet sets minReadySeconds, so a rolling update waits for each "
            "new pod to rejoin and catch up before it stops the next one."
        ),
        level=MANDATORY,
        check=check_min_ready_seconds,
        thresholds=[Threshold("minSeconds", "integer", 30, "Minimum spec.minReadySeconds.", 0)],
    ),
    stack_rule(
        name="processor-state-volume",
        description=(
            "The processor's state.dir (Spark checkpoint and RocksDB) is on a volumeClaimTemplate "
            "mount: a restarted pod finds its state and restores nothing."
        ),
        level=MANDATORY,
        check=check_state_volume,
    ),
    resource_rule(
        name="processor-grace-period",
        description=(
            "The processor's terminationGracePeriodSeconds covers the longest batch plus "
            "shutdown: SIGTERM finishes the batch and closes the consumer without a kill."
        ),
        level=MANDATORY,
        check=check_grace_period,
        thresholds=[
            Threshold("longestBatchSeconds", "integer", 60, "Longest expected batch.", 0),
            Threshold("shutdownSeconds", "integer", 15, "Query stop and consumer close.", 0),
        ],
    ),
    stack_rule(
        name="processor-replicas-within-partitions",
        description=(
            "The processor runs at most as many pods as its input topic has partitions: the "
            "consumer group gives each partition to one member, so any pod beyond that count "
            "is idle."
        ),
        level=MANDATORY,
        check=check_replicas_within_partitions,
    ),
    resource_rule(
        name="processor-state-store",
        description=(
            "A stateful processor uses Spark's RocksDB state store provider with changelog "
            "checkpointing: state off the heap, and each checkpoint uploads only its changes."
        ),
        level=MANDATORY,
        check=check_state_store,
    ),
]
