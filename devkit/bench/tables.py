"""The commands behind the tables of `docs/benchmarks.md`, one place: `make bench` runs them all,
`make bench ARGS="--only crashes,throughput"` some, each into `build/bench/<name>/`.

A table in the docs names its entry here ("Command: `make bench ARGS="--only NAME"`") and the
full command it stands for; `tests/app/test_bench_tables.py` checks the two agree, so a table's
workload cannot drift from the command that reproduces it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class DocTable:
    """One table of `docs/benchmarks.md` and the bench command that produces it."""

    name: str
    heading: str  # the table's `###` heading in docs/benchmarks.md
    arguments: str  # after `python -m devkit.bench`

    @property
    def argv(self) -> list[str]:
        """The arguments, split."""
        return shlex.split(self.arguments)

    @property
    def command(self) -> str:
        """The full command, as the docs quote it."""
        return f"python -m devkit.bench {self.arguments}"


# The performance targets, measured together: the restart of one of 2 instances (5 s down, as
# the Kafka Streams case) and the one-instance throughput, restore and memory workload, each
# beside Kafka Streams on the same brokers.
TARGETS_HEADING = "The performance targets in one run"
# The seeds' bar on Kubernetes: the hand-off processor rolled by `pulumi up` on a real node, and
# the same workload's rollout as local processes beside it.
NODE_HEADING = "The seeds' bar on a real node"
# The seeds' bar in every shipped stack (issue 63), its five figures in one run: a static
# restart and a hand-off of one of 2 instances, a hand-off rollout of 3, the dev stack's roll
# (2 instances, one standby), and one instance's p99 at two trigger intervals; Kafka Streams
# beside each on its own best protocol (classic with static members, and streams groups).
SEEDS_HEADING = "The seeds' bar in every stack, in one run"
_SEEDS_ROLL = "--partitions 6 --rate 1000 --keys 10000"
_SEEDS_ENGINES = "--engines processor,kafka-streams --group-protocols classic,consumer"

TABLES: tuple[DocTable, ...] = (
    DocTable(
        "static-restart",
        "Restarts with the state kept",
        "rolling-restart --cases static-kept --instances 1 --partitions 4 --rate 20",
    ),
    DocTable(
        "dev-membership",
        "Membership in the dev stack",
        "rolling-restart --cases rollout-static,rollout-handoff --instances 2 --partitions 6 "
        "--rate 1000 --keys 10000 --session-timeout-ms 60000 --standby-replicas 1 "
        "--engines processor,kafka-streams",
    ),
    DocTable(
        "crashes",
        "Crashes in hand-off mode",
        "rolling-restart --cases rollout-handoff,handoff-crash-restart,handoff-crash-gone "
        "--instances 3 --partitions 6 --rate 1000 --keys 10000 --session-timeout-ms 10000",
    ),
    DocTable(
        "wiped-restart",
        "An instance back without its state",
        "rolling-restart --cases handoff-wiped --instances 3 --partitions 6 --rate 1000 "
        "--keys 10000 --session-timeout-ms 10000 --standby-replicas 2 "
        "--engines processor,kafka-streams",
    ),
    DocTable(
        "handoff-phases",
        "Where a hand-off's time goes",
        "rolling-restart --cases rollout-handoff --instances 3 --partitions 6 --rate 1000 "
        "--keys 10000 --session-timeout-ms 10000 --engines processor,kafka-streams",
    ),
    DocTable(
        "handoff-5000",
        "Where a hand-off's time goes",
        "rolling-restart --cases rollout-handoff --instances 3 --partitions 6 --rate 5000 "
        "--keys 10000 --session-timeout-ms 10000",
    ),
    DocTable(
        "trigger-interval",
        "Where a hand-off's time goes",
        "rolling-restart --cases rollout-handoff --instances 3 --partitions 6 --rate 1000 "
        "--keys 10000 --session-timeout-ms 10000 --set trigger.interval.ms=250 "
        "--set trigger.interval.ms=1000",
    ),
    DocTable(
        "warm-copies-1",
        "Warm copies",
        "rolling-restart --cases rollout-handoff,standby-failover --instances 3 --partitions 6 "
        "--rate 1000 --keys 10000 --session-timeout-ms 10000 --standby-replicas 1",
    ),
    DocTable(
        "warm-copies-2",
        "Warm copies",
        "rolling-restart --cases rollout-handoff,standby-failover --instances 3 --partitions 6 "
        "--rate 1000 --keys 10000 --session-timeout-ms 10000 --standby-replicas 2",
    ),
    DocTable(
        "rollouts",
        "Rollouts and failover",
        "rolling-restart --cases rollout-handoff,rollout-static,handoff,standby-failover "
        "--instances 3 --partitions 6 --rate 100 --keys 100",
    ),
    DocTable(
        "failover-2",
        "Rollouts and failover",
        "rolling-restart --cases static-failover,standby-failover "
        "--instances 2 --partitions 4 --rate 100 --keys 40",
    ),
    DocTable(
        "throughput",
        "Throughput",
        "throughput --backlog 2000000 --partitions 6 --keys 10000 "
        "--configs 1000000:1000,500000:1000 --latency-rate 1000 --latency-s 30",
    ),
    DocTable(
        "state-buckets",
        "State per bucket",
        "throughput --backlog 2000000 --partitions 6 --keys 10000 --configs 1000000:1000 "
        "--latency-rate 1000 --latency-s 30 --engines processor,kafka-streams",
    ),
    DocTable(
        "memory",
        "Memory",
        "throughput --backlog 2000000 --partitions 6 --keys 10000 --configs 1000000:1000 "
        "--latency-rate 1000 --latency-s 30 "
        "--set spark.driver.memory=1g,spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1",
    ),
    DocTable(
        "initial-heap",
        "Memory",
        "throughput --backlog 2000000 --partitions 6 --keys 10000 --configs 1000000:1000 "
        "--latency-rate 1000 --latency-s 30 --restores 5 "
        "--set 'spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' "
        "--set 'spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC "
        "-Xms192m -Xmn32m' "
        "--set 'spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC "
        "-Xms192m -Xmn64m' "
        "--set 'spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC "
        "-Xms192m -Xmn128m'",
    ),
    DocTable(
        "gc-freeze",
        "Restore",
        "throughput --backlog 2000000 --partitions 6 --keys 10000 --configs 1000000:1000 "
        "--latency-rate 1000 --latency-s 30 --restores 5 "
        "--set python.gc.freeze=false --set python.gc.freeze=true",
    ),
    DocTable(
        "restore",
        "Restore",
        "throughput --backlog 2000000 --partitions 6 --keys 10000 --configs 1000000:1000 "
        "--latency-rate 1000 --latency-s 30 --restores 5 --set consumer.fetch.wait.max.ms=500",
    ),
    DocTable(
        "targets-restart",
        TARGETS_HEADING,
        "rolling-restart --cases static-kept,handoff --instances 2 --partitions 6 --rate 1000 "
        "--keys 10000 --down-s 5 --engines processor,kafka-streams",
    ),
    DocTable(
        "targets-throughput",
        TARGETS_HEADING,
        "throughput --backlog 2000000 --partitions 6 --keys 10000 --configs 1000000:1000 "
        "--latency-rate 1000 --latency-s 30 --restores 5 --engines processor,kafka-streams",
    ),
    DocTable(
        "seeds-restart",
        SEEDS_HEADING,
        f"rolling-restart --cases static-kept,handoff --instances 2 {_SEEDS_ROLL} --down-s 5 "
        f"{_SEEDS_ENGINES}",
    ),
    DocTable(
        "seeds-rollout",
        SEEDS_HEADING,
        f"rolling-restart --cases rollout-handoff --instances 3 {_SEEDS_ROLL} "
        f"--session-timeout-ms 10000 {_SEEDS_ENGINES}",
    ),
    DocTable(
        "seeds-dev",
        SEEDS_HEADING,
        f"rolling-restart --cases rollout-handoff --instances 2 {_SEEDS_ROLL} "
        f"--session-timeout-ms 60000 --standby-replicas 1 {_SEEDS_ENGINES}",
    ),
    DocTable(
        "seeds-latency",
        SEEDS_HEADING,
        "throughput --backlog 20000 --partitions 6 --keys 10000 --configs 1000000:1000,1000000:250 "
        "--latency-rate 1000 --latency-s 30 --restores 1 --engines processor,kafka-streams",
    ),
    DocTable(
        "seeds-latency-fast",
        SEEDS_HEADING,
        "throughput --backlog 20000 --partitions 6 --keys 10000 --configs 1000000:1000,1000000:100 "
        "--latency-rate 1000 --latency-s 30 --restores 1",
    ),
    DocTable(
        "seeds-latency-warm",
        SEEDS_HEADING,
        "throughput --backlog 20000 --partitions 6 --keys 10000 --configs 1000000:1000,1000000:250 "
        f"--latency-rate 1000 --latency-s 60 --restores 1 {_SEEDS_ENGINES}",
    ),
    DocTable(
        "seeds-node-restart",
        SEEDS_HEADING,
        "node-rollout --rate 20 --keys 100 --partitions 4 --replicas 1 --standby-replicas 0 "
        "--membership-mode static --processor-cpu 1",
    ),
    DocTable(
        "group-protocols",
        "Rollouts under both group protocols",
        "rolling-restart --cases rollout-handoff,rollout-static --instances 3 --partitions 6 "
        "--rate 1000 --keys 10000 --group-protocols classic,consumer "
        "--engines processor,kafka-streams",
    ),
    DocTable(
        "pair",
        "Active/standby pair beside the single deployment",
        "rolling-restart --cases rollout-handoff,handoff-crash-gone,pair-switch,pair-failover "
        "--instances 3 --partitions 6 --rate 1000 --keys 10000 --session-timeout-ms 10000",
    ),
    DocTable(
        "broker-loss",
        "A broker lost, by its role for the pipeline",
        "rolling-restart --cases broker-kill-group-coordinator,broker-kill-transaction-coordinator,"
        "broker-kill-neither,broker-lost-group-coordinator --instances 3 --partitions 6 "
        "--rate 1000 --keys 10000 --standby-replicas 2 --broker-down-s 45 "
        "--engines processor,kafka-streams",
    ),
    DocTable(
        "scale",
        "Scaling out and in under load",
        "rolling-restart --cases scale-out,scale-in --instances 3 --scale-to 5 --partitions 12 "
        "--rate 1000 --keys 10000 --standby-replicas 2 --engines processor,kafka-streams",
    ),
    DocTable(
        "broker-restarts",
        "Broker restarts",
        "rolling-restart --cases broker-roll,broker-kill "
        "--instances 2 --partitions 6 --rate 500 --keys 10000",
    ),
    DocTable(
        "node-rollout",
        NODE_HEADING,
        "node-rollout --rate 1000 --keys 10000 --partitions 6 --replicas 3 --standby-replicas 2",
    ),
    DocTable(
        "node-rollout-local",
        NODE_HEADING,
        "rolling-restart --cases rollout-handoff --instances 3 --partitions 6 --rate 1000 "
        "--keys 10000 --session-timeout-ms 10000 --standby-replicas 2",
    ),
)
TABLE_NAMES = tuple(t.name for t in TABLES)
