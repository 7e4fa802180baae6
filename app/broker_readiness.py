"""A Kafka broker's readiness for its StatefulSet: running, and in sync on every replica it hosts.

    python -m app.broker_readiness --node-id 2 [--bootstrap-server localhost:9092] [--port 8090]
        [--tls-dir /etc/kafka/tls [--grant-acls /etc/kafka/bootstrap/bootstrap-acls.json]]

Runs beside each broker (a sidecar of the Kafka pod, on the processor's image) and answers the
kubelet's readiness probe on `/ready`: 200 when the broker is an unfenced member of the cluster
(it answers a Metadata request on its client listener and is in the cluster's broker list) and
every partition it hosts has it in its ISR; 503 with the reason otherwise. The StatefulSet
controller then restarts the next broker of a roll only once this one has caught up, so a roll
never takes a second replica of a partition away while the first is still behind (Strimzi's
KafkaRoller waits for the same before it rolls the next broker).

It keeps one admin client open and asks at most every `--cache-s` seconds, however often it is
probed: no JVM per probe, as `kafka-broker-api-versions.sh` in an exec probe started. `/live`
answers 200 while the process serves.

On a secured cluster it asks as the broker itself: `--tls-dir` names the broker's certificate
files and `--bootstrap-server` its INTERNAL listener (SSL, client certificate), where the
broker's principal is the super user, so no ACL and no SCRAM password is needed.

Deny by default holds for the topic reconciler too, and KRaft cannot create ACLs when the
storage is formatted, so on a new cluster someone with the brokers' rights must grant the
reconciler its own ACLs once. `--grant-acls` makes that the sidecar's job: once its broker is in
sync, it creates the ACLs of every user in the file (`app.acl_specs` JSON; Kafka treats an
existing binding as created), and again whenever the file's content changes (a ConfigMap update
reaches a mounted file without a restart). Until they are granted the broker is not ready, so
the reconciler Job, which starts after the brokers are ready, never meets a cluster that
refuses it. The broker's key never leaves the broker's pod, and the only super users stay the
brokers.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from hashlib import sha256
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from app import acl_specs
from app.acl_reconciler import grant
from app.kafka_security import broker_client_configs
from app.processor import LOG_FORMAT

log = logging.getLogger(__name__)

DEFAULT_PORT = 8090
METADATA_TIMEOUT_S = 5.0
CACHE_S = 2.0
# How many of the partitions not in sync a reason names.
NAMED = 5


@dataclass(frozen=True)
class BrokerReadiness:
    """One judgement of the broker's state."""

    ready: bool
    reason: str
    hosted: int = 0  # partition replicas this broker hosts
    lagging: tuple[str, ...] = ()  # those whose ISR it is not in

    def to_json(self) -> bytes:
        """The probe's answer body."""
        body = {"ready": self.ready, "reason": self.reason, "hosted": self.hosted}
        return json.dumps({**body, "lagging": list(self.lagging)}).encode()


def judge(
    admin: AdminClient, node_id: int, timeout_s: float = METADATA_TIMEOUT_S
) -> BrokerReadiness:
    """Ask the broker for the cluster's metadata and judge node `node_id` by it."""
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        return BrokerReadiness(False, f"no metadata from the broker: {exc.args[0].str()}")
    if node_id not in metadata.brokers:
        known = sorted(metadata.brokers)
        return BrokerReadiness(
            False, f"node {node_id} is not an unfenced broker of the cluster (brokers {known})"
        )
    hosted = 0
    lagging = []
    for topic, topic_metadata in sorted(metadata.topics.items()):
        for partition, p in sorted(topic_metadata.partitions.items()):
            if node_id in p.replicas:
                hosted += 1
                if node_id not in p.isrs:
                    lagging.append(f"{topic}-{partition}")
    if lagging:
        named = ", ".join(lagging[:NAMED]) + (", ..." if len(lagging) > NAMED else "")
        return BrokerReadiness(
            False,
            f"{len(lagging)} of the {hosted} partitions on node {node_id} are not in sync yet "
            f"({named})",
            hosted,
            tuple(lagging),
        )
    return BrokerReadiness(True, f"in sync on all {hosted} partitions on node {node_id}", hosted)


class BootstrapAcls:
    """The ACLs this broker grants from a file: once per content of the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._granted: str | None = None  # digest of the content last granted

    def ensure(self, admin: AdminClient) -> str | None:
        """Grant the file's ACLs unless this content was granted; None when done, else why not."""
        try:
            text = self.path.read_text(encoding="utf-8")
            # Parsed only when new: the file is read on every judgement, and rarely changes.
            digest = sha256(text.encode()).hexdigest()
            if digest == self._granted:
                return None
            users = acl_specs.loads(text)
        except (OSError, ValueError) as exc:
            return (
                f"bootstrap ACLs {self.path}: unreadable ({exc}); mount the kafka-bootstrap "
                "ConfigMap there, or drop --grant-acls"
            )
        specs = [acl for user in users for acl in user.acls]
        failures = grant(admin, specs, METADATA_TIMEOUT_S)
        if failures:
            return (
                f"granting {len(failures)} of the {len(specs)} bootstrap ACLs from {self.path} "
                f"failed, will retry: {'; '.join(failures[:NAMED])}"
            )
        self._granted = digest
        log.info(
            "granted the %d bootstrap ACLs of %s from %s (Kafka keeps those it had)",
            len(specs), ", ".join(user.principal for user in users), self.path,
        )  # fmt: skip
        return None


class ReadinessCache:
    """`judge` at most every `cache_s` seconds, however many probes ask; a ready broker also
    grants the bootstrap ACLs, if given, before it says so."""

    def __init__(
        self,
        admin: AdminClient,
        node_id: int,
        cache_s: float = CACHE_S,
        bootstrap_acls: BootstrapAcls | None = None,
    ) -> None:
        self.admin = admin
        self.node_id = node_id
        self.cache_s = cache_s
        self.bootstrap_acls = bootstrap_acls
        self._lock = threading.Lock()
        self._last: tuple[float, BrokerReadiness] | None = None

    def current(self) -> BrokerReadiness:
        """The latest judgement, renewed if older than `cache_s`."""
        with self._lock:
            now = time.monotonic()
            if self._last is None or now - self._last[0] >= self.cache_s:
                previous = self._last[1] if self._last else None
                judged = judge(self.admin, self.node_id)
                if judged.ready and self.bootstrap_acls is not None:
                    failure = self.bootstrap_acls.ensure(self.admin)
                    if failure is not None:
                        judged = BrokerReadiness(False, failure, judged.hosted)
                if previous is None or previous.ready != judged.ready:
                    log.info("%s: %s", "ready" if judged.ready else "not ready", judged.reason)
                self._last = (now, judged)
            return self._last[1]


def serve(cache: ReadinessCache, host: str, port: int) -> ThreadingHTTPServer:
    """An HTTP server answering /ready and /live (call `serve_forever()` on it)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/live":
                self._answer(200, b'{"live": true}')
            elif self.path == "/ready":
                readiness = cache.current()
                self._answer(200 if readiness.ready else 503, readiness.to_json())
            else:
                self._answer(404, b'{"paths": ["/ready", "/live"]}')

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a line per probe is noise; changes of state are logged by the cache

    return ThreadingHTTPServer((host, port), Handler)


def client_configs(
    bootstrap_server: str, tls_dir: str | None
) -> dict[str, str | int | float | bool]:
    """The readiness client's settings: plain, or the broker's certificate from `tls_dir`."""
    security = broker_client_configs(tls_dir) if tls_dir else {}
    return {**security, "bootstrap.servers": bootstrap_server, "log_level": 3}


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the broker's readiness until stopped."""
    parser = argparse.ArgumentParser(prog="python -m app.broker_readiness", description=__doc__)
    parser.add_argument("--node-id", type=int, required=True, help="the broker's node.id")
    parser.add_argument("--bootstrap-server", default="localhost:9092", metavar="HOST:PORT")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--host", default="0.0.0.0", help="the address to listen on")
    parser.add_argument("--cache-s", type=float, default=CACHE_S, help="seconds between asks")
    parser.add_argument(
        "--tls-dir",
        metavar="DIR",
        help="the broker's certificate files (ca.crt, tls.crt, tls.key): connect with them "
        "over SSL, to the INTERNAL listener named by --bootstrap-server",
    )
    parser.add_argument(
        "--grant-acls",
        type=Path,
        metavar="FILE",
        help="ACLs (app.acl_specs JSON) to create once the broker is in sync, before it is "
        "ready: the topic reconciler's own on a new cluster",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    # Quiet client: a broker that is down or restarting is this process's normal subject.
    admin = AdminClient(client_configs(args.bootstrap_server, args.tls_dir))
    grants = BootstrapAcls(args.grant_acls) if args.grant_acls else None
    server = serve(ReadinessCache(admin, args.node_id, args.cache_s, grants), args.host, args.port)
    log.info(
        "broker readiness of node %d (%s) on :%d/ready",
        args.node_id, args.bootstrap_server, server.server_address[1],
    )  # fmt: skip
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
