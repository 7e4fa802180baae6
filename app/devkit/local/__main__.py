"""`python -m app.devkit.local`: the pipeline on this machine, live, until Ctrl-C or `--duration`.

    python -m app.devkit.local [--instances 3] [--rate 1000] [--keys 10000] [--partitions 6]
        [--membership-mode handoff] [--standby-replicas N] [--roll-after 30 | --no-roll]
        [--bootstrap-servers HOST:PORT [--command-config client.properties]]
        [--duration S | --until-rolled] [--aggregation-class MODULE.CLASS]
        [--state-dir build/local]

Starts a local Apache Kafka of 3 KRaft nodes (`app.devkit.kraft_cluster`; or uses
--bootstrap-servers / $KAFKA_BOOTSTRAP_SERVERS), creates the topics with the project's reconciler,
starts the load generator and N processor instances (each with its own state directory, health port
and log file, as the StatefulSet's pods have) and prints progress every few seconds. Once every
instance is ready and caught up, and `--roll-after` seconds later, it rolls them as the StatefulSet
controller rolls pods (`app.devkit.local.roll`: highest ordinal first, each once the previous one
has been ready for `--min-ready-s`) and shows, per partition, the longest time without output during
the roll. On Ctrl-C or after --duration it stops in order: load generator, wait for the lag to reach
0, SIGTERM to the instances, the brokers last. The final check compares the read_committed output
with what the aggregation makes of the records produced (`app.devkit.truth`);
`<state-dir>/report.json` holds it and the roll's gaps. Exit code 0 when the output is exact.

On a secured cluster, `--command-config` names the client properties (`security.protocol`,
`sasl.*`, `ssl.*`) every client of the run uses: the reconciler, the load generator, the
observers and the instances (whose files get them as written, references unresolved).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from app.clients import client_properties
from app.clients.client_properties import ClientConfig
from app.devkit.loadgen import LoadSettings
from app.devkit.local.instances import LOCAL_SESSION_TIMEOUT_MS, InstanceOptions
from app.devkit.local.pipeline import LocalPipeline, PipelineSetup
from app.devkit.local.progress import Sample, format_progress, now
from app.devkit.local.roll import LocalController
from app.devkit.truth import check_output
from policies.contract.processor_keys import (
    DEFAULTS,
    MEMBERSHIP_HANDOFF,
    MEMBERSHIP_STATIC,
    PROTOCOL_CLASSIC,
    PROTOCOL_CONSUMER,
)

log = logging.getLogger("app.devkit.local")

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
PROGRESS_INTERVAL_S = 5.0
DRAIN_TIMEOUT_S = 120.0
EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_USAGE = 2
# How a stopped instance may end: 0, or ended by the stop's SIGTERM before it installed its
# handler (its first second, imports), when it had read nothing yet; None: a stop during the
# ordered start came before it was started.
CLEAN_STOP_CODES = (0, -signal.SIGTERM, None)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m app.devkit.local",
        description="Run the pipeline locally: broker, topics, load, N processors.",
        epilog="exit codes: 0 the output is exact, 1 mismatch or an instance failed, 2 usage",
    )
    parser.add_argument("--instances", type=int, default=3, help="processor instances (pods)")
    parser.add_argument("--rate", type=float, default=1000.0, help="input records per second")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys (pages)")
    parser.add_argument("--skew", type=float, default=1.1, help="Zipf exponent of the keys")
    parser.add_argument(
        "--group-protocol",
        choices=(PROTOCOL_CLASSIC, PROTOCOL_CONSUMER),
        default=PROTOCOL_CLASSIC,
        help="the consumer group protocol: classic, or consumer (KIP-848: the broker assigns, "
        "and the session and heartbeat are the group's own configs, set by the reconciler)",
    )
    parser.add_argument(
        "--aggregation-class",
        default=DEFAULTS["aggregation.class"],
        metavar="MODULE.CLASS",
        help="the pipeline's aggregation: the processors' aggregation.class, and what makes the "
        "load and the check's truth (default: the processor's)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=6,
        help="partitions per topic (default 6, the dev stack's topics.partitions)",
    )
    parser.add_argument(
        "--bootstrap-servers",
        default=os.environ.get(BOOTSTRAP_ENV),
        metavar="HOST:PORT[,...]",
        help=f"a running Kafka (default ${BOOTSTRAP_ENV}; unset: 3 local KRaft nodes of the "
        "project's Apache Kafka release)",
    )
    client_properties.add_argument(parser)
    parser.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this long")
    parser.add_argument("--state-dir", type=Path, default=Path("build/local"))
    parser.add_argument(
        "--session-timeout-ms",
        type=int,
        default=LOCAL_SESSION_TIMEOUT_MS,
        help="consumer.session.timeout.ms",
    )
    parser.add_argument(
        "--membership-mode",
        choices=(MEMBERSHIP_HANDOFF, MEMBERSHIP_STATIC),
        default=MEMBERSHIP_HANDOFF,
        help="membership.mode of the instances (default handoff: a stopping instance hands its "
        "partitions to the warm standby copies at once)",
    )
    parser.add_argument(
        "--standby-replicas",
        type=int,
        default=None,
        help="num.standby.replicas: warm copies of each partition's state (default: instances - "
        "1, a copy on every other instance, as the prod stack keeps)",
    )
    roll = parser.add_mutually_exclusive_group()
    roll.add_argument(
        "--roll-after",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="roll every instance once, this long after all are ready and caught up (default 30)",
    )
    roll.add_argument("--no-roll", action="store_true", help="never roll the instances")
    parser.add_argument(
        "--until-rolled",
        action="store_true",
        help="stop (as on Ctrl-C) once the roll is done: a run that shows the roll and ends",
    )
    parser.add_argument(
        "--min-ready-s",
        type=float,
        default=10.0,
        help="the roll's minReadySeconds: how long a replaced instance stays ready before the "
        "next one is replaced (default 10, the dev stack's)",
    )
    args = parser.parse_args(argv)
    if args.standby_replicas is None:
        args.standby_replicas = args.instances - 1
    if args.until_rolled and args.no_roll:
        parser.error("--until-rolled --no-roll: there is no roll to wait for")
    if args.instances < 1 or args.partitions < 1:
        parser.error(
            f"--instances {args.instances} --partitions {args.partitions}: both must be at least 1"
        )
    if args.command_config is not None and not args.bootstrap_servers:
        parser.error(
            f"--command-config {args.command_config}: the local cluster runs PLAINTEXT; give "
            "--bootstrap-servers (or $KAFKA_BOOTSTRAP_SERVERS) of the secured cluster too"
        )
    if args.instances > args.partitions:
        parser.error(
            f"--instances {args.instances} > --partitions {args.partitions}: an instance beyond "
            "the partition count gets no partition and never becomes ready (the stacks refuse "
            "processor.replicas above topics.partitions for the same reason); use at most "
            f"{args.partitions} instances or more partitions"
        )
    return args


class StopRequest:
    """Ctrl-C once: stop cleanly (drain the lag). Twice: skip the drain."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.hurry = threading.Event()

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        if self.stop.is_set():
            self.hurry.set()
            print("\nstopping without waiting for the lag", flush=True)
            return
        self.stop.set()
        print(
            f"\n{signal.Signals(signum).name}: stopping (Ctrl-C again to skip the drain)",
            flush=True,
        )


def sample(pipeline: LocalPipeline) -> Sample:
    """The pipeline now."""
    assert pipeline.lag is not None and pipeline.output is not None
    latest, records, duplicates = pipeline.output.snapshot()
    return Sample(
        at=now(),
        lag=pipeline.lag.read(),
        instances=tuple(i.status() for i in pipeline.instances),
        latest=latest,
        output_records=records,
        duplicates=duplicates,
    )


def run(args: argparse.Namespace, began: float) -> int:
    """The local run (`began`: when the command started, on the `now()` clock); the exit code."""
    setup = PipelineSetup(
        base_dir=args.state_dir.resolve(),
        instances=args.instances,
        partitions=args.partitions,
        bootstrap_servers=args.bootstrap_servers or None,
        client=ClientConfig.load(args.command_config, os.environ),
        aggregation_class=args.aggregation_class,
        options=InstanceOptions(
            membership_mode=args.membership_mode,
            num_standby_replicas=args.standby_replicas,
            session_timeout_ms=args.session_timeout_ms,
            group_protocol=args.group_protocol,
        ),
        keep_output_records=False,
        first_instance_with_brokers=args.membership_mode == MEMBERSHIP_HANDOFF,
    )
    load = LoadSettings(rate=args.rate, keys=args.keys, skew=args.skew)
    request = StopRequest()
    signal.signal(signal.SIGINT, request)
    signal.signal(signal.SIGTERM, request)
    with LocalPipeline(setup) as pipeline:
        assert pipeline.output is not None and pipeline.lag is not None
        # State already in the changelog (a reused cluster): the truth starts from it, and the
        # output's earlier records are not judged. A cluster this run started has none.
        if pipeline.cluster is None:
            pipeline.output.wait_until_caught_up(30.0, quiet_s=1.0)
            pipeline.start_truth(pipeline.changelog_values())
        if request.stop.is_set():
            print(
                "stopped before the load started: nothing produced, nothing to check",
                flush=True,
            )
            return EXIT_OK
        # Caught up: at most about two batches' worth of input not yet processed.
        controller = LocalController(
            pipeline,
            None if args.no_roll else args.roll_after,
            args.min_ready_s,
            round(2 * args.rate) + 100,
        ).start()
        loader = pipeline.load(load)
        cluster = pipeline.cluster
        broker = (
            f"Apache Kafka {cluster.release.version}, 3 local KRaft nodes"
            if cluster is not None
            else "the given cluster"
        )
        print(
            f"broker {pipeline.bootstrap_servers} ({broker}); {args.instances} instances "
            f"(membership.mode={args.membership_mode}, {args.standby_replicas} standby), "
            f"{args.rate:g} records/s over {args.keys} keys "
            f"({args.aggregation_class.rpartition('.')[2]}). "
            "Logs: " + ", ".join(str(i.log_path) for i in pipeline.instances),
            flush=True,
        )
        print(
            "The instances start in order (OrderedReady), each once the one before is ready: "
            "Spark, the group, a first batch. Ctrl-C stops.",
            flush=True,
        )
        busiest = [pipeline.aggregation.key_name(i) for i in range(min(3, args.keys))]
        started = now()
        first_counts: float | None = None
        previous: Sample | None = None
        while not request.stop.wait(PROGRESS_INTERVAL_S):
            current = sample(pipeline)
            print(format_progress(previous, current, started, busiest), flush=True)
            if first_counts is None and pipeline.output.first_read_at is not None:
                first_counts = pipeline.output.first_read_at - began
                print(f"          first counts {first_counts:.0f} s after the command", flush=True)
            print(f"          {controller.describe()}", flush=True)
            previous = current
            if args.duration is not None and now() - started >= args.duration:
                break
            if args.until_rolled and controller.done:
                print("the roll is done: stopping", flush=True)
                break
            if controller.error is not None:
                log.error("stopping: %s", controller.error)
                break
            if not controller.busy and not any(i.running for i in pipeline.instances):
                log.error("every instance has exited; see the logs above")
                break
        controller.stop()
        print(controller.describe(), flush=True)
        summary = loader.stop()
        print(f"load generator stopped: {summary.total} records produced", flush=True)
        drained = wait_for_lag(pipeline, request)
        pipeline.stop_instances()
        caught_up = pipeline.output.wait_until_caught_up(60.0)
        latest, records, _ = pipeline.output.snapshot()
        check = check_output(summary.truth, latest)
        codes = {i.name: i.returncode for i in pipeline.instances}
        report = {
            "bootstrap_servers": pipeline.bootstrap_servers,
            "local_cluster": cluster is not None,
            "first_counts_s": first_counts,
            "roll": roll_report(controller),
            "lag_drained": drained,
            "output_caught_up": caught_up,
            "produced": summary.to_json(),
            "output_records": records,
            "check": check.to_json(),
            "instances": {
                i.name: {"exit_code": i.returncode, "log": str(i.log_path)}
                for i in pipeline.instances
            },
        }
    report_path = setup.base_dir / "report.json"
    report_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"final check: {check.describe()}", flush=True)
    print(f"instances' exit codes: {codes}; report: {report_path}", flush=True)
    clean = all(c in CLEAN_STOP_CODES for c in codes.values())
    return EXIT_OK if check.ok and clean else EXIT_MISMATCH


def roll_report(roll: LocalController) -> dict[str, object] | None:
    """The roll's part of report.json: when, and the longest gap per partition (seconds)."""
    if roll.started_ms is None:
        return None
    gaps = roll.gaps()
    return {
        "started_ms": roll.started_ms,
        "ended_ms": roll.ended_ms,
        "completed": roll.done and roll.error is None,
        "error": roll.error,
        "longest_gap_s": {str(p): g for p, g in sorted(gaps.items())},
        "max_gap_s": max(gaps.values(), default=None),
    }


def wait_for_lag(pipeline: LocalPipeline, request: StopRequest) -> bool:
    """Wait until the group has processed every input record (or the drain is skipped)."""
    assert pipeline.lag is not None
    deadline = now() + DRAIN_TIMEOUT_S
    while now() < deadline and not request.hurry.is_set():
        lag = pipeline.lag.total()
        if lag == 0:
            print("lag 0: every input record is processed", flush=True)
            return True
        if not any(i.running for i in pipeline.instances):
            break
        print(f"waiting for the lag to reach 0: {lag} records left", flush=True)
        request.hurry.wait(2.0)
    print("the lag did not reach 0: the check below will show what is missing", flush=True)
    return False


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m app.devkit.local`."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stdout
    )
    began = now()
    args = parse_args(argv)
    try:
        return run(args, began)
    except ValueError as exc:
        print(f"python -m app.devkit.local: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
