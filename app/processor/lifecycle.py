"""One processor instance from start to exit: membership, health, the query and its restarts.

The start order depends on `membership.mode`. Static: join the group first (the group kept the
partitions for this `group.instance.id`; joining while Spark starts costs nothing), then start
the query. Hand-off: start the query and run one warm-up batch first (it reads no input, and
catches the instance's state copies up with their changelogs), then join, so that the partitions
the group moves here wait for a warm query and a caught-up copy (seconds), not for a process
start; on SIGTERM the member leaves the group after the last batch committed, so the partitions
move to the other instances at once.

The main process owns what must outlive a query run: the group membership (so a query restart is
no rebalance), the transactional producer, the health endpoint and the signal handling. The
query is restarted after a retriable failure (an aborted transaction: Spark replays the batch);
a fenced producer or group member means another process took this instance's identity, and the
instance exits non-zero rather than fence it back.
"""

from __future__ import annotations

import faulthandler
import logging
import shutil
import signal
import threading
import time
from types import FrameType

from pyspark.sql.streaming import StreamingQuery

from app.clients.kafka_retry import Retrying
from app.clients.waiting import poll_until
from app.processor import assignment_file, python_forkserver
from app.processor.aggregation import load_aggregation
from app.processor.assignment_file import Assignment, assignment_path
from app.processor.group_member import GroupMember
from app.processor.health import HealthServer, ReadinessStatus
from app.processor.metrics import ProcessorMetrics
from app.processor.pair import PairControl
from app.processor.pipeline import spark_session, start_query
from app.processor.planned_batch import BatchProgress
from app.processor.settings import ProcessorSettings, earlier_checkpoints
from app.processor.sink import SinkTopics, TransactionalSink
from app.processor.source_offsets import held_partitions, last_committed_offsets
from app.processor.startup import StartupClock
from app.processor.state_restore import copies_path, read_copies
from contract.processor_keys import MEMBERSHIP_HANDOFF

log = logging.getLogger(__name__)

# Consecutive failed query runs before the instance gives up (the kubelet then restarts it).
MAX_QUERY_RESTARTS = 5
RESTART_BACKOFF_S = 2.0
# The group join can take a while (the broker waits group.initial.rebalance.delay.ms).
ASSIGNMENT_TIMEOUT_S = 300.0
# The warm-up batch takes what a first batch takes (Python workers, plans, state stores): seconds
# on a quiet machine, a minute on a busy one. Past this the instance joins anyway.
WARM_UP_TIMEOUT_S = 180.0
# A warm-up batch this quick left the copies at most this far behind (KIP-441's "caught up");
# a slower one (the first: Python workers, plans) is followed by another, at most this many.
CAUGHT_UP_ROUND_S = 5.0
MAX_WARM_UP_ROUNDS = 4
# How long the group's description before the warm-up may take (a child process's start, an
# answer from the coordinator); without one the instance warms the copies it has, as before.
DESCRIBE_BEFORE_JOIN_S = 30.0

# A stop still running this long after shutdown.timeout.ms dumps every Python thread's stack to
# the log (stderr): a shutdown that hangs says where, before the kubelet's SIGKILL at
# terminationGracePeriodSeconds erases it.
STOP_OVERRUN_DUMP_S = 10.0

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_FENCED = 3


class ProcessorInstance:
    """Run with `run()`; SIGTERM/SIGINT stop it cleanly (see `_shutdown`)."""

    def __init__(
        self, settings: ProcessorSettings, forkserver: python_forkserver.ForkServer | None = None
    ) -> None:
        self.settings = settings
        # Started by `__main__` before its heavy imports (`python.forkserver`); None: Spark
        # starts its Python processes itself.
        self._forkserver = forkserver
        self.metrics = ProcessorMetrics()
        self.batches = BatchProgress(settings.checkpoint_dir)
        self.member = GroupMember(
            # The member's name orders the ring of standbys when it has no group.instance.id.
            {"client.id": settings.transactional_id, **settings.consumer_config()},
            settings.input_topic,
            assignment_path(settings.state_dir),
            self.metrics,
            standby_replicas=settings.num_standby_replicas,
            batches=self.batches,
            retrying=Retrying(settings.task_timeout_ms / 1000, self.metrics.kafka_retry_episode),
            # A hand-off instance joins a running group: its first, empty, assignment is only
            # the first step of the join, and its readiness must not count it.
            confirm_empty_assignment=settings.membership_mode == MEMBERSHIP_HANDOFF,
        )
        self.health = HealthServer(settings.health_port, self.metrics, self.readiness)
        self._stop = threading.Event()
        self._query_running = False
        self._batch_done = False
        self.clock = StartupClock()

    def readiness(self) -> ReadinessStatus:
        """Ready: the query runs and finished a batch, the assignment arrived (hand-off: and is
        not the empty first step of a join, `GroupMember.settled_assignment`), and every owned
        partition's state is in the checkpoint (restored or held)."""
        owned = self.member.settled_assignment()
        held = held_partitions(
            self.settings.checkpoint_dir, self.settings.input_topic, self.settings.changelog_topic
        )
        return ReadinessStatus(
            query_running=self._query_running,
            assignment_received=owned is not None,
            restore_done=owned is not None and owned <= held,
            batch_done=self._batch_done,
        )

    def _retire_earlier_checkpoints(self) -> None:
        """Remove checkpoints of another state layout: this version cannot read their state."""
        for path in earlier_checkpoints(self.settings.state_dir):
            log.warning(
                "removing %s: its state has another layout than this version's (%s); the state "
                "is restored from the changelog %s",
                path,
                self.settings.checkpoint_dir.name,
                self.settings.changelog_topic,
            )
            shutil.rmtree(path)

    def request_stop(self, signum: int, _frame: FrameType | None = None) -> None:
        """Signal handler: finish the current batch, then stop."""
        log.info(
            "%s received: finishing the current batch, then stopping", signal.Signals(signum).name
        )
        if not self._stop.is_set():
            faulthandler.dump_traceback_later(
                self.settings.shutdown_timeout_ms / 1000 + STOP_OVERRUN_DUMP_S, exit=False
            )
        self._stop.set()

    def run(self) -> int:
        """Run until stopped; the process exit code."""
        self.clock.mark("interpreter and imports")
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        self.settings.state_dir.mkdir(parents=True, exist_ok=True)
        self._retire_earlier_checkpoints()
        self.health.start()
        handoff = self.settings.membership_mode == MEMBERSHIP_HANDOFF
        self.member.keep_copies(self._copies())
        if not handoff:
            self.member.start()
        spark = None
        forkserver = self._forkserver
        pair = self._pair_control()
        try:
            spark = spark_session(  # 3-10 s, while a static member joins
                self.settings, forkserver.python_exec if forkserver else None
            )
            self.clock.mark("SparkSession")
            sink = TransactionalSink(
                self.settings.producer_config(),
                SinkTopics(
                    self.settings.input_topic,
                    self.settings.output_topic,
                    self.settings.changelog_topic,
                    self.settings.dlq_topic,
                ),
                self.settings.checkpoint_dir,
                self.member,
                self.metrics,
                pair,
                retry_for_s=self.settings.task_timeout_ms / 1000,
            )
            self.clock.mark("transactional producer")
            warm = None
            if handoff:
                warm = self._warm_up(spark, sink)
                self.clock.mark("warm-up")
                log.info("warm %.1f s after start: joining the group", self.clock.since_start())
                # Standbys until the group's description says which to keep: what warmed up.
                self.member.keep_copies(self._copies())
                self.member.start()
            if not self._wait_for_assignment():
                return EXIT_OK if self._stop.is_set() else EXIT_FAILED
            self.clock.mark("group join")
            log.info("assignment received %.1f s after start", self.clock.since_start())
            if pair is not None:
                pair.watch(self.member.nudge)
            return self._supervise(spark, sink, warm)
        finally:
            self.member.close()
            if pair is not None:
                pair.close()
            if spark is not None:
                spark.stop()
            if forkserver is not None:
                forkserver.close()
            self.health.stop()
            faulthandler.cancel_dump_traceback_later()
            log.info("processor stopped")

    def _pair_control(self) -> PairControl | None:
        """This side's reader of the pair's control topic, if the deployment is a side."""
        settings = self.settings
        if settings.pair_side is None or settings.pair_control_topic is None:
            return None
        log.info(
            "side %s of an active/standby pair: publishing only while %s says so",
            settings.pair_side,
            settings.pair_control_topic,
        )
        return PairControl(
            settings.pair_side,
            settings.pair_control_topic,
            settings.input_topic,
            settings.changelog_topic,
            settings.consumer_config(),
            load_aggregation(settings.aggregation_class),
            settings.transactional_id,
        )

    def _wait_for_assignment(self) -> bool:
        deadline = time.monotonic() + ASSIGNMENT_TIMEOUT_S
        while not self._stop.is_set():
            self.health.heartbeat()
            if self.member.wait_for_assignment(1.0):
                return True
            if time.monotonic() > deadline:
                log.error(
                    "no partition assignment from group %s within %.0f s: is the broker "
                    "reachable and the input topic %s created?",
                    self.settings.application_id,
                    ASSIGNMENT_TIMEOUT_S,
                    self.settings.input_topic,
                )
                return False
        return False

    def _warm_up(self, spark: object, sink: TransactionalSink) -> StreamingQuery:
        """Start the query and run warm-up batches (no input: the changelogs of the copies it
        has and of those the group may hand it, `state_restore.warm_up_partitions`) until one
        is quick, so that every copy is caught up before the instance joins."""
        have = self._copies()
        copies = sorted(set(have) | self._partitions_to_warm())
        if copies:
            cold = sorted(set(copies) - set(have))
            log.info(
                "warming up: catching up the copies of partitions %s first (%s)",
                copies,
                f"{cold} from the beginning, none here" if cold else "all from copies here",
            )
        query: StreamingQuery | None = None
        deadline = time.monotonic() + WARM_UP_TIMEOUT_S
        for round_ in range(1, MAX_WARM_UP_ROUNDS + 1):
            began = time.monotonic()
            token = int(time.time() * 1000)
            assignment_file.publish(
                assignment_path(self.settings.state_dir),
                Assignment(self.settings.input_topic, warm_up=token, standby=tuple(copies)),
            )
            query = query or self._start_query(spark, sink)
            while query.isActive and not self._stop.is_set() and not self._warmed(token):
                self.health.heartbeat()
                if time.monotonic() > deadline:
                    log.warning(
                        "warm-up not finished within %.0f s: joining the group anyway",
                        WARM_UP_TIMEOUT_S,
                    )
                    return query
                # pyspark annotates the timeout int, but takes float seconds (timeout * 1000 ms).
                query.awaitTermination(0.2)  # type: ignore[arg-type]
            took = time.monotonic() - began
            log.info("warm-up batch %d took %.1f s", round_, took)
            if took <= CAUGHT_UP_ROUND_S or not copies or not query.isActive:
                break  # what the copies missed meanwhile is a few seconds of changelog
        assert query is not None
        return query

    def _partitions_to_warm(self) -> set[int]:
        """The partitions the group may hand this instance once it joins, from the group's
        description before the join (none without standbys, or without a description)."""
        warm = self.member.partitions_to_warm(DESCRIBE_BEFORE_JOIN_S)
        if warm is None:
            log.warning(
                "group %s not described before the join (see above; a topic not created yet, "
                "brokers starting): warming up only the copies this instance has, so what the "
                "group hands it without one is rebuilt from the changelog while it waits",
                self.settings.application_id,
            )
            return set()
        return warm

    def _copies(self) -> list[int]:
        """The partitions whose state copies this instance has (kept when standbys are on)."""
        if self.settings.num_standby_replicas < 1:
            return []
        return sorted(read_copies(copies_path(self.settings.checkpoint_dir)))

    def _warmed(self, token: int) -> bool:
        done = last_committed_offsets(
            self.settings.checkpoint_dir, self.settings.input_topic, self.settings.changelog_topic
        )
        return done.warm_up == token

    def _start_query(self, spark: object, sink: TransactionalSink) -> StreamingQuery:
        self.batches.forget_planned()
        query = start_query(spark, self.settings, sink)  # type: ignore[arg-type]
        if not self.clock.reported:
            self.clock.mark("query start")
        log.info("query %s started (checkpoint %s)", query.id, self.settings.checkpoint_dir)
        self._query_running = True
        self._batch_done = False
        return query

    def _supervise(
        self, spark: object, sink: TransactionalSink, query: StreamingQuery | None = None
    ) -> int:
        """Watch the query (`query`: one already running, the warm-up's); restart it after a
        retriable failure; stop it cleanly when asked to."""
        failures = 0
        while query is not None or not self._stop.is_set():
            query = query or self._start_query(spark, sink)
            self._watch(query)
            self._query_running = False
            if self._stop.is_set():
                break
            error, query = query.exception(), None
            description = str(error) if error is not None else "stopped without an error"
            if self.member.fenced or sink.fenced is not None:
                log.error("this instance was fenced by another one with its identity; exiting")
                return EXIT_FENCED
            failures += 1
            log.warning(
                "query failed (%d/%d): %s", failures, MAX_QUERY_RESTARTS, _first_line(description)
            )
            if failures >= MAX_QUERY_RESTARTS:
                log.error("giving up after %d failed query runs", failures)
                return EXIT_FAILED
            time.sleep(RESTART_BACKOFF_S)
        return EXIT_OK

    def _watch(self, query: StreamingQuery) -> None:
        """Wait until the query ends or a stop is requested; then finish the batch and stop it."""
        logged_batch = -1
        while query.isActive:
            self.health.heartbeat()
            if self._stop.is_set():
                self._shutdown(query)
                return
            query.awaitTermination(1)
            logged_batch = _log_progress(query, logged_batch)
            # Spark reports progress after each batch, and every 10 s while there is no data.
            self._batch_done = self._batch_done or query.lastProgress is not None
            first_commit = self.metrics.first_commit_at
            if first_commit is not None and not self.clock.reported:
                self.metrics.start_duration.set(self.clock.report("first batch", first_commit))
            if self.member.fenced:
                # Another process joined with this group.instance.id: stop without a drain
                # (this instance can never commit again) and let the supervisor exit.
                query.stop()
                return

    def _shutdown(self, query: StreamingQuery) -> None:
        # No new batch gets planned; the running one finishes and commits its transaction.
        self.member.drain()
        if self.settings.membership_mode == MEMBERSHIP_HANDOFF:
            # The revocation waits for that commit; then the partitions move at once.
            self.member.leave()
        timeout_s = self.settings.shutdown_timeout_ms / 1000

        def batch_over() -> bool:
            self.health.heartbeat()
            return not (query.isActive and query.status["isTriggerActive"])

        if not poll_until(batch_over, timeout_s, interval_s=0.1):
            log.warning(
                "batch still running after shutdown.timeout.ms=%d: stopping anyway",
                self.settings.shutdown_timeout_ms,
            )
        query.stop()
        log.info("query stopped")


def _log_progress(query: StreamingQuery, logged_batch: int) -> int:
    """Log where the time of each new micro-batch went (Spark's own breakdown, in ms)."""
    progress = query.lastProgress
    if not progress or progress["batchId"] == logged_batch:
        return logged_batch
    durations = progress.get("durationMs", {})
    log.info(
        "batch %d: %d rows in %d ms (%s)",
        progress["batchId"],
        progress.get("numInputRows", 0),
        durations.get("triggerExecution", 0),
        ", ".join(f"{k} {v}" for k, v in sorted(durations.items()) if k != "triggerExecution"),
    )
    return int(progress["batchId"])


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
