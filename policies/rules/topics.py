"""Rules for the declared topics (the `topics.json` the reconciler Job applies).

The JSON is parsed here with a few lines rather than with `contract.topic_specs`: the pack
must run on its own under `pulumi preview --policy-pack policies`, where the repository is not
importable, and `TopicSpec` rejects the very mistakes these rules exist to report.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pulumi_policy import ResourceValidationArgs

from contract.container_commands import SPECS_FILE as TOPICS_KEY

from .config import MANDATORY, Threshold, resource_rule
from .manifests import CONFIG_MAP, fmt, get, label, number
from .messages import violation

CO_PARTITIONED_ROLES = ("input", "output", "changelog")
UNCLEAN_ELECTION = "unclean.leader.election.enable"
DEFAULT_SEGMENT_BYTES = 1073741824  # Kafka's log.segment.bytes default (1 GiB)


@dataclass(frozen=True)
class Topic:
    """One declared topic, as the reconciler reads it."""

    name: str
    partitions: float
    replication_factor: float
    role: str
    configs: Mapping[str, str]


def declared_topics(args: ResourceValidationArgs) -> list[Topic] | str | None:
    """The topics of a topic-spec ConfigMap; an error text if unreadable; None for others."""
    return topics_of(args.resource_type, args.props)


def topics_of(resource_type: str, props: Mapping[str, Any]) -> list[Topic] | str | None:
    """`declared_topics` for any resource (stack policies see `PolicyResource`s, not args)."""
    if resource_type != CONFIG_MAP:
        return None
    text = get(props, "data", TOPICS_KEY)
    if not isinstance(text, str):
        return None
    try:
        data = json.loads(text)
        return [
            Topic(
                name=str(t["name"]),
                partitions=float(t["partitions"]),
                replication_factor=float(t["replication_factor"]),
                role=str(t["role"]),
                configs={str(k): str(v) for k, v in t.get("configs", {}).items()},
            )
            for t in data["topics"]
        ]
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        return f"{type(error).__name__}: {error}"


def group_configs_of(resource_type: str, props: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The groups' own configs a topic-spec ConfigMap declares (its `groups`, KIP-848), by
    group id; none for other resources or an unreadable file (the topic rules report that)."""
    if resource_type != CONFIG_MAP:
        return {}
    text = get(props, "data", TOPICS_KEY)
    try:
        groups = json.loads(text).get("groups", []) if isinstance(text, str) else []
        return {str(g["group"]): {str(k): str(v) for k, v in g["configs"].items()} for g in groups}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


def _topic_subject(args: ResourceValidationArgs, topic: Topic) -> str:
    return f"{label(args.resource_type, args.props)} data[{TOPICS_KEY}] topic {topic.name}"


def check_durability(args: ResourceValidationArgs, cfg: Mapping[str, Any]) -> Iterator[str]:
    """Replication factor and min.insync.replicas on every topic."""
    topics = declared_topics(args)
    if isinstance(topics, str):
        yield violation(
            label(args.resource_type, args.props),
            f"data[{TOPICS_KEY}]",
            f"unreadable ({topics})",
            '{"topics": [{"name", "partitions", "replication_factor", "role", "configs"}]}',
            "render it with contract.topic_specs.dumps",
        )
        return
    for topic in topics or ():
        subject = _topic_subject(args, topic)
        if topic.replication_factor < cfg["minReplicationFactor"]:
            yield violation(
                subject,
                "replication_factor",
                fmt(topic.replication_factor),
                f">= {fmt(cfg['minReplicationFactor'])}",
                "declare the topic with replication factor 3 (the reconciler refuses to change "
                "it later: decide before the first deploy)",
            )
        unclean = topic.configs.get(UNCLEAN_ELECTION, "false")
        if unclean.strip().lower() != "false":
            yield violation(
                subject,
                f"configs[{UNCLEAN_ELECTION}]",
                unclean,
                "false or absent (the brokers' false applies)",
                "remove the topic-level override: it wins over the brokers' setting, and an "
                "out-of-sync replica elected leader silently drops acknowledged writes (for the "
                "changelog, state the processor already counted)",
            )
        found = topic.configs.get("min.insync.replicas", "absent")
        isr = number(topic.configs.get("min.insync.replicas"))
        required = (
            f">= {fmt(cfg['minInsyncReplicas'])} and below the replication factor "
            f"({fmt(topic.replication_factor)})"
        )
        if isr is None or isr < cfg["minInsyncReplicas"]:
            yield violation(
                subject,
                "configs[min.insync.replicas]",
                found,
                required,
                f"set min.insync.replicas={fmt(cfg['minInsyncReplicas'])} on the topic: with "
                "1, an acks=all write is acknowledged by a single broker and lost with it",
            )
        elif isr >= topic.replication_factor:
            yield violation(
                subject,
                "configs[min.insync.replicas]",
                found,
                required,
                f"set min.insync.replicas={fmt(topic.replication_factor - 1)} (replication "
                "factor - 1): when it equals the replication factor, one broker down or rolling "
                "leaves too few in-sync replicas and every acks=all write (the processor's "
                "transactions) fails with NotEnoughReplicas until the broker is back",
            )


def check_changelog_compacted(args: ResourceValidationArgs, _: Mapping[str, Any]) -> Iterator[str]:
    """Changelog topics keep the latest value per key: `compact`, alone or with `delete`."""
    topics = declared_topics(args)
    for topic in topics if isinstance(topics, list) else ():
        policy = topic.configs.get("cleanup.policy", "delete")
        if topic.role == "changelog" and not is_compacted(policy):
            yield violation(
                _topic_subject(args, topic),
                "configs[cleanup.policy]",
                policy,
                "a list that includes compact (compact, or compact,delete)",
                "set cleanup.policy=compact: with delete alone, state older than retention.ms "
                "is gone, and without compaction a restore replays every update ever made",
            )


def is_compacted(cleanup_policy: str) -> bool:
    """Whether a `cleanup.policy` value (a list, as Kafka parses it) includes compaction.

    `compact,delete` compacts and also drops segments past retention.ms: a bounded changelog is
    still compacted, so it passes.
    """
    return "compact" in (part.strip() for part in cleanup_policy.split(","))


def check_changelog_segments(args: ResourceValidationArgs, cfg: Mapping[str, Any]) -> Iterator[str]:
    """Small changelog segments: the active segment is never compacted."""
    topics = declared_topics(args)
    for topic in topics if isinstance(topics, list) else ():
        if topic.role != "changelog":
            continue
        found = topic.configs.get("segment.bytes")
        size = number(found) if found is not None else float(DEFAULT_SEGMENT_BYTES)
        if size is None or size > cfg["maxSegmentBytes"]:
            yield violation(
                _topic_subject(args, topic),
                "configs[segment.bytes]",
                found if found is not None else f"absent (broker default {DEFAULT_SEGMENT_BYTES})",
                f"<= {fmt(cfg['maxSegmentBytes'])}",
                f"set segment.bytes={fmt(cfg['maxSegmentBytes'])} (64 MiB): the active segment "
                "is never compacted, so a 1 GiB segment means a restore replays up to 1 GiB of "
                "superseded updates",
            )


def check_co_partitioned(args: ResourceValidationArgs, _: Mapping[str, Any]) -> Iterator[str]:
    """Input, output and changelog topics have the same partition count."""
    topics = declared_topics(args)
    if not isinstance(topics, list):
        return
    counts = {t.name: t.partitions for t in topics if t.role in CO_PARTITIONED_ROLES}
    if len(set(counts.values())) > 1:
        yield violation(
            label(args.resource_type, args.props),
            f"data[{TOPICS_KEY}] partitions",
            ", ".join(f"{name}={fmt(n)}" for name, n in counts.items()),
            "the same count for the input, output and changelog topics",
            "give them one partition count: the processor writes a key's result and its state "
            "change to the input record's partition number",
        )


POLICIES = [
    resource_rule(
        name="topic-durability",
        description=(
            "Every declared topic has replication factor >= 3 and min.insync.replicas >= 2 "
            "(below the replication factor), and none enables unclean leader election: one "
            "broker can fail, or roll, without losing or blocking acknowledged writes."
        ),
        level=MANDATORY,
        check=check_durability,
        thresholds=[
            Threshold("minReplicationFactor", "integer", 3, "Minimum replication factor.", 1),
            Threshold("minInsyncReplicas", "integer", 2, "Minimum min.insync.replicas.", 1),
        ],
    ),
    resource_rule(
        name="changelog-compacted",
        description=(
            "Changelog topics are compacted (cleanup.policy compact, or compact,delete): the "
            "changelog is the state's backup, and compaction keeps one record per key so a "
            "restore is as short as the state."
        ),
        level=MANDATORY,
        check=check_changelog_compacted,
    ),
    resource_rule(
        name="changelog-segment-size",
        description=(
            "Changelog topics use small segments (segment.bytes at or under 64 MiB): the active "
            "segment is never compacted, and the default 1 GiB makes restores replay millions "
            "of redundant records."
        ),
        level=MANDATORY,
        check=check_changelog_segments,
        thresholds=[
            Threshold("maxSegmentBytes", "integer", 67108864, "Largest changelog segment.bytes.", 1)
        ],
    ),
    resource_rule(
        name="topics-co-partitioned",
        description=(
            "The input, output and changelog topics are co-partitioned (same partition count): "
            "partition N of each holds the same keys."
        ),
        level=MANDATORY,
        check=check_co_partitioned,
    ),
]
