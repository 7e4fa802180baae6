"""The local run's roll waits until the group has caught up, and says so: what it waits for,
for how long, and what to change when the machine cannot keep up; a run made to show the roll
(`--until-rolled`) gives up at its timeout instead of waiting unseen."""

from __future__ import annotations

import pytest

from devkit.local.__main__ import parse_args
from devkit.local.roll import CATCH_UP_HINT_AFTER_S, CatchUpWait, RollFailed

BAR = 2_100  # the bar at 1,000 records/s: two batches, and some


def test_the_wait_ends_when_every_instance_is_ready_and_the_lag_is_at_most_the_bar() -> None:
    wait = CatchUpWait(1000.0, timeout_s=None)
    assert not wait.settled(["page-view-counter-2"], 0, at=0.0)
    assert not wait.settled([], BAR + 1, at=1.0)
    assert wait.settled([], BAR, at=2.0)


def test_the_display_names_what_the_roll_waits_for_and_what_to_change_after_a_minute() -> None:
    wait = CatchUpWait(1000.0, timeout_s=None)
    wait.settled(["app-1"], 0, at=0.0)
    assert wait.describe(at=5.0) == "the roll waits for app-1 not ready (5 s so far)"
    wait.settled([], 8_123, at=10.0)
    early = wait.describe(at=10.0)
    assert "lag at most 2,100 records (about two batches at 1000 records/s), now 8,123" in early
    assert "--rate" not in early  # a minute's patience first: a start has a backlog
    late = wait.describe(at=CATCH_UP_HINT_AFTER_S)
    assert "do not keep up" in late and "a lower --rate or fewer --keys" in late


def test_a_wait_with_a_timeout_fails_naming_what_it_waited_for() -> None:
    wait = CatchUpWait(1000.0, timeout_s=300.0)
    assert not wait.settled([], 9_000, at=0.0)
    assert not wait.settled([], 9_000, at=300.0)
    assert "gives up after 300 s" in wait.describe(at=300.0)
    with pytest.raises(RollFailed, match=r"no roll: waited 300 s for the group's lag .* 9,000\."):
        wait.settled([], 9_000, at=300.5)


def test_a_run_made_to_show_the_roll_gives_up_after_five_minutes_by_default() -> None:
    assert parse_args(["--until-rolled"]).catch_up_timeout == 300.0
    assert parse_args(["--until-rolled", "--catch-up-timeout", "30"]).catch_up_timeout == 30.0
