"""Kafka client calls that ride out a broker restart, a leader move or a coordinator move.

A broker restart reaches a client call as a timeout or a transport error, a leader move as
NOT_LEADER_FOR_PARTITION, a coordinator move as NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS,
an open transaction's offsets as UNSTABLE_OFFSET_COMMIT. librdkafka retries these inside produce,
consume and the group protocol, but the calls that ask once (`committed()`,
`get_watermark_offsets()`, `list_topics()`) return them, and it marks several of them not
retriable although waiting is all they need.

`Retrying` calls such a call again with exponential backoff within a time budget (the processor's
`task.timeout.ms`, Kafka Streams' name and meaning: how long a task may stall on errors like these
before it fails), logs one line when an episode starts and one when it ends (never one per
attempt), reports each episode to a counter, and re-raises once the budget is spent. Errors that
waiting cannot fix (fatal, authorisation, invalid arguments) are raised at once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

log = logging.getLogger(__name__)
T = TypeVar("T")

# Transient whatever librdkafka's retriable flag says: each clears once a broker is back, a
# leader or coordinator is elected, or a transaction ends.
TRANSIENT_CODES = frozenset(
    {
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        # A request to a broker that left the cluster's metadata (a lost node, fenced).
        KafkaError._DESTROY_BROKER,
        KafkaError._WAIT_COORD,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
        # A topic a moment after its creation, before every broker (or this client) has its
        # metadata.
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        # read_committed offsets while the transaction that commits them is still open.
        KafkaError.UNSTABLE_OFFSET_COMMIT,
    }
)
INITIAL_BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0
# A new consumer's first offset lookup sometimes waits about 0.7 s in librdkafka, where it
# otherwise takes 5-30 ms; asked again, it answers at once. Lookups of 3 partitions by new
# consumers on 3 local nodes with both cores busy: asked once, 7 of 1,900 waited 0.7 s; asked
# again after this long, none of 1,200 took more than 0.31 s.
FIRST_ASK_S = 0.15
# The first attempt's timeout of a call asked of one broker (a partition's leader, the group's
# coordinator), doubled at each retry up to the call's own timeout. A live broker answers in
# milliseconds; a lost one never does, and a client that only queries keeps it as the leader
# until a metadata refresh, which `Retrying` does between attempts. With the full timeout (10 s)
# on every attempt, a planning call that asked a lost leader just after the brokers had fenced
# it waited 10 s before its retry asked the new one: a second stall after the broker's loss.
FIRST_ATTEMPT_S = 2.0


def attempt_timeouts(limit_s: float) -> Iterator[float]:
    """Each attempt's timeout: `FIRST_ATTEMPT_S` first, doubling up to `limit_s`."""
    timeout = min(FIRST_ATTEMPT_S, limit_s)
    while True:
        yield timeout
        timeout = min(timeout * 2, limit_s)


def is_transient(error: KafkaError) -> bool:
    """Whether waiting and asking again can clear `error`."""
    return not error.fatal() and (error.retriable() or error.code() in TRANSIENT_CODES)


def raise_partition_error(partitions: Iterable[TopicPartition]) -> None:
    """Raise the first per-partition error of a result (e.g. `committed()`'s) as the call's."""
    for tp in partitions:
        if tp.error is not None:
            raise KafkaException(tp.error)


@dataclass
class Retrying:
    """Calls a Kafka client call until it succeeds, a non-transient error, or `budget_s`."""

    budget_s: float
    # Called with the call's name once per episode (a metric's counter), if given.
    on_episode: Callable[[str], None] | None = None
    budget_name: str = "task.timeout.ms"  # where the budget comes from, for the messages

    def __call__(
        self, what: str, call: Callable[[], T], refresh: Callable[[], object] | None = None
    ) -> T:
        """`call()`'s result; `what` names the call in the log ("committed offsets of t-3").

        `refresh`, if given, runs before each retry: a metadata request for the call's topic,
        so that the retry asks the new leader. A client that only assigns or queries (no
        subscription) learns of a leader move only from its periodic refresh, every
        `topic.metadata.refresh.interval.ms` (5 minutes), and meanwhile asks the lost broker.
        """
        started: float | None = None
        attempts = 0
        backoff = INITIAL_BACKOFF_S
        while True:
            try:
                result = call()
            except KafkaException as exc:
                error = exc.args[0]
                if not isinstance(error, KafkaError) or not is_transient(error):
                    raise
                now = time.monotonic()
                if started is None:
                    started = now
                    log.warning(
                        "%s: %s; retrying for up to %g s (%s)",
                        what, error.str(), self.budget_s, self.budget_name,
                    )  # fmt: skip
                    if self.on_episode is not None:
                        self.on_episode(what)
                elapsed = now - started
                if elapsed >= self.budget_s:
                    log.error(
                        "%s: still failing after %.1f s and %d attempts: %s; giving up (%s)",
                        what, elapsed, attempts + 1, error.str(), self.budget_name,
                    )  # fmt: skip
                    raise
                attempts += 1
                time.sleep(min(backoff, self.budget_s - elapsed))
                if refresh is not None:
                    # No broker may answer yet: the next attempt fails and refreshes again.
                    with contextlib.suppress(KafkaException):
                        refresh()
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            if started is not None:
                log.info(
                    "%s: succeeded again after %d retries in %.1f s",
                    what, attempts, time.monotonic() - started,
                )  # fmt: skip
            return result

    def watermark_offsets(
        self, what: str, consumer: Consumer, topic: str, partition: int, timeout_s: float
    ) -> tuple[int, int]:
        """A partition's low and high watermark, asked of its leader (never the cache), each
        attempt's timeout growing to `timeout_s` (`attempt_timeouts`)."""
        timeouts = attempt_timeouts(timeout_s)
        tp = TopicPartition(topic, partition)

        def ask() -> tuple[int, int]:
            return consumer.get_watermark_offsets(tp, timeout=next(timeouts), cached=False)

        return self(what, ask, partial(consumer.list_topics, topic, timeout=timeout_s))

    def first_offsets(
        self, what: str, consumer: Consumer, partitions: Sequence[TopicPartition], timeout_s: float
    ) -> dict[tuple[str, int], int]:
        """The first offset (log start) of each partition, asked of the leaders at once.

        A ListOffsets request's timestamp -2 asks for the earliest offset, and librdkafka's
        `offsets_for_times` sends the partitions' requests to their leaders in parallel, where
        `get_watermark_offsets` asks one partition at a time (a round trip each).
        """
        wanted = [TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in partitions]

        def ask() -> list[TopicPartition]:
            try:
                found = consumer.offsets_for_times(wanted, timeout=min(FIRST_ASK_S, timeout_s))
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._TIMED_OUT or timeout_s <= FIRST_ASK_S:
                    raise
                found = consumer.offsets_for_times(wanted, timeout=timeout_s)  # `FIRST_ASK_S`
            raise_partition_error(found)
            return found

        def refresh() -> None:
            for topic in sorted({tp.topic for tp in partitions}):
                consumer.list_topics(topic, timeout=timeout_s)

        found = self(what, ask, refresh)
        return {(tp.topic, tp.partition): tp.offset for tp in found}

    def committed_offsets(
        self, what: str, consumer: Consumer, topic: str, partitions: Iterable[int], timeout_s: float
    ) -> list[TopicPartition]:
        """The group's committed offsets of `partitions`; a partition's own error (a
        transaction still holding its offsets) is retried like the call's, each attempt's
        timeout growing to `timeout_s` (`attempt_timeouts`)."""
        tps = [TopicPartition(topic, p) for p in partitions]
        timeouts = attempt_timeouts(timeout_s)

        def ask() -> list[TopicPartition]:
            found = consumer.committed(tps, timeout=next(timeouts))
            raise_partition_error(found)
            return found

        return self(what, ask, partial(consumer.list_topics, topic, timeout=timeout_s))
