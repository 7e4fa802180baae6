"""The stateful operator: each key's state, restored from the changelog and updated with the
input, by the pipeline's `Aggregation` (`aggregation.py`). A fork does not edit this module.

Restore: a changelog row (``kind = restore``) SETS the key's state (`Aggregation.restore`); the
newest one (highest changelog offset) wins. Input rows, in offset order, update it
(`Aggregation.update`). Every stored state remembers the restore epoch of its partition (see
`source_offsets.py`): a state stored under an older epoch that the latest restore did not
overwrite is not in the changelog, so it is stale and the key starts again from no state.

Output: per key updated in a batch, one row with its output value and its changelog value; the
sink writes them to the output topic and to the changelog, in the partition of the input record.
A record that broke the input contract (judged by `Aggregation.fold` in the source's readers)
passes through as a dead-letter row with its reason.
"""

from __future__ import annotations

from collections.abc import Iterator
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
RESTORED = "restored"  # one key's state set from the changelog: counted, never written

# Invalid records are grouped under this group, which no valid key has (those are "+" and the
# key's hex), so they pass through the same single stateful operator without touching any state.
DLQ_GROUP = ""

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
STATE_SCHEMA = StructType([StructField("value", BinaryType()), StructField("epoch", LongType())])


def aggregate(events: DataFrame, aggregation: Aggregation) -> DataFrame:
    """The streaming query's logic: the source's rows in, `OUTPUT_SCHEMA` rows out.

    The source's readers already folded each range per key and judged the input contract
    (`combine.py`): a row with a reason is one record for the dead-letter topic.
    """
    classified = events.withColumn(
        "group",
        F.when(F.col("reason").isNull(), F.concat(F.lit("+"), F.hex("key"))).otherwise(
            F.lit(DLQ_GROUP)
        ),
    )
    return classified.groupBy("group").transformWithState(
        statefulProcessor=KeyedState(aggregation),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Update",
        timeMode="None",
    )


class KeyedState(StatefulProcessor):
    """One key's state: restore rows set it, input rows update it."""

    def __init__(self, aggregation: Aggregation) -> None:
        self.aggregation = aggregation

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the one state variable: (changelog value, restore epoch of the partition)."""
        self.state = handle.getValueState("state", STATE_SCHEMA)

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        """All rows of one key in this batch: a restore (gained partition) sets the state
        first, then the input updates it."""
        (group,) = key
        if group == DLQ_GROUP:
            for row in rows:
                yield _dlq_row(row)
            return
        aggregation = self.aggregation
        restore: Row | None = None
        restored_records = restore_us = 0
        inputs: list[Row] = []
        for row in rows:  # one row per key and planned range: `records` says how many
            if row.kind == RESTORE:
                restored_records += row.records
                restore_us += row.read_us
                if restore is None or row.offset > restore.offset:
                    restore = row
            else:
                inputs.append(row)
        current: Any = None
        restored = False
        if restore is not None:
            current, restored = aggregation.restore(restore.value), True
            self.state.update((restore.value, restore.restore_epoch))
            yield _output(RESTORED, restore, restored_records, restore_us, key=restore.key)
        if not inputs:
            return
        inputs.sort(key=lambda row: row.offset)
        last = inputs[-1]
        if not restored:
            stored = self.state.get()
            if stored is not None and stored[1] == last.restore_epoch:
                current = aggregation.restore(stored[0])
        for row in inputs:
            current = aggregation.update(current, aggregation.decode_partial(row.value))
        changelog = aggregation.changelog_value(current)
        self.state.update((changelog, last.restore_epoch))
        yield _output(
            RESULT,
            last,
            sum(row.records for row in inputs),
            sum(row.read_us for row in inputs),
            key=last.key,
            value=aggregation.output_value(current),
            changelog=changelog,
        )

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
