"""Who may do what on the cluster: one SCRAM user per workload and its ACLs, as typed specs.

Shared, like the topic specs, by the Pulumi program (which renders them for the reconciler Job
and creates each user's password) and the reconciler (which creates the ACLs). Names follow
Kafka's own: `ResourceType`, `PatternType` and `AclOperation` values as the Admin API spells
them, principals as `User:<name>`.

Standard library only: the Pulumi program imports this module from its own environment.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .topic_specs import DeploymentNames, TopicRole, TopicSpec, processor_deployments

# Kafka's name for the one CLUSTER resource an ACL can name.
CLUSTER_RESOURCE = "kafka-cluster"
# The compacted topic where the reconciler records the ACLs it created: it drops an ACL only
# when that ACL is in this ledger and no longer in the specs, never one someone else made.
ACL_LEDGER_TOPIC = "topic-reconciler-acl-ledger"
# The group id the reconciler's ledger reader names. It never joins the group or commits
# (it reads by assignment), but librdkafka's consumer needs a group id and asks for the
# group's coordinator (FindCoordinator), which needs DESCRIBE on the group.
ACL_LEDGER_READER_GROUP = ACL_LEDGER_TOPIC
# The brokers' readiness sidecars connect as this user (`app.admin.broker_readiness`).
BROKER_READINESS_USER = "broker-readiness"
# An operator shows and switches an active/standby pair's active side as this user
# (`python -m app.admin.pair_switch`): it reads and writes the pair's control topic and reads
# the sides' lag, nothing else.
PAIR_SWITCH_USER = "pair-switch"


def pair_switch_reader_group(control_topic: str) -> str:
    """The group id the switch's control-topic reader names. It never joins the group or
    commits (it reads by assignment), but librdkafka's consumer asks for the group's
    coordinator (FindCoordinator), which needs DESCRIBE on the group."""
    return f"{control_topic}-reader"


# Kafka's internal topics a broker hosts replicas of: the readiness user must see them (a
# Metadata answer leaves out every topic its principal may not DESCRIBE) to judge the ISR.
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")


class AclSpecError(ValueError):
    """An ACL spec or a set of users that cannot be reconciled."""


class ResourceType(StrEnum):
    """The Kafka resources an ACL of this project may name."""

    TOPIC = "TOPIC"
    GROUP = "GROUP"
    TRANSACTIONAL_ID = "TRANSACTIONAL_ID"
    CLUSTER = "CLUSTER"


class PatternType(StrEnum):
    """How an ACL's resource name matches: exactly, or as a prefix."""

    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"


class Operation(StrEnum):
    """Kafka's ACL operations (a subset: ALL is never granted here)."""

    READ = "READ"
    WRITE = "WRITE"
    CREATE = "CREATE"
    DELETE = "DELETE"
    ALTER = "ALTER"
    DESCRIBE = "DESCRIBE"
    DESCRIBE_CONFIGS = "DESCRIBE_CONFIGS"
    ALTER_CONFIGS = "ALTER_CONFIGS"
    IDEMPOTENT_WRITE = "IDEMPOTENT_WRITE"


@dataclass(frozen=True, order=True)
class AclSpec:
    """One ALLOW binding: a principal may do an operation on a resource (from any host)."""

    principal: str
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    operation: Operation

    def __post_init__(self) -> None:
        if not self.principal.startswith("User:") or len(self.principal) <= len("User:"):
            raise AclSpecError(f"ACL principal {self.principal!r}: must be User:<name>")
        if "*" in self.principal:
            # Kafka matches User:* to every principal, User:ANONYMOUS and future users included.
            raise AclSpecError(
                f"ACL principal {self.principal!r}: contains a wildcard (User:* is every user, "
                "present and future, User:ANONYMOUS included); name the one user that needs "
                "it, User:<name> (least privilege)"
            )
        object.__setattr__(self, "resource_type", ResourceType(self.resource_type))
        object.__setattr__(self, "pattern_type", PatternType(self.pattern_type))
        object.__setattr__(self, "operation", Operation(self.operation))
        if not self.resource_name or self.resource_name == "*":
            raise AclSpecError(
                f"ACL for {self.principal} on {self.resource_type}: resource name "
                f"{self.resource_name!r} is empty or a wildcard; name the resource (least "
                "privilege)"
            )
        if self.resource_type is ResourceType.CLUSTER and self.resource_name != CLUSTER_RESOURCE:
            raise AclSpecError(
                f"ACL for {self.principal}: a CLUSTER resource is named {CLUSTER_RESOURCE!r}, "
                f"not {self.resource_name!r}"
            )

    def describe(self) -> str:
        """One line a reviewer reads: `User:x READ TOPIC page-views (LITERAL)`."""
        return (
            f"{self.principal} {self.operation} {self.resource_type} {self.resource_name} "
            f"({self.pattern_type})"
        )

    def to_dict(self) -> dict[str, str]:
        """The JSON form the reconciler Job reads."""
        return {
            "principal": self.principal,
            "resource_type": self.resource_type.value,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.value,
            "operation": self.operation.value,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AclSpec:
        """Inverse of `to_dict`, with a clear error for a missing or unknown field."""
        known = {"principal", "resource_type", "resource_name", "pattern_type", "operation"}
        if set(data) != known:
            raise AclSpecError(f"ACL spec {dict(data)!r}: fields must be exactly {sorted(known)}")
        try:
            return cls(**{key: str(data[key]) for key in known})  # type: ignore[arg-type]
        except ValueError as exc:
            raise AclSpecError(f"ACL spec {dict(data)!r}: {exc}") from exc


@dataclass(frozen=True)
class KafkaUser:
    """One workload's identity: a SCRAM user, what it is for, and every ACL it holds."""

    name: str
    purpose: str
    acls: tuple[AclSpec, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "acls", tuple(sorted(set(self.acls))))

    @property
    def principal(self) -> str:
        """The principal Kafka's authorizer sees for this SCRAM user."""
        return f"User:{self.name}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the reconciler Job reads."""
        return {
            "name": self.name,
            "purpose": self.purpose,
            "acls": [acl.to_dict() for acl in self.acls],
        }


def _grants(
    user: str,
    resource_type: ResourceType,
    names: Iterable[str],
    operations: Iterable[Operation],
    pattern_type: PatternType = PatternType.LITERAL,
) -> list[AclSpec]:
    ops = list(operations)
    return [
        AclSpec(f"User:{user}", resource_type, name, pattern_type, op)
        for name in names
        for op in ops
    ]


def pipeline_users(
    *,
    application_id: str,
    topics: Sequence[TopicSpec],
    reconciler: str = "topic-reconciler",
    observer: str = "observer",
    readiness: str = BROKER_READINESS_USER,
    configured_groups: Sequence[str] = (),
    pair: bool = False,
    pair_switch: str = PAIR_SWITCH_USER,
) -> list[KafkaUser]:
    """The pipeline's users with least privilege; a fork that adds a workload adds it here.

    `configured_groups`: the groups whose own configs the reconciler sets (KIP-848's session
    and heartbeat, `topic_specs.GroupConfigSpec`). `pair`: the processor is an active/standby
    pair (`topic_specs.processor_deployments`): a user per side, and `pair_switch`, who switches
    the active side by writing the pair's control topic.

    READ, WRITE and ALTER imply DESCRIBE in Kafka's authorizer, so DESCRIBE is granted only
    where nothing else is.
    """
    by_role = {spec.role: spec.name for spec in topics}
    deployments = processor_deployments(application_id, pair=pair)
    processors = [
        KafkaUser(
            deployment.application_id,
            "the stateful processor"
            if deployment.side is None
            else f"side {deployment.side} of the processor's active/standby pair",
            tuple(_processor_acls(deployment, topics)),
        )
        for deployment in deployments
    ]
    topic_names = [spec.name for spec in topics]
    reconciler_acls = [
        *_grants(
            reconciler,
            ResourceType.TOPIC,
            [*topic_names, ACL_LEDGER_TOPIC],
            [
                Operation.CREATE,
                Operation.ALTER,
                Operation.ALTER_CONFIGS,
                Operation.DESCRIBE_CONFIGS,
            ],
        ),
        *_grants(
            reconciler, ResourceType.TOPIC, [ACL_LEDGER_TOPIC], [Operation.READ, Operation.WRITE]
        ),
        # FindCoordinator of the ledger reader's group id (it never joins: no READ).
        *_grants(reconciler, ResourceType.GROUP, [ACL_LEDGER_READER_GROUP], [Operation.DESCRIBE]),
        # IncrementalAlterConfigs on a KIP-848 group, and the DescribeConfigs that plans it.
        *_grants(
            reconciler,
            ResourceType.GROUP,
            configured_groups,
            [Operation.ALTER_CONFIGS, Operation.DESCRIBE_CONFIGS],
        ),
        # CreateAcls, DeleteAcls and AlterUserScramCredentials need ALTER on the cluster,
        # DescribeAcls DESCRIBE: that is Kafka's model of an ACL administrator.
        *_grants(
            reconciler,
            ResourceType.CLUSTER,
            [CLUSTER_RESOURCE],
            [Operation.ALTER, Operation.DESCRIBE],
        ),
    ]
    observer_acls = [
        *_grants(
            observer,
            ResourceType.TOPIC,
            topic_names,
            [Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS],
        ),
        *_grants(observer, ResourceType.TOPIC, [by_role[TopicRole.OUTPUT]], [Operation.READ]),
        # Committed offsets of the processor's groups (lag), never joining them.
        *_grants(
            observer,
            ResourceType.GROUP,
            [deployment.application_id for deployment in deployments],
            [Operation.DESCRIBE],
        ),
    ]
    users = [
        *processors,
        KafkaUser(reconciler, "the topic and ACL reconciler Job", tuple(reconciler_acls)),
        KafkaUser(observer, "read-only: dashboards and lag tools", tuple(observer_acls)),
        readiness_user(readiness, topic_names),
    ]
    if pair:
        users.append(
            _pair_switch_user(pair_switch, by_role, [d.application_id for d in deployments])
        )
    check_users(users)
    return users


def _pair_switch_user(
    name: str, by_role: Mapping[TopicRole, str], groups: Sequence[str]
) -> KafkaUser:
    """The user an operator switches the pair's active side as: its own, not the reconciler's,
    which administers every ACL and password, so the password used on release days writes one
    topic and reads the sides' lag, no more."""
    control = by_role[TopicRole.PAIR_CONTROL]
    acls = [
        # The active side (read), the switch (write).
        *_grants(name, ResourceType.TOPIC, [control], [Operation.READ, Operation.WRITE]),
        # FindCoordinator of its control-topic reader's group id (it never joins: no READ).
        *_grants(
            name, ResourceType.GROUP, [pair_switch_reader_group(control)], [Operation.DESCRIBE]
        ),
        # Each side's lag, which a switch must not outrun: the sides' committed offsets
        # (OffsetFetch, never joining their groups) against the input's end offsets.
        *_grants(name, ResourceType.GROUP, groups, [Operation.DESCRIBE]),
        *_grants(name, ResourceType.TOPIC, [by_role[TopicRole.INPUT]], [Operation.DESCRIBE]),
    ]
    return KafkaUser(
        name, "shows and switches the active side of the processor's pair", tuple(acls)
    )


def _processor_acls(deployment: DeploymentNames, topics: Sequence[TopicSpec]) -> list[AclSpec]:
    """One processor deployment's rights: its own changelog, group and transactional ids; the
    pipeline's input, output and dead-letter topics; and a pair's control topic."""
    by_role = {spec.role: spec.name for spec in topics}
    changelogs = [spec.name for spec in topics if spec.role is TopicRole.CHANGELOG]
    if deployment.changelog_topic not in changelogs:
        raise AclSpecError(
            f"processor {deployment.application_id}: its changelog {deployment.changelog_topic} "
            f"is not among the declared changelog topics {changelogs}"
        )
    user = deployment.application_id
    acls = [
        *_grants(user, ResourceType.TOPIC, [by_role[TopicRole.INPUT]], [Operation.READ]),
        *_grants(
            user,
            ResourceType.TOPIC,
            [deployment.changelog_topic],
            [Operation.READ, Operation.WRITE],
        ),
        *_grants(
            user,
            ResourceType.TOPIC,
            [by_role[TopicRole.OUTPUT], by_role[TopicRole.DLQ]],
            [Operation.WRITE],
        ),
        # The consumer group is the application id (as in Kafka Streams).
        *_grants(user, ResourceType.GROUP, [deployment.application_id], [Operation.READ]),
        # Transactional ids are the pod names, `<application id>-<ordinal>`.
        *_grants(
            user,
            ResourceType.TRANSACTIONAL_ID,
            [f"{deployment.application_id}-"],
            [Operation.WRITE],
            PatternType.PREFIXED,
        ),
    ]
    if deployment.side is not None:
        # A side reads which side is active and writes, inside its own transactions, what it
        # did about it (`app/processor/pair.py`); DESCRIBE comes with READ and WRITE.
        acls += _grants(
            user,
            ResourceType.TOPIC,
            [by_role[TopicRole.PAIR_CONTROL]],
            [Operation.READ, Operation.WRITE],
        )
    return acls


def readiness_user(name: str, topic_names: Sequence[str]) -> KafkaUser:
    """The brokers' readiness sidecars: DESCRIBE and nothing else.

    DESCRIBE on the topics a broker hosts (the pipeline's, the reconciler's ledger, Kafka's
    internal ones) shows their ISR in a Metadata answer; DESCRIBE on the cluster lets it read the
    ACLs (DescribeAcls), to see that the bootstrap ACLs (the reconciler's and its own) exist.
    """
    return KafkaUser(
        name,
        "the brokers' readiness sidecars: describe only",
        (
            *_grants(
                name,
                ResourceType.TOPIC,
                [*topic_names, ACL_LEDGER_TOPIC, *INTERNAL_TOPICS],
                [Operation.DESCRIBE],
            ),
            *_grants(name, ResourceType.CLUSTER, [CLUSTER_RESOURCE], [Operation.DESCRIBE]),
        ),
    )


def check_users(users: Sequence[KafkaUser]) -> None:
    """Raise unless names are unique and every ACL belongs to the user that holds it."""
    names = [user.name for user in users]
    if len(names) != len(set(names)):
        raise AclSpecError(f"user names must be unique, found {names}")
    for user in users:
        for acl in user.acls:
            if acl.principal != user.principal:
                raise AclSpecError(
                    f"user {user.name}: holds an ACL for {acl.principal} ({acl.describe()})"
                )


def dumps(users: Sequence[KafkaUser]) -> str:
    """Serialize users for the reconciler (stable order and formatting, so diffs stay small)."""
    return json.dumps({"users": [u.to_dict() for u in users]}, indent=2, sort_keys=True) + "\n"


def loads(text: str) -> list[KafkaUser]:
    """Parse the reconciler's input."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("users"), list):
        raise AclSpecError('ACL specs must be a JSON object {"users": [...]}')
    users = []
    for item in data["users"]:
        if not isinstance(item, dict) or set(item) != {"name", "purpose", "acls"}:
            raise AclSpecError(f"user spec {item!r}: fields must be name, purpose, acls")
        acls = tuple(AclSpec.from_dict(acl) for acl in item["acls"])
        users.append(KafkaUser(str(item["name"]), str(item["purpose"]), acls))
    check_users(users)
    return users
