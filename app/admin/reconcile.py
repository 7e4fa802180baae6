"""The reconciler's command line: `python -m app.admin.reconcile`, run as a Kubernetes Job, makes
the cluster's topics, group configs and, on a secured cluster, users and ACLs match the specs.

    python -m app.admin.reconcile --bootstrap-servers kafka:9092 --specs /etc/topics/topics.json
        [--command-config /etc/topics/client.properties] [--allow-partition-increase] [--dry-run]
        [--fallback-command-config /etc/topics/previous-client.properties]
        [--acls /etc/topics/acls.json [--scram-passwords-dir /etc/kafka/users]
         [--scram-mechanism SCRAM-SHA-256]]

It prints the plan as a table, refuses unsafe changes before applying anything, and logs each
change it makes. Run twice, the second run changes nothing and says so.

With `--acls` it also reconciles the users' ACLs (`app.admin.acl_reconciler`), and with
`--scram-passwords-dir` their SCRAM credentials of `--scram-mechanism`
(`app.admin.scram_credentials`), after the topics: a second table, the same plan-refuse-apply shape.
An ACL it would have to drop but did not create is refused (left in place, reported with the command
that removes it by hand); the other changes still apply.

In a rotation the reconciler's own new credential does not exist until it sets it: when Kafka
refuses `--command-config`'s credentials, it logs in with those of `--fallback-command-config`
(settings over the first file's: the previous revision's mechanism and password, valid until
they are retired by `python -m app.admin.scram_retire`).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata

from app.admin import acl_ledger, acl_reconciler, group_configs, scram_credentials
from app.admin.topic_reconciler import ReconcileError, apply, format_table, plan, read_cluster
from app.clients import LOG_FORMAT, client_properties
from app.clients.waiting import poll_until
from contract.acl_specs import AclSpecError, KafkaUser
from contract.acl_specs import loads as load_users
from contract.kafka_security import SCRAM_MECHANISMS, SCRAM_SHA_512
from contract.topic_specs import (
    GroupConfigSpec,
    TopicSpec,
    TopicSpecError,
    loads,
    loads_groups,
)

log = logging.getLogger("app.admin.reconcile")

EXIT_OK = 0
EXIT_REFUSED_OR_FAILED = 1
EXIT_USAGE = 2
# The Job may start before the brokers accept connections (a fresh cluster takes a minute or two).
DEFAULT_WAIT_S = 300.0
ATTEMPT_TIMEOUT_S = 3.0
RETRY_EVERY_S = 2.0

EPILOG = """\
exit codes:
  0  the topics match the specs (changes applied, or nothing to do; with --dry-run: nothing
     refused)
  1  refused (replication factor change, fewer partitions, more partitions without
     --allow-partition-increase: nothing at all is applied; or an ACL of a managed user that
     the specs do not name and the reconciler did not create: left in place, everything else
     applied), a change failed, or Kafka did not answer within --wait-timeout
  2  usage: bad arguments, unreadable or invalid --specs, --acls or --command-config, a
     missing password file in --scram-passwords-dir
"""


class _FirstOccurrence(logging.Filter):
    """Pass each distinct librdkafka message once: it repeats a failing connect every backoff."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = re.sub(r"\d+ms", "", record.getMessage())
        if key in self._seen:
            return False
        self._seen.add(key)
        return True


def librdkafka_logger() -> logging.Logger:
    """Where librdkafka's own lines go (auth failures, unreachable brokers), deduplicated."""
    logger = logging.getLogger("librdkafka")
    if not any(isinstance(f, _FirstOccurrence) for f in logger.filters):
        logger.addFilter(_FirstOccurrence())
    return logger


class UsageError(Exception):
    """A bad argument or input file (exit code 2)."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (argparse exits with 2 on a usage error)."""
    parser = argparse.ArgumentParser(
        prog="python -m app.admin.reconcile",
        description="Reconcile Kafka topics with their specs: create missing topics, alter "
        "differing configs (only the keys a spec names), add partitions only when allowed; "
        "refuse replication factor changes and shrinking.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT[,...]")
    parser.add_argument(
        "--specs", required=True, type=Path, metavar="FILE", help="topic specs (JSON)"
    )
    client_properties.add_argument(parser)
    parser.add_argument(
        "--allow-partition-increase",
        action="store_true",
        help="add partitions where a spec asks for more (moves keys between partitions)",
    )
    parser.add_argument(
        "--acls",
        type=Path,
        metavar="FILE",
        help="users and their ACLs (JSON, contract.acl_specs.dumps): reconcile the ACLs too",
    )
    parser.add_argument(
        "--scram-passwords-dir",
        type=Path,
        metavar="DIR",
        help="one file per user of --acls, named after it, holding its password: create or "
        "update each user's SCRAM credential of --scram-mechanism",
    )
    parser.add_argument(
        "--scram-mechanism",
        choices=SCRAM_MECHANISMS,
        default=SCRAM_SHA_512,
        help="the mechanism of the credentials --scram-passwords-dir sets (the credentials "
        "revision's); the other mechanism's are left alone (default %(default)s)",
    )
    parser.add_argument(
        "--fallback-command-config",
        type=Path,
        metavar="FILE",
        help="client properties over --command-config's, tried when Kafka refuses that file's "
        "credentials: in a rotation, the previous revision's sasl.mechanism and sasl.password",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    parser.add_argument(
        "--wait-timeout",
        type=float,
        default=DEFAULT_WAIT_S,
        metavar="SECONDS",
        help=f"how long to wait for Kafka to answer (default {DEFAULT_WAIT_S:g})",
    )
    return parser.parse_args(argv)


def client_logins(
    servers: str, command_config: Path | None, fallback: Path | None, env: Mapping[str, str]
) -> list[dict[str, str]]:
    """The client settings of `command_config` with `bootstrap.servers`, then, if given, those
    with `fallback`'s settings over them; a `UsageError` names a bad file."""
    try:
        first = {
            **client_properties.ClientConfig.load(command_config, env).resolved,
            "bootstrap.servers": servers,
        }
        if fallback is None:
            return [first]
        second = client_properties.ClientConfig.load(fallback, env)
    except client_properties.ClientPropertiesError as exc:
        raise UsageError(str(exc)) from exc
    return [first, {**first, **second.resolved}]


def admin_client(client_config: Mapping[str, str], command_config: Path | None) -> AdminClient:
    """An admin client with `client_config`, its librdkafka lines logged; a `UsageError` when
    librdkafka refuses the settings (of `command_config`)."""
    try:
        return AdminClient(
            {
                **client_config,
                # A documented client setting that confluent-kafka's type stub leaves out.
                "logger": librdkafka_logger(),  # type: ignore[dict-item]
            }
        )
    except KafkaException as exc:
        raise UsageError(
            f"invalid client settings (--command-config {command_config}): {exc.args[0].str()}"
        ) from exc


def choose_login(
    logins: Sequence[Mapping[str, str]], servers: str, timeout_s: float
) -> Mapping[str, str]:
    """The first of `logins` whose credentials Kafka accepts, trying them in turn until one
    does or `timeout_s` has passed (a credential set a moment ago may not have reached every
    broker yet). One login is returned as it is: the wait for the cluster reports its errors."""
    if len(logins) == 1:
        return logins[0]
    refused: list[str] = []

    def accepted() -> Mapping[str, str] | None:
        refused.clear()
        for login in logins:
            try:
                answer = scram_credentials.authenticates(login, ATTEMPT_TIMEOUT_S)
            except KafkaException as exc:
                raise UsageError(
                    f"invalid client settings (--command-config, --fallback-command-config): "
                    f"{exc.args[0].str()}"
                ) from exc
            if answer:
                return login
            if answer is False:
                refused.append(str(login.get("sasl.mechanism")))
        return None

    login = poll_until(
        accepted,
        timeout_s,
        interval_s=RETRY_EVERY_S,
        progress=lambda: log.info(
            "waiting for Kafka at %s to accept a login (refused: %s)",
            servers,
            ", ".join(refused) or "none",
        ),
        progress_every_s=RETRY_EVERY_S,
    )
    if login is None:
        raise TimeoutError(
            f"Kafka at {servers} accepted none of the reconciler's logins within "
            f"{timeout_s:g} s (refused: {', '.join(refused) or 'none'}; the others got no "
            "answer). Check that the brokers are Ready and that --command-config or "
            "--fallback-command-config holds a password the cluster has (a rotation "
            "retired before its reconciler ran leaves neither)"
        )
    log.info("logged in as %s with %s", login.get("sasl.username"), login.get("sasl.mechanism"))
    return login


def load_specs(path: Path) -> tuple[list[TopicSpec], list[GroupConfigSpec]]:
    """The topic and group specs in `path`, or a `UsageError` naming the file and the problem."""
    try:
        text = path.read_text(encoding="utf-8")
        return loads(text), loads_groups(text)
    except OSError as exc:
        raise UsageError(f"cannot read --specs {path}: {exc.strerror or exc}") from exc
    except (TopicSpecError, ValueError) as exc:
        raise UsageError(f"invalid topic specs in {path}: {exc}") from exc


def load_acl_inputs(
    acls: Path | None, passwords_dir: Path | None
) -> tuple[list[KafkaUser] | None, dict[str, str] | None]:
    """The users of `--acls` and the passwords of `--scram-passwords-dir` (None when not
    given), or a `UsageError` naming the file and the problem."""
    if acls is None:
        if passwords_dir is not None:
            raise UsageError("--scram-passwords-dir needs --acls (the users are named there)")
        return None, None
    try:
        users = load_users(acls.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read --acls {acls}: {exc.strerror or exc}") from exc
    except (AclSpecError, ValueError) as exc:
        raise UsageError(f"invalid ACL specs in {acls}: {exc}") from exc
    if passwords_dir is None:
        return users, None
    try:
        return users, scram_credentials.read_passwords(passwords_dir, users)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from exc


def wait_for_cluster(admin: AdminClient, servers: str, timeout_s: float) -> ClusterMetadata:
    """Cluster metadata, retrying until Kafka answers or `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    attempts: list[KafkaException] = []

    def answered() -> ClusterMetadata | None:
        left = deadline - time.monotonic()
        try:
            return admin.list_topics(timeout=max(0.5, min(ATTEMPT_TIMEOUT_S, left)))
        except KafkaException as exc:
            admin.poll(0)  # hands librdkafka's own log lines (e.g. an auth failure) to logging
            attempts.append(exc)
            return None

    metadata = poll_until(
        answered,
        timeout_s,
        interval_s=RETRY_EVERY_S,
        progress=lambda: log.info(
            "waiting for Kafka at %s (attempt %d, %.0f s left)",
            servers,
            len(attempts),
            deadline - time.monotonic(),
        ),
        progress_every_s=RETRY_EVERY_S,
    )
    if metadata is None:
        last = attempts[-1]
        raise TimeoutError(
            f"Kafka at {servers} did not answer within {timeout_s:g} s "
            f"({len(attempts)} attempts; last error: {last.args[0] if last.args else last}). "
            "Check --bootstrap-servers, that the brokers are Ready "
            "(kubectl get pods), and the security settings in --command-config"
        ) from last
    log.info("connected to Kafka at %s (%d broker(s))", servers, len(metadata.brokers))
    return metadata


def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Plan, print, and (unless refused or dry) apply; the exit code."""
    specs, groups = load_specs(args.specs)
    users, passwords = load_acl_inputs(args.acls, args.scram_passwords_dir)
    logins = client_logins(
        args.bootstrap_servers, args.command_config, args.fallback_command_config, env
    )
    try:
        client_config = choose_login(logins, args.bootstrap_servers, args.wait_timeout)
    except TimeoutError as exc:
        log.error("%s", exc)
        return EXIT_REFUSED_OR_FAILED
    admin = admin_client(client_config, args.command_config)
    try:
        metadata = wait_for_cluster(admin, args.bootstrap_servers, args.wait_timeout)
        cluster = read_cluster(admin, [s.name for s in specs], metadata)
        group_steps = group_configs.plan(groups, group_configs.read(admin, groups))
        acl_plan = None
        if users is not None:
            state = acl_reconciler.read_state(
                admin, client_config, users, passwords, args.scram_mechanism
            )
            acl_plan = acl_reconciler.plan(
                users,
                state,
                passwords,
                bootstrap=args.bootstrap_servers,
                ledger_replication=acl_ledger.ledger_replication(len(metadata.brokers)),
                can_check=scram_credentials.can_check_logins(client_config),
                mechanism=args.scram_mechanism,
            )
    except (TimeoutError, KafkaException) as exc:
        log.error("cannot read the cluster's topics, ACLs or credentials: %s", exc)
        return EXIT_REFUSED_OR_FAILED
    the_plan = plan(specs, cluster, allow_partition_increase=args.allow_partition_increase)
    print(format_table(the_plan), flush=True)
    if acl_plan is not None:
        print("\n" + acl_reconciler.format_table(acl_plan), flush=True)
    if groups:
        print("\n" + group_configs.format_table(groups, group_steps), flush=True)
    if the_plan.refusals:
        for step in the_plan.refusals:
            log.error("refused: topic %s: %s", step.topic, step.detail)
        print(
            f"refused: {len(the_plan.refusals)} unsafe change(s); nothing was applied",
            flush=True,
        )
        return EXIT_REFUSED_OR_FAILED
    acl_refusals = acl_plan.refusals if acl_plan else []
    for acl_step in acl_refusals:
        log.error("refused: %s: %s", acl_step.subject, acl_step.detail)
    exit_code = EXIT_REFUSED_OR_FAILED if acl_refusals else EXIT_OK
    left = (
        f"; refused: {len(acl_refusals)} ACL(s) left in place (see above)" if acl_refusals else ""
    )
    acl_changes = acl_plan.changes if acl_plan else []
    changes = len(the_plan.changes) + len(acl_changes) + len(group_steps)
    if changes == 0:
        print(f"0 changes: {_up_to_date(specs, acl_plan)}{left}", flush=True)
        return exit_code
    if args.dry_run:
        print(f"dry run: {changes} change(s) planned, nothing applied{left}", flush=True)
        return exit_code
    try:
        applied = apply(admin, the_plan) if the_plan.changes else 0
        if acl_plan is not None and acl_changes:
            applied += acl_reconciler.apply(
                admin, client_config, acl_plan, passwords, len(metadata.brokers)
            )
        if group_steps:
            applied += group_configs.apply(admin, group_steps)
    except (
        ReconcileError,
        acl_reconciler.AclReconcileError,
        group_configs.GroupConfigError,
    ) as exc:
        for failure in exc.failures:
            log.error("%s", failure)
        print(f"failed: {len(exc.failures)} of {changes} change(s) did not apply", flush=True)
        return EXIT_REFUSED_OR_FAILED
    print(
        f"{applied} change(s) applied; {len(the_plan.up_to_date)} topics were up to date{left}",
        flush=True,
    )
    return exit_code


def _up_to_date(specs: Sequence[TopicSpec], acl_plan: acl_reconciler.AclPlan | None) -> str:
    topics = f"{len(specs)} topics"
    if acl_plan is None:
        return f"{topics} up to date"
    acls = sum(len(u.acls) for u in acl_plan.users)
    return f"{topics}, {len(acl_plan.users)} users and {acls} ACLs up to date"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m app.admin.reconcile`."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
    args = parse_args(argv)
    try:
        return run(args, os.environ)
    except UsageError as exc:
        log.error("%s", exc)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
