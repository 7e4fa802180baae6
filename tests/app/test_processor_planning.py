"""The source's planning rules, which are pure functions of the offsets (no broker needed).

A replayed batch must read exactly what the first attempt read, so the ranges are computed
from the batch's start and end offsets alone; these tests pin that contract down.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING

from app.processor import assignment_file
from app.processor.assignment_file import Assignment
from app.processor.kafka_source import (
    INPUT,
    RESTORE,
    SPLIT_RECORDS,
    GroupAssignedReader,
    KafkaRange,
    KafkaRanges,
    SourceOptions,
    fair_share,
    pack_tasks,
)
from app.processor.planned_batch import BatchProgress, Planned, read_planned
from app.processor.source_offsets import (
    EPOCH_KEY,
    FROM_BEGINNING,
    FROM_KEY,
    PartitionPosition,
    SourceOffsets,
    held_partitions,
    read_batch_offsets,
    running_batch,
)
from app.processor.state_restore import CommittedInput, StateCopy, copies_path, write_copies
from contract.processor_keys import DEFAULTS

INPUT_TOPIC = "page-views"
CHANGELOG = "page-view-counter-counts-changelog"


# (input, changelog, epoch[, restore from[, input from]]): PartitionPosition's fields in order.
Position = (
    tuple[int | None, int, int]
    | tuple[int | None, int, int, int]
    | tuple[int | None, int, int, int, int]
)


def offsets(**positions: Position) -> dict:
    """Spark's form of the offsets; positions as p<N>=`Position`."""
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
            checkpoint_path=str(tmp_path / "checkpoint"),
            max_records_per_batch=1000,
            read_tasks=2,
            consumer_config={"bootstrap.servers": "127.0.0.1:9", "group.id": "g"},
            task_timeout_ms=1000,
            aggregation_class=DEFAULTS["aggregation.class"],
        )
    )


def test_offsets_serialise_in_numeric_partition_order() -> None:
    data = offsets(p10=(5, 1, 7), p2=(3, 0, 7))
    assert json.dumps(data) == (
        '{"page-views": {"2": 3, "10": 5}, '
        '"page-view-counter-counts-changelog": {"2": 0, "10": 1}, '
        f'"{EPOCH_KEY}": {{"2": 7, "10": 7}}, "{FROM_KEY}": {{}}}}'
    )
    assert SourceOffsets.from_dict(data, INPUT_TOPIC, CHANGELOG).to_dict() == data


def test_offsets_written_before_explicit_restores_restore_new_or_re_epoched_partitions() -> None:
    previous = SourceOffsets.from_dict(
        offsets(p0=(10, 4, 1), p1=(20, 0, 1)), INPUT_TOPIC, CHANGELOG
    )
    legacy = offsets(p0=(15, 4, 1), p1=(20, 9, 2), p2=(0, 3, 2))
    del legacy[FROM_KEY]
    current = SourceOffsets.from_dict(legacy, INPUT_TOPIC, CHANGELOG)
    assert current.with_legacy_restores(previous).restoring() == {1, 2}
    empty = SourceOffsets(INPUT_TOPIC, CHANGELOG)
    assert current.with_legacy_restores(empty).restoring() == {0, 1, 2}


def test_ranges_come_from_start_and_end_alone(tmp_path: Path) -> None:
    start = offsets(p0=(100, 4, 1))
    end = offsets(
        p0=(100 + SPLIT_RECORDS + 5, 4, 1),
        p1=(7, 30, 2, FROM_BEGINNING, 2),  # gained: its whole changelog, input from 2
        p2=(None, 50, 3, 44),  # a standby: its changelog's new records
        p3=(None, 60, 3, 60),  # a standby with nothing new
    )
    ranges = reader(tmp_path).partitions(start, end)
    # Input split at SPLIT_RECORDS; the pieces packed into two tasks (the cores) of about equal
    # size, each in topic, partition and offset order.
    assert ranges == [
        KafkaRanges((KafkaRange(INPUT_TOPIC, 0, 100, 100 + SPLIT_RECORDS, INPUT, 1),)),
        KafkaRanges(
            (
                KafkaRange(CHANGELOG, 1, OFFSET_BEGINNING, 30, RESTORE, 2),
                KafkaRange(CHANGELOG, 2, 44, 50, RESTORE, 3),
                KafkaRange(INPUT_TOPIC, 0, 100 + SPLIT_RECORDS, 100 + SPLIT_RECORDS + 5, INPUT, 1),
                KafkaRange(INPUT_TOPIC, 1, 2, 7, INPUT, 2),
            )
        ),
    ]
    assert reader(tmp_path).partitions(start, end) == ranges  # a replay plans the same


def test_a_caught_up_batch_is_one_task_per_core_and_a_backlog_is_split_to_keep_them_busy() -> None:
    small = [KafkaRange(INPUT_TOPIC, p, 0, 50 + p, INPUT, 1) for p in range(6)]
    tasks = pack_tasks(small, 2)
    assert len(tasks) == 2
    assert sorted(r.partition for t in tasks for r in t.ranges) == list(range(6))  # each once
    sizes = [sum(r.size for r in t.ranges) for t in tasks]
    assert max(sizes) - min(sizes) <= max(r.size for r in small)
    assert pack_tasks(small[:1], 2) == [KafkaRanges((small[0],))]  # never an empty task
    backlog = [
        KafkaRange(INPUT_TOPIC, p, lo, lo + SPLIT_RECORDS, INPUT, 1)
        for p in range(3)
        for lo in range(0, 4 * SPLIT_RECORDS, SPLIT_RECORDS)
    ]
    tasks = pack_tasks(backlog, 2)
    assert len(tasks) == len(backlog)  # as many as SPLIT_RECORDS asks for, more than the cores
    # Whole waves: six partitions of 5/6 SPLIT_RECORDS each are six tasks on two cores, not five.
    six = [KafkaRange(INPUT_TOPIC, p, 0, SPLIT_RECORDS * 5 // 6, INPUT, 1) for p in range(6)]
    assert len(pack_tasks(six, 2)) == 6
    assert pack_tasks(list(reversed(backlog)), 2) == tasks  # a replay plans the same


def test_an_empty_changelog_restores_nothing_and_an_idle_partition_reads_nothing(
    tmp_path: Path,
) -> None:
    assert reader(tmp_path).partitions({}, offsets(p0=(0, 0, 1, FROM_BEGINNING))) == []
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


def planner(
    tmp_path: Path, ends: dict[tuple[str, int], int], committed: int | CommittedInput = 0
) -> GroupAssignedReader:
    """A reader whose Kafka answers are `ends` (topic, partition -> last stable offset) and the
    group's `committed` input."""
    source = reader(tmp_path)
    answer = committed if isinstance(committed, CommittedInput) else CommittedInput(committed)
    source._end = lambda topic, partition: ends[(topic, partition)]  # type: ignore[method-assign]
    source._committed_input = lambda partition: answer  # type: ignore[method-assign]
    return source


def plan(source: GroupAssignedReader, start: dict, assignment: Assignment) -> SourceOffsets:
    assignment_file.publish(Path(source.options.assignment_path), assignment)
    end = source.latestOffset(start, source.getDefaultReadLimit())
    return SourceOffsets.from_dict(end, INPUT_TOPIC, CHANGELOG)


def test_warm_up_batch_reads_no_input_and_catches_up_the_copies(tmp_path: Path) -> None:
    source = planner(tmp_path, {(CHANGELOG, 0): 70, (CHANGELOG, 1): 9})
    write_copies(copies_path(tmp_path / "checkpoint"), {0: StateCopy(7, 55)})
    start = offsets(p0=(120, 55, 7), p1=(40, 0, 7))
    end = source.latestOffset(start, source.getDefaultReadLimit())
    assert end == start  # no assignment published yet: nothing planned
    planned = plan(source, start, Assignment(INPUT_TOPIC, warm_up=1234, standby=(0,)))
    assert planned.warm_up == 1234
    # The copy of partition 0 reads its changelog after offset 55; nothing else is kept.
    assert planned.positions == {0: PartitionPosition(None, 70, 7, restore_from=55)}
    assert source.partitions(start, planned.to_dict()) == [
        KafkaRanges((KafkaRange(CHANGELOG, 0, 55, 70, RESTORE, 7),))
    ]
    # Asked again with the same warm-up request and nothing new: no second batch.
    again = planned.to_dict()
    assert source.latestOffset(again, source.getDefaultReadLimit()) == again


def test_a_gained_partition_with_a_copy_reads_only_the_changelog_after_it(tmp_path: Path) -> None:
    source = planner(tmp_path, {(CHANGELOG, 1): 900, (INPUT_TOPIC, 1): 4100}, committed=4000)
    start = offsets(p1=(None, 850, 5))  # a standby up to offset 850
    gained = plan(source, start, Assignment(INPUT_TOPIC, (1,), generation=1))
    # The changelog after the copy, and in the same batch the input from the committed offset.
    assert gained.positions == {
        1: PartitionPosition(4100, 900, 5, restore_from=850, input_from=4000)
    }
    assert gained.restoring() == {1}
    assert source.partitions(start, gained.to_dict()) == [
        KafkaRanges((KafkaRange(INPUT_TOPIC, 1, 4000, 4100, INPUT, 5),)),
        KafkaRanges((KafkaRange(CHANGELOG, 1, 850, 900, RESTORE, 5),)),
    ]
    # The next batch goes on from where this one ended.
    assert SourceOffsets.from_dict(gained.settled().to_dict(), INPUT_TOPIC, CHANGELOG).input_ranges(
        gained
    ) == {1: (4100, 4100)}


def test_a_gained_partition_reads_its_changelog_up_to_where_the_committing_transaction_ended(
    tmp_path: Path,
) -> None:
    # The previous owner's last transaction committed input offset 4000 with its changelog
    # records ending at 905; that marker reaches the changelog after the planner first asks.
    source = planner(tmp_path, {}, CommittedInput(4000, changelog_end=905))
    asked: list[str] = []
    stable_offsets = iter([900, 900, 905])

    def committed(partition: int) -> CommittedInput:
        asked.append("committed")
        return CommittedInput(4000, changelog_end=905)

    def end(topic: str, partition: int) -> int:
        asked.append(topic)
        return next(stable_offsets) if topic == CHANGELOG else 4100

    source._committed_input = committed  # type: ignore[method-assign]
    source._end = end  # type: ignore[method-assign]
    gained = plan(source, offsets(p1=(None, 850, 5)), Assignment(INPUT_TOPIC, (1,), generation=1))
    # Not 900: the input after 4000 would then be counted on a state without that batch.
    assert gained.positions == {
        1: PartitionPosition(4100, 905, 5, restore_from=850, input_from=4000)
    }
    # The committed input first: a changelog end read before it may predate the transaction.
    assert asked == ["committed", CHANGELOG, CHANGELOG, CHANGELOG, INPUT_TOPIC]


def test_a_changelog_that_never_reaches_the_committed_transaction_fails_the_plan_by_name(
    tmp_path: Path,
) -> None:
    source = planner(tmp_path, {(CHANGELOG, 1): 900}, CommittedInput(4000, changelog_end=905))
    with pytest.raises(TimeoutError, match=rf"{CHANGELOG}-1: the last stable offset is 900 .*905"):
        plan(source, {}, Assignment(INPUT_TOPIC, (1,), generation=1))


def test_a_gained_partition_without_a_copy_restores_from_the_beginning(tmp_path: Path) -> None:
    source = planner(tmp_path, {(CHANGELOG, 2): 300, (INPUT_TOPIC, 2): 17}, committed=17)
    gained = plan(source, {}, Assignment(INPUT_TOPIC, (2,), generation=1))
    position = gained.positions[2]
    assert (position.input_from, position.input_offset, position.changelog_offset) == (17, 17, 300)
    assert position.restore_from == FROM_BEGINNING
    assert position.restore_epoch > 0  # a new epoch: rows of any earlier copy are stale


def test_a_revoked_partition_becomes_a_standby_from_its_copy(tmp_path: Path) -> None:
    source = planner(tmp_path, {(CHANGELOG, 0): 95})
    write_copies(copies_path(tmp_path / "checkpoint"), {0: StateCopy(3, 80)})
    start = offsets(p0=(500, 10, 3))  # active; its last written changelog record was at 79
    planned = plan(source, start, Assignment(INPUT_TOPIC, (), generation=2, standby=(0,)))
    assert planned.positions == {0: PartitionPosition(None, 95, 3, restore_from=80)}


def test_a_batch_runs_from_its_planning_until_spark_marks_it_done(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    assert running_batch(checkpoint) is None
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1\n{}\n{}\n")
    assert running_batch(checkpoint) == 0
    (checkpoint / "commits").mkdir()
    (checkpoint / "commits" / "0").write_text("v1\n{}\n")
    assert running_batch(checkpoint) is None
    (checkpoint / "offsets" / "1").write_text("v1\n{}\n{}\n")
    assert running_batch(checkpoint) == 1


def test_each_planning_step_records_whether_it_planned_a_batch_for_a_revocation_to_wait_on(
    tmp_path: Path,
) -> None:
    source = planner(tmp_path, {(CHANGELOG, 2): 300, (INPUT_TOPIC, 2): 17}, committed=17)
    checkpoint = tmp_path / "checkpoint"
    planned = plan(source, {}, Assignment(INPUT_TOPIC, (2,), generation=1)).to_dict()
    assert read_planned(checkpoint) == Planned(batch=True, after=-1)
    assert BatchProgress(checkpoint).unfinished(10) == 0  # not in Spark's offset log yet
    # Asked again with nothing new: no batch, and nothing for a revocation to wait for.
    assert source.latestOffset(planned, source.getDefaultReadLimit()) == planned
    assert read_planned(checkpoint) == Planned(batch=False, after=-1)


def test_warm_up_token_survives_later_plans_so_it_triggers_no_extra_batch() -> None:
    with_token = SourceOffsets(INPUT_TOPIC, CHANGELOG, {}, warm_up=99).to_dict()
    parsed = SourceOffsets.from_dict(with_token, INPUT_TOPIC, CHANGELOG)
    assert parsed.warm_up == 99
    assert "@warm-up" not in SourceOffsets(INPUT_TOPIC, CHANGELOG, {}).to_dict()
