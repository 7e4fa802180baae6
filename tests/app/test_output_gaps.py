"""The longest time without output per partition over a window (a roll, a restart): live in the
local run (`OutputGaps`, record by record) and after the fact in the benchmarks
(`zero_output_gaps`, the same measure fed from the kept records), and placed in time for the
real node's roll (`longest_gaps`)."""

from __future__ import annotations

from devkit.bench.measure import zero_output_gaps
from devkit.bench.node_rollout import longest_gaps
from devkit.local.observe import OutputGaps
from devkit.truth import OutputRecord


def _record(partition: int, at_ms: int) -> OutputRecord:
    return OutputRecord(partition, 0, at_ms, "/p", b"1")


def test_a_gap_runs_from_the_last_output_before_the_window_to_the_next_one() -> None:
    records = [
        _record(0, 1_000),  # partition 0's last output before the window
        _record(1, 9_000),  # partition 1's
        _record(0, 14_000),
        _record(1, 11_000),
        _record(1, 12_000),
        _record(0, 15_000),
    ]
    gaps = zero_output_gaps(records, [0, 1, 2], since_ms=10_000, until_ms=16_000)
    # 0: 1 s -> 14 s; 1: its longest is 12 s -> the window's end; 2: silent throughout.
    assert gaps == {0: 13.0, 1: 4.0, 2: 6.0}
    # the same lengths, each with where it began (seconds from the window's start)
    assert longest_gaps(records, 3, since_ms=10_000, until_ms=16_000) == {
        0: (-9.0, 13.0),
        1: (2.0, 4.0),
        2: (0.0, 6.0),
    }


def test_output_after_the_window_and_other_partitions_count_for_nothing() -> None:
    records = [_record(0, 1_000), _record(3, 2_000), _record(0, 30_000)]
    assert zero_output_gaps(records, [0], since_ms=5_000, until_ms=10_000) == {0: 9.0}


def test_an_open_window_counts_a_silent_partition_up_to_now() -> None:
    gaps = OutputGaps(range(2))
    gaps.record(0, 1_000)
    gaps.record(1, 1_500)
    gaps.open(2_000)
    gaps.record(0, 2_500)
    assert gaps.seconds(6_000) == {0: 3.5, 1: 4.5}  # both silent since their last record
    gaps.close(7_000)
    assert gaps.seconds(60_000) == {0: 4.5, 1: 5.5}  # closed: later time adds nothing


def test_before_the_window_opens_there_are_no_gaps() -> None:
    gaps = OutputGaps(range(2))
    gaps.record(0, 1_000)
    assert gaps.seconds(5_000) == {}
