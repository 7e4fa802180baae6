"""Running the processor as a real subprocess against a real broker, and reading what it wrote.

Used by the processor tests (`test_processor_*.py`): no mocks, only `python -m app.processor`,
Kafka clients and the processor's own HTTP endpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from app.clients.kafka_retry import Retrying
from app.clients.waiting import wait_until
from contract.topic_specs import PipelineNames
from devkit.local.instances import LOCAL_SESSION_TIMEOUT_MS
from devkit.local_ports import free_port

REPO = Path(__file__).resolve().parents[2]
CLIENT_TIMEOUT_S = 30.0
# Whether a test's own call failed (`conftest.pytest_runtest_makereport` sets it).
CALL_FAILED = pytest.StashKey[bool]()
# How much of a still-running processor's log a failed test prints (its stacks are at the end).
STACKS_TAIL_CHARS = 20_000
# Where a helper connects: `bootstrap.servers`, or whole client settings (a secured cluster's).
Kafka = str | Mapping[str, str]


def client_settings(kafka: Kafka) -> dict[str, str]:
    """Client settings for `kafka`: its bootstrap servers, or its settings as given."""
    return {"bootstrap.servers": kafka} if isinstance(kafka, str) else dict(kafka)


@dataclass(frozen=True)
class Pipeline:
    """One isolated pipeline: its own topics and group (names with a random suffix)."""

    bootstrap: str
    application_id: str
    partitions: int

    @classmethod
    def create(cls, bootstrap: str, partitions: int = 2, replication: int = 1) -> Pipeline:
        """Create the four topics of a fresh pipeline."""
        pipeline = cls(bootstrap, f"pvc-{uuid.uuid4().hex[:8]}", partitions)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        changelog = pipeline.topics["changelog.topic"]
        futures = admin.create_topics(
            [
                NewTopic(
                    topic,
                    partitions,
                    replication,
                    config={"cleanup.policy": "compact"} if topic == changelog else {},
                )
                for topic in pipeline.topics.values()
            ]
        )
        for future in futures.values():
            future.result(CLIENT_TIMEOUT_S)
        return pipeline

    @property
    def topics(self) -> dict[str, str]:
        """Role -> topic name, as the properties file names them."""
        return {
            "input.topic": f"{self.application_id}-page-views",
            "output.topic": f"{self.application_id}-counts",
            "changelog.topic": PipelineNames(self.application_id).changelog_topic,
            "dlq.topic": PipelineNames(self.application_id).dlq_topic,
        }

    def properties(self, instance: str, state_dir: Path, **extra: str) -> str:
        """A properties file for one instance (keys as in the contract)."""
        settings = {
            "application.id": self.application_id,
            "bootstrap.servers": self.bootstrap,
            **self.topics,
            "state.dir": str(state_dir),
            "trigger.interval.ms": "500",
            "max.records.per.batch": "20000",
            "consumer.group.instance.id": instance,
            "consumer.session.timeout.ms": str(LOCAL_SESSION_TIMEOUT_MS),
            "consumer.heartbeat.interval.ms": "2000",
            "producer.transactional.id": instance,
            "producer.transaction.timeout.ms": "30000",
            "spark.master": "local[2]",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            **extra,
        }
        if settings.get("membership.mode") == "handoff":
            del settings["consumer.group.instance.id"]  # a dynamic member
        return "".join(f"{key}={value}\n" for key, value in settings.items())


def produce_page_views(
    bootstrap: Kafka, topic: str, events: int, pages: int, seed: int
) -> Counter[str]:
    """Produce `events` valid page views over `pages` pages; the true count per page."""
    failed: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            failed.append(error)

    producer = Producer({**client_settings(bootstrap), "acks": "all", "on_delivery": on_delivery})
    rnd = random.Random(seed)
    truth: Counter[str] = Counter()
    for i in range(events):
        page = f"/page/{rnd.randrange(pages)}"
        truth[page] += 1
        value = json.dumps({"page": page, "user": f"u{rnd.randrange(1000)}", "seq": i})
        try:
            producer.produce(topic, key=page.encode(), value=value.encode())
        except BufferError:  # the local queue is full: let deliveries drain it, then retry
            producer.flush(CLIENT_TIMEOUT_S)
            producer.produce(topic, key=page.encode(), value=value.encode())
        if i % 500 == 0:
            producer.poll(0)
    _flush(producer)
    # A failed record leaves the queue too: the truth would count views never written.
    if failed:
        raise AssertionError(f"{len(failed)} of {events} page views not written: {failed[0]}")
    return truth


def produce_raw(
    bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None]]
) -> None:
    """Produce records exactly as given (key, value), in order."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    _flush(producer)


def _flush(producer: Producer, timeout_s: float = 300.0) -> None:
    """Wait until every record is delivered: the expected counts assume all of them were."""
    remaining = producer.flush(timeout_s)
    if remaining:
        raise AssertionError(f"{remaining} records still undelivered after {timeout_s:.0f} s")


@dataclass
class ReadRecord:
    """One committed record of a topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes] = field(default_factory=dict)


def read_committed(bootstrap: Kafka, topic: str) -> list[ReadRecord]:
    """Every committed record of `topic` (read_committed, up to the current end)."""
    consumer = Consumer(
        {
            **client_settings(bootstrap),
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=CLIENT_TIMEOUT_S).topics[topic]
        # A broker lost or back moves leaders: the end offsets' query waits that out.
        retrying = Retrying(CLIENT_TIMEOUT_S, budget_name="CLIENT_TIMEOUT_S")
        ends = {
            p: retrying.watermark_offsets(
                f"end of {topic}-{p}", consumer, topic, p, CLIENT_TIMEOUT_S
            )[1]
            for p in metadata.partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        records: list[ReadRecord] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                if m.error() is None:
                    partition, offset = m.partition(), m.offset()
                    if partition is None or offset is None:  # set on every consumed record
                        raise RuntimeError(
                            f"a record of {topic} without its partition or offset "
                            f"({partition}, {offset})"
                        )
                    records.append(
                        ReadRecord(partition, offset, m.key(), m.value(), _headers(m, topic))
                    )
            positions = consumer.position([TopicPartition(topic, p) for p in ends])
            if all(tp.offset >= ends[tp.partition] or ends[tp.partition] == 0 for tp in positions):
                return records
        raise TimeoutError(f"could not read {topic} up to {ends}")
    finally:
        consumer.close()


def _headers(message: Message, topic: str) -> dict[str, bytes]:
    """A consumed record's headers by name. The client hands them over as (name, value) pairs;
    the stubs' type also allows the dict form a producer may be given."""
    pairs = message.headers() or []
    headers: dict[str, bytes] = {}
    for name, value in pairs.items() if isinstance(pairs, dict) else pairs:
        if not isinstance(value, bytes):  # a null value: nothing here writes one
            raise TypeError(f"header {name!r} of a record of {topic} is {value!r}, not bytes")
        headers[name] = value
    return headers


def latest_counts(bootstrap: Kafka, topic: str) -> dict[str, int]:
    """The table a compacted count topic stands for: the latest count per page."""
    return {
        r.key.decode(): int(r.value.decode())
        for r in sorted(read_committed(bootstrap, topic), key=lambda r: (r.partition, r.offset))
        if r.key is not None and r.value is not None
    }


class ProcessorProcess:
    """`python -m app.processor` as a subprocess, its log in a file, its health port known."""

    def __init__(
        self,
        workdir: Path,
        name: str,
        properties: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.health_port = free_port()
        self.properties_path = workdir / f"{name}.properties"
        self.properties_path.write_text(properties + f"health.port={self.health_port}\n")
        self.log_path = workdir / f"{name}.log"
        self.started = time.monotonic()
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "app.processor", "--properties", str(self.properties_path)],
                cwd=REPO,
                # `env`: what the properties file references (${env:SASL_PASSWORD}).
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def log(self) -> str:
        """The processor's output so far."""
        return self.log_path.read_text(errors="replace")

    def get(self, path: str) -> tuple[int, str]:
        """GET the processor's health endpoint; (status, body), (0, reason) when unreachable."""
        url = f"http://127.0.0.1:{self.health_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    def metric(self, name: str) -> float:
        """Sum of every sample of a metric (all labels) on /metrics; 0 when absent."""
        status, body = self.get("/metrics")
        assert status == 200, f"/metrics answered {status}: {body}"
        pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", re.MULTILINE)
        return sum(float(m.group(2)) for m in pattern.finditer(body))

    def terminate(self, timeout_s: float = 90.0) -> tuple[int, float]:
        """SIGTERM; (exit code, seconds until it exited)."""
        start = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout_s)
        return code, time.monotonic() - start

    def kill(self) -> None:
        """SIGKILL: no shutdown at all, as when a node dies."""
        self.process.kill()
        self.process.wait(30)

    def ensure_stopped(self, failed: bool = False) -> None:
        """Kill the process if a test left it running. After a failed test, first print every
        thread's stack and the log's tail: what a stuck instance was waiting for."""
        if self.process.poll() is None:
            if failed:
                print(f"--- {self.log_path.name}, still running: its stacks and log tail")
                print(self.dump_stacks()[-STACKS_TAIL_CHARS:])
            self.kill()

    def dump_stacks(self) -> str:
        """SIGUSR1 (the processor's faulthandler prints every thread's stack), then its log."""
        before = self.log_path.stat().st_size
        self.process.send_signal(signal.SIGUSR1)
        # Best effort: a process too stuck to print is killed anyway.
        with contextlib.suppress(TimeoutError):
            wait_until(lambda: "Thread 0x" in self.log()[before:], 10, "stacks", interval_s=0.2)
        return self.log()

    def assert_running(self) -> None:
        """Fail with the log when the processor exited."""
        code = self.process.poll()
        assert code is None, f"processor exited with {code}:\n{self.log()[-5000:]}"


def wait_for_counts(
    processor: ProcessorProcess,
    bootstrap: Kafka,
    topic: str,
    truth: Mapping[str, int],
    timeout_s: float,
) -> float:
    """Wait until the committed output equals `truth`; the seconds it took."""
    last: dict[str, int] = {}

    def matches() -> bool:
        processor.assert_running()
        last.clear()
        last.update(latest_counts(bootstrap, topic))
        return last == dict(truth)

    def differences() -> str:
        wrong = {page: (last.get(page), n) for page, n in truth.items() if last.get(page) != n}
        extra = sorted(set(last) - set(truth))
        sample = ", ".join(f"{p}: {got} (true {n})" for p, (got, n) in sorted(wrong.items())[:5])
        return (
            f"{sum(last.values())} of {sum(truth.values())} views counted; {len(wrong)} of "
            f"{len(truth)} pages wrong ({sample}){f'; unknown pages {extra[:5]}' if extra else ''}"
        )

    started = time.monotonic()
    wait_until(
        matches, timeout_s, f"{topic} to hold the true counts", interval_s=0.5, seen=differences
    )
    return time.monotonic() - started


def call_failed(request: pytest.FixtureRequest) -> bool:
    """Whether the requesting test's call failed (for a fixture's teardown)."""
    return request.node.stash.get(CALL_FAILED, False)
