"""The rolling-restart benchmark: one instance restarted while page views keep flowing.

The articles this project comes from read the processing gap of a pod restart off consumer-lag
graphs (45-48 s with default settings). This drives the local pipeline (N instances as local
processes, `app.devkit.local`) through the scenario matrix and measures, per case:

- produced records, and whether the read_committed output ends exactly as the aggregation says it
  must (`app.devkit.truth`), with no output record repeated or going back (duplicates);
- the processing gap of the restarted instance's partitions: the longest stretch without any
  output record, and the largest event-time-to-output latency during the restart (and, for
  comparison, the largest latency of the other instances' partitions meanwhile);
- rebalances and revoked partitions the other instances saw, and changelog records restored.

Every case runs on Apache Kafka: the bench's own 3 KRaft nodes (`app.devkit.kraft_cluster`), or the
cluster `--bootstrap-servers` names; the broker cases need the bench's own nodes, which it
restarts. Every row names its broker.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from confluent_kafka.admin import AdminClient

from app.admin.broker_readiness import judge
from app.admin.pair_release import ReleaseStepError, other_side, release
from app.admin.pair_switch import (
    PairClients,
    SwitchRefusedError,
    read_control,
    switch,
    wait_taken,
)
from app.clients.client_properties import ClientConfig
from app.clients.waiting import poll_until
from app.devkit.bench import coordinators, handoff_phases, plots, steady_cost
from app.devkit.bench.measure import (
    Timeline,
    TimelineSample,
    metric_delta,
    zero_output_gaps,
)
from app.devkit.bench.table import Row, write_table
from app.devkit.bench.variant import Variant
from app.devkit.exactness_report import write_exactness_report
from app.devkit.kafka_streams import STREAMS_PROTOCOL
from app.devkit.kraft_cluster import HOST, KraftCluster
from app.devkit.loadgen import LoadSettings
from app.devkit.local.instances import (
    LOCAL_SESSION_TIMEOUT_MS,
    InstanceOptions,
    InstanceStatus,
    ProcessorProcess,
)
from app.devkit.local.observe import PartitionLag
from app.devkit.local.pipeline import (
    ENGINE_KAFKA_STREAMS,
    ENGINE_PROCESSOR,
    LocalPipeline,
    PipelineSetup,
    engine_label,
)
from app.devkit.local.roll import RollFailed, RollStep, roll_instances, wait_available
from app.devkit.truth import Latency, OutputCheck, OutputRecord, check_output
from policies.contract.processor_keys import (
    DEFAULTS,
    MEMBERSHIP_HANDOFF,
    MEMBERSHIP_STATIC,
    PROTOCOL_CONSUMER,
)
from policies.contract.topic_specs import PipelineNames

log = logging.getLogger("app.devkit.bench")

NEEDS_BROKERS = (
    "needs brokers the bench can restart: run without --bootstrap-servers (the bench then "
    "starts 3 KRaft nodes of its own)"
)


SCALE_OUT, SCALE_IN = "scale-out", "scale-in"


@dataclass(frozen=True)
class Case:
    """One scenario of the matrix."""

    name: str
    description: str
    stateful: bool = True  # False: dynamic membership, leaves the group on close
    membership_mode: str = MEMBERSHIP_STATIC
    wipe_state: bool = False
    # Down longer than the session timeout (failover) instead of restarting at once.
    outlive_session: bool = False
    # Every instance restarted in turn, highest ordinal first, each once the previous one is
    # ready and has been for `min_ready_s` (what the StatefulSet controller does in a roll).
    rollout: bool = False
    # Keeps `num.standby.replicas` warm copies (hand-off mode always does: it hands to them).
    standbys: bool = False
    # The brokers restarted in turn, as the Kafka StatefulSet rolls them; no instance restarts.
    broker_roll: bool = False
    # Instead, one broker killed (SIGKILL, a lost node) and started `broker_down_s` later.
    broker_kill: bool = False
    # Which broker: the one with this role for the pipeline (`coordinators.ROLES`), not the
    # highest node (the Kafka StatefulSet's last pod).
    broker_role: str | None = None
    # The killed broker stays lost until the pipeline has processed again and the tail is over;
    # only then is it started, so the next case finds every broker.
    broker_stays_down: bool = False
    # The instance is SIGKILLed (a crash, an OOM kill, a lost node) instead of stopped.
    crash: bool = False
    # It stays down until the others process its partitions (a node that never comes back);
    # only then is it started again, so the next case finds the whole pipeline.
    stays_down: bool = False
    # An active/standby pair (`instances` per side): the case acts on the pair as a whole.
    pair: bool = False
    # The deployment scaled instead: out to `scale_to` instances, or in back to `instances`.
    scale: str | None = None

    def standby_replicas(self, params: BenchParams) -> int:
        """The case's `num.standby.replicas`."""
        keeps = self.standbys or self.membership_mode == MEMBERSHIP_HANDOFF
        return params.standby_replicas if keeps else 0


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
    ),
    Case(
        "standby-failover",
        "static membership with standbys, down longer than the session timeout: the others "
        "take its partitions over from their warm copies",
        standbys=True,
        outlive_session=True,
    ),
    Case(
        "handoff",
        "membership.mode=handoff: leaves the group on SIGTERM, restarts warm, then joins; "
        "state kept",
        membership_mode=MEMBERSHIP_HANDOFF,
    ),
    Case(
        "handoff-wiped",
        "membership.mode=handoff, state dir wiped (a lost PVC, a new pod): the instance "
        "restarts with no copy, catches up the copies of what it may be handed, then joins",
        membership_mode=MEMBERSHIP_HANDOFF,
        wipe_state=True,
    ),
    Case(
        "handoff-crash-restart",
        "membership.mode=handoff, the instance SIGKILLed and started again at once (the "
        "kubelet restarting a crashed container): its partitions wait for its session to "
        "expire, then move to warm standbys",
        membership_mode=MEMBERSHIP_HANDOFF,
        crash=True,
    ),
    Case(
        "handoff-crash-gone",
        "membership.mode=handoff, the instance SIGKILLed and not back (a lost node): the "
        "others take its partitions over from their warm copies once its session expires",
        membership_mode=MEMBERSHIP_HANDOFF,
        crash=True,
        stays_down=True,
    ),
    Case(
        "rollout-static",
        "rolling update of every instance, static membership, state kept",
        rollout=True,
    ),
    Case(
        "rollout-handoff",
        "rolling update of every instance, membership.mode=handoff, state kept",
        membership_mode=MEMBERSHIP_HANDOFF,
        rollout=True,
    ),
    Case(
        "pair-switch",
        "active/standby pair, each side in hand-off mode: a release under load as "
        "`python -m app.admin.pair_release` does it (roll the idle side, wait until it has "
        "caught up, switch, wait for the take-over, roll the other side)",
        membership_mode=MEMBERSHIP_HANDOFF,
        pair=True,
    ),
    Case(
        "pair-failover",
        "active/standby pair: every instance of the active side SIGKILLed at once (a bad "
        "release, a lost zone), the other side switched to at once (`switch --force`), the "
        "killed side started again (it comes back idle)",
        membership_mode=MEMBERSHIP_HANDOFF,
        pair=True,
        crash=True,
    ),
    Case(
        SCALE_OUT,
        "membership.mode=handoff, scaled out under load to --scale-to instances as the "
        "StatefulSet controller adds pods: each new one (an empty volume) warms the copies of "
        "what it may be handed, joins, and the next starts once it has been ready "
        "--min-ready-s",
        membership_mode=MEMBERSHIP_HANDOFF,
        scale=SCALE_OUT,
    ),
    Case(
        SCALE_IN,
        "membership.mode=handoff, scaled in under load back to --instances, highest ordinal "
        "first, each removed pod (SIGTERM) handing its partitions to warm copies before the "
        "next one stops",
        membership_mode=MEMBERSHIP_HANDOFF,
        scale=SCALE_IN,
    ),
    Case(
        "broker-roll",
        "rolling restart of the 3 brokers under load (highest node first, each once back in "
        "every ISR); the instances keep running",
        broker_roll=True,
    ),
    Case(
        "broker-kill",
        "one broker killed (SIGKILL, a lost node) under load and started again after "
        "--broker-down-s; the instances keep running",
        broker_roll=True,
        broker_kill=True,
    ),
    *(
        Case(
            f"broker-kill-{role}",
            f"the broker that is the pipeline's {what} killed (SIGKILL, a lost node) under "
            "load and started again after --broker-down-s; the instances keep running",
            membership_mode=MEMBERSHIP_HANDOFF,
            broker_roll=True,
            broker_kill=True,
            broker_role=role,
        )
        for role, what in (
            (coordinators.GROUP_COORDINATOR, "group's coordinator"),
            (coordinators.TRANSACTION_COORDINATOR, "producers' transaction coordinator"),
            (coordinators.NEITHER, "neither group nor transaction coordinator"),
        )
    ),
    Case(
        "broker-lost-group-coordinator",
        "the broker that is the pipeline's group coordinator killed (SIGKILL) under load and "
        "not started again until the pipeline has processed again (a node that never comes "
        "back); the instances keep running",
        membership_mode=MEMBERSHIP_HANDOFF,
        broker_roll=True,
        broker_kill=True,
        broker_role=coordinators.GROUP_COORDINATOR,
        broker_stays_down=True,
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
    # How many instances the scale-out case grows the deployment to.
    scale_to: int = 3
    partitions: int = 4
    rate: float = 100.0
    keys: int = 40
    skew: float = 1.1
    session_timeout_ms: int = LOCAL_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = int(DEFAULTS["consumer.heartbeat.interval.ms"])
    # The consumer group protocols to run every case under, one after another (KIP-848's
    # `consumer`: the session and heartbeat are the group's own configs).
    group_protocols: tuple[str, ...] = (DEFAULTS["consumer.group.protocol"],)
    group_protocol: str = DEFAULTS["consumer.group.protocol"]  # the one a pipeline runs
    # Contract keys to run every case under, one variant after another (the defaults alone
    # unless `--set` adds more): a setting's effect on a restart, measured in one run.
    variants: tuple[Variant, ...] = field(default_factory=lambda: (Variant(),))
    variant_index: int = 0  # the one a pipeline runs
    # What the instances run, every case under each: the processor, and Kafka Streams beside it
    # on the same brokers (`app.devkit.kafka_streams`; the classic protocol, no --set).
    engines: tuple[str, ...] = (ENGINE_PROCESSOR,)
    engine: str = ENGINE_PROCESSOR  # the one a pipeline runs
    # num.standby.replicas of the cases that keep standbys (hand-off needs a copy to hand to).
    standby_replicas: int = 1
    steady_s: float = 10.0  # steady processing before the restart
    min_ready_s: float = 10.0  # a rollout's minReadySeconds (the dev stack's)
    # "Caught up": at most this many seconds of input not yet committed (batches take 1-10 s
    # on a busy 2-core machine).
    caught_up_s: float = 20.0
    tail_s: float = 10.0  # after recovery, before the load stops
    ready_timeout_s: float = 240.0
    broker_down_s: float = 120.0  # how long the broker-kill case keeps its broker down
    # How long a restarted instance stays down from its stop to its start: 0 restarts it as
    # soon as it has exited (the kubelet's restart of a container); a pod replaced in a roll is
    # down while it terminates and is scheduled again (Kafka Streams' restart measured: 5 s).
    down_s: float = 0.0
    recovery_timeout_s: float = 240.0
    drain_timeout_s: float = 300.0
    seed: int = 42

    @property
    def variant(self) -> Variant:
        """The variant a pipeline runs."""
        return self.variants[self.variant_index]


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
    "standby records/s",
)
RESTORED = "processor_restore_records_total"
START_DURATION = "processor_start_duration_seconds"
# A pair's switch is reported on its own: the output from this long before its record to this
# long after it.
SWITCH_BEFORE_S = 5.0
SWITCH_AFTER_S = 20.0
# The field's bar: 99.99 % of aggregates available within 10 seconds (DESIGN.md).
LATE_S = 10.0

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
    results: dict[tuple[str, str, str, int], CaseResult] = {}

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
    for engine, protocol, index in runs:
        run = replace(params, engine=engine, group_protocol=protocol, variant_index=index)
        runnable = []
        for case in cases:
            reason = _not_runnable(case, engine, brokers)
            if reason is not None:
                row = {
                    "case": case.name,
                    "engine": engine_label(engine),
                    "group protocol": protocol_label(run),
                    "settings": run.variant.label,
                    "broker": broker,
                    "note": f"not run: {reason}",
                }
                results[case.name, engine, protocol, index] = CaseResult(case, row)
            else:
                runnable.append(case)
        for pipeline_kind in dict.fromkeys(kind(c) for c in runnable):
            group = [c for c in runnable if kind(c) == pipeline_kind]
            for result in run_group(
                group, run, out_dir, bootstrap_servers, broker, brokers, client
            ):
                results[result.case.name, engine, protocol, index] = result
    # Each case's rows side by side, one per engine, protocol and variant.
    ordered = [results[c.name, e, p, i] for c in cases for e, p, i in runs]
    text = write_table(out_dir, "rolling-restart", COLUMNS, [r.row for r in ordered])
    print(text, flush=True)
    print(f"table: {out_dir / 'rolling-restart.md'} and .csv; graphs: {out_dir}/*.png", flush=True)
    return ordered


def protocol_label(params: BenchParams) -> str:
    """The group protocol a row ran under: Kafka Streams' own under `consumer`."""
    if params.engine == ENGINE_KAFKA_STREAMS and params.group_protocol == PROTOCOL_CONSUMER:
        return f"{STREAMS_PROTOCOL} (KIP-1071)"
    return params.group_protocol


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
    """A graph's name suffix: none for the classic protocol and the first variant (the
    defaults': the names the docs link), else the protocol and the variant's place (`-set1` for
    the first `--set`), so two equal variants still get a graph each."""
    classic = params.group_protocol == DEFAULTS["consumer.group.protocol"]
    suffix = "" if classic else f"-{params.group_protocol}"
    suffix += "" if params.engine == ENGINE_PROCESSOR else f"-{params.engine}"
    return suffix + (f"-set{params.variant_index}" if params.variant_index else "")


@dataclass
class Restart:
    """What happened around one restart of one instance."""

    case: Case
    target: str
    moved: tuple[int, ...]  # the target's partitions before the restart
    before: dict[str, InstanceStatus]
    stopped_at: float
    started_at: float
    recovered_at: float | None = None
    after: dict[str, InstanceStatus] = field(default_factory=dict)
    # Instances that exited during the case by themselves (a broker roll restarts none).
    exited: tuple[str, ...] = ()
    # A pair's switch: when its record was written (the output around it is reported apart).
    switched_at: float | None = None
    # What the case wants the table to say about it (which broker had which role).
    note: str = ""


def run_group(
    cases: Sequence[Case], params: BenchParams, out_dir: Path, bootstrap_servers: str,
    broker: str, brokers: KraftCluster | None = None, client: ClientConfig | None = None,
) -> list[CaseResult]:  # fmt: skip
    """One pipeline (own topics and group), one restart (or roll) per case."""
    stateful, mode = cases[0].stateful, cases[0].membership_mode
    kind = (mode if stateful else "dynamic") + ("-standby" if cases[0].standbys else "")
    kind += "-pair" if cases[0].pair else ""
    kind += "" if params.engine == ENGINE_PROCESSOR else f"-{params.engine}"
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
            drained = first_sample(timeline, params.drain_timeout_s, lambda s: _total_lag(s) == 0)
        pipeline.stop_instances()
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


def restart(
    pipeline: LocalPipeline, timeline: Timeline, case: Case, params: BenchParams
) -> Restart:
    """Stop (or kill) the last instance, wipe its state if the case says so, keep it down if
    the case says so, start it, and wait until its partitions are processed again: by it, or
    after a crash by whichever instance has them."""
    target = pipeline.instances[-1]
    sample = timeline.take()
    before = {s.name: s for s in sample.instances}
    moved = tuple(before[target.name].partitions or ())
    log.info("case %s: %s; stopping %s (partitions %s)", case.name, case.description,
             target.name, list(moved))  # fmt: skip
    stopped_at = time.time()
    if case.crash:
        target.kill()
    else:
        target.stop()
    # Where the partitions stand once the stopped instance's last batch has committed: only
    # progress past this is processing again. After a crash, where they stood before it: its
    # open transaction keeps their committed offsets unfetchable until it is aborted, and the
    # restart (at once, as the kubelet does) must not wait for a lookup.
    at_stop = sample if case.crash else timeline.take()
    # "Processed again" after a crash: past every record that existed at the kill (the sample
    # before it may miss the batch the killed instance committed just before dying).
    passed = (
        _at_ends(at_stop.lag, pipeline.lag.ends()) if case.crash and pipeline.lag else at_stop.lag
    )
    if case.wipe_state:
        target.wipe_state()
    recovered = None
    if case.stays_down:
        recovered = first_sample(
            timeline, params.recovery_timeout_s, lambda s: _advanced(s, passed, moved)
        )
    else:
        # Down past the session timeout (a failover), else for `down_s` (a restart).
        down_s = params.session_timeout_ms / 1000 + 10 if case.outlive_session else params.down_s
        time.sleep(max(0.0, stopped_at + down_s - time.time()))
    started_at = time.time()
    target.start()
    event = Restart(case, target.name, moved, before, stopped_at, started_at)
    if not case.stays_down:
        recovered = first_sample(
            timeline,
            params.recovery_timeout_s,
            # After a crash its partitions count as back wherever they are processed.
            lambda s: (case.crash or _status(s, target.name).ready) and _advanced(s, passed, moved),
        )
    if recovered is not None:
        event.recovered_at = recovered.at
        log.info("case %s: processed again %.0f s after the stop", case.name,
                 recovered.at - stopped_at)  # fmt: skip
    time.sleep(params.tail_s)
    event.after = {s.name: s for s in timeline.take().instances}
    return event


def rollout(
    pipeline: LocalPipeline, timeline: Timeline, case: Case, params: BenchParams
) -> Restart:
    """Restart every instance in turn as the StatefulSet controller rolls pods: highest ordinal
    first, the next one only when the previous is ready and has stayed so `min_ready_s`."""
    sample = timeline.take()
    before = {s.name: s for s in sample.instances}
    every = tuple(sorted(p for s in sample.instances for p in (s.partitions or ())))
    log.info("case %s: %s (partitions %s)", case.name, case.description, list(every))
    stopped_at = time.time()
    started = [stopped_at]

    def note_start(step: RollStep) -> None:
        if step.waiting_for == "ready":
            started.append(time.time())

    try:
        roll_instances(
            pipeline.instances, params.min_ready_s, params.recovery_timeout_s, note_start
        )
    except RollFailed as exc:
        log.warning("case %s: %s", case.name, exc)
    event = Restart(case, "every instance", every, before, stopped_at, started[-1])
    return _all_processing_again(timeline, event, params, "rollout done, every partition processed")


def scale(pipeline: LocalPipeline, timeline: Timeline, case: Case, params: BenchParams) -> Restart:
    """Scale the deployment out to `scale_to` instances (each new one once the one before has
    been ready `min_ready_s`, as `OrderedReady` adds pods) or in back to `instances` (highest
    ordinal first, each once the one before has stopped); then wait until every instance is
    ready and every partition processed again. Every partition is watched: any may move."""
    count = params.scale_to if case.scale == SCALE_OUT else params.instances
    sample = timeline.take()
    before = {s.name: s for s in sample.instances}
    every = tuple(range(params.partitions))
    log.info("case %s: %s; %d -> %d instances", case.name, case.description, len(before), count)
    stopped_at = time.time()

    def available(instance: ProcessorProcess) -> None:
        wait_available(instance, params.min_ready_s, params.recovery_timeout_s, threading.Event())

    try:
        pipeline.scale_to(count, available)
    except RollFailed as exc:
        log.warning("case %s: %s", case.name, exc)
    target = f"{len(before)} -> {count} instances"
    event = Restart(case, target, every, before, stopped_at, time.time())
    return _all_processing_again(timeline, event, params, f"scaled to {count}")


def _all_processing_again(
    timeline: Timeline, event: Restart, params: BenchParams, done: str
) -> Restart:
    """Wait until every instance is ready and every partition processed past where it stood
    now, then `tail_s`; `event` with when that was and the instances' status after."""
    at_end = timeline.take()
    recovered = first_sample(
        timeline,
        params.recovery_timeout_s,
        lambda s: _all_ready(s) and _advanced(s, at_end.lag, event.moved),
    )
    if recovered is not None:
        event.recovered_at = recovered.at
        log.info("case %s: %s %.0f s after it began", event.case.name, done,
                 recovered.at - event.stopped_at)  # fmt: skip
    time.sleep(params.tail_s)
    event.after = {s.name: s for s in timeline.take().instances}
    return event


def pair_case(
    pipeline: LocalPipeline, timeline: Timeline, case: Case, params: BenchParams
) -> Restart:
    """`pair-switch`: the release procedure (`app.admin.pair_release`), each side's upgrade a
    roll of its instances. `pair-failover`: every instance of the active side killed, the other
    side switched to with `--force` at once (what an automated failover would do), the killed
    side started again."""
    clients = PairClients(
        {**pipeline.setup.client.resolved, "bootstrap.servers": pipeline.bootstrap_servers},
        pipeline.names.pair_control_topic,
        pipeline.names.input_topic,
        {d.side: d.application_id for d in pipeline.names.deployments(pair=True) if d.side},
    )
    sample = timeline.take()
    before = {s.name: s for s in sample.instances}
    every = tuple(range(params.partitions))
    log.info("case %s: %s", case.name, case.description)
    stopped_at = time.time()
    active = read_control(clients).active().side
    switched: list[float] = []
    if case.crash:
        for instance in pipeline.sides[active]:
            instance.kill()
        switch(clients, other_side(active), force=True, max_lag=0)
        switched.append(time.time())
        if not wait_taken(clients, params.recovery_timeout_s):
            log.warning("case %s: the take-over did not finish", case.name)
        for instance in pipeline.sides[active]:
            instance.start()
    else:

        def upgrade(side: str) -> None:
            roll_instances(pipeline.sides[side], params.min_ready_s, params.recovery_timeout_s)

        try:
            release(clients, upgrade, max_lag=int(params.rate * params.caught_up_s),
                    timeout_s=params.recovery_timeout_s,
                    on_switch=lambda: switched.append(time.time()))  # fmt: skip
        except (ReleaseStepError, SwitchRefusedError, RollFailed) as exc:
            log.warning("case %s: %s", case.name, exc)
    event = Restart(case, "the pair", every, before, stopped_at, stopped_at)
    event.switched_at = switched[0] if switched else None
    return _all_processing_again(timeline, event, params, "done, both sides processing")


def broker_roll(
    pipeline: LocalPipeline,
    timeline: Timeline,
    case: Case,
    params: BenchParams,
    brokers: KraftCluster,
) -> Restart:
    """Restart every broker in turn as the Kafka StatefulSet rolls them: highest node first
    (SIGTERM, a controlled shutdown), the next one once this one is ready as its pod's
    readiness sidecar judges it (back in every ISR) and has been for `min_ready_s`. With
    `case.broker_kill`: one node killed (the highest, or the one with `case.broker_role`) and
    started `broker_down_s` later, or, with `case.broker_stays_down`, once the pipeline has
    processed again without it."""
    sample = timeline.take()
    before = {s.name: s for s in sample.instances}
    every = tuple(sorted(p for s in sample.instances for p in (s.partitions or ())))
    log.info("case %s: %s", case.name, case.description)
    nodes = [n.node_id for n in brokers.nodes]
    victims, note = (nodes[-1:] if case.broker_kill else nodes[::-1]), ""
    if case.broker_role is not None:
        client = {"bootstrap.servers": pipeline.bootstrap_servers, **pipeline.setup.client.resolved}
        app_id = pipeline.setup.names.application_id
        # The group id and every transactional id derive from the application id (both engines).
        found = coordinators.find(client, app_id, app_id)
        victim, note = found.pick(case.broker_role, nodes)
        victims, note = [victim], f"broker {victim} killed; {note}"
    stopped_at = started_at = time.time()
    recovered_at = None
    for node_id in victims:
        log.info("case %s: restarting broker node %d", case.name, node_id)
        if case.broker_kill:
            # Processed again: every partition committed past where it stood at the kill (not
            # at the case's start: finding the coordinators took a second or two).
            at_kill = timeline.take()
            brokers.kill_node(node_id)
            if case.broker_stays_down:
                recovered = first_sample(
                    timeline,
                    params.recovery_timeout_s,
                    partial(_advanced, before=at_kill.lag, partitions=every),
                )
                recovered_at = recovered.at if recovered is not None else None
                time.sleep(params.tail_s)
            else:
                time.sleep(params.broker_down_s)
        else:
            brokers.stop_node(node_id)
        started_at = time.time()
        brokers.start_node(node_id)
        node = brokers.node(node_id)
        beside = AdminClient({"bootstrap.servers": f"{HOST}:{node.broker_port}", "log_level": 0})
        ready = partial(_judged_ready, beside, node_id)
        if poll_until(ready, params.recovery_timeout_s, interval_s=1.0) is None:
            log.warning("case %s: node %d not ready within %g s: %s", case.name, node_id,
                        params.recovery_timeout_s, judge(beside, node_id).reason)  # fmt: skip
        log.info("case %s: node %d ready %.0f s after its stop", case.name, node_id,
                 time.time() - started_at)  # fmt: skip
        time.sleep(params.min_ready_s)
    at_end = timeline.take()
    target = "one broker" if case.broker_kill else "every broker"
    if case.broker_stays_down:
        # Measured while it was lost: its return (after the window) is the next case's start.
        event = Restart(case, target, every, before, stopped_at, stopped_at, note=note)
        event.recovered_at = recovered_at
        event.after = {s.name: s for s in at_end.instances}
    else:
        event = Restart(case, target, every, before, stopped_at, started_at, note=note)
        recovered = first_sample(
            timeline, params.recovery_timeout_s, lambda s: _advanced(s, at_end.lag, every)
        )
        if recovered is not None:
            event.recovered_at = recovered.at
        time.sleep(params.tail_s)
        event.after = {s.name: s for s in timeline.take().instances}
    event.exited = tuple(i.name for i in pipeline.instances if not i.running)
    return event


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
        "group protocol": protocol_label(params),
        "settings": params.variant.label,
        "broker": broker,
        "standby replicas": event.case.standby_replicas(params),
        "produced": check.produced,
        "output keys": check.keys,
        "match": "yes" if check.ok else "NO",
        "duplicates": check.duplicates,
        "restarted partitions": " ".join(str(p) for p in event.moved),
        "zero output s (max)": max(gaps.values(), default=None),
        "zero output s per partition": " ".join(f"{p}:{g:.1f}" for p, g in sorted(gaps.items())),
        "late > 10 s %": (
            round(100 * sum(lat.seconds > LATE_S for lat in during) / len(during), 3)
            if during
            else None
        ),
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


def first_sample(
    timeline: Timeline, timeout_s: float, condition: Callable[[TimelineSample], bool]
) -> TimelineSample | None:
    """The first sample (taken every half second) for which `condition(sample)` holds; None
    when none did within `timeout_s`."""

    def holding() -> TimelineSample | None:
        sample = timeline.take()
        return sample if condition(sample) else None

    return poll_until(holding, timeout_s, interval_s=0.5)


def wait_settled(
    timeline: Timeline, params: BenchParams, copies: int = 1, standbys: int = 0
) -> TimelineSample | None:
    """A sample once every instance is ready, the lag is caught up, the `standbys` copies of
    every partition are built, and the group's assignment (every partition owned once, by each
    of `copies` groups: a pair's sides) stayed the same for `steady_s` in which every partition
    was processed: a case must not begin while partitions still move after the start, or
    before the copies it would hand them to exist."""
    deadline = time.monotonic() + params.ready_timeout_s
    while (remaining := deadline - time.monotonic()) > 0:
        first = first_sample(
            timeline,
            remaining,
            lambda s: (
                _all_ready(s)
                and _caught_up(s, params)
                and _fully_assigned(s, params, copies)
                and _copies_built(s, params, standbys, copies)
            ),
        )
        if first is None:
            return None
        time.sleep(params.steady_s)
        last = timeline.take()
        if (
            _all_ready(last)
            and _assignment(last) == _assignment(first)
            and _advanced(last, first.lag, range(params.partitions))
        ):
            return last
    return None


def _judged_ready(admin: AdminClient, node_id: int) -> bool:
    """Whether node `node_id` is ready as its pod's readiness sidecar judges it."""
    return judge(admin, node_id).ready


def _assignment(sample: TimelineSample) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple((s.name, tuple(sorted(s.partitions or ()))) for s in sample.instances)


def _fully_assigned(sample: TimelineSample, params: BenchParams, copies: int = 1) -> bool:
    owned = sorted(p for _, partitions in _assignment(sample) for p in partitions)
    return owned == sorted(list(range(params.partitions)) * copies)


def _copies_built(
    sample: TimelineSample, params: BenchParams, standbys: int, groups: int = 1
) -> bool:
    """Whether every partition has its `standbys` copies in each of `groups` groups (at most one
    on each of a group's other instances) that their keepers' copies files record."""
    wanted = min(standbys, params.instances - 1) * groups
    if wanted < 1:
        return True
    built = Counter(
        p for s in sample.instances for p in (set(s.standby) & s.copies) - set(s.partitions or ())
    )
    return all(built[p] >= wanted for p in range(params.partitions))


def _status(sample: TimelineSample, name: str) -> InstanceStatus:
    return next(s for s in sample.instances if s.name == name)


def _all_ready(sample: TimelineSample) -> bool:
    return all(s.ready for s in sample.instances)


def _total_lag(sample: TimelineSample) -> int:
    return sum(p.lag for p in sample.lag.values())


def _caught_up(sample: TimelineSample, params: BenchParams) -> bool:
    """Every partition committed something, and the lag is at most `caught_up_s` of input."""
    committed = all(p.committed is not None for p in sample.lag.values())
    return committed and _total_lag(sample) <= params.rate * params.caught_up_s


def _at_ends(lags: Mapping[int, PartitionLag], ends: Mapping[int, int]) -> dict[int, PartitionLag]:
    """`lags` with each partition's committed offset raised to `ends` (a position to pass)."""
    return {
        p: PartitionLag(lag.end, max(lag.committed or 0, ends.get(p, 0) - 1))
        for p, lag in lags.items()
    }


def _advanced(
    sample: TimelineSample, before: Mapping[int, PartitionLag], partitions: Sequence[int]
) -> bool:
    """Every one of `partitions` committed past where it stood at `before`: processed again."""
    return all((sample.lag[p].committed or 0) > (before[p].committed or 0) for p in partitions)
