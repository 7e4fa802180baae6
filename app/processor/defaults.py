"""The processor's defaults, the one place that holds them (keys as the contract names them).

Standard library only: the Pulumi program renders the properties file from these too.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# The one place that holds the defaults (keys and values exactly as the contract names them).
DEFAULTS: Mapping[str, str] = MappingProxyType(
    {
        "processing.guarantee": "exactly_once_v2",
        "stateful": "true",
        # static: a restart keeps its partitions (group.instance.id, no rebalance) and they wait
        # for it; handoff: on SIGTERM the instance leaves the group so its partitions move at once,
        # and a restarted instance warms its query up before it joins (README, "Membership modes").
        "membership.mode": "static",
        # Kafka Streams' default: no standby state. With N >= 1 each partition's state has N warm
        # copies on instances other than its owner (1: one copy per partition on another
        # instance), so a partition that moves to such an instance restores only the changelog tail.
        "num.standby.replicas": "0",
        "state.dir": "/var/lib/processor",
        "health.port": "8080",
        # Kafka Streams' name and default: how long a Kafka call of the source, the restore or
        # the group member may keep failing with errors that clear by themselves (a broker
        # restart, a leader or coordinator move) before the instance fails (`app/kafka_retry.py`).
        "task.timeout.ms": "300000",
        "trigger.interval.ms": "1000",
        # A cap for a backlog, not a batch size: a caught-up batch takes what arrived since the
        # last one. A batch costs about 1.5 s, plus three state-server round trips per distinct
        # key, plus a few microseconds per record (README, "Benchmarks"): on 10,000 pages a
        # backlog drained at 58,000 events/s with 500,000 and 90,000 with 1,000,000.
        "max.records.per.batch": "1000000",
        # How long SIGTERM waits for the running batch before stopping the query anyway; the
        # pod's terminationGracePeriodSeconds covers it plus Spark's shutdown.
        "shutdown.timeout.ms": "45000",
        "consumer.group.protocol": "classic",
        # librdkafka's default; the Pulumi program computes the session timeout from the
        # StatefulSet (grace period + startup budget + minReadySeconds) and renders it.
        "consumer.session.timeout.ms": "45000",
        # A member learns of a rebalance at its next heartbeat: when an instance hands its
        # partitions over, librdkafka's 3 s default was up to 3 s of every moved partition's
        # gap. One small request a second per member is nothing to the coordinator.
        "consumer.heartbeat.interval.ms": "1000",
        "consumer.partition.assignment.strategy": "cooperative-sticky",
        "consumer.isolation.level": "read_committed",
        "consumer.max.poll.interval.ms": "300000",
        "consumer.enable.auto.commit": "false",
        "producer.transaction.timeout.ms": "60000",
        "producer.acks": "all",
        "producer.enable.idempotence": "true",
        # The Spark driver's class-data-sharing archive (`python -m app.processor.class_archive`):
        # "auto" maps the one built into this Python environment (the image builds it) if it is
        # there, a path maps that one, "" none. It saves 3-6 s of every start.
        "class.data.archive": "auto",
        # Spark's Python processes (the data source's planners, the source runner, the task
        # daemons) fork from one process that imported pyspark, pandas and pyarrow once, instead
        # of each importing them, one after another, on a start's critical path
        # (`app/processor/python_forkserver.py`). "false": Spark starts them itself.
        "python.forkserver": "true",
        "spark.master": "local[2]",
        # The JVM's C1 compiler only: C2 spends the first minutes of a start compiling on the
        # same cores as everything else, and its faster code pays off only after that. On 2
        # cores: `make run`'s first counts after 45 s instead of 56 s (SparkSession 9 s instead
        # of 12-17 s); four 10,000-page stateful batches 32 s instead of 45 s. The price is the
        # steady state: caught-up batches 3.7 s instead of 2.0 s (1,000 views/s over 10,000
        # pages, side by side), a trade of latency for start time (README, "Start time").
        # Setting this key replaces the value.
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
        # As many as the cores, so a batch's stateful tasks run in one wave: each costs about
        # 0.3 s whatever its size (Python worker, state store, state server), and a second wave
        # made a caught-up batch 0.4 s slower (2x the cores) on 2 cores; Spark's default of 200
        # made it 7x slower. Fixed in the checkpoint at first start.
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.local.dir": "/tmp/spark",
        # Python workers fork from a daemon that imported pandas, pyarrow and the processor once,
        # instead of each worker importing them after the fork: -5 to -8 s on a first batch.
        "spark.python.daemon.module": "app.processor.python_daemon",
        # Progress bars are for terminals; in a pod's log they are noise on every batch.
        "spark.ui.showConsoleProgress": "false",
        # The web UI costs about 1 s of every start and an unauthenticated port the pod does not
        # expose; /metrics and the batch log say what it would. To debug: set it to true and
        # `kubectl port-forward pod/<name> 4040`.
        "spark.ui.enabled": "false",
    }
)

# Contract keys whose values come from the pod's identity (`${env:POD_NAME}`).
INSTANCE_ID_KEY = "consumer.group.instance.id"
MEMBERSHIP_STATIC = "static"
MEMBERSHIP_HANDOFF = "handoff"
TRANSACTIONAL_ID_KEY = "producer.transactional.id"


# What the deployments (the Pulumi program, the local run, the bench) set instead of the
# contract's 60 s `producer.transaction.timeout.ms`: a crashed instance's open transaction keeps
# its partitions' committed offsets unstable (KIP-447: their next owner cannot fetch them) until
# the coordinator aborts it after this long, or its pod's next producer fences it. A transaction
# spans only a batch's output and offsets (well under a second), so Kafka Streams' exactly-once
# default of 10 s costs nothing, where 60 s held a crashed instance's partitions for a minute.
CRASH_SAFE_TRANSACTION_TIMEOUT_MS = 10_000
