"""Every Kafka user holds no more than its own rights in the ACLs the stack grants.

Two files grant ACLs: `acls.json`, beside the topic specs, which the topic Job reconciles, and
`bootstrap-acls.json` in the Kafka cluster's bootstrap ConfigMap, which the `grant-acls`
container of each broker's pod grants as the broker (a super user) before any broker is ready.
Both are written by `contract.acl_specs.dumps` and parsed here with a few lines rather
than with its `AclSpec`, which rejects some of the very grants (a wildcard) this rule exists to
report; the names it fixes (the cluster resource, the ACL ledger) are the contract's.

The users the pack knows, each with rights derived from the stack itself where it can:

- a processor: its `sasl.username` (else `application.id`), its topics, group and
  transactional ids, all from its processor.properties (a side of an active/standby pair also
  reads and writes its `pair.control.topic`);
- the topic reconciler: the `sasl.username` of the client.properties beside a topics.json; the
  declared topics, its ACL ledger and ledger group, and the cluster's ACL administration;
- a read-only user (this rule's readOnlyUsers, the observer by default): READ and DESCRIBE on
  the declared topics, DESCRIBE on a processor's group and on the cluster;
- the brokers' readiness user: the `sasl.username` of a properties file the Kafka cluster's pods
  mount (its readiness sidecar's client settings); DESCRIBE only, on the cluster, the declared
  topics, the ledger and Kafka's internal topics;
- where the stack runs an active/standby pair, the pair's switch user (`pair-switch`, the
  contract's): READ and WRITE on the control topic the sides name, DESCRIBE on its reader's
  group id, on the sides' groups and on their input topic (their lag), nothing else.

An ACL for a wildcard principal, or for a principal none of these is, is a finding too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pulumi_policy import PolicyResource, StackValidationArgs

from contract.acl_grants import GRANTS_FILE, grant_lines
from contract.acl_specs import (
    ACL_LEDGER_READER_GROUP,
    ACL_LEDGER_TOPIC,
    CLUSTER_RESOURCE,
    INTERNAL_TOPICS,
    PAIR_SWITCH_USER,
    pair_switch_reader_group,
)
from contract.acl_specs import loads as load_users
from contract.container_commands import ACLS_FILE as ACLS_KEY
from contract.container_commands import BOOTSTRAP_ACLS_FILE as BOOTSTRAP_ACLS_KEY
from contract.java_properties import load_properties
from contract.processor_keys import PAIR_CONTROL_TOPIC_KEY

from .config import MANDATORY, Threshold, stack_rule
from .manifests import CONFIG_MAP, get, label
from .messages import violation
from .pair import control_topic_of, side_of
from .stack_view import ProcessorDeployment, StackView
from .topics import group_configs_of, topics_of

ACL_FILES = (ACLS_KEY, BOOTSTRAP_ACLS_KEY)
# The reconciler's own client settings, in the ConfigMap that holds the topic specs.
CLIENT_KEY = "client.properties"
_FIELDS = ("principal", "resource_type", "resource_name", "pattern_type", "operation")
OBSERVER = "observer"
# What the processor does with each of its topics, by the property that names the topic.
# READ and WRITE imply DESCRIBE in Kafka's authorizer; an explicit DESCRIBE is harmless.
_TOPIC_OPERATIONS = {
    "input.topic": frozenset({"READ", "DESCRIBE"}),
    "changelog.topic": frozenset({"READ", "WRITE", "DESCRIBE"}),
    "output.topic": frozenset({"WRITE", "DESCRIBE"}),
    "dlq.topic": frozenset({"WRITE", "DESCRIBE"}),
    # A side of an active/standby pair reads which side is active and writes, inside its
    # transactions, what it did about it.
    PAIR_CONTROL_TOPIC_KEY: frozenset({"READ", "WRITE", "DESCRIBE"}),
}
_PROCESSOR_GROUP = frozenset({"READ", "DESCRIBE"})
_PROCESSOR_TRANSACTIONAL = frozenset({"WRITE", "DESCRIBE"})
_PROCESSOR_CLUSTER = frozenset({"IDEMPOTENT_WRITE"})
# The reconciler creates and configures topics (ALTER: partitions), reads and writes its
# ledger, finds its ledger reader's coordinator, and administers ACLs and SCRAM credentials.
_RECONCILER_TOPIC = frozenset({"CREATE", "ALTER", "ALTER_CONFIGS", "DESCRIBE_CONFIGS", "DESCRIBE"})
_RECONCILER_LEDGER = _RECONCILER_TOPIC | {"READ", "WRITE"}
_RECONCILER_GROUP = frozenset({"DESCRIBE"})
# A KIP-848 group whose own session and heartbeat the reconciler sets (its topics.json `groups`).
_RECONCILER_CONFIGURED_GROUP = frozenset({"ALTER_CONFIGS", "DESCRIBE_CONFIGS", "DESCRIBE"})
_RECONCILER_CLUSTER = frozenset({"ALTER", "DESCRIBE"})
# Read-only: never WRITE, CREATE, DELETE, ALTER(_CONFIGS), ALL, nor READ on a group (joining
# or committing offsets into the processor's group would move its consumers).
_READ_ONLY_TOPIC = frozenset({"READ", "DESCRIBE", "DESCRIBE_CONFIGS"})
_READ_ONLY_GROUP = frozenset({"DESCRIBE"})
_READ_ONLY_CLUSTER = frozenset({"DESCRIBE", "DESCRIBE_CONFIGS"})
# The readiness sidecars judge the ISR (Metadata) and see that the bootstrap ACLs exist
# (DescribeAcls): nothing else, not even READ.
_READINESS = frozenset({"DESCRIBE"})
# An operator's switch reads the pair's control topic and writes one record to it, and reads
# the sides' lag (their groups' committed offsets against the input's end offsets).
_PAIR_SWITCH_CONTROL = frozenset({"READ", "WRITE", "DESCRIBE"})
_PAIR_SWITCH_DESCRIBE = frozenset({"DESCRIBE"})
_NOUNS = {
    "TOPIC": "topic",
    "GROUP": "group",
    "TRANSACTIONAL_ID": "transactional id",
    "CLUSTER": "cluster",
}

Finding = tuple[str, str | None]


@dataclass(frozen=True)
class Acl:
    """One ALLOW binding of `acls.json` or `bootstrap-acls.json`."""

    principal: str
    resource_type: str
    resource_name: str
    pattern_type: str
    operation: str

    def describe(self) -> str:
        """`User:x READ TOPIC page-views (LITERAL)`, as `contract.acl_specs` prints it."""
        return (
            f"{self.principal} {self.operation} {self.resource_type} {self.resource_name} "
            f"({self.pattern_type})"
        )


def acls_of(resource: PolicyResource, key: str = ACLS_KEY) -> list[Acl] | str | None:
    """The ACLs of a ConfigMap holding the file `key`; an error text if unreadable; else None."""
    if resource.resource_type != CONFIG_MAP:
        return None
    text = get(resource.props, "data", key)
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
class Grant:
    """Operations a user may hold on one resource (or, prefixed, on every name under it)."""

    resource_type: str
    name: str
    operations: frozenset[str]
    prefixed: bool = False

    def covers(self, acl: Acl) -> bool:
        """Whether the ACL names this resource (an ACL under a prefixed grant's prefix too)."""
        if acl.resource_type != self.resource_type:
            return False
        if not self.prefixed:
            return acl.pattern_type == "LITERAL" and acl.resource_name == self.name
        return acl.pattern_type in ("LITERAL", "PREFIXED") and acl.resource_name.startswith(
            self.name
        )

    @property
    def names(self) -> str:
        """`page-views`, or `names under page-view-counter-` for a prefixed grant."""
        return f"names under {self.name}" if self.prefixed else self.name

    def describe(self) -> str:
        """`topic page-views`, `transactional id names under page-view-counter-`, `the cluster`."""
        if self.resource_type == "CLUSTER":
            return "the cluster"
        return f"{_NOUNS.get(self.resource_type, self.resource_type)} {self.names}"


@dataclass(frozen=True)
class UserRights:
    """Everything one known user needs, and what to do about an ACL beyond it."""

    role: str  # "the processor's user", as a message names it
    user: str
    grants: tuple[Grant, ...]
    fix: str

    @property
    def principal(self) -> str:
        """The principal the authorizer sees for this SCRAM user."""
        return f"User:{self.user}"

    def summary(self) -> str:
        """The user's rights in one line, for a message's `required`."""
        parts: dict[str, list[str]] = {}
        for grant in self.grants:
            parts.setdefault("/".join(sorted(grant.operations)), []).append(grant.describe())
        return "only " + "; ".join(f"{ops} on {', '.join(on)}" for ops, on in parts.items())

    def excess(self, acl: Acl) -> str | None:
        """Why an ACL gives more than this user needs (None: within its rights)."""
        op, name = acl.operation, acl.resource_name
        if op == "ALL":
            return "ALL operations"
        if "*" in name:
            return "a wildcard resource name"
        same_type = [g for g in self.grants if g.resource_type == acl.resource_type]
        if not same_type:
            return f"a {acl.resource_type} resource"
        named = [g for g in same_type if g.covers(acl)]
        if not named:
            if acl.resource_type == "TOPIC" and acl.pattern_type != "LITERAL":
                return f"a {acl.pattern_type} topic pattern"
            noun = _NOUNS.get(acl.resource_type, acl.resource_type)
            return f"a {noun} other than its own ({', '.join(g.names for g in same_type)})"
        if any(op in g.operations for g in named):
            return None
        needed = "/".join(sorted(frozenset().union(*(g.operations for g in named))))
        return f"{op} on {named[0].describe()}, where it needs only {needed}"


_PIPELINE_USERS = "pipeline_users (contract/acl_specs.py)"
_PROCESSOR_FIX = (
    f"remove the grant from the processor's ACLs in {_PIPELINE_USERS}: a processor that can "
    "read, write or administer beyond its own topics, group and transactional ids turns one "
    "leaked password into access to the whole cluster"
)
_RECONCILER_FIX = (
    f"remove the grant from the topic reconciler's ACLs in {_PIPELINE_USERS}, which acls.json "
    "and the brokers' bootstrap-acls.json are both rendered from: its password administers the "
    "ACLs already, and a right beyond creating and configuring the declared topics and its "
    "ledger lets a leaked one read, write or delete at once, without first granting itself an "
    "ACL that the reconciler's next run would report"
)
_READ_ONLY_FIX = (
    f"remove the grant from the read-only user's ACLs in {_PIPELINE_USERS}: a dashboard or lag "
    "tool that can write, create, alter or delete, or join the processor's group, can corrupt "
    "the pipeline it only watches; a user that needs more is not read-only (take it out of "
    "this rule's readOnlyUsers in policies/config.<stack>.json and describe its rights in "
    "policies/rules/acls.py)"
)


def processor_rights(processor: ProcessorDeployment) -> UserRights | None:
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
    grants = (
        *(Grant("TOPIC", name, ops) for name, ops in topics.items()),
        Grant("GROUP", application_id, _PROCESSOR_GROUP),
        # Transactional ids are the pod names, `<application id>-<ordinal>`.
        Grant("TRANSACTIONAL_ID", f"{application_id}-", _PROCESSOR_TRANSACTIONAL, prefixed=True),
        Grant("CLUSTER", CLUSTER_RESOURCE, _PROCESSOR_CLUSTER),
    )
    return UserRights("the processor's user", user, grants, _PROCESSOR_FIX)


def _sasl_username(text: str) -> str:
    """`sasl.username` of a client.properties, read line by line if the file does not parse.

    An unreadable line is the credentials rule's finding; losing the user over it would make
    every one of the reconciler's ACLs a finding here too.
    """
    try:
        return load_properties(text).get("sasl.username", "").strip()
    except ValueError:
        user = ""
        for line in text.splitlines():
            try:
                user = load_properties(line).get("sasl.username", user)
            except ValueError:
                continue
        return user.strip()


def reconciler_rights(resource: PolicyResource) -> UserRights | None:
    """The rights of the reconciler whose topic specs and client settings a ConfigMap holds."""
    topics = topics_of(resource.resource_type, resource.props)
    client = get(resource.props, "data", CLIENT_KEY)
    if not isinstance(topics, list) or not isinstance(client, str):
        return None
    user = _sasl_username(client)
    if not user:
        return None
    grants = (
        *(Grant("TOPIC", topic.name, _RECONCILER_TOPIC) for topic in topics),
        Grant("TOPIC", ACL_LEDGER_TOPIC, _RECONCILER_LEDGER),
        # FindCoordinator of the ledger reader's group id (it never joins: no READ).
        Grant("GROUP", ACL_LEDGER_READER_GROUP, _RECONCILER_GROUP),
        *(
            Grant("GROUP", group, _RECONCILER_CONFIGURED_GROUP)
            for group in group_configs_of(resource.resource_type, resource.props)
        ),
        # CreateAcls, DeleteAcls, AlterUserScramCredentials (ALTER); DescribeAcls (DESCRIBE).
        Grant("CLUSTER", CLUSTER_RESOURCE, _RECONCILER_CLUSTER),
    )
    return UserRights("the topic reconciler", user, grants, _RECONCILER_FIX)


def read_only_rights(
    user: str, topics: Iterable[str], processors: Iterable[UserRights]
) -> UserRights:
    """A user that watches the pipeline: its topics, the processors' groups, the cluster."""
    groups = dict.fromkeys(
        grant.name for p in processors for grant in p.grants if grant.resource_type == "GROUP"
    )
    grants = (
        *(Grant("TOPIC", name, _READ_ONLY_TOPIC) for name in dict.fromkeys(topics)),
        # Committed offsets (lag) of the processor's group, never joining it.
        *(Grant("GROUP", name, _READ_ONLY_GROUP) for name in groups),
        Grant("CLUSTER", CLUSTER_RESOURCE, _READ_ONLY_CLUSTER),
    )
    return UserRights("the read-only user", user, grants, _READ_ONLY_FIX)


_READINESS_FIX = (
    f"remove the grant from the readiness user's ACLs in {_PIPELINE_USERS} (readiness_user): "
    "the readiness sidecars run on the processor's image in every broker's pod, and need only "
    "to describe the cluster and the topics a broker hosts; anything more turns one "
    "compromised image into access to the data"
)


def readiness_rights(view: StackView, topics: Iterable[str]) -> list[UserRights]:
    """The rights of each Kafka cluster's readiness user (its sidecars' `sasl.username`)."""
    found = []
    for cluster in view.kafka_clusters():
        user = view.kafka_user(cluster)
        if not user:
            continue
        names = dict.fromkeys([*topics, ACL_LEDGER_TOPIC, *INTERNAL_TOPICS])
        grants = (
            *(Grant("TOPIC", name, _READINESS) for name in names),
            Grant("CLUSTER", CLUSTER_RESOURCE, _READINESS),
        )
        found.append(UserRights("the brokers' readiness user", user, grants, _READINESS_FIX))
    return found


_PAIR_SWITCH_FIX = (
    f"remove the grant from the pair switch's ACLs in {_PIPELINE_USERS}: an operator's switch "
    "writes one record to the pair's control topic and reads the sides' lag; a password that "
    "can do more, kept for release days, can change what the pipeline publishes"
)


def pair_switch_rights(view: StackView) -> list[UserRights]:
    """The pair switch's rights, where the stack runs an active/standby pair (a side without a
    partner is `processor-pair`'s finding): its control topic, its reader's group id, and the
    sides' groups and input topic for their lag."""
    sides = [p for p in view.processors() if side_of(p) is not None]
    controls = dict.fromkeys(topic for p in sides if (topic := control_topic_of(p)))
    if not controls:
        return []
    groups = dict.fromkeys(p.properties.get("application.id", "").strip() for p in sides)
    inputs = dict.fromkeys(p.properties.get("input.topic", "").strip() for p in sides)
    grants = (
        *(Grant("TOPIC", topic, _PAIR_SWITCH_CONTROL) for topic in controls),
        *(
            Grant("GROUP", pair_switch_reader_group(topic), _PAIR_SWITCH_DESCRIBE)
            for topic in controls
        ),
        *(Grant("GROUP", group, _PAIR_SWITCH_DESCRIBE) for group in groups if group),
        *(Grant("TOPIC", topic, _PAIR_SWITCH_DESCRIBE) for topic in inputs if topic),
    )
    return [UserRights("the pair switch", PAIR_SWITCH_USER, grants, _PAIR_SWITCH_FIX)]


def known_users(view: StackView, read_only: Sequence[str]) -> dict[str, list[UserRights]]:
    """Every user the stack lets the pack attribute ACLs to, by principal."""
    processors = [r for r in map(processor_rights, view.processors()) if r is not None]
    config_maps = view.of_type(CONFIG_MAP)
    reconcilers = [r for r in map(reconciler_rights, config_maps) if r is not None]
    topics = [
        topic.name
        for resource in config_maps
        if isinstance(found := topics_of(resource.resource_type, resource.props), list)
        for topic in found
    ]
    known: dict[str, list[UserRights]] = {}
    for rights in [
        *processors,
        *reconcilers,
        *(read_only_rights(str(user).strip(), topics, processors) for user in read_only),
        *readiness_rights(view, topics),
        *pair_switch_rights(view),
    ]:
        known.setdefault(rights.principal, []).append(rights)
    return known


def _unreadable(subject: str, error: str) -> str:
    return violation(
        subject,
        "content",
        f"unreadable ({error})",
        '{"users": [{"name", "purpose", "acls": [{"principal", "resource_type", '
        '"resource_name", "pattern_type", "operation"}]}]}',
        "render it with contract.acl_specs.dumps",
    )


def _wildcard_principal(subject: str, acl: Acl) -> str:
    return violation(
        subject,
        f"ACL {acl.describe()}",
        "for a wildcard principal: every user holds it, present and future, User:ANONYMOUS "
        "included",
        "a principal of one user, User:<name>, within that user's rights",
        f"grant it to the one user that needs it in {_PIPELINE_USERS}, whose AclSpec refuses "
        "wildcard principals, and render the file with contract.acl_specs.dumps",
    )


def _unknown_principal(subject: str, acl: Acl, known: Mapping[str, list[UserRights]]) -> str:
    users = "; ".join(
        f"{rights.role} {principal}" for principal, roles in known.items() for rights in roles
    )
    return violation(
        subject,
        f"ACL {acl.describe()}",
        f"for {acl.principal}, a principal the pack cannot attribute to a user of this stack",
        f"ACLs only for the stack's users, whose rights the pack knows ({users or 'none found'})",
        f"remove it, or grant it in {_PIPELINE_USERS} to one of those users: the processor is "
        "its sasl.username (else its application.id), the topic reconciler the sasl.username "
        "of the client.properties beside topics.json, a read-only user one of this rule's "
        "readOnlyUsers (policies/config.<stack>.json); a new workload's user needs its rights "
        "described in policies/rules/acls.py before it holds any",
    )


def _findings(
    subject: str, acls: Iterable[Acl], known: Mapping[str, list[UserRights]]
) -> Iterator[str]:
    """One finding per ACL beyond the rights of the user it is for."""
    for acl in acls:
        if "*" in acl.principal:
            yield _wildcard_principal(subject, acl)
            continue
        roles = known.get(acl.principal)
        if not roles:
            yield _unknown_principal(subject, acl, known)
            continue
        reasons = [rights.excess(acl) for rights in roles]
        if any(reason is None for reason in reasons):
            continue
        rights, reason = roles[0], reasons[0]
        yield violation(
            subject,
            f"ACL {acl.describe()}",
            f"{reason}, more than {rights.role} {rights.user} needs",
            rights.summary(),
            rights.fix,
        )


def _grant_lines_findings(resource: PolicyResource) -> Iterator[str]:
    """The brokers' grant container runs `bootstrap-acls.args` with the broker's own key: it
    must be exactly what `bootstrap-acls.json` (the ACLs judged here) renders to."""
    lines = get(resource.props, "data", GRANTS_FILE)
    if not isinstance(lines, str):
        return
    subject = f"{label(resource.resource_type, resource.props)} data[{GRANTS_FILE}]"
    required = f"exactly the lines contract.acl_grants renders from {BOOTSTRAP_ACLS_KEY} beside it"
    fix = (
        f"render {GRANTS_FILE} from {BOOTSTRAP_ACLS_KEY} (infra/kafka_cluster.py): the brokers' "
        "grant-acls container runs every line with the broker's key, so a line the ACL rules "
        "did not judge must not be there"
    )
    source = get(resource.props, "data", BOOTSTRAP_ACLS_KEY)
    try:
        expected = grant_lines(load_users(source)) if isinstance(source, str) else None
    except (ValueError, KeyError, TypeError):
        return  # a JSON the program cannot render from is blocked on its own (below)
    if expected is None:
        yield violation(subject, "present", f"without a {BOOTSTRAP_ACLS_KEY}", required, fix)
        return
    wanted = expected.splitlines()
    given = [line for line in lines.splitlines() if line.strip()]
    for number, line in enumerate(given, start=1):
        if line not in wanted:
            yield violation(
                subject, f"line {number}", f"{line!r}, not rendered from the JSON", required, fix
            )
    if missing := [line for line in wanted if line not in given]:
        yield violation(
            subject, "missing", f"{len(missing)} line(s): {missing[0]!r}", required, fix
        )


def check_least_privilege(args: StackValidationArgs, cfg: Mapping[str, Any]) -> Iterator[Finding]:
    """Every ACL of acls.json and bootstrap-acls.json is within its user's own rights, and the
    brokers grant exactly bootstrap-acls.json."""
    view = StackView(args.resources)
    known = known_users(view, cfg["readOnlyUsers"])
    for resource in view.of_type(CONFIG_MAP):
        for message in _grant_lines_findings(resource):
            yield message, resource.urn
        for key in ACL_FILES:
            acls = acls_of(resource, key)
            if acls is None:
                continue
            subject = f"{label(resource.resource_type, resource.props)} data[{key}]"
            if isinstance(acls, str):
                yield _unreadable(subject, acls), resource.urn
                continue
            for message in _findings(subject, acls, known):
                yield message, resource.urn


POLICIES = [
    stack_rule(
        name="kafka-least-privilege",
        description=(
            "Every ACL in acls.json (reconciled by the topic Job) and bootstrap-acls.json "
            "(granted by the brokers) is within the rights of the user it is for, and the "
            "lines the brokers run to grant them (bootstrap-acls.args) are exactly what "
            "bootstrap-acls.json renders to. The "
            "processor (its sasl.username, else its application.id): READ on its input, "
            "READ/WRITE on its changelog, WRITE on its output and dead-letter topics, READ on "
            "its group, WRITE on transactional ids under <application.id>-, IDEMPOTENT_WRITE "
            "on the cluster. The topic reconciler (sasl.username of the client.properties "
            "beside topics.json): CREATE/ALTER/ALTER_CONFIGS/DESCRIBE_CONFIGS on the declared "
            "topics and its ledger, READ/WRITE on its ledger, DESCRIBE on its ledger group, "
            "ALTER/DESCRIBE on the cluster. A read-only user (readOnlyUsers): READ/DESCRIBE/"
            "DESCRIBE_CONFIGS on the declared topics, DESCRIBE on the processor's group and the "
            "cluster. The brokers' readiness user (sasl.username of the properties their pods "
            "mount): DESCRIBE on the cluster, the declared topics, the ledger and Kafka's "
            "internal topics. A side of an active/standby pair: also READ/WRITE on its "
            "pair.control.topic; the pair's switch user (pair-switch): READ/WRITE on that topic, "
            "DESCRIBE on its reader's group id (<pair.control.topic>-reader), the sides' groups "
            "and their input topic. "
            "DESCRIBE where READ, WRITE or ALTER is allowed. No ALL, wildcard name, other "
            "resource, wildcard principal, or principal of no known user."
        ),
        level=MANDATORY,
        check=check_least_privilege,
        thresholds=[
            Threshold(
                "readOnlyUsers",
                "array",
                [OBSERVER],
                "Kafka users (SCRAM user names) held to read-only rights: dashboards, lag tools.",
                items="string",
            )
        ],
    ),
]
