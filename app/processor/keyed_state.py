"""The stateful operator: each key's state, restored from the changelog and updated with the
input, by the pipeline's `Aggregation` (`aggregation.py`). A fork does not edit this module.

State is kept per bucket, not per key: the keys of one input partition are spread over
`BUCKETS_PER_PARTITION` buckets by the CRC32 of the key, and a bucket's keys are one state value,
read once and written once per batch that touches it. `transformWithState` answers one grouping
key per state-server round trip (set the key, get, update: three socket exchanges between the
Python worker and the JVM), so a state per key cost three round trips per page and batch, most
of a batch's time with many pages. A bucket costs the same three for all its keys; what grows
with its size is one pickle of a dict, about a microsecond a key.

Restore: a changelog row (``kind = restore``) SETS its key's state (`Aggregation.restore`); the
newest one (highest changelog offset) wins. Input rows, in offset order, update it
(`Aggregation.update`). A bucket remembers the restore epoch of its partition that it was
written under (see `source_offsets.py`): a bucket stored under another epoch than the batch's is
stale (a restore from the beginning of the changelog under a new epoch sets every key the
changelog has again), so the batch starts it empty.

Output: per key updated in a batch, one row with its output value and its changelog value; the
sink writes them to the output topic and to the changelog, in the partition of the input record.
A record that broke the input contract (judged by `Aggregation.fold` in the source's readers)
passes through as a dead-letter row with its reason.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from app.processor.aggregation import Aggregation
from app.processor.combine import RESTORE

# Output row kinds.
RESULT = "result"  # a key's new state: its output value and its changelog value
DLQ = "dlq"  # a record that breaks the input contract: to the dead-letter topic
RESTORED = "restored"  # changelog records that set a bucket's keys: counted, never written

# Buckets per input partition. Fewer means fewer round trips per batch and larger values to
# rewrite: 10,000 pages over 6 partitions make buckets of about 200 keys, and a batch touching
# 400 pages touches most of the 48. It is part of the state's layout: changing it is a new
# `settings.STATE_LAYOUT` (the state is then restored from the changelog).
BUCKETS_PER_PARTITION = 8
# Invalid records are grouped under this bucket, which no valid key has, so they pass through
# the same single stateful operator without touching any state.
DLQ_BUCKET = -1

OUTPUT_SCHEMA = StructType(
    [
        StructField("kind", StringType()),
        # the record key (RESULT: the key whose state changed; DLQ: the rejected record's)
        StructField("key", BinaryType()),
        # RESULT: the output value; DLQ: the rejected record's value
        StructField("value", BinaryType()),
        # RESULT: the changelog value
        StructField("changelog", BinaryType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        # how many records the row stands for (input records folded, changelog records read)
        StructField("records", LongType()),
        StructField("reason", StringType()),
        # the source's read time of the rows it stands for (a sum: see the source's `read_us`)
        StructField("read_us", LongType()),
    ]
)
# A bucket: the restore epoch it was written under, and its keys' changelog values.
STATE_SCHEMA = StructType([StructField("epoch", LongType()), StructField("entries", BinaryType())])


def aggregate(events: DataFrame, aggregation: Aggregation) -> DataFrame:
    """The streaming query's logic: the source's rows in, `OUTPUT_SCHEMA` rows out.

    The source's readers already folded each range per key and judged the input contract
    (`combine.py`): a row with a reason is one record for the dead-letter topic.
    """
    bucket = F.when(
        F.col("reason").isNull(),
        F.pmod(F.coalesce(F.crc32(F.col("key")), F.lit(0)), F.lit(BUCKETS_PER_PARTITION)),
    ).otherwise(F.lit(DLQ_BUCKET))
    return (
        events.withColumn("bucket", bucket)
        .groupBy("partition", "bucket")
        .transformWithState(
            statefulProcessor=KeyedState(aggregation),
            outputStructType=OUTPUT_SCHEMA,
            outputMode="Update",
            timeMode="None",
        )
    )


@dataclass
class Bucket:
    """The keys of one bucket and the restore epoch their values belong to."""

    epoch: int
    entries: dict[bytes | None, bytes] = field(default_factory=dict)

    @classmethod
    def load(cls, stored: tuple | None) -> Bucket | None:
        """The bucket a `STATE_SCHEMA` value holds (None: the bucket has no state yet)."""
        if stored is None:
            return None
        epoch, entries = stored
        # Written by this module only (`stored`), on the instance's own state volume: the same
        # codec pyspark's state client uses for every state row.
        return cls(epoch, pickle.loads(entries))

    def stored(self) -> tuple[int, bytes]:
        """The `STATE_SCHEMA` value of this bucket."""
        return self.epoch, pickle.dumps(self.entries, protocol=pickle.HIGHEST_PROTOCOL)


def fold_bucket(
    aggregation: Aggregation, stored: Bucket | None, rows: Iterable[Row]
) -> tuple[Bucket, list[Row]]:
    """One bucket's rows of a batch applied to its stored state: the new state, and the output
    rows (a `RESTORED` row counting the changelog records read, one `RESULT` row per key the
    input updated). A restore sets its keys first, then the input updates them."""
    restores: dict[bytes | None, Row] = {}
    inputs: dict[bytes | None, list[Row]] = {}
    restored_records = restore_us = 0
    epochs: set[int] = set()
    for row in rows:  # one row per key and planned range: `records` says how many
        epochs.add(row.restore_epoch)
        if row.kind == RESTORE:
            restored_records += row.records
            restore_us += row.read_us
            newest = restores.get(row.key)
            if newest is None or row.offset > newest.offset:
                restores[row.key] = row
        else:
            inputs.setdefault(row.key, []).append(row)
    if len(epochs) != 1:
        raise ValueError(f"a bucket's rows of one batch carry restore epochs {sorted(epochs)}")
    (epoch,) = epochs
    bucket = stored if stored is not None and stored.epoch == epoch else Bucket(epoch)
    entries = bucket.entries
    output: list[Row] = []
    if restores:
        newest_row = max(restores.values(), key=lambda row: row.offset)
        output.append(_output(RESTORED, newest_row, restored_records, restore_us))
        for key, row in restores.items():
            entries[key] = row.value
    for key, key_rows in inputs.items():
        key_rows.sort(key=lambda row: row.offset)
        changelog = entries.get(key)
        current: Any = None if changelog is None else aggregation.restore(changelog)
        for row in key_rows:
            current = aggregation.update(current, aggregation.decode_partial(row.value))
        changelog = aggregation.changelog_value(current)
        entries[key] = changelog
        last = key_rows[-1]
        output.append(
            _output(
                RESULT,
                last,
                sum(row.records for row in key_rows),
                sum(row.read_us for row in key_rows),
                key=key,
                value=aggregation.output_value(current),
                changelog=changelog,
            )
        )
    return bucket, output


class KeyedState(StatefulProcessor):
    """One bucket's keys: restore rows set them, input rows update them."""

    def __init__(self, aggregation: Aggregation) -> None:
        self.aggregation = aggregation

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the one state variable: the bucket (`STATE_SCHEMA`)."""
        self.state = handle.getValueState("bucket", STATE_SCHEMA)

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        """All rows of one bucket in this batch: one state read and one state write."""
        _partition, bucket = key
        if bucket == DLQ_BUCKET:
            for row in rows:
                yield _dlq_row(row)
            return
        updated, output = fold_bucket(self.aggregation, Bucket.load(self.state.get()), rows)
        self.state.update(updated.stored())
        yield from output

    def close(self) -> None:
        """Nothing to release."""


def _dlq_row(row: Row) -> Row:
    return _output(DLQ, row, 1, row.read_us, key=row.key, value=row.value, reason=row.reason)


def _output(
    kind: str,
    source: Row,
    records: int,
    read_us: int,
    key: bytes | None = None,
    value: bytes | None = None,
    changelog: bytes | None = None,
    reason: str | None = None,
) -> Row:
    """One `OUTPUT_SCHEMA` row about the source record `source` (its partition and offset)."""
    return Row(
        kind=kind,
        key=key,
        value=value,
        changelog=changelog,
        partition=source.partition,
        offset=source.offset,
        records=records,
        reason=reason,
        read_us=read_us,
    )
