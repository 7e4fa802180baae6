"""Kafka secured as prod renders it, on a real 3-node Apache Kafka (`KraftCluster(security=...)`):
TLS on every listener, SCRAM clients (SCRAM-SHA-512: revision 1's), StandardAuthorizer
denying what no ACL allows.

The topic reconciler creates the topics, the users' credentials and their ACLs; the real
processor counts page views exactly once with only its own ACLs; and Kafka refuses a client
without credentials, a wrong password, and the processor's credentials used beyond its rights.
One secured cluster serves the module (it starts once).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from confluent_kafka.admin import ResourceType as AdminResourceType

from app.admin.acl_bindings import Binding, read_bindings
from app.admin.acl_reconciler import grant
from app.clients.client_properties import ClientConfig
from app.clients.waiting import wait_until
from contract.acl_specs import (
    ACL_LEDGER_TOPIC,
    BROKER_READINESS_USER,
    AclSpec,
    KafkaUser,
    Operation,
    PatternType,
    ResourceType,
    dumps,
    pipeline_users,
)
from contract.java_properties import load_properties
from contract.kafka_security import SCRAM_SHA_512
from contract.topic_specs import PipelineNames, pipeline_topics
from contract.topic_specs import dumps as dump_topics
from devkit.bench.ceiling import measure_ceiling
from devkit.bench.throughput import ThroughputParams, produce_backlog
from devkit.kraft_cluster import ClusterSecurity, KraftCluster
from devkit.loadgen import LoadSettings
from devkit.local.instances import InstanceOptions
from devkit.local.pipeline import LocalPipeline, PipelineSetup
from tests.app.processor_harness import (
    REPO,
    Pipeline,
    ProcessorProcess,
    call_failed,
    produce_page_views,
    wait_for_counts,
)
from tests.app.secured_kafka import readiness_sidecars

pytestmark = [
    pytest.mark.timeout(900),
]

APPLICATION_ID = "page-view-counter"  # the processor's user, group and transactional id prefix
RECONCILER = "topic-reconciler"
# The reconciler's own user exists from the start (bootstrapped at format, as in prod); the
# others are created by the reconciler.
RECONCILER_PASSWORD = "reconciler-Pw-1"
# So does the brokers' readiness user, whose sidecars judge before the reconciler runs.
READINESS_PASSWORD = "readiness-Pw-1"
LOAD_PRODUCER = "load-producer"
PARTITIONS = 4
DEADLINE_S = 240.0
REFUSAL_DEADLINE_S = 60.0


@dataclass
class Secured:
    """The module's secured cluster and the files the reconciler Job would mount."""

    cluster: KraftCluster
    workdir: Path
    users: list[KafkaUser]
    passwords: dict[str, str]
    pod_logs: list[Path] = field(default_factory=list)  # the sidecars' and grant containers'

    @cached_property
    def superuser(self) -> AdminClient:
        """An admin client that is the broker (the only super user); one for the module, as a
        client destroyed while its requests are in flight fails them (_DESTROY)."""
        configs: dict[str, str | int | float | bool] = {**self.cluster.superuser_configs()}
        return AdminClient(configs)

    def user_configs(self, user: str) -> dict[str, str]:
        """A SCRAM user's client settings, with the password the reconciler set for it."""
        return self.cluster.client_configs(user, self.passwords[user])

    def reconcile(
        self, users: Sequence[KafkaUser] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the reconciler Job's command as the reconciler's SCRAM user."""
        acls = self.workdir / "acls.json"
        acls.write_text(dumps(users or self.users))
        return subprocess.run(
            [
                sys.executable, "-m", "app.admin.reconcile",
                "--bootstrap-servers", self.cluster.bootstrap_servers,
                "--specs", str(self.workdir / "topics.json"),
                "--acls", str(acls),
                "--scram-passwords-dir", str(self.workdir / "users"),
                "--command-config", str(self.workdir / "client.properties"),
                "--wait-timeout", "60",
            ],
            cwd=REPO,
            env={**os.environ, "SASL_PASSWORD": self.passwords[RECONCILER]},
            capture_output=True,
            text=True,
            timeout=300,
        )  # fmt: skip


def _rows(table: str) -> list[list[str]]:
    """The first two columns of each line of a printed plan."""
    return [line.split()[:2] for line in table.splitlines()]


def _grant(admin: AdminClient, acls: Sequence[AclSpec]) -> None:
    assert grant(admin, acls) == []


def _properties(settings: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in settings.items())


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    workdir = tmp_path_factory.mktemp("secured")
    security = ClusterSecurity(
        scram_users={RECONCILER: RECONCILER_PASSWORD, BROKER_READINESS_USER: READINESS_PASSWORD}
    )
    with KraftCluster(security=security) as cluster:
        topics = pipeline_topics(
            application_id=APPLICATION_ID,
            input_topic=f"{APPLICATION_ID}-page-views",
            output_topic=f"{APPLICATION_ID}-counts",
            partitions=PARTITIONS,
            replication_factor=3,
            min_insync_replicas=2,
            changelog_segment_bytes=64 * 1024 * 1024,
        )
        users = pipeline_users(application_id=APPLICATION_ID, topics=topics)
        passwords = {u.name: f"{u.name}-{uuid.uuid4().hex}" for u in users}
        passwords[RECONCILER] = RECONCILER_PASSWORD
        passwords[BROKER_READINESS_USER] = READINESS_PASSWORD
        (workdir / "topics.json").write_text(dump_topics(topics))
        (workdir / "users").mkdir()
        for name, password in passwords.items():
            (workdir / "users" / name).write_text(password)
        # The reconciler's client.properties as the Job's ConfigMap holds it: no secret inside.
        reconciler = cluster.client_configs(RECONCILER)
        del reconciler["bootstrap.servers"]
        reconciler["sasl.password"] = "${env:SASL_PASSWORD}"
        (workdir / "client.properties").write_text(_properties(reconciler))
        secured = Secured(cluster, workdir, users, passwords)
        # Deny by default holds for the reconciler and the readiness user too: their ACLs come
        # from the brokers' grant containers, as prod runs them, and the Job starts once every
        # readiness sidecar (connected as its own user) answers ready.
        bootstrap = [u for u in users if u.name in (RECONCILER, BROKER_READINESS_USER)]
        with readiness_sidecars(
            cluster, bootstrap, READINESS_PASSWORD, workdir, DEADLINE_S
        ) as pods:
            secured.pod_logs = pods.logs()
            _add_load_producer(secured, f"{APPLICATION_ID}-page-views")
            yield secured


def _add_load_producer(secured: Secured, input_topic: str) -> None:
    """A load producer of the tests' own: a user that may only write the input topic. Made
    first, so every broker knows it before it produces (ACLs reach the brokers a moment after
    the controller answers)."""
    secured.passwords[LOAD_PRODUCER] = f"{LOAD_PRODUCER}-{uuid.uuid4().hex}"
    upsert = UserScramCredentialUpsertion(
        LOAD_PRODUCER,
        ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
        secured.passwords[LOAD_PRODUCER].encode(),
    )
    secured.superuser.alter_user_scram_credentials([upsert])[LOAD_PRODUCER].result(30)
    _grant(
        secured.superuser,
        [AclSpec(f"User:{LOAD_PRODUCER}", ResourceType.TOPIC, input_topic, PatternType.LITERAL,
                 Operation.WRITE)],
    )  # fmt: skip


@pytest.fixture(scope="module")
def reconciled(secured: Secured) -> tuple[subprocess.CompletedProcess[str], ...]:
    """The reconciler run twice on the fresh cluster."""
    first = secured.reconcile()
    second = secured.reconcile()
    return first, second


def test_the_reconciler_creates_topics_users_and_acls_and_a_second_run_changes_nothing(
    secured: Secured, reconciled: tuple[subprocess.CompletedProcess[str], ...]
) -> None:
    first, second = reconciled
    assert first.returncode == 0, first.stdout + first.stderr
    out = first.stdout
    for topic in (f"{APPLICATION_ID}-page-views", f"{APPLICATION_ID}-counts"):
        assert f"creating topic {topic}" in first.stderr
    planned = _rows(out)
    assert [f"User:{APPLICATION_ID}", "create-credential"] in planned
    assert ["User:observer", "create-credential"] in planned
    assert [ACL_LEDGER_TOPIC, "create-ledger"] in planned
    processor = next(u for u in secured.users if u.name == APPLICATION_ID)
    for acl in processor.acls:
        assert Binding.of(acl).describe() in out
    for password in secured.passwords.values():
        assert password not in out + first.stderr  # no secret in the Job's log

    assert second.returncode == 0, second.stdout + second.stderr
    acls = sum(len(u.acls) for u in secured.users)
    users = len(secured.users)
    assert f"0 changes: 4 topics, {users} users and {acls} ACLs up to date" in second.stdout
    present = read_bindings(secured.superuser, [u.principal for u in secured.users])
    assert present == {Binding.of(acl) for user in secured.users for acl in user.acls}


@pytest.fixture
def started(request: pytest.FixtureRequest) -> Iterator[list[ProcessorProcess]]:
    processors: list[ProcessorProcess] = []
    yield processors
    for processor in processors:
        processor.ensure_stopped(call_failed(request))


def test_the_processor_counts_exactly_once_with_only_its_own_acls(
    secured: Secured,
    reconciled: tuple[subprocess.CompletedProcess[str], ...],
    tmp_path: Path,
    started: list[ProcessorProcess],
) -> None:
    assert reconciled[0].returncode == 0, reconciled[0].stderr
    pipeline = Pipeline(secured.cluster.bootstrap_servers, APPLICATION_ID, PARTITIONS)
    input_topic = pipeline.topics["input.topic"]
    # The processor's security settings exactly as the prod ConfigMap holds them.
    ca = str(secured.cluster.ca_file)
    security = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": SCRAM_SHA_512,
        "sasl.username": APPLICATION_ID,
        "sasl.password": "${env:SASL_PASSWORD}",
        "ssl.ca.location": ca,
    }
    properties = pipeline.properties(
        f"{APPLICATION_ID}-0",
        tmp_path / "state",
        **security,
        **{"spark.master": "local[1]", "spark.sql.shuffle.partitions": "2"},
    )
    processor = ProcessorProcess(
        tmp_path, "secured", properties, env={"SASL_PASSWORD": secured.passwords[APPLICATION_ID]}
    )
    started.append(processor)
    truth = produce_page_views(secured.user_configs(LOAD_PRODUCER), input_topic, 3000, 50, seed=1)
    try:
        took = wait_for_counts(
            processor, secured.cluster.superuser_configs(), pipeline.topics["output.topic"],
            truth, DEADLINE_S,
        )  # fmt: skip
    except (AssertionError, TimeoutError) as exc:  # the processor exited, or not in time
        metrics = [line for line in processor.get("/metrics")[1].splitlines() if "lag" in line]
        raise AssertionError(
            f"{exc}\ninput ends {_ends(secured, input_topic)}; lag {metrics}\n"
            f"processor log:\n{processor.log()[-8000:]}"
        ) from None
    print(f"3000 page views counted exactly once after {took:.1f} s")
    assert "AUTHORIZATION_FAILED" not in processor.log(), processor.log()[-5000:]
    assert secured.passwords[APPLICATION_ID] not in processor.log()
    code, _ = processor.terminate()
    assert code == 0, processor.log()[-3000:]


def _ends(secured: Secured, topic: str) -> dict[int, tuple[int, int]]:
    """The (low, high) offsets of each partition of `topic`, as the super user sees them."""
    consumer = Consumer({**secured.cluster.superuser_configs(), "group.id": "ends"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


# --- refusals --------------------------------------------------------------------------------


class _Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _refused_client(configs: Mapping[str, str]) -> tuple[list[KafkaError], list[str]]:
    """Ask for metadata with `configs` until Kafka refuses; the client's errors and log lines."""
    errors: list[KafkaError] = []
    handler = _Collected()
    logger = logging.getLogger(f"refused-client-{uuid.uuid4().hex[:8]}")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)  # librdkafka's connection failures are INFO lines
    logger.propagate = False
    admin = AdminClient(
        {**configs, "error_cb": errors.append, "logger": logger}  # type: ignore[dict-item]
    )
    deadline = time.monotonic() + REFUSAL_DEADLINE_S
    while not errors:
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=2.0)
        admin.poll(0.5)
        assert time.monotonic() < deadline, f"no refusal within {REFUSAL_DEADLINE_S:g} s"
    return errors, handler.lines


def test_a_client_without_credentials_is_refused(secured: Secured) -> None:
    # PLAINTEXT to the SASL_SSL listener: the broker waits for a TLS handshake and closes the
    # connection on the client's first plaintext request.
    errors, lines = _refused_client({"bootstrap.servers": secured.cluster.bootstrap_servers})
    assert {e.code() for e in errors} <= {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}
    assert any("Disconnected" in line and "APIVERSION_QUERY" in line for line in lines), lines


def test_a_wrong_password_is_refused(secured: Secured) -> None:
    configs = secured.cluster.client_configs(APPLICATION_ID, "not-the-password")
    errors, _ = _refused_client(configs)
    authentication = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert authentication, f"no authentication error; saw {errors}"
    error = authentication[0]
    assert (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {SCRAM_SHA_512}"
    ) in error.str()


def _consume_error(consumer: Consumer, wanted: int) -> KafkaError:
    deadline = time.monotonic() + REFUSAL_DEADLINE_S
    seen = []
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            assert error is not None, f"read a record of {message.topic()}: it must be refused"
            if error.code() == wanted:
                return error
            seen.append(error)
        raise AssertionError(f"no error {wanted} within {REFUSAL_DEADLINE_S:g} s; saw {seen}")
    finally:
        consumer.close()


def test_the_processors_credentials_cannot_read_another_topic(
    secured: Secured, reconciled: tuple[subprocess.CompletedProcess[str], ...]
) -> None:
    other = f"someone-elses-{uuid.uuid4().hex[:8]}"
    secured.superuser.create_topics([NewTopic(other, 1, 3)])[other].result(30)
    consumer = Consumer(
        {**secured.user_configs(APPLICATION_ID), "group.id": APPLICATION_ID,
         "enable.auto.commit": False}
    )  # fmt: skip
    # Its own group (allowed), a topic it has no ACL on: the fetch's metadata is refused.
    consumer.subscribe([other])
    error = _consume_error(consumer, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    assert error.name() == "TOPIC_AUTHORIZATION_FAILED"


def test_the_processors_credentials_cannot_use_another_group(
    secured: Secured, reconciled: tuple[subprocess.CompletedProcess[str], ...]
) -> None:
    consumer = Consumer(
        {**secured.user_configs(APPLICATION_ID), "group.id": "someone-elses-group",
         "enable.auto.commit": False}
    )  # fmt: skip
    consumer.subscribe([f"{APPLICATION_ID}-page-views"])  # a topic it may read
    error = _consume_error(consumer, KafkaError.GROUP_AUTHORIZATION_FAILED)
    assert error.name() == "GROUP_AUTHORIZATION_FAILED"


# --- what the reconciler drops -----------------------------------------------------------------


def test_the_reconciler_leaves_an_acl_it_did_not_create_and_drops_one_it_did(
    secured: Secured, reconciled: tuple[subprocess.CompletedProcess[str], ...]
) -> None:
    assert reconciled[0].returncode == 0, reconciled[0].stderr
    foreign = AclSpec(f"User:{APPLICATION_ID}", ResourceType.TOPIC, "granted-by-hand",
                      PatternType.LITERAL, Operation.READ)  # fmt: skip
    _grant(secured.superuser, [foreign])
    observer = next(u for u in secured.users if u.name == "observer")
    dropped = next(a for a in observer.acls if a.resource_type is ResourceType.GROUP)
    fewer = [
        KafkaUser(u.name, u.purpose, tuple(a for a in u.acls if a != dropped))
        for u in secured.users
    ]
    try:
        result = secured.reconcile(fewer)
        assert result.returncode == 1, result.stdout + result.stderr
        assert ["User:observer", "delete"] in _rows(result.stdout), result.stdout
        refusals = [line for line in result.stdout.splitlines() if " REFUSED " in line]
        assert len(refusals) == 1 and "granted-by-hand" in refusals[0], result.stdout
        assert "not created by the reconciler" in refusals[0]
        assert (
            f"--remove --allow-principal User:{APPLICATION_ID} --allow-host '*' --operation Read "
            "--topic granted-by-hand --resource-pattern-type literal"
        ) in refusals[0]
        present = read_bindings(secured.superuser, [f"User:{APPLICATION_ID}", "User:observer"])
        assert Binding.of(foreign) in present
        assert Binding.of(dropped) not in present
    finally:
        # Back to the module's specs for the other tests (the ACL it dropped, recreated).
        for future in secured.superuser.delete_acls([Binding.of(foreign).to_filter()]).values():
            future.result(30)
        assert secured.reconcile().returncode == 0


# --- the local run and the benchmarks on a secured cluster -----------------------------------

OPERATOR = "local-operator"


def _add_operator(secured: Secured) -> Path:
    """A test user that may do everything on topics, groups and transactional ids (what the
    local run's reconciler, load generator, observers and instance do together), and its
    client properties as a user writes them: the password by reference to a file."""
    password = f"{OPERATOR}-{uuid.uuid4().hex}"
    upsert = UserScramCredentialUpsertion(
        OPERATOR, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
    )
    secured.superuser.alter_user_scram_credentials([upsert])[OPERATOR].result(30)
    bindings = [
        AclBinding(restype, name, ResourcePatternType.LITERAL, f"User:{OPERATOR}", "*",
                   AclOperation.ALL, AclPermissionType.ALLOW)
        for restype, name in (
            (AdminResourceType.TOPIC, "*"),
            (AdminResourceType.GROUP, "*"),
            (AdminResourceType.TRANSACTIONAL_ID, "*"),
            (AdminResourceType.BROKER, "kafka-cluster"),
        )
    ]  # fmt: skip
    for future in secured.superuser.create_acls(bindings).values():
        future.result(30)
    secret_dir = secured.workdir / "operator-secret"
    secret_dir.mkdir()
    (secret_dir / "password").write_text(password)
    settings = secured.cluster.client_configs(OPERATOR, password)
    del settings["bootstrap.servers"]
    settings["sasl.password"] = f"${{dir:{secret_dir}:password}}"
    path = secured.workdir / "operator.properties"
    path.write_text(_properties(settings))
    wait_until(
        lambda: bool(
            AdminClient({**secured.cluster.client_configs(OPERATOR, password)})
            .list_topics(timeout=5)
            .brokers
        ),
        REFUSAL_DEADLINE_S,
        f"the SCRAM user {OPERATOR} to log in",
        interval_s=0.5,
    )
    return path


def test_the_local_run_and_the_bench_clients_take_command_config(
    secured: Secured, tmp_path: Path
) -> None:
    """`python -m devkit.local --command-config` and the benchmarks: the reconciler, the load
    generator, the observers and a processor instance all connect with the file's settings,
    and the instance's properties file keeps the password a reference."""
    client = ClientConfig.load(_add_operator(secured), os.environ)
    names = PipelineNames("local-secured", "local-secured-views", "local-secured-counts")
    setup = PipelineSetup(
        base_dir=tmp_path / "local",
        instances=1,
        partitions=2,
        bootstrap_servers=secured.cluster.bootstrap_servers,
        client=client,
        names=names,
        options=InstanceOptions(extra={"spark.sql.shuffle.partitions": "1"}),
    )
    with LocalPipeline(setup) as pipeline:
        assert pipeline.output is not None and pipeline.lag is not None
        pipeline.start_instances()
        summary = pipeline.load(LoadSettings(rate=500, keys=20, count=1000, seed=3)).join()
        assert summary.total == 1000 and not summary.failed, summary.first_error
        wait_until(
            lambda: (
                pipeline.output is not None
                and pipeline.output.snapshot()[0] == summary.truth.expected()
            ),
            DEADLINE_S,
            "the instance to count the 1,000 views",
            interval_s=0.5,
        )
        assert pipeline.output.snapshot()[2] == 0  # no duplicates
        assert pipeline.lag.total() == 0
        written = load_properties(pipeline.instances[0].properties_path.read_text())
        assert written["sasl.password"] == client.written["sasl.password"]
        assert written["sasl.username"] == OPERATOR
        assert (
            client.resolved["sasl.password"]
            not in pipeline.instances[0].properties_path.read_text()
        )

        # The throughput bench's own clients: the backlog producer and the raw consume ceiling.
        produce_backlog(pipeline, ThroughputParams(backlog=500, keys=20))
        assert pipeline.truth is not None
        assert sum(pipeline.truth.records().values()) == 1500
        ceiling = measure_ceiling(
            secured.cluster.bootstrap_servers, names.input_topic, 1500, client.resolved
        )
        # The Java perf test skips a secured cluster (librdkafka's settings are not Java's).
        assert ceiling.rates["kafka-consumer-perf-test"] is None
        # Both confluent-kafka consumers connect by the same settings; 1,500 records are one
        # batch of the plain one, which then has no steady rate to report.
        assert ceiling.rates["bench consumer"]


# --- the brokers' readiness sidecar ----------------------------------------------------------


def _says(log_file: Path, text: str) -> bool:
    return text in log_file.read_text(errors="replace")


def test_the_brokers_sidecars_grant_the_reconciler_its_own_acls_on_a_fresh_cluster(
    secured: Secured,
) -> None:
    """The module's cluster started with no ACL at all: the reconciler's came from the
    sidecars (and the reconciler's runs above were not refused)."""
    (reconciler,) = [u for u in secured.users if u.name == RECONCILER]
    present = read_bindings(secured.superuser, [reconciler.principal])
    assert present == {Binding.of(acl) for acl in reconciler.acls}
    for log_file in secured.pod_logs:
        if log_file.name.startswith("grant-acls-"):
            # Every broker's grant container grants them all (the first sufficed for ready).
            wait_until(
                partial(_says, log_file, "granted every ACL of"),
                DEADLINE_S,
                f"{log_file} to report its grants",
                seen=log_file.read_text,
                interval_s=0.5,
            )
        else:
            assert "ready: in sync on all" in log_file.read_text(), log_file.read_text()[-3000:]
