"""Which copies a member keeps as its group's descriptions come in, mid-rebalance and settled."""

from __future__ import annotations

from pathlib import Path

from app.processor import assignment_file
from app.processor.group_describer import STABLE, DescribedMember, GroupDescription
from app.processor.group_member import GroupMember
from app.processor.metrics import ProcessorMetrics

TOPIC = "page-views"


def described(state: str = STABLE, **owned: tuple[int, ...]) -> GroupDescription:
    members = tuple(
        DescribedMember(f"id-{name}", name, frozenset(parts)) for name, parts in owned.items()
    )
    return GroupDescription(state, members, topic_partitions=6)


def member_c(tmp_path: Path, replicas: int) -> GroupMember:
    """Member "c", not started: only its descriptions' handling is exercised."""
    config = {"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "client.id": "c"}
    return GroupMember(config, TOPIC, tmp_path / "assignment.json", ProcessorMetrics(), replicas)


def refresh(member: GroupMember, description: GroupDescription) -> None:
    """Hand the member a description, as its polling thread does."""
    member._refresh_standbys(description, description.settled())


def published_standby(tmp_path: Path) -> tuple[int, ...]:
    published = assignment_file.read(tmp_path / "assignment.json")
    assert published is not None
    return published.standby


def test_a_group_is_settled_only_stable_with_every_partition_owned_once() -> None:
    assert described(a=(0, 1), b=(2, 3), c=(4, 5)).settled()
    assert not described(a=(0, 1), b=(2,), c=(4, 5)).settled()  # 3 is between two owners
    assert not described(a=(0, 1, 3), b=(2, 3), c=(4, 5)).settled()
    assert not described("PREPARING_REBALANCING", a=(0, 1), b=(2, 3), c=(4, 5)).settled()
    assert described(a=(0, 1, 2), b=(3, 4, 5), c=()).settled_without("id-c")
    assert not described(a=(0, 1, 2), b=(3, 4), c=()).settled_without("id-c")


def test_a_copy_is_kept_while_its_partition_moves_and_let_go_once_the_group_settles(
    tmp_path: Path,
) -> None:
    member = member_c(tmp_path, replicas=1)
    refresh(member, described(a=(0, 1), b=(2, 3), c=(4, 5)))
    assert published_standby(tmp_path) == (2, 3)  # b's, the member before c in the ring
    # Partition 3 leaves b for a: nobody owns it in this description, c keeps its copy.
    refresh(member, described(a=(0, 1), b=(2,), c=(4, 5)))
    assert published_standby(tmp_path) == (2, 3)
    refresh(member, described(a=(0, 1, 3), b=(2,), c=(4, 5)))
    assert published_standby(tmp_path) == (2,)


def test_copies_on_every_other_member_follow_a_moving_partition_at_once(tmp_path: Path) -> None:
    member = member_c(tmp_path, replicas=2)
    refresh(member, described(a=(0, 1), b=(2,), c=(4, 5)))
    assert published_standby(tmp_path) == (0, 1, 2, 3)
