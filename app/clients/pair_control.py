"""The records of an active/standby pair's control topic (`pair.control.topic`: compacted, one
partition, JSON values), read and written the same way by the processor's sides
(`app/processor/pair.py`, which says what each record promises) and by the operators' commands
(`app/admin/pair_switch.py`, `pair_release.py`):

- `active`: `{"side": "b", "epoch": 3, "forced": false}`; no record: side a, epoch 0;
- `released/<epoch>/<partition>`: `{"side": "a", "offset": R}`;
- `taken/<epoch>/<partition>`: `{"side": "b", "offset": S}`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from app.clients.kafka_retry import Retrying, is_transient

log = logging.getLogger(__name__)

CONSUME_BATCH = 10_000

ACTIVE_KEY = "active"
FIRST_SIDE = "a"


class PairControlError(RuntimeError):
    """The control topic could not be read to its end: the batch must not decide blind."""


@dataclass(frozen=True)
class Active:
    """Which side publishes, since which switch."""

    side: str
    epoch: int
    forced: bool = False

    def to_json(self) -> bytes:
        """The `active` record's value."""
        return json.dumps({"side": self.side, "epoch": self.epoch, "forced": self.forced}).encode()


def released_key(epoch: int, partition: int) -> str:
    """The key of a side's release of `partition` in `epoch`."""
    return f"released/{epoch}/{partition}"


def taken_key(epoch: int, partition: int) -> str:
    """The key of a side's take-over of `partition` in `epoch`."""
    return f"taken/{epoch}/{partition}"


@dataclass
class ControlView:
    """The control topic's latest value per key."""

    values: dict[str, dict] = field(default_factory=dict)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """One record of the control topic (a tombstone removes its key)."""
        if key is None:
            return
        name = key.decode("utf-8", "replace")
        if value is None:
            self.values.pop(name, None)
            return
        try:
            self.values[name] = json.loads(value)
        except ValueError:
            log.warning("pair control record %s is not JSON; ignored: %r", name, value[:200])

    def active(self) -> Active:
        """The active side (side a in epoch 0 before any switch)."""
        record = self.values.get(ACTIVE_KEY)
        if not record:
            return Active(FIRST_SIDE, 0)
        return Active(str(record["side"]), int(record["epoch"]), bool(record.get("forced")))

    def released(self, epoch: int, partition: int) -> int | None:
        """Where the idle side's output of `partition` ended in `epoch`, once it says so."""
        record = self.values.get(released_key(epoch, partition))
        return None if record is None else int(record["offset"])

    def taken(self, epoch: int, partition: int) -> bool:
        """Whether the active side of `epoch` took `partition` over."""
        return taken_key(epoch, partition) in self.values


def read_to_end(
    consumer: Consumer, partition: TopicPartition, timeout_s: float, end: int | None = None
) -> Iterator[Message]:
    """Every committed record of `partition` from its position (assigned by the caller) to
    `end` (exclusive), or to its end as it was at the call; raises `PairControlError` past
    `timeout_s`. A leader move or a lost broker on the way is waited out within `timeout_s`."""
    if end is None:
        _low, end = Retrying(timeout_s, budget_name="the read's timeout").watermark_offsets(
            f"end of {partition.topic}-{partition.partition}",
            consumer, partition.topic, partition.partition, timeout_s,
        )  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while True:
        # It moves past transaction markers and aborted records too.
        position = consumer.position([partition])[0].offset
        if end <= 0 or position >= end:
            return
        if time.monotonic() > deadline:
            raise PairControlError(
                f"{partition.topic}-{partition.partition}: not read up to {end} within "
                f"{timeout_s:.0f} s (at {position}): is a transaction on it left open?"
            )
        for message in consumer.consume(CONSUME_BATCH, timeout=0.2):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF or is_transient(error):
                    continue  # the client retries; the deadline bounds the wait
                raise KafkaException(error)
            offset = message.offset()
            if offset is not None and offset < end:
                yield message
