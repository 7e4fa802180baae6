"""The aggregation: a count of page views per page. THIS is the part a fork replaces.

Input contract (shared with the load generator):

- key: the page, UTF-8, not empty. Records are partitioned by key (Kafka's default
  partitioner), so one page's count lives in one partition.
- value: a UTF-8 JSON object, one page view, e.g. ``{"page": "/home", "user": "u1", "ts": ...}``.
  If it has a ``page`` field, that field must equal the key. Other fields are not read.

A record that breaks the contract (judged in the source's readers: `combine.py`) goes to the
dead-letter topic with one of these reasons (header ``dlq.reason``): ``null-key``,
``invalid-key`` (not UTF-8, or empty), ``null-value``, ``invalid-value`` (not UTF-8, or not a
JSON object), ``page-mismatch``.

Output: per page updated in a batch, one row with its new count; the sink writes it to the output
topic and to the changelog (key: the page, value: the count as a UTF-8 decimal, e.g. ``b"42"``),
in the partition of the input record.

Restore: a changelog record (``kind = restore``) SETS the page's count; the newest one (highest
changelog offset) wins. Input records add to it. Every stored count remembers the restore epoch
of its partition (see `source_offsets.py`): a count stored under an older epoch that the latest
restore did not overwrite is not in the changelog, so it is stale and counts as zero.
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
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from app.processor.combine import RESTORE

# Output row kinds.
COUNT = "count"  # a page's new count: to the output topic and the changelog
DLQ = "dlq"  # a record that breaks the input contract: to the dead-letter topic
RESTORED = "restored"  # one page's state set from the changelog: counted, never written

# Invalid records are grouped under this key, which no valid page has (pages are not empty),
# so they pass through the same single stateful operator without touching any count.
DLQ_GROUP = ""

OUTPUT_SCHEMA = StructType(
    [
        StructField("kind", StringType()),
        StructField("page", StringType()),
        StructField("count", LongType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        # how many records the row stands for (input records counted, changelog records read)
        StructField("records", LongType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("reason", StringType()),
        # the source's read time of the rows it stands for (a sum: see the source's `read_us`)
        StructField("read_us", LongType()),
    ]
)
STATE_SCHEMA = StructType([StructField("count", LongType()), StructField("epoch", LongType())])


def count_page_views(events: DataFrame) -> DataFrame:
    """The streaming query's logic: the source's rows in, `OUTPUT_SCHEMA` rows out.

    The source's readers already folded each range per page and judged the input contract
    (`combine.py`): a row with a reason is one record for the dead-letter topic.
    """
    classified = events.withColumn(
        "page",
        F.when(F.col("reason").isNull(), F.col("key").cast("string")).otherwise(F.lit(DLQ_GROUP)),
    )
    return classified.groupBy("page").transformWithState(
        statefulProcessor=PageViewCounter(),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Update",
        timeMode="None",
    )


class PageViewCounter(StatefulProcessor):
    """Count per page; restore rows set the count, input rows add to it."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the one state variable: (count, restore epoch of the partition)."""
        self.state = handle.getValueState("count", STATE_SCHEMA)

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        """All rows of one page in this batch: a restore (gained partition) sets the count
        first, then the input adds to it."""
        (page,) = key
        if page == DLQ_GROUP:
            for row in rows:
                yield _dlq_row(row)
            return
        restore: Row | None = None
        restored_records = restore_us = 0
        added = input_us = 0
        last: Row | None = None
        for row in rows:  # one row per page and planned range: `records` says how many
            if row.kind == RESTORE:
                restored_records += row.records
                restore_us += row.read_us
                if restore is None or row.offset > restore.offset:
                    restore = row
            else:
                added += row.records
                input_us += row.read_us
                if last is None or row.offset > last.offset:
                    last = row
        current: int | None = None
        if restore is not None:
            current = int(restore.value.decode("utf-8"))
            self.state.update((current, restore.restore_epoch))
            yield _output(RESTORED, restore, restored_records, restore_us, page=page, count=current)
        if last is not None:
            if current is None:
                stored = self.state.get()
                current = stored[0] if stored is not None and stored[1] == last.restore_epoch else 0
            count = current + added
            self.state.update((count, last.restore_epoch))
            yield _output(COUNT, last, added, input_us, page=page, count=count)

    def close(self) -> None:
        """Nothing to release."""


def _dlq_row(row: Row) -> Row:
    return _output(DLQ, row, 1, row.read_us, key=row.key, value=row.value, reason=row.reason)


def _output(
    kind: str,
    source: Row,
    records: int,
    read_us: int,
    page: str | None = None,
    count: int | None = None,
    key: bytes | None = None,
    value: bytes | None = None,
    reason: str | None = None,
) -> Row:
    """One `OUTPUT_SCHEMA` row about the source record `source` (its partition and offset)."""
    return Row(
        kind=kind,
        page=page,
        count=count,
        partition=source.partition,
        offset=source.offset,
        records=records,
        key=key,
        value=value,
        reason=reason,
        read_us=read_us,
    )
