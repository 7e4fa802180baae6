"""The rolling-restart benchmark in short form: its invariants, never its timings.

LONG: each pipeline starts two real processor instances (Spark JVMs; or Kafka Streams', the
benchmarks' reference) and restarts one of them, so each test takes a few minutes on 2 cores.
The static cases share one pipeline (a restart with state kept, then one with the state wiped),
as the benchmark itself does.
"""

from __future__ import annotations

import csv
import re
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from app.clients.waiting import wait_until
from devkit.bench.__main__ import parse_args
from devkit.bench.ceiling import measure_ceiling, parse_perf_test
from devkit.bench.measure import PeriodicSampler
from devkit.bench.plots import rate_labels, throughput_bars
from devkit.bench.restart_cases import CASES, BenchParams
from devkit.bench.rolling_restart import check_scale, run_matrix
from devkit.bench.variant import Variant
from devkit.kafka_streams import LABEL as KAFKA_STREAMS
from devkit.kraft_cluster import KraftCluster
from devkit.local.pipeline import ENGINE_KAFKA_STREAMS

SHORT = BenchParams(
    instances=2,
    partitions=2,
    rate=20.0,
    keys=10,
    session_timeout_ms=20_000,
    heartbeat_interval_ms=2_000,
    steady_s=2.0,
    tail_s=3.0,
    # The dropped warm-up pipeline is for figures; one test below runs it (a pipeline each).
    warm_up=False,
)
BY_NAME = {c.name: c for c in CASES}
BROKER = "Apache Kafka, the tests' 3 KRaft nodes"


def read_table(out: Path) -> dict[str, dict[str, str]]:
    markdown = (out / "rolling-restart.md").read_text()
    assert markdown.startswith("| case |")
    with (out / "rolling-restart.csv").open(newline="") as f:
        return {row["case"]: row for row in csv.DictReader(f)}


def assert_exact(rows: dict[str, dict[str, str]], names: tuple[str, ...]) -> None:
    """Every named case's output ended exactly as the aggregation says, no record repeated."""
    for name in names:
        assert rows[name]["match"] == "yes", rows[name]
        assert rows[name]["duplicates"] == "0", rows[name]


def test_static_restart_keeps_counts_exact_and_restores_only_a_lost_state(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    cases = [BY_NAME["static-kept"], BY_NAME["static-wiped"]]
    params = replace(SHORT, down_s=4.0)
    results = run_matrix(cases, params, tmp_path, kafka_bootstrap, BROKER)
    rows = read_table(tmp_path)
    for name in ("static-kept", "static-wiped"):
        row = rows[name]
        assert row["match"] == "yes", row
        assert row["duplicates"] == "0", row
        assert int(row["produced"]) > 0
        assert row["processed again s"], f"{name}: never processed again: {row}"
        # Kept down for --down-s from its stop, then timed by its own clock to a committed batch.
        assert float(row["down s"]) >= params.down_s, row
        assert float(row["start to first batch s"]) > 0, row
        assert row["broker"] == BROKER, row
        assert (tmp_path / f"rolling-restart-{name}.png").stat().st_size > 0
    assert rows["static-kept"]["restored records"] == "0"
    assert int(rows["static-wiped"]["restored records"]) > 0
    assert [r.ok for r in results] == [True, True]


def test_kafka_streams_restarted_in_the_bench_counts_exactly_and_restores_only_a_lost_state(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Kafka Streams beside the processor on the same brokers (`--engines`): the same bench
    and truth judge its restarts, and a pair, which it does not run, is a row saying so. A
    warm-up pipeline runs first and gives no row."""
    params = replace(SHORT, down_s=2.0, engines=(ENGINE_KAFKA_STREAMS,), warm_up=True)
    cases = [BY_NAME["static-kept"], BY_NAME["static-wiped"], BY_NAME["pair-switch"]]
    results = run_matrix(cases, params, tmp_path, kafka_bootstrap, BROKER)
    with (tmp_path / "rolling-restart.csv").open(newline="") as f:
        rows = {row["case"]: row for row in csv.DictReader(f)}
    pipelines = sorted(p.name for p in (tmp_path / "state").iterdir())
    assert len(pipelines) == 2 and sum("-warm-up-" in p for p in pipelines) == 1, pipelines
    assert sorted(rows) == sorted(c.name for c in cases), rows
    for name in ("static-kept", "static-wiped"):
        row = rows[name]
        assert row["engine"] == KAFKA_STREAMS, row
        assert row["match"] == "yes" and row["duplicates"] == "0", row
        assert row["processed again s"], f"{name}: never processed again: {row}"
        assert float(row["down s"]) >= params.down_s, row
        # From the JVM's start to its first output record.
        assert float(row["start to first batch s"]) > 0, row
        # The processor's own counters are no figure of Kafka Streams': left empty.
        assert row["assigned (others)"] == row["standby records/s"] == "", row
    # Its counts go out when produced, into their views' partitions: none while it is down.
    assert float(rows["static-kept"]["zero output s (max)"]) >= params.down_s
    assert rows["static-kept"]["restored records"] == "0"
    assert int(rows["static-wiped"]["restored records"]) > 0
    assert (
        "not run: the Kafka Streams reference runs a single deployment"
        in (rows["pair-switch"]["note"])
    )
    assert [r.ok for r in results[:2]] == [True, True]


def test_dynamic_members_leave_and_counts_stay_exact(kafka_bootstrap: str, tmp_path: Path) -> None:
    cases = [BY_NAME["dynamic-kept"], BY_NAME["stateless-leave"]]
    run_matrix(cases, SHORT, tmp_path, kafka_bootstrap, BROKER)
    assert_exact(read_table(tmp_path), ("dynamic-kept", "stateless-leave"))


def test_failover_takes_over_from_warm_copies_and_keeps_counts_exact(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    params = replace(SHORT, session_timeout_ms=10_000, heartbeat_interval_ms=1_000)
    cases = [BY_NAME["static-failover"], BY_NAME["standby-failover"]]
    run_matrix(cases, params, tmp_path, kafka_bootstrap, BROKER)
    rows = read_table(tmp_path)
    assert_exact(rows, ("static-failover", "standby-failover"))
    assert rows["standby-failover"]["standby replicas"] == "1", rows["standby-failover"]
    # Between the stop and the restarted instance's join the survivor took the stopped one's
    # partitions over: without a copy from their whole changelogs, with one from its copies.
    without_copies = _taken_over(tmp_path, "bench-static-[0-9a-f]*")
    assert without_copies, "the survivor took nothing over"
    assert all("the whole changelog" in line for line in without_copies), without_copies
    with_copies = _taken_over(tmp_path, "bench-static-standby-*")
    assert with_copies, "the survivor with copies took nothing over"
    assert all(map(_from_a_copy, with_copies)), with_copies


def test_a_crashed_handoff_instances_partitions_move_on_and_counts_stay_exact(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    params = replace(SHORT, session_timeout_ms=10_000, heartbeat_interval_ms=1_000)
    cases = [BY_NAME["handoff-crash-restart"], BY_NAME["handoff-crash-gone"]]
    run_matrix(cases, params, tmp_path, kafka_bootstrap, BROKER)
    rows = read_table(tmp_path)
    # SIGKILL mid-transaction: the open transaction is aborted, nothing counted twice or lost.
    assert_exact(rows, ("handoff-crash-restart", "handoff-crash-gone"))
    gone = rows["handoff-crash-gone"]
    # Nobody left the group: the survivor took the partitions once the session expired, while
    # the crashed instance was still down.
    assert int(gone["assigned (others)"]) > 0, gone
    assert float(gone["processed again s"]) <= float(gone["down s"]), gone


def _log_lines(out: Path, pipeline: str = "*") -> list[str]:
    """Every line the instances of the bench's pipelines matching `pipeline` logged."""
    return [
        line
        for log in out.glob(f"state/{pipeline}/logs/*.log")
        for line in log.read_text(encoding="utf-8").splitlines()
    ]


def _taken_over(out: Path, pipeline: str) -> list[str]:
    """The restore lines a pipeline's instances logged from the case's stop to the rejoin."""
    lines = _log_lines(out, pipeline)
    stopped = min(line[:23] for line in lines if "SIGTERM received" in line)
    rejoined = max(line[:23] for line in lines if "joining group" in line)
    return [line for line in lines if stopped < line[:23] < rejoined and _is_restore(line)]


def _is_restore(line: str) -> bool:
    """A partition's restore line: restored from its changelog, or nothing to restore."""
    return "state restored from" in line or "nothing to restore" in line


def _from_a_copy(line: str) -> bool:
    """A restore that read only the changelog's tail after this instance's copy, or nothing."""
    return "the tail after this instance's copy" in line or "copy is at the changelog's end" in line


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_handoff_moves_the_partitions_and_keeps_counts_exact(
    kafka_bootstrap: str, tmp_path: Path, protocol: str
) -> None:
    """Under either group protocol (KIP-848's consumer: the broker assigns, the group's own
    session and heartbeat set by the reconciler)."""
    params = replace(SHORT, group_protocols=(protocol,))
    run_matrix([BY_NAME["handoff"]], params, tmp_path, kafka_bootstrap, BROKER)
    rows = read_table(tmp_path)
    assert_exact(rows, ("handoff",))
    row = rows["handoff"]
    assert row["group protocol"] == protocol, row
    assert row["standby replicas"] == "1", row
    # The other instance took the stopped one's partitions at once and gave them back after.
    assert int(row["assigned (others)"]) > 0, row
    assert int(row["revoked (others)"]) > 0, row
    assert row["processed again s"], row
    # The instances' logs tell each move's phases (the column's parser reads the real lines).
    moved = row["moved partitions: longest gap by the logs, s"]
    assert re.fullmatch(
        r"p\d+ \S+->\S+: [\d.]+ = [\d.-]+ rebalance \+ [\d.-]+ wait \+ [\d.-]+ first batch "
        r"\(longest of \d+ moves\)",
        moved,
    ), row
    # Both ways, every move landed on a copy: the standby's, kept before the case began, and the
    # restarted instance's, caught up before it joined.
    assert re.fullmatch(r"(\d+) of \1, [\d,]+ changelog records read", row["moves onto a copy"]), (
        row
    )
    # Away onto the instance that kept running, and back onto the restarted one in its first
    # batch since its process started.
    assert re.fullmatch(
        r"[1-9]\d* of \d+, longest [\d.]+ s; onto running instances, longest [\d.]+ s",
        row["moves onto a just-started instance"],
    ), row
    # The restarted instance joined only once its copies (kept on its volume across the restart)
    # were caught up: what it took back, it restored from their changelog tails (or nothing, a
    # copy already at the changelog's end), never from a whole changelog. (A partition first
    # assigned at the start has no copy yet.)
    lines = _log_lines(tmp_path)
    rejoined = max(line[:23] for line in lines if "joining group" in line)
    restores = [line for line in lines if line[:23] > rejoined and _is_restore(line)]
    assert restores, "the restarted instance took nothing back"
    assert all(map(_from_a_copy, restores)), restores


def test_a_scale_out_and_in_moves_partitions_onto_copies_and_keeps_counts_exact(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """2 -> 3 -> 2 hand-off instances: the new one warms its copies before it joins, the removed
    one hands its partitions to the others' copies."""
    params = replace(SHORT, partitions=3, scale_to=3, min_ready_s=2.0)
    run_matrix([BY_NAME["scale-out"], BY_NAME["scale-in"]], params, tmp_path, kafka_bootstrap,
               BROKER)  # fmt: skip
    rows = read_table(tmp_path)
    assert_exact(rows, ("scale-out", "scale-in"))
    for name in ("scale-out", "scale-in"):
        row = rows[name]
        assert row["processed again s"], row
        assert row["restarted partitions"] == "0 1 2", row
        assert re.fullmatch(
            r"(\d+) of \1, [\d,]+ changelog records read", row["moves onto a copy"]
        ), row
    logs = sorted((tmp_path / "state").glob("*/logs/*-2.log"))
    assert logs, "the scaled-out instance 2 left no log"


def test_a_scale_beyond_the_partitions_or_not_above_the_instances_is_refused() -> None:
    check_scale(replace(SHORT, partitions=3, scale_to=3))
    for params in (replace(SHORT, scale_to=3), replace(SHORT, scale_to=2)):
        with pytest.raises(ValueError, match=r"--scale-to \d: must be above --instances \(2\)"):
            check_scale(params)


def test_a_pair_release_and_failover_keep_the_output_exact_and_never_going_back(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """One instance per side: the release switches to side b through both rolls, the failover
    kills side b and forces side a back; the truth counts a take-over's repeats apart."""
    params = replace(SHORT, instances=1)
    cases = [BY_NAME["pair-switch"], BY_NAME["pair-failover"]]
    run_matrix(cases, params, tmp_path, kafka_bootstrap, BROKER)
    rows = read_table(tmp_path)
    assert_exact(rows, ("pair-switch", "pair-failover"))
    for name in ("pair-switch", "pair-failover"):
        assert rows[name]["processed again s"], rows[name]
        assert "showed a key's value again" in rows[name]["note"], rows[name]
    control = [line for line in _log_lines(tmp_path) if "app.processor.pair" in line]
    assert any("released at input offset" in line for line in control), control
    assert any("taken over at input offset" in line and "forced" in line for line in control)


def test_a_broker_roll_under_load_keeps_every_instance_up_and_counts_exact(
    kraft_cluster: KraftCluster, tmp_path: Path
) -> None:
    run_matrix(
        [BY_NAME["broker-roll"]],
        replace(SHORT, min_ready_s=2.0),
        tmp_path,
        kraft_cluster.bootstrap_servers,
        BROKER,
        brokers=kraft_cluster,
    )
    rows = read_table(tmp_path)
    assert_exact(rows, ("broker-roll",))
    assert rows["broker-roll"]["instance exits"] == "0", rows["broker-roll"]
    kraft_cluster.wait_until_fully_replicated()  # the session's cluster, as the next test needs it


def test_a_broker_roll_needs_brokers_the_bench_can_restart(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """And a case runs once per `--set` variant, each row naming its settings."""
    params = replace(SHORT, variants=(Variant(), Variant({"trigger.interval.ms": "500"})))
    run_matrix([BY_NAME["broker-roll"]], params, tmp_path, kafka_bootstrap, "a given cluster")
    with (tmp_path / "rolling-restart.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["settings"] for r in rows] == ["defaults", "trigger.interval.ms=500"], rows
    for row in rows:
        assert row["note"].startswith("not run: needs brokers the bench can restart"), row
        assert row["broker"] == "a given cluster"
        assert "round" not in row, row  # one round: no column for it


def test_rounds_run_every_variant_in_turn_and_number_their_rows(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A B A B, not A A B B: a difference then shows beside the run-to-run spread."""
    params = replace(SHORT, rounds=2, variants=(Variant(), Variant({"trigger.interval.ms": "500"})))
    run_matrix([BY_NAME["broker-roll"]], params, tmp_path, kafka_bootstrap, "a given cluster")
    with (tmp_path / "rolling-restart.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["round"], r["settings"]) for r in rows] == [
        ("1", "defaults"),
        ("1", "trigger.interval.ms=500"),
        ("2", "defaults"),
        ("2", "trigger.interval.ms=500"),
    ], rows


def test_bench_options_default_to_the_params_and_name_what_is_wrong(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = parse_args(["rolling-restart", "--rate", "500", "--cases", "static-kept"])
    assert (args.rate, args.cases, args.keys) == (500.0, ["static-kept"], BenchParams().keys)
    args = parse_args(["throughput", "--configs", "5000:1000,20000:250"])
    assert args.configs == [(5000, 1000), (20000, 250)]
    with pytest.raises(SystemExit) as exited:
        parse_args(["rolling-restart", "--cases", "static-kept,rolling"])
    assert exited.value.code == 2
    assert "unknown case(s) rolling; allowed: static-kept" in capsys.readouterr().err
    assert parse_args(["rolling-restart"]).rounds == 1
    assert parse_args(["rolling-restart", "--rounds", "3"]).rounds == 3
    with pytest.raises(SystemExit):
        parse_args(["rolling-restart", "--rounds", "0"])
    assert "--rounds wants a whole number, at least 1; got '0'" in capsys.readouterr().err


@pytest.mark.parametrize("bench", ["throughput", "rolling-restart"])
def test_the_benches_warm_the_brokers_up_unless_told_not_to(bench: str) -> None:
    # A dropped run first: the first run after the brokers' start pays their JIT.
    assert parse_args([bench]).warm_up is True
    assert parse_args([bench, "--no-warm-up"]).warm_up is False


def test_the_throughput_bench_leaves_the_latency_phases_first_seconds_out_of_a_second_p99() -> None:
    assert parse_args(["throughput"]).latency_warmup_s == 10.0


@pytest.mark.parametrize("bench", ["throughput", "rolling-restart"])
def test_bench_variants_set_processor_keys_and_refuse_unknown_ones(
    capsys: pytest.CaptureFixture[str], bench: str
) -> None:
    args = parse_args(
        [
            bench,
            "--set", "spark.driver.memory=512m,max.records.per.batch=50000",
            "--set", "consumer.fetch.max.bytes=8388608",
        ]
    )  # fmt: skip
    assert [v.label for v in args.variants] == [
        "spark.driver.memory=512m, max.records.per.batch=50000",
        "consumer.fetch.max.bytes=8388608",
    ]
    assert Variant().label == "defaults"
    with pytest.raises(SystemExit):
        parse_args([bench, "--set", "max.record.per.batch=5"])
    assert "'max.record.per.batch=5' is not KEY=VALUE with KEY a processor key" in (
        capsys.readouterr().err
    )


def test_a_sampler_block_stops_sampling_before_an_error_leaves_it() -> None:
    taken: list[int] = []

    class Counting(PeriodicSampler):
        def take(self) -> int:
            taken.append(len(taken))
            return taken[-1]

    sampler = Counting("counting", interval_s=0.01)
    with pytest.raises(KeyboardInterrupt), sampler:
        wait_until(lambda: len(taken) >= 2, 30, "two samples", interval_s=0.01)
        raise KeyboardInterrupt  # as a Ctrl-C in the middle of a bench
    stopped_at = len(taken)
    assert stopped_at >= 2, "the sampler never sampled"
    assert not sampler._thread.is_alive()
    sampler.stop()  # stopping twice is harmless


def test_throughput_bars_carry_rate_and_ratio_and_are_drawn_without_a_ceiling(
    tmp_path: Path,
) -> None:
    assert rate_labels([121_453.0, 87_261.5], 174_523.0) == ["121,453/s (0.70)", "87,262/s (0.50)"]
    assert rate_labels([121_453.0], 0.0) == ["121,453/s"]  # no raw rate: no ratio
    for name, rates, ceiling in (("rates", [121_453.0], 174_523.0), ("none", [0.0], 0.0)):
        throughput_bars(tmp_path / f"{name}.png", ["500000/1000ms"], rates, ceiling)
        assert (tmp_path / f"{name}.png").read_bytes().startswith(b"\x89PNG")


def test_the_throughput_ceiling_is_the_best_of_three_consumers_of_the_same_backlog(
    kafka_bootstrap: str,
) -> None:
    topic = f"ceiling-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(topic, 3, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": "20"})
    for i in range(40_000):  # more than one consume() of 10,000 takes
        producer.produce(topic, key=str(i % 50).encode(), value=b"x" * 40)
        producer.poll(0)
    assert producer.flush(60) == 0
    ceiling = measure_ceiling(kafka_bootstrap, topic, 40_000, {})
    assert set(ceiling.rates) == {"bench consumer", "plain consumer", "kafka-consumer-perf-test"}
    assert all(rate and rate > 0 for rate in ceiling.rates.values()), ceiling.rates
    name, best = ceiling.best
    assert best == max(r for r in ceiling.rates.values() if r) and ceiling.rates[name] == best


def test_a_perf_test_that_fails_gives_no_rate_and_its_csv_gives_the_fetch_rate() -> None:
    assert parse_perf_test("", 1, "Exception in thread main") is None
    csv_out = (
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
        "2026-11-25 23:00:00:000, 2026-11-25 23:00:05:000, 95.3, 19.1, 2000000, 400000.0, "
        "3000, 2000, 47.7, 1000000.0\n"
    )
    assert parse_perf_test(csv_out, 0) == 1_000_000.0
