"""The topic reconciler against a real Kafka-protocol broker (the `kafka_bootstrap` fixture).

Every test uses its own topic names, so the tests share one broker without interfering.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from app.admin import group_configs
from app.admin.topic_reconciler import (
    Action,
    Plan,
    ReconcileError,
    TopicState,
    apply,
    plan,
    read_cluster,
)
from app.clients.waiting import wait_until
from contract.membership import kip848_group_configs
from contract.topic_specs import (
    GroupConfigSpec,
    TopicRole,
    TopicSpec,
    dumps,
    pipeline_topics,
)
from devkit.local_ports import free_port

REPO = Path(__file__).resolve().parents[2]
HOUR_MS = 3_600_000
SEGMENT_BYTES = 64 * 1024 * 1024


@pytest.fixture
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def name() -> Callable[[str], str]:
    """Unique topic names for one test."""
    suffix = uuid.uuid4().hex[:8]
    return lambda base: f"{base}-{suffix}"


def topic(
    name: str, partitions: int = 2, rf: int = 1, configs: dict[str, str] | None = None
) -> TopicSpec:
    return TopicSpec(name, partitions, rf, TopicRole.INPUT, configs or {})


def state_of(admin: AdminClient, names: list[str]) -> dict[str, TopicState]:
    return read_cluster(admin, names)


def reconcile(admin: AdminClient, specs: list[TopicSpec], allow: bool = False) -> Plan:
    the_plan = plan(specs, state_of(admin, [s.name for s in specs]), allow)
    if not the_plan.refusals:
        apply(admin, the_plan)
        names = [s.name for s in specs]
        # Metadata and configs reach every broker shortly after the controller applied them.
        wait_until(
            lambda: not plan(specs, state_of(admin, names), allow).changes,
            15.0,
            "the cluster to show the change",
            interval_s=0.2,
        )
    return the_plan


# --- create, re-run, alter -------------------------------------------------------------------


def test_creates_missing_topics_with_partitions_replication_and_configs(
    admin: AdminClient, name: Callable[[str], str]
) -> None:
    specs = pipeline_topics(
        application_id=name("app"),
        input_topic=name("page-views"),
        output_topic=name("page-view-counts"),
        partitions=3,
        replication_factor=1,
        min_insync_replicas=1,
        changelog_segment_bytes=SEGMENT_BYTES,
    )
    the_plan = reconcile(admin, specs)
    assert [s.action for s in the_plan.steps] == [Action.CREATE] * 4
    states = state_of(admin, [s.name for s in specs])
    for spec in specs:
        state = states[spec.name]
        assert state.partitions == spec.partitions
        assert state.replication_factors == {1}
        assert {k: state.configs.get(k) for k in spec.configs} == dict(spec.configs)


def test_second_run_plans_no_change(admin: AdminClient, name: Callable[[str], str]) -> None:
    specs = [topic(name("a"), configs={"retention.ms": str(HOUR_MS)}), topic(name("b"), 1)]
    reconcile(admin, specs)
    again = plan(specs, state_of(admin, [s.name for s in specs]))
    assert again.changes == [] and again.refusals == []
    assert again.up_to_date == [s.name for s in specs]


def test_alters_only_the_differing_key_and_leaves_other_keys_alone(
    admin: AdminClient, name: Callable[[str], str]
) -> None:
    topic_name = name("altered")
    configs = {"retention.ms": str(HOUR_MS), "segment.bytes": str(SEGMENT_BYTES)}
    reconcile(admin, [topic(topic_name, configs=configs)])
    # An operator sets a key the spec does not name; the reconciler must not touch it.
    operator = ConfigEntry(
        "max.message.bytes", "2000000", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[operator])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result()

    wanted = {**configs, "retention.ms": str(2 * HOUR_MS)}
    the_plan = reconcile(admin, [topic(topic_name, configs=wanted)])

    assert [(s.action, s.detail) for s in the_plan.steps] == [
        (Action.ALTER_CONFIG, f"retention.ms: {HOUR_MS} -> {2 * HOUR_MS}")
    ]
    described = {
        key: entry.value
        for future in admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, topic_name)]
        ).values()
        for key, entry in future.result().items()
    }
    assert described["retention.ms"] == str(2 * HOUR_MS)
    assert described["segment.bytes"] == str(SEGMENT_BYTES)
    assert described["max.message.bytes"] == "2000000"


def test_a_change_that_fails_is_reported_with_the_topic_and_the_broker_error(
    admin: AdminClient, name: Callable[[str], str]
) -> None:
    raced = topic(name("raced"))
    stale_plan = plan([raced], {})  # planned before someone else created the topic
    reconcile(admin, [raced])
    with pytest.raises(ReconcileError) as raised:
        apply(admin, stale_plan)
    (failure,) = raised.value.failures
    assert failure.startswith(f"topic {raced.name}: create failed (TOPIC_ALREADY_EXISTS")


# --- refusals --------------------------------------------------------------------------------


def test_refuses_a_replication_factor_change_and_applies_nothing(
    admin: AdminClient, name: Callable[[str], str]
) -> None:
    existing, missing = name("rf"), name("new")
    reconcile(admin, [topic(existing, configs={"retention.ms": str(HOUR_MS)})])
    specs = [
        topic(existing, rf=3, configs={"retention.ms": str(2 * HOUR_MS)}),
        topic(missing),
    ]
    the_plan = plan(specs, state_of(admin, [existing, missing]))
    (refusal,) = the_plan.refusals
    assert refusal.topic == existing
    assert "replication factor: found 1, wanted 3" in refusal.detail
    assert "reassignment" in refusal.detail
    with pytest.raises(ValueError, match="refusals"):
        apply(admin, the_plan)
    states = state_of(admin, [existing, missing])
    assert missing not in states
    assert states[existing].configs.get("retention.ms") == str(HOUR_MS)


def test_refuses_to_shrink_partitions(admin: AdminClient, name: Callable[[str], str]) -> None:
    topic_name = name("shrink")
    reconcile(admin, [topic(topic_name, partitions=4)])
    (refusal,) = plan([topic(topic_name, partitions=2)], state_of(admin, [topic_name])).refusals
    assert refusal.topic == topic_name
    assert "partitions: found 4, wanted 2" in refusal.detail
    assert "cannot remove partitions" in refusal.detail


def test_partition_increase_is_refused_without_the_flag(
    admin: AdminClient, name: Callable[[str], str]
) -> None:
    topic_name = name("grow")
    reconcile(admin, [topic(topic_name, partitions=2)])
    (refusal,) = plan([topic(topic_name, partitions=3)], state_of(admin, [topic_name])).refusals
    assert "partitions: found 2, wanted 3" in refusal.detail
    assert "--allow-partition-increase" in refusal.detail


def test_partition_increase_is_applied_with_the_flag(
    kafka_bootstrap: str, name: Callable[[str], str]
) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    topic_name = name("grow")
    reconcile(admin, [topic(topic_name, partitions=2)])
    the_plan = reconcile(admin, [topic(topic_name, partitions=3)], allow=True)
    assert [(s.action, s.detail) for s in the_plan.steps] == [(Action.ADD_PARTITIONS, "2 -> 3")]
    assert state_of(admin, [topic_name])[topic_name].partitions == 3


# --- the command line ------------------------------------------------------------------------


@pytest.fixture
def cli(
    kafka_bootstrap: str, tmp_path: Path
) -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    def run(
        specs: list[TopicSpec], *flags: str, groups: Sequence[GroupConfigSpec] = ()
    ) -> subprocess.CompletedProcess[str]:
        path = tmp_path / "topics.json"
        path.write_text(dumps(specs, groups))
        command = [
            sys.executable,
            "-m",
            "app.admin.reconcile",
            "--bootstrap-servers",
            kafka_bootstrap,
        ]
        return subprocess.run(
            [*command, "--specs", str(path), *flags],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )

    yield run


def test_cli_dry_run_prints_the_plan_and_changes_nothing(
    cli: Callable[..., subprocess.CompletedProcess[str]],
    admin: AdminClient,
    name: Callable[[str], str],
) -> None:
    specs = [topic(name("dry"), configs={"retention.ms": str(HOUR_MS)})]
    result = cli(specs, "--dry-run")
    assert result.returncode == 0, result.stderr
    header, row = result.stdout.splitlines()[:2]
    assert header.split() == ["TOPIC", "ACTION", "DETAIL"]
    assert row.split()[:2] == [specs[0].name, "create"]
    assert f"retention.ms={HOUR_MS}" in row
    assert "dry run: 1 change(s) planned, nothing applied" in result.stdout
    assert state_of(admin, [specs[0].name]) == {}


def test_a_kip848_groups_own_session_and_heartbeat_are_set_then_left_alone(
    cli: Callable[..., subprocess.CompletedProcess[str]],
    admin: AdminClient,
    name: Callable[[str], str],
) -> None:
    specs = [topic(name("kip848-in"))]
    wanted = GroupConfigSpec(
        name("kip848-group"), kip848_group_configs(session_ms=10_000, heartbeat_ms=1_000)
    )
    first = cli(specs, groups=[wanted])
    assert first.returncode == 0, first.stderr
    assert "consumer.session.timeout.ms: the brokers' default -> 10000" in first.stdout
    # A group's configs reach every broker shortly after the controller applied them.
    wait_until(
        lambda: group_configs.read(admin, [wanted])[wanted.group] == dict(wanted.configs),
        30.0,
        f"group {wanted.group}'s configs on the broker that answers",
        interval_s=0.2,
        seen=lambda: group_configs.read(admin, [wanted]),
    )

    again = cli(specs, groups=[wanted])
    assert again.returncode == 0, again.stderr
    assert "0 changes" in again.stdout and "up to date" in again.stdout

    # Above the brokers' group.consumer.max.session.timeout.ms (60 s): the broker refuses it.
    too_long = GroupConfigSpec(
        wanted.group, {**wanted.configs, "consumer.session.timeout.ms": "120000"}
    )
    refused = cli(specs, groups=[too_long])
    assert refused.returncode == 1
    assert f"group {wanted.group}: setting consumer.session.timeout.ms failed" in refused.stderr
    assert group_configs.read(admin, [wanted])[wanted.group] == dict(wanted.configs)


def test_cli_end_to_end_exit_codes_and_messages(
    cli: Callable[..., subprocess.CompletedProcess[str]], name: Callable[[str], str]
) -> None:
    specs = [topic(name("cli-in"), partitions=2), topic(name("cli-out"), partitions=2)]

    created = cli(specs)
    assert created.returncode == 0, created.stderr
    assert "2 change(s) applied" in created.stdout
    assert f"creating topic {specs[0].name}" in created.stderr

    again = cli(specs)
    assert again.returncode == 0, again.stderr
    assert "0 changes: 2 topics up to date" in again.stdout

    refused = cli([topic(specs[0].name, partitions=2, rf=3), specs[1]])
    assert refused.returncode == 1
    assert "nothing was applied" in refused.stdout
    assert f"topic {specs[0].name}: replication factor: found 1, wanted 3" in refused.stderr


def test_cli_usage_errors_exit_2(
    cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"topics": [{"name": "x"}]}')
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.admin.reconcile",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--specs",
            str(bad),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"invalid topic specs in {bad}" in result.stderr and "misses" in result.stderr
    help_text = subprocess.run(
        [sys.executable, "-m", "app.admin.reconcile", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout
    assert "exit codes:" in help_text and "--allow-partition-increase" in help_text


def test_cli_gives_up_on_an_unreachable_broker_with_a_clear_message(tmp_path: Path) -> None:
    specs = tmp_path / "topics.json"
    specs.write_text(dumps([topic("never-created")]))

    result = subprocess.run(
        [
            sys.executable, "-m", "app.admin.reconcile",
            "--bootstrap-servers", f"127.0.0.1:{free_port()}",
            "--specs", str(specs),
            "--wait-timeout", "5",
        ],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "did not answer within 5 s" in result.stderr
    assert "waiting for Kafka" in result.stderr


def test_cli_command_config_resolves_env_and_rejects_bad_client_settings(
    cli: Callable[..., subprocess.CompletedProcess[str]],
    tmp_path: Path,
    name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "client.properties"
    specs = [topic(name("cfg"))]
    monkeypatch.setenv("CLIENT_ID", "topic-reconciler")
    config.write_text("client.id=${env:CLIENT_ID}\n")
    assert cli(specs, "--command-config", str(config), "--dry-run").returncode == 0

    config.write_text("sasl.password=${env:KAFKA_PASSWORD_UNSET}\n")
    unset = cli(specs, "--command-config", str(config))
    assert unset.returncode == 2
    assert f"{config}:1 sasl.password" in unset.stderr and "KAFKA_PASSWORD_UNSET" in unset.stderr

    config.write_text("securty.protocol=SSL\n")
    unknown = cli(specs, "--command-config", str(config))
    assert unknown.returncode == 2
    assert 'No such configuration property: "securty.protocol"' in unknown.stderr
