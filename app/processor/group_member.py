"""The instance's membership in the consumer group: it owns exactly what the group assigns it.

One confluent-kafka `Consumer`, subscribed to the input topic with `group.id` = application.id,
`group.instance.id` = the pod name (static membership), cooperative-sticky, read_committed. It
only holds the membership: every assigned partition is paused, so it never fetches a record; the
Spark source reads the planned ranges itself. It is polled from a background thread, so the
instance stays in the group while a long batch runs (`max.poll.interval.ms`) and while the query
restarts. Each (incremental) assignment change is published to the source through
`assignment_file`, counted in the metrics, and logged. With `num.standby.replicas` >= 1 the
thread also describes the group after each change (every second until it is settled) and every
few seconds, and publishes which partitions' copies this instance keeps (`group_view`, which asks
a child process for the description; the lag it exports is `metrics.export_lag`).

An empty assignment is not always a settled one: cooperative-sticky gives a joining member nothing
in the first rebalance (the partitions it is to take are revoked from their owners first) and
those partitions one rebalance later. With `confirm_empty_assignment` (hand-off readiness) an
empty assignment counts (`settled_assignment`) only once a description taken after it shows the
group stable with every partition owned by another member: more members than partitions.

A revocation lets the running micro-batch finish and commit first (as Kafka Streams commits in
`onPartitionsRevoked`): the revoked partitions are withdrawn from the published assignment at
once, so no new batch plans them, and the callback waits (up to `REVOKE_WAIT_S`) for the batch
already planned: planned from the moment the source read the assignment for it, not only once
Spark logged its offsets (`planned_batch`). Its results for them are written, the next owner
does not redo them, and this instance's copy of their state stays good for a standby. A lost
partition (session expired) is given up at once.

Only the polling thread touches the member's consumer. confluent-kafka serialises the calls on
one consumer, and a rebalance callback runs inside `poll()`: a call from the sink's thread while
the callback waits for the sink (a revocation waits for the running transaction) would wait
forever. So the polling thread also reads the group metadata the sink's transactions need: after
every poll, and first thing in every rebalance callback, so that a transaction that a revocation
waits for commits with the generation that revokes (as Kafka Streams commits in
`onPartitionsRevoked`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from app.clients.kafka_retry import Retrying, raise_partition_error
from app.clients.waiting import poll_until
from app.processor import assignment_file
from app.processor.assignment_file import Assignment
from app.processor.group_describer import GroupDescription
from app.processor.group_view import GroupView
from app.processor.metrics import ProcessorMetrics, export_lag
from app.processor.planned_batch import BatchProgress
from contract.processor_keys import DEFAULTS

log = logging.getLogger(__name__)

POLL_TIMEOUT_S = 0.2
LAG_INTERVAL_S = 5.0
# Until a description shows the group settled after a change, the standbys are asked this often.
SETTLING_INTERVAL_S = 1.0
CLIENT_TIMEOUT_S = 30.0
# How long a revocation waits for the running batch to commit the revoked partitions' results:
# about the longest batch; past it they go, and the batch's results for them are dropped.
REVOKE_WAIT_S = 30.0


class MemberFencedError(RuntimeError):
    """Another process took this instance's `group.instance.id`: this one is a zombie."""


class GroupMember:
    """Holds the group membership on a background thread (see the module docstring)."""

    def __init__(
        self,
        consumer_config: dict[str, str],
        topic: str,
        channel: Path,
        metrics: ProcessorMetrics,
        standby_replicas: int = 0,
        batches: BatchProgress | None = None,
        retrying: Retrying | None = None,
        confirm_empty_assignment: bool = False,
    ) -> None:
        self.topic = topic
        self.channel = channel
        self.metrics = metrics
        self.standby_replicas = standby_replicas
        # The query's batches: a revocation waits for the one planned and not yet done.
        self.batches = batches
        # Offsets asked for while a broker restarts or a coordinator moves: wait, don't fail.
        self._retrying = retrying or Retrying(float(DEFAULTS["task.timeout.ms"]) / 1000)
        self._config = consumer_config
        # The name the ring of standbys orders members by (`state_restore.standby_partitions`).
        self.name = consumer_config.get("group.instance.id") or consumer_config.get("client.id", "")
        self._standby: set[int] = set()
        # An empty assignment is `settled` only once the group's description confirms it.
        self._confirm_empty = confirm_empty_assignment
        self._settled_empty = False
        # The group's description (standbys, a settled empty assignment); only the polling
        # thread uses it.
        self._view = GroupView(consumer_config, topic, self.name, standby_replicas)
        # The coordinator's id for this member (what the group's description names it by).
        self._member_id: str | None = None
        self._describe_now = threading.Event()
        self._consumer: Consumer | None = None
        # The member's own consumer is polled by the background thread; a request from another
        # thread (committed offsets) can hang on it while it polls, so those go through a
        # second consumer that never subscribes, hence never joins the group. It exists before
        # the join: a batch replayed while a hand-off instance warms up asks it already.
        self._offsets_client = Consumer(
            {k: v for k, v in consumer_config.items() if k != "group.instance.id"}
        )
        self._offsets_lock = threading.Lock()
        self._offsets_closed = False
        self._owned: set[int] = set()
        self._generation = 0
        self._draining = False
        self._nudge = 0
        self._lock = threading.Lock()
        # Notified on every generation change: an aborted transaction retries with the new one.
        self._generation_changed = threading.Condition(self._lock)
        # Taken by `hold()` around a transaction; a revocation waits for it (as Kafka Streams
        # commits before it gives partitions up), so a batch never writes for a partition that
        # was revoked half-way through its transaction.
        self._ownership = threading.Lock()
        # As the polling thread last read it (see the module docstring).
        self._group_metadata: object | None = None
        self._assigned = threading.Event()
        self._stop = threading.Event()
        self._fatal: KafkaError | None = None
        self._thread = threading.Thread(target=self._run, name="group-member", daemon=True)

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> GroupMember:
        """Join the group (asynchronously: the first assignment arrives later)."""
        # A predecessor's file must not be planned with before this process's first assignment.
        assignment_file.withdraw(self.channel)
        self._consumer = Consumer({**self._config, "error_cb": self._on_error})
        self._consumer.subscribe(
            [self.topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        log.info(
            "joining group %s as %s (topic %s)",
            self._config.get("group.id"),
            self._config.get("group.instance.id", "a dynamic member"),
            self.topic,
        )
        self._thread.start()
        return self

    def wait_for_assignment(self, timeout_s: float) -> bool:
        """Whether the first assignment arrived within `timeout_s`."""
        return self._assigned.wait(timeout_s)

    def partitions_to_warm(self, timeout_s: float) -> set[int] | None:
        """Before the join: the partitions the group may hand this member, whose copies a
        hand-off warm-up catches up (`GroupView.partitions_to_warm`); None when the group could
        not be described within `timeout_s`."""
        return self._view.partitions_to_warm(timeout_s, self._stop)

    def keep_copies(self, partitions: Iterable[int]) -> None:
        """Keep these copies as standbys until the group's membership says which to keep."""
        with self._lock:
            self._standby = set(partitions)

    def nudge(self, token: int) -> None:
        """Ask the source for a batch even if no input arrived (`Assignment.nudge`)."""
        with self._lock:
            if token == self._nudge:
                return
            self._nudge = token
            self._publish()

    def drain(self) -> None:
        """Tell the source to plan no new batch (shutdown); the membership is kept."""
        with self._lock:
            self._draining = True
            self._publish()

    def leave(self) -> None:
        """Start leaving the group (a hand-off's shutdown), without waiting: the polling thread
        closes the consumer, whose revocation waits for the running batch to commit first, and
        the partitions move to the other members at once, not after the query has stopped and
        Spark has shut down (about a second later). `close()` waits for it."""
        self._stop.set()

    def wait_for_new_generation(self, since: int, timeout_s: float) -> int:
        """The member's generation once it is past `since` (a rebalance's callback ran), or
        the current one after `timeout_s`."""
        with self._generation_changed:
            self._generation_changed.wait_for(lambda: self._generation > since, timeout_s)
            return self._generation

    @property
    def generation(self) -> int:
        """How many assignment changes and revocations this member has seen."""
        with self._lock:
            return self._generation

    def close(self) -> None:
        """Stop polling and close the consumer (once; `leave()` may have begun it).

        With `group.instance.id` set (a stateful instance), closing does NOT leave the group:
        the partitions wait for this instance for up to `session.timeout.ms`, so a restart keeps
        them and their state. Without it (stateless), closing leaves the group and the partitions
        move at once.
        """
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=CLIENT_TIMEOUT_S)
            if self._thread.is_alive():
                log.warning(
                    "group member: its consumer did not close within %.0f s; going on without "
                    "it (the group expires the member after session.timeout.ms)",
                    CLIENT_TIMEOUT_S,
                )
        with self._offsets_lock:
            if not self._offsets_closed:
                self._offsets_client.close()
                self._offsets_closed = True

    # --- what the sink and the health checks ask ----------------------------------------------

    @property
    def assigned(self) -> bool:
        """Whether an assignment has arrived (possibly empty: more instances than partitions)."""
        return self._assigned.is_set()

    def settled_assignment(self) -> frozenset[int] | None:
        """The partitions owned now if this member has an assignment to be ready with, else
        None: one arrived and owns a partition, or it owns none and (with
        `confirm_empty_assignment`) the group, described after this member's last change, was
        stable with every partition owned by another member
        (`GroupDescription.settled_without`), not half-way through a join; that holds until this
        member's assignment changes. One snapshot, so a rebalance between two questions cannot
        mix them."""
        if not self._assigned.is_set():
            return None
        with self._lock:
            if self._owned or not self._confirm_empty or self._settled_empty:
                return frozenset(self._owned)
            return None

    def assignment(self) -> set[int]:
        """The input partitions owned now."""
        with self._lock:
            return set(self._owned)

    @contextmanager
    def hold(self) -> Iterator[frozenset[int]]:
        """The partitions owned now, kept: a revocation waits until the block ends.

        The block must not call the member's consumer (see the module docstring).
        """
        with self._ownership:
            yield frozenset(self.assignment())

    def group_metadata(self) -> object:
        """The group metadata for `send_offsets_to_transaction`, as the polling thread last read
        it; the broker refuses a commit whose generation is over, so a stale one aborts the
        transaction and the batch is replayed, never committed wrongly."""
        self.raise_if_fenced()
        with self._lock:
            metadata = self._group_metadata
        if metadata is None:
            raise RuntimeError("no consumer group metadata yet: the member has not joined")
        return metadata

    def committed(self, partitions: Iterable[int]) -> dict[int, int | None]:
        """The group's committed offsets of `partitions` (None where nothing was committed)."""
        return self._retrying(
            f"committed offsets of {self.topic}",
            partial(self._committed_once, partitions),
            refresh=self._refresh_metadata,
        )

    def _refresh_metadata(self) -> None:
        with self._offsets_lock:
            self._offsets_client.list_topics(self.topic, timeout=CLIENT_TIMEOUT_S)

    def _committed_once(self, partitions: Iterable[int]) -> dict[int, int | None]:
        tps = [TopicPartition(self.topic, p) for p in partitions]
        with self._offsets_lock:
            found = self._offsets_client.committed(tps, timeout=CLIENT_TIMEOUT_S)
        raise_partition_error(found)
        return {tp.partition: tp.offset if tp.offset >= 0 else None for tp in found}

    @property
    def fenced(self) -> bool:
        """Whether the broker fenced this member (another process has its group.instance.id)."""
        return self._fatal is not None

    def raise_if_fenced(self) -> None:
        """Raise `MemberFencedError` when the broker fenced this member (a fatal error)."""
        if self._fatal is not None:
            raise MemberFencedError(
                f"group member {self._config.get('group.instance.id')} was fenced: "
                f"{self._fatal.str()} (another instance runs with the same group.instance.id)"
            )

    # --- the polling thread -------------------------------------------------------------------

    def _run(self) -> None:
        consumer = self._client()
        next_lag = time.monotonic()
        try:
            while not self._stop.is_set():
                message = consumer.poll(POLL_TIMEOUT_S)
                error = message.error() if message is not None else None
                if error is not None:
                    self._on_error(error)
                self._read_group_metadata(consumer)
                if time.monotonic() >= next_lag or self._describe_now.is_set():
                    next_lag = time.monotonic() + LAG_INTERVAL_S
                    self._describe_now.clear()
                    self._export_lag(consumer)
                    self._ask_description()
                if self._take_description() is False:  # mid-rebalance: ask again soon
                    next_lag = min(next_lag, time.monotonic() + SETTLING_INTERVAL_S)
        except Exception:  # the thread must not die silently: the instance would leave the group
            log.exception("group member's polling thread failed")
            raise
        finally:
            self._view.close()
            static = "group.instance.id" in self._config
            if not static:
                self._give_back(consumer)
            consumer.close()
            log.info(
                "group member closed: %s",
                "a static member stays in the group until the session timeout"
                if static
                else "left the group, its partitions move to the other instances now",
            )

    def _give_back(self, consumer: Consumer) -> None:
        """Leave the group before closing (a dynamic member): unsubscribe, and poll until the
        revocation has run (after the running batch's commit), as librdkafka's maintainers
        advise; a close that an assignment reaches half-way through, when the other members
        leave at the same moment, can hang (confluentinc/librdkafka#4527)."""
        bound_s = REVOKE_WAIT_S + CLIENT_TIMEOUT_S
        try:
            consumer.unsubscribe()
            deadline = time.monotonic() + bound_s
            while consumer.assignment():
                if time.monotonic() > deadline:
                    log.warning(
                        "group member: partitions %s still assigned %.0f s after leaving; "
                        "closing anyway",
                        _names(consumer.assignment()),
                        bound_s,
                    )
                    return
                consumer.poll(POLL_TIMEOUT_S)
        except KafkaException as exc:  # the close below still leaves the group
            log.warning("group member: unsubscribing before the close failed: %s", exc)

    def _client(self) -> Consumer:
        if self._consumer is None:
            raise RuntimeError("GroupMember.start() was not called")
        return self._consumer

    def _on_error(self, error: KafkaError) -> None:
        # error_cb reports a fatal error with the code _FATAL (and fatal() false).
        if error.fatal() or error.code() == KafkaError._FATAL:
            self._fatal = error
            log.error("group member: fatal error %s", error.str())
        else:
            log.warning("group member: %s", error.str())

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._read_group_metadata(consumer)
        consumer.incremental_assign(partitions)
        # Membership only: the source reads the records.
        if partitions:
            consumer.pause(partitions)
        self._changed(added={tp.partition for tp in partitions}, removed=set())

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._read_group_metadata(consumer)  # before waiting: the running batch needs it
        revoked = {tp.partition for tp in partitions}
        if revoked & self.assignment():
            self._finish_running_batch(revoked)
        self._give_up(consumer, partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Lost, not revoked: another member may own them already, no commit of ours would pass.
        log.warning("group member: partitions lost (session timed out): %s", _names(partitions))
        self._read_group_metadata(consumer)
        self._give_up(consumer, partitions)

    def _give_up(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self._ownership:  # after the running transaction
            consumer.incremental_unassign(partitions)
            self._changed(added=set(), removed={tp.partition for tp in partitions})

    def _changed(self, added: set[int], removed: set[int]) -> None:
        with self._lock:
            self._owned = (self._owned - removed) | added
            self._generation += 1
            self._generation_changed.notify_all()
            if added or removed:  # a description from before this change says nothing now
                self._settled_empty = False
            self._publish()
            owned = sorted(self._owned)
        self._assigned.set()
        self._describe_now.set()  # the standbys follow the new assignment
        self.metrics.rebalance(
            assigned=[(self.topic, p) for p in added], revoked=[(self.topic, p) for p in removed]
        )
        log.info(
            "rebalance: assigned %s, revoked %s; owned now %s (generation %d)",
            sorted(added),
            sorted(removed),
            owned,
            self._generation,
        )

    def _read_group_metadata(self, consumer: Consumer) -> None:
        metadata = consumer.consumer_group_metadata()
        member_id = consumer.memberid() or None
        with self._lock:
            self._group_metadata = metadata
            self._member_id = member_id

    def _finish_running_batch(self, revoked: set[int]) -> None:
        """Let the batch in flight commit the revoked partitions' results before they go (Kafka
        Streams commits in onPartitionsRevoked): its work is not redone by the next owner, and
        this instance's copy of their state stays good. No new batch plans them meanwhile."""
        with self._lock:
            self._generation += 1
            self._publish(leaving=revoked)
        if self.batches is None:
            return
        began = time.monotonic()
        # After the publish: a planning step that read the assignment before it has said what
        # it planned (`planned_batch`), and the next one plans without the revoked partitions.
        running = self.batches.unfinished(REVOKE_WAIT_S)
        if running is None:
            return
        # Only planned yet: a revocation here gave the partitions up before planned_batch.
        stage = "running" if self.batches.logged(running) else "planned, not yet logged"
        if poll_until(
            partial(self.batches.done, running),
            max(0.0, began + REVOKE_WAIT_S - time.monotonic()),
            interval_s=0.05,
        ):
            log.info(
                "group member: revocation of partitions %s waited %.2f s for batch %d (%s) to "
                "commit them",
                sorted(revoked),
                time.monotonic() - began,
                running,
                stage,
            )
        else:
            log.warning(
                "group member: batch %d not done within %.0f s of the revocation of partitions "
                "%s: they go without its results",
                running,
                REVOKE_WAIT_S,
                sorted(revoked),
            )

    def _publish(self, leaving: frozenset[int] | set[int] = frozenset()) -> None:
        assignment_file.publish(
            self.channel,
            Assignment(
                self.topic,
                tuple(sorted(self._owned - leaving)),
                self._generation,
                self._draining,
                standby=tuple(sorted(self._standby - self._owned)),
                nudge=self._nudge,
            ),
        )

    def _needs_description(self) -> bool:
        """Whether the group's membership matters now: for the standbys, or to confirm an
        empty assignment."""
        if not self._assigned.is_set():
            return False
        if self.standby_replicas >= 1:
            return True
        with self._lock:
            return self._confirm_empty and not self._owned and not self._settled_empty

    def _ask_description(self) -> None:
        if not self._needs_description():
            return
        with self._lock:
            generation = self._generation
        self._view.request(generation)

    def _take_description(self) -> bool | None:
        """Use the group's description if one arrived (never waits for it): whether it showed
        the group settled (`GroupDescription.settled`), None when none arrived."""
        answer = self._view.result(retry_in_s=LAG_INTERVAL_S)
        if answer is None:
            return None
        generation, description = answer
        settled = description.settled()
        self._confirm_empty_assignment(generation, description)
        self._refresh_standbys(description, settled)
        return settled

    def _confirm_empty_assignment(self, generation: int, description: GroupDescription) -> None:
        if not self._confirm_empty:
            return
        with self._lock:
            if generation != self._generation or self._owned or self._settled_empty:
                return  # asked before the last change (it may describe the join half-way)
            if self._member_id is None or not description.settled_without(self._member_id):
                return
            # Until this member's assignment changes: a rebalance elsewhere that leaves it
            # owning nothing does not make it unready (no flapping of an idle pod's readiness).
            self._settled_empty = True
        log.info(
            "group %s settled with no partition for this member: %d members, %d partitions of "
            "%s, every one owned by another member",
            self._config.get("group.id"),
            len(description.members),
            description.topic_partitions,
            self.topic,
        )

    def _refresh_standbys(self, description: GroupDescription, settled: bool) -> None:
        """Which copies to keep, from the group's membership (`group_view`). Mid-rebalance a
        moving partition is owned by nobody: copies are added then, never dropped, so that a
        copy its next owner or standby needs is not let go and rebuilt from the whole changelog."""
        standby = self._view.standbys(description)
        if standby is None:
            return
        with self._lock:
            if not settled:
                standby |= self._standby
            if standby == self._standby:
                return
            self._standby = standby
            self._publish()
        log.info(
            "standby copies kept: %s (num.standby.replicas=%d, members %s)",
            sorted(standby),
            self.standby_replicas,
            ", ".join(sorted(m.name for m in description.members)),
        )

    def _export_lag(self, consumer: Consumer) -> None:
        owned = self.assignment()
        if not owned:
            return
        try:
            # Once: this is the polling thread, and the lag can wait for the next round.
            export_lag(self.metrics, consumer, self.topic, self._committed_once(owned))
        except KafkaException as exc:
            log.warning("consumer lag not updated: %s", exc)


def _names(partitions: Sequence[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in partitions) or "none"
