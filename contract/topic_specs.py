"""The pipeline's topics as typed specs, shared by the Pulumi program and the topic reconciler.

Standard library only: the Pulumi program imports this module from its own environment.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from .processor_keys import PAIR_SIDES


class TopicRole(StrEnum):
    """What a topic is for; the rules (compaction, co-partitioning) follow from the role."""

    INPUT = "input"
    OUTPUT = "output"
    CHANGELOG = "changelog"
    DLQ = "dlq"
    # An active/standby pair's compacted control topic: which side publishes (DESIGN.md, 9).
    PAIR_CONTROL = "pair-control"


# Roles whose partition N holds the same keys: the processor writes a result and its state
# change to the partition of the input record, so their counts must be equal.
CO_PARTITIONED_ROLES = frozenset({TopicRole.INPUT, TopicRole.OUTPUT, TopicRole.CHANGELOG})


# Topic-level override of the broker setting; true trades acknowledged writes for availability.
UNCLEAN_ELECTION = "unclean.leader.election.enable"


class TopicSpecError(ValueError):
    """A topic spec or a set of specs that cannot be deployed safely."""


@dataclass(frozen=True)
class TopicSpec:
    """One topic: name, partitions, replication factor and topic-level configs (Kafka's names)."""

    name: str
    partitions: int
    replication_factor: int
    role: TopicRole
    configs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 249:
            raise TopicSpecError(f"topic name {self.name!r}: must be 1-249 characters")
        if self.partitions < 1:
            raise TopicSpecError(f"topic {self.name}: partitions={self.partitions}, must be >= 1")
        if self.replication_factor < 1:
            raise TopicSpecError(
                f"topic {self.name}: replication_factor={self.replication_factor}, must be >= 1"
            )
        object.__setattr__(self, "role", TopicRole(self.role))
        configs = {str(k): str(v) for k, v in self.configs.items()}
        object.__setattr__(self, "configs", MappingProxyType(dict(sorted(configs.items()))))
        if configs.get(UNCLEAN_ELECTION, "false").strip().lower() != "false":
            raise TopicSpecError(
                f"topic {self.name}: {UNCLEAN_ELECTION}={configs[UNCLEAN_ELECTION]}, must be "
                "false (or absent: the brokers' false applies): an out-of-sync replica elected "
                "leader silently drops the acknowledged writes it lacks, and with them "
                "exactly-once (remove it from topics.configs)"
            )
        if self.role is TopicRole.CHANGELOG and "compact" not in configs.get(
            "cleanup.policy", ""
        ).split(","):
            raise TopicSpecError(
                f"topic {self.name}: a changelog topic needs cleanup.policy=compact "
                f"(found {configs.get('cleanup.policy', 'the broker default, delete')}); "
                "without compaction a restore replays every update ever made"
            )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the reconciler Job reads."""
        return {
            "name": self.name,
            "partitions": self.partitions,
            "replication_factor": self.replication_factor,
            "role": self.role.value,
            "configs": dict(self.configs),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TopicSpec:
        """Inverse of `to_dict`, with a clear error for a missing or unknown field."""
        known = {"name", "partitions", "replication_factor", "role", "configs"}
        unknown = set(data) - known
        if unknown:
            raise TopicSpecError(
                f"topic spec has unknown fields {sorted(unknown)}; known: {sorted(known)}"
            )
        missing = known - {"configs"} - set(data)
        if missing:
            raise TopicSpecError(f"topic spec {data.get('name', '?')!r} misses {sorted(missing)}")
        return cls(
            name=str(data["name"]),
            partitions=int(data["partitions"]),
            replication_factor=int(data["replication_factor"]),
            role=TopicRole(data["role"]),
            configs=dict(data.get("configs", {})),
        )


def check_co_partitioned(specs: Iterable[TopicSpec]) -> None:
    """Raise unless the input, output and changelog topics have the same partition count."""
    counts = {s.name: s.partitions for s in specs if s.role in CO_PARTITIONED_ROLES}
    if len(set(counts.values())) > 1:
        listing = ", ".join(f"{name}={n}" for name, n in counts.items())
        raise TopicSpecError(
            f"input, output and changelog topics must be co-partitioned (same partition count); "
            f"found {listing}"
        )


@dataclass(frozen=True)
class GroupConfigSpec:
    """A consumer group's broker-side configs (KIP-848: its session and heartbeat), which the
    reconciler sets on the GROUP resource."""

    group: str
    configs: Mapping[str, str]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the reconciler reads."""
        return {"group": self.group, "configs": dict(sorted(self.configs.items()))}


def dumps(specs: Sequence[TopicSpec], groups: Sequence[GroupConfigSpec] = ()) -> str:
    """Serialize specs for the reconciler (stable order and formatting, so diffs stay small; no
    `groups` key without groups, so a classic stack's file is as it was)."""
    data: dict[str, Any] = {"topics": [s.to_dict() for s in specs]}
    if groups:
        data["groups"] = [g.to_dict() for g in groups]
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def loads_groups(text: str) -> list[GroupConfigSpec]:
    """The group configs of the reconciler's input (none when it has no `groups` key)."""
    data = json.loads(text)
    groups = data.get("groups", []) if isinstance(data, dict) else None
    if not isinstance(groups, list):
        raise TopicSpecError('group configs must be a JSON list {"groups": [...]}')
    found = []
    for item in groups:
        if not isinstance(item, dict) or not isinstance(item.get("configs"), dict):
            raise TopicSpecError(
                f'a group config is {{"group": ..., "configs": {{...}}}}: {item!r}'
            )
        found.append(
            GroupConfigSpec(
                str(item["group"]), {str(k): str(v) for k, v in item["configs"].items()}
            )
        )
    return found


def loads(text: str) -> list[TopicSpec]:
    """Parse the reconciler's input and check co-partitioning."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("topics"), list):
        raise TopicSpecError('topic specs must be a JSON object {"topics": [...]}')
    specs = [TopicSpec.from_dict(item) for item in data["topics"]]
    names = [s.name for s in specs]
    if len(names) != len(set(names)):
        raise TopicSpecError(f"topic names must be unique, found {names}")
    check_co_partitioned(specs)
    return specs


@dataclass(frozen=True)
class DeploymentNames:
    """What one processor deployment owns by name: a single deployment's, or one side's of an
    active/standby pair (`side` a or b, `partner` the other side's application id).

    The application id is the deployment's consumer group, its StatefulSet's name (so its pods'
    names, which are its transactional ids), its Kafka user and its changelog's prefix: two sides
    never share state, offsets or producer fencing.
    """

    application_id: str
    side: str | None = None
    partner: str | None = None

    @property
    def changelog_topic(self) -> str:
        """The state's compacted changelog (the state store's name, whatever the aggregation)."""
        return f"{self.application_id}-counts-changelog"


def processor_deployments(application_id: str, *, pair: bool) -> tuple[DeploymentNames, ...]:
    """The pipeline's processor deployments: one named `application_id`, or a pair whose sides
    are `<application id>-a` and `<application id>-b`."""
    if not pair:
        return (DeploymentNames(application_id),)
    (a, b), (id_a, id_b) = PAIR_SIDES, (f"{application_id}-{side}" for side in PAIR_SIDES)
    return (DeploymentNames(id_a, a, id_b), DeploymentNames(id_b, b, id_a))


@dataclass(frozen=True)
class PipelineNames:
    """The application id and the pipeline's topic names, the changelog's, the dead-letter
    topic's and a pair's control topic's derived from the application id: the one place that
    names them (the Pulumi program's presets, the local run, the load generator and the
    benchmarks read them from here)."""

    application_id: str = "page-view-counter"
    input_topic: str = "page-views"
    output_topic: str = "page-view-counts"

    @property
    def changelog_topic(self) -> str:
        """The state's compacted changelog (a single deployment's)."""
        return DeploymentNames(self.application_id).changelog_topic

    @property
    def dlq_topic(self) -> str:
        """The dead-letter topic (both sides of a pair write the same one)."""
        return f"{self.application_id}-dlq"

    @property
    def pair_control_topic(self) -> str:
        """An active/standby pair's compacted control topic: which side publishes."""
        return f"{self.application_id}-pair-control"

    def deployments(self, *, pair: bool) -> tuple[DeploymentNames, ...]:
        """The processor deployments (`processor_deployments`)."""
        return processor_deployments(self.application_id, pair=pair)


def pipeline_topics(
    *,
    application_id: str,
    input_topic: str,
    output_topic: str,
    partitions: int,
    replication_factor: int,
    min_insync_replicas: int,
    changelog_segment_bytes: int,
    dlq_partitions: int = 1,
    pair: bool = False,
) -> list[TopicSpec]:
    """The page-view pipeline's topics; a fork that changes the pipeline edits this.

    With `pair`, an active/standby pair's: a changelog per side (each side its own state) and
    the pair's control topic; the input, output and dead-letter topics are the sides' common
    ones.
    """
    names = PipelineNames(application_id, input_topic, output_topic)
    durable = {"min.insync.replicas": str(min_insync_replicas)}
    compacted = {
        **durable,
        "cleanup.policy": "compact",
        # The active segment is never compacted: small segments keep a restore short.
        "segment.bytes": str(changelog_segment_bytes),
    }
    specs = [
        TopicSpec(input_topic, partitions, replication_factor, TopicRole.INPUT, durable),
        TopicSpec(output_topic, partitions, replication_factor, TopicRole.OUTPUT, compacted),
        *(
            TopicSpec(
                deployment.changelog_topic,
                partitions,
                replication_factor,
                TopicRole.CHANGELOG,
                compacted,
            )
            for deployment in names.deployments(pair=pair)
        ),
        TopicSpec(names.dlq_topic, dlq_partitions, replication_factor, TopicRole.DLQ, durable),
    ]
    if pair:
        # One partition: one ordered history of switches, which both sides read whole.
        # Compacted: the latest record per key (the active side) outlives any retention.
        control = {**durable, "cleanup.policy": "compact"}
        specs.append(
            TopicSpec(
                names.pair_control_topic, 1, replication_factor, TopicRole.PAIR_CONTROL, control
            )
        )
    check_co_partitioned(specs)
    return specs
