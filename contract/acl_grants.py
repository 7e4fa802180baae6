"""The lines the brokers' `grant-acls` container runs: `kafka-acls.sh --add` arguments, one grant
a line, rendered from the bootstrap users' ACLs (`bootstrap-acls.json`).

The program renders the file (`infra/bootstrap_grants.py`) and the pack renders it again from the
JSON it reviews and refuses any difference (`kafka-least-privilege`): the container runs these
lines with the broker's own key, so what it runs must be exactly what the pack judged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from contract.acl_specs import AclSpec, KafkaUser, ResourceType

# `kafka-acls.sh` arguments, one grant a line (a principal, one resource type and pattern, the
# operations): the file the script reads, beside the ACLs' JSON in the bootstrap ConfigMap.
GRANTS_FILE = "bootstrap-acls.args"
# Kafka's names of resources as `kafka-acls.sh` takes them (the cluster takes no name).
_RESOURCE_FLAGS = {
    ResourceType.TOPIC: "--topic",
    ResourceType.GROUP: "--group",
    ResourceType.TRANSACTIONAL_ID: "--transactional-id",
    ResourceType.CLUSTER: "--cluster",
}
# What a name may hold to be one word of a shell line: Kafka's legal topic characters, and
# those of SCRAM user names and group ids this project makes.
_WORD = re.compile(r"[A-Za-z0-9._:=-]+")


def operation_argument(operation: str) -> str:
    """`DESCRIBE_CONFIGS` -> `DescribeConfigs`, the form `kafka-acls.sh --operation` reads."""
    return "".join(part.capitalize() for part in operation.split("_"))


def _word(value: str, what: str, acl: AclSpec) -> str:
    if not _WORD.fullmatch(value):
        raise ValueError(
            f"bootstrap ACL {acl.describe()}: the {what} {value!r} has a character outside "
            f"{_WORD.pattern}, and the grant script splits its lines into words; rename it"
        )
    return value


def grant_lines(users: Sequence[KafkaUser]) -> str:
    """`kafka-acls.sh --add` arguments for every ACL of `users`, one JVM's worth a line.

    ACLs of one principal on one resource type and pattern with the same operations share a
    line (`--topic a --topic b --operation Describe`): few JVM starts per round.
    """
    by_resource: dict[tuple[str, str, str, str], list[str]] = {}
    acls = [acl for user in users for acl in user.acls]
    for acl in acls:
        resource = (
            acl.principal,
            acl.resource_type.value,
            acl.pattern_type.value,
            acl.resource_name,
        )
        by_resource.setdefault(resource, []).append(acl.operation.value)
    grouped: dict[tuple[str, str, str, tuple[str, ...]], list[str]] = {}
    for (principal, resource_type, pattern, name), operations in by_resource.items():
        grouped.setdefault(
            (principal, resource_type, pattern, tuple(sorted(operations))), []
        ).append(name)
    lines = []
    for (principal, resource_type, pattern, ops), names in sorted(grouped.items()):
        acl = next(a for a in acls if a.principal == principal)
        words = ["--allow-principal", _word(principal, "principal", acl)]
        words += [w for op in ops for w in ("--operation", operation_argument(op))]
        flag = _RESOURCE_FLAGS[ResourceType(resource_type)]
        if resource_type == ResourceType.CLUSTER:
            words.append(flag)
        else:
            words += [w for name in sorted(names) for w in (flag, _word(name, "name", acl))]
            words += ["--resource-pattern-type", pattern.lower()]
        lines.append(" ".join(words))
    return "".join(f"{line}\n" for line in lines)
