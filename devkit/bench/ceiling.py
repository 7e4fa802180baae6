"""The throughput ceiling: the best single-process consume of a topic in the same run.

Three consumers read the whole backlog, one after another, and the best rate is the ceiling the
processor's events/s is divided by:

- `bench consumer`: what the bench measured before (confluent-kafka, `assign()` of every
  partition, read_committed, 10,000 messages a `consume()`, timed from the assignment, so the
  first fetch's connection and metadata are in it).
- `plain consumer`: the same client as lean as it goes: read_uncommitted (the default), timed
  from the first batch to the last, `len()` of each batch.
- `kafka-consumer-perf-test`: Kafka's own Java consumer benchmark
  (`org.apache.kafka.tools.ConsumerPerformance` in the release's kafka-tools jar), its
  `fetch.nMsg.sec` (records per second after the group join).
"""

from __future__ import annotations

import logging
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from devkit.kafka_release import ensure as ensure_release
from devkit.kafka_release import java_command
from devkit.local.observe import observer_config

log = logging.getLogger("devkit.bench")

BATCH = 10_000
READ_TIMEOUT_S = 300.0
PERF_TEST_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Ceiling:
    """Each consumer's records per second (None: it could not run) and the best of them."""

    rates: Mapping[str, float | None]

    @property
    def best(self) -> tuple[str, float]:
        """The consumer with the highest rate, and that rate."""
        ran = {name: rate for name, rate in self.rates.items() if rate}
        if not ran:
            raise RuntimeError(f"no consumer read the backlog: {dict(self.rates)}")
        name = max(ran, key=lambda n: ran[n])
        return name, ran[name]


def _consumer(
    bootstrap_servers: str, client_config: Mapping[str, str], **settings: str
) -> Consumer:
    group_id = f"ceiling-{uuid.uuid4().hex[:8]}"
    return Consumer({**observer_config(bootstrap_servers, group_id, client_config), **settings})


def _assign_all(consumer: Consumer, topic: str) -> None:
    metadata = consumer.list_topics(topic, timeout=10)
    partitions = len(metadata.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])


def bench_consumer_rate(
    bootstrap_servers: str, topic: str, expected: int, client_config: Mapping[str, str]
) -> float:
    """Records per second of the bench's consumer (see the module docstring)."""
    consumer = _consumer(bootstrap_servers, client_config)
    try:
        _assign_all(consumer, topic)
        read = 0
        started = time.monotonic()
        deadline = started + READ_TIMEOUT_S
        while read < expected and time.monotonic() < deadline:
            read += sum(1 for m in consumer.consume(BATCH, timeout=1.0) if m.error() is None)
        return read / (time.monotonic() - started)
    finally:
        consumer.close()


def plain_consumer_rate(
    bootstrap_servers: str, topic: str, expected: int, client_config: Mapping[str, str]
) -> float | None:
    """Records per second of the lean plain consumer (see the module docstring)."""
    consumer = _consumer(
        bootstrap_servers, client_config, **{"isolation.level": "read_uncommitted"}
    )
    try:
        _assign_all(consumer, topic)
        # Timed from the first batch's arrival to the last's, counting the records after the
        # first batch: the steady rate, without the connection and the first fetch.
        first_batch = read = 0
        first: float | None = None
        last = time.monotonic()
        deadline = last + READ_TIMEOUT_S
        while read < expected and time.monotonic() < deadline:
            batch = consumer.consume(BATCH, timeout=1.0)
            if batch:
                last = time.monotonic()
                if first is None:
                    first, first_batch = last, len(batch)
                read += len(batch)
        if first is None or last <= first:
            return None  # one batch held everything: no steady rate to take
        return (read - first_batch) / (last - first)
    finally:
        consumer.close()


def perf_test_rate(
    bootstrap_servers: str, topic: str, expected: int, client_config: Mapping[str, str]
) -> float | None:
    """`fetch.nMsg.sec` of Kafka's ConsumerPerformance; None if it cannot run here."""
    if client_config:
        # A secured cluster's settings are librdkafka's (`sasl.username`, ...), not a Java
        # client's (`sasl.jaas.config`): translating them is more than a ceiling is worth.
        log.info("kafka-consumer-perf-test: skipped on a secured cluster")
        return None
    release = ensure_release()
    command = [
        java_command(), "-cp", release.classpath,
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server", bootstrap_servers, "--topic", topic,
        "--messages", str(expected), "--timeout", "60000",
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=PERF_TEST_TIMEOUT_S, check=False
    )
    return parse_perf_test(done.stdout, done.returncode, done.stderr)


def parse_perf_test(stdout: str, returncode: int, stderr: str = "") -> float | None:
    """The `fetch.nMsg.sec` column of ConsumerPerformance's CSV (header line, value line)."""
    lines = [line for line in stdout.splitlines() if "," in line]
    if returncode != 0 or len(lines) < 2:
        log.warning(
            "kafka-consumer-perf-test gave no result (exit code %d): %s",
            returncode,
            (stderr or stdout).strip()[-500:],
        )
        return None
    header = [h.strip() for h in lines[0].split(",")]
    values = [v.strip() for v in lines[-1].split(",")]
    return float(dict(zip(header, values, strict=False))["fetch.nMsg.sec"])


def measure_ceiling(
    bootstrap_servers: str, topic: str, expected: int, client_config: Mapping[str, str]
) -> Ceiling:
    """Every consumer's rate over `expected` records of `topic`, one after another."""
    rates: dict[str, float | None] = {}
    for name, measure in (
        ("bench consumer", bench_consumer_rate),
        ("plain consumer", plain_consumer_rate),
        ("kafka-consumer-perf-test", perf_test_rate),
    ):
        log.info("ceiling: %s reading %d records of %s", name, expected, topic)
        rates[name] = measure(bootstrap_servers, topic, expected, client_config)
        log.info("ceiling: %s %.0f records/s", name, rates[name] or 0.0)
    return Ceiling(rates)
