"""The benchmarks' Kafka Streams reference (`devkit.kafka_streams`) runs with the
configuration the comparison names and refuses what it would not honour; `test_bench.py` runs it
through the bench on the same brokers as the processor."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.processor_keys import MEMBERSHIP_HANDOFF, PROTOCOL_CLASSIC, PROTOCOL_CONSUMER
from contract.topic_specs import PipelineNames
from devkit import kafka_streams
from devkit.bench.__main__ import parse_args
from devkit.local.instances import InstanceOptions
from devkit.local.pipeline import (
    ENGINE_KAFKA_STREAMS,
    ENGINE_PROCESSOR,
    PipelineSetup,
    protocol_label,
)


def streams_instance(tmp_path: Path, options: InstanceOptions) -> kafka_streams.StreamsProcess:
    return kafka_streams.StreamsProcess(0, tmp_path, PipelineNames(), "127.0.0.1:9092", options)


def test_the_reference_runs_exactly_once_v2_on_2_threads_and_static_keeps_its_partitions(
    tmp_path: Path,
) -> None:
    static = kafka_streams.streams_properties(
        streams_instance(tmp_path, InstanceOptions(num_standby_replicas=1))
    )
    assert static["processing.guarantee"] == "exactly_once_v2"
    assert static["num.stream.threads"] == "2"
    assert static["num.standby.replicas"] == "1"
    assert static["group.instance.id"] == f"{PipelineNames().application_id}-0"
    assert static["leave.group.on.close"] == "false"
    # Its changelog is Kafka Streams' own name for the store: the topic the pipeline creates.
    assert f"{static['application.id']}-counts-changelog" == PipelineNames().changelog_topic
    dynamic = kafka_streams.streams_properties(
        streams_instance(tmp_path, InstanceOptions(membership_mode=MEMBERSHIP_HANDOFF))
    )
    assert "group.instance.id" not in dynamic
    assert dynamic["leave.group.on.close"] == "true"


def test_under_the_consumer_protocol_the_reference_joins_a_streams_group_with_its_own_configs(
    tmp_path: Path,
) -> None:
    options = InstanceOptions(
        group_protocol=PROTOCOL_CONSUMER,
        num_standby_replicas=2,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=1_000,
    )
    properties = kafka_streams.streams_properties(streams_instance(tmp_path, options))
    assert properties["group.protocol"] == "streams"
    assert properties["processing.guarantee"] == "exactly_once_v2"
    # The broker owns these in a streams group; the client would ignore them.
    for key in ("num.standby.replicas", "session.timeout.ms", "heartbeat.interval.ms"):
        assert key not in properties
    assert "group.instance.id" not in properties
    assert kafka_streams.group_configs(options) == {
        "streams.session.timeout.ms": "10000",
        "streams.heartbeat.interval.ms": "1000",
        "streams.num.standby.replicas": "2",
    }
    assert kafka_streams.group_configs(InstanceOptions()) == {}


def test_the_reference_refuses_the_processors_settings_by_name(tmp_path: Path) -> None:
    options = InstanceOptions(extra={"trigger.interval.ms": "500"})
    with pytest.raises(ValueError, match=r"\['trigger.interval.ms'\] are the processor's"):
        kafka_streams.streams_properties(streams_instance(tmp_path, options))


def test_a_pipeline_names_its_engines_and_runs_no_kafka_streams_pair(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="engine='flink': must be one of processor, kafka-str"):
        PipelineSetup(base_dir=tmp_path, engine="flink")
    with pytest.raises(ValueError, match="no pair"):
        PipelineSetup(base_dir=tmp_path, engine=ENGINE_KAFKA_STREAMS, pair=True)


def test_bench_engines_default_to_the_processor_and_name_what_is_wrong(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert parse_args(["rolling-restart"]).engines == [ENGINE_PROCESSOR]
    both = parse_args(["throughput", "--engines", "processor,kafka-streams"])
    assert both.engines == [ENGINE_PROCESSOR, ENGINE_KAFKA_STREAMS]
    with pytest.raises(SystemExit):
        parse_args(["rolling-restart", "--engines", "spark"])
    assert "unknown engine(s) spark; allowed: processor, kafka-streams" in capsys.readouterr().err


@pytest.mark.parametrize("bench", ["throughput", "rolling-restart"])
def test_both_benches_run_kafka_streams_on_its_streams_groups_where_consumer_is_named(
    bench: str,
) -> None:
    args = parse_args([bench, "--group-protocols", "classic,consumer"])
    assert args.group_protocols == [PROTOCOL_CLASSIC, PROTOCOL_CONSUMER]
    assert parse_args([bench]).group_protocols == [PROTOCOL_CLASSIC]
    assert protocol_label(ENGINE_KAFKA_STREAMS, PROTOCOL_CONSUMER) == "streams (KIP-1071)"
    assert protocol_label(ENGINE_PROCESSOR, PROTOCOL_CONSUMER) == PROTOCOL_CONSUMER
