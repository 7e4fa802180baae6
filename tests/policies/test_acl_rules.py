"""Who may do what on the cluster (docs/security.md), on the real pulumi_policy objects.

Super users (`kafka-authorizer`): super.users holds the brokers' own principal(s) and nothing
else. Least privilege (`kafka-least-privilege`): every ACL the stack grants, in the topic Job's
acls.json and the brokers' bootstrap-acls.json, is within the rights of the user it is for (the
processor, the topic reconciler, a read-only user), never for a wildcard or an unknown principal.
Cases run on the handmade stack (prod's secured shape, its ACLs
`contract.acl_specs.pipeline_users` itself) and on the rendered prod stack.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from contract import acl_grants, acl_specs, kafka_security
from contract.topic_specs import TopicSpec
from policies.evaluate import PolicyConfigError, PolicyInfo, Violation
from policies.rules import acls, broker_security
from tests.infra.conftest import names_of
from tests.policies.conftest import Evaluate, levels_of, stack_config
from tests.policies.handmade_stack import (
    NAMESPACE,
    TOPICS,
    Resource,
    changed,
    edit_broker_settings,
    handmade_stack,
    with_acl,
    with_broker_setting,
    with_properties,
)

AUTHORIZER = "kafka-authorizer"
LEAST_PRIVILEGE = "kafka-least-privilege"
BROKER = "User:CN=kafka-broker"
ACLS = "acls.json"
BOOTSTRAP_ACLS = "bootstrap-acls.json"
GRANTS = acl_grants.GRANTS_FILE
PROCESSOR = "User:page-view-counter"
RECONCILER = "User:topic-reconciler"
OBSERVER = "User:observer"
# Where each file lives: the reconciler's ConfigMap, and the Kafka cluster's bootstrap one.
CONFIG_MAPS = {ACLS: "topics-specs", BOOTSTRAP_ACLS: "kafka-bootstrap"}

Acl = tuple[str, ...]  # (principal, resource type, name, operation[, pattern type])
PropsEdit = Callable[[dict[str, Any]], None]


def _ours(
    run: Evaluate, stack: list[Any], config: str | Mapping[str, Any] = "prod"
) -> list[Violation]:
    """The findings of this file's two rules (the other rules are proven in their own files)."""
    return [
        v
        for v in run(stack, stack_config(config) if isinstance(config, str) else config)
        if v.policy in (AUTHORIZER, LEAST_PRIVILEGE)
    ]


def _findings(run: Evaluate, stack: list[Any], rule: str, config: str = "prod") -> list[str]:
    """The messages of `rule`, asserting that the other rule of this file did not fire."""
    violations = _ours(run, stack, config)
    assert {v.policy for v in violations} <= {rule}, violations
    assert all("Fix: " in v.message for v in violations)
    return [v.message for v in violations]


def _only(run: Evaluate, stack: list[Any], rule: str) -> Violation:
    """The one finding of this file's rules (prod config), a finding of `rule`."""
    (violation,) = _ours(run, stack)
    assert violation.policy == rule
    assert "Fix: " in violation.message
    return violation


def adding(
    file: str,
    principal: str,
    resource_type: str,
    name: str,
    operation: str,
    pattern_type: str = "LITERAL",
) -> PropsEdit:
    """Append an ACL to the first user of an ACL file in a ConfigMap's props."""

    def edit(props: dict[str, Any]) -> None:
        data = json.loads(props["data"][file])
        data["users"][0]["acls"].append(
            {
                "principal": principal,
                "resource_type": resource_type,
                "resource_name": name,
                "pattern_type": pattern_type,
                "operation": operation,
            }
        )
        with_json(props, file, data)

    return edit


def with_json(props: dict[str, Any], file: str, data: Any) -> None:
    """Set an ACL file, and the brokers' grant lines from it as the program renders them (when
    the JSON is one it can render: a wildcard is blocked on the JSON itself)."""
    props["data"][file] = json.dumps(data)
    if file == BOOTSTRAP_ACLS and GRANTS in props["data"]:
        with contextlib.suppress(acl_specs.AclSpecError):
            props["data"][GRANTS] = acl_grants.grant_lines(acl_specs.loads(json.dumps(data)))


def with_bootstrap(stack: list[Resource]) -> list[Resource]:
    """The stack plus the brokers' bootstrap ConfigMap, holding the reconciler's own ACLs."""
    topics = [TopicSpec.from_dict(topic) for topic in TOPICS["topics"]]
    users = acl_specs.pipeline_users(application_id="page-view-counter", topics=topics)
    props = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kafka-bootstrap", "namespace": NAMESPACE, "labels": {"app": "kafka"}},
        "data": {
            BOOTSTRAP_ACLS: acl_specs.dumps([u for u in users if u.name == "topic-reconciler"])
        },
    }
    return [*stack, Resource("kubernetes:core/v1:ConfigMap", "kafka-bootstrap", props)]


def granted(file: str, *acl: str) -> list[Resource]:
    """The handmade stack (with its bootstrap ACLs) with one more ACL in `file`."""
    edit = adding(file, *acl)
    return changed(with_bootstrap(handmade_stack()), CONFIG_MAPS[file], lambda r: edit(r.props))


def _kafka(stack: list[Resource], super_users: str | None) -> list[Resource]:
    return changed(stack, "kafka", with_broker_setting("super.users", super_users), ":StatefulSet")


def _recorded_prod(
    recorded_stacks: dict[str, Any], type_suffix: str, name: str, edit: PropsEdit
) -> list[Any]:
    """A deep copy of the rendered prod stack with one resource's props edited."""
    resources = copy.deepcopy(list(recorded_stacks["prod"].resources))
    (resource,) = [r for r in resources if r.name == name and r.type.endswith(type_suffix)]
    edit(resource.props)
    return resources


# --- kafka-authorizer: super.users --------------------------------------------------------


@pytest.mark.parametrize(
    ("super_users", "extra"),
    [
        (f"{BROKER};User:CN=admin", "User:CN=admin"),
        (f"{BROKER};{PROCESSOR}", PROCESSOR),
        (PROCESSOR, PROCESSOR),
    ],
    ids=["admin-certificate", "processor", "processor-instead-of-the-brokers"],
)
def test_a_super_user_other_than_the_brokers_is_reported_naming_it(
    run, super_users: str, extra: str
) -> None:
    stack = _kafka(handmade_stack(), super_users)
    assert levels_of(run, stack, AUTHORIZER) == {"dev": {"advisory"}, "prod": {"mandatory"}}
    assert _only(run, stack, AUTHORIZER).message == (
        "StatefulSet streaming/kafka: broker config super.users (env SERVER_PROPERTIES) entry "
        f"{extra} is not a broker principal (super.users is {super_users}); required: only "
        f"{BROKER} (the brokers' own principal, this rule's superUsers), never User:ANONYMOUS "
        f"or a wildcard. Fix: set super.users={BROKER} (the subject of the broker "
        f"certificate, as contract/kafka_security.py renders it), without {extra}: "
        f"a super user "
        f"bypasses every ACL, so whoever holds {extra}'s credentials may read, write and delete "
        "every topic and group and grant itself any ACL. Give a workload the ACLs it needs in "
        "pipeline_users (contract/acl_specs.py) instead; a further broker identity goes "
        "into this rule's superUsers in policies/config.<stack>.json"
    )


def test_every_super_user_beyond_the_brokers_is_its_own_finding(run) -> None:
    value = f"{BROKER};{OBSERVER};User:ANONYMOUS;User:*"
    messages = _findings(run, _kafka(handmade_stack(), value), AUTHORIZER)
    assert [m.split(" is ")[0].rsplit(" ", 1)[1] for m in messages] == [
        OBSERVER,
        "User:ANONYMOUS",
        "User:*",
    ]
    assert "entry User:ANONYMOUS is every client that connects without credentials" in messages[1]
    assert "entry User:* is a wildcard, every authenticated client" in messages[2]


@pytest.mark.parametrize(
    ("super_users", "found", "levels"),
    [
        (
            f"{BROKER};User:ANONYMOUS",
            "entry User:ANONYMOUS is every client that connects without credentials",
            {"dev": {"advisory"}, "prod": {"mandatory"}},
        ),
        (
            "User:*",
            "entry User:* is a wildcard, every authenticated client",
            {"dev": {"advisory"}, "prod": {"mandatory"}},
        ),
        (None, "is absent", {"dev": set(), "prod": {"mandatory"}}),
    ],
    ids=["anonymous", "wildcard", "absent"],
)
def test_super_users_are_never_anonymous_or_a_wildcard_and_prod_needs_them(
    run, super_users: str | None, found: str, levels: dict[str, set[str]]
) -> None:
    stack = _kafka(handmade_stack(), super_users)
    assert levels_of(run, stack, AUTHORIZER) == levels
    message = _only(run, stack, AUTHORIZER).message
    assert f"super.users (env SERVER_PROPERTIES) {found}" in message
    assert f"; required: only {BROKER} (the brokers' own principal" in message
    assert f"Fix: set super.users={BROKER} " in message


def test_a_further_broker_principal_passes_only_once_listed_in_super_users(run) -> None:
    rotated = f"{BROKER};User:CN=kafka-broker-2026"
    stack = _kafka(handmade_stack(), rotated)
    assert "entry User:CN=kafka-broker-2026 is not a broker principal" in (
        _only(run, stack, AUTHORIZER).message
    )
    config = stack_config("prod")
    config[AUTHORIZER]["superUsers"] = [BROKER, "User:CN=kafka-broker-2026"]
    assert _ours(run, stack, config) == []


def test_super_users_is_a_list_of_principals_defaulting_to_the_brokers(
    run, policies: tuple[PolicyInfo, ...]
) -> None:
    (authorizer,) = [p for p in policies if p.name == AUTHORIZER]
    assert authorizer.config_properties["superUsers"] == {
        "type": "array",
        "items": {"type": "string"},
        "default": [BROKER],
        "description": "The brokers' own principals (their certificate subjects): the only "
        "entries super.users may hold.",
    }
    assert broker_security.BROKER_PRINCIPAL == kafka_security.BROKER_PRINCIPAL
    config = stack_config("prod")
    config[AUTHORIZER]["superUsers"] = BROKER  # a string, not a list
    with pytest.raises(PolicyConfigError, match=r"kafka-authorizer\.superUsers: .* not of type"):
        run(handmade_stack(), config)


def test_the_rendered_prod_stack_with_a_workload_super_user_is_blocked(
    run, recorded_stacks
) -> None:
    def widen(props: dict[str, Any]) -> None:
        broker = props["spec"]["template"]["spec"]["containers"][0]
        edit_broker_settings(broker, {"super.users": f"{BROKER};{PROCESSOR}"})

    resources = _recorded_prod(recorded_stacks, ":StatefulSet", "kafka", widen)
    (violation,) = _ours(run, resources)
    assert (violation.policy, violation.level) == (AUTHORIZER, "mandatory")
    assert f"entry {PROCESSOR} is not a broker principal" in violation.message


# --- kafka-least-privilege: the rule and the stacks that pass it ---------------------------


def test_the_rule_is_mandatory_in_code_and_relaxed_only_by_the_dev_config(
    run, policies: tuple[PolicyInfo, ...]
) -> None:
    (rule,) = [p for p in policies if p.name == LEAST_PRIVILEGE]
    assert rule.level == "mandatory"
    stack = granted(ACLS, "User:*", "TOPIC", "page-views", "READ")
    assert {v.level for v in run(stack, {}) if v.policy == LEAST_PRIVILEGE} == {"mandatory"}
    assert levels_of(run, stack, LEAST_PRIVILEGE) == {"dev": {"advisory"}, "prod": {"mandatory"}}


def test_the_handmade_stack_with_its_bootstrap_acls_passes(run) -> None:
    assert _ours(run, with_bootstrap(handmade_stack())) == []


def test_a_stack_without_acls_has_nothing_to_check(run) -> None:
    def without_acls(r: Resource) -> None:
        del r.props["data"][ACLS], r.props["data"]["client.properties"]

    stack = changed(handmade_stack(), "topics-specs", without_acls)
    assert LEAST_PRIVILEGE not in {v.policy for v in run(stack)}


@pytest.mark.parametrize("file", [ACLS, BOOTSTRAP_ACLS])
def test_an_unreadable_acl_file_is_reported(run, file: str) -> None:
    def corrupt(r: Resource) -> None:
        data: dict[str, Any] = json.loads(r.props["data"][file])
        del data["users"][0]["acls"][0]["operation"]
        r.props["data"][file] = json.dumps(data)

    stack = changed(with_bootstrap(handmade_stack()), CONFIG_MAPS[file], corrupt)
    assert f"data[{file}]: content is unreadable (KeyError: 'operation')" in (
        _only(run, stack, LEAST_PRIVILEGE).message
    )


# --- wildcard and unknown principals --------------------------------------------------------


@pytest.mark.parametrize("file", [ACLS, BOOTSTRAP_ACLS])
@pytest.mark.parametrize(
    "acl",
    [
        ("User:*", "TOPIC", "page-views", "READ"),
        ("User:*", "TOPIC", "page-views", "DESCRIBE"),
        ("User:*", "CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE"),
        ("User:*", "CLUSTER", "kafka-cluster", "ALTER"),
        ("User:page-*", "GROUP", "page-view-counter", "DESCRIBE"),
    ],
    ids=["read-input", "describe-input", "idempotent-write", "alter-cluster", "prefix-principal"],
)
def test_an_acl_for_a_wildcard_principal_is_reported_whatever_the_operation(
    run, file: str, acl: Acl
) -> None:
    principal, resource_type, name, operation = acl
    stack = granted(file, *acl)
    assert levels_of(run, stack, LEAST_PRIVILEGE) == {"dev": {"advisory"}, "prod": {"mandatory"}}
    assert _only(run, stack, LEAST_PRIVILEGE).message == (
        f"ConfigMap streaming/{CONFIG_MAPS[file]} data[{file}]: ACL {principal} {operation} "
        f"{resource_type} {name} (LITERAL) is for a wildcard principal: every user holds it, "
        "present and future, User:ANONYMOUS included; required: a principal of one user, "
        "User:<name>, within that user's rights. Fix: grant it to the one user that needs it "
        "in pipeline_users (contract/acl_specs.py), whose AclSpec refuses wildcard "
        "principals, and render the file with contract.acl_specs.dumps"
    )


def test_every_user_reading_the_input_is_not_taken_for_the_processors_right(run) -> None:
    """`User:* READ` on the input used to pass as the processor's own READ."""
    stack = granted(ACLS, "User:*", "TOPIC", "page-views", "READ")
    assert "ACL User:* READ TOPIC page-views (LITERAL) is for a wildcard principal" in (
        _only(run, stack, LEAST_PRIVILEGE).message
    )


@pytest.mark.parametrize("file", [ACLS, BOOTSTRAP_ACLS])
@pytest.mark.parametrize("principal", ["User:payments", "User:ANONYMOUS", "User:CN=kafka-broker"])
def test_an_acl_for_a_principal_of_no_known_user_is_reported(
    run, file: str, principal: str
) -> None:
    stack = granted(file, principal, "TOPIC", "page-views", "READ")
    message = _only(run, stack, LEAST_PRIVILEGE).message
    assert message.startswith(
        f"ConfigMap streaming/{CONFIG_MAPS[file]} data[{file}]: ACL {principal} READ TOPIC "
        f"page-views (LITERAL) is for {principal}, a principal the pack cannot attribute to a "
        "user of this stack; required: ACLs only for the stack's users, whose rights the pack "
        f"knows (the processor's user {PROCESSOR}; the topic reconciler {RECONCILER}; the "
        f"read-only user {OBSERVER}). Fix: remove it, or grant it in pipeline_users "
        "(contract/acl_specs.py) to one of those users"
    )
    assert "readOnlyUsers (policies/config.<stack>.json)" in message


# --- the observer (read-only users) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("acl", "reason"),
    [
        (
            ("TOPIC", "page-views", "WRITE"),
            "WRITE on topic page-views, where it needs only DESCRIBE/DESCRIBE_CONFIGS/READ",
        ),
        (
            ("CLUSTER", "kafka-cluster", "ALTER"),
            "ALTER on the cluster, where it needs only DESCRIBE/DESCRIBE_CONFIGS",
        ),
        (("TOPIC", "page-view-counts", "CREATE"), "CREATE on topic page-view-counts"),
        (("TOPIC", "page-view-counts", "DELETE"), "DELETE on topic page-view-counts"),
        (("TOPIC", "page-views", "ALTER_CONFIGS"), "ALTER_CONFIGS on topic page-views"),
        (("TOPIC", "page-views", "ALL"), "ALL operations"),
        (
            ("GROUP", "page-view-counter", "READ"),
            "READ on group page-view-counter, where it needs only DESCRIBE",
        ),
        (
            ("TOPIC", "topic-reconciler-acl-ledger", "READ"),
            "a topic other than its own (page-views, page-view-counts, "
            "page-view-counter-counts-changelog, page-view-counter-dlq)",
        ),
        (("TOPIC", "page-", "READ", "PREFIXED"), "a PREFIXED topic pattern"),
        (("TOPIC", "*", "DESCRIBE"), "a wildcard resource name"),
        (("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE"), "IDEMPOTENT_WRITE on the cluster"),
        (("TRANSACTIONAL_ID", "page-view-counter-0", "DESCRIBE"), "a TRANSACTIONAL_ID resource"),
    ],
    ids=[
        "write-input",
        "alter-cluster",
        "create-topic",
        "delete-topic",
        "alter-configs",
        "all",
        "join-the-processors-group",
        "read-the-ledger",
        "prefixed-topic",
        "wildcard-topic",
        "idempotent-write",
        "transactional-id",
    ],
)
def test_a_read_only_user_holding_more_than_reading_is_reported(
    run, acl: tuple[str, ...], reason: str
) -> None:
    resource_type, name, operation, pattern = (*acl, "LITERAL")[:4]
    stack = granted(ACLS, OBSERVER, resource_type, name, operation, pattern)
    assert levels_of(run, stack, LEAST_PRIVILEGE) == {"dev": {"advisory"}, "prod": {"mandatory"}}
    message = _only(run, stack, LEAST_PRIVILEGE).message
    assert message.startswith(
        f"ConfigMap streaming/topics-specs data[acls.json]: ACL {OBSERVER} {operation} "
        f"{resource_type} {name} ({pattern}) is {reason}"
    )
    assert ", more than the read-only user observer needs; required: only " in message
    assert "DESCRIBE on group page-view-counter; DESCRIBE/DESCRIBE_CONFIGS on the cluster." in (
        message
    )
    assert "Fix: remove the grant from the read-only user's ACLs in pipeline_users" in message


@pytest.mark.parametrize(
    "acl",
    [
        ("TOPIC", "page-views", "READ"),
        ("TOPIC", "page-view-counter-dlq", "DESCRIBE_CONFIGS"),
        ("GROUP", "page-view-counter", "DESCRIBE"),
        ("CLUSTER", "kafka-cluster", "DESCRIBE"),
    ],
    ids=["read-input", "describe-dlq-configs", "describe-group", "describe-cluster"],
)
def test_a_read_only_user_may_read_and_describe_the_pipeline(run, acl: tuple[str, ...]) -> None:
    assert _ours(run, granted(ACLS, OBSERVER, *acl)) == []


def test_the_read_only_users_are_this_rules_threshold(run) -> None:
    stack = granted(ACLS, "User:grafana", "TOPIC", "page-view-counts", "READ")
    assert "ACL User:grafana READ TOPIC page-view-counts (LITERAL) is for User:grafana, a " in (
        _only(run, stack, LEAST_PRIVILEGE).message
    )
    config = stack_config("prod")
    config[LEAST_PRIVILEGE]["readOnlyUsers"] = ["observer", "grafana"]
    assert _ours(run, stack, config) == []
    # Without the observer among them its ACLs are no known user's.
    config[LEAST_PRIVILEGE]["readOnlyUsers"] = ["grafana"]
    observers = [
        v for v in _ours(run, handmade_stack(), config) if OBSERVER in v.message.split(" is ")[0]
    ]
    assert observers and all(
        "a principal the pack cannot attribute" in v.message for v in observers
    )


# --- the topic reconciler --------------------------------------------------------------------


@pytest.mark.parametrize("file", [ACLS, BOOTSTRAP_ACLS])
@pytest.mark.parametrize(
    ("acl", "reason"),
    [
        (
            ("TOPIC", "page-views", "DELETE"),
            "DELETE on topic page-views, where it needs only "
            "ALTER/ALTER_CONFIGS/CREATE/DESCRIBE/DESCRIBE_CONFIGS",
        ),
        (("TOPIC", "page-views", "READ"), "READ on topic page-views"),
        (("TOPIC", "page-view-counts", "WRITE"), "WRITE on topic page-view-counts"),
        (("TOPIC", "payments", "CREATE"), "a topic other than its own (page-views, "),
        (
            ("GROUP", "topic-reconciler-acl-ledger", "READ"),
            "READ on group topic-reconciler-acl-ledger, where it needs only DESCRIBE",
        ),
        (
            ("GROUP", "page-view-counter", "DESCRIBE"),
            "a group other than its own (topic-reconciler-acl-ledger)",
        ),
        (("CLUSTER", "kafka-cluster", "ALL"), "ALL operations"),
        (("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE"), "IDEMPOTENT_WRITE on the cluster"),
        (("TRANSACTIONAL_ID", "topic-reconciler", "WRITE"), "a TRANSACTIONAL_ID resource"),
    ],
    ids=[
        "delete-topic",
        "read-topic",
        "write-topic",
        "undeclared-topic",
        "join-ledger-group",
        "processors-group",
        "all-on-cluster",
        "idempotent-write",
        "transactional-id",
    ],
)
def test_the_reconciler_beyond_its_rights_is_reported_in_either_file(
    run, file: str, acl: tuple[str, ...], reason: str
) -> None:
    stack = granted(file, RECONCILER, *acl)
    message = _only(run, stack, LEAST_PRIVILEGE).message
    resource_type, name, operation = acl
    assert message.startswith(
        f"ConfigMap streaming/{CONFIG_MAPS[file]} data[{file}]: ACL {RECONCILER} {operation} "
        f"{resource_type} {name} (LITERAL) is {reason}"
    )
    assert ", more than the topic reconciler topic-reconciler needs; required: only " in message
    assert "ALTER/DESCRIBE on the cluster. Fix: remove the grant from the topic reconciler's " in (
        message
    )


def test_the_reconcilers_rights_follow_its_topic_specs_and_client_user(run) -> None:
    def declare_payments(r: Resource) -> None:
        data = json.loads(r.props["data"]["topics.json"])
        data["topics"].append({**data["topics"][0], "name": "payments", "role": "extra"})
        r.props["data"]["topics.json"] = json.dumps(data)

    stack = changed(handmade_stack(), "topics-specs", declare_payments)
    stack = changed(
        stack, "topics-specs", with_acl("TOPIC", "payments", "CREATE", principal=RECONCILER)
    )
    stack = changed(
        stack, "topics-specs", with_acl("TOPIC", "payments", "READ", principal=OBSERVER)
    )
    assert _ours(run, stack) == []
    # Another client user: the ACLs of topic-reconciler are no one's, the new user's are judged.
    renamed = changed(
        with_bootstrap(handmade_stack()),
        "topics-specs",
        with_properties({"sasl.username": "reconciler-2"}, file="client.properties"),
    )
    messages = _findings(run, renamed, LEAST_PRIVILEGE)
    assert messages and all(
        f"is for {RECONCILER}, a principal the pack cannot attribute" in m for m in messages
    )
    assert any(m.startswith("ConfigMap streaming/kafka-bootstrap data[") for m in messages)
    for acl in (("CLUSTER", "kafka-cluster", "ALTER"), ("TOPIC", "page-views", "DELETE")):
        renamed = changed(renamed, "topics-specs", with_acl(*acl, principal="User:reconciler-2"))
    (judged,) = [
        m for m in _findings(run, renamed, LEAST_PRIVILEGE) if "ACL User:reconciler-2" in m
    ]
    assert "ACL User:reconciler-2 DELETE TOPIC page-views (LITERAL) is DELETE on topic " in judged
    assert "more than the topic reconciler reconciler-2 needs" in judged


def test_an_unreadable_line_of_the_reconcilers_client_properties_keeps_its_user(run) -> None:
    """The bad line is the credentials rule's finding; the reconciler's ACLs stay its own."""

    def corrupt(r: Resource) -> None:
        r.props["data"]["client.properties"] += "sasl.password=\\u12\n"

    stack = changed(with_bootstrap(handmade_stack()), "topics-specs", corrupt)
    assert [v for v in run(stack) if v.policy == LEAST_PRIVILEGE] == []


# --- the processor ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("acl", "reason"),
    [
        (("TOPIC", "*", "READ"), "a wildcard resource name"),
        (("TOPIC", "page-", "READ", "PREFIXED"), "a PREFIXED topic pattern"),
        (
            ("TOPIC", "payments", "READ"),
            "a topic other than its own (page-views, page-view-counter-counts-changelog, "
            "page-view-counts, page-view-counter-dlq)",
        ),
        (
            ("TOPIC", "page-views", "WRITE"),
            "WRITE on topic page-views, where it needs only DESCRIBE/READ",
        ),
        (("TOPIC", "page-views", "ALL"), "ALL operations"),
        (("TOPIC", "page-view-counts", "DELETE"), "DELETE on topic page-view-counts, where"),
        (("GROUP", "dashboards", "READ"), "a group other than its own (page-view-counter)"),
        (("GROUP", "page-view-counter", "DELETE"), "DELETE on group page-view-counter"),
        (
            ("TRANSACTIONAL_ID", "page-", "WRITE", "PREFIXED"),
            "a transactional id other than its own (names under page-view-counter-)",
        ),
        (
            ("CLUSTER", "kafka-cluster", "ALTER"),
            "ALTER on the cluster, where it needs only IDEMPOTENT_WRITE",
        ),
        (("DELEGATION_TOKEN", "x", "DESCRIBE"), "a DELEGATION_TOKEN resource"),
    ],
    ids=[
        "wildcard-topic",
        "prefixed-topic",
        "other-topic",
        "write-input",
        "all-on-input",
        "delete-output",
        "other-group",
        "delete-own-group",
        "transactional-ids-too-wide",
        "cluster-alter",
        "delegation-token",
    ],
)
def test_a_processor_acl_beyond_its_rights_is_reported_with_the_acl_and_the_fix(
    run, acl: tuple[str, ...], reason: str
) -> None:
    stack = changed(handmade_stack(), "topics-specs", with_acl(*acl))
    assert levels_of(run, stack, LEAST_PRIVILEGE) == {"dev": {"advisory"}, "prod": {"mandatory"}}
    resource_type, name, operation, pattern = (*acl, "LITERAL")[:4]
    message = _only(run, stack, LEAST_PRIVILEGE).message
    assert message.startswith(
        f"ConfigMap streaming/topics-specs data[acls.json]: ACL {PROCESSOR} "
        f"{operation} {resource_type} {name} ({pattern}) is {reason}"
    )
    assert "required: only DESCRIBE/READ on topic page-views, group page-view-counter;" in message
    assert "Fix: remove the grant from the processor's ACLs in pipeline_users " in message
    assert "(contract/acl_specs.py)" in message


@pytest.mark.parametrize(
    "acl",
    [
        ("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE"),
        ("TRANSACTIONAL_ID", "page-view-counter-0", "WRITE"),
        ("TRANSACTIONAL_ID", "page-view-counter-", "DESCRIBE", "PREFIXED"),
        ("TOPIC", "page-view-counts", "DESCRIBE"),
        ("GROUP", "page-view-counter", "DESCRIBE"),
    ],
    ids=["idempotent-write", "one-transactional-id", "describe-ids", "describe-output", "group"],
)
def test_the_processor_rights_and_nothing_more_pass(run, acl: tuple[str, ...]) -> None:
    """The handmade stack's acls.json is contract.acl_specs.pipeline_users itself; these
    add to it."""
    assert _ours(run, changed(handmade_stack(), "topics-specs", with_acl(*acl))) == []


def test_the_user_is_the_sasl_username_when_it_differs_from_the_application_id(run) -> None:
    renamed = changed(
        handmade_stack(), "processor-config", with_properties({"sasl.username": "counter-app"})
    )
    # The application id's grants are no longer any known user's ...
    messages = _findings(run, renamed, LEAST_PRIVILEGE)
    assert len(messages) == 7
    assert all(f"is for {PROCESSOR}, a principal the pack cannot attribute" in m for m in messages)
    # ... and the SASL user's are judged as the processor's.
    stack = changed(
        renamed, "topics-specs", with_acl("TOPIC", "*", "READ", principal="User:counter-app")
    )
    assert any(
        "a wildcard resource name, more than the processor's user counter-app needs" in m
        for m in _findings(run, stack, LEAST_PRIVILEGE)
    )


# --- the rendered prod stack -----------------------------------------------------------------

# The rendered prod stack's names are its stack file's, known once it is recorded: the cases
# name them by these stand-ins (fields of `PipelineNames`), which `_rendered` fills in (the
# handmade stack's names are its own).
INPUT_TOPIC = "{input_topic}"
APPLICATION_ID = "{application_id}"


def _rendered(recorded_stacks: dict[str, Any], *texts: str) -> tuple[str, ...]:
    """`texts` with the stand-ins replaced by the rendered prod stack's names."""
    names = dataclasses.asdict(names_of(recorded_stacks["prod"]))
    return tuple(text.format(**names) for text in texts)


@pytest.mark.parametrize(
    ("name", "file", "acl", "found"),
    [
        (
            "kafka-bootstrap",
            BOOTSTRAP_ACLS,
            ("User:*", "CLUSTER", "kafka-cluster", "ALTER"),
            "for a wildcard principal",
        ),
        (
            "topics-specs",
            ACLS,
            ("User:*", "TOPIC", INPUT_TOPIC, "READ"),
            "for a wildcard",
        ),
        (
            "topics-specs",
            ACLS,
            (OBSERVER, "TOPIC", INPUT_TOPIC, "WRITE"),
            f"WRITE on topic {INPUT_TOPIC}, where it needs only DESCRIBE/DESCRIBE_CONFIGS/READ",
        ),
        (
            "topics-specs",
            ACLS,
            (OBSERVER, "CLUSTER", "kafka-cluster", "ALTER"),
            "ALTER on the cluster, where it needs only DESCRIBE/DESCRIBE_CONFIGS",
        ),
        (
            "topics-specs",
            ACLS,
            ("User:payments", "TOPIC", INPUT_TOPIC, "READ"),
            "for User:payments, a principal the pack cannot attribute",
        ),
        (
            "kafka-bootstrap",
            BOOTSTRAP_ACLS,
            (RECONCILER, "TOPIC", INPUT_TOPIC, "DELETE"),
            f"DELETE on topic {INPUT_TOPIC}, where it needs only",
        ),
    ],
    ids=[
        "bootstrap-wildcard-principal",
        "every-user-reads-the-input",
        "observer-writes-the-input",
        "observer-alters-the-cluster",
        "unknown-principal",
        "bootstrap-reconciler-deletes",
    ],
)
def test_the_rendered_prod_stack_is_blocked_by_each_acl_beyond_its_users_rights(
    run, recorded_stacks, name: str, file: str, acl: Acl, found: str
) -> None:
    acl = _rendered(recorded_stacks, *acl)
    (found,) = _rendered(recorded_stacks, found)
    resources = _recorded_prod(recorded_stacks, ":ConfigMap", name, adding(file, *acl))
    (violation,) = _ours(run, resources)
    assert (violation.policy, violation.level) == (LEAST_PRIVILEGE, "mandatory")
    principal, resource_type, resource_name, operation = acl
    assert violation.message.startswith(
        f"ConfigMap streaming/{'kafka-bootstrap' if name == 'kafka-bootstrap' else 'topics-'}"
    )
    assert f"data[{file}]: ACL {principal} {operation} {resource_type} {resource_name} " in (
        violation.message
    )
    assert found in violation.message


# --- the brokers' readiness user -------------------------------------------------------------

READINESS = f"User:{acl_specs.BROKER_READINESS_USER}"


def test_the_pack_names_kafkas_internal_topics_as_app_acl_specs_does() -> None:
    """The readiness user describes them to judge a broker's ISR; the pack must accept it."""
    assert acls.INTERNAL_TOPICS == acl_specs.INTERNAL_TOPICS


def test_the_rendered_readiness_user_holds_describe_only_and_passes(run, recorded_stacks) -> None:
    resources = recorded_stacks["prod"].resources
    (bootstrap,) = [r for r in resources if r.name == "kafka-bootstrap"]
    users = acl_specs.loads(bootstrap.props["data"][BOOTSTRAP_ACLS])
    (readiness,) = [u for u in users if u.principal == READINESS]
    assert {acl.operation for acl in readiness.acls} == {acl_specs.Operation.DESCRIBE}
    assert [v for v in run(resources, stack_config("prod")) if v.policy == LEAST_PRIVILEGE] == []


def _readiness_acl(resource_type: str, name: str, operation: str) -> PropsEdit:
    """Append an ACL for the readiness user to bootstrap-acls.json (its own user's entry)."""

    def edit(props: dict[str, Any]) -> None:
        data = json.loads(props["data"][BOOTSTRAP_ACLS])
        (user,) = [u for u in data["users"] if u["name"] == acl_specs.BROKER_READINESS_USER]
        user["acls"].append(
            {
                "principal": READINESS,
                "resource_type": resource_type,
                "resource_name": name,
                "pattern_type": "LITERAL",
                "operation": operation,
            }
        )
        with_json(props, BOOTSTRAP_ACLS, data)

    return edit


@pytest.mark.parametrize(
    ("acl", "found"),
    [
        (
            ("TOPIC", INPUT_TOPIC, "READ"),
            f"READ on topic {INPUT_TOPIC}, where it needs only DESCRIBE",
        ),
        (
            ("CLUSTER", "kafka-cluster", "ALTER"),
            "ALTER on the cluster, where it needs only DESCRIBE",
        ),
        (("GROUP", APPLICATION_ID, "DESCRIBE"), "a GROUP resource"),
        (("TOPIC", "payments", "DESCRIBE"), "a topic other than its own"),
    ],
    ids=["reads-the-input", "administers-acls", "describes-the-group", "another-topic"],
)
def test_a_readiness_user_beyond_describe_is_blocked(
    run, recorded_stacks, acl: tuple[str, str, str], found: str
) -> None:
    resource_type, name, operation = _rendered(recorded_stacks, *acl)
    (found,) = _rendered(recorded_stacks, found)
    resources = _recorded_prod(
        recorded_stacks,
        ":ConfigMap",
        "kafka-bootstrap",
        _readiness_acl(resource_type, name, operation),
    )
    (violation,) = _ours(run, resources)
    assert (violation.policy, violation.level) == (LEAST_PRIVILEGE, "mandatory")
    assert found in violation.message
    assert "more than the brokers' readiness user broker-readiness needs" in violation.message
    assert "readiness_user" in violation.message  # the fix names where its ACLs are declared


def test_readiness_acls_of_brokers_that_name_no_readiness_user_are_unattributable(
    run, recorded_stacks
) -> None:
    """The pack learns the readiness user from the properties the brokers' pods mount."""

    def without_readiness_client(props: dict[str, Any]) -> None:
        del props["data"]["readiness-client.properties"]

    resources = _recorded_prod(
        recorded_stacks, ":ConfigMap", "kafka-bootstrap", without_readiness_client
    )
    messages = [v.message for v in _ours(run, resources)]
    assert messages and all(
        f"is for {READINESS}, a principal the pack cannot attribute" in m for m in messages
    )


# --- kafka-least-privilege: what the brokers run is what the pack judged ------------------


def _grants_edited(recorded_stacks: dict[str, Any], edit: Callable[[str], str]) -> list[Any]:
    def change(props: dict[str, Any]) -> None:
        props["data"][GRANTS] = edit(props["data"][GRANTS])

    return _recorded_prod(recorded_stacks, ":ConfigMap", "kafka-bootstrap", change)


def test_the_rendered_grant_lines_are_exactly_the_bootstrap_json(run, recorded_stacks) -> None:
    assert _ours(run, copy.deepcopy(list(recorded_stacks["prod"].resources))) == []


def test_a_grant_line_the_json_does_not_hold_is_blocked(run, recorded_stacks) -> None:
    wildcard = "--allow-principal User:* --operation All --cluster"
    stack = _grants_edited(recorded_stacks, lambda text: text + wildcard + "\n")
    (message,) = _findings(run, stack, LEAST_PRIVILEGE)
    assert f"ConfigMap streaming/kafka-bootstrap data[{GRANTS}]: line" in message
    assert f"{wildcard!r}, not rendered from the JSON" in message
    assert "grant-acls container runs every line with the broker's key" in message


def test_a_grant_line_missing_from_what_the_json_renders_is_blocked(run, recorded_stacks) -> None:
    stack = _grants_edited(recorded_stacks, lambda text: "".join(text.splitlines(True)[1:]))
    (message,) = _findings(run, stack, LEAST_PRIVILEGE)
    assert f"data[{GRANTS}]: missing is 1 line(s): '--allow-principal User:broker-readiness" in (
        message
    )
