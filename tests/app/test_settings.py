"""The processor's properties file: parsing as java.util.Properties does, env references,
validation (every problem at once, each naming key, value, what is allowed and the file), and
the client configurations derived from it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.processor.pair import reader_config
from app.processor.pipeline import source_options
from app.processor.settings import (
    DEFAULTS,
    KNOWN_KEYS,
    ProcessorSettings,
    SettingsError,
    load_settings,
    main,
)
from contract.java_properties import parse_properties

REPO = Path(__file__).resolve().parents[2]

# The required part of the contract, as the Pulumi program renders it.
BASE = """\
application.id=page-view-counter
bootstrap.servers=kafka.streaming.svc.cluster.local:9092
input.topic=page-views
output.topic=page-view-counts
changelog.topic=page-view-counter-counts-changelog
dlq.topic=page-view-counter-dlq
consumer.group.instance.id=${env:POD_NAME}
producer.transactional.id=${env:POD_NAME}
consumer.session.timeout.ms=120000
consumer.heartbeat.interval.ms=10000
"""
ENV = {"POD_NAME": "page-view-counter-1"}

# The contract's keys and fixed defaults (contract/processor_keys.py).
CONTRACT_DEFAULTS = {
    "processing.guarantee": "exactly_once_v2",
    "stateful": "true",
    "membership.mode": "static",
    "num.standby.replicas": "0",
    "state.dir": "/var/lib/processor",
    "health.port": "8080",
    "task.timeout.ms": "300000",
    "trigger.interval.ms": "1000",
    "max.records.per.batch": "1000000",
    "shutdown.timeout.ms": "45000",
    "consumer.group.protocol": "classic",
    "consumer.partition.assignment.strategy": "cooperative-sticky",
    "consumer.isolation.level": "read_committed",
    "consumer.fetch.wait.max.ms": "10",
    "consumer.max.poll.interval.ms": "300000",
    "consumer.enable.auto.commit": "false",
    "producer.transaction.timeout.ms": "60000",
    "producer.acks": "all",
    "producer.enable.idempotence": "true",
    "producer.metadata.max.age.ms": "4000",
    "producer.topic.metadata.refresh.interval.ms": "1000",
    "spark.master": "local[2]",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xms64m",
    "spark.driver.memory": "512m",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.local.dir": "/tmp/spark",
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    "spark.python.daemon.module": "app.processor.python_daemon",
    "class.data.archive": "auto",
    "python.forkserver": "true",
    "python.gc.freeze": "true",
    "aggregation.class": "app.pipelines.page_view_count.PageViewCount",
}
CONTRACT_KEYS = {
    *CONTRACT_DEFAULTS,
    "application.id",
    "bootstrap.servers",
    "input.topic",
    "output.topic",
    "changelog.topic",
    "dlq.topic",
    "consumer.group.instance.id",
    "consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms",
    "producer.transactional.id",
    "pair.side",
    "pair.control.topic",
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "processor.properties"
    path.write_text(text, encoding="utf-8")
    return path


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> ProcessorSettings:
    return load_settings(write(tmp_path, text), env=ENV if env is None else env)


def problems_of(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(SettingsError) as raised:
        load(tmp_path, text, env)
    return raised.value.problems


# --- the properties format -------------------------------------------------------------------

EDGE_CASES = r"""# a comment
   ! another comment, indented
plain=value
spaced = value with trailing blanks<BLANKS>
colon:value
blank separated value
  indented.key=x
empty=
keyonly
continued=first, \
          second, \
    third
not.continued=ends with an escaped backslash \\
escaped\=key\:and\ blank=v
unicode=\u0041\u00e9
tabs=a\tb
other.escape=\q\#
comment.like=value # not a comment
# a comment with a trailing backslash does not continue \
after.comment=1
dup=first
dup=second
""".replace("<BLANKS>", "   ")  # trailing blanks are part of a value


def test_parser_reads_the_java_properties_format() -> None:
    parsed = {e.key: e.value for e in parse_properties(EDGE_CASES)}
    assert parsed == {
        "plain": "value",
        "spaced": "value with trailing blanks   ",
        "colon": "value",
        "blank": "separated value",
        "indented.key": "x",
        "empty": "",
        "keyonly": "",
        "continued": "first, second, third",
        "not.continued": "ends with an escaped backslash \\",
        "escaped=key:and blank": "v",
        "unicode": "Aé",
        "tabs": "a\tb",
        "other.escape": "q#",
        "comment.like": "value # not a comment",
        "after.comment": "1",
        "dup": "second",
    }


def test_parser_accepts_crlf_and_cr_line_ends_and_a_backslash_at_the_end() -> None:
    parsed = {e.key: e.value for e in parse_properties("a=1\r\nb=2\rc=3\\")}
    assert parsed == {"a": "1", "b": "2", "c": "3"}


def test_parser_reports_the_line_of_each_key() -> None:
    lines = {e.key: e.line for e in parse_properties("# c\na=1\nb=x\\\n  y\nc=2\n")}
    assert lines == {"a": 2, "b": 3, "c": 5}


def test_parser_agrees_with_java_util_properties(tmp_path: Path) -> None:
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH to compare with java.util.Properties")
    (tmp_path / "edge.properties").write_text(EDGE_CASES, encoding="utf-8")
    source = tmp_path / "Dump.java"
    source.write_text(
        """
import java.io.*; import java.nio.charset.StandardCharsets; import java.util.*;
public class Dump { public static void main(String[] a) throws Exception {
  Properties p = new Properties();
  try (Reader r = new InputStreamReader(new FileInputStream(a[0]), StandardCharsets.UTF_8)) {
    p.load(r); }
  PrintStream out = new PrintStream(System.out, true, "UTF-8");
  for (String k : new TreeSet<>(p.stringPropertyNames())) {
    out.print(k + "\\u0000" + p.getProperty(k) + "\\u0000"); } } }
"""
    )
    result = subprocess.run(
        [java, str(source), str(tmp_path / "edge.properties")],
        capture_output=True,
        check=True,
        timeout=120,
    )
    fields = result.stdout.decode("utf-8").split("\0")[:-1]
    from_java = dict(zip(fields[::2], fields[1::2], strict=True))
    assert {e.key: e.value for e in parse_properties(EDGE_CASES)} == from_java


def test_malformed_unicode_escape_is_an_error_with_the_line(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, BASE + "bad=\\u00zz\n")
    assert len(problems) == 1
    assert "line 11" in problems[0] and "\\u" in problems[0]


# --- environment references ------------------------------------------------------------------


def test_env_references_are_resolved_inside_values(tmp_path: Path) -> None:
    settings = load(tmp_path, BASE + "producer.client.id=tx-${env:POD_NAME}-${env:ZONE}\n",
                    {**ENV, "ZONE": "a"})  # fmt: skip
    assert settings.instance_id == "page-view-counter-1"
    assert settings.transactional_id == "page-view-counter-1"
    assert settings.producer_config()["client.id"] == "tx-page-view-counter-1-a"


def test_unset_env_variable_names_the_key_the_variable_and_the_file(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, BASE, env={})
    path = tmp_path / "processor.properties"
    assert len(problems) == 2  # reported once per key, not again as "missing"
    assert problems[0].startswith("consumer.group.instance.id='${env:POD_NAME}'")
    assert f"({path}:7)" in problems[0]
    assert "environment variable POD_NAME is not set" in problems[0]
    assert problems[1].startswith("producer.transactional.id=")


def test_other_config_providers_are_refused(tmp_path: Path) -> None:
    (problem,) = problems_of(tmp_path, BASE + "sasl.password=${file:/etc/secret:pw}\n")
    assert "sasl.password=" in problem and "only ${env:NAME}" in problem


# --- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("statefull=true", ["statefull='true'", "unknown key", "did you mean stateful?"]),
        (
            "consumer.sesion.timeout.ms=1000",
            ["consumer.sesion.timeout.ms", "no consumer property", "consumer.session.timeout.ms"],
        ),
        ("health.port=http", ["health.port='http'", "must be an integer", "0..65535"]),
        ("health.port=70000", ["health.port='70000'", "out of range", "0..65535"]),
        ("max.records.per.batch=0", ["max.records.per.batch='0'", ">= 1"]),
        ("num.standby.replicas=-1", ["num.standby.replicas='-1'", "out of range", ">= 0"]),
        ("num.standby.replicas=one", ["num.standby.replicas='one'", "must be an integer"]),
        ("task.timeout.ms=-1", ["task.timeout.ms='-1'", "out of range", ">= 0"]),
        ("stateful=yes", ["stateful='yes'", "allowed: true, false"]),
        ("processing.guarantee=at_least_once", ["at_least_once", "allowed: exactly_once_v2"]),
        (
            "consumer.isolation.level=read_uncommitted",
            ["read_uncommitted", "allowed: read_committed", "aborted transactions"],
        ),
        (
            "consumer.partition.assignment.strategy=range",
            ["consumer.partition.assignment.strategy='range'", "allowed: cooperative-sticky"],
        ),
        ("consumer.group.protocol=streams", ["'streams'", "allowed: classic, consumer"]),
        ("consumer.enable.auto.commit=true", ["must be false", "transaction"]),
        ("producer.enable.idempotence=false", ["must be true"]),
        ("producer.acks=1", ["producer.acks='1'", "allowed: all, -1"]),
        (
            "consumer.heartbeat.interval.ms=50000",
            ["consumer.heartbeat.interval.ms='50000'", "at most a third", "(<= 40000)"],
        ),
        ("consumer.group.id=other", ["consumer.group.id='other'", "application.id", "remove"]),
        ("producer.linger.ms=soon", ["producer.linger.ms='soon'", "librdkafka rejects"]),
        (
            "consumer.max.poll.interval.ms=1000",
            ["consumer.max.poll.interval.ms='1000'", "at least consumer.session.timeout.ms"],
        ),
        (
            "ssl.endpoint.identification.algorithm=none",
            ["ssl.endpoint.identification.algorithm='none'", "must be https", "hostname"],
        ),
        (
            "producer.ssl.endpoint.identification.algorithm=none",
            ["producer.ssl.endpoint.identification.algorithm='none'", "must be https"],
        ),
        (
            "consumer.enable.ssl.certificate.verification=false",
            ["consumer.enable.ssl.certificate.verification='false'", "must be true"],
        ),
    ],
)
def test_each_invalid_value_is_reported_with_key_value_allowed_and_file(
    tmp_path: Path, extra: str, expected: list[str]
) -> None:
    (problem,) = problems_of(tmp_path, BASE + extra + "\n")
    for text in expected:
        assert text in problem
    assert str(tmp_path / "processor.properties") in problem


def test_missing_required_keys_are_all_listed(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, "stateful=false\n")
    for key in ("application.id", "bootstrap.servers", "input.topic", "dlq.topic"):
        assert f"{key} is required" in "\n".join(problems)
    assert any("producer.transactional.id is required" in p for p in problems)


def test_all_problems_come_in_one_error(tmp_path: Path) -> None:
    text = BASE + "statefull=true\nhealth.port=x\nproducer.acks=0\n"
    with pytest.raises(SettingsError) as raised:
        load(tmp_path, text)
    assert len(raised.value.problems) == 3
    assert "(3 problems)" in str(raised.value)
    assert str(tmp_path / "processor.properties") in str(raised.value)


def test_stateful_needs_a_static_member_id(tmp_path: Path) -> None:
    text = BASE.replace("consumer.group.instance.id=${env:POD_NAME}\n", "")
    (problem,) = problems_of(tmp_path, text)
    assert "stateful='true'" in problem and "consumer.group.instance.id" in problem


def test_stateless_forbids_a_static_member_id(tmp_path: Path) -> None:
    (problem,) = problems_of(tmp_path, BASE + "stateful=false\n")
    assert problem.startswith("consumer.group.instance.id='page-view-counter-1'")
    assert "stateful=false" in problem and "leaves the group" in problem


def test_consumer_protocol_rejects_client_side_timeouts_and_assignor(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, BASE + "consumer.group.protocol=consumer\n")
    assert len(problems) == 2
    assert problems[0].startswith("consumer.session.timeout.ms='120000'")
    assert "KIP-848" in problems[0] and "group.consumer.session.timeout.ms" in problems[0]
    assert problems[1].startswith("consumer.heartbeat.interval.ms='10000'")


def test_consumer_protocol_drops_the_classic_defaults(tmp_path: Path) -> None:
    text = "\n".join(
        line for line in BASE.splitlines() if "timeout.ms" not in line and "interval" not in line
    )
    settings = load(tmp_path, text + "\nconsumer.group.protocol=consumer\n")
    config = settings.consumer_config()
    assert config["group.protocol"] == "consumer"
    for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
        assert key not in config


def test_overrides_win_over_the_file_and_are_named_in_errors(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, BASE), env=ENV, overrides={"health.port": "0"})
    assert settings.health_port == 0
    with pytest.raises(SettingsError) as raised:
        load_settings(write(tmp_path, BASE), env=ENV, overrides={"health.port": "x"})
    assert "health.port='x' (override)" in raised.value.problems[0]


def test_unreadable_file_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read the properties file"):
        load_settings(tmp_path / "absent.properties", env=ENV)


# --- defaults and accessors ------------------------------------------------------------------


def test_defaults_match_the_contract() -> None:
    assert {key: DEFAULTS.get(key) for key in CONTRACT_DEFAULTS} == CONTRACT_DEFAULTS
    assert set(DEFAULTS) <= CONTRACT_KEYS
    assert set(KNOWN_KEYS) == CONTRACT_KEYS


def test_typed_fields_and_client_configs(tmp_path: Path) -> None:
    settings = load(tmp_path, BASE + "sasl.password=${env:KAFKA_PASSWORD}\n",
                    {**ENV, "KAFKA_PASSWORD": "s3cret"})  # fmt: skip
    assert settings.stateful is True
    assert settings.health_port == 8080
    assert settings.trigger_interval_ms == 1000
    assert settings.trigger_processing_time == "1000 milliseconds"
    assert settings.max_records_per_batch == 1_000_000
    assert settings.checkpoint_dir == Path("/var/lib/processor/checkpoint-layout-2")
    assert settings.source == tmp_path / "processor.properties"

    consumer = settings.consumer_config()
    assert consumer["bootstrap.servers"] == "kafka.streaming.svc.cluster.local:9092"
    assert consumer["group.id"] == "page-view-counter"
    assert consumer["group.instance.id"] == "page-view-counter-1"
    assert consumer["enable.auto.offset.store"] == "false"
    assert consumer["isolation.level"] == "read_committed"
    assert consumer["sasl.password"] == "s3cret"
    assert not any(k.startswith(("consumer.", "producer.", "spark.")) for k in consumer)

    producer = settings.producer_config()
    assert producer["transactional.id"] == "page-view-counter-1"
    assert producer["acks"] == "all"
    assert producer["sasl.password"] == "s3cret"
    assert "group.id" not in producer

    spark = settings.spark_conf()
    assert spark["spark.sql.shuffle.partitions"] == "2"
    assert all(k.startswith("spark.") for k in spark)
    assert settings.masked_properties()["sasl.password"] == "****"


def test_stateless_has_no_instance_id(tmp_path: Path) -> None:
    text = BASE.replace("consumer.group.instance.id=${env:POD_NAME}\n", "") + "stateful=FALSE\n"
    settings = load(tmp_path, text)
    assert settings.stateful is False
    assert settings.instance_id is None
    assert "group.instance.id" not in settings.consumer_config()


# --- command line ----------------------------------------------------------------------------


def test_cli_prints_effective_settings_with_secrets_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POD_NAME", "p-0")
    monkeypatch.setenv("KAFKA_PASSWORD", "s3cret")
    path = write(tmp_path, BASE + "consumer.sasl.password=${env:KAFKA_PASSWORD}\n")
    assert main(["--properties", str(path)]) == 0
    out = capsys.readouterr().out
    assert "consumer.sasl.password=****" in out
    assert "s3cret" not in out
    assert "consumer.group.instance.id=p-0" in out
    defaults = out.split("# defaults\n", 1)[1]
    assert "spark.sql.shuffle.partitions=2" in defaults


def test_cli_exit_codes(tmp_path: Path) -> None:
    bad = write(tmp_path, BASE + "statefull=true\n")
    command = [sys.executable, "-m", "app.processor.settings", "--properties", str(bad)]
    result = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, env={"POD_NAME": "p", "PATH": ""}
    )
    assert result.returncode == 1
    assert "did you mean stateful?" in result.stderr
    usage = subprocess.run(command[:3], cwd=REPO, capture_output=True, text=True)
    assert usage.returncode == 2


# --- membership modes ------------------------------------------------------------------------


HANDOFF = "\n".join(line for line in BASE.splitlines() if "group.instance.id" not in line) + (
    "\nmembership.mode=handoff\nnum.standby.replicas=1\n"
)


def test_handoff_mode_is_a_dynamic_member_that_leaves_the_group_on_close(tmp_path: Path) -> None:
    settings = load(tmp_path, HANDOFF)
    assert settings.membership_mode == "handoff"
    assert settings.num_standby_replicas == 1
    assert settings.instance_id is None
    assert "group.instance.id" not in settings.consumer_config()


def test_handoff_mode_refuses_a_static_member_id(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as raised:
        load(tmp_path, BASE + "\nmembership.mode=handoff\nnum.standby.replicas=1\n")
    (problem,) = raised.value.problems
    assert problem.startswith("consumer.group.instance.id='page-view-counter-1'")
    assert "membership.mode=handoff" in problem and "remove it" in problem


def test_handoff_mode_needs_a_standby_replica(tmp_path: Path) -> None:
    for standby in ("num.standby.replicas=0\n", ""):  # explicit, and the default
        text = HANDOFF.replace("num.standby.replicas=1\n", standby)
        (problem,) = problems_of(tmp_path, text)
        assert problem.startswith("num.standby.replicas='0'")
        assert "at least 1 with membership.mode=handoff" in problem
        assert "restores its whole changelog" in problem
        assert "set num.standby.replicas=1 or membership.mode=static" in problem


def test_handoff_mode_needs_a_stateful_processor(tmp_path: Path) -> None:
    (problem,) = problems_of(tmp_path, HANDOFF + "stateful=false\n")
    assert problem.startswith("membership.mode='handoff'")
    assert "must be static with stateful=false" in problem
    assert "a stateless processor keeps none" in problem


def test_standby_replicas_default_to_none_and_are_read_as_a_number(tmp_path: Path) -> None:
    assert load(tmp_path, BASE).num_standby_replicas == 0
    assert load(tmp_path, BASE + "num.standby.replicas=2\n").num_standby_replicas == 2


def test_unknown_membership_mode_names_the_allowed_values(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as raised:
        load(tmp_path, BASE + "\nmembership.mode=eager\n")
    assert any(
        p.startswith("membership.mode='eager'") and "allowed: static, handoff" in p
        for p in raised.value.problems
    )


@pytest.mark.parametrize(
    ("master", "cores"),
    [("local[3]", 3), ("local[2,4]", 2), ("local", 1), ("local[*]", os.cpu_count() or 1)],
)
def test_the_source_packs_its_reads_into_as_many_tasks_as_spark_master_has_cores(
    tmp_path: Path, master: str, cores: int
) -> None:
    settings = load(tmp_path, BASE + f"spark.master={master}\n")
    assert settings.executor_cores == cores
    assert source_options(settings).read_tasks == cores


def test_range_readers_leave_a_partition_head_at_once_and_the_pair_watchers_long_poll(
    tmp_path: Path,
) -> None:
    settings = load(tmp_path, BASE)
    assert source_options(settings).consumer_config["fetch.wait.max.ms"] == "10"
    pair_reads = reader_config(settings.consumer_config(), "pair-reads")
    assert pair_reads["fetch.wait.max.ms"] == "10"
    watcher = reader_config(settings.consumer_config(), "pair-watch", at_head=True)
    assert watcher["fetch.wait.max.ms"] == "500"
    overridden = load(tmp_path, BASE + "consumer.fetch.wait.max.ms=100\n")
    assert source_options(overridden).consumer_config["fetch.wait.max.ms"] == "100"
