"""The source's planning rules, which are pure functions of the offsets (no broker needed).

A replayed batch must read exactly what the first attempt read, so the ranges are computed
from the batch's start and end offsets alone; these tests pin that contract down.
"""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING

from app.processor import assignment_file
from app.processor.assignment_file import Assignment
from app.processor.kafka_source import (
    INPUT,
    RESTORE,
    SPLIT_RECORDS,
    GroupAssignedReader,
    KafkaRange,
    SourceOptions,
    fair_share,
)
from app.processor.source_offsets import (
    EPOCH_KEY,
    PartitionPosition,
    SourceOffsets,
    held_partitions,
    read_batch_offsets,
)

INPUT_TOPIC = "page-views"
CHANGELOG = "page-view-counter-counts-changelog"


def offsets(**positions: tuple[int, int, int]) -> dict:
    """Spark's form of the offsets; positions as p<N>=(input, changelog, epoch)."""
    return SourceOffsets(
        INPUT_TOPIC,
        CHANGELOG,
        {int(name[1:]): PartitionPosition(*pos) for name, pos in positions.items()},
    ).to_dict()


def reader(tmp_path: Path) -> GroupAssignedReader:
    return GroupAssignedReader(
        SourceOptions(
            input_topic=INPUT_TOPIC,
            changelog_topic=CHANGELOG,
            assignment_path=str(tmp_path / "assignment.json"),
            max_records_per_batch=1000,
            consumer_config={"bootstrap.servers": "127.0.0.1:9", "group.id": "g"},
        )
    )


def test_offsets_serialise_in_numeric_partition_order() -> None:
    data = offsets(p10=(5, 1, 7), p2=(3, 0, 7))
    assert json.dumps(data) == (
        '{"page-views": {"2": 3, "10": 5}, '
        '"page-view-counter-counts-changelog": {"2": 0, "10": 1}, '
        f'"{EPOCH_KEY}": {{"2": 7, "10": 7}}}}'
    )
    assert SourceOffsets.from_dict(data, INPUT_TOPIC, CHANGELOG).to_dict() == data


def test_a_partition_is_restored_when_new_or_when_its_epoch_changes() -> None:
    previous = SourceOffsets.from_dict(
        offsets(p0=(10, 4, 1), p1=(20, 0, 1)), INPUT_TOPIC, CHANGELOG
    )
    current = SourceOffsets.from_dict(
        offsets(p0=(15, 4, 1), p1=(20, 9, 2), p2=(0, 3, 2)), INPUT_TOPIC, CHANGELOG
    )
    assert current.restoring(previous) == {1, 2}
    assert current.restoring(SourceOffsets(INPUT_TOPIC, CHANGELOG)) == {0, 1, 2}


def test_ranges_come_from_start_and_end_alone(tmp_path: Path) -> None:
    start = offsets(p0=(100, 4, 1))
    end = offsets(p0=(100 + SPLIT_RECORDS + 5, 4, 1), p1=(7, 30, 2))
    ranges = reader(tmp_path).partitions(start, end)
    assert ranges == [
        KafkaRange(INPUT_TOPIC, 0, 100, 100 + SPLIT_RECORDS, INPUT, 1),
        KafkaRange(INPUT_TOPIC, 0, 100 + SPLIT_RECORDS, 100 + SPLIT_RECORDS + 5, INPUT, 1),
        # Gained partition: its changelog from the beginning; no input until the next batch.
        KafkaRange(CHANGELOG, 1, OFFSET_BEGINNING, 30, RESTORE, 2),
    ]
    assert reader(tmp_path).partitions(start, end) == ranges  # a replay plans the same


def test_an_empty_changelog_restores_nothing_and_an_idle_partition_reads_nothing(
    tmp_path: Path,
) -> None:
    assert reader(tmp_path).partitions({}, offsets(p0=(0, 0, 1))) == []
    assert reader(tmp_path).partitions(offsets(p0=(5, 0, 1)), offsets(p0=(5, 0, 1))) == []


def test_no_assignment_or_draining_plans_no_batch(tmp_path: Path) -> None:
    source = reader(tmp_path)
    start = offsets(p0=(5, 0, 1))
    assert source.latestOffset(start, source.getDefaultReadLimit()) == start
    path = Path(source.options.assignment_path)
    assignment_file.publish(path, Assignment(INPUT_TOPIC, (0,), generation=3, draining=True))
    assert source.latestOffset(start, source.getDefaultReadLimit()) == start


def test_fair_share_splits_the_budget_and_passes_on_what_a_small_partition_leaves() -> None:
    assert fair_share(100, {0: 10, 1: 500, 2: 500}) == {0: 10, 1: 45, 2: 45}
    assert fair_share(100, {0: 0, 1: 0}) == {0: 0, 1: 0}
    assert fair_share(None, {0: 10, 1: 500}) == {0: 10, 1: 500}
    assert sum(fair_share(7, {0: 5, 1: 5, 2: 5}).values()) == 7


def test_the_assignment_file_round_trips_and_is_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "state" / "assignment.json"
    assert assignment_file.read(path) is None
    assignment_file.publish(path, Assignment(INPUT_TOPIC, (3, 1), generation=1))
    assignment_file.publish(path, Assignment(INPUT_TOPIC, (1,), generation=2))
    assert assignment_file.read(path) == Assignment(INPUT_TOPIC, (1,), generation=2)
    assert [p.name for p in path.parent.iterdir()] == ["assignment.json"]
    assignment_file.withdraw(path)
    assert assignment_file.read(path) is None


def test_held_partitions_are_those_of_the_last_committed_batch(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    assert held_partitions(checkpoint, INPUT_TOPIC, CHANGELOG) == set()
    for batch, data in ((0, offsets(p0=(0, 0, 1))), (1, offsets(p0=(5, 0, 1), p1=(0, 0, 2)))):
        (checkpoint / "offsets" / str(batch)).write_text(
            'v1\n{"batchWatermarkMs":0}\n' + json.dumps(data) + "\n"
        )
    (checkpoint / "commits" / "0").write_text("v1\n{}\n")
    assert held_partitions(checkpoint, INPUT_TOPIC, CHANGELOG) == {0}
    (checkpoint / "commits" / "1").write_text("v1\n{}\n")
    assert held_partitions(checkpoint, INPUT_TOPIC, CHANGELOG) == {0, 1}
    assert read_batch_offsets(checkpoint, 1, INPUT_TOPIC, CHANGELOG).positions[1] == (
        PartitionPosition(0, 0, 2)
    )


def test_warm_up_batch_keeps_every_position_and_reads_nothing(tmp_path: Path) -> None:
    source = reader(tmp_path)
    start = offsets(p0=(120, 55, 7), p1=(40, 0, 7))
    assignment_file.publish(
        Path(source.options.assignment_path), Assignment(INPUT_TOPIC, warm_up=1234)
    )
    end = source.latestOffset(start, source.getDefaultReadLimit())
    assert end != start  # a new offset: Spark runs a batch
    assert end["@warm-up"] == {"token": 1234}
    planned = SourceOffsets.from_dict(end, INPUT_TOPIC, CHANGELOG)
    assert planned.positions == SourceOffsets.from_dict(start, INPUT_TOPIC, CHANGELOG).positions
    assert planned.warm_up == 1234
    assert source.partitions(start, end) == []
    # Asked again with the same warm-up request, nothing changes: no second batch.
    assert source.latestOffset(end, source.getDefaultReadLimit()) == end


def test_warm_up_token_survives_later_plans_so_it_triggers_no_extra_batch() -> None:
    with_token = SourceOffsets(INPUT_TOPIC, CHANGELOG, {}, warm_up=99).to_dict()
    parsed = SourceOffsets.from_dict(with_token, INPUT_TOPIC, CHANGELOG)
    assert parsed.warm_up == 99
    assert "@warm-up" not in SourceOffsets(INPUT_TOPIC, CHANGELOG, {}).to_dict()
