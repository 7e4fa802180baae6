"""An active/standby pair on Apache Kafka: two processor deployments (sides a and b), each its own
group, changelog and transactional ids, both reading all input. Only the active side publishes;
a switch under load leaves no page with a stale count and none going back; a forced switch
takes over from a side that is down; a switch to a side that lags is refused."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from app.admin.pair_switch import (
    PairClients,
    SwitchRefusedError,
    read_control,
    side_lags,
    switch,
    wait_taken,
)
from app.clients.pair_control import released_key, taken_key
from app.clients.waiting import wait_until
from tests.app.processor_harness import (
    Pipeline,
    ProcessorProcess,
    call_failed,
    latest_counts,
    produce_page_views,
    produce_raw,
    read_committed,
    wait_for_counts,
)

PARTITIONS = 3
PAGES = 60
TIMEOUT_S = 240.0
SIDES = ("a", "b")


class Pair:
    """The shared topics, each side's changelog, the control topic and the running sides."""

    def __init__(self, bootstrap: str, workdir: Path) -> None:
        self.pipeline = Pipeline.create(bootstrap, partitions=PARTITIONS)
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.control_topic = f"{self.pipeline.application_id}-pair-control"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        compacted = {"cleanup.policy": "compact"}
        futures = admin.create_topics(
            [NewTopic(self.changelog(side), PARTITIONS, 1, config=compacted) for side in SIDES]
            + [NewTopic(self.control_topic, 1, 1, config=compacted)]
        )
        for future in futures.values():
            future.result(60)
        self.truth: Counter[str] = Counter()
        self.seed = 0
        self.running: dict[str, ProcessorProcess] = {}
        self.clients = PairClients(
            {"bootstrap.servers": bootstrap},
            self.control_topic,
            self.topic("input.topic"),
            {side: self.application_id(side) for side in SIDES},
        )

    def application_id(self, side: str) -> str:
        return f"{self.pipeline.application_id}-{side}"

    def changelog(self, side: str) -> str:
        return f"{self.application_id(side)}-counts-changelog"

    def topic(self, role: str) -> str:
        return self.pipeline.topics[role]

    def start(self, side: str) -> ProcessorProcess:
        name = f"{side}-{len([p for p in self.workdir.glob(f'{side}-*.properties')])}"
        properties = self.pipeline.properties(
            name,
            self.workdir / side,  # the side's volume: kept across its restarts
            **{
                "application.id": self.application_id(side),
                "changelog.topic": self.changelog(side),
                "pair.side": side,
                "pair.control.topic": self.control_topic,
            },
        )
        self.running[side] = ProcessorProcess(self.workdir, name, properties)
        return self.running[side]

    def produce(self, views: int) -> None:
        self.seed += 1
        self.truth += produce_page_views(
            self.bootstrap, self.topic("input.topic"), views, PAGES, self.seed
        )

    def wait_exact(self, side: str) -> None:
        wait_for_counts(
            self.running[side], self.bootstrap, self.topic("output.topic"), self.truth, TIMEOUT_S
        )

    @contextmanager
    def loading(self) -> Iterator[list[bytes]]:
        """Views keep coming (100 every 0.1 s) while the block runs, each burst with one record
        that breaks the contract (listed in what it yields)."""
        stop = threading.Event()
        malformed: list[bytes] = []

        def load() -> None:
            while not stop.is_set():
                self.produce(100)
                value = f"not json {len(malformed)}".encode()
                produce_raw(self.bootstrap, self.topic("input.topic"), [(b"/page/0", value)])
                malformed.append(value)
                stop.wait(0.1)

        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        try:
            yield malformed
        finally:
            stop.set()
            loader.join()

    def wait_caught_up(self, side: str, max_lag: int = 0) -> None:
        wait_until(
            lambda: sum(side_lags(self.clients)[side].values()) <= max_lag,
            TIMEOUT_S,
            f"side {side} to lag at most {max_lag} input records",
            interval_s=0.5,
        )


@pytest.fixture
def pair(request: pytest.FixtureRequest, kafka_bootstrap: str, tmp_path: Path) -> Iterator[Pair]:
    started = Pair(kafka_bootstrap, tmp_path)
    try:
        yield started
    finally:
        for processor in started.running.values():
            processor.ensure_stopped(call_failed(request))


def _goes_back(pair: Pair) -> list[str]:
    """Pages whose published count ever went down, in the order a downstream reader sees it."""
    last: dict[str, int] = {}
    back = []
    records = read_committed(pair.bootstrap, pair.topic("output.topic"))
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        assert record.key is not None and record.value is not None
        page, count = record.key.decode(), int(record.value)
        if count < last.get(page, 0):
            back.append(f"{page}: {last[page]} -> {count} (offset {record.offset})")
        last[page] = count
    return back


def test_only_the_active_side_publishes_and_a_switch_under_load_is_exact(pair: Pair) -> None:
    b = pair.start("b")
    pair.produce(1500)
    pair.wait_caught_up("b")
    assert read_committed(pair.bootstrap, pair.topic("output.topic")) == [], (
        "the idle side published"
    )

    pair.start("a")
    pair.wait_exact("a")

    # Views keep coming while the active role moves to b.
    with pair.loading() as malformed:
        pair.wait_caught_up("b", max_lag=2000)  # it has been reading all along
        switched = switch(pair.clients, "b", force=False, max_lag=10_000)
        assert wait_taken(pair.clients, TIMEOUT_S), b.log()[-3000:]
    pair.wait_exact("b")
    assert _goes_back(pair) == []
    dead = read_committed(pair.bootstrap, pair.topic("dlq.topic"))
    assert sorted(r.value or b"" for r in dead) == sorted(malformed), "dead letters lost or doubled"

    view = read_control(pair.clients)
    for p in range(PARTITIONS):
        released = view.released(switched.epoch, p)
        assert released is not None, f"partition {p} was not released by side a"
        taken = view.values[taken_key(switched.epoch, p)]
        assert taken["side"] == "b" and taken["offset"] >= released
    assert released_key(switched.epoch, 0) in view.values


def test_a_forced_switch_takes_over_from_a_side_killed_under_load_without_going_back(
    pair: Pair,
) -> None:
    pair.start("a")
    b = pair.start("b")
    pair.produce(1000)
    pair.wait_exact("a")
    with pair.loading() as malformed:
        pair.wait_caught_up("b", max_lag=2000)
        pair.running["a"].kill()  # every pod of the active side at once, mid-transaction
        # The releases wait until the broker has aborted a's open transactions.
        switch(pair.clients, "b", force=True, max_lag=0)
        assert wait_taken(pair.clients, TIMEOUT_S), b.log()[-3000:]
    pair.wait_exact("b")
    assert _goes_back(pair) == []
    dead = read_committed(pair.bootstrap, pair.topic("dlq.topic"))
    assert sorted(r.value or b"" for r in dead) == sorted(malformed), "dead letters lost or doubled"


def test_a_switch_to_a_side_that_lags_is_refused(pair: Pair) -> None:
    pair.start("a")
    pair.produce(300)
    pair.wait_exact("a")
    with pytest.raises(SwitchRefusedError, match="side b lags 300 records"):
        switch(pair.clients, "b", force=False, max_lag=100)
    assert read_control(pair.clients).active().side == "a"
    assert latest_counts(pair.bootstrap, pair.topic("output.topic")) == dict(pair.truth)
