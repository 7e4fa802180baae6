"""The consumer group's description (its state, members and their partitions), asked in a child
process so that a crash in librdkafka's admin client cannot take the instance down.

librdkafka 2.16.0 crashed its process in `describe_consumer_groups` around a coordinator change
(a segfault; an assertion, `eonce->refcnt > 0`, librdkafka#4605). Nothing the member's own
consumer knows says which partitions the *other* members own, and that is what the ring of
standbys (`state_restore.standby_partitions`) and a hand-off instance's readiness with nothing
assigned (`GroupMember.settled_assignment`) need. So the call stays, in a child process: a
crash ends the child, the instance logs it and a new child answers the next request.

One long-lived child (an interpreter with confluent-kafka) rather than one per request: the
group is described every few seconds, and an interpreter start costs a few hundred milliseconds
of a busy core. The child reads its settings as one JSON line on stdin, then answers each
further line with one JSON line on stdout; it ends when stdin closes (the instance ended).
Requests are asynchronous (`request`, then `result` from a polling loop), so the member's
polling thread never waits for the group's coordinator.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO, Any

log = logging.getLogger(__name__)

CLIENT_TIMEOUT_S = 30.0
# A request asks for the topic's metadata, then describes the group: each may take the client
# timeout. A child silent for longer is stuck and is replaced.
REPLY_TIMEOUT_S = 2 * CLIENT_TIMEOUT_S + 10.0
STABLE = "STABLE"


@dataclass(frozen=True)
class DescribedMember:
    """One member as the group's coordinator describes it."""

    member_id: str
    # group.instance.id, else client.id (the processor sets it to its pod name).
    name: str
    partitions: frozenset[int]


@dataclass(frozen=True)
class GroupDescription:
    """The group at one moment, as far as one topic is concerned."""

    state: str  # a `ConsumerGroupState` name: STABLE, PREPARING_REBALANCING, ...
    members: tuple[DescribedMember, ...]
    topic_partitions: int

    def settled(self) -> bool:
        """Whether the group is stable with every partition of the topic owned by one member:
        no partition is between two owners."""
        if self.state != STABLE or self.topic_partitions < 1:
            return False
        owned = sorted(p for m in self.members for p in m.partitions)
        return owned == list(range(self.topic_partitions))

    def settled_without(self, member_id: str) -> bool:
        """Whether the group is settled with `member_id` in it owning nothing: the assignor gave
        this member nothing because there are more members than partitions, not because its
        partitions are still moving."""
        me = [m for m in self.members if m.member_id == member_id]
        return len(me) == 1 and not me[0].partitions and self.settled()

    def to_json(self) -> dict[str, Any]:
        """The child's answer."""
        return {
            "state": self.state,
            "topic_partitions": self.topic_partitions,
            "members": [
                {"member_id": m.member_id, "name": m.name, "partitions": sorted(m.partitions)}
                for m in self.members
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GroupDescription:
        """The child's answer, read back."""
        return cls(
            str(data["state"]),
            tuple(
                DescribedMember(
                    str(m["member_id"]), str(m["name"]), frozenset(int(p) for p in m["partitions"])
                )
                for m in data["members"]
            ),
            int(data["topic_partitions"]),
        )


class GroupDescriber:
    """Describes `group` (for `topic`) in a child process; one request at a time, asynchronous.

    `request(tag)` asks (a request made while one is out is sent once that one is answered, with
    the newest tag); `result()` returns `(tag, description)` for an answer that arrived, else
    None. A child that crashes or hangs is logged, and the next request starts a new one.
    """

    def __init__(self, admin_config: dict[str, str], group: str, topic: str) -> None:
        self._settings = {"admin": admin_config, "group": group, "topic": topic}
        self.group = group
        self._process: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._pending: tuple[int, float] | None = None  # (tag, sent at)
        self._next: int | None = None
        self.crashes = 0

    @property
    def pid(self) -> int | None:
        """The child's pid, while one runs."""
        return self._process.pid if self._process is not None else None

    def request(self, tag: int) -> None:
        """Ask for a description, answered to `result()` with `tag`."""
        if self._pending is not None:
            self._next = tag
            return
        self._send(tag)

    def result(self) -> tuple[int, GroupDescription | str] | None:
        """An answer that arrived since the last call: (its tag, the description, or the
        client's error text); None when there is none yet (or the child ended: logged)."""
        if self._pending is None or self._process is None:
            return None
        tag, sent_at = self._pending
        line = self._read_line()
        if line is None:
            if self._process.poll() is not None:
                self._lost(f"ended with {_exit_reason(self._process.returncode)}")
            elif time.monotonic() - sent_at > REPLY_TIMEOUT_S:
                self._lost(f"gave no answer within {REPLY_TIMEOUT_S:.0f} s")
            return None
        self._pending = None
        if self._next is not None:
            self._send(self._next)
            self._next = None
        data = json.loads(line)
        if "error" in data:
            return tag, str(data["error"])
        return tag, GroupDescription.from_json(data)

    def close(self) -> None:
        """End the child (it ends by itself once its stdin closes)."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # in the middle of a request that waits for Kafka
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def _send(self, tag: int) -> None:
        try:
            process = self._process or self._start()
        except OSError as exc:  # no process to start (out of memory, pids): the next request
            log.warning("group %s: no process to describe it could start: %s", self.group, exc)
            self.close()
            return
        assert process.stdin is not None
        try:
            process.stdin.write(b"describe\n")
            process.stdin.flush()
        except OSError:  # it ended: `result()` says how, once it is reaped
            pass
        self._pending = (tag, time.monotonic())

    def _start(self) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # librdkafka's own lines (an assertion's) go to the instance's log.
            stderr=None,
        )
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps(self._settings).encode() + b"\n")
        process.stdin.flush()
        os.set_blocking(process.stdout.fileno(), False)
        self._process, self._buffer = process, b""
        return process

    def _read_line(self) -> bytes | None:
        assert self._process is not None and self._process.stdout is not None
        while b"\n" not in self._buffer:
            try:
                chunk = os.read(self._process.stdout.fileno(), 65536)
            except BlockingIOError:
                return None
            if not chunk:  # end of file: the child is gone (or going)
                try:
                    self._process.wait(timeout=5)
                except subprocess.TimeoutExpired:  # closed its stdout and lives on: stuck
                    self._process.kill()
                    self._process.wait()
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _lost(self, how: str) -> None:
        process = self._process
        assert process is not None
        self.crashes += 1
        log.warning(
            "group %s: the process describing it (pid %d) %s before answering; the standbys "
            "and readiness keep what they had, and a new process describes the group at the "
            "next request (a crash of librdkafka's describe_consumer_groups stays there)",
            self.group,
            process.pid,
            how,
        )
        if process.poll() is None:
            process.kill()
        self.close()
        self._pending = self._next = None


def _exit_reason(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
        return f"signal {-code}"
    return f"exit code {code}"


# --- the child --------------------------------------------------------------------------------


def _describe(admin: Any, group: str, topic: str) -> GroupDescription:
    metadata = admin.list_topics(topic, timeout=CLIENT_TIMEOUT_S).topics[topic]
    if metadata.error is not None:
        raise RuntimeError(f"topic {topic}: {metadata.error.str()}")
    future = admin.describe_consumer_groups([group], request_timeout=CLIENT_TIMEOUT_S)[group]
    description = future.result(timeout=CLIENT_TIMEOUT_S)
    return GroupDescription(
        description.state.name,
        tuple(
            DescribedMember(
                m.member_id,
                m.group_instance_id or m.client_id,
                frozenset(
                    tp.partition
                    for tp in (m.assignment.topic_partitions if m.assignment else [])
                    if tp.topic == topic
                ),
            )
            for m in description.members
        ),
        len(metadata.partitions),
    )


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> int:
    """The child: settings from the first line, then one description per line asked."""
    from confluent_kafka.admin import AdminClient

    # Ctrl-C in a terminal reaches the whole process group; the instance decides when this ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    first = stdin.readline()
    if not first:
        return 0
    settings = json.loads(first)
    admin = AdminClient(settings["admin"])
    for _ in iter(stdin.readline, b""):
        try:
            answer = _describe(admin, settings["group"], settings["topic"]).to_json()
        except Exception as exc:  # an answer whatever went wrong: silence would look like a hang
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        stdout.write(json.dumps(answer).encode() + b"\n")
        stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.stdin.buffer, sys.stdout.buffer))
