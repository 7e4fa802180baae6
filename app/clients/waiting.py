"""Waiting for a condition: call it until it returns a truthy value or the time is up.

The one wait of the image's processes (the processor, the Jobs, the pair's tools) and of the
developer kit and the tests. `wait_until` fails with a `TimeoutError` that names what was
awaited; `poll_until` answers `None` instead, for callers to whom a timeout is an outcome, not
an error, and who say it in their own words. The condition runs at least once (also with a
timeout of 0) and once more at the deadline.

The standard library only: the tests in tests/kube import it from an environment without
the application's packages.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(
    condition: Callable[[], T | None],
    timeout_s: float,
    *,
    interval_s: float = 0.1,
    progress: Callable[[], object] | None = None,
    progress_every_s: float = 10.0,
) -> T | None:
    """Call `condition` every `interval_s` until it returns a truthy value, and return that
    value; `None` when it has not within `timeout_s`. An exception it raises ends the wait.

    `progress`, for a wait an operator watches, is called after the first call that was not
    yet the answer and then at most every `progress_every_s`: where the wait stands, in a log
    line.
    """
    deadline = time.monotonic() + timeout_s
    next_progress = time.monotonic()
    while True:
        value = condition()
        if value:
            return value
        now = time.monotonic()
        remaining = deadline - now
        if remaining <= 0:
            return None
        if progress is not None and now >= next_progress:
            progress()
            next_progress = now + progress_every_s
        time.sleep(min(interval_s, remaining))


def wait_until(
    condition: Callable[[], T | None],
    timeout_s: float,
    what: str,
    *,
    interval_s: float = 0.1,
    seen: Callable[[], object] | None = None,
) -> T:
    """Call `condition` every `interval_s` until it returns a truthy value, and return that
    value. Otherwise a `TimeoutError` after `timeout_s`, naming `what` (what was awaited) and,
    with `seen`, what it returns: what there was instead, for the failure message."""
    value = poll_until(condition, timeout_s, interval_s=interval_s)
    if value is None:
        raise TimeoutError(f"{what}: not within {timeout_s:g} s{_last_seen(seen)}")
    return value


def _last_seen(seen: Callable[[], object] | None) -> str:
    """`seen()` for the failure message: text as it is (log tails keep their lines), anything
    else as its repr; a failure of `seen` itself must not hide the timeout."""
    if seen is None:
        return ""
    try:
        last = seen()
    except Exception as exc:
        return f"; last seen: unknown ({type(exc).__name__}: {exc})"
    return f"; last seen: {last if isinstance(last, str) else repr(last)}"
