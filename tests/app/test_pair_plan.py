"""The pair's per-batch decision (`app.processor.pair.plan`): who publishes, when a partition is
released, when and how it is taken over."""

from __future__ import annotations

import json

from app.clients.pair_control import ACTIVE_KEY, Active, ControlView, released_key, taken_key
from app.processor.pair import plan


def _view(active: Active | None = None, **records: dict) -> ControlView:
    view = ControlView()
    if active is not None:
        view.apply(ACTIVE_KEY.encode(), active.to_json())
    for key, value in records.items():
        view.apply(key.replace("__", "/").encode(), json.dumps(value).encode())
    return view


def test_side_a_publishes_and_side_b_stays_idle_before_any_switch() -> None:
    view = _view()
    assert view.active() == Active("a", 0)
    a = plan(view, "a", {0: (10, 20)}, set())[0]
    b = plan(view, "b", {0: (10, 20)}, set())[0]
    assert (a.publish, a.snapshot, a.control) == (True, False, ())
    assert (b.publish, b.control) == (False, ())


def test_the_side_switched_off_releases_each_partition_once_at_its_batch_start() -> None:
    view = _view(Active("b", 1))
    released = plan(view, "a", {0: (100, 130), 1: (7, 9)}, set())
    assert not released[0].publish
    assert released[0].control == ((released_key(1, 0), b'{"side": "a", "offset": 100}'),)
    assert released[1].control == ((released_key(1, 1), b'{"side": "a", "offset": 7}'),)
    view.apply(released_key(1, 0).encode(), json.dumps({"side": "a", "offset": 100}).encode())
    again = plan(view, "a", {0: (130, 150)}, set())[0]
    assert (again.publish, again.control) == (False, ())


def test_the_side_switched_on_waits_for_the_release_then_for_its_own_input() -> None:
    waiting = plan(_view(Active("b", 1)), "b", {0: (90, 120)}, set())[0]
    assert (waiting.publish, waiting.control) == (False, ())
    assert "release" in waiting.why

    released = _view(Active("b", 1), released__1__0={"side": "a", "offset": 100})
    behind = plan(released, "b", {0: (90, 120)}, set())[0]
    assert not behind.publish and "100" in behind.why

    taking = plan(released, "b", {0: (100, 120)}, set())[0]
    assert (taking.publish, taking.snapshot, taking.dead_letters) == (True, True, None)
    assert taking.control == ((taken_key(1, 0), b'{"side": "b", "offset": 100}'),)

    # Past the release: the input in between was published by nobody, its dead letters too.
    past = plan(released, "b", {0: (140, 150)}, set())[0]
    assert (past.publish, past.snapshot, past.dead_letters) == (True, True, (100, 140))


def test_a_partition_taken_over_is_published_without_another_snapshot() -> None:
    view = _view(
        Active("b", 1),
        released__1__0={"side": "a", "offset": 100},
        taken__1__0={"side": "b", "offset": 105},
    )
    after = plan(view, "b", {0: (120, 130)}, set())[0]
    assert (after.publish, after.snapshot, after.control) == (True, False, ())
    # Before its own take-over record is back from the broker, the instance remembers it.
    mine = plan(_view(Active("b", 1)), "b", {0: (120, 130)}, {(1, 0)})[0]
    assert (mine.publish, mine.snapshot) == (True, False)


def test_a_forced_switch_takes_over_from_the_releases_the_switch_command_wrote() -> None:
    # The other side is down: until the command's releases are there, nothing is published.
    waiting = plan(_view(Active("b", 2, forced=True)), "b", {3: (50, 60)}, set())[3]
    assert (waiting.publish, waiting.control) == (False, ())
    view = _view(Active("b", 2, forced=True), released__2__3={"side": "a", "offset": 48})
    forced = plan(view, "b", {3: (50, 60)}, set())[3]
    assert (forced.publish, forced.snapshot, forced.dead_letters) == (True, True, (48, 50))
    assert forced.control == ((taken_key(2, 3), b'{"side": "b", "offset": 50}'),)
    assert "forced" in forced.why


def test_a_switch_back_needs_a_new_release_from_the_new_epoch() -> None:
    view = _view(
        Active("a", 2),
        released__1__0={"side": "a", "offset": 100},
        taken__1__0={"side": "b", "offset": 100},
    )
    a = plan(view, "a", {0: (200, 210)}, set())[0]
    assert not a.publish and "release" in a.why
    b = plan(view, "b", {0: (205, 215)}, {(1, 0)})[0]
    assert b.control == ((released_key(2, 0), b'{"side": "b", "offset": 205}'),)


def test_the_control_view_ignores_records_it_cannot_read_and_honours_tombstones() -> None:
    view = _view(Active("b", 1))
    view.apply(b"released/1/0", b"not json")
    assert view.released(1, 0) is None
    view.apply(ACTIVE_KEY.encode(), None)
    assert view.active() == Active("a", 0)
