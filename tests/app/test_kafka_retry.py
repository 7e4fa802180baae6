"""Kafka calls ride out a broker restart within their budget, once per episode in the log.

A real broker (a one-node Apache Kafka, restarted where it was) goes away under a client and
returns; the calls are the client's own.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from app.clients.kafka_retry import Retrying
from app.clients.waiting import wait_until
from devkit.kraft_cluster import KraftCluster
from devkit.local_ports import free_port

TOPIC = "retried"
CALL_TIMEOUT_S = 2.0
DEADLINE_S = 120.0


def create_topic(bootstrap_servers: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)


@pytest.fixture
def broker() -> Iterator[KraftCluster]:
    with KraftCluster(nodes=1) as cluster:
        yield cluster


@pytest.fixture
def consumer(request: pytest.FixtureRequest) -> Iterator[Consumer]:
    """A consumer of the test's broker, or of a port where none listens."""
    if "broker" in request.fixturenames:
        servers = request.getfixturevalue("broker").bootstrap_servers
    else:
        servers = f"127.0.0.1:{free_port()}"
    client = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "retry-test",
            "reconnect.backoff.max.ms": "200",  # back soon after the broker is
            "log_level": "0",  # the disconnects are the point here, not news
        }
    )
    yield client
    client.close()


def end_offset(consumer: Consumer) -> Callable[[], tuple[int, int]]:
    return partial(
        consumer.get_watermark_offsets,
        TopicPartition(TOPIC, 0),
        timeout=CALL_TIMEOUT_S,
        cached=False,
    )


def test_a_call_waits_out_a_broker_restart_and_logs_the_episode_once(
    broker: KraftCluster, consumer: Consumer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.clients.kafka_retry")
    episodes: list[str] = []
    create_topic(broker.bootstrap_servers)
    # A new topic can be unknown for a moment (its own episode): read it once before the test.
    assert Retrying(DEADLINE_S)("end offset", end_offset(consumer)) == (0, 0)
    caplog.clear()
    retrying = Retrying(DEADLINE_S, on_episode=episodes.append)
    broker.stop_node(1)
    results: list[tuple[int, int]] = []
    call = threading.Thread(
        target=lambda: results.append(retrying("end offset", end_offset(consumer)))
    )
    call.start()  # the broker is gone: the call fails and retries
    try:
        wait_until(lambda: episodes == ["end offset"], DEADLINE_S, "a retry episode",
                   seen=lambda: episodes, interval_s=0.05)  # fmt: skip
        broker.start_node(1)  # back where it was, with its topic
        call.join(DEADLINE_S)
        assert not call.is_alive(), "the call did not return after the broker came back"
    finally:
        call.join(DEADLINE_S)
    assert results == [(0, 0)]
    assert episodes == ["end offset"]
    lines = [r.getMessage() for r in caplog.records if r.name == "app.clients.kafka_retry"]
    assert len(lines) == 2, lines  # one when the episode starts, one when it ends
    assert "end offset: " in lines[0] and "retrying for up to 120 s (task.timeout.ms)" in lines[0]
    assert lines[1].startswith("end offset: succeeded again after ")


def test_a_lookup_that_asks_a_lost_leader_asks_the_new_one_within_seconds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client that only queries keeps a lost broker as the partition's leader until a
    metadata refresh: its first attempt must give up long before the call's own 10 s timeout,
    so that the retry (after a refresh) asks the leader the brokers elected meanwhile."""
    caplog.set_level(logging.INFO, logger="app.clients.kafka_retry")
    with KraftCluster(nodes=3) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(timeout=30)
        client = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": "retry-test",
                "log_level": "0",  # the lost broker's disconnects are the point here
            }
        )
        try:
            retrying = Retrying(DEADLINE_S)
            assert retrying.watermark_offsets("end offset", client, TOPIC, 0, 10.0) == (0, 0)

            def leader() -> int:
                """The partition's leader by the broker asked (-1: it knows none yet)."""
                partitions = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
                return partitions[0].leader if 0 in partitions else -1

            def asked_in_vain() -> int:
                """The client keeps asking meanwhile, as a planner does every batch: its
                attempts to reconnect to the lost broker back off further each time."""
                with contextlib.suppress(KafkaException):
                    client.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=1, cached=False)
                return leader()

            # Any broker answers: one may not have the new topic's partition in its metadata yet.
            (lost,) = wait_until(lambda: (known,) if (known := leader()) >= 0 else None,
                                 DEADLINE_S, "the partition's leader", seen=leader)  # fmt: skip
            cluster.kill_node(lost)
            wait_until(lambda: asked_in_vain() not in (lost, -1), DEADLINE_S, "a new leader",
                       seen=leader, interval_s=0.2)  # fmt: skip
            started = time.monotonic()
            assert retrying.watermark_offsets("end offset", client, TOPIC, 0, 10.0) == (0, 0)
            took = time.monotonic() - started
        finally:
            client.close()
    assert took < 8.0, f"the lookup took {took:.1f} s: it waited out the lost leader"


def test_a_call_fails_once_its_budget_is_spent(
    consumer: Consumer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.clients.kafka_retry")
    episodes: list[str] = []
    started = time.monotonic()
    with pytest.raises(KafkaException):  # no broker at all
        Retrying(3.0, on_episode=episodes.append)("end offset", end_offset(consumer))
    assert time.monotonic() - started >= 3.0
    assert episodes == ["end offset"]
    lines = [r.getMessage() for r in caplog.records if r.name == "app.clients.kafka_retry"]
    assert len(lines) == 2, lines
    assert "giving up (task.timeout.ms)" in lines[1]


def test_an_error_that_waiting_cannot_fix_is_raised_at_once() -> None:
    calls = 0

    def refused() -> None:
        nonlocal calls
        calls += 1
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    with pytest.raises(KafkaException) as raised:
        Retrying(60.0)("end offset", refused)
    assert raised.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert calls == 1


@pytest.mark.parametrize(
    "code",
    [KafkaError.UNSTABLE_OFFSET_COMMIT, KafkaError.NOT_COORDINATOR, KafkaError._TIMED_OUT],
    ids=["unstable-offsets", "coordinator-moved", "timed-out"],
)
def test_transient_errors_are_retried_whatever_librdkafka_flags(code: int) -> None:
    answers: list[int | None] = [code, code, None]

    def flaky() -> str:
        error = answers.pop(0)
        if error is not None:
            raise KafkaException(KafkaError(error))
        return "answer"

    assert Retrying(60.0)("committed offsets", flaky) == "answer"
    assert answers == []
