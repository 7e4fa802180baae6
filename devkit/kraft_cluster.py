"""A throwaway Apache Kafka KRaft cluster on loopback ports: the project's default broker.

Every guarantee the processor gives rests on Apache Kafka's group and transaction coordinators
(static membership, the hand-off to a warm standby, fencing, exactly-once output, compaction), so
the local run, the tests and the benchmarks run the real broker: the released jars that
`devkit.kafka_release` resolves from Maven Central (or the distribution named by `KAFKA_HOME`),
started as plain JVMs (`java -cp 'libs/*' kafka.Kafka`, storage formatted by
`kafka.tools.StorageTool`), with the broker settings of the production design:

    cluster = KraftCluster()                    # the project's release (or $KAFKA_HOME)
    with cluster:                               # format, start, wait until usable
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        cluster.kill_node(2)                    # SIGKILL one node
        cluster.start_node(2)
        cluster.wait_until_fully_replicated()

Every node is a combined broker+controller (as in the Kubernetes StatefulSet), all three form
a dynamic controller quorum (KIP-853: `controller.quorum.bootstrap.servers` and
`StorageTool format --initial-controllers`). Data, configs and logs live in one temporary
directory; `shutdown()` stops the nodes by controlled shutdown (the local run's end) and reports
how each ended, `close()` kills what still runs (also at interpreter exit) and removes the
directory unless asked to keep it for a post-mortem.

`KraftCluster(..., security=ClusterSecurity(scram_users={...}))` starts it secured exactly as
the prod stack renders it (`contract.kafka_security`): SASL_SSL/SCRAM clients, SSL with
client certificates between brokers and controllers, `StandardAuthorizer`, deny by default.
"""

from __future__ import annotations

import atexit
import logging
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from confluent_kafka import ElectionType, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic, PartitionMetadata

from app.clients.waiting import wait_until
from contract import container_commands, kafka_security
from devkit.kafka_release import KafkaRelease, java_command
from devkit.kafka_release import ensure as ensure_release
from devkit.kraft_node import (
    BROKER_LOG4J2,
    PRODUCTION_BROKER_CONFIGS,
    TEST_BROKER_CONFIGS,
    TOOLS_LOG4J2,
    KraftNode,
    kafka_uuid,
    server_properties,
)
from devkit.kraft_shutdown import ShutdownReport, stop_together
from devkit.local_ports import HOST, free_port
from devkit.local_tls import write_broker_tls

log = logging.getLogger(__name__)

# `--initial-controllers` (dynamic quorum, KIP-853) appeared in 3.9.
MIN_KAFKA_VERSION = (3, 9)
# Small but enough for tests: three JVMs fit next to Spark on a 2-core, few-GiB machine.
DEFAULT_HEAP_OPTS = "-Xms256m -Xmx384m"

# `close()` and the atexit hook do not run when the test process is killed (SIGTERM, SIGKILL):
# on Linux the nodes then get SIGKILL from the kernel (the parent-death signal survives the
# scripts' exec of java), so no JVM outlives its test run.
_DIE_WITH_PARENT: tuple[str, ...] = (
    ("setpriv", "--pdeathsig", "KILL") if shutil.which("setpriv") else ()
)


# How long a start, a restart or a recovery may take before it counts as failed: conditions, so a
# quiet machine waits 10-20 s; one at load 30 (a CI runner beside Spark tests) saw a secured
# cluster's controller take minutes over its first events ("Exceptionally slow controller event").
START_TIMEOUT_S = 300.0
# How long `shutdown` lets the nodes stop on their own (about 6 s on a quiet 2-core machine).
SHUTDOWN_TIMEOUT_S = 60.0


class KraftClusterError(RuntimeError):
    """The distribution is unusable, or the cluster did not start or recover in time."""


@dataclass(frozen=True)
class ClusterSecurity:
    """Secure the cluster as the prod stack does (`contract.kafka_security`, client
    listener SASL_SSL): TLS on every listener, SCRAM users, `StandardAuthorizer` denying what no
    ACL allows, the broker certificate's principal the only super user.

    `scram_users` (name -> password) exist from the start: they are bootstrapped when the
    storage is formatted (`kafka-storage.sh format --add-scram`), as the prod init container
    does, with `scram_mechanism` (the credentials revision's: `kafka_security.scram_mechanism`);
    the client listener enables both mechanisms. Users can own nothing until ACLs allow it.
    """

    scram_users: Mapping[str, str] = field(default_factory=dict)
    scram_mechanism: str = kafka_security.SCRAM_SHA_512

    def __post_init__(self) -> None:
        kafka_security.scram_key(self.scram_mechanism)  # one of Kafka's two, or a ValueError
        for name, password in self.scram_users.items():
            # Both go inside `[name=...,password=...]` of `--add-scram`, which has no escaping.
            if not name or not password or any(c in name + password for c in ',=[]"\n'):
                raise KraftClusterError(
                    f"SCRAM user {name!r}: name and password must be non-empty and free of "
                    "',', '=', '[', ']', quotes and newlines (kafka-storage.sh --add-scram)"
                )


def check_release(release: KafkaRelease) -> KafkaRelease:
    """`release` if its Kafka can form this cluster's quorum (3.9+), else a clear error."""
    version = tuple(int(part) for part in release.version.split(".")[:2])
    if version < MIN_KAFKA_VERSION:
        wanted = ".".join(map(str, MIN_KAFKA_VERSION))
        raise KraftClusterError(
            f"{release.home} is Kafka {release.version}; the cluster needs {wanted} or newer "
            "(dynamic KRaft quorum): unset KAFKA_HOME to use the project's own release"
        )
    return release


class KraftCluster:
    """An N-node (default 3) combined broker+controller KRaft cluster on 127.0.0.1.

    `start()` formats the storage, starts every node and returns once an AdminClient sees all
    brokers and can create a topic replicated to all of them. Use it as a context manager so
    the processes die even when the code inside fails.

    With `security` the cluster is secured as prod is (`ClusterSecurity`): `bootstrap_servers`
    is then the SASL_SSL client listener, `client_configs(user)` a SCRAM user's client settings
    and `superuser_configs()` the broker certificate's (the one super user, on the INTERNAL
    listener). Without it every listener is PLAINTEXT and both give plain settings.
    """

    def __init__(
        self,
        release: KafkaRelease | None = None,
        nodes: int = 3,
        *,
        broker_configs: Mapping[str, str] | None = None,
        heap_opts: str = DEFAULT_HEAP_OPTS,
        work_dir: Path | None = None,
        security: ClusterSecurity | None = None,
    ) -> None:
        if nodes < 1:
            raise KraftClusterError(f"nodes={nodes}: a cluster needs at least 1 node (3 for RF 3)")
        self.release = check_release(release or ensure_release())
        self.java = java_command()
        self.heap_opts = heap_opts
        self.cluster_id = kafka_uuid()
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="kraft-cluster-"))
        self.broker_configs = {
            **PRODUCTION_BROKER_CONFIGS,
            **TEST_BROKER_CONFIGS,
            **(broker_configs or {}),
        }
        # Fewer than 3 nodes (a quick local cluster) cannot hold 3 replicas or an ISR of 2:
        # cap what needs more brokers than there are.
        for key in (
            "default.replication.factor",
            "offsets.topic.replication.factor",
            "transaction.state.log.replication.factor",
            "share.coordinator.state.topic.replication.factor",
            "min.insync.replicas",
            "transaction.state.log.min.isr",
            "share.coordinator.state.topic.min.isr",
        ):
            if int(self.broker_configs[key]) > nodes:
                self.broker_configs[key] = str(nodes)
        self.security = security
        self.nodes = [
            KraftNode(
                node_id=node_id,
                broker_port=free_port(HOST),
                controller_port=free_port(HOST),
                directory=self.work_dir / f"node-{node_id}",
                internal_port=free_port(HOST) if security else 0,
            )
            for node_id in range(1, nodes + 1)
        ]
        self._closed = False

    @property
    def bootstrap_servers(self) -> str:
        """The `bootstrap.servers` value for clients: every broker's client listener."""
        return ",".join(f"{HOST}:{node.broker_port}" for node in self.nodes)

    @property
    def tls_dir(self) -> Path:
        """The CA and broker certificate files of a secured cluster
        (`contract.kafka_security`)."""
        return self.work_dir / "tls"

    @property
    def ca_file(self) -> Path:
        """The CA certificate clients trust (`ssl.ca.location`)."""
        return self.tls_dir / kafka_security.TLS_CA_FILE

    def client_configs(
        self, user: str, password: str | None = None, mechanism: str | None = None
    ) -> dict[str, str]:
        """Client settings (`bootstrap.servers` included) of SCRAM user `user` on the client
        listener; its bootstrapped password unless `password` is given, the bootstrap mechanism
        unless `mechanism` is. Plain settings on an unsecured cluster."""
        servers = {"bootstrap.servers": self.bootstrap_servers}
        if self.security is None:
            return servers
        if password is None:
            if user not in self.security.scram_users:
                raise KraftClusterError(
                    f"SCRAM user {user!r} was not bootstrapped (users: "
                    f"{sorted(self.security.scram_users)}); pass its password"
                )
            password = self.security.scram_users[user]
        return {
            **servers,
            **kafka_security.scram_client_configs(
                user, password, str(self.ca_file), mechanism or self.security.scram_mechanism
            ),
        }

    def superuser_configs(self) -> dict[str, str]:
        """Client settings of the super user: the broker certificate on the INTERNAL listener
        (for tests that grant ACLs or add users). Plain settings on an unsecured cluster."""
        servers = ",".join(node.admin_endpoint for node in self.nodes)
        if self.security is None:
            return {"bootstrap.servers": servers}
        return {
            "bootstrap.servers": servers,
            **kafka_security.broker_client_configs(str(self.tls_dir)),
        }

    def node(self, node_id: int) -> KraftNode:
        """The node with `node.id` = `node_id` (1-based, as in the configs)."""
        for candidate in self.nodes:
            if candidate.node_id == node_id:
                return candidate
        known = [n.node_id for n in self.nodes]
        raise KraftClusterError(f"node.id={node_id} is not in this cluster; node ids: {known}")

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, timeout_s: float = START_TIMEOUT_S) -> KraftCluster:
        """Write configs, format storage, start every node, wait until the cluster is usable.
        On a failure every node is killed and the files are kept for a post-mortem."""
        try:
            return self._start(timeout_s)
        except BaseException:
            self.close(keep_files=True)
            raise

    def _start(self, timeout_s: float) -> KraftCluster:
        started = time.monotonic()
        log.info(
            "starting a %d-node KRaft cluster (Apache Kafka %s from %s) in %s",
            len(self.nodes),
            self.release.version,
            self.release.home,
            self.work_dir,
        )
        atexit.register(self.close)
        if self.security is not None:
            write_broker_tls(self.tls_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._log4j2_path("broker").write_text(BROKER_LOG4J2, encoding="utf-8")
        self._log4j2_path("tools").write_text(TOOLS_LOG4J2, encoding="utf-8")
        voters = ",".join(n.controller_endpoint for n in self.nodes)
        tls_dir = self.tls_dir if self.security is not None else None
        for node in self.nodes:
            node.log_dir.mkdir(parents=True, exist_ok=True)
            node.config_path.write_text(
                server_properties(node, voters, self.broker_configs, tls_dir)
            )
        self._format_storage()
        log.info(
            "storage formatted (cluster id %s) after %.1f s",
            self.cluster_id,
            time.monotonic() - started,
        )
        for node in self.nodes:
            self.start_node(node.node_id)
        self.wait_until_ready(timeout_s - (time.monotonic() - started))
        log.info(
            "cluster usable after %.1f s: bootstrap.servers=%s",
            time.monotonic() - started,
            self.bootstrap_servers,
        )
        return self

    def start_node(self, node_id: int) -> None:
        """Start (or restart after `stop_node`/`kill_node`) one node; does not wait for it."""
        node = self.node(node_id)
        if node.process is not None:
            raise KraftClusterError(f"node {node_id} is already running (pid {node.process.pid})")
        release = node.release or self.release
        command = [
            *_DIE_WITH_PARENT,
            *self._java(
                "broker",
                *shlex.split(self.heap_opts),
                *container_commands.JVM_PERFORMANCE_OPTS,
                release=release,
            ),
            f"-Dkafka.logs.dir={node.log_dir}",
            "kafka.Kafka",
            str(node.config_path),
        ]
        with node.console_path.open("ab") as console:
            node.process = subprocess.Popen(
                command,
                stdout=console,
                stderr=subprocess.STDOUT,
                # Its own session: a Ctrl-C in the terminal reaches pytest, which then kills it.
                start_new_session=True,
            )
        log.info(
            "node %d started (Apache Kafka %s, pid %d, broker %s:%d, controller %s)",
            node_id,
            release.version,
            node.process.pid,
            HOST,
            node.broker_port,
            node.controller_endpoint,
        )

    def stop_node(self, node_id: int, timeout_s: float = 60.0) -> None:
        """Stop one node gracefully (SIGTERM: controlled shutdown, leadership moves first)."""
        self._signal_node(node_id, signal.SIGTERM, timeout_s)

    def kill_node(self, node_id: int) -> None:
        """Kill one node at once (SIGKILL), as a crashed or evicted pod."""
        self._signal_node(node_id, signal.SIGKILL, 30.0)

    def restart_node(self, node_id: int, timeout_s: float = START_TIMEOUT_S) -> None:
        """Stop one node gracefully, start it again, wait until every replica is back in sync."""
        self.stop_node(node_id)
        self.start_node(node_id)
        self.wait_until_fully_replicated(timeout_s)

    def upgrade_node(
        self, node_id: int, release: KafkaRelease, timeout_s: float = START_TIMEOUT_S
    ) -> None:
        """One step of a rolling upgrade, as the Kafka StatefulSet rolls a new image: stop the
        node (a controlled shutdown), start it on `release` with the same storage, and wait
        until every replica is back in sync, so the next node may go."""
        self.stop_node(node_id)
        self.node(node_id).release = check_release(release)
        self.start_node(node_id)
        self.wait_until_fully_replicated(timeout_s)

    def metadata_version(self) -> str:
        """The cluster's finalized `metadata.version` (e.g. `4.1-IV1`), as kafka-features.sh
        describes it."""
        output = self._feature_command("describe")
        found = re.search(r"Feature: metadata\.version\s.*?FinalizedVersionLevel: (\S+)", output)
        if found is None:
            raise KraftClusterError(
                f"kafka-features.sh describe named no metadata.version:\n{output}"
            )
        return found[1]

    def finalize_release(self, release: KafkaRelease) -> str:
        """The upgrade's last step, as the stack's Job runs it (the contract's
        `finalize_metadata_version`): raise the finalized features (`metadata.version` first)
        to `release`'s own. The new `metadata.version`; a node of an older release cannot join
        after it. Kafka itself refuses while a node runs an older release (KraftClusterError
        with its message), and finds nothing to do on a cluster already there."""
        major_minor = ".".join(release.version.split(".")[:2])
        runs = container_commands.finalize_metadata_version(
            self._running_endpoints(), major_minor, secured=self.security is not None
        )
        # The Job's words after its JVM and main class (the cluster's own release runs those).
        tool = container_commands.kafka_tool(container_commands.FEATURE_COMMAND)
        if runs.command[: len(tool)] != tool:
            raise KraftClusterError(
                f"the metadata.version Job's command {' '.join(runs.command)} does not start "
                f"with {' '.join(tool)}: change finalize_release with the contract"
            )
        self._features(runs.command[len(tool) :])
        return self.metadata_version()

    def shutdown(self, timeout_s: float = SHUTDOWN_TIMEOUT_S) -> ShutdownReport:
        """Stop every running node at once by SIGTERM, each by a controlled shutdown as a pod's
        deletion does, and report how each ended.

        A combined node's broker asks the controller quorum (2 of 3) to approve its shutdown,
        and only then stops its own controller. So once two nodes are gone, a node not yet
        approved waits for a quorum that left with them (Kafka waits 5 minutes); it is killed
        then, as Kafka's own system tests kill the last nodes of a colocated cluster. On a
        quiet machine every approval comes within a second and no node is killed. A node still
        running after `timeout_s` is killed too."""
        report = stop_together(self.nodes, timeout_s, self._kill)
        if report.late:
            log.warning("%s. The nodes' logs end:\n%s", report.describe(), self.log_tails())
        else:
            log.info("%s", report.describe())
        return report

    def _kill(self, node: KraftNode) -> None:
        assert node.process is not None
        node.process.kill()
        node.process.wait()
        node.process = None

    def close(self, keep_files: bool = False) -> None:
        """Kill every node; remove the working directory unless `keep_files` (post-mortems)."""
        if self._closed:
            return
        self._closed = True
        for node in self.nodes:
            if node.running:
                self.kill_node(node.node_id)
        atexit.unregister(self.close)
        if keep_files:
            log.info("cluster files kept in %s", self.work_dir)
        else:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> KraftCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None:
            log.error("cluster logs after a failure:\n%s", self.log_tails())
        self.close(keep_files=exc is not None)

    # -- waiting ------------------------------------------------------------------------

    def wait_until_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until every running node is a registered broker and a topic replicated to
        all of them (up to 3) can be created: the cluster accepts real work."""
        deadline = time.monotonic() + timeout_s
        running = {node.node_id for node in self.nodes if node.running}
        admin = self._admin()
        brokers: set[int] = set()

        def registered() -> bool:
            nonlocal brokers
            self._check_alive()
            try:
                brokers = {b.id for b in admin.describe_cluster(request_timeout=5).result().nodes}
            except KafkaException:
                brokers = set()
            return running <= brokers

        self._wait(
            registered,
            deadline,
            f"brokers {sorted(running)} to register",
            seen=lambda: f"registered: {sorted(brokers)}",
        )
        log.info("brokers registered: %s", sorted(brokers))
        probe = f"__kraft-cluster-probe-{kafka_uuid()}"
        replication = min(3, len(running))
        error: KafkaException | None = None

        def created() -> bool:
            nonlocal error
            self._check_alive()
            future = admin.create_topics([NewTopic(probe, 1, replication)], request_timeout=10)
            try:
                future[probe].result()
            except KafkaException as exc:
                # "Already exists": an earlier attempt created it and its answer was lost (seen
                # after a broker roll: UNKNOWN_TOPIC_OR_PART, then "already exists" until the end).
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    error = exc
                    return False
            return True

        self._wait(
            created,
            deadline,
            f"a topic with replication factor {replication} to be created",
            seen=lambda: f"last error: {error}",
        )

        def deleted() -> bool:
            try:
                admin.delete_topics([probe], request_timeout=10)[probe].result()
            except KafkaException as exc:
                # The broker that forwards the request may not know the new topic yet.
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise
                return False
            return True

        self._wait(deleted, deadline, f"the probe topic {probe} to be deleted")

    def wait_until_fully_replicated(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until every node is a broker again, every partition of every topic has all its
        replicas in sync (what a rolling restart waits for before the next node), and each is
        led by its preferred replica again.

        The controller would move the leaders back by itself (`auto.leader.rebalance.enable`),
        but only at its next check, up to `leader.imbalance.check.interval.seconds` (300 s)
        later: in the middle of whatever runs next, where a group coordinator that moves can
        turn a consumer's LeaveGroup away or hold up its close."""
        deadline = time.monotonic() + timeout_s
        self.wait_until_ready(timeout_s)
        admin = self._admin()
        lagging: list[str] = []

        def in_sync() -> bool:
            nonlocal lagging
            self._check_alive()
            lagging = self._under_replicated(admin)
            return not lagging

        self._wait(
            in_sync, deadline, "replicas to catch up", seen=lambda: f"out of sync: {lagging[:5]}"
        )
        moved: list[str] = []

        def led_by_preferred() -> bool:
            nonlocal moved
            self._check_alive()
            moved = self._not_preferred_leader(admin)
            if moved:
                # ELECTION_NOT_NEEDED for the partitions already there: the result is the leaders.
                admin.elect_leaders(ElectionType.PREFERRED, None)
            return not moved

        self._wait(
            led_by_preferred,
            deadline,
            "leaders to move back to their preferred replicas",
            seen=lambda: f"not on their preferred replica: {moved[:5]}",
        )

    # -- diagnostics ----------------------------------------------------------------------

    def log_tails(self, lines: int = 30) -> str:
        """The last `lines` of each node's console and server.log, for a failure report."""
        parts = [f"cluster files: {self.work_dir}"]
        for node in self.nodes:
            for path in (node.console_path, node.log_dir / "server.log"):
                if path.is_file():
                    tail = path.read_text(errors="replace").splitlines()[-lines:]
                    parts.append(f"--- node {node.node_id}: {path} ---\n" + "\n".join(tail))
        return "\n".join(parts)

    # -- internals ------------------------------------------------------------------------

    def _scram_arguments(self) -> list[str]:
        if self.security is None:
            return []
        mechanism = self.security.scram_mechanism
        return [
            argument
            for name, password in self.security.scram_users.items()
            for argument in ("--add-scram", f"{mechanism}=[name={name},password={password}]")
        ]

    def _format_storage(self) -> None:
        # Every node gets the same initial quorum: id@host:port:directory-id of all controllers.
        initial = ",".join(
            f"{n.node_id}@{n.controller_endpoint}:{n.directory_id}" for n in self.nodes
        )
        commands = {
            node.node_id: [
                *self._java("tools", "-Xmx256m", "-XX:TieredStopAtLevel=1"),
                "kafka.tools.StorageTool",
                "format",
                "--cluster-id",
                self.cluster_id,
                "--config",
                str(node.config_path),
                "--initial-controllers",
                initial,
                *self._scram_arguments(),
            ]
            for node in self.nodes
        }
        # One JVM start each (about 2 s): run them side by side.
        running = {
            node_id: subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            for node_id, command in commands.items()
        }
        for node_id, process in running.items():
            output, _ = process.communicate(timeout=120)
            if process.returncode != 0:
                # The command line holds the SCRAM passwords: show it masked.
                shown = " ".join(commands[node_id])
                for password in self.security.scram_users.values() if self.security else ():
                    shown = shown.replace(f"password={password}]", "password=***]")
                raise KraftClusterError(
                    f"formatting node {node_id} failed ({shown}):\n"
                    + output.decode(errors="replace")
                )

    def _log4j2_path(self, kind: str) -> Path:
        return self.work_dir / f"log4j2-{kind}.properties"

    def _java(self, log4j2: str, *options: str, release: KafkaRelease | None = None) -> list[str]:
        """`java` with `options`, the jars of `release` (the cluster's by default) and a
        log4j2 configuration of this cluster (`broker` or `tools`); the main class and its
        arguments follow."""
        return [
            self.java,
            *options,
            f"-Dlog4j2.configurationFile={self._log4j2_path(log4j2)}",
            "-cp",
            (release or self.release).classpath,
        ]

    def _feature_command(self, *arguments: str) -> str:
        """kafka-features.sh `arguments` against the running brokers; its output."""
        return self._features(("--bootstrap-server", self._running_endpoints(), *arguments))

    def _running_endpoints(self) -> str:
        return ",".join(n.admin_endpoint for n in self.nodes if n.running)

    def _features(self, arguments: Sequence[str]) -> str:
        """kafka-features.sh (`FeatureCommand`) of the newest release a node runs (an older
        tool names a newer level UNKNOWN) with `arguments`, its server included; its output."""
        if self.security is not None:
            raise KraftClusterError(
                "kafka-features.sh needs the Java client's TLS settings on a secured cluster, "
                "which KraftCluster does not write: upgrade an unsecured cluster"
            )
        release = max(
            (node.release or self.release for node in self.nodes),
            key=lambda r: tuple(int(part) for part in r.version.split(".")),
        )
        command = [
            *self._java("tools", "-Xmx256m", "-XX:TieredStopAtLevel=1", release=release),
            "org.apache.kafka.tools.FeatureCommand",
            *arguments,
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise KraftClusterError(
                f"kafka-features.sh {' '.join(arguments)} failed (exit {result.returncode}):\n"
                + result.stdout[-2000:]
                + result.stderr[-2000:]
            )
        return result.stdout

    def _signal_node(self, node_id: int, signum: signal.Signals, timeout_s: float) -> None:
        node = self.node(node_id)
        if node.process is None:
            return
        started = time.monotonic()
        node.process.send_signal(signum)
        try:
            node.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning(
                "node %d ignored %s for %.0f s: killing it", node_id, signum.name, timeout_s
            )
            node.process.kill()
            node.process.wait()
        node.process = None
        log.info(
            "node %d stopped by %s in %.1f s", node_id, signum.name, time.monotonic() - started
        )

    def _admin(self) -> AdminClient:
        """An admin client of the running nodes; as the super user (the brokers' certificate
        on INTERNAL) when secured, since no ACL lets anyone else create the probe topic."""
        running = [n.admin_endpoint for n in self.nodes if n.running]
        configs = {**self.superuser_configs(), "bootstrap.servers": ",".join(running)}
        # log_level 2: no "connection refused" lines while nodes start or are down on purpose.
        return AdminClient({**configs, "log_level": 2})

    def _under_replicated(self, admin: AdminClient) -> list[str]:
        return _partitions_where(admin, lambda p: set(p.isrs) != set(p.replicas))

    def _not_preferred_leader(self, admin: AdminClient) -> list[str]:
        return _partitions_where(admin, lambda p: bool(p.replicas) and p.leader != p.replicas[0])

    def _check_alive(self) -> None:
        # A stopped node has no process; one that has a process and exited died by itself.
        for node in self.nodes:
            if node.process is not None and node.process.poll() is not None:
                raise KraftClusterError(
                    f"node {node.node_id} exited with code {node.process.returncode}:\n"
                    + self.log_tails()
                )

    def _wait(
        self,
        condition: Callable[[], bool],
        deadline: float,
        what: str,
        seen: Callable[[], object] | None = None,
    ) -> None:
        """`wait_until` the `deadline` (`time.monotonic()`, one for every step of a wait), every
        half second; on timeout a `KraftClusterError` with the nodes' logs."""
        remaining_s = max(0.0, round(deadline - time.monotonic(), 1))  # for the message
        try:
            wait_until(condition, remaining_s, what, interval_s=0.5, seen=seen)
        except TimeoutError as exc:
            raise KraftClusterError(f"{exc}\n{self.log_tails()}") from None


def _partitions_where(
    admin: AdminClient, matches: Callable[[PartitionMetadata], bool]
) -> list[str]:
    """`<topic>-<partition>` of every partition of every topic whose metadata `matches`."""
    topics = admin.list_topics(timeout=10).topics
    return [
        f"{name}-{partition.id}"
        for name, metadata in topics.items()
        for partition in metadata.partitions.values()
        if matches(partition)
    ]
