"""The restore and standby rules: who keeps which copy, and what the copies file records."""

from __future__ import annotations

from pathlib import Path

from app.processor.source_offsets import FROM_BEGINNING, PartitionPosition
from app.processor.state_restore import (
    Member,
    StateCopy,
    changelog_end_of,
    commit_metadata,
    read_copies,
    record_batch,
    standby_partitions,
    warm_up_partitions,
    write_copies,
)


def members(**owned: tuple[int, ...]) -> list[Member]:
    return [Member(name, frozenset(parts)) for name, parts in owned.items()]


def test_each_partition_has_one_standby_on_the_next_member_of_the_ring() -> None:
    group = members(pod_2=(4, 5), pod_0=(0, 1), pod_1=(2, 3))
    kept = {m.name: standby_partitions(group, m.name, 1, 6) for m in group}
    assert kept == {"pod_0": {4, 5}, "pod_1": {0, 1}, "pod_2": {2, 3}}


def test_more_standbys_than_other_members_keep_every_partition_not_owned() -> None:
    group = members(a=(0, 1, 2), b=(3, 4, 5))
    assert standby_partitions(group, "a", 1, 6) == {3, 4, 5}
    assert standby_partitions(group, "a", 5, 6) == {3, 4, 5}
    group3 = members(a=(0, 1), b=(2, 3), c=(4, 5))
    assert standby_partitions(group3, "a", 2, 6) == {2, 3, 4, 5}


def test_copies_on_every_other_member_include_a_partition_between_two_owners() -> None:
    # Mid-rebalance: partition 3 has left b and not reached c yet.
    moving = members(a=(0, 1), b=(2,), c=(4, 5))
    assert standby_partitions(moving, "a", 2, 6) == {2, 3, 4, 5}
    # One standby each: the ring's copies only (3 is nobody's now, so nobody's standby).
    assert standby_partitions(moving, "c", 1, 6) == {2}


def test_no_standbys_without_the_setting_a_peer_or_membership() -> None:
    assert standby_partitions(members(a=(0, 1)), "a", 1, 2) == set()
    assert standby_partitions(members(a=(0,), b=(1,)), "a", 0, 2) == set()
    assert standby_partitions(members(a=(0,), b=(1,)), "c", 1, 2) == set()


def test_a_newcomer_with_a_copy_due_on_every_member_warms_every_partition() -> None:
    # A hand-off restart (the others took its partitions) and a scale-out: whatever the
    # assignor hands over, a warm copy of it is here first.
    assert warm_up_partitions(members(a=(0, 1, 2), b=(3, 4, 5)), "c", 2, 6) == set(range(6))
    assert warm_up_partitions(members(a=(0, 1), b=(2, 3), c=(4, 5)), "d", 3, 6) == set(range(6))
    # Its own former membership (a crash, not yet expired) is not one of the others.
    assert warm_up_partitions(members(a=(0, 1, 2), c=(3, 4, 5)), "c", 1, 6) == set(range(6))


def test_a_newcomer_with_fewer_copies_warms_its_ring_share_and_what_can_move_to_it() -> None:
    # 3 members of 2 partitions each, a fourth joins with 1 standby: its share is 1, so each
    # member's 2 can move; 4 members of 3 + a fifth: only the members above 2 give one up.
    group = members(a=(0, 1), b=(2, 3), c=(4, 5))
    assert warm_up_partitions(group, "d", 1, 6) == set(range(6))
    big = members(a=(0, 1, 2), b=(3, 4), c=(5, 6), e=(7, 8, 9))
    assert warm_up_partitions(big, "d", 1, 10) == {0, 1, 2, 5, 6, 7, 8, 9}  # c's: the ring's


def test_no_warm_up_copies_without_standbys_or_partitions() -> None:
    assert warm_up_partitions(members(a=(0, 1)), "b", 0, 2) == set()
    assert warm_up_partitions([], "a", 1, 0) == set()
    assert warm_up_partitions([], "a", 1, 4) == {0, 1, 2, 3}  # the first member of a new group


def test_a_batch_records_reads_and_writes_and_forgets_unwritten_state() -> None:
    before = {0: StateCopy(7, 100), 1: StateCopy(7, 50), 2: StateCopy(3, 10)}
    positions = {
        0: PartitionPosition(900, 5, 7),  # active, written below
        1: PartitionPosition(400, 5, 7),  # active, revoked before its results were written
        3: PartitionPosition(None, 77, 8, restore_from=FROM_BEGINNING),  # a new standby
    }
    after = record_batch(before, positions, written={0: 131}, unwritten=[1])
    assert after == {0: StateCopy(7, 131), 2: StateCopy(3, 10), 3: StateCopy(8, 77)}


def test_the_copies_file_round_trips_and_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint" / "state-copies.json"
    assert read_copies(path) == {}
    write_copies(path, {3: StateCopy(1767225600000, 42)})
    assert read_copies(path) == {3: StateCopy(1767225600000, 42)}
    assert [p.name for p in path.parent.iterdir()] == ["state-copies.json"]


def test_commit_metadata_carries_the_changelog_end_and_anything_else_reads_as_unknown() -> None:
    assert changelog_end_of(commit_metadata(905)) == 905
    for other in (None, "", "not json", "[1]", '{"changelog_end": -1}', '{"changelog_end": "9"}'):
        assert changelog_end_of(other) is None
