"""The processor's Kafka user holds no more than its own rights in the ACLs the topic Job applies.

`acls.json` (written by `app.acl_specs.dumps`) is parsed here with a few lines rather than with
`app.acl_specs`: the pack runs on its own under `pulumi preview --policy-pack policies`, where
the repository is not importable, and `AclSpec` rejects some of the very grants (a wildcard
name) this rule exists to report.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pulumi_policy import PolicyResource, StackValidationArgs

from .config import ADVISORY, stack_rule
from .manifests import CONFIG_MAP, get, label
from .messages import violation
from .stack_view import ProcessorDeployment, StackView

ACLS_KEY = "acls.json"
_FIELDS = ("principal", "resource_type", "resource_name", "pattern_type", "operation")
_WILDCARD_PRINCIPAL = "User:*"
# What the processor does with each of its topics, by the property that names the topic.
# READ and WRITE imply DESCRIBE in Kafka's authorizer; an explicit DESCRIBE is harmless.
_TOPIC_OPERATIONS = {
    "input.topic": frozenset({"READ", "DESCRIBE"}),
    "changelog.topic": frozenset({"READ", "WRITE", "DESCRIBE"}),
    "output.topic": frozenset({"WRITE", "DESCRIBE"}),
    "dlq.topic": frozenset({"WRITE", "DESCRIBE"}),
}
_GROUP_OPERATIONS = frozenset({"READ", "DESCRIBE"})
_TRANSACTIONAL_OPERATIONS = frozenset({"WRITE", "DESCRIBE"})
_CLUSTER_OPERATIONS = frozenset({"IDEMPOTENT_WRITE"})

Finding = tuple[str, str | None]


@dataclass(frozen=True)
class Acl:
    """One ALLOW binding of `acls.json`."""

    principal: str
    resource_type: str
    resource_name: str
    pattern_type: str
    operation: str

    def describe(self) -> str:
        """`User:x READ TOPIC page-views (LITERAL)`, as `app.acl_specs` prints it."""
        return (
            f"{self.principal} {self.operation} {self.resource_type} {self.resource_name} "
            f"({self.pattern_type})"
        )


def acls_of(resource: PolicyResource) -> list[Acl] | str | None:
    """The ACLs of a ConfigMap holding `acls.json`; an error text if unreadable; None for others."""
    if resource.resource_type != CONFIG_MAP:
        return None
    text = get(resource.props, "data", ACLS_KEY)
    if not isinstance(text, str):
        return None
    try:
        return [_acl(acl) for user in json.loads(text)["users"] for acl in user["acls"]]
    except (ValueError, KeyError, TypeError) as error:
        return f"{type(error).__name__}: {error}"


def _acl(data: Mapping[str, Any]) -> Acl:
    """An ACL from its JSON form; Kafka's enum names are case-insensitive, names are not."""
    values = {name: str(data[name]).strip() for name in _FIELDS}
    return Acl(
        principal=values["principal"],
        resource_type=values["resource_type"].upper(),
        resource_name=values["resource_name"],
        pattern_type=values["pattern_type"].upper(),
        operation=values["operation"].upper(),
    )


@dataclass(frozen=True)
class ProcessorRights:
    """Everything the processor's user needs, from the processor's own properties."""

    user: str
    application_id: str
    topics: Mapping[str, frozenset[str]]

    @classmethod
    def of(cls, processor: ProcessorDeployment) -> ProcessorRights | None:
        """The rights of a processor whose properties name its application (None otherwise)."""
        properties = processor.properties
        application_id = properties.get("application.id", "").strip()
        if not application_id:
            return None
        topics: dict[str, frozenset[str]] = {}
        for key, operations in _TOPIC_OPERATIONS.items():
            name = properties.get(key, "").strip()
            if name:
                topics[name] = topics.get(name, frozenset()) | operations
        user = properties.get("sasl.username", "").strip() or application_id
        return cls(user, application_id, topics)

    @property
    def principal(self) -> str:
        """The principal the authorizer sees for the processor's SCRAM user."""
        return f"User:{self.user}"

    def holds(self, acl: Acl) -> bool:
        """Whether the ACL applies to the processor's user (its own, or granted to everyone)."""
        return acl.principal in (self.principal, _WILDCARD_PRINCIPAL)

    def summary(self) -> str:
        """The processor's rights in one line, for a message's `required`."""
        topics = "; ".join(
            f"{'/'.join(sorted(ops))} on topic {t}" for t, ops in self.topics.items()
        )
        return (
            f"only {topics}; READ/DESCRIBE on group {self.application_id}; WRITE/DESCRIBE on "
            f"transactional ids {self.application_id}-* (PREFIXED); IDEMPOTENT_WRITE on the "
            "cluster"
        )

    def excess(self, acl: Acl) -> str | None:
        """Why an ACL gives more than the processor needs (None: within its rights)."""
        op, name, literal = acl.operation, acl.resource_name, acl.pattern_type == "LITERAL"
        if op == "ALL":
            return "ALL operations"
        if "*" in name:
            return "a wildcard resource name"
        if acl.resource_type == "TOPIC":
            if not literal:
                return f"a {acl.pattern_type} topic pattern"
            if name not in self.topics:
                return "a topic that is none of its input, changelog, output and dead-letter topics"
            if op not in self.topics[name]:
                return f"{op} on a topic it only needs {'/'.join(sorted(self.topics[name]))} on"
            return None
        if acl.resource_type == "GROUP":
            if not literal or name != self.application_id:
                return f"a group other than its own ({self.application_id})"
            return None if op in _GROUP_OPERATIONS else f"{op} on its group"
        if acl.resource_type == "TRANSACTIONAL_ID":
            if not name.startswith(f"{self.application_id}-"):
                return f"transactional ids not under {self.application_id}-"
            return None if op in _TRANSACTIONAL_OPERATIONS else f"{op} on its transactional ids"
        if acl.resource_type == "CLUSTER":
            return None if op in _CLUSTER_OPERATIONS else f"the CLUSTER operation {op}"
        return f"a {acl.resource_type} resource"


def check_least_privilege(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """Every ACL the processor's user holds in `acls.json` is one it needs."""
    view = StackView(args.resources)
    rights = [r for r in map(ProcessorRights.of, view.processors()) if r is not None]
    for resource in view.of_type(CONFIG_MAP):
        acls = acls_of(resource)
        subject = f"{label(resource.resource_type, resource.props)} data[{ACLS_KEY}]"
        if isinstance(acls, str):
            yield (
                violation(
                    subject,
                    "content",
                    f"unreadable ({acls})",
                    '{"users": [{"name", "purpose", "acls": [{"principal", "resource_type", '
                    '"resource_name", "pattern_type", "operation"}]}]}',
                    "render it with app.acl_specs.dumps",
                ),
                resource.urn,
            )
            continue
        for processor in rights:
            for acl in acls or ():
                reason = processor.excess(acl) if processor.holds(acl) else None
                if reason is None:
                    continue
                yield (
                    violation(
                        subject,
                        f"ACL {acl.describe()}",
                        f"{reason}, more than the processor's user {processor.user} needs",
                        processor.summary(),
                        "remove the grant from the processor's ACLs in pipeline_users "
                        "(app/acl_specs.py): a processor that can read, write or administer "
                        "beyond its own topics, group and transactional ids turns one leaked "
                        "password into access to the whole cluster",
                    ),
                    resource.urn,
                )


POLICIES = [
    stack_rule(
        name="processor-least-privilege",
        description=(
            "The processor's Kafka user (its sasl.username, else its application.id) holds in "
            "the reconciled acls.json only what it needs: READ on the input topic, READ/WRITE "
            "on the changelog, WRITE on the output and dead-letter topics, READ on its group, "
            "WRITE on transactional ids under <application.id>-, IDEMPOTENT_WRITE on the "
            "cluster (DESCRIBE on any of these); no wildcard, prefixed topic, other topic or "
            "group, ALL, or other cluster operation."
        ),
        level=ADVISORY,
        check=check_least_privilege,
    ),
]
