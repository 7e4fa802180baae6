"""`python -m devkit.bench rolling-restart|throughput|node-rollout|tables`: the benchmarks.

    python -m devkit.bench tables [--only crashes,throughput] [--out build/bench]
    python -m devkit.bench rolling-restart
        [--bootstrap-servers HOST:PORT [--command-config FILE]]
        [--cases a,b] [--session-timeout-ms 20000] [--rate 100] [--out build/bench]
    python -m devkit.bench throughput [--bootstrap-servers HOST:PORT]
        [--configs 5000:1000,20000:250] [--backlog 100000] [--partitions 6] [--keys 10000]
        [--out build/bench]
    python -m devkit.bench node-rollout [--rate 1000] [--replicas 3] [--out build/bench]

`node-rollout` deploys the dev stack onto a real Kubernetes node (`devkit/kube/node.py`) and rolls
the hand-off processor with `pulumi up` under load (`devkit.bench.node_rollout`).

`tables` runs the commands behind the tables of docs/benchmarks.md (`devkit.bench.tables`;
`make bench` runs them all), each into `<out>/<table>/`.

Without --bootstrap-servers (or $KAFKA_BOOTSTRAP_SERVERS) the bench starts 3 local KRaft nodes of
the project's Apache Kafka release (`devkit.kafka_release`; $KAFKA_HOME names another
distribution) and runs every case on them; the broker-roll and broker-kill cases restart them under
load. --command-config names a secured cluster's client properties (security.protocol, sasl.*,
ssl.*) for every client of the bench, as for `python -m devkit.local`. Every row names its
broker. Speeds are reported, never asserted.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from app.clients import client_properties
from app.clients.client_properties import ClientConfig, ClientPropertiesError
from contract.processor_keys import (
    DEFAULTS,
    KNOWN_KEYS,
    PROTOCOL_CLASSIC,
    PROTOCOL_CONSUMER,
)
from devkit.bench import node_rollout
from devkit.bench.restart_cases import CASE_NAMES, CASES, BenchParams
from devkit.bench.rolling_restart import check_scale, run_matrix
from devkit.bench.tables import TABLE_NAMES, TABLES
from devkit.bench.throughput import DEFAULT_CONFIGS, ThroughputParams, run_throughput
from devkit.bench.variant import Variant
from devkit.kraft_cluster import KraftCluster
from devkit.local.pipeline import ENGINE_PROCESSOR, ENGINES

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
EXIT_USAGE = 2


def _choices(what: str, allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: comma-separated names of `allowed`, each once, in the order given."""

    def parse(text: str) -> list[str]:
        names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
        unknown = [n for n in names if n not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {what}(s) {', '.join(unknown) or repr(text)}; allowed: "
                f"{', '.join(allowed)}, comma-separated"
            )
        return names

    return parse


_cases = _choices("case", CASE_NAMES)
_tables = _choices("table", TABLE_NAMES)
_protocols = _choices("group protocol", (PROTOCOL_CLASSIC, PROTOCOL_CONSUMER))
_engines = _choices("engine", ENGINES)


PASSED_ON = ("spark.", "consumer.", "producer.")


def _variant(text: str) -> Variant:
    settings = {}
    for pair in text.split(","):
        key, sep, value = pair.partition("=")
        # The contract's keys, and what the processor hands on as is (it checks those at start).
        key = key.strip()
        if not sep or not (key in KNOWN_KEYS or key.startswith(PASSED_ON)):
            raise argparse.ArgumentTypeError(
                f"--set {text!r}: {pair!r} is not KEY=VALUE with KEY a processor key (see "
                f"contract/processor_keys.py) or a {'/'.join(PASSED_ON)}* key, e.g. "
                "spark.driver.memory=512m"
            )
        settings[key] = value.strip()
    return Variant(settings)


def _rounds(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--rounds wants a whole number, at least 1; got {text!r}")
    return int(text)


def _configs(text: str) -> list[tuple[int, int]]:
    configs = []
    for item in text.split(","):
        records, sep, trigger = item.partition(":")
        if not sep or not records.strip().isdigit() or not trigger.strip().isdigit():
            raise argparse.ArgumentTypeError(
                f"--configs wants max.records.per.batch:trigger.interval.ms pairs separated by "
                f"commas (e.g. 5000:1000,20000:250), got {item!r}"
            )
        configs.append((int(records), int(trigger)))
    return configs


def _add_numbers(parser: argparse.ArgumentParser, defaults: object, helps: dict[str, str]) -> None:
    """One option per numeric field of `defaults` (`--session-timeout-ms` -> session_timeout_ms)."""
    for flag, text in helps.items():
        default = getattr(defaults, flag.removeprefix("--").replace("-", "_"))
        parser.add_argument(
            flag, type=type(default), default=default, help=f"{text} (default {default:g})"
        )


def _add_side_by_side(
    parser: argparse.ArgumentParser, flag: str, parse: Callable[[str], list[str]], default: str,
    unit: str, choices: str,
) -> None:  # fmt: skip
    """`flag`: a comma-separated list; every `unit` runs under each of its values."""
    parser.add_argument(
        flag,
        type=parse,
        default=[default],
        help=f"run every {unit} under each, side by side in the table: {choices} (default "
        f"{default})",
    )


def _add_protocols(parser: argparse.ArgumentParser, unit: str) -> None:
    """`--group-protocols`: every `unit` runs under each."""
    choices = "classic, consumer (KIP-848), or classic,consumer"
    _add_side_by_side(parser, "--group-protocols", _protocols, PROTOCOL_CLASSIC, unit, choices)


def _add_engines(parser: argparse.ArgumentParser, unit: str) -> None:
    """`--engines`: every `unit` runs under each, the processor and Kafka Streams beside it."""
    choices = (
        "processor, kafka-streams (the field's reference on the same brokers: exactly_once_v2, "
        "2 threads, its own defaults, no --set; the classic protocol, or its streams groups "
        "(KIP-1071) where --group-protocols names consumer), or processor,kafka-streams"
    )
    _add_side_by_side(parser, "--engines", _engines, ENGINE_PROCESSOR, unit, choices)


def _add_variants(parser: argparse.ArgumentParser, unit: str, example: str) -> None:
    """`--set`, repeatable: every `unit` runs again per variant of contract keys."""
    parser.add_argument(
        "--set",
        dest="variants",
        type=_variant,
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help=f"a variant: every {unit} runs again with these contract keys set, one row each "
        f"beside the defaults' (repeat for more variants), e.g. --set {example}",
    )


def _add_warm_up(parser: argparse.ArgumentParser, what: str) -> None:
    """`--no-warm-up`: the first row's dropped `what` before the rows is skipped."""
    parser.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help=f"measure from the first row on, without a dropped warm-up {what} before it (the "
        "brokers' JIT then falls into the first row)",
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m devkit.bench", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="bench", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-servers",
        "--bootstrap",
        default=os.environ.get(BOOTSTRAP_ENV),
        metavar="HOST:PORT[,...]",
        help=f"a running Apache Kafka (default ${BOOTSTRAP_ENV}; unset: the bench starts 3 "
        "KRaft nodes of the project's Apache Kafka release)",
    )
    client_properties.add_argument(common)
    common.add_argument(
        "--out",
        type=Path,
        default=Path("build/bench"),
        help="where the tables (Markdown, CSV) and graphs go (default build/bench)",
    )
    restart = sub.add_parser("rolling-restart", parents=[common], help="the restart matrix")
    restart.add_argument(
        "--cases", type=_cases, default=list(CASE_NAMES), help=f"of {', '.join(CASE_NAMES)}"
    )
    _add_protocols(restart, "case")
    _add_warm_up(restart, "pipeline (until steady, no restart)")
    _add_engines(restart, "case")
    _add_variants(restart, "case", "trigger.interval.ms=500")
    restart.add_argument(
        "--rounds",
        type=_rounds,
        default=BenchParams().rounds,
        help="run every engine, protocol and variant this many times, in turn (A B A B), so a "
        "difference shows beside the run-to-run spread (default 1)",
    )
    _add_numbers(
        restart,
        BenchParams(),
        {
            "--instances": "processor instances",
            "--scale-to": "how many instances the scale-out case grows the deployment to",
            "--partitions": "input partitions",
            "--rate": "page views per second",
            "--keys": "distinct pages",
            "--session-timeout-ms": "consumer session.timeout.ms",
            "--standby-replicas": "num.standby.replicas of the hand-off cases",
            "--steady-s": "seconds of steady processing before the restart",
            "--min-ready-s": "a rollout's minReadySeconds: how long a restarted instance stays "
            "ready before the next one is stopped",
            "--ready-timeout-s": "how long the instances may take to be ready and caught up "
            "before a case (a busy machine needs more)",
            "--broker-down-s": "how long the broker-kill case keeps its broker down",
            "--down-s": "how long a restarted instance stays down, from its stop to its start "
            "(a replaced pod's termination and scheduling)",
        },
    )
    throughput = sub.add_parser("throughput", parents=[common], help="one instance's rate")
    throughput.add_argument(
        "--configs",
        type=_configs,
        default=list(DEFAULT_CONFIGS),
        help="max.records.per.batch:trigger.interval.ms pairs, comma-separated (default "
        + ",".join(f"{r}:{t}" for r, t in DEFAULT_CONFIGS)
        + ")",
    )
    _add_protocols(throughput, "configuration (and Kafka Streams)")
    _add_warm_up(throughput, "run")
    _add_engines(throughput, "configuration (Kafka Streams: one row, it has none)")
    _add_variants(throughput, "configuration", "spark.driver.memory=512m")
    _add_numbers(
        throughput,
        ThroughputParams(),
        {
            "--backlog": "records produced before the instance starts",
            "--partitions": "input partitions",
            "--keys": "distinct pages",
            "--latency-rate": "records/s for the latency phase",
            "--latency-s": "seconds of the latency phase",
            "--latency-warmup-s": "seconds of the latency phase left out of its second p99",
            "--restores": "restores of the whole changelog per row, one after another",
        },
    )
    node = sub.add_parser(
        "node-rollout",
        help="the hand-off processor rolled by `pulumi up` on a real node (root; make tools "
        "node-parts first)",
    )
    node_rollout.add_arguments(node)
    tables = sub.add_parser(
        "tables", help="the commands behind the tables of docs/benchmarks.md, one after another"
    )
    tables.add_argument(
        "--only",
        type=_tables,
        default=list(TABLE_NAMES),
        help=f"of {', '.join(TABLE_NAMES)} (default: all, in this order)",
    )
    tables.add_argument(
        "--out",
        type=Path,
        default=Path("build/bench"),
        help="each table goes to OUT/<table>/ (default build/bench)",
    )
    return parser.parse_args(argv)


def run_tables(names: Sequence[str], out: Path) -> int:
    """Run the named tables' commands one after another; 0 when every one's rows were exact."""
    failed = []
    chosen = [t for t in TABLES if t.name in names]
    for number, table in enumerate(chosen, 1):
        print(
            f"=== table {number} of {len(chosen)}: {table.name} ({table.heading}): "
            f"{table.command} --out {out / table.name}",
            flush=True,
        )
        if main([*table.argv, "--out", str(out / table.name)]) != 0:
            failed.append(table.name)
    if failed:
        print(f"tables with rows that were not exact: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m devkit.bench`."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stdout
    )
    args = parse_args(argv)
    out = args.out.resolve()
    if args.bench == "tables":
        return run_tables(args.only, out)
    if args.bench == "node-rollout":
        return node_rollout.run(node_rollout.params_of(args), out)
    try:
        client = ClientConfig.load(args.command_config, os.environ)
    except ClientPropertiesError as exc:
        raise SystemExit(f"python -m devkit.bench: {exc}") from exc
    with ExitStack() as stack:
        bootstrap = args.bootstrap_servers
        brokers = None
        if client.path is not None and not bootstrap:
            raise SystemExit(
                f"--command-config {client.path}: for a secured cluster named by "
                "--bootstrap-servers; the bench's own brokers run PLAINTEXT"
            )
        if bootstrap:
            broker = f"the cluster at {bootstrap}"
        else:
            brokers = stack.enter_context(KraftCluster())
            bootstrap = brokers.bootstrap_servers
            broker = f"Apache Kafka {brokers.release.version}, 3 local KRaft nodes"
        if args.bench == "rolling-restart":
            params = replace(
                BenchParams(),
                instances=args.instances,
                scale_to=args.scale_to,
                partitions=args.partitions,
                rate=args.rate,
                keys=args.keys,
                session_timeout_ms=args.session_timeout_ms,
                standby_replicas=args.standby_replicas,
                heartbeat_interval_ms=max(
                    1,
                    min(
                        int(DEFAULTS["consumer.heartbeat.interval.ms"]),
                        args.session_timeout_ms // 10,
                    ),
                ),
                steady_s=args.steady_s,
                min_ready_s=args.min_ready_s,
                ready_timeout_s=args.ready_timeout_s,
                broker_down_s=args.broker_down_s,
                down_s=args.down_s,
                group_protocols=tuple(args.group_protocols),
                engines=tuple(args.engines),
                variants=(Variant(), *args.variants),
                warm_up=args.warm_up,
                rounds=args.rounds,
            )
            chosen = [c for c in CASES if c.name in args.cases]
            if any(c.scale for c in chosen):
                try:
                    check_scale(params)
                except ValueError as exc:
                    raise SystemExit(f"python -m devkit.bench: {exc}") from exc
            results = run_matrix(chosen, params, out, bootstrap, broker, brokers, client)
            return 0 if all(r.ok for r in results) else 1
        params_tp = replace(
            ThroughputParams(),
            backlog=args.backlog,
            partitions=args.partitions,
            keys=args.keys,
            latency_rate=args.latency_rate,
            latency_s=args.latency_s,
            latency_warmup_s=args.latency_warmup_s,
            warm_up=args.warm_up,
            restores=args.restores,
        )
        variants = [Variant(), *args.variants]
        run_throughput(
            args.configs, params_tp, out, bootstrap, broker, client, variants, args.engines,
            args.group_protocols,
        )  # fmt: skip
        return 0


if __name__ == "__main__":
    sys.exit(main())
