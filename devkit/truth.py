"""What the output topic must show, worked out by the pipeline's own aggregation from the records
the broker acknowledged, and the output read back, judged against it.

`Truth.add` folds each acknowledged valid record into its key's state, in offset order
(`update(state, fold(None, key, value))`), and notes the output value after it: the sequence
of values an exactly-once processor may publish for the key, one per batch that ends there,
the last one being what the output table must end with. It is the aggregation's own logic, so
what the check proves is the machinery: nothing read twice or lost through restarts,
hand-offs and crashes.

`Truth.observe` walks each key's output records along that sequence. A record matched at
position j covers every record up to j: their latency is the output's timestamp minus their
creation time. A record that matches nowhere ahead of the key's previous match is a duplicate or
a regression, which exactly-once forbids. A value that repeats in the sequence (a set's size
when a user comes back) matches its first position ahead, so a latency can be overstated, never
understated. An output record can be read before the load generator hears that its input was
acknowledged: it waits for the sequence to reach it.

Only what is not yet covered is kept, so a run of hours holds about its lag.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from app.processor.aggregation import Aggregation


@dataclass(frozen=True)
class OutputRecord:
    """One record of the output topic: a key's new output value."""

    partition: int
    offset: int
    timestamp_ms: int
    key: str
    value: bytes


@dataclass(frozen=True)
class Latency:
    """The latency of one input record: from its creation to the first output that covered it."""

    partition: int
    output_ms: int
    seconds: float


@dataclass
class _KeyState:
    state: object = None
    has_state: bool = False
    records: int = 0
    last: bytes | None = None  # the output value after the newest record
    ahead: deque[tuple[bytes, int | None]] = field(default_factory=deque)  # not yet covered
    shown: bytes | None = None  # the value the key's last matched output record showed
    waiting: deque[OutputRecord] = field(default_factory=deque)  # read, not yet matched


class Truth:
    """The expected output per key and the output's judgement (see the module docstring).

    Thread-safe: the load generator's delivery callbacks add, the output's reader observes.
    """

    def __init__(
        self,
        aggregation: Aggregation,
        initial: Mapping[str, bytes] | None = None,
        republished_ok: bool = False,
    ) -> None:
        """`initial`: the keys' changelog values before the load (a reused cluster).
        `republished_ok`: an output record showing again the value the key's previous one
        showed is counted in `republished`, not as a duplicate (an active/standby pair's
        take-over publishes every key once more; a table reader sees no change)."""
        self.aggregation = aggregation
        self.republished_ok = republished_ok
        self.republished = 0
        self._keys: dict[str, _KeyState] = {}
        for key, value in (initial or {}).items():
            state = aggregation.restore(value)
            shown = aggregation.output_value(state)
            self._keys[key] = _KeyState(state, True, last=shown, shown=shown)
        self.latencies: list[Latency] = []
        self.duplicates: list[OutputRecord] = []
        self._lock = threading.Lock()

    def add(self, key: str, value: bytes | None, created_ms: int | None) -> str | None:
        """Fold one acknowledged record (`created_ms` None: not timed); its dead-letter reason
        if it breaks the input contract (then nothing is added)."""
        partial = self.aggregation.fold(None, key.encode("utf-8"), value)
        if isinstance(partial, str):
            return partial
        with self._lock:
            keyed = self._keys.setdefault(key, _KeyState())
            keyed.state = self.aggregation.update(keyed.state if keyed.has_state else None, partial)
            keyed.has_state = True
            keyed.records += 1
            keyed.last = self.aggregation.output_value(keyed.state)
            keyed.ahead.append((keyed.last, created_ms))
            waiting = keyed.waiting
            for i, record in enumerate(waiting):
                if record.value == keyed.last:
                    # Outputs before it that matched nothing can no longer match: they repeat.
                    for _ in range(i):
                        self.duplicates.append(waiting.popleft())
                    self._cover(keyed, waiting.popleft(), len(keyed.ahead) - 1)
                    break
        return None

    def observe(self, record: OutputRecord) -> None:
        """One output record, in offset order per partition."""
        with self._lock:
            keyed = self._keys.setdefault(record.key, _KeyState())
            position = next(
                (i for i, (value, _) in enumerate(keyed.ahead) if value == record.value), None
            )
            if position is None:
                if self.republished_ok and not keyed.waiting and record.value == keyed.shown:
                    self.republished += 1
                    return
                keyed.waiting.append(record)
                return
            # Earlier outputs still waiting were passed by this one: they repeat.
            self.duplicates.extend(keyed.waiting)
            keyed.waiting.clear()
            self._cover(keyed, record, position)

    def _cover(self, keyed: _KeyState, record: OutputRecord, position: int) -> None:
        keyed.shown = record.value
        for _ in range(position + 1):
            _, created_ms = keyed.ahead.popleft()
            if created_ms is not None:
                self.latencies.append(
                    Latency(
                        record.partition,
                        record.timestamp_ms,
                        (record.timestamp_ms - created_ms) / 1000,
                    )
                )

    def expected(self) -> dict[str, bytes]:
        """The output value each key must end with."""
        with self._lock:
            return {k: s.last for k, s in self._keys.items() if s.last is not None}

    def records(self) -> dict[str, int]:
        """Valid records added per key."""
        with self._lock:
            return {k: s.records for k, s in self._keys.items() if s.records}

    def unmatched(self) -> list[OutputRecord]:
        """Output records matched by nothing so far: once the input is all acknowledged and the
        output read to its end, each is a duplicate or a value the aggregation never had."""
        with self._lock:
            return [r for s in self._keys.values() for r in s.waiting]

    def repeated(self) -> int:
        """Output records known to repeat or go back so far."""
        with self._lock:
            return len(self.duplicates)


@dataclass(frozen=True)
class OutputCheck:
    """The output's final values against the truth."""

    produced: int  # valid records
    keys: int  # keys with a value in the output
    missing_keys: tuple[str, ...]  # produced, never in the output
    wrong_keys: tuple[tuple[str, str, str], ...]  # (key, expected, found)
    duplicates: int

    @property
    def ok(self) -> bool:
        """Every key's value exact, no record repeated."""
        return not self.missing_keys and not self.wrong_keys and self.duplicates == 0

    def describe(self) -> str:
        """One line for people."""
        verdict = "OK" if self.ok else "MISMATCH"
        line = (
            f"{verdict}: produced {self.produced} valid records, {self.keys} keys in the "
            f"output, duplicates {self.duplicates}"
        )
        if self.missing_keys:
            line += f", {len(self.missing_keys)} keys never in the output"
        if self.wrong_keys:
            shown = ", ".join(f"{k}: {e} expected, {f} found" for k, e, f in self.wrong_keys[:3])
            line += f", {len(self.wrong_keys)} keys wrong ({shown})"
        return line

    def to_json(self) -> dict[str, object]:
        """The report's `check` entry."""
        return {
            "ok": self.ok,
            "produced": self.produced,
            "keys": self.keys,
            "duplicates": self.duplicates,
            "missing_keys": list(self.missing_keys),
            "wrong_keys": [list(w) for w in self.wrong_keys],
        }


def check_output(truth: Truth, latest: Mapping[str, bytes]) -> OutputCheck:
    """Compare the output's newest value per key (read to its end, the input all
    acknowledged) with the truth; unmatched output records count as duplicates."""
    expected = truth.expected()
    missing = tuple(sorted(k for k in expected if k not in latest))
    wrong = tuple(
        sorted(
            (k, _shown(expected.get(k)), _shown(v))
            for k, v in latest.items()
            if k not in missing and v != expected.get(k)
        )
    )
    return OutputCheck(
        produced=sum(truth.records().values()),
        keys=len(latest),
        missing_keys=missing,
        wrong_keys=wrong,
        duplicates=truth.repeated() + len(truth.unmatched()),
    )


def _shown(value: bytes | None) -> str:
    if value is None:
        return "nothing"
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.hex()
