"""An active/standby pair: which side publishes, and how a partition passes from one to the other.

Two complete deployments (`pair.side` a and b) read all input, each with its own group, state,
changelog and transactional ids; only the active side writes the output and dead-letter topics.
Which side that is lives in the pair's control topic (`pair.control.topic`: compacted, one
partition, JSON values), so a switch is data, not a pod restart:

- `active`: `{"side": "b", "epoch": 3, "forced": false}`, written by
  `python -m app.admin.pair_switch`. No record: side a, epoch 0.
- `released/<epoch>/<partition>`: `{"side": "a", "offset": R}`. The side that is not active in
  `epoch` writes it in the transaction of its first batch of the partition in that epoch, and
  publishes nothing of the partition from that batch on: everything it ever published of the
  partition reflects input before offset R.
- `taken/<epoch>/<partition>`: `{"side": "b", "offset": S}`. The active side took the partition
  over at input offset S: in that transaction it published every key of the partition as its
  state stood at S (a snapshot, read from its own changelog), then the batch's new values.

**What a downstream reader of the output sees across a switch.** The output is a table (the
latest value per key). The taking side waits until its batch starts at or after R (it waits
for the release, then for its own input position), so its snapshot reflects at least all the
input the other side ever published: no key goes back to an older value, and no key keeps a
value older than the snapshot (every key is in it). Between the release and the take-over the
partition's output pauses for about one batch of each side. A forced switch (the other side is
down and cannot release) has the switch command write the releases instead: R is then the down
side's committed offset, which is exactly what it published (output and offsets commit in one
transaction), once the broker has aborted its open transactions (`transaction.timeout.ms`).

The decision for each batch is `plan` (pure); `PairControl` reads the control topic, up to its
end, before every batch, so an instance that just took a partition over from a sibling of its
own side sees the same epoch as the sibling did.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from app.clients.pair_control import (
    CONSUME_BATCH,
    Active,
    ControlView,
    read_to_end,
    released_key,
    taken_key,
)
from app.processor.aggregation import Aggregation

log = logging.getLogger(__name__)

CATCH_UP_TIMEOUT_S = 30.0
WATCH_POLL_S = 0.2
# The control topic's readers stay at its head between batches, where a short fetch wait
# (`consumer.fetch.wait.max.ms`, short for the range readers) would poll a quiet topic a hundred
# times a second: they wait as long as librdkafka does by default, and a new record still ends
# the wait at once.
HEAD_FETCH_WAIT_MS = "500"


@dataclass(frozen=True)
class PartitionPlan:
    """What one batch does with one partition's results."""

    publish: bool  # output and dead letters; the changelog and offsets are written always
    snapshot: bool = False  # the take-over: every key's value at the batch's start first
    # The take-over's batch starts past the release: this side writes the dead letters of the
    # input in between, [release, batch start), which neither side wrote.
    dead_letters: tuple[int, int] | None = None
    control: tuple[tuple[str, bytes], ...] = ()  # records for the control topic
    why: str = ""


def plan(
    view: ControlView,
    side: str,
    ranges: Mapping[int, tuple[int, int]],
    taken_here: set[tuple[int, int]],
) -> dict[int, PartitionPlan]:
    """Per partition of the batch (`ranges`: input start and end), what `side` does with it.
    `taken_here`: (epoch, partition) this instance took over itself (its record may not be
    back from the broker yet)."""
    active = view.active()
    plans = {}
    for partition, (start, _end) in ranges.items():
        plans[partition] = _plan_partition(view, active, side, partition, start, taken_here)
    return plans


def _plan_partition(
    view: ControlView,
    active: Active,
    side: str,
    partition: int,
    start: int,
    taken_here: set[tuple[int, int]],
) -> PartitionPlan:
    epoch = active.epoch
    if active.side != side:
        if epoch == 0 or view.released(epoch, partition) is not None:
            return PartitionPlan(publish=False, why="idle")
        record = json.dumps({"side": side, "offset": start}).encode()
        return PartitionPlan(
            publish=False,
            control=((released_key(epoch, partition), record),),
            why=f"released at input offset {start} (epoch {epoch}, side {active.side} active)",
        )
    if epoch == 0 or (epoch, partition) in taken_here or view.taken(epoch, partition):
        return PartitionPlan(publish=True)
    released = view.released(epoch, partition)
    if released is None:
        return PartitionPlan(publish=False, why=f"waiting for the release (epoch {epoch})")
    if start < released:
        return PartitionPlan(
            publish=False,
            why=f"waiting for own input to reach {released} (at {start}, epoch {epoch})",
        )
    record = json.dumps({"side": side, "offset": start}).encode()
    return PartitionPlan(
        publish=True,
        snapshot=True,
        dead_letters=(released, start) if released < start else None,
        control=((taken_key(epoch, partition), record),),
        why=f"taken over at input offset {start} (epoch {epoch}"
        + (", forced)" if active.forced else ")"),
    )


def reader_config(
    consumer_config: Mapping[str, str], client_id: str, *, at_head: bool = False
) -> dict[str, str]:
    """The settings of a consumer that reads assigned partitions to their end and never joins a
    group; `at_head`: one that stays assigned at the head of the control topic."""
    config = {k: v for k, v in consumer_config.items() if k != "group.instance.id"}
    config.update({"client.id": client_id, "isolation.level": "read_committed"})
    if at_head:
        config["fetch.wait.max.ms"] = HEAD_FETCH_WAIT_MS
    return config


def _reader(
    consumer_config: Mapping[str, str], client_id: str, *, at_head: bool = False
) -> Consumer:
    return Consumer(reader_config(consumer_config, client_id, at_head=at_head))


class PairControl:
    """This side of the pair: the control topic read before each batch, and the snapshot."""

    def __init__(
        self,
        side: str,
        control_topic: str,
        input_topic: str,
        changelog_topic: str,
        consumer_config: Mapping[str, str],
        aggregation: Aggregation,
        client_id: str,
    ) -> None:
        self.side = side
        self.control_topic = control_topic
        self.input_topic = input_topic
        self.changelog_topic = changelog_topic
        self._aggregation = aggregation
        self._consumer_config = dict(consumer_config)
        self._client_id = client_id
        self._closing = threading.Event()
        self._watcher: threading.Thread | None = None
        self._control_tp = TopicPartition(control_topic, 0, OFFSET_BEGINNING)
        self._control = _reader(consumer_config, f"{client_id}-pair-control", at_head=True)
        self._control.assign([self._control_tp])
        # The take-overs' reads: this side's changelog, the input between release and take-over.
        self._records = _reader(consumer_config, f"{client_id}-pair-reads")
        self.view = ControlView()
        self._taken_here: set[tuple[int, int]] = set()
        self._logged: dict[int, str] = {}

    def watch(self, nudge: Callable[[int], None]) -> None:
        """Call `nudge` (with a new token) whenever the control topic gets a record, from a
        thread of its own: the group member then asks the source for a batch, so that a release
        or a take-over does not wait for the partition's next input record."""
        self._watcher = threading.Thread(
            target=self._watch, args=(nudge,), name="pair-control-watch", daemon=True
        )
        self._watcher.start()

    def _watch(self, nudge: Callable[[int], None]) -> None:
        consumer = _reader(self._consumer_config, f"{self._client_id}-pair-watch", at_head=True)
        try:
            consumer.assign([TopicPartition(self.control_topic, 0, OFFSET_BEGINNING)])
            while not self._closing.is_set():
                messages = consumer.consume(CONSUME_BATCH, timeout=WATCH_POLL_S)
                if any(m.error() is None for m in messages):
                    nudge(time.time_ns() // 1_000_000)
        except Exception:  # the batches still read the topic; only the nudge is lost
            log.exception("pair control watcher failed: releases and take-overs now wait for input")
        finally:
            consumer.close()

    def plan(self, ranges: Mapping[int, tuple[int, int]]) -> dict[int, PartitionPlan]:
        """The batch's plan, from the control topic read to its end now."""
        for message in read_to_end(
            self._control, TopicPartition(self.control_topic, 0), CATCH_UP_TIMEOUT_S
        ):
            self.view.apply(message.key(), message.value())
        plans = plan(self.view, self.side, ranges, self._taken_here)
        for partition, p in sorted(plans.items()):
            if p.why and self._logged.get(partition) != p.why:
                log.info("pair side %s, partition %d: %s", self.side, partition, p.why)
            self._logged[partition] = p.why
        return plans

    def committed(self, plans: Mapping[int, PartitionPlan]) -> None:
        """The batch's transaction committed: its take-overs hold from now on."""
        epoch = self.view.active().epoch
        self._taken_here |= {(epoch, p) for p, pl in plans.items() if pl.snapshot}

    def snapshot(self, partition: int) -> Iterator[tuple[bytes, bytes]]:
        """(key, output value) of every key of `partition` as this side's changelog has it."""
        latest: dict[bytes, bytes | None] = {}
        for message in self._read(self.changelog_topic, partition, OFFSET_BEGINNING, None):
            key = message.key()
            if key is not None:
                latest[key] = message.value()
        for key, value in latest.items():
            if value is not None:
                yield key, self._aggregation.output_value(self._aggregation.restore(value))

    def dead_letters(self, partition: int, begin: int, end: int) -> Iterator[tuple[Message, str]]:
        """The input records of `partition` in [begin, end) that break the input contract, with
        their reasons: a take-over past the release writes them (nobody else did)."""
        for message in self._read(self.input_topic, partition, begin, end):
            reason = self._aggregation.fold(None, message.key(), message.value())
            if isinstance(reason, str):
                yield message, reason

    def _read(self, topic: str, partition: int, begin: int, end: int | None) -> Iterator[Message]:
        self._records.assign([TopicPartition(topic, partition, begin)])
        try:
            yield from read_to_end(
                self._records, TopicPartition(topic, partition), CATCH_UP_TIMEOUT_S, end
            )
        finally:
            self._records.unassign()

    def close(self) -> None:
        """Stop the watcher and close the readers."""
        self._closing.set()
        if self._watcher is not None:
            self._watcher.join(timeout=WATCH_POLL_S * 10)
        self._control.close()
        self._records.close()
