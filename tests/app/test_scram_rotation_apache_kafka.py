"""A gapless SCRAM rotation, on a real Apache Kafka node secured as prod renders it.

Kafka keeps one SCRAM credential per user and mechanism, so the credentials revision picks the
mechanism (`contract.kafka_security.scram_mechanism`) and a rotation goes as `pulumi up`
runs it:

1. the reconciler Job of the new revision logs in with the previous revision's credential (its
   own new one does not exist yet) and adds every user's credential of the new mechanism;
2. the clients roll onto the new mechanism and password; until then the old ones still log in,
   on any new connection: a broker restart does not lock out a client that read its password
   before the rotation;
3. the retire Job deletes the previous mechanism's credentials: the old passwords are refused
   from then on, the new ones keep working.

A producer and a consumer keep going through the whole sequence. The premise is checked too:
setting a user's credential again replaces the password of that mechanism at once. One secured
node serves the module: its broker restarts are the reconnects.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    UserScramCredentialUpsertion,
)

from app.admin.acl_reconciler import grant
from app.admin.scram_credentials import SCRAM_ITERATIONS, admin_mechanism, authenticates
from app.clients.waiting import wait_until
from contract.acl_specs import KafkaUser, dumps, pipeline_users
from contract.kafka_security import SCRAM_SHA_256, SCRAM_SHA_512, scram_mechanism
from contract.topic_specs import TopicRole, pipeline_topics
from contract.topic_specs import dumps as dump_topics
from devkit.kraft_cluster import ClusterSecurity, KraftCluster
from tests.app.processor_harness import REPO

pytestmark = [pytest.mark.timeout(900)]

APP = "rotating-app"
RECONCILER = "topic-reconciler"
# One node on two busy cores: generous, as every wait here ends as soon as its condition holds.
DEADLINE_S = 120.0
# Records a client must get through after a step to count as still working.
PROGRESS = 20


@dataclass(frozen=True)
class Revision:
    """One credentials revision's files, as its reconciler Job mounts them."""

    number: int
    directory: Path
    passwords: dict[str, str]

    @property
    def mechanism(self) -> str:
        return scram_mechanism(self.number)

    @property
    def users_dir(self) -> Path:
        return self.directory / "users"


@dataclass
class Rotation:
    """The module's node, its users and topics, and the revisions written so far."""

    cluster: KraftCluster
    workdir: Path
    users: list[KafkaUser]
    topic: str  # one the application may read and write
    bootstrap_password: str  # the reconciler's, created at format
    revisions: list[Revision] = field(default_factory=list)

    def revision(self, number: int) -> Revision:
        """Revision `number`'s passwords (revision 1 keeps the reconciler's bootstrap one) and
        its client properties: the current mechanism's, and the previous revision's."""
        directory = self.workdir / f"revision-{number}"
        users_dir = directory / "users"
        users_dir.mkdir(parents=True)
        passwords = {u.name: f"{u.name}-{uuid.uuid4().hex}" for u in self.users}
        if number == 1:
            passwords[RECONCILER] = self.bootstrap_password
        for name, password in passwords.items():
            (users_dir / name).write_text(password)
        revision = Revision(number, directory, passwords)
        # As the Job's ConfigMap holds them: the password a reference to the mounted file.
        settings = self.cluster.client_configs(RECONCILER, "unused", revision.mechanism)
        del settings["bootstrap.servers"]
        settings["sasl.password"] = f"${{dir:{users_dir}:{RECONCILER}}}"
        _write_properties(directory / "client.properties", settings)
        if self.revisions:
            previous = self.revisions[-1]
            _write_properties(
                directory / "previous-client.properties",
                {
                    "sasl.mechanism": previous.mechanism,
                    "sasl.password": f"${{dir:{previous.users_dir}:{RECONCILER}}}",
                },
            )
        self.revisions.append(revision)
        return revision

    def reconcile(self, revision: Revision) -> subprocess.CompletedProcess[str]:
        """The reconciler Job's command of `revision`."""
        fallback = revision.directory / "previous-client.properties"
        return self._run(
            "app.admin.reconcile",
            "--specs", str(self.workdir / "topics.json"),
            "--acls", str(self.workdir / "acls.json"),
            "--scram-passwords-dir", str(revision.users_dir),
            "--scram-mechanism", revision.mechanism,
            "--command-config", str(revision.directory / "client.properties"),
            *(("--fallback-command-config", str(fallback)) if fallback.exists() else ()),
        )  # fmt: skip

    def retire(self, revision: Revision) -> subprocess.CompletedProcess[str]:
        """The retire Job's command of `revision`: the other mechanism's credentials go."""
        retired = SCRAM_SHA_256 if revision.mechanism == SCRAM_SHA_512 else SCRAM_SHA_512
        return self._run(
            "app.admin.scram_retire",
            "--acls", str(self.workdir / "acls.json"),
            "--command-config", str(revision.directory / "client.properties"),
            "--retire", retired,
        )  # fmt: skip

    def _run(self, module: str, *arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", module, "--bootstrap-servers",
             self.cluster.bootstrap_servers, "--wait-timeout", "60", *arguments],
            cwd=REPO, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    def app_configs(self, revision: Revision) -> dict[str, str]:
        """The application's client settings as revision `revision`'s pods have them."""
        return self.cluster.client_configs(APP, revision.passwords[APP], revision.mechanism)

    def logs_in(self, revision: Revision) -> bool | None:
        """Whether a new connection with the application's `revision` credential logs in."""
        return authenticates(self.app_configs(revision), 10.0)


def _write_properties(path: Path, settings: dict[str, str]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))


class Traffic:
    """A producer and a consumer of `topic` with one revision's credentials, each in a thread,
    for as long as a workload's pod lives; they count what got through and keep every error."""

    def __init__(self, configs: dict[str, str], topic: str, name: str) -> None:
        self.name = name
        self.errors: list[KafkaError] = []
        self.delivered = 0
        self.undelivered: list[KafkaError] = []
        self.consumed = 0
        self._stop = threading.Event()
        common = {**configs, "error_cb": self.errors.append, "log_level": 0}
        self._producer = Producer({**common, "acks": "all", "linger.ms": 5})
        self._consumer = Consumer({**common, "group.id": APP, "enable.auto.commit": False})
        self._consumer.assign([TopicPartition(topic, 0, -1)])  # from the end: new records
        self._threads = [
            threading.Thread(target=self._produce, args=(topic,), daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _produce(self, topic: str) -> None:
        sequence = 0
        while not self._stop.is_set():
            sequence += 1
            self._producer.produce(
                topic, key=str(sequence % 10), value=str(sequence), on_delivery=self._delivered
            )
            self._producer.poll(0.05)
        self._producer.flush(30)

    def _delivered(self, error: KafkaError | None, _message: object) -> None:
        if error is None:
            self.delivered += 1
        else:
            self.undelivered.append(error)

    def _consume(self) -> None:
        while not self._stop.is_set():
            message = self._consumer.poll(0.2)
            if message is not None and message.error() is None:
                self.consumed += 1
        self._consumer.close()

    def progress(self) -> tuple[int, int]:
        """(delivered, consumed) so far."""
        return self.delivered, self.consumed

    def wait_for_progress(self, step: str) -> None:
        """Wait until both sides got PROGRESS more records through than now."""
        delivered, consumed = self.progress()
        wait_until(
            lambda: self.delivered >= delivered + PROGRESS and self.consumed >= consumed + PROGRESS,
            DEADLINE_S,
            f"{self.name}'s producer and consumer to get records through after {step}",
            seen=lambda: f"delivered {self.progress()}, errors {self.errors[-3:]}",
            interval_s=0.5,
        )

    @property
    def authentication_errors(self) -> list[KafkaError]:
        return [e for e in self.errors if e.code() == KafkaError._AUTHENTICATION]

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)


@pytest.fixture(scope="module")
def rotation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rotation]:
    workdir = tmp_path_factory.mktemp("rotation")
    # The reconciler's revision-1 credential is bootstrapped at format, as prod's format step
    # does with revision 1's mechanism.
    bootstrap_password = f"{RECONCILER}-{uuid.uuid4().hex}"
    security = ClusterSecurity(
        scram_users={RECONCILER: bootstrap_password}, scram_mechanism=scram_mechanism(1)
    )
    with KraftCluster(nodes=1, security=security) as cluster:
        topics = pipeline_topics(
            application_id=APP,
            input_topic=f"{APP}-views",
            output_topic=f"{APP}-counts",
            partitions=1,
            replication_factor=1,
            min_insync_replicas=1,
            changelog_segment_bytes=1024 * 1024,
        )
        users = pipeline_users(application_id=APP, topics=topics)
        (workdir / "topics.json").write_text(dump_topics(topics))
        (workdir / "acls.json").write_text(dumps(users))
        # The reconciler's own ACLs, as the brokers grant them on a new cluster.
        (reconciler,) = [u for u in users if u.name == RECONCILER]
        superuser: dict[str, str | int | float | bool] = {**cluster.superuser_configs()}
        assert grant(AdminClient(superuser), reconciler.acls) == []
        changelog = next(t.name for t in topics if t.role is TopicRole.CHANGELOG)
        yield Rotation(cluster, workdir, users, changelog, bootstrap_password)


@pytest.fixture
def traffic() -> Iterator[list[Traffic]]:
    running: list[Traffic] = []
    yield running
    for flow in running:
        flow.stop()


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_a_rotation_keeps_old_and_new_passwords_valid_until_the_retire_step(
    rotation: Rotation, traffic: list[Traffic]
) -> None:
    first = rotation.revision(1)
    out = _ok(rotation.reconcile(first))
    assert "SCRAM-SHA-512: no credential yet" in out
    assert rotation.logs_in(first) is True
    old = Traffic(rotation.app_configs(first), rotation.topic, "revision 1's client")
    traffic.append(old)
    old.wait_for_progress("it started")

    # 1. The new revision's Job: its own new credential does not exist yet, the previous
    # revision's logs it in; it adds SCRAM-SHA-256 credentials beside the SCRAM-SHA-512 ones.
    second = rotation.revision(2)
    assert second.mechanism == SCRAM_SHA_256
    out = _ok(rotation.reconcile(second))
    assert f"logged in as {RECONCILER} with SCRAM-SHA-512" in out
    assert f"User:{APP}" in out and "SCRAM-SHA-256: no credential yet" in out
    for password in [*first.passwords.values(), *second.passwords.values()]:
        assert password not in out  # no secret in the Job's log

    # 2. Both log in on a new connection, and a broker restart, which makes every client
    # reconnect, does not lock out the one that read its password before the rotation.
    assert rotation.logs_in(first) is True
    assert rotation.logs_in(second) is True
    rotation.cluster.restart_node(1, timeout_s=DEADLINE_S)
    old.wait_for_progress("a broker restart with both credentials valid")
    assert not old.authentication_errors, old.authentication_errors

    # The clients roll onto the new revision.
    new = Traffic(rotation.app_configs(second), rotation.topic, "revision 2's client")
    traffic.append(new)
    new.wait_for_progress("it started")
    old.stop()
    assert not old.undelivered, old.undelivered[:3]

    # 3. The retire Job: the SCRAM-SHA-512 credentials go, the old password is refused, the
    # new one logs in, also after a broker restart.
    out = _ok(rotation.retire(second))
    assert "retired the SCRAM-SHA-512 credentials of" in out and APP in out
    wait_until(
        lambda: rotation.logs_in(first) is False,
        DEADLINE_S,
        "revision 1's password to be refused once retired",
        interval_s=0.5,
    )
    assert rotation.logs_in(second) is True
    new.wait_for_progress("the retire step")
    rotation.cluster.restart_node(1, timeout_s=DEADLINE_S)
    new.wait_for_progress("a broker restart after the retire step")
    assert not new.authentication_errors and not new.undelivered, new.errors[-3:]

    # Both Jobs again: the reconciler logs in with its own credential and changes nothing,
    # the retire Job finds nothing left.
    again = _ok(rotation.reconcile(second))
    assert f"logged in as {RECONCILER} with SCRAM-SHA-256" in again
    assert "0 changes" in again, again
    assert "0 changes: no user has a SCRAM-SHA-512 credential" in _ok(rotation.retire(second))


def test_kafka_keeps_one_credential_per_user_and_mechanism(rotation: Rotation) -> None:
    """Why the mechanism alternates: setting a user's credential again replaces its password
    for that mechanism (the old one is refused at once), while the other mechanism's stays."""
    superuser: dict[str, str | int | float | bool] = {**rotation.cluster.superuser_configs()}
    admin = AdminClient(superuser)
    user = f"probe-{uuid.uuid4().hex[:8]}"

    def upsert(mechanism: str, password: str) -> None:
        info = ScramCredentialInfo(admin_mechanism(mechanism), SCRAM_ITERATIONS)
        upsertion = UserScramCredentialUpsertion(user, info, password.encode())
        admin.alter_user_scram_credentials([upsertion])[user].result(30)

    def logs_in(mechanism: str, password: str) -> bool | None:
        return authenticates(rotation.cluster.client_configs(user, password, mechanism), 10.0)

    upsert(SCRAM_SHA_512, "first-password")
    wait_until(
        lambda: logs_in(SCRAM_SHA_512, "first-password") is True,
        DEADLINE_S,
        "a login",
        interval_s=0.5,
    )
    upsert(SCRAM_SHA_512, "second-password")
    wait_until(
        lambda: logs_in(SCRAM_SHA_512, "first-password") is False,
        DEADLINE_S,
        "the replaced password to be refused",
        interval_s=0.5,
    )
    upsert(SCRAM_SHA_256, "third-password")
    wait_until(
        lambda: logs_in(SCRAM_SHA_256, "third-password") is True,
        DEADLINE_S,
        "a login",
        interval_s=0.5,
    )
    assert logs_in(SCRAM_SHA_512, "second-password") is True
