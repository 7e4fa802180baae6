"""A client call bounded by a deadline of our own, for the librdkafka calls that outlive theirs.

`send_offsets_to_transaction` ignores its timeout while the group's coordinator is lost: its
request waits for that broker to come back (confluentinc/librdkafka#5456 and #5511, open in
librdkafka 2.16). Seen here when a broker that was a group's coordinator died: an instance stopped
writing until the broker came back, which for a lost node can be never. The call runs on a helper
thread instead; past the deadline the caller gets `CallAbandoned` and must drop the client (it is
mid-call: another call on it would wait behind the first or conflict with it), and the thread is
left to end whenever the call does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class CallAbandoned(TimeoutError):
    """The call did not return within the deadline; it still runs, on its own thread."""


def call_with_deadline(call: Callable[[], T], deadline_s: float, what: str) -> T:
    """`call()`'s result or exception, or `CallAbandoned` after `deadline_s` (`what` names it)."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed to the caller, whatever it is
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"bounded {what}", daemon=True)
    thread.start()
    thread.join(deadline_s)
    if thread.is_alive():
        raise CallAbandoned(f"{what}: no answer within {deadline_s:g} s")
    if failure:
        raise failure[0]
    return outcome[0]
