"""A Kafka broker's readiness for its StatefulSet: running, and in sync on every replica it hosts.

    python -m app.admin.broker_readiness --node-id 2 [--bootstrap-server localhost:9092]
        [--port 8090]
        [--command-config readiness-client.properties [--fallback-command-config FILE]
         [--bootstrap-acls bootstrap-acls.json]]

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

On a secured cluster it connects with `--command-config` (Kafka's client names, `${dir:...}`
resolved: `app.clients.client_properties`) as its own SCRAM user, `broker-readiness`, which may only
DESCRIBE the cluster and the topics a broker hosts (`contract.acl_specs.readiness_user`):
it never holds the broker's key, so a compromised processor image gains no more than an observer. A
rotation rewrites its files in place: it logs in with the current credentials once Kafka accepts
them, with `--fallback-command-config` (the previous revision's) until then (`AdminSource`).

Deny by default holds for the topic reconciler and for this user too, and KRaft cannot create
ACLs when the storage is formatted, so on a new cluster their ACLs are granted as the broker by
the `grant-acls` container beside it, on the broker's own image (`infra/bootstrap_grants.py`).
`--bootstrap-acls` names those ACLs (`contract.acl_specs` JSON): until DescribeAcls shows
every one of them, the broker is not ready, so the reconciler Job, which starts after the brokers
are ready, never meets a cluster that refuses it. The only super users stay the brokers.

`/metrics` serves, in Prometheus' text format:
- `kafka_broker_replicas_out_of_sync`: how many of the partition replicas this broker hosts are
  not in their ISR (the readiness judgement's count; absent while the broker cannot be asked).
  A broker that stays out of sync longer than a restart takes is what the
  `KafkaBrokerReplicasOutOfSync` alert pages for (dashboards/alerts.yaml);
- when the certificates expire: `kafka_tls_certificate_expiration_timestamp_seconds
  {certificate="broker"}` is the `notAfter` of the certificate the broker serves right now (a TLS
  handshake with its listener, verified with the CA: a renewal the broker has not loaded yet does
  not hide an expiry), `{certificate="ca"}` that of the CA in `ssl.ca.location` (the earliest, if
  the file holds several). A PLAINTEXT cluster has neither.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric

from app.admin.acl_bindings import Binding, read_bindings
from app.clients import LOG_FORMAT, client_properties
from app.clients.client_properties import ClientConfig, ClientPropertiesError
from app.clients.probe_endpoint import ProbeEndpoint
from contract import acl_specs

log = logging.getLogger(__name__)

DEFAULT_PORT = 8090
METADATA_TIMEOUT_S = 5.0
# How long a login may take to answer before the next is tried: two fit in a probe's timeout.
LOGIN_TIMEOUT_S = 3.0
CACHE_S = 2.0
# How many of the partitions not in sync (or ACLs not granted) a reason names.
NAMED = 5
# librdkafka's name of a client's settings that make it speak TLS.
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
EXPIRY_METRIC = "kafka_tls_certificate_expiration_timestamp_seconds"
EXPIRY_HELP = (
    "When the certificate expires (notAfter), in seconds since the epoch: broker = the one the "
    "local broker serves on its TLS listener now, ca = the CA the clients trust."
)
OUT_OF_SYNC_METRIC = "kafka_broker_replicas_out_of_sync"
OUT_OF_SYNC_HELP = "Partition replicas this broker hosts that are not in their ISR."


@dataclass(frozen=True)
class BrokerReadiness:
    """One judgement of the broker's state."""

    ready: bool
    reason: str
    hosted: int = 0  # partition replicas this broker hosts
    lagging: tuple[str, ...] = ()  # those whose ISR it is not in

    def body(self) -> dict[str, object]:
        """The probe's answer body."""
        body = {"ready": self.ready, "reason": self.reason, "hosted": self.hosted}
        return {**body, "lagging": list(self.lagging)}


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
    """The ACLs the `grant-acls` container beside the broker grants, from a mounted file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._parsed: tuple[str, frozenset[Binding], list[str]] | None = None  # digest, ...

    def _expected(self) -> tuple[frozenset[Binding], list[str]]:
        """The file's bindings and principals (parsed again only when the content changes)."""
        text = self.path.read_text(encoding="utf-8")
        digest = sha256(text.encode()).hexdigest()
        if self._parsed is None or self._parsed[0] != digest:
            users = acl_specs.loads(text)
            bindings = frozenset(Binding.of(acl) for user in users for acl in user.acls)
            self._parsed = (digest, bindings, [user.principal for user in users])
        return self._parsed[1], self._parsed[2]

    def missing(self, admin: AdminClient) -> str | None:
        """None when the cluster holds every ACL of the file, else why the broker is not ready."""
        try:
            expected, principals = self._expected()
        except (OSError, ValueError) as exc:
            return (
                f"bootstrap ACLs {self.path}: unreadable ({exc}); mount the kafka-bootstrap "
                "ConfigMap there, or drop --bootstrap-acls"
            )
        try:
            present = read_bindings(admin, principals, METADATA_TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
                # Its own DESCRIBE on the cluster is one of the bootstrap ACLs.
                return (
                    f"cannot read the ACLs ({error.str()}): the grant-acls container beside "
                    "the broker has not granted the bootstrap ACLs yet (see its log)"
                )
            return f"cannot read the ACLs from the broker: {error.str()}"
        absent = sorted(expected - present)
        if absent:
            named = "; ".join(
                f"{b.principal} {b.operation} {b.resource_type} {b.resource_name}"
                for b in absent[:NAMED]
            )
            return (
                f"{len(absent)} of the {len(expected)} bootstrap ACLs of {self.path} are not "
                f"granted yet ({named}{', ...' if len(absent) > NAMED else ''}): the grant-acls "
                "container beside the broker grants them (see its log)"
            )
        return None


class AdminSource:
    """The readiness user's admin client: the best login of its files that Kafka accepts.

    `command_config` is the current login, `fallback` (merged over it) the previous credentials
    revision's, as the reconciler's `--fallback-command-config`. A rotation changes both files in
    place, and the cluster knows the new credential only once the reconciler Job has set it,
    after the brokers are ready: so each call tries the logins in that order and keeps the first
    that answers, and the open client until a better one does. A sidecar started in between (a
    broker restarted mid-rotation) logs in with the previous credential, and the broker's
    readiness never waits on a Job that waits on it.
    """

    def __init__(
        self,
        bootstrap_server: str,
        command_config: Path | None,
        env: Mapping[str, str] | None = None,
        fallback: Path | None = None,
    ) -> None:
        self.bootstrap_server = bootstrap_server
        self.command_config = command_config
        self.fallback = fallback
        self.env = os.environ if env is None else env
        logins = self._logins()  # raises ClientPropertiesError: a bad file at start
        # Until a login answers (the broker may still be starting), none is current.
        self.settings: dict[str, str | int | float | bool] = {}
        self._admin = AdminClient(logins[0])

    def _logins(self) -> list[dict[str, str | int | float | bool]]:
        """The logins to try, best first (resolved again: a rotation rewrites the files)."""
        first = ClientConfig.load(self.command_config, self.env).resolved
        # Quiet client: a broker that is down or restarting is this process's normal subject.
        common: dict[str, str | int | float | bool] = {
            "bootstrap.servers": self.bootstrap_server,
            "log_level": 3,
        }
        logins: list[dict[str, str | int | float | bool]] = [{**first, **common}]
        if self.fallback is not None:
            previous = ClientConfig.load(self.fallback, self.env).resolved
            logins.append({**first, **previous, **common})
        return logins

    def __call__(self) -> AdminClient:
        """The client to ask with: a better login than the current one once it answers."""
        try:
            logins = self._logins()
        except ClientPropertiesError as exc:
            log.warning("keeping the current client: %s", exc)
            return self._admin
        for rank, settings in enumerate(logins):
            if settings == self.settings:
                return self._admin  # no better login answers
            try:
                candidate = AdminClient(settings)
                candidate.list_topics(timeout=LOGIN_TIMEOUT_S)
            except KafkaException as exc:
                log.debug("login %d of %d not accepted: %s", rank + 1, len(logins), exc)
                continue
            which = "the previous revision's" if rank else "the current"
            log.info("connected with %s credentials (%s)", which, self.command_config)
            self.settings, self._admin = settings, candidate
            return candidate
        return self._admin

    @property
    def tls_target(self) -> tuple[str, int, str] | None:
        """(host, port, CA file) of the broker's TLS listener; None when it does not speak TLS."""
        settings = self.settings or self._logins()[0]
        protocol = str(settings.get("security.protocol", "PLAINTEXT")).upper()
        ca_file = settings.get("ssl.ca.location")
        if protocol not in TLS_PROTOCOLS or not ca_file:
            return None
        host, _, port = self.bootstrap_server.split(",")[0].strip().rpartition(":")
        return host.strip("[]"), int(port), str(ca_file)


class ReadinessCache:
    """`judge` at most every `cache_s` seconds, however many probes ask; with bootstrap ACLs, a
    broker is ready only once the cluster holds them all."""

    def __init__(
        self,
        admin: Callable[[], AdminClient],
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

    def _judge(self) -> BrokerReadiness:
        admin = self.admin()
        # The ACLs first: until its own are granted, this user's Metadata answer lists no
        # topic, and "in sync on all 0 partitions" would pass for ready.
        if self.bootstrap_acls is not None:
            missing = self.bootstrap_acls.missing(admin)
            if missing is not None:
                return BrokerReadiness(False, missing)
        return judge(admin, self.node_id)

    def current(self) -> BrokerReadiness:
        """The latest judgement, renewed if older than `cache_s`."""
        with self._lock:
            now = time.monotonic()
            if self._last is None or now - self._last[0] >= self.cache_s:
                previous = self._last[1] if self._last else None
                judged = self._judge()
                if previous is None or previous.ready != judged.ready:
                    log.info("%s: %s", "ready" if judged.ready else "not ready", judged.reason)
                self._last = (now, judged)
            return self._last[1]


def served_expiry(
    host: str, port: int, ca_file: str, timeout_s: float = METADATA_TIMEOUT_S
) -> float:
    """`notAfter` (epoch seconds) of the certificate the listener at host:port serves, verified
    with `ca_file` (a TLS handshake only: a SASL_SSL listener speaks TLS first)."""
    context = ssl.create_default_context(cafile=ca_file)
    with (
        socket.create_connection((host, port), timeout=timeout_s) as sock,
        context.wrap_socket(sock, server_hostname=host) as tls,
    ):
        certificate = tls.getpeercert()
    if not certificate:  # verified with the CA, so never empty; the type allows None
        raise ValueError(f"{host}:{port} served no certificate")
    return float(ssl.cert_time_to_seconds(str(certificate["notAfter"])))


def ca_expiry(ca_file: str) -> float:
    """`notAfter` (epoch seconds) of the CA in `ca_file`: the earliest, if it holds several."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=ca_file)
    times = [ssl.cert_time_to_seconds(str(ca["notAfter"])) for ca in context.get_ca_certs()]
    if not times:
        raise ValueError(f"{ca_file} holds no CA certificate")
    return float(min(times))


def expiry_metrics(target: tuple[str, int, str] | None) -> list[Metric]:
    """The certificates' expiry (nothing without TLS). A certificate that cannot be read leaves
    its series out, and says why in the log."""
    if target is None:
        return []
    host, port, ca_file = target
    readers = {
        "broker": lambda: served_expiry(host, port, ca_file),
        "ca": lambda: ca_expiry(ca_file),
    }
    expiry = GaugeMetricFamily(EXPIRY_METRIC, EXPIRY_HELP, labels=["certificate"])
    for certificate, read in readers.items():
        try:
            expiry.add_metric([certificate], round(read()))
        except (OSError, ValueError) as exc:
            log.warning("the %s certificate's expiry (%s:%d, CA %s): %s",
                        certificate, host, port, ca_file, exc)  # fmt: skip
    return [expiry]


def sync_metrics(readiness: BrokerReadiness) -> list[Metric]:
    """The replicas out of sync, where the judgement got as far as the partitions."""
    if not (readiness.ready or readiness.lagging):
        return []
    return [GaugeMetricFamily(OUT_OF_SYNC_METRIC, OUT_OF_SYNC_HELP, len(readiness.lagging))]


class SidecarMetrics:
    """The sidecar's series, read when Prometheus scrapes (a prometheus_client collector)."""

    def __init__(
        self, cache: ReadinessCache, tls_target: Callable[[], tuple[str, int, str] | None]
    ) -> None:
        self.cache = cache
        self.tls_target = tls_target

    def collect(self) -> list[Metric]:
        """Every series, as of now."""
        return sync_metrics(self.cache.current()) + expiry_metrics(self.tls_target())


def serve(
    cache: ReadinessCache,
    host: str,
    port: int,
    tls_target: Callable[[], tuple[str, int, str] | None] = lambda: None,
) -> ProbeEndpoint:
    """The endpoint answering /ready, /live and /metrics (`start()` or `serve_forever()` it)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SidecarMetrics(cache, tls_target))

    def ready() -> tuple[bool, Mapping[str, object]]:
        readiness = cache.current()
        return readiness.ready, readiness.body()

    return ProbeEndpoint(
        host, port, live=lambda: (True, {"live": True}), ready=ready, registry=registry
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the broker's readiness until stopped."""
    parser = argparse.ArgumentParser(
        prog="python -m app.admin.broker_readiness", description=__doc__
    )
    parser.add_argument("--node-id", type=int, required=True, help="the broker's node.id")
    parser.add_argument("--bootstrap-server", default="localhost:9092", metavar="HOST:PORT")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--host", default="0.0.0.0", help="the address to listen on")
    parser.add_argument("--cache-s", type=float, default=CACHE_S, help="seconds between asks")
    client_properties.add_argument(parser)
    parser.add_argument(
        "--fallback-command-config",
        type=Path,
        metavar="FILE",
        help="the previous credentials revision's login (sasl.mechanism, sasl.password) over "
        "--command-config's: used while Kafka refuses the current one (a rotation under way)",
    )
    parser.add_argument(
        "--bootstrap-acls",
        type=Path,
        metavar="FILE",
        help="ACLs (contract.acl_specs JSON) the cluster must hold before the broker is "
        "ready: the ones the grant-acls container beside it grants on a new cluster",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        source = AdminSource(
            args.bootstrap_server, args.command_config, fallback=args.fallback_command_config
        )
    except ClientPropertiesError as exc:
        print(f"python -m app.admin.broker_readiness: {exc}", file=sys.stderr)
        return 2
    acls = BootstrapAcls(args.bootstrap_acls) if args.bootstrap_acls else None
    cache = ReadinessCache(source, args.node_id, args.cache_s, acls)
    server = serve(cache, args.host, args.port, lambda: source.tls_target)
    log.info(
        "broker readiness of node %d (%s) on :%d/ready, /metrics",
        args.node_id, args.bootstrap_server, server.port,
    )  # fmt: skip
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
