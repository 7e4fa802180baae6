"""The last step of a SCRAM rotation: `python -m app.admin.scram_retire`, run as a Kubernetes Job.

    python -m app.admin.scram_retire --bootstrap-servers kafka:9092 --acls /etc/topics/acls.json
        --command-config /etc/topics/client.properties --retire SCRAM-SHA-512

Kafka keeps one SCRAM credential per user and mechanism, and the credentials revision picks the
mechanism (`contract.kafka_security.scram_mechanism`), so a rotation is gapless: the
reconciler sets every user's credential of the new mechanism beside the old one, the clients restart
onto it, and this deletes the old mechanism's credential of every user of `--acls` (it logs in with
the new one, `--command-config`). From then on the old passwords no longer log in; connections they
opened stay up (Kafka authenticates a connection once), and their pods are gone by then.

A user that has no credential of the other mechanism keeps its old one (deleting it would lock
the user out): the run fails and names it. Run twice, the second run deletes nothing.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from confluent_kafka import KafkaException

from app.admin import scram_credentials
from app.admin.reconcile import (
    DEFAULT_WAIT_S,
    EXIT_OK,
    EXIT_REFUSED_OR_FAILED,
    EXIT_USAGE,
    UsageError,
    admin_client,
    client_logins,
    load_acl_inputs,
    wait_for_cluster,
)
from app.clients import LOG_FORMAT, client_properties
from contract.kafka_security import SCRAM_MECHANISMS

log = logging.getLogger("app.admin.scram_retire")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (argparse exits with 2 on a usage error)."""
    parser = argparse.ArgumentParser(
        prog="python -m app.admin.scram_retire",
        description="Delete the SCRAM credentials of one mechanism (the previous credentials "
        "revision's) of every user of --acls, once every client uses the other mechanism.",
    )
    parser.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT[,...]")
    parser.add_argument(
        "--acls",
        required=True,
        type=Path,
        metavar="FILE",
        help="the users (JSON, contract.acl_specs.dumps), as the reconciler reads them",
    )
    parser.add_argument(
        "--retire",
        required=True,
        choices=SCRAM_MECHANISMS,
        help="the mechanism whose credentials are deleted; each user keeps the other one",
    )
    client_properties.add_argument(parser)
    parser.add_argument(
        "--wait-timeout",
        type=float,
        default=DEFAULT_WAIT_S,
        metavar="SECONDS",
        help=f"how long to wait for Kafka to answer (default {DEFAULT_WAIT_S:g})",
    )
    return parser.parse_args(argv)


def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Retire the credentials of `--retire`; the exit code."""
    users, _ = load_acl_inputs(args.acls, None)
    assert users is not None, "--acls is required"
    kept = next(m for m in SCRAM_MECHANISMS if m != args.retire)
    # It logs in with the kept mechanism's credential, which the reconciler has set.
    (client_config,) = client_logins(args.bootstrap_servers, args.command_config, None, env)
    admin = admin_client(client_config, args.command_config)
    try:
        wait_for_cluster(admin, args.bootstrap_servers, args.wait_timeout)
        retired = scram_credentials.retire_credentials(
            admin, [user.name for user in users], args.retire, kept
        )
    except (TimeoutError, KafkaException) as exc:
        log.error("cannot read or change the users' SCRAM credentials: %s", exc)
        return EXIT_REFUSED_OR_FAILED
    except scram_credentials.CredentialError as exc:
        for failure in exc.failures:
            log.error("%s", failure)
        print(f"failed: {len(exc.failures)} user(s) not retired", flush=True)
        return EXIT_REFUSED_OR_FAILED
    if retired:
        print(f"retired the {args.retire} credentials of {', '.join(retired)}", flush=True)
    else:
        print(f"0 changes: no user has a {args.retire} credential", flush=True)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m app.admin.scram_retire`."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
    args = parse_args(argv)
    try:
        return run(args, os.environ)
    except UsageError as exc:
        log.error("%s", exc)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
