"""The rolling-restart benchmark: one instance restarted while page views keep flowing.

The articles this project comes from read the processing gap of a pod restart off consumer-lag
graphs (45-48 s with default settings). This drives the local pipeline (N instances as local
processes, `app.local`) through the scenario matrix and measures, per case:

- produced and counted page views (must match) and duplicates in the read_committed output;
- the processing gap of the restarted instance's partitions: the longest stretch without any
  output record, and the largest event-time-to-output latency during the restart (and, for
  comparison, the largest latency of the other instances' partitions meanwhile);
- rebalances and revoked partitions the other instances saw, and changelog records restored.

Honest about the broker: on the embedded Tansu broker, multi-member static membership with
cooperative-sticky does not hand over revoked partitions (DESIGN.md), so the cases that depend on
Apache Kafka's group coordinator are not run there; their row says so. Run them with
`--bootstrap-servers` pointing at a real cluster.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.bench import plots
from app.bench.measure import (
    Timeline,
    TimelineSample,
    metric_delta,
    output_latencies,
    zero_output_gaps,
)
from app.bench.table import write_table
from app.loadgen import LoadSettings
from app.local.instances import InstanceOptions, InstanceStatus, PipelineNames
from app.local.observe import check_counts
from app.local.pipeline import LocalPipeline, PipelineSetup

log = logging.getLogger("app.bench")

NEEDS_COORDINATOR = (
    "needs Apache Kafka's group coordinator: the embedded broker does not hand revoked "
    "partitions over between static members (DESIGN.md); run with --bootstrap-servers"
)


@dataclass(frozen=True)
class Case:
    """One scenario of the matrix."""

    name: str
    description: str
    stateful: bool = True  # False: dynamic membership, leaves the group on close
    wipe_state: bool = False
    # Down longer than the session timeout (failover) instead of restarting at once.
    outlive_session: bool = False
    needs_apache: str | None = None


CASES: tuple[Case, ...] = (
    Case("static-kept", "static membership, restart within the session timeout, state kept"),
    Case(
        "static-wiped",
        "static membership, restart within the session timeout, state dir wiped (lost PVC)",
        wipe_state=True,
    ),
    Case(
        "dynamic-kept",
        "dynamic membership (no group.instance.id: stateful=false), state dir kept",
        stateful=False,
    ),
    Case(
        "static-failover",
        "static membership, down longer than the session timeout (failover)",
        outlive_session=True,
        needs_apache=NEEDS_COORDINATOR,
    ),
    Case(
        "stateless-leave",
        "stateless variant: leaves the group on close, no state dir (an emptyDir)",
        stateful=False,
        wipe_state=True,
    ),
)
CASE_NAMES = tuple(c.name for c in CASES)


@dataclass(frozen=True)
class BenchParams:
    """Sizes and timings of every case (small by default: a case takes a minute or two)."""

    instances: int = 2
    partitions: int = 4
    rate: float = 100.0
    keys: int = 40
    skew: float = 1.1
    session_timeout_ms: int = 20_000
    heartbeat_interval_ms: int = 2_000
    steady_s: float = 10.0  # steady processing before the restart
    tail_s: float = 10.0  # after recovery, before the load stops
    ready_timeout_s: float = 240.0
    recovery_timeout_s: float = 240.0
    drain_timeout_s: float = 120.0
    seed: int = 42


@dataclass
class CaseResult:
    """One row of the table, and where its graph is."""

    case: Case
    row: dict[str, object] = field(default_factory=dict)
    ok: bool = True
    plot: Path | None = None


COLUMNS = (
    "case",
    "broker",
    "produced",
    "counted",
    "match",
    "duplicates",
    "restarted partitions",
    "zero output s (max)",
    "zero output s per partition",
    "max latency s (restarted)",
    "max latency s (others)",
    "rebalances (others)",
    "revoked (others)",
    "restored records",
    "down s",
    "ready again s",
    "note",
)


def run_matrix(
    cases: Sequence[Case],
    params: BenchParams,
    out_dir: Path,
    bootstrap_servers: str,
    embedded: bool,
) -> list[CaseResult]:
    """Run each case on its own topics and group (one broker for all); write table and graphs."""
    results = []
    for case in cases:
        if embedded and case.needs_apache:
            results.append(
                CaseResult(
                    case,
                    {
                        "case": case.name,
                        "broker": "embedded",
                        "note": f"not run: {case.needs_apache}",
                    },
                )
            )
            continue
        log.info("case %s: %s", case.name, case.description)
        results.append(run_case(case, params, out_dir, bootstrap_servers, embedded))
    text = write_table(out_dir, "rolling-restart", COLUMNS, [r.row for r in results])
    print(text, flush=True)
    print(f"table: {out_dir / 'rolling-restart.md'} and .csv; graphs: {out_dir}/*.png", flush=True)
    return results


def run_case(
    case: Case, params: BenchParams, out_dir: Path, bootstrap_servers: str, embedded: bool
) -> CaseResult:
    """Run one case (see the module docstring); its row."""
    run_id = uuid.uuid4().hex[:6]
    prefix = f"bench-{case.name}-{run_id}"
    setup = PipelineSetup(
        base_dir=out_dir / "state" / prefix,
        instances=params.instances,
        partitions=params.partitions,
        bootstrap_servers=bootstrap_servers,
        one_record_per_batch=embedded,
        names=PipelineNames(prefix, f"{prefix}-page-views", f"{prefix}-page-view-counts"),
        options=InstanceOptions(
            stateful=case.stateful,
            session_timeout_ms=params.session_timeout_ms,
            heartbeat_interval_ms=params.heartbeat_interval_ms,
        ),
    )
    load = LoadSettings(
        rate=params.rate,
        keys=params.keys,
        skew=params.skew,
        seed=params.seed,
        record_timestamps=True,
    )
    with LocalPipeline(setup) as pipeline:
        assert pipeline.output is not None and pipeline.lag is not None
        pipeline.start_instances()
        loader = pipeline.load(load)
        t0 = time.time()
        timeline = Timeline(pipeline).start()
        steady = wait_until(
            timeline, params.ready_timeout_s, lambda s: _all_ready(s) and _caught_up(s, params)
        )
        if steady is None:
            raise RuntimeError(
                f"case {case.name}: the instances were not ready and caught up within "
                f"{params.ready_timeout_s:g} s; see the logs in {setup.base_dir / 'logs'}"
            )
        time.sleep(params.steady_s)
        target = pipeline.instances[-1]
        before = {s.name: s for s in timeline.take().instances}
        moved = tuple(before[target.name].partitions or ())
        stopped_at = time.time()
        target.stop()
        if case.wipe_state:
            target.wipe_state()
        down_until = stopped_at + (
            params.session_timeout_ms / 1000 + 10 if case.outlive_session else 0
        )
        time.sleep(max(0.0, down_until - time.time()))
        started_at = time.time()
        target.start()
        recovered = wait_until(
            timeline,
            params.recovery_timeout_s,
            lambda s: _status(s, target.name).ready and _caught_up(s, params),
        )
        recovered_at = recovered.at if recovered is not None else time.time()
        time.sleep(params.tail_s)
        after = {s.name: s for s in timeline.take().instances}
        summary = loader.stop()
        drained = wait_until(timeline, params.drain_timeout_s, lambda s: _total_lag(s) == 0)
        final = {s.name: s for s in timeline.take().instances}
        timeline.stop()
        pipeline.stop_instances()
        pipeline.output.wait_until_caught_up(60.0)
        latest, _, duplicates = pipeline.output.snapshot()
        records = list(pipeline.output.records)
    check = check_counts(summary.per_key, latest, duplicates)
    window = (int(stopped_at * 1000), int((recovered_at + params.tail_s) * 1000))
    gaps = zero_output_gaps(records, moved, *window)
    latencies = [
        lat
        for lat in output_latencies(records, summary.timestamps)
        if window[0] <= lat.output_ms <= window[1]
    ]
    others = [i.name for i in pipeline.instances if i.name != target.name]
    restored = final[target.name].metric("processor_restore_records_total") + sum(
        metric_delta(before.get(n), final.get(n), "processor_restore_records_total") for n in others
    )
    notes = []
    if recovered is None:
        notes.append(f"not recovered within {params.recovery_timeout_s:g} s")
    if drained is None:
        notes.append("lag not drained")
    if embedded:
        notes.append("embedded broker: changelog not compacted, so restores read every update")
    row = {
        "case": case.name,
        "broker": "embedded" if embedded else "apache",
        "produced": check.produced,
        "counted": check.counted,
        "match": "yes" if check.ok else "NO",
        "duplicates": check.duplicates,
        "restarted partitions": " ".join(str(p) for p in moved),
        "zero output s (max)": max(gaps.values(), default=None),
        "zero output s per partition": " ".join(f"{p}:{g:.1f}" for p, g in sorted(gaps.items())),
        "max latency s (restarted)": max(
            (lat.seconds for lat in latencies if lat.partition in moved), default=None
        ),
        "max latency s (others)": max(
            (lat.seconds for lat in latencies if lat.partition not in moved), default=None
        ),
        "rebalances (others)": int(
            sum(
                metric_delta(before.get(n), after.get(n), "processor_rebalances_total")
                for n in others
            )
        ),
        "revoked (others)": int(
            sum(
                metric_delta(before.get(n), after.get(n), "processor_partitions_revoked_total")
                for n in others
            )
        ),
        "restored records": int(restored),
        "down s": started_at - stopped_at,
        "ready again s": recovered_at - stopped_at if recovered is not None else None,
        "note": "; ".join(notes),
    }
    plot = out_dir / f"rolling-restart-{case.name}.png"
    plots.lag_and_output(
        plot,
        f"{case.name}: {case.description}",
        timeline.samples,
        records,
        t0,
        {"stop": stopped_at, "start": started_at, "ready": recovered_at},
        highlight=moved,
    )
    return CaseResult(case, row, ok=check.ok, plot=plot)


def wait_until(timeline: Timeline, timeout_s: float, condition: object) -> TimelineSample | None:
    """The first sample (taken every half second) for which `condition(sample)` holds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sample = timeline.take()
        if condition(sample):  # type: ignore[operator]
            return sample
        time.sleep(0.5)
    return None


def _status(sample: TimelineSample, name: str) -> InstanceStatus:
    return next(s for s in sample.instances if s.name == name)


def _all_ready(sample: TimelineSample) -> bool:
    return all(s.ready for s in sample.instances)


def _total_lag(sample: TimelineSample) -> int:
    return sum(p.lag for p in sample.lag.values())


def _caught_up(sample: TimelineSample, params: BenchParams) -> bool:
    """Every partition committed something, and the lag is at most ~5 s of input."""
    committed = all(p.committed is not None for p in sample.lag.values())
    return committed and _total_lag(sample) <= params.rate * 5
