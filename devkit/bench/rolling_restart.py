"""The rolling-restart benchmark: one instance restarted while page views keep flowing.

The articles this project comes from read the processing gap of a pod restart off consumer-lag
graphs (45-48 s with default settings). This drives the local pipeline (N instances as local
processes, `devkit.local`) through the scenario matrix and measures, per case:

- produced records, and whether the read_committed output ends exactly as the aggregation says it
  must (`devkit.truth`), with no output record repeated or going back (duplicates);
- the processing gap of the restarted instance's partitions: the longest stretch without any
  output record, and the largest event-time-to-output latency during the restart (and, for
  comparison, the largest latency of the other instances' partitions meanwhile);
- rebalances and revoked partitions the other instances saw, and changelog records restored.

Every case runs on Apache Kafka: the bench's own 3 KRaft nodes (`devkit.kraft_cluster`), or the
cluster `--bootstrap-servers` names; the broker cases need the bench's own nodes, which it
restarts. Every row names its broker. Before the rows, the first row's pipeline runs until it is
settled and has processed `--steady-s`, and is dropped (`--no-warm-up` skips it): the first
pipeline after the brokers' start pays their JIT.

The cases and their sizes are in `restart_cases`, what each does to the pipeline in
`restart_events`, and the reading of the timeline between them in `settling`; this module runs
the matrix and writes its table.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import product
from pathlib import Path

from app.clients.client_properties import ClientConfig
from contract.processor_keys import DEFAULTS
from contract.topic_specs import PipelineNames
from devkit.bench import handoff_phases, plots, steady_cost
from devkit.bench.measure import Timeline, late_percent, metric_delta, zero_output_gaps
from devkit.bench.restart_cases import NEEDS_BROKERS, BenchParams, Case
from devkit.bench.restart_events import Restart, broker_roll, pair_case, restart, rollout, scale
from devkit.bench.settling import first_sample, total_lag, wait_settled
from devkit.bench.table import Row, write_table
from devkit.exactness_report import write_exactness_report
from devkit.kraft_cluster import KraftCluster
from devkit.loadgen import LoadSettings
from devkit.local.instances import InstanceOptions
from devkit.local.pipeline import (
    ENGINE_KAFKA_STREAMS,
    ENGINE_PROCESSOR,
    LocalPipeline,
    PipelineSetup,
    engine_label,
    protocol_label,
)
from devkit.truth import Latency, OutputCheck, OutputRecord, check_output

log = logging.getLogger("devkit.bench")


@dataclass
class CaseResult:
    """One row of the table, and where its graph is."""

    case: Case
    row: Row = field(default_factory=dict)
    ok: bool = True
    plot: Path | None = None


# Read off the processor's own metrics and logs, which Kafka Streams has no public equal of.
PROCESSOR_ONLY_COLUMNS = (
    "assigned (others)",
    "revoked (others)",
    "moved partitions: longest gap by the logs, s",
    "moves onto a copy",
    "moves onto a just-started instance",
    "standby records/s",
)
RESTORED = "processor_restore_records_total"
START_DURATION = "processor_start_duration_seconds"
# A pair's switch is reported on its own: the output from this long before its record to this
# long after it.
SWITCH_BEFORE_S = 5.0
SWITCH_AFTER_S = 20.0

COLUMNS = (
    "case",
    "engine",
    "group protocol",
    "settings",
    "broker",
    "standby replicas",
    "produced",
    "output keys",
    "match",
    "duplicates",
    "restarted partitions",
    "zero output s (max)",
    "zero output s per partition",
    "late > 10 s %",
    "max latency s (restarted)",
    "max latency s (others)",
    "rebalances (others)",
    "assigned (others)",
    "revoked (others)",
    "restored records",
    "instance exits",
    "down s",
    "start to first batch s",
    "processed again s",
    "moved partitions: longest gap by the logs, s",
    "moves onto a copy",
    "moves onto a just-started instance",
    "steady CPU, cores",
    "standby records/s",
    "state on disk, MiB",
    "note",
)


def run_matrix(
    cases: Sequence[Case],
    params: BenchParams,
    out_dir: Path,
    bootstrap_servers: str,
    broker: str,
    brokers: KraftCluster | None = None,
    client: ClientConfig | None = None,
) -> list[CaseResult]:
    """Run the cases, one pipeline per kind (membership, standbys) with one restart per case in
    it; write the table (Markdown, CSV) and a graph per case; the results. `broker` names the
    cluster in every row; `brokers`: the local cluster behind `bootstrap_servers`, which the
    broker-roll case restarts."""
    results: dict[tuple[str, str, str, int, int], CaseResult] = {}

    def kind(case: Case) -> tuple[bool, str, int, bool]:
        return case.stateful, case.membership_mode, case.standby_replicas(params), case.pair

    runs = [
        (e, p, i)
        for e in params.engines
        for p in params.group_protocols
        for i in range(len(params.variants))
        # Kafka Streams runs with its own defaults (no --set variant), under the classic
        # protocol or, where the processor runs KIP-848's, its own streams groups (KIP-1071).
        if e == ENGINE_PROCESSOR or i == 0
    ]
    if params.warm_up and runs:
        engine, protocol, index = runs[0]
        first = [c for c in cases if _not_runnable(c, engine, brokers) is None][:1]
        warm = replace(params, engine=engine, group_protocol=protocol, variant_index=index)
        if first:
            run_group(first, warm, out_dir, bootstrap_servers, broker, brokers, client, True)
    for round_, (engine, protocol, index) in product(range(params.rounds), runs):
        run = replace(
            params, engine=engine, group_protocol=protocol, variant_index=index, round_index=round_
        )
        runnable = []
        for case in cases:
            reason = _not_runnable(case, engine, brokers)
            if reason is not None:
                row = {
                    "case": case.name,
                    "engine": engine_label(engine),
                    "group protocol": protocol_label(run.engine, run.group_protocol),
                    "settings": run.variant.label,
                    "round": round_ + 1,
                    "broker": broker,
                    "note": f"not run: {reason}",
                }
                results[case.name, engine, protocol, index, round_] = CaseResult(case, row)
            else:
                runnable.append(case)
        for pipeline_kind in dict.fromkeys(kind(c) for c in runnable):
            group = [c for c in runnable if kind(c) == pipeline_kind]
            for result in run_group(
                group, run, out_dir, bootstrap_servers, broker, brokers, client
            ):
                results[result.case.name, engine, protocol, index, round_] = result
    # Each case's rows side by side, one per engine, protocol and variant, round after round.
    rounds = range(params.rounds)
    ordered = [results[c.name, e, p, i, r] for c in cases for r in rounds for e, p, i in runs]
    text = write_table(out_dir, "rolling-restart", columns(params), [r.row for r in ordered])
    print(text, flush=True)
    print(f"table: {out_dir / 'rolling-restart.md'} and .csv; graphs: {out_dir}/*.png", flush=True)
    return ordered


def columns(params: BenchParams) -> tuple[str, ...]:
    """The table's columns: a round's number beside the settings when there is more than one."""
    if params.rounds == 1:
        return COLUMNS
    at = COLUMNS.index("settings") + 1
    return (*COLUMNS[:at], "round", *COLUMNS[at:])


def _not_runnable(case: Case, engine: str, brokers: KraftCluster | None) -> str | None:
    """Why `case` cannot run under `engine` here (None: it can)."""
    if case.broker_roll and brokers is None:
        return NEEDS_BROKERS
    if case.pair and engine == ENGINE_KAFKA_STREAMS:
        return "the Kafka Streams reference runs a single deployment, no pair"
    return None


def check_scale(params: BenchParams) -> None:
    """Refuse a scale the group cannot use: more instances than partitions own nothing."""
    if not params.instances < params.scale_to <= params.partitions:
        raise ValueError(
            f"--scale-to {params.scale_to}: must be above --instances ({params.instances}) and "
            f"at most --partitions ({params.partitions}); a member beyond the partition count "
            "owns nothing"
        )


def _graph_suffix(params: BenchParams) -> str:
    """A graph's name suffix: none for the classic protocol, the first variant and the first
    round (the defaults': the names the docs link), else the protocol, the variant's place
    (`-set1` for the first `--set`) and the round, so two equal variants still get a graph each."""
    classic = params.group_protocol == DEFAULTS["consumer.group.protocol"]
    suffix = "" if classic else f"-{params.group_protocol}"
    suffix += "" if params.engine == ENGINE_PROCESSOR else f"-{params.engine}"
    suffix += f"-set{params.variant_index}" if params.variant_index else ""
    return suffix + (f"-round{params.round_index + 1}" if params.round_index else "")


def run_group(
    cases: Sequence[Case], params: BenchParams, out_dir: Path, bootstrap_servers: str,
    broker: str, brokers: KraftCluster | None = None, client: ClientConfig | None = None,
    warm_up: bool = False,
) -> list[CaseResult]:  # fmt: skip
    """One pipeline (own topics and group), one restart (or roll) per case. `warm_up`: only
    until the first case's steady processing, no restart, no row (`BenchParams.warm_up`)."""
    stateful, mode = cases[0].stateful, cases[0].membership_mode
    kind = (mode if stateful else "dynamic") + ("-standby" if cases[0].standbys else "")
    kind += "-pair" if cases[0].pair else ""
    kind += "" if params.engine == ENGINE_PROCESSOR else f"-{params.engine}"
    kind += "-warm-up" if warm_up else ""
    prefix = f"bench-{kind}-{params.group_protocol}-{uuid.uuid4().hex[:6]}"
    setup = PipelineSetup(
        base_dir=out_dir / "state" / prefix,
        instances=params.instances,
        partitions=params.partitions,
        bootstrap_servers=bootstrap_servers,
        client=client or ClientConfig(),
        names=PipelineNames(prefix, f"{prefix}-page-views", f"{prefix}-page-view-counts"),
        pair=cases[0].pair,
        engine=params.engine,
        options=InstanceOptions(
            stateful=stateful,
            membership_mode=mode,
            num_standby_replicas=cases[0].standby_replicas(params),
            session_timeout_ms=params.session_timeout_ms,
            heartbeat_interval_ms=params.heartbeat_interval_ms,
            group_protocol=params.group_protocol,
            extra=dict(params.variant.settings),
        ),
    )
    load = LoadSettings(
        rate=params.rate, keys=params.keys, skew=params.skew, seed=params.seed,
        record_timestamps=True,
    )  # fmt: skip
    restarts: list[Restart] = []
    costs: list[steady_cost.SteadyCost] = []
    with LocalPipeline(setup) as pipeline:
        assert pipeline.output is not None and pipeline.lag is not None
        pipeline.start_instances()
        loader = pipeline.load(load)
        t0 = time.time()
        with Timeline(pipeline) as timeline:
            for case in cases:
                steady = wait_settled(
                    timeline,
                    params,
                    copies=2 if case.pair else 1,
                    standbys=case.standby_replicas(params),
                )
                if steady is None:
                    raise RuntimeError(
                        f"{prefix}: the instances were not ready, caught up and settled within "
                        f"{params.ready_timeout_s:g} s; see the logs in {setup.base_dir / 'logs'}"
                    )
                log.info("%s: ready, caught up and settled %.0f s after the start", prefix,
                         steady.at - t0)  # fmt: skip
                costs.append(steady_cost.measure(pipeline.instances, params.steady_s))
                if warm_up:
                    break
                if case.broker_roll:
                    assert brokers is not None
                    restarts.append(broker_roll(pipeline, timeline, case, params, brokers))
                elif case.pair:
                    restarts.append(pair_case(pipeline, timeline, case, params))
                elif case.scale:
                    restarts.append(scale(pipeline, timeline, case, params))
                else:
                    run_case = rollout if case.rollout else restart
                    restarts.append(run_case(pipeline, timeline, case, params))
            summary = loader.stop()
            drained = first_sample(timeline, params.drain_timeout_s, lambda s: total_lag(s) == 0)
        pipeline.stop_instances()
        if warm_up:
            log.info(
                "%s: warm-up, not in the table (%.0f s): the brokers have served a pipeline's "
                "joins, transactions and reads",
                prefix,
                time.time() - t0,
            )
            return []
        pipeline.output.wait_until_caught_up(60.0)
        latest, _, _ = pipeline.output.snapshot()
        records = list(pipeline.output.records)
        logs = handoff_phases.read_logs(
            {
                i.name.removeprefix(f"{prefix}-"): i.log_path
                for i in [*pipeline.instances, *pipeline.scaled_in]
            }
        )
    check = check_output(summary.truth, latest)
    if not check.ok:
        report = setup.base_dir / "exactness.json"
        for line in write_exactness_report(report, summary.truth, check, records):
            log.warning("%s: %s", prefix, line)
    latencies = summary.truth.latencies
    results = []
    for event, cost in zip(restarts, costs, strict=True):
        row = _row(event, check, records, latencies, params, broker, logs)
        row.update(_cost_cells(cost))
        if params.engine != ENGINE_PROCESSOR:
            row.update(dict.fromkeys(PROCESSOR_ONLY_COLUMNS))
        if drained is None and not check.ok:
            # Not an exactness failure unless an output value is one the truth never had (a
            # record counted twice) or repeats.
            row["match"] = "NO" if check.duplicates else "lag not drained"
            row["note"] = "; ".join(
                filter(None, [str(row["note"]), f"lag not drained in {params.drain_timeout_s:g} s"])
            )
        if event.case.pair:
            row["note"] = "; ".join(
                filter(
                    None,
                    [
                        str(row["note"]),
                        f"{summary.truth.republished} output records showed a key's value again "
                        "(take-over snapshots; a table reader sees no change)",
                    ],
                )
            )
        if len(restarts) > 1:
            row["note"] = "; ".join(
                filter(
                    None, [str(row["note"]), f"produced, output keys, duplicates: the run {prefix}"]
                )
            )
        plot = out_dir / f"rolling-restart-{event.case.name}{_graph_suffix(params)}.png"
        end = (event.recovered_at or time.time()) + params.tail_s + 5
        plots.lag_and_output(
            plot,
            f"{event.case.name}: {event.case.description}",
            [s for s in timeline.samples if event.stopped_at - 30 <= s.at <= end],
            event.stopped_at - 30,
            _marks(event),
            highlight=event.moved,
        )
        results.append(CaseResult(event.case, row, ok=check.ok, plot=plot))
    return results


def _row(
    event: Restart,
    check: OutputCheck,
    records: Sequence[OutputRecord],
    latencies: Sequence[Latency],
    params: BenchParams,
    broker: str,
    logs: Sequence[handoff_phases.LogEvent],
) -> dict[str, object]:
    end = max(event.recovered_at or 0.0, event.started_at) + params.tail_s
    window = (int(event.stopped_at * 1000), int(end * 1000))
    gaps = zero_output_gaps(records, event.moved, *window)
    during = [lat for lat in latencies if window[0] <= lat.output_ms <= window[1]]
    # A scale case's instances are before's and after's; a new one's counters start at 0.
    seen = dict.fromkeys([*event.before, *event.after]) if event.case.scale else event.before
    others = [n for n in seen if n != event.target]
    target_after = event.after.get(event.target)
    restored_records = (target_after.metric(RESTORED) if target_after else 0.0) + sum(
        metric_delta(event.before.get(n), event.after.get(n), RESTORED) for n in others
    )
    # A pair's sides never hand a partition to each other through the group.
    moves = [] if event.case.pair else handoff_phases.moves(logs, event.stopped_at, end)
    notes = [event.note] if event.note else []
    if event.case.broker_roll:
        notes.append(f"instances that exited: {', '.join(event.exited) or 'none'}")
    if event.recovered_at is None:
        notes.append(f"not processed again within {params.recovery_timeout_s:g} s")
    if event.switched_at is not None:
        # The switch alone, apart from whatever else the case did (a release's rolls).
        at = event.switched_at
        around = (int((at - SWITCH_BEFORE_S) * 1000), int((at + SWITCH_AFTER_S) * 1000))
        switch_gaps = zero_output_gaps(records, event.moved, *around)
        notes.append(
            f"around the switch ({SWITCH_BEFORE_S:g} s before to {SWITCH_AFTER_S:g} s after): "
            f"zero output s max {max(switch_gaps.values(), default=0):.1f} "
            f"({' '.join(f'{p}:{g:.1f}' for p, g in sorted(switch_gaps.items()))})"
        )
    return {
        "case": event.case.name,
        "engine": engine_label(params.engine),
        "group protocol": protocol_label(params.engine, params.group_protocol),
        "settings": params.variant.label,
        "round": params.round_index + 1,
        "broker": broker,
        "standby replicas": event.case.standby_replicas(params),
        "produced": check.produced,
        "output keys": check.keys,
        "match": "yes" if check.ok else "NO",
        "duplicates": check.duplicates,
        "restarted partitions": " ".join(str(p) for p in event.moved),
        "zero output s (max)": max(gaps.values(), default=None),
        "zero output s per partition": " ".join(f"{p}:{g:.1f}" for p, g in sorted(gaps.items())),
        "late > 10 s %": late_percent([lat.seconds for lat in during]),
        "max latency s (restarted)": max(
            (lat.seconds for lat in during if lat.partition in event.moved), default=None
        ),
        "max latency s (others)": max(
            (lat.seconds for lat in during if lat.partition not in event.moved), default=None
        ),
        "rebalances (others)": _grown(event, others, "processor_rebalances_total"),
        "assigned (others)": _grown(event, others, "processor_partitions_assigned_total"),
        "revoked (others)": _grown(event, others, "processor_partitions_revoked_total"),
        # A rollout restarts every instance, whose counters begin again at 0: no sum is right.
        "restored records": None if _restarts_all(event.case) else int(restored_records),
        "instance exits": len(event.exited) if event.case.broker_roll else None,
        "down s": None
        if event.case.pair or event.case.scale
        else event.started_at - event.stopped_at,
        # The restarted instance's own clock: process start to its first committed batch.
        "start to first batch s": (
            (target_after.metric(START_DURATION) or None)
            if target_after and not _restarts_all(event.case)
            else None
        ),
        "processed again s": (
            event.recovered_at - event.stopped_at if event.recovered_at is not None else None
        ),
        "moved partitions: longest gap by the logs, s": handoff_phases.summary(moves),
        "moves onto a copy": handoff_phases.warm_share(moves),
        "moves onto a just-started instance": handoff_phases.fresh_share(moves),
        "note": "; ".join(notes),
    }


def _cost_cells(cost: steady_cost.SteadyCost) -> dict[str, object]:
    """The instances' steady cost before the case (`steady_cost`): what the copies cost."""
    return {
        "steady CPU, cores": round(cost.cpu_cores, 2),
        "standby records/s": round(cost.standby_records_s),
        "state on disk, MiB": round(cost.state_mib, 1),
    }


def _restarts_all(case: Case) -> bool:
    """Whether the case restarts instances whose counters then begin again at 0."""
    return case.rollout or case.pair


def _grown(event: Restart, names: Sequence[str], metric: str) -> int | None:
    if _restarts_all(event.case):
        return None  # instances restarted: their counters began again at 0
    return int(sum(metric_delta(event.before.get(n), event.after.get(n), metric) for n in names))


def _marks(event: Restart) -> dict[str, float]:
    marks = {"stop": event.stopped_at, "start": event.started_at}
    if event.recovered_at is not None:
        marks["processed again"] = event.recovered_at
    return marks
