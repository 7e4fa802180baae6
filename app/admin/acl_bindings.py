"""ACL bindings as the cluster reports them, and the specs they are: the admin API's form, the
contract's (`contract.acl_specs`), one line a reviewer reads, and the `kafka-acls.sh` command that
removes one by hand."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from confluent_kafka import admin as kafka_admin
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
)

from app.admin.topic_reconciler import REQUEST_TIMEOUT_S
from contract.acl_specs import AclSpec, Operation, PatternType, ResourceType

# The ACL admin API calls Kafka's CLUSTER resource type BROKER (the same wire value, 4).
_RESOURCE_TYPES = {
    ResourceType.TOPIC: kafka_admin.ResourceType.TOPIC,
    ResourceType.GROUP: kafka_admin.ResourceType.GROUP,
    ResourceType.TRANSACTIONAL_ID: kafka_admin.ResourceType.TRANSACTIONAL_ID,
    ResourceType.CLUSTER: kafka_admin.ResourceType.BROKER,
}
_RESOURCE_NAMES = {admin: spec for spec, admin in _RESOURCE_TYPES.items()}
# kafka-acls.sh's flag for each resource type, for the hand-removal command of a refusal.
_ACL_TOOL_RESOURCE_FLAGS = {
    "TOPIC": "--topic",
    "GROUP": "--group",
    "TRANSACTIONAL_ID": "--transactional-id",
    "CLUSTER": "--cluster",
    "BROKER": "--cluster",
    "DELEGATION_TOKEN": "--delegation-token",
    "USER": "--user-principal",
}
ANY_HOST = "*"


def _name(value: object) -> str:
    """An admin API enum's name (the client converts its fields to enums; the stubs also allow
    str and int)."""
    return value.name if isinstance(value, Enum) else str(value)


@dataclass(frozen=True, order=True)
class Binding:
    """An ACL binding as the cluster reports it: any type, ALLOW or DENY, any host."""

    principal: str
    resource_type: str
    resource_name: str
    pattern_type: str
    operation: str
    permission: str = "ALLOW"
    host: str = ANY_HOST

    @classmethod
    def of(cls, spec: AclSpec) -> Binding:
        """The binding the reconciler creates for `spec` (ALLOW, from any host)."""
        return cls(
            spec.principal,
            spec.resource_type.value,
            spec.resource_name,
            spec.pattern_type.value,
            spec.operation.value,
        )

    @classmethod
    def from_admin(cls, binding: AclBinding) -> Binding:
        """From the admin API's form (its BROKER resource type is Kafka's CLUSTER)."""
        restype = binding.restype
        spec_type = (
            _RESOURCE_NAMES.get(restype) if isinstance(restype, kafka_admin.ResourceType) else None
        )
        return cls(
            binding.principal,
            spec_type.value if spec_type else _name(restype),
            binding.name,
            _name(binding.resource_pattern_type),
            _name(binding.operation),
            _name(binding.permission_type),
            binding.host,
        )

    def spec(self) -> AclSpec | None:
        """The spec this binding is, if the reconciler could have made it."""
        if self.permission != "ALLOW" or self.host != ANY_HOST:
            return None
        try:
            return AclSpec(
                self.principal,
                ResourceType(self.resource_type),
                self.resource_name,
                PatternType(self.pattern_type),
                Operation(self.operation),
            )
        except ValueError:
            return None

    def to_admin(self) -> AclBinding:
        """The admin API's form, to create it."""
        return AclBinding(
            _RESOURCE_TYPES[ResourceType(self.resource_type)],
            self.resource_name,
            ResourcePatternType[self.pattern_type],
            self.principal,
            self.host,
            AclOperation[self.operation],
            AclPermissionType[self.permission],
        )

    def to_filter(self) -> AclBindingFilter:
        """A filter that matches exactly this binding, to delete it."""
        admin_type = (
            _RESOURCE_TYPES[ResourceType(self.resource_type)]
            if self.resource_type in ResourceType.__members__
            else kafka_admin.ResourceType[self.resource_type]
        )
        return AclBindingFilter(
            admin_type,
            self.resource_name,
            ResourcePatternType[self.pattern_type],
            self.principal,
            self.host,
            AclOperation[self.operation],
            AclPermissionType[self.permission],
        )

    def describe(self) -> str:
        """One line a reviewer reads."""
        extra = "" if self.permission == "ALLOW" else f" {self.permission}"
        host = "" if self.host == ANY_HOST else f" from {self.host}"
        return (
            f"{self.operation} {self.resource_type} {self.resource_name} "
            f"({self.pattern_type}){extra}{host}"
        )

    def removal_command(self, bootstrap: str) -> str:
        """The `kafka-acls.sh` command that removes this binding by hand."""
        kind = "allow" if self.permission == "ALLOW" else "deny"
        operation = "".join(part.title() for part in self.operation.split("_"))
        flag = _ACL_TOOL_RESOURCE_FLAGS.get(self.resource_type, f"--{self.resource_type.lower()}")
        resource = flag if flag == "--cluster" else f"{flag} {shlex.quote(self.resource_name)}"
        return (
            f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config <admin.properties> "
            f"--remove --{kind}-principal {shlex.quote(self.principal)} "
            f"--{kind}-host {shlex.quote(self.host)} --operation {operation} {resource} "
            f"--resource-pattern-type {self.pattern_type.lower()} --force"
        )


def read_bindings(
    admin: AdminClient, principals: Sequence[str], timeout_s: float = REQUEST_TIMEOUT_S
) -> frozenset[Binding]:
    """Every ACL binding whose principal is one of `principals`."""
    found: set[Binding] = set()
    for principal in principals:
        # None matches any name and host (documented; the type stub says str).
        query = AclBindingFilter(
            kafka_admin.ResourceType.ANY,
            None,  # type: ignore[arg-type]
            ResourcePatternType.ANY,
            principal,
            None,  # type: ignore[arg-type]
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        result = admin.describe_acls(query, request_timeout=timeout_s).result()
        found.update(Binding.from_admin(b) for b in result)
    return frozenset(found)
