"""The repository's other pipelines, run by the same machinery on Apache Kafka: revenue per
product (a sum) and distinct users per product (a set as the state, its size as the output).
Each is exact through a hand-off, a restart on its state and a crash (SIGKILL), and routes
malformed records to the dead-letter topic with its own reasons."""

from __future__ import annotations

import json
import random
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.clients.waiting import wait_until
from app.pipelines.distinct_users import DistinctUsers
from app.pipelines.product_revenue import ProductRevenue
from tests.app.processor_harness import (
    Pipeline,
    ProcessorProcess,
    call_failed,
    produce_raw,
    read_committed,
)

PARTITIONS = 4
PRODUCTS = 40
RUN_TIMEOUT_S = 240.0
HANDOFF = {
    "membership.mode": "handoff",
    "num.standby.replicas": "1",
    # A crashed dynamic member holds its partitions this long (as the stacks render it).
    "consumer.session.timeout.ms": "10000",
}


@dataclass
class Workload:
    """One pipeline's records and the truth they add up to."""

    aggregation: str  # aggregation.class
    record: Callable[[random.Random, int], tuple[bytes, bytes, object]]  # key, value, fact
    truth: Callable[[dict[str, list[object]]], dict[str, bytes]]  # facts per key -> output
    malformed: dict[str, tuple[bytes | None, bytes | None]]  # reason -> a record that breaks it


def _order(rnd: random.Random, i: int) -> tuple[bytes, bytes, object]:
    product, amount = f"p-{rnd.randrange(PRODUCTS)}", rnd.randrange(-500, 5000)
    return product.encode(), json.dumps({"amount_cents": amount, "seq": i}).encode(), amount


def _view(rnd: random.Random, i: int) -> tuple[bytes, bytes, object]:
    product, user = f"p-{rnd.randrange(PRODUCTS)}", f"u{rnd.randrange(300)}"
    return product.encode(), json.dumps({"user": user, "seq": i}).encode(), user


WORKLOADS = {
    "revenue": Workload(
        f"{ProductRevenue.__module__}.{ProductRevenue.__qualname__}",
        _order,
        lambda facts: {k: str(sum(v)).encode() for k, v in facts.items()},  # type: ignore[arg-type]
        {"invalid-amount": (b"p-1", b'{"amount_cents": 12.5}'), "null-value": (b"p-1", None)},
    ),
    "distinct-users": Workload(
        f"{DistinctUsers.__module__}.{DistinctUsers.__qualname__}",
        _view,
        lambda facts: {k: str(len(set(v))).encode() for k, v in facts.items()},
        {"invalid-user": (b"p-2", b'{"user": ""}'), "invalid-value": (b"p-2", b"[]")},
    ),
}


class Run:
    """One pipeline's topics, its instances and the facts produced so far."""

    def __init__(self, bootstrap: str, workdir: Path, workload: Workload) -> None:
        self.pipeline = Pipeline.create(bootstrap, partitions=PARTITIONS)
        self.workload = workload
        self.workdir = workdir
        self.facts: dict[str, list[object]] = {}
        self.rnd = random.Random(7)
        self.produced = 0
        self.processors: list[ProcessorProcess] = []

    def start(self, name: str) -> ProcessorProcess:
        properties = self.pipeline.properties(
            name,
            self.workdir / name,
            **HANDOFF,
            **{"aggregation.class": self.workload.aggregation},
        )
        processor = ProcessorProcess(self.workdir, name, properties)
        self.processors.append(processor)
        return processor

    def produce(self, records: int) -> None:
        batch = []
        for _ in range(records):
            key, value, fact = self.workload.record(self.rnd, self.produced)
            self.facts.setdefault(key.decode(), []).append(fact)
            batch.append((key, value))
            self.produced += 1
        produce_raw(self.pipeline.bootstrap, self.pipeline.topics["input.topic"], batch)

    def output(self) -> dict[str, bytes]:
        records = read_committed(self.pipeline.bootstrap, self.pipeline.topics["output.topic"])
        ordered = sorted(records, key=lambda r: (r.partition, r.offset))
        return {r.key.decode(): r.value for r in ordered if r.key and r.value is not None}

    def wait_exact(self, *running: ProcessorProcess) -> None:
        truth = self.workload.truth(self.facts)
        seen: dict[str, bytes] = {}

        def exact() -> bool:
            for processor in running:
                processor.assert_running()
            seen.clear()
            seen.update(self.output())
            return seen == truth

        def wrong() -> str:
            bad = {k: (seen.get(k), v) for k, v in truth.items() if seen.get(k) != v}
            return f"{len(bad)} of {len(truth)} keys wrong, e.g. {sorted(bad.items())[:3]}"

        wait_until(exact, RUN_TIMEOUT_S, "the output to equal the truth", interval_s=1, seen=wrong)


@pytest.fixture(params=sorted(WORKLOADS))
def run(request: pytest.FixtureRequest, kafka_bootstrap: str, tmp_path: Path) -> Iterator[Run]:
    started = Run(kafka_bootstrap, tmp_path, WORKLOADS[request.param])
    try:
        yield started
    finally:
        for processor in started.processors:
            processor.ensure_stopped(call_failed(request))


def test_the_pipeline_is_exact_through_a_hand_off_a_restart_and_a_crash(run: Run) -> None:
    first, second = run.start("instance-0"), run.start("instance-1")
    run.produce(3000)
    produce_raw(
        run.pipeline.bootstrap,
        run.pipeline.topics["input.topic"],
        list(run.workload.malformed.values()),
    )
    run.wait_exact(first, second)

    # A rolling update stops one instance: it hands its partitions and their state over.
    second.process.send_signal(signal.SIGTERM)
    assert second.process.wait(RUN_TIMEOUT_S) == 0, second.log()[-3000:]
    run.produce(1500)
    run.wait_exact(first)

    # It comes back on its volume, and then the other one dies without a word.
    second = run.start("instance-1")
    run.produce(1500)
    run.wait_exact(first, second)
    first.kill()
    run.produce(1500)
    run.wait_exact(second)

    dead = read_committed(run.pipeline.bootstrap, run.pipeline.topics["dlq.topic"])
    assert sorted(r.headers["dlq.reason"].decode() for r in dead) == sorted(run.workload.malformed)
    code, _ = second.terminate()
    assert code == 0, second.log()[-3000:]
