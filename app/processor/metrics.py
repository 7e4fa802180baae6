"""The processor's Prometheus metrics, defined once, with one short method per event."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping

import confluent_kafka
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# From a caught-up batch (a fixed overhead of about a second) to a backlog's capped batch.
BATCH_DURATION_BUCKETS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0)

TopicPartition = tuple[str, int]


class ProcessorMetrics:
    """All metrics of one processor instance, in a registry of their own.

    A registry per instance keeps tests, and several instances in one process, from colliding
    on prometheus_client's global registry.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.records_in = Counter(
            "processor_records_in",
            "Input records processed, per input partition.",
            ["topic", "partition"],
            registry=r,
        )
        self.records_out = Counter(
            "processor_records_out", "Records written, per topic.", ["topic"], registry=r
        )
        self.dlq_records = Counter(
            "processor_dlq_records",
            "Records sent to the dead-letter topic, per reason.",
            ["reason"],
            registry=r,
        )
        self.consumer_lag = Gauge(
            "processor_consumer_lag_records",
            "Records between the committed offset and the end of the partition.",
            ["topic", "partition"],
            registry=r,
        )
        self.assigned_partitions = Gauge(
            "processor_assigned_partitions", "Partitions this instance owns now.", registry=r
        )
        self.batch_duration = Histogram(
            "processor_batch_duration_seconds",
            "Wall time of one micro-batch, from planning to the committed transaction.",
            buckets=BATCH_DURATION_BUCKETS,
            registry=r,
        )
        self.restore_records = Counter(
            "processor_restore_records",
            "Changelog records replayed into the state, per partition.",
            ["partition"],
            registry=r,
        )
        self.standby_records = Counter(
            "processor_standby_records",
            "Changelog records read into this instance's standby copies (num.standby.replicas), "
            "per partition: what keeping the copies costs in reads.",
            ["partition"],
            registry=r,
        )
        self.restore_duration = Gauge(
            "processor_restore_duration_seconds",
            "Duration of the last state restore, per partition, from planning to commit.",
            ["partition"],
            registry=r,
        )
        self.restore_read_seconds = Counter(
            "processor_restore_read_seconds",
            "Time the source's readers spent reading and folding changelog records for "
            "restores, per partition (their own timer: restore records / this is the rate).",
            ["partition"],
            registry=r,
        )
        self.kafka_retry_episodes = Counter(
            "processor_kafka_retry_episodes",
            "Episodes of a Kafka call retried through transient errors (broker restart, leader "
            "or coordinator move), per call.",
            ["call"],
            registry=r,
        )
        self.rebalances = Counter(
            "processor_rebalances", "Rebalances this instance took part in.", registry=r
        )
        self.partitions_assigned = Counter(
            "processor_partitions_assigned", "Partitions assigned to this instance.", registry=r
        )
        self.partitions_revoked = Counter(
            "processor_partitions_revoked", "Partitions revoked from this instance.", registry=r
        )
        self.transactions = Counter(
            "processor_transactions",
            "Sink transactions by result (committed or aborted).",
            ["result"],
            registry=r,
        )
        self.batches_skipped = Counter(
            "processor_batches_skipped",
            "Replayed batches not written again because their transaction had committed.",
            registry=r,
        )
        self.ready = Gauge(
            "processor_ready", "1 when the instance is ready to process, else 0.", registry=r
        )
        self.start_duration = Gauge(
            "processor_start_duration_seconds",
            "Process start to the first committed batch (0 until then).",
            registry=r,
        )
        self.pair_publishing = Gauge(
            "processor_pair_publishing",
            "A side of an active/standby pair: 1 for an owned partition whose output this "
            "instance publishes, 0 while it only keeps the state (idle side, hand-over).",
            ["partition"],
            registry=r,
        )
        # monotonic time of the first committed batch: the end of the start (startup.py)
        self.first_commit_at: float | None = None
        for result in ("committed", "aborted"):
            # Present at 0 from the start, so rate() and alerts on aborts work before the first.
            self.transactions.labels(result)
        self._owned: set[TopicPartition] = set()

    def batch_done(
        self,
        duration_s: float,
        records_in_by_partition: Mapping[TopicPartition, int],
        records_out: Mapping[str, int],
    ) -> None:
        """A batch committed: duration, input records per (topic, partition), output per topic."""
        if self.first_commit_at is None:
            self.first_commit_at = time.monotonic()
        self.batch_duration.observe(duration_s)
        for (topic, partition), count in records_in_by_partition.items():
            self.records_in.labels(topic, str(partition)).inc(count)
        for topic, count in records_out.items():
            self.records_out.labels(topic).inc(count)

    def pair_published(self, publishing: Mapping[int, bool]) -> None:
        """A side of a pair committed a batch: which of its partitions it published."""
        for partition, publishes in publishing.items():
            self.pair_publishing.labels(str(partition)).set(1 if publishes else 0)

    def dlq(self, reason: str, count: int = 1) -> None:
        """`count` records went to the dead-letter topic for `reason` (a short, fixed string)."""
        self.dlq_records.labels(reason).inc(count)

    def lag(self, topic: str, partition: int, value: int) -> None:
        """The consumer lag of one owned partition."""
        self.consumer_lag.labels(topic, str(partition)).set(value)

    def kafka_retry_episode(self, call: str) -> None:
        """A Kafka call started failing with transient errors and is being retried."""
        self.kafka_retry_episodes.labels(call=call).inc()

    def rebalance(
        self, assigned: Iterable[TopicPartition], revoked: Iterable[TopicPartition]
    ) -> None:
        """A rebalance added `assigned` and removed `revoked` (incremental, cooperative)."""
        assigned, revoked = set(assigned), set(revoked)
        self.rebalances.inc()
        self.partitions_assigned.inc(len(assigned))
        self.partitions_revoked.inc(len(revoked))
        self._owned = (self._owned - revoked) | assigned
        self.assigned_partitions.set(len(self._owned))
        for topic, partition in revoked - assigned:
            # A partition that moved away has no lag here; a stale series would mislead alerts.
            with contextlib.suppress(KeyError):
                self.consumer_lag.remove(topic, str(partition))
            with contextlib.suppress(KeyError):
                self.pair_publishing.remove(str(partition))

    def restore_done(
        self, partition: int, records: int, seconds: float, read_seconds: float
    ) -> None:
        """The state of `partition` was restored from `records` changelog records, read in
        `read_seconds`, in `seconds` from planning to commit."""
        self.restore_records.labels(str(partition)).inc(records)
        self.restore_read_seconds.labels(str(partition)).inc(read_seconds)
        self.restore_duration.labels(str(partition)).set(seconds)

    def standby_read(self, records: Mapping[int, int]) -> None:
        """A batch read these changelog records (per partition) into standby copies."""
        for partition, count in records.items():
            self.standby_records.labels(str(partition)).inc(count)

    def transaction(self, committed: bool) -> None:
        """A sink transaction ended: committed, or aborted (fenced, revoked, failed)."""
        self.transactions.labels("committed" if committed else "aborted").inc()

    def batch_skipped(self) -> None:
        """A replayed batch whose transaction had already committed was not written again."""
        self.batches_skipped.inc()

    def set_ready(self, ready: bool) -> None:
        """Mirror the readiness probe's answer."""
        self.ready.set(1 if ready else 0)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


def export_lag(
    metrics: ProcessorMetrics,
    consumer: confluent_kafka.Consumer,
    topic: str,
    committed: Mapping[int, int | None],
    timeout_s: float = 30.0,
) -> None:
    """Each partition's lag: its high watermark minus the group's committed offset (the whole
    partition when nothing is committed)."""
    for partition in sorted(committed):
        _, high = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, partition), timeout=timeout_s, cached=False
        )
        start = committed[partition]
        metrics.lag(topic, partition, max(0, high - start) if start is not None else high)
