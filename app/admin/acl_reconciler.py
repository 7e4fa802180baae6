"""Bring a cluster's SCRAM users and ACLs to their specs (`contract.acl_specs`): plan,
refuse, apply.

Run by the topic reconciler (`python -m app.admin.reconcile --acls FILE --scram-passwords-dir DIR`),
after the topics. The plan is a pure function of what the cluster reports, so a second run over
an up-to-date cluster plans nothing:

- every user's SCRAM credential of the current revision's mechanism (`--scram-mechanism`) is
  created, or updated when its password no longer logs in (the passwords file changed). How a
  credential is read, checked (by logging in with it: Kafka never shows a stored password; that
  needs the reconciler's own connection to be SCRAM too), set and retired is
  `app.admin.scram_credentials`; the plan here only says which to set, before the ACLs. The
  other mechanism's credentials are left alone: in a rotation they are what the running clients
  log in with, until `scram_credentials.retire_credentials` (run by
  `python -m app.admin.scram_retire` once every client has moved on) deletes them;
- every ACL of the specs that the cluster lacks is created, and recorded in the ledger
  (`ACL_LEDGER_TOPIC`, a compacted topic the reconciler creates: `app.admin.acl_ledger`);
- an ACL of a managed user that the specs no longer name is deleted only when the ledger says
  the reconciler created it. Any other (granted by hand, by another tool) is REFUSED: left in
  place and reported with the command that removes it by hand. A refusal does not stop the other
  changes (leaving an ACL is the safe side), but the run fails so that someone looks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from confluent_kafka import (
    Producer,
)
from confluent_kafka.admin import (
    AdminClient,
)

from app.admin import acl_ledger
from app.admin.acl_bindings import Binding, read_bindings
from app.admin.scram_credentials import (
    Credential,
    await_logins,
    read_credentials,
    set_credentials,
)
from app.admin.topic_reconciler import REQUEST_TIMEOUT_S, error_text, outcomes, plan_table
from app.clients.waiting import poll_until
from contract.acl_specs import (
    ACL_LEDGER_TOPIC,
    AclSpec,
    KafkaUser,
)
from contract.kafka_security import SCRAM_SHA_512

log = logging.getLogger(__name__)


class AclAction(StrEnum):
    """What the plan does with one credential, ACL or the ledger."""

    CREATE_CREDENTIAL = "create-credential"
    UPDATE_CREDENTIAL = "update-credential"
    CREATE_LEDGER = "create-ledger"
    CREATE = "create"
    DELETE = "delete"
    FORGET = "forget"  # a ledger entry of an ACL that is gone and no longer wanted
    REFUSED = "REFUSED"
    UP_TO_DATE = "up-to-date"


CHANGES = frozenset(
    {
        AclAction.CREATE_CREDENTIAL,
        AclAction.UPDATE_CREDENTIAL,
        AclAction.CREATE_LEDGER,
        AclAction.CREATE,
        AclAction.DELETE,
        AclAction.FORGET,
    }
)


@dataclass(frozen=True)
class AclState:
    """What the cluster holds for the managed users (read by `read_state`)."""

    # Every binding of the managed principals: the specs' users and those the ledger names.
    bindings: frozenset[Binding]
    credentials: Mapping[str, Credential]  # user -> its credential (users given passwords)
    ledger: frozenset[AclSpec]  # ACLs the reconciler created and has not deleted
    ledger_exists: bool = True


@dataclass(frozen=True)
class AclStep:
    """One line of the plan."""

    subject: str  # a principal, or the ledger topic
    action: AclAction
    detail: str
    binding: Binding | None = None
    user: str | None = None  # of a credential step

    @property
    def spec(self) -> AclSpec:
        """The spec of an ACL step the reconciler may act on (create, delete, forget)."""
        spec = self.binding.spec() if self.binding else None
        if spec is None:
            raise ValueError(f"plan step {self.action} {self.detail}: not an ACL of a spec")
        return spec


@dataclass(frozen=True)
class AclPlan:
    """The steps that bring the credentials and ACLs to the specs, user by user."""

    users: tuple[KafkaUser, ...]
    steps: tuple[AclStep, ...]
    # The mechanism of the credentials the plan creates or updates.
    mechanism: str = SCRAM_SHA_512

    @property
    def changes(self) -> list[AclStep]:
        """The steps that change the cluster."""
        return [s for s in self.steps if s.action in CHANGES]

    @property
    def refusals(self) -> list[AclStep]:
        """ACLs left in place (not in the specs, not created by the reconciler)."""
        return [s for s in self.steps if s.action is AclAction.REFUSED]

    def of(self, action: AclAction) -> list[AclStep]:
        """The steps of one action."""
        return [s for s in self.steps if s.action is action]

    @property
    def credential_changes(self) -> list[AclStep]:
        """The SCRAM credentials to set: created, then updated."""
        return self.of(AclAction.CREATE_CREDENTIAL) + self.of(AclAction.UPDATE_CREDENTIAL)


class AclReconcileError(RuntimeError):
    """Applying the plan failed for at least one credential or ACL; `failures` says which."""

    def __init__(self, failures: Sequence[str]) -> None:
        self.failures = list(failures)
        super().__init__("; ".join(self.failures))


# --- reading the cluster ---------------------------------------------------------------------


def read_state(
    admin: AdminClient,
    client_config: Mapping[str, str],
    users: Sequence[KafkaUser],
    passwords: Mapping[str, str] | None,
    mechanism: str = SCRAM_SHA_512,
) -> AclState:
    """What the cluster holds for `users` and for every principal the ledger names
    (credentials of `mechanism` only for users given a password)."""
    ledger = acl_ledger.read_ledger(client_config)
    principals = {u.principal for u in users} | {s.principal for s in ledger or ()}
    return AclState(
        bindings=read_bindings(admin, sorted(principals)),
        credentials=(
            read_credentials(admin, client_config, passwords, mechanism) if passwords else {}
        ),
        ledger=ledger or frozenset(),
        ledger_exists=ledger is not None,
    )


# --- planning --------------------------------------------------------------------------------


def plan(
    users: Sequence[KafkaUser],
    state: AclState,
    passwords: Mapping[str, str] | None = None,
    bootstrap: str = "<HOST:PORT>",
    ledger_replication: int = 3,
    can_check: bool = True,
    mechanism: str = SCRAM_SHA_512,
) -> AclPlan:
    """The steps from `state` to `users`. Pure: the same inputs give the same plan.

    `bootstrap` goes into the hand-removal command of a refusal; `can_check` says whether a
    password can be verified by logging in (else an existing credential is set again);
    `mechanism` is the one of the credentials in `state` and of those the plan sets.
    """
    steps: list[AclStep] = []
    if not state.ledger_exists:
        steps.append(
            AclStep(
                ACL_LEDGER_TOPIC,
                AclAction.CREATE_LEDGER,
                f"compacted topic, replication factor {ledger_replication}: the ACLs the "
                "reconciler creates",
            )
        )
    wanted = {acl for user in users for acl in user.acls}
    for user in users:
        steps += _credential_steps(user, state, passwords, can_check, mechanism)
        steps += _acl_steps(user.principal, user.acls, state, wanted, bootstrap)
    # A user gone from the specs: the ACLs the reconciler made for it go too.
    for principal in sorted({s.principal for s in state.ledger} - {u.principal for u in users}):
        steps += _acl_steps(principal, (), state, wanted, bootstrap)
    for spec in sorted(state.ledger - wanted - {b.spec() for b in state.bindings}):
        steps.append(
            AclStep(
                spec.principal,
                AclAction.FORGET,
                f"{Binding.of(spec).describe()}: in the ledger, but gone from the cluster "
                "and the specs",
                Binding.of(spec),
            )
        )
    return AclPlan(users=tuple(users), steps=tuple(steps), mechanism=mechanism)


def _credential_steps(
    user: KafkaUser,
    state: AclState,
    passwords: Mapping[str, str] | None,
    can_check: bool,
    mechanism: str,
) -> list[AclStep]:
    if passwords is None:
        return []
    found = state.credentials.get(user.name, Credential.MISSING)
    if found is Credential.LOGS_IN:
        return []
    if found is Credential.MISSING:
        action, detail = AclAction.CREATE_CREDENTIAL, f"{mechanism}: no credential yet"
    elif can_check:
        action = AclAction.UPDATE_CREDENTIAL
        detail = f"{mechanism}: the password of the specs does not log in (rotated)"
    else:
        action = AclAction.UPDATE_CREDENTIAL
        detail = (
            f"{mechanism}: set again (the reconciler's connection is not SCRAM, so it "
            "cannot check the password)"
        )
    return [AclStep(user.principal, action, detail, user=user.name)]


def _acl_steps(
    principal: str,
    acls: Sequence[AclSpec],
    state: AclState,
    wanted: set[AclSpec],
    bootstrap: str,
) -> list[AclStep]:
    present = {b for b in state.bindings if b.principal == principal}
    steps = []
    up_to_date = 0
    for acl in acls:
        binding = Binding.of(acl)
        if binding in present:
            up_to_date += 1
        else:
            steps.append(AclStep(principal, AclAction.CREATE, binding.describe(), binding))
    for binding in sorted(present):
        spec = binding.spec()
        if spec is not None and spec in wanted:
            continue
        if spec is not None and spec in state.ledger:
            steps.append(
                AclStep(
                    principal,
                    AclAction.DELETE,
                    f"{binding.describe()}: no longer in the specs (created by the reconciler)",
                    binding,
                )
            )
        else:
            steps.append(
                AclStep(
                    principal,
                    AclAction.REFUSED,
                    f"{binding.describe()}: not in the specs, and not created by the "
                    f"reconciler (not in its ledger {ACL_LEDGER_TOPIC}), so it is left in place. "
                    f"Add it to the specs, or remove it by hand: "
                    f"{binding.removal_command(bootstrap)}",
                    binding,
                )
            )
    if up_to_date:
        steps.append(AclStep(principal, AclAction.UP_TO_DATE, f"{up_to_date} ACLs"))
    return steps


# --- applying --------------------------------------------------------------------------------


def apply(
    admin: AdminClient,
    client_config: Mapping[str, str],
    the_plan: AclPlan,
    passwords: Mapping[str, str] | None,
    brokers: int,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> int:
    """Apply the plan's changes (refused steps are left alone); the number applied.

    Credentials first (a user's ACLs are useless without them), then the ledger, then the ACLs:
    each created ACL is recorded after Kafka created it and each deleted one forgotten after
    Kafka deleted it, so a crash in between leaves an ACL the ledger does not claim (which a
    later run refuses to drop: the safe side). Raises `AclReconcileError` naming every failure.
    """
    failures = _set_credentials(admin, the_plan, passwords or {}, timeout_s)
    if the_plan.of(AclAction.CREATE_LEDGER):
        failures += acl_ledger.create_ledger(admin, brokers, timeout_s)
    if failures:
        raise AclReconcileError(failures)
    producer = Producer({**client_config, "acks": "all", "enable.idempotence": True})
    failures += _create_acls(admin, producer, the_plan, timeout_s)
    failures += _delete_acls(admin, producer, the_plan, timeout_s)
    for step in the_plan.of(AclAction.FORGET):
        acl_ledger.record(producer, step.spec, created=False)
        log.info("forgot %s %s (gone from the cluster)", step.subject, step.detail)
    undelivered = producer.flush(timeout_s)
    if undelivered:
        failures.append(
            f"ACL ledger {ACL_LEDGER_TOPIC}: {undelivered} record(s) not written within "
            f"{timeout_s:g} s; the next run refuses to drop ACLs it cannot find there"
        )
    if not failures:
        failures = _await_visible(admin, client_config, the_plan, passwords or {}, timeout_s)
    if failures:
        raise AclReconcileError(failures)
    return len(the_plan.changes)


def _await_visible(
    admin: AdminClient,
    client_config: Mapping[str, str],
    the_plan: AclPlan,
    passwords: Mapping[str, str],
    timeout_s: float,
) -> list[str]:
    """Wait until the broker answering shows the ACL changes and the new passwords log in.

    The controller answers before every broker has applied the change; a client started right
    after the run (the processor after the Job, or a second run) would otherwise be refused.
    """
    created = {s.binding for s in the_plan.of(AclAction.CREATE) if s.binding}
    deleted = {s.binding for s in the_plan.of(AclAction.DELETE) if s.binding}
    principals = sorted({b.principal for b in created | deleted})
    deadline = time.monotonic() + timeout_s
    present: set[Binding] = set()

    def visible() -> bool:
        present.clear()
        present.update(read_bindings(admin, principals, timeout_s))
        return created <= present and not deleted & present

    if principals and not poll_until(visible, timeout_s, interval_s=0.2):
        return [
            f"ACLs applied, but not all visible within {timeout_s:g} s (missing "
            f"{sorted(b.describe() for b in created - present)}, still there "
            f"{sorted(b.describe() for b in deleted & present)}); check the brokers' health"
        ]
    users = []
    for step in the_plan.credential_changes:
        assert step.user is not None, "a credential step names its user"
        users.append(step.user)
    return await_logins(client_config, users, passwords, the_plan.mechanism, deadline, timeout_s)


def _set_credentials(
    admin: AdminClient, the_plan: AclPlan, passwords: Mapping[str, str], timeout_s: float
) -> list[str]:
    changes = []
    for step in the_plan.credential_changes:
        assert step.user is not None, "a credential step names its user"
        changes.append((step.user, str(step.action)))
    return set_credentials(admin, changes, passwords, the_plan.mechanism, timeout_s)


def grant(
    admin: AdminClient, specs: Sequence[AclSpec], timeout_s: float = REQUEST_TIMEOUT_S
) -> list[str]:
    """Create `specs`' bindings outside the plan and the ledger (Kafka creates an existing
    binding again as a no-op, so this is idempotent); one failure text per ACL not created.

    For the bootstrap a new cluster needs (the brokers grant the reconciler its own rights),
    not for a workload's ACLs: those are the reconciler's to create, record and drop.
    """
    if not specs:
        return []
    bindings = {Binding.of(spec).to_admin(): spec for spec in specs}
    futures = admin.create_acls(list(bindings), request_timeout=timeout_s)
    return [
        f"ACL {bindings[binding].describe()}: create failed ({error_text(failure)})"
        for binding, failure in outcomes(futures)
        if failure is not None
    ]


def _create_acls(
    admin: AdminClient, producer: Producer, the_plan: AclPlan, timeout_s: float
) -> list[str]:
    steps = {s.binding.to_admin(): s for s in the_plan.of(AclAction.CREATE) if s.binding}
    if not steps:
        return []
    futures = admin.create_acls(list(steps), request_timeout=timeout_s)
    return _settle(producer, steps, futures, created=True)


def _delete_acls(
    admin: AdminClient, producer: Producer, the_plan: AclPlan, timeout_s: float
) -> list[str]:
    steps = {s.binding.to_filter(): s for s in the_plan.of(AclAction.DELETE) if s.binding}
    if not steps:
        return []
    futures = admin.delete_acls(list(steps), request_timeout=timeout_s)
    return _settle(producer, steps, futures, created=False)


def _settle(
    producer: Producer,
    steps: Mapping[Any, AclStep],
    futures: Mapping[Any, Future[Any]],
    created: bool,
) -> list[str]:
    """Wait for each ACL's result: record it in the ledger when done, else name the failure."""
    verb = "create" if created else "delete"
    failures = []
    for key, failure in outcomes(futures):
        step = steps[key]
        if failure is not None:
            failures.append(
                f"ACL {step.subject} {step.binding.describe() if step.binding else ''}: {verb} "
                f"failed ({error_text(failure)}); check the reconciler's rights (ALTER on the "
                "cluster) and rerun"
            )
            continue
        acl_ledger.record(producer, step.spec, created=created)
        log.info("%s ACL %s %s", "created" if created else "deleted", step.subject, step.detail)
    return failures


# --- presenting ------------------------------------------------------------------------------


def format_table(the_plan: AclPlan) -> str:
    """The plan as a text table: principal, action, detail (one row per step)."""
    return plan_table("PRINCIPAL", [(s.subject, s.action.value, s.detail) for s in the_plan.steps])
