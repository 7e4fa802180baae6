"""Where an output broke exactly-once: the records the truth judged duplicates or never matched,
with every output record of their keys, so the writer can be found in the instances' logs.

The output partition is the input partition (both are the CRC32 of the key), and each record's
timestamp is its batch's produce time: together they name the instance that owned the
partition then, and the batch in its log.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from devkit.truth import OutputCheck, OutputRecord, Truth

KEYS_SHOWN = 50  # keys whose whole output history the report keeps


def _record(record: OutputRecord) -> dict[str, object]:
    return {
        "partition": record.partition,
        "offset": record.offset,
        "timestamp_ms": record.timestamp_ms,
        "value": record.value.decode("utf-8", "replace"),
    }


def write_exactness_report(
    path: Path, truth: Truth, check: OutputCheck, records: Sequence[OutputRecord]
) -> list[str]:
    """Write the report to `path` (JSON); a few lines for the log that name the first breaks."""
    broken = sorted([*truth.duplicates, *truth.unmatched()], key=lambda r: (r.partition, r.offset))
    keys = list(dict.fromkeys([r.key for r in broken] + [k for k, _, _ in check.wrong_keys]))
    shown = set(keys[:KEYS_SHOWN])
    history: dict[str, list[dict[str, object]]] = {key: [] for key in shown}
    for record in records:
        if record.key in shown:
            history[record.key].append(_record(record))
    expected = truth.expected()
    report = {
        "check": check.to_json(),
        "broken": [{"key": r.key, **_record(r)} for r in broken],
        "keys": {
            key: {
                "expected": (expected.get(key) or b"").decode("utf-8", "replace"),
                "output": history[key],
            }
            for key in keys[:KEYS_SHOWN]
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))
    by_partition: dict[int, list[OutputRecord]] = {}
    for record in broken:
        by_partition.setdefault(record.partition, []).append(record)
    return [
        f"partition {p}: {len(rs)} records judged duplicates, offsets {rs[0].offset}-"
        f"{rs[-1].offset}, produced {rs[0].timestamp_ms}-{rs[-1].timestamp_ms} ms "
        f"(first: key {rs[0].key} value {rs[0].value[:40]!r})"
        for p, rs in sorted(by_partition.items())
    ] + [f"keys wrong at the end: {len(check.wrong_keys)}; report: {path}"]
