"""The throughput benchmark: what one instance sustains, beside the best plain consume of the run.

1. Per configuration (`max.records.per.batch`, `trigger.interval.ms`), a backlog of `--backlog`
   page views (the same seed each time, so the same records) goes into the configuration's own
   input topic.
2. The brokers warmed up, unless `--no-warm-up`: the first row's run once more before it, its
   row dropped (the brokers are fresh processes, and the first run after their start pays
   their JIT). Then the ceiling, once: three consumers read the first backlog one after
   another (`ceiling.py`: the bench's own, a lean plain confluent-kafka consumer, Kafka's
   kafka-consumer-perf-test); the best records per second is what Kafka and a single process
   can deliver here.
3. One fresh instance (its own application id and topics) works the backlog off: events/s is
   the slope of the group's committed offset from its first commit to the end of the backlog.
   Then the load generator adds views at `--latency-rate` for `--latency-s` seconds, and the
   event time to output record time latency of those views gives p50 and p99, and the p99 of
   the views made from `--latency-warmup-s` on: the instance's first batches after its start
   (a young JVM, its first Python workers) without them; the output must then be exact
   (`devkit.truth`). The batches of that phase give the profile of a caught-up
   batch: the medians of the two parts each batch logs (`sink.py`: the rows computed, which is
   the reads, the shuffle and the stateful operator, and the rows written, the Kafka
   transaction). The instance's memory (its process tree's PSS,
   `memory.py`) is sampled every second from its start to its stop.
   With `--set`, each configuration runs again per variant of contract keys (a row each, the
   contract's defaults first): a setting's cost and gain measured beside the defaults in one run.
4. Restore, `--restores` times: the instance starts again on an empty state directory (a pod on
   a new volume), so it restores every partition from the whole changelog. Restore records/s is
   the changelog records read over the time the source's readers spent reading them, by their
   own timer (`processor_restore_read_seconds`), beside the restore's time from planning to
   commit; the row shows the slowest run's, and every run's rate.
"""

from __future__ import annotations

import logging
import re
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.clients.client_properties import ClientConfig
from app.clients.waiting import poll_until
from contract.processor_keys import PROTOCOL_CLASSIC
from contract.topic_specs import PipelineNames
from devkit.bench import plots
from devkit.bench.ceiling import Ceiling, measure_ceiling
from devkit.bench.measure import Timeline, percentile
from devkit.bench.memory import MemorySampler
from devkit.bench.table import write_table
from devkit.bench.variant import Variant
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
from devkit.truth import Latency, check_output

log = logging.getLogger("devkit.bench")

# The split every committed batch logs (`sink.py`).
_BATCH_SPLIT = re.compile(rb"rows computed in ([0-9.]+) s, written in ([0-9.]+) s")

# (max.records.per.batch, trigger.interval.ms)
DEFAULT_CONFIGS: tuple[tuple[int, int], ...] = (
    (5_000, 1_000),
    (20_000, 1_000),
    (20_000, 250),
    (50_000, 1_000),
)

COLUMNS = (
    "engine",
    "group protocol",
    "max.records.per.batch",
    "trigger.interval.ms",
    "settings",
    "events/s",
    "ceiling/s",
    "ceiling by",
    "ratio",
    "p50 latency s",
    "p99 latency s",
    "p99 latency s (after --latency-warmup-s)",
    "latency samples",
    "batch computed s (p50)",
    "batch written s (p50)",
    "exact",
    "memory MiB (median)",
    "memory MiB (peak)",
    "memory MiB at peak by process",
    "restore records",
    "restore records/s",
    "restore records/s by run",
    "restore s (planning to commit)",
    "broker",
)


@dataclass(frozen=True)
class ThroughputParams:
    """Sizes of the run."""

    backlog: int = 50_000
    partitions: int = 4
    keys: int = 100
    latency_rate: float = 200.0
    latency_s: float = 20.0
    latency_warmup_s: float = 10.0
    # The first run after the brokers' start pays their JIT (transactions, read_committed
    # fetches, the compacted changelogs): in one run of 4 rows at 250 ms, the first row's p99 was
    # 3.73 s against 1.29-2.46 s, whichever protocol ran first. This run is dropped.
    warm_up: bool = True
    spark_cores: int = 2
    ready_timeout_s: float = 300.0
    seed: int = 7
    restores: int = 1


def run_throughput(
    configs: Sequence[tuple[int, int]],
    params: ThroughputParams,
    out_dir: Path,
    bootstrap_servers: str,
    broker: str,
    client: ClientConfig | None = None,
    variants: Sequence[Variant] = (Variant(),),
    engines: Sequence[str] = (ENGINE_PROCESSOR,),
    group_protocols: Sequence[str] = (PROTOCOL_CLASSIC,),
) -> list[dict[str, float | str | None]]:
    """Run every configuration under every variant and group protocol, and Kafka Streams once
    per protocol when `engines` has it; write the table and the graph (`broker` names the
    cluster in every row); the rows."""
    client = client or ClientConfig()
    run_id = uuid.uuid4().hex[:6]
    rows: list[dict[str, float | str | None]] = []
    ceiling: Ceiling | None = None
    runs: list[tuple[bool, str, str, tuple[int, int] | None, int, Variant]] = [
        (False, ENGINE_PROCESSOR, protocol, c, i, v)
        for protocol in group_protocols
        for c in configs
        for i, v in enumerate(variants)
        if ENGINE_PROCESSOR in engines
    ]
    if ENGINE_KAFKA_STREAMS in engines:
        runs += [(False, ENGINE_KAFKA_STREAMS, p, None, 0, Variant()) for p in group_protocols]
    if params.warm_up and runs:
        runs.insert(0, (True, *runs[0][1:]))
    for warm_up, engine, protocol, config, index, variant in runs:
        max_records, trigger_ms = config or DEFAULT_CONFIGS[0]
        prefix = f"tp-{run_id}-" + (f"{max_records}-{trigger_ms}" if config else "ks")
        prefix += f"-v{index}" if index else ""
        prefix += "" if protocol == PROTOCOL_CLASSIC else f"-{protocol}"
        prefix += "-warm-up" if warm_up else ""
        input_topic = f"{prefix}-page-views"
        setup = PipelineSetup(
            base_dir=out_dir / "state" / prefix,
            instances=1,
            partitions=params.partitions,
            bootstrap_servers=bootstrap_servers,
            client=client,
            names=PipelineNames(prefix, input_topic, f"{prefix}-page-view-counts"),
            engine=engine,
            options=InstanceOptions(
                trigger_interval_ms=trigger_ms,
                max_records_per_batch=max_records,
                spark_cores=params.spark_cores,
                group_protocol=protocol,
                extra=variant.settings,
            ),
        )
        with LocalPipeline(setup) as pipeline:
            produce_backlog(pipeline, params)
            if ceiling is None and not warm_up:
                ceiling = measure_ceiling(
                    bootstrap_servers, input_topic, params.backlog, client.resolved
                )
                write_ceiling(out_dir, ceiling, params, broker)
            try:
                row = measure_instance(pipeline, params)
                if not warm_up:
                    row.update(measure_restores(pipeline, params))
            except RuntimeError as exc:  # one variant's failure (a refused setting) keeps the rest
                log.error("%s: %s", variant.label, exc)
                row = {"events/s": None, "exact": "not measured: the instance exited"}
        if warm_up:
            log.info(
                "warm-up run, not in the table (p99 %s s): the brokers are warm",
                row.get("p99 latency s"),
            )
            continue
        assert ceiling is not None  # measured by the first run that is not the warm-up
        events = row["events/s"]
        by, best = ceiling.best
        rows.append(
            {
                "engine": engine_label(engine),
                "group protocol": protocol_label(engine, protocol),
                "max.records.per.batch": max_records if config else None,
                "trigger.interval.ms": trigger_ms if config else None,
                "settings": variant.label,
                **row,
                "ceiling/s": round(best),
                "ceiling by": by,
                "ratio": f"{events / best:.3f}" if isinstance(events, int | float) else None,
                "broker": broker,
            }
        )
    text = write_table(out_dir, "throughput", COLUMNS, rows)
    print(text, flush=True)
    plots.throughput_bars(
        out_dir / "throughput.png",
        [_bar_label(r) for r in rows],
        [float(r["events/s"] or 0) for r in rows],
        ceiling.best[1] if ceiling is not None else 0.0,
    )
    print(f"table: {out_dir / 'throughput.md'} and .csv; graph: {out_dir / 'throughput.png'}")
    return rows


def _bar_label(row: dict[str, float | str | None]) -> str:
    """A row's name under its bar: the protocol named unless classic."""
    protocol = "" if row["group protocol"] == PROTOCOL_CLASSIC else f"\n{row['group protocol']}"
    if row["max.records.per.batch"] is None:
        return "Kafka Streams" + protocol
    label = f"{row['max.records.per.batch']}/{row['trigger.interval.ms']}ms"
    return label + ("" if row["settings"] == "defaults" else f"\n{row['settings']}") + protocol


def produce_backlog(pipeline: LocalPipeline, params: ThroughputParams) -> None:
    """`params.backlog` records into the pipeline's input, as fast as the producer goes, folded
    into the pipeline's truth untimed (no latency for them)."""
    summary = pipeline.load(
        LoadSettings(rate=1e9, keys=params.keys, count=params.backlog, seed=params.seed),
        progress=lambda counts: log.info("backlog of %d records: %s", params.backlog, counts),
    ).join()
    if summary.failed:
        raise RuntimeError(f"producing the backlog failed: {summary.first_error}")
    log.info("backlog: %d records in %.1f s", summary.total, summary.elapsed_s)


def write_ceiling(out_dir: Path, ceiling: Ceiling, params: ThroughputParams, broker: str) -> None:
    """The ceiling's own table: every consumer's rate over the same backlog."""
    rows = [
        {
            "consumer": name,
            "records/s": round(rate) if rate else "did not run",
            "records": params.backlog,
            "partitions": params.partitions,
            "broker": broker,
        }
        for name, rate in ceiling.rates.items()
    ]
    print(
        write_table(
            out_dir, "throughput-ceiling", ("consumer", "records/s", "records", "partitions",
                                            "broker"), rows
        ),
        flush=True,
    )  # fmt: skip


def measure_instance(
    pipeline: LocalPipeline, params: ThroughputParams
) -> dict[str, float | str | None]:
    """Events/s over the backlog (already in the input topic), then latency percentiles under a
    steady load, then whether the output is exact; the row."""
    assert pipeline.output is not None and pipeline.lag is not None
    assert pipeline.truth is not None
    target = sum(p.end for p in pipeline.lag.read().values())
    pipeline.start_instances()
    pid = pipeline.instances[0].pid
    assert pid is not None
    with MemorySampler(pid) as memory, Timeline(pipeline) as timeline:
        deadline = time.monotonic() + params.ready_timeout_s
        first: tuple[float, int] | None = None
        last: tuple[float, int] | None = None
        instance = pipeline.instances[0]
        while time.monotonic() < deadline:
            if not instance.running:
                raise RuntimeError(
                    f"{instance.name} exited before it worked off the backlog; see "
                    f"{instance.log_path}"
                )
            sample = timeline.take()
            committed = sum(p.committed or 0 for p in sample.lag.values())
            if first is None and committed > 0:
                first = (sample.at, committed)
            if committed >= target:
                last = (sample.at, committed)
                break
            time.sleep(0.25)
        rate = None
        if first is not None and last is not None and last[0] > first[0]:
            rate = round((last[1] - first[1]) / (last[0] - first[0]))
        log_path = instance.log_path
        log_start = log_path.stat().st_size if log_path.exists() else 0
        warm_ms = (time.time() + params.latency_warmup_s) * 1000
        loader = pipeline.load(
            LoadSettings(
                rate=params.latency_rate,
                keys=params.keys,
                duration_s=params.latency_s,
                seed=params.seed,
                record_timestamps=True,
            )
        )
        loader.join()
        lag = pipeline.lag
        poll_until(lambda: lag.total() == 0, 120, interval_s=0.5)  # measured also if not
        computed, written = batch_split(log_path, log_start)
    pipeline.stop_instances()
    pipeline.output.wait_until_caught_up(60.0)
    check = check_output(pipeline.truth, pipeline.output.snapshot()[0])
    if not check.ok:
        log.error("%s: %s", pipeline.names.application_id, check.describe())
    # Only the timed load's records have latencies: the backlog's waited for the instance.
    latencies = [lat.seconds for lat in pipeline.truth.latencies]
    warm = [lat.seconds for lat in pipeline.truth.latencies if _created_ms(lat) >= warm_ms]
    row: dict[str, float | str | None] = {
        "events/s": rate,
        "p50 latency s": percentile(latencies, 0.5),
        "p99 latency s": percentile(latencies, 0.99),
        "p99 latency s (after --latency-warmup-s)": percentile(warm, 0.99),
        "latency samples": len(latencies),
        "batch computed s (p50)": computed,
        "batch written s (p50)": written,
        "exact": "yes" if check.ok else "NO",
        "memory MiB (median)": memory.median_mib(),
        "memory MiB (peak)": memory.peak_mib(),
        "memory MiB at peak by process": memory.peak_by_kind(),
    }
    return row


def _created_ms(latency: Latency) -> float:
    return latency.output_ms - latency.seconds * 1000


def batch_split(log_path: Path, start: int) -> tuple[float | None, float | None]:
    """The medians of the two parts of the batches an instance logged after byte `start` of its
    log: rows computed, rows written (None: no batch logged, as Kafka Streams logs none)."""
    if not log_path.exists():
        return None, None
    with log_path.open("rb") as log_file:
        log_file.seek(start)
        splits = [tuple(map(float, m.groups())) for m in _BATCH_SPLIT.finditer(log_file.read())]
    if not splits:
        return None, None
    return (
        round(statistics.median(c for c, _ in splits), 3),
        round(statistics.median(w for _, w in splits), 3),
    )


def measure_restores(
    pipeline: LocalPipeline, params: ThroughputParams
) -> dict[str, float | str | None]:
    """`params.restores` restores of the whole changelog, one after another: the slowest run's
    rate and time, and every run's rate."""
    runs = [measure_restore(pipeline, params) for _ in range(params.restores)]
    rates = [r["restore records/s"] for r in runs]
    if any(rate is None for rate in rates):
        return {"restore records": None, "restore records/s": None}
    return {
        "restore records": runs[-1]["restore records"],
        "restore records/s": min(rates),  # type: ignore[type-var]
        "restore records/s by run": ", ".join(str(rate) for rate in rates),
        "restore s (planning to commit)": max(
            (r["restore s (planning to commit)"] or 0.0 for r in runs), default=None
        ),
    }


def measure_restore(pipeline: LocalPipeline, params: ThroughputParams) -> dict[str, float | None]:
    """Start the (stopped) instance on an empty state directory and time its restore of every
    partition from the changelog: by the readers' own timer, and from planning to commit."""
    instance = pipeline.instances[0]
    instance.wipe_state()
    instance.start()
    status = instance.status()

    def restored() -> bool:
        nonlocal status
        status = instance.status()
        if status.ready and status.metric("processor_restore_records_total") > 0:
            return True
        if not instance.running:
            raise RuntimeError(
                f"{instance.name} exited during its restore; see {instance.log_path}"
            )
        return False

    poll_until(restored, params.ready_timeout_s, interval_s=0.5)
    pipeline.stop_instances()
    records = status.metric("processor_restore_records_total")
    read_s = status.metric("processor_restore_read_seconds_total")
    if not status.ready:
        log.warning("restore: %s not ready within %g s", instance.name, params.ready_timeout_s)
        return {"restore records": None, "restore records/s": None}
    planning_to_commit = max(
        (
            v
            for k, v in status.metrics.items()
            if k.startswith("processor_restore_duration_seconds")
        ),
        default=None,
    )
    log.info("restore: %d changelog records read in %.2f s", records, read_s)
    return {
        "restore records": round(records),
        "restore records/s": round(records / read_s) if read_s else None,
        "restore s (planning to commit)": planning_to_commit,
    }
