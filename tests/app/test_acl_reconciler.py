"""The ACL reconciler's planning, as pure functions of what the cluster reports: what it
creates, what it drops (only its own), what it refuses, and that a second run plans nothing.

The Kafka side (credentials, ACLs, the ledger) runs on the secured Apache Kafka cluster in
`test_kafka_security_apache_kafka.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.admin.acl_bindings import Binding
from app.admin.acl_reconciler import AclAction, AclState, format_table, plan
from app.admin.scram_credentials import Credential, admin_mechanism, read_passwords
from contract.acl_specs import (
    ACL_LEDGER_TOPIC,
    AclSpec,
    AclSpecError,
    KafkaUser,
    Operation,
    PatternType,
    ResourceType,
    dumps,
    loads,
)
from contract.kafka_security import previous_scram_mechanism, scram_mechanism


def allow(principal: str, kind: ResourceType, name: str, operation: Operation) -> AclSpec:
    return AclSpec(principal, kind, name, PatternType.LITERAL, operation)


READ_VIEWS = allow("User:app", ResourceType.TOPIC, "page-views", Operation.READ)
WRITE_COUNTS = allow("User:app", ResourceType.TOPIC, "counts", Operation.WRITE)
READ_GROUP = allow("User:app", ResourceType.GROUP, "app", Operation.READ)
APP = KafkaUser("app", "the processor", (READ_VIEWS, WRITE_COUNTS))
BOOTSTRAP = "kafka:9092"


def state(
    *bindings: Binding,
    ledger: frozenset[AclSpec] = frozenset(),
    credentials: dict[str, Credential] | None = None,
    ledger_exists: bool = True,
) -> AclState:
    return AclState(frozenset(bindings), credentials or {}, ledger, ledger_exists)


def actions(steps: object) -> list[tuple[str, AclAction, str]]:
    return [(s.subject, s.action, s.detail) for s in steps]  # type: ignore[attr-defined]


def test_missing_acls_and_credentials_and_the_ledger_are_planned_for_creation() -> None:
    the_plan = plan(
        [APP], state(ledger_exists=False), passwords={"app": "pw"}, ledger_replication=3
    )
    assert [(s.subject, s.action) for s in the_plan.steps] == [
        (ACL_LEDGER_TOPIC, AclAction.CREATE_LEDGER),
        ("User:app", AclAction.CREATE_CREDENTIAL),
        ("User:app", AclAction.CREATE),
        ("User:app", AclAction.CREATE),
    ]
    assert {s.binding for s in the_plan.of(AclAction.CREATE)} == {
        Binding.of(READ_VIEWS),
        Binding.of(WRITE_COUNTS),
    }
    assert "replication factor 3" in the_plan.steps[0].detail


def test_an_up_to_date_cluster_plans_nothing() -> None:
    cluster = state(
        Binding.of(READ_VIEWS),
        Binding.of(WRITE_COUNTS),
        ledger=frozenset({READ_VIEWS, WRITE_COUNTS}),
        credentials={"app": Credential.LOGS_IN},
    )
    the_plan = plan([APP], cluster, passwords={"app": "pw"})
    assert the_plan.changes == [] and the_plan.refusals == []
    assert actions(the_plan.steps) == [("User:app", AclAction.UP_TO_DATE, "2 ACLs")]


def test_an_acl_the_reconciler_created_and_the_specs_dropped_is_deleted() -> None:
    cluster = state(
        Binding.of(READ_VIEWS), Binding.of(WRITE_COUNTS), Binding.of(READ_GROUP),
        ledger=frozenset({READ_VIEWS, WRITE_COUNTS, READ_GROUP}),
    )  # fmt: skip
    (delete,) = plan([APP], cluster).changes
    assert delete.action is AclAction.DELETE and delete.binding == Binding.of(READ_GROUP)
    assert "no longer in the specs (created by the reconciler)" in delete.detail


def test_an_acl_the_reconciler_did_not_create_is_refused_with_the_command_to_remove_it() -> None:
    cluster = state(Binding.of(READ_VIEWS), Binding.of(WRITE_COUNTS), Binding.of(READ_GROUP))
    the_plan = plan([APP], cluster, bootstrap=BOOTSTRAP)
    assert the_plan.changes == []
    (refusal,) = the_plan.refusals
    assert refusal.binding == Binding.of(READ_GROUP)
    assert f"not created by the reconciler (not in its ledger {ACL_LEDGER_TOPIC})" in (
        refusal.detail
    )
    assert (
        f"kafka-acls.sh --bootstrap-server {BOOTSTRAP} --command-config <admin.properties> "
        "--remove --allow-principal User:app --allow-host '*' --operation Read --group app "
        "--resource-pattern-type literal --force"
    ) in refusal.detail


def test_a_deny_or_host_bound_acl_is_never_the_reconcilers_and_is_refused() -> None:
    deny = Binding("User:app", "TOPIC", "page-views", "LITERAL", "WRITE", "DENY", "*")
    # Even if a ledger entry of the same resource and operation exists: it records ALLOWs.
    ledger = frozenset({READ_VIEWS, WRITE_COUNTS})
    cluster = state(Binding.of(READ_VIEWS), Binding.of(WRITE_COUNTS), deny, ledger=ledger)
    (refusal,) = plan([APP], cluster).refusals
    assert refusal.binding == deny
    assert "--deny-principal User:app" in refusal.detail


def test_a_password_that_no_longer_logs_in_is_updated() -> None:
    cluster = state(credentials={"app": Credential.REJECTED})
    (step,) = plan([APP], cluster, passwords={"app": "new"}).of(AclAction.UPDATE_CREDENTIAL)
    assert step.user == "app" and "does not log in (rotated)" in step.detail
    unchecked = plan([APP], cluster, passwords={"app": "new"}, can_check=False)
    (step,) = unchecked.of(AclAction.UPDATE_CREDENTIAL)
    assert "cannot check the password" in step.detail


def test_the_credentials_planned_are_of_the_revisions_mechanism() -> None:
    # The state holds what the cluster has for that mechanism: none yet in a rotation's first
    # run, whatever the other mechanism holds (the credentials the running clients use).
    rotating = plan([APP], state(), passwords={"app": "new"}, mechanism="SCRAM-SHA-256")
    (step,) = rotating.of(AclAction.CREATE_CREDENTIAL)
    assert step.detail == "SCRAM-SHA-256: no credential yet"
    assert rotating.mechanism == "SCRAM-SHA-256"
    assert plan([APP], state(), passwords={"app": "pw"}).mechanism == "SCRAM-SHA-512"


def test_a_mechanism_is_one_of_kafkas_two() -> None:
    assert scram_mechanism(1) == scram_mechanism(3) == "SCRAM-SHA-512"
    assert scram_mechanism(2) == previous_scram_mechanism(3) == "SCRAM-SHA-256"
    assert previous_scram_mechanism(2) == "SCRAM-SHA-512"
    with pytest.raises(ValueError, match="'PLAIN': must be one of SCRAM-SHA-256, SCRAM-SHA-512"):
        admin_mechanism("PLAIN")
    with pytest.raises(ValueError, match="credentials revision 0: must be at least 1"):
        scram_mechanism(0)


def test_without_passwords_credentials_are_not_touched() -> None:
    assert plan([APP], state()).of(AclAction.CREATE_CREDENTIAL) == []


def test_the_acls_of_a_user_gone_from_the_specs_go_when_the_reconciler_made_them() -> None:
    gone = allow("User:old", ResourceType.TOPIC, "page-views", Operation.READ)
    cluster = state(Binding.of(READ_VIEWS), Binding.of(WRITE_COUNTS), Binding.of(gone),
                    ledger=frozenset({gone}))  # fmt: skip
    (delete,) = plan([APP], cluster).changes
    assert (delete.subject, delete.action) == ("User:old", AclAction.DELETE)


def test_a_ledger_entry_of_an_acl_removed_by_hand_is_forgotten() -> None:
    cluster = state(Binding.of(READ_VIEWS), Binding.of(WRITE_COUNTS),
                    ledger=frozenset({READ_VIEWS, WRITE_COUNTS, READ_GROUP}))  # fmt: skip
    (forget,) = plan([APP], cluster).changes
    assert forget.action is AclAction.FORGET and forget.spec == READ_GROUP


def test_the_table_has_a_header_and_one_row_per_step() -> None:
    lines = format_table(plan([APP], state())).splitlines()
    assert lines[0].split() == ["PRINCIPAL", "ACTION", "DETAIL"]
    assert [line.split()[:2] for line in lines[1:]] == [["User:app", "create"]] * 2


def test_a_missing_password_file_is_a_usage_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "app").write_text("s3cret\n")
    assert read_passwords(tmp_path, [APP]) == {"app": "s3cret"}
    other = KafkaUser("observer", "read-only")
    with pytest.raises(FileNotFoundError) as raised:
        read_passwords(tmp_path, [APP, other])
    assert f"no password file {tmp_path / 'observer'} for user observer" in str(raised.value)
    (tmp_path / "observer").write_text("")
    with pytest.raises(ValueError, match="empty"):
        read_passwords(tmp_path, [APP, other])


@pytest.mark.parametrize("principal", ["User:*", "User:page-*"])
def test_a_wildcard_principal_is_refused_naming_it_whatever_the_operation(principal: str) -> None:
    for operation in (Operation.DESCRIBE, Operation.ALTER):
        with pytest.raises(AclSpecError) as raised:
            AclSpec(
                principal, ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, operation
            )
        assert f"ACL principal {principal!r}: contains a wildcard" in str(raised.value)
        assert "name the one user that needs it, User:<name>" in str(raised.value)
    # Nor does a hand-edited acls.json get one past the reconciler's parse.
    text = dumps([APP]).replace('"User:app"', f'"{principal}"', 1)
    with pytest.raises(AclSpecError, match="contains a wildcard"):
        loads(text)
