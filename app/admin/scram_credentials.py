"""The users' SCRAM credentials: read, checked by logging in, set and retired.

Beside the ACLs (`app.admin.acl_reconciler`, whose plan says which credentials to set) but
apart from them: Kafka keeps one SCRAM credential per user and mechanism and never shows a
stored password, so a credential is checked by logging in with it (on a SCRAM connection of the
reconciler's own). The topic reconciler (`python -m app.admin.reconcile --scram-passwords-dir
DIR`) sets every user's credential of the current revision's mechanism
(`contract.kafka_security.scram_mechanism`) and leaves the other mechanism's alone: in a
rotation they are what the running clients log in with, until `retire_credentials` (run by
`python -m app.admin.scram_retire` once every client has moved on) deletes them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from enum import StrEnum
from functools import partial
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from app.admin.topic_reconciler import REQUEST_TIMEOUT_S, error_text, outcomes
from app.clients.waiting import poll_until
from contract.acl_specs import KafkaUser
from contract.kafka_security import SCRAM_MECHANISMS, SCRAM_SHA_512, scram_key

log = logging.getLogger(__name__)

# Kafka's minimum for either SCRAM mechanism is 4096 iterations; its tools use the same default.
SCRAM_ITERATIONS = 4096
# librdkafka's name for an authentication failure (bad password, unknown user).
_AUTHENTICATION = KafkaError._AUTHENTICATION


def admin_mechanism(mechanism: str) -> ScramMechanism:
    """The admin API's enum of a SCRAM mechanism (`SCRAM-SHA-256` -> `SCRAM_SHA_256`)."""
    scram_key(mechanism)  # one of Kafka's two, or a ValueError naming it
    return ScramMechanism[mechanism.replace("-", "_")]


class Credential(StrEnum):
    """What the cluster says about a user's SCRAM credential of one mechanism and its password."""

    MISSING = "missing"
    LOGS_IN = "logs-in"  # the password of the specs logs in: up to date
    REJECTED = "rejected"  # it exists, and the password of the specs does not log in


class CredentialError(RuntimeError):
    """Setting or retiring at least one user's credential failed; `failures` says which."""

    def __init__(self, failures: Sequence[str]) -> None:
        self.failures = list(failures)
        super().__init__("; ".join(self.failures))


# --- inputs ----------------------------------------------------------------------------------


def read_passwords(directory: Path, users: Sequence[KafkaUser]) -> dict[str, str]:
    """Each user's password from `directory/<user name>` (a mounted Secret: the file holds the
    password, a final newline is not part of it). Raises `FileNotFoundError`/`ValueError`
    naming the file."""
    passwords = {}
    for user in users:
        path = directory / user.name
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                f"--scram-passwords-dir {directory}: no password file {path} for user "
                f"{user.name}; mount the user's Secret there (one file per user, named after it)"
            ) from exc
        password = text.removesuffix("\n").removesuffix("\r")
        if not password:
            raise ValueError(f"password file {path} of user {user.name} is empty")
        passwords[user.name] = password
    return passwords


# --- reading the cluster ---------------------------------------------------------------------


def existing_credentials(
    admin: AdminClient,
    names: Sequence[str],
    mechanism: str = SCRAM_SHA_512,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> set[str]:
    """Those of `names` that have a SCRAM credential of `mechanism`."""
    if not names:
        return set()
    futures = admin.describe_user_scram_credentials(list(names), request_timeout=timeout_s)
    assert isinstance(futures, dict), "a list of users gives one future per user"
    have = set()
    for name, future in futures.items():
        try:
            description = future.result()
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.RESOURCE_NOT_FOUND:
                continue
            raise
        mechanisms = {info.mechanism for info in description.scram_credential_infos}
        if admin_mechanism(mechanism) in mechanisms:
            have.add(name)
    return have


def authenticates(client_config: Mapping[str, str], timeout_s: float) -> bool | None:
    """Whether a new connection with `client_config` logs in: True, False when Kafka refuses
    its credentials, None when the cluster gives neither answer within `timeout_s`."""
    errors: list[KafkaError] = []
    client = AdminClient(
        {
            **client_config,
            "error_cb": errors.append,  # type: ignore[dict-item]
            "log_level": 0,  # a rejected password is an answer here, not an incident
        }
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            client.list_topics(timeout=1.0)
            return True
        except KafkaException:
            client.poll(0.2)  # serves error_cb
        if any(e.code() == _AUTHENTICATION for e in errors):
            return False
    return None


def logs_in(
    client_config: Mapping[str, str],
    user: str,
    password: str,
    timeout_s: float = 30.0,
    mechanism: str | None = None,
) -> bool:
    """Whether `user` with `password` authenticates on the connection `client_config` describes
    (a SCRAM client's settings with another user's name and password; with `mechanism`, that
    mechanism instead of the client's). Raises `TimeoutError` when the cluster neither accepts
    nor rejects it in time."""
    config = {**client_config, "sasl.username": user, "sasl.password": password}
    if mechanism is not None:
        config["sasl.mechanism"] = mechanism
    answer = authenticates(config, timeout_s)
    if answer is None:
        raise TimeoutError(
            f"logging in as SCRAM user {user} ({config.get('sasl.mechanism')}): no answer "
            f"within {timeout_s:g} s"
        )
    return answer


def can_check_logins(client_config: Mapping[str, str]) -> bool:
    """Whether the reconciler's own connection is SCRAM, so a password can be checked on it
    (with either mechanism: the client listener enables both)."""
    protocol = client_config.get("security.protocol", "PLAINTEXT").upper()
    return protocol.startswith("SASL_") and client_config.get("sasl.mechanism") in SCRAM_MECHANISMS


def read_credentials(
    admin: AdminClient,
    client_config: Mapping[str, str],
    passwords: Mapping[str, str],
    mechanism: str = SCRAM_SHA_512,
) -> dict[str, Credential]:
    """Each user's credential of `mechanism`: missing, or whether its password of the specs
    logs in with that mechanism.

    Without a SCRAM connection to check on, an existing credential counts as REJECTED: the
    password cannot be verified, so it is set again every run (and the plan says so).
    """
    have = existing_credentials(admin, sorted(passwords), mechanism)
    check = can_check_logins(client_config)
    states = {}
    for name, password in passwords.items():
        if name not in have:
            states[name] = Credential.MISSING
        elif check and logs_in(client_config, name, password, mechanism=mechanism):
            states[name] = Credential.LOGS_IN
        else:
            states[name] = Credential.REJECTED
    return states


# --- applying --------------------------------------------------------------------------------


def set_credentials(
    admin: AdminClient,
    changes: Sequence[tuple[str, str]],
    passwords: Mapping[str, str],
    mechanism: str,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> list[str]:
    """Set the `mechanism` credential of each user of `changes` (user, what: its plan action)
    to its password in `passwords`; one failure text per user whose credential was not set."""
    if not changes:
        return []
    info = ScramCredentialInfo(admin_mechanism(mechanism), SCRAM_ITERATIONS)
    upserts: list[UserScramCredentialAlteration] = []
    for user, what in changes:
        log.info("%s of SCRAM user %s (%s)", what, user, mechanism)
        upserts.append(UserScramCredentialUpsertion(user, info, passwords[user].encode()))
    futures = admin.alter_user_scram_credentials(upserts, request_timeout=timeout_s)
    failures = []
    for user, failure in outcomes(futures):
        if failure is not None:
            failures.append(
                f"SCRAM user {user}: setting its {mechanism} credential failed "
                f"({error_text(failure)}); the reconciler needs ALTER on the cluster"
            )
        else:
            log.info("set the %s credential of SCRAM user %s", mechanism, user)
    return failures


def await_logins(
    client_config: Mapping[str, str],
    users: Sequence[str],
    passwords: Mapping[str, str],
    mechanism: str,
    deadline: float,
    timeout_s: float,
) -> list[str]:
    """Wait until each of `users` logs in with its password of `passwords` and `mechanism`
    (the credential was just set: the controller answers before every broker has applied it),
    until `deadline` (`time.monotonic()`); nothing to wait for when the connection
    `client_config` describes cannot check a password (`can_check_logins`). A failure text
    when one does not log in in time."""
    if can_check_logins(client_config):
        for user in users:
            left = max(1.0, deadline - time.monotonic())
            if not poll_until(
                partial(logs_in, client_config, user, passwords[user], left, mechanism),
                deadline - time.monotonic(),
                interval_s=0.2,
            ):
                return [
                    f"SCRAM user {user}: its credential was set, but its password "
                    f"does not log in within {timeout_s:g} s; check the brokers' health"
                ]
    return []


def retire_credentials(
    admin: AdminClient,
    users: Sequence[str],
    retired: str,
    kept: str,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> list[str]:
    """Delete the `retired` mechanism's credential of each of `users` that has one; the users
    whose credential was deleted, once the cluster no longer shows them.

    The last step of a rotation, once every client logs in with `kept`: from then on a password
    of the `retired` mechanism no longer logs in, while connections it opened stay up (Kafka
    authenticates a connection once). A user without a `kept` credential keeps its `retired` one
    (it would be left with none): raises `CredentialError` naming it, after retiring the others.
    """
    if retired == kept:
        raise ValueError(f"retiring {retired} while keeping {kept}: they must differ")
    having = existing_credentials(admin, users, retired, timeout_s)
    stranded = having - existing_credentials(admin, users, kept, timeout_s)
    failures = [
        f"SCRAM user {user}: has no {kept} credential, so its {retired} one is kept (retiring it "
        f"would leave the user none); run the reconciler (python -m app.admin.reconcile "
        f"--scram-passwords-dir ... --scram-mechanism {kept}) first, then retire again"
        for user in sorted(stranded)
    ]
    deletions: list[UserScramCredentialAlteration] = [
        UserScramCredentialDeletion(user, admin_mechanism(retired))
        for user in sorted(having - stranded)
    ]
    retired_users = []
    if deletions:
        futures = admin.alter_user_scram_credentials(deletions, request_timeout=timeout_s)
        for user, failure in outcomes(futures):
            if failure is not None:
                failures.append(
                    f"SCRAM user {user}: deleting its {retired} credential failed "
                    f"({error_text(failure)}); the reconciler needs ALTER on the cluster"
                )
            else:
                log.info("retired the %s credential of SCRAM user %s", retired, user)
                retired_users.append(user)
    # The controller answers before every broker has applied the deletion.
    if not failures and not poll_until(
        lambda: not existing_credentials(admin, retired_users, retired, timeout_s),
        timeout_s,
        interval_s=0.2,
    ):
        failures.append(
            f"{retired} credentials of {retired_users} deleted, but still shown after "
            f"{timeout_s:g} s; check the brokers' health"
        )
    if failures:
        raise CredentialError(failures)
    return retired_users
