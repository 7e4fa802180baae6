"""`python -m devkit.local`: the pipeline on this machine, live, until Ctrl-C or `--duration`.

    python -m devkit.local [--instances 3] [--rate 1000] [--keys 10000] [--partitions 6]
        [--membership-mode handoff] [--standby-replicas N] [--roll-after 30 | --no-roll]
        [--bootstrap-servers HOST:PORT [--command-config client.properties]]
        [--duration S | --until-rolled [--catch-up-timeout 300]] [--stack dev]
        [--aggregation-class MODULE.CLASS] [--malformed-ratio 0.01] [--state-dir build/local]

The pipeline is the stack's (`Pulumi.<stack>.yaml`, dev by default): its application id, its
topics and its `aggregation.class`, as `pulumi up` would deploy them; `--aggregation-class`
overrides the aggregation. `--malformed-ratio` sends that fraction of the load as the
aggregation's malformed records (`InputSample.malformed_values`): the dead-letter topic gets
them with their reasons, and the final check counts them.

Starts a local Apache Kafka of 3 KRaft nodes (`devkit.kraft_cluster`; or uses
--bootstrap-servers / $KAFKA_BOOTSTRAP_SERVERS), creates the topics with the project's reconciler,
starts the load generator and N processor instances (each with its own state directory, health port
and log file, as the StatefulSet's pods have) and prints progress every few seconds. Once every
instance is ready and caught up, and `--roll-after` seconds later, it rolls them as the StatefulSet
controller rolls pods (`devkit.local.roll`: highest ordinal first, each once the previous one
has been ready for `--min-ready-s`) and shows, per partition, the longest time without output during
the roll. On Ctrl-C or after --duration it stops in order: load generator, wait for the lag to reach
0, SIGTERM to the instances, the brokers last. The final check compares the read_committed output
with what the aggregation makes of the records produced (`devkit.truth`);
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
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from app.clients import client_properties
from app.clients.client_properties import ClientConfig
from app.processor.input_sample import input_sample_for
from contract.processor_keys import (
    DEFAULTS,
    MEMBERSHIP_HANDOFF,
    MEMBERSHIP_STATIC,
    PROTOCOL_CLASSIC,
    PROTOCOL_CONSUMER,
)
from contract.stack_pipeline import StackFileError, read_stack_pipeline, stack_file
from devkit.loadgen import LoadSettings
from devkit.local.instances import LOCAL_SESSION_TIMEOUT_MS, REPO_ROOT, InstanceOptions
from devkit.local.observe import dead_letter_reasons
from devkit.local.pipeline import LocalPipeline, PipelineSetup
from devkit.local.progress import Sample, format_progress, now
from devkit.local.roll import CatchUpWait, LocalController
from devkit.truth import check_output

log = logging.getLogger("devkit.local")

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
        prog="python -m devkit.local",
        description="Run the pipeline locally: broker, topics, load, N processors.",
        epilog="exit codes: 0 the output is exact, 1 mismatch, an instance failed or (with "
        "--until-rolled) the roll did not complete, 2 usage",
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
        "--stack",
        default="dev",
        metavar="NAME|FILE.yaml",
        help="the stack whose pipeline runs: the application id, the topics and "
        "aggregation.class of Pulumi.<stack>.yaml, or of a stack file named by its path "
        "(default dev)",
    )
    parser.add_argument(
        "--aggregation-class",
        metavar="MODULE.CLASS",
        help="the pipeline's aggregation: the processors' aggregation.class, and what makes the "
        "load and the check's truth (default: the stack's processor.properties, else "
        f"{DEFAULTS['aggregation.class']})",
    )
    parser.add_argument(
        "--malformed-ratio",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="the fraction of the load sent as malformed records, which go to the dead-letter "
        "topic with their reasons (default 0)",
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
        "--catch-up-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="with --until-rolled: how long the roll waits for every instance to be ready and "
        "the lag to be about two batches or less before the run gives up (default 300); "
        "without it the wait goes on, and says what it waits for",
    )
    parser.add_argument(
        "--min-ready-s",
        type=float,
        default=10.0,
        help="the roll's minReadySeconds: how long a replaced instance stays ready before the "
        "next one is replaced (default 10, the dev stack's)",
    )
    args = parser.parse_args(argv)
    try:
        path = (
            Path(args.stack) if args.stack.endswith(".yaml") else stack_file(REPO_ROOT, args.stack)
        )
        stack = read_stack_pipeline(path)
    except (StackFileError, OSError) as exc:
        parser.error(f"--stack {args.stack}: {exc}")
    args.names = stack.names
    if args.aggregation_class is None:
        args.aggregation_class = stack.aggregation_class
    if not 0.0 <= args.malformed_ratio < 1.0:
        parser.error(f"--malformed-ratio {args.malformed_ratio:g}: must be at least 0 and below 1")
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
        names=args.names,
        aggregation_class=args.aggregation_class,
        options=InstanceOptions(
            membership_mode=args.membership_mode,
            num_standby_replicas=args.standby_replicas,
            session_timeout_ms=args.session_timeout_ms,
            group_protocol=args.group_protocol,
        ),
        keep_output_records=False,
        first_instance_with_brokers=args.membership_mode == MEMBERSHIP_HANDOFF,
        graceful_broker_stop=True,
    )
    load = LoadSettings(
        rate=args.rate, keys=args.keys, skew=args.skew, malformed_ratio=args.malformed_ratio
    )
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
        catch_up = CatchUpWait(args.rate, args.catch_up_timeout if args.until_rolled else None)
        controller = LocalController(
            pipeline, None if args.no_roll else args.roll_after, args.min_ready_s, catch_up
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
        keys = input_sample_for(pipeline.aggregation)
        busiest = [keys.key_name(i) for i in range(min(3, args.keys))]
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
        dead_letters = check_dead_letters(pipeline, summary.malformed)
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
            "dead_letters": dead_letters,
            "instances": {
                i.name: {"exit_code": i.returncode, "log": str(i.log_path)}
                for i in pipeline.instances
            },
        }
    report_path = setup.base_dir / "report.json"
    report_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"final check: {check.describe()}", flush=True)
    print(f"dead letters: {dead_letters['verdict']}", flush=True)
    print(f"instances' exit codes: {codes}; report: {report_path}", flush=True)
    clean = all(c in CLEAN_STOP_CODES for c in codes.values())
    # A roll that failed or never began fails a run made to show it (a Ctrl-C does not).
    rolled = not (args.until_rolled and controller.error is not None)
    if not rolled:
        print(f"the roll did not complete: {controller.error}", flush=True)
    letters_ok = dead_letters["ok"] is not False
    return EXIT_OK if check.ok and letters_ok and clean and rolled else EXIT_MISMATCH


def check_dead_letters(pipeline: LocalPipeline, sent: Counter[str]) -> dict[str, object]:
    """The dead-letter topic read to its end, per reason, against the malformed records sent:
    each once (`ok`), judged only on a cluster this run started (a reused one has older ones)."""
    topic = pipeline.names.dlq_topic
    found = dead_letter_reasons(pipeline.bootstrap_servers, topic, pipeline.setup.client.resolved)
    ok: bool | None = None
    if pipeline.cluster is None:
        verdict = f"{topic} holds {found.total():,} records (with any earlier run's, not judged)"
    elif found == sent and not sent:
        ok = True
        verdict = f"{topic} is empty: no malformed record was sent (--malformed-ratio 0)"
    elif found == sent:
        ok = True
        verdict = (
            f"{topic} holds each of the {sent.total():,} malformed records sent once, with its "
            f"reason: {dict(sorted(found.items()))}"
        )
    else:
        ok = False
        verdict = (
            f"{topic} holds {dict(sorted(found.items()))}, but the malformed records sent were "
            f"{dict(sorted(sent.items()))}: see the instances' logs for the dead-letter writes"
        )
    return {"topic": topic, "sent": dict(sent), "found": dict(found), "ok": ok, "verdict": verdict}


def roll_report(roll: LocalController) -> dict[str, object] | None:
    """The roll's part of report.json: when, and the longest gap per partition (seconds); or
    why it never began."""
    if roll.started_ms is None:
        return None if roll.error is None else {"completed": False, "error": roll.error}
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
    """Entry point of `python -m devkit.local`."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stdout
    )
    began = now()
    args = parse_args(argv)
    try:
        return run(args, began)
    except ValueError as exc:
        print(f"python -m devkit.local: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
