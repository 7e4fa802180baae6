"""The load generator: a pipeline's input at a steady rate, with a Zipf-like skew over the keys.

    python -m devkit.loadgen --bootstrap-servers HOST:PORT --topic page-views --rate 500 \\
        --keys 100 --skew 1.1 [--count N | --duration S] [--malformed-ratio 0.0] \\
        [--aggregation-class module.Class] [--summary-json FILE] [--command-config FILE]

The input sample written beside the pipeline's aggregation (`aggregation.class`, the processor's
default unless named; `app.processor.input_sample`) makes the records: `key_name` the keys,
`generate_value` the values. Each record's Kafka timestamp (event
time) is its creation time. A `--malformed-ratio` share of the records breaks the input contract
on purpose (the sample's `malformed_values`, rotating through the dead-letter reasons), so
the dead-letter path gets exercised.

The rate is a token bucket refilled continuously (capacity: 10 ms of tokens), so the load is
steady rather than one burst per second. The producer is idempotent (`acks=all`), so each record
is written exactly once and in order per partition: every acknowledged record goes to the run's
`Truth` (`devkit/truth.py`), which works out the output the processor must publish.

Importable: `LoadGenerator(settings, producer_config).run(stop)` returns a `ProducedSummary`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import random
import select
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from app.admin.reconcile import librdkafka_logger
from app.clients import client_properties
from app.processor.aggregation import Aggregation, load_aggregation
from app.processor.input_sample import input_sample_for
from contract.processor_keys import DEFAULTS
from contract.topic_specs import PipelineNames
from devkit.truth import Truth

log = logging.getLogger("devkit.loadgen")

# How many tokens the bucket holds: half a second's worth (at least one). A late wake-up (a busy
# core, another thread holding the GIL) then sends what it owes instead of losing it (a bucket of
# 10 ms fell visibly short of the asked rate on a busy machine); a longer stall still loses what
# is beyond half a second, so a resumed run never bursts more than that.
BUCKET_SECONDS = 0.5
PROGRESS_INTERVAL_S = 5.0
FLUSH_TIMEOUT_S = 60.0
# Upstream producers batch (`linger.ms`). librdkafka's 5 ms default sends about one request per
# record and partition: into a replication-factor-3 topic that costs local brokers several times
# the CPU that batched requests do, and the processor beside them then lacks it. A view's
# creation time is taken before the wait, so the latencies measured include it.
LINGER_MS = 50
DEFAULT_AGGREGATION = DEFAULTS["aggregation.class"]

EXIT_OK = 0
EXIT_FAILED = 1


def zipf_weights(keys: int, skew: float) -> list[float]:
    """Weight of key i: 1 / (i + 1) ** skew (skew 0: uniform; about 1: web traffic)."""
    return [1.0 / (i + 1) ** skew for i in range(keys)]


@dataclass(frozen=True)
class LoadSettings:
    """What to produce. `count` and `duration_s` both None: until stopped."""

    topic: str = PipelineNames().input_topic
    rate: float = 500.0
    keys: int = 100
    skew: float = 1.1
    count: int | None = None
    duration_s: float | None = None
    malformed_ratio: float = 0.0
    seed: int | None = None
    # Hand every acknowledged valid record's creation time to the truth (latency measurements).
    record_timestamps: bool = False

    def __post_init__(self) -> None:
        problems = []
        if not self.topic:
            problems.append("topic must not be empty")
        if not self.rate > 0:
            problems.append(f"rate={self.rate}: must be > 0 records per second")
        if self.keys < 1:
            problems.append(f"keys={self.keys}: must be >= 1")
        if self.skew < 0:
            problems.append(f"skew={self.skew}: must be >= 0 (0 is uniform)")
        if self.count is not None and self.count < 0:
            problems.append(f"count={self.count}: must be >= 0")
        if self.duration_s is not None and not self.duration_s > 0:
            problems.append(f"duration={self.duration_s}: must be > 0 seconds")
        if self.count is not None and self.duration_s is not None:
            problems.append("give count or duration, not both")
        if not 0.0 <= self.malformed_ratio <= 1.0:
            problems.append(f"malformed_ratio={self.malformed_ratio}: must be in 0.0..1.0")
        if problems:
            raise ValueError("invalid load generator settings: " + "; ".join(problems))


@dataclass
class ProducedSummary:
    """What the broker acknowledged; `truth` holds what the output must show."""

    topic: str
    truth: Truth
    # This generator's acknowledged records: the truth may be shared with the run's other loads
    # (a backlog, then a timed load), so its folds are no count of this one's.
    valid: int = 0
    malformed: Counter[str] = field(default_factory=Counter)  # per dead-letter reason
    failed: int = 0
    first_error: str | None = None
    elapsed_s: float = 0.0  # producing, without the final wait for acknowledgements

    @property
    def per_key(self) -> Counter[str]:
        """Valid records acknowledged per key (what the truth folded)."""
        return Counter(self.truth.records())

    @property
    def total(self) -> int:
        """Records acknowledged, valid or not."""
        return self.valid + sum(self.malformed.values())

    def to_json(self) -> dict[str, Any]:
        """The summary file's content."""
        expected = self.truth.expected()
        return {
            "topic": self.topic,
            "produced": self.total,
            "valid": self.valid,
            "malformed": dict(sorted(self.malformed.items())),
            "failed": self.failed,
            "first_error": self.first_error,
            "elapsed_s": round(self.elapsed_s, 3),
            "rate": round(self.total / self.elapsed_s, 1) if self.elapsed_s else 0.0,
            "per_key": dict(sorted(self.per_key.items())),
            # What the output must end with per key (after any earlier run's records).
            "expected": {k: v.decode("utf-8", "replace") for k, v in sorted(expected.items())},
        }


class TokenBucket:
    """`rate` tokens per second, at most `capacity` saved up."""

    def __init__(self, rate: float, capacity: float, clock: Callable[[], float]) -> None:
        self.rate = rate
        self.capacity = capacity
        self._clock = clock
        self._tokens = 0.0
        self._last = clock()

    def take(self) -> int:
        """Whole tokens available now (removed from the bucket)."""
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
        self._last = now
        whole = int(self._tokens)
        self._tokens -= whole
        return whole

    def wait_s(self) -> float:
        """Time until the next whole token."""
        return max(0.0, (1.0 - self._tokens) / self.rate)


class LoadGenerator:
    """Produces a pipeline's input per `LoadSettings` (see the module docstring).

    `truth`: the run's, shared with the output's reader and with other generators of the run
    (a backlog, then a timed load); by default a new one for the default aggregation.
    """

    def __init__(
        self,
        settings: LoadSettings,
        producer_config: Mapping[str, str],
        progress: Callable[[str], None] | None = None,
        truth: Truth | None = None,
    ) -> None:
        self.settings = settings
        truth = truth or Truth(load_aggregation(DEFAULT_AGGREGATION))
        self.aggregation: Aggregation = truth.aggregation
        self.sample = input_sample_for(self.aggregation)
        self.summary = ProducedSummary(settings.topic, truth)
        self._producer = Producer(
            {
                **producer_config,
                "enable.idempotence": "true",
                "acks": "all",
                "error_cb": self._on_error,
                "logger": librdkafka_logger(),
            }
        )
        self._random = random.Random(settings.seed)
        self._keys = [self.sample.key_name(i) for i in range(settings.keys)]
        self._cumulative = list(itertools.accumulate(zipf_weights(settings.keys, settings.skew)))
        self._malformed_kinds = itertools.cycle(self._malformed_reasons())
        self._progress = progress
        self._sent = 0
        self._lock = threading.Lock()
        self._fatal = threading.Event()

    @property
    def sent(self) -> int:
        """Records handed to the producer so far."""
        return self._sent

    def run(self, stop: threading.Event | None = None) -> ProducedSummary:
        """Produce until the count or duration is reached or `stop` is set; wait for every
        acknowledgement; the summary."""
        stop = stop or threading.Event()
        settings = self.settings
        bucket = TokenBucket(
            settings.rate, max(1.0, settings.rate * BUCKET_SECONDS), time.monotonic
        )
        started = time.monotonic()
        deadline = started + settings.duration_s if settings.duration_s else None
        next_progress = started + PROGRESS_INTERVAL_S
        while not stop.is_set() and not self._fatal.is_set():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            if settings.count is not None and self._sent >= settings.count:
                break
            tokens = bucket.take()
            if settings.count is not None:
                tokens = min(tokens, settings.count - self._sent)
            for _ in range(tokens):
                self._produce_one()
            self._producer.poll(0)
            if now >= next_progress:
                next_progress += PROGRESS_INTERVAL_S
                self._report(now - started)
            if not tokens:
                stop.wait(bucket.wait_s())
        producing_s = time.monotonic() - started
        remaining = self._producer.flush(FLUSH_TIMEOUT_S)
        if remaining:
            with self._lock:
                self.summary.failed += remaining
                self.summary.first_error = self.summary.first_error or (
                    f"{remaining} records not acknowledged within {FLUSH_TIMEOUT_S:g} s"
                )
        self.summary.elapsed_s = producing_s
        self._report(producing_s)
        return self.summary

    def _malformed_reasons(self) -> list[str]:
        """The reasons `malformed_values` names, each checked against the aggregation's fold."""
        if not self.settings.malformed_ratio:
            return []
        key = self._keys[0]
        examples = self.sample.malformed_values(key)
        name = type(self.sample).__name__
        if not examples:
            raise ValueError(
                f"malformed_ratio={self.settings.malformed_ratio}: {name}.malformed_values() "
                "gives no records that break the input contract; write it, or use 0"
            )
        for reason, value in examples.items():
            found = self.aggregation.fold(None, key.encode("utf-8"), value)
            if found != reason:
                raise ValueError(
                    f"{name}.malformed_values()[{reason!r}] = {value!r}: the aggregation's "
                    f"fold gives {found!r}, not {reason!r}; return a value that breaks the "
                    "contract that way"
                )
        return sorted(examples)

    def _produce_one(self) -> None:
        (key,) = self._random.choices(self._keys, cum_weights=self._cumulative)
        now_ms = int(time.time() * 1000)
        if self.settings.malformed_ratio and self._random.random() < self.settings.malformed_ratio:
            value = self.sample.malformed_values(key)[next(self._malformed_kinds)]
        else:
            value = self.sample.generate_value(key, self._random, now_ms)
        while True:
            try:
                self._producer.produce(
                    self.settings.topic,
                    key=key.encode("utf-8"),
                    value=value,
                    timestamp=now_ms,
                    on_delivery=self._delivered(key, value, now_ms),
                )
                break
            except BufferError:
                self._producer.poll(0.05)  # the local queue is full: let deliveries drain
        self._sent += 1

    def _delivered(
        self, key: str, value: bytes | None, created_ms: int
    ) -> Callable[[KafkaError | None, Message], None]:
        timed = created_ms if self.settings.record_timestamps else None

        def on_delivery(error: KafkaError | None, _message: Message) -> None:
            with self._lock:
                if error is not None:
                    self.summary.failed += 1
                    self.summary.first_error = self.summary.first_error or error.str()
                    return
                reason = self.summary.truth.add(key, value, timed)
                if reason is None:
                    self.summary.valid += 1
                else:
                    self.summary.malformed[reason] += 1

        return on_delivery

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            # The idempotent producer cannot go on (e.g. a sequence gap): stop and report it.
            with self._lock:
                self.summary.first_error = self.summary.first_error or error.str()
            self._fatal.set()
        log.debug("producer: %s", error.str())  # librdkafka's own log line already says it

    def _report(self, elapsed_s: float) -> None:
        if self._progress is None:
            return
        with self._lock:
            acked, failed = self.summary.total, self.summary.failed
        self._progress(
            f"produced {self._sent} in {elapsed_s:.0f} s ({self._sent / max(elapsed_s, 1e-9):.0f}"
            f"/s), acknowledged {acked}, failed {failed}"
        )


# --- command line ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m devkit.loadgen",
        description="Produce a pipeline's input (Zipf-like skew over the keys) at a steady rate.",
        epilog="exit codes: 0 every record acknowledged, 1 some failed, 2 usage",
    )
    parser.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT[,...]")
    parser.add_argument("--topic", default=PipelineNames().input_topic)
    parser.add_argument("--rate", type=float, default=500.0, help="records per second")
    parser.add_argument("--keys", type=int, default=100, help="distinct keys")
    parser.add_argument(
        "--skew", type=float, default=1.1, help="Zipf exponent: 0 uniform, about 1 web-like"
    )
    until = parser.add_mutually_exclusive_group()
    until.add_argument("--count", type=int, help="stop after this many records")
    until.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this long")
    parser.add_argument(
        "--malformed-ratio",
        type=float,
        default=0.0,
        help="share of records that break the input contract (they go to the DLQ)",
    )
    parser.add_argument("--seed", type=int, help="random seed, for a repeatable key sequence")
    parser.add_argument(
        "--aggregation-class",
        default=DEFAULT_AGGREGATION,
        metavar="MODULE.CLASS",
        help=f"the pipeline's aggregation, which makes the records (default {DEFAULT_AGGREGATION})",
    )
    parser.add_argument(
        "--linger-ms",
        type=int,
        default=LINGER_MS,
        help=f"the producer's linger.ms (default {LINGER_MS}): how long it gathers a batch",
    )
    parser.add_argument(
        "--summary-json", type=Path, metavar="FILE", help="write the final summary here as JSON"
    )
    client_properties.add_argument(parser)
    return parser.parse_args(argv)


def producer_config(
    bootstrap_servers: str,
    linger_ms: int = LINGER_MS,
    client_config: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """librdkafka settings of the load generator's producer; `client_config` (security
    settings from `--command-config`) first, so the load generator's own settings win."""
    return {
        **(client_config or {}),
        "bootstrap.servers": bootstrap_servers,
        "linger.ms": str(linger_ms),
    }


class StopSignals:
    """SIGINT and SIGTERM stop a run (`run`) after the records in flight.

    A Python signal handler runs on the main thread between two bytecodes, possibly while that
    thread holds a lock the handler needs: a handler that set the run's `threading.Event` (its
    Condition's lock) or logged (a logging handler's lock, a half-written stderr) while the
    main loop was inside the same deadlocked the load generator once. So the handler does
    nothing: the C-level handler writes the signal's number to a wakeup pipe
    (`signal.set_wakeup_fd`), and the main thread, which runs no producing loop and holds no
    lock while it waits, reads it and sets the Event.
    """

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe()
        for fd in (self._read_fd, self._write_fd):
            os.set_blocking(fd, False)
        self._previous_fd = -1
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        self._previous_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, _noted_by_the_wakeup_pipe)
        return self

    def __exit__(self, *_exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._read_fd)
        os.close(self._write_fd)

    def run(self, work: Callable[[threading.Event], ProducedSummary]) -> ProducedSummary:
        """`work(stop)` on a worker thread; a signal (even one before this call) sets `stop`."""
        stop = threading.Event()
        outcome: list[ProducedSummary] = []
        failure: list[BaseException] = []

        def produce() -> None:
            try:
                outcome.append(work(stop))
            except BaseException as exc:  # re-raised on the main thread
                failure.append(exc)

        worker = threading.Thread(target=produce, name="loadgen-producer")
        worker.start()
        while worker.is_alive():
            readable, _, _ = select.select([self._read_fd], [], [], 0.5)
            if not readable:
                continue
            for signum in os.read(self._read_fd, 64):
                if signum in self._previous:
                    log.info(
                        "%s: stopping after the records in flight", signal.Signals(signum).name
                    )
                    stop.set()
        worker.join()
        if failure:
            raise failure[0]
        return outcome[0]


def _noted_by_the_wakeup_pipe(_signum: int, _frame: FrameType | None) -> None:
    """Nothing: the signal's number is in the wakeup pipe already (see `StopSignals`)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m devkit.loadgen`."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        settings = LoadSettings(
            topic=args.topic,
            rate=args.rate,
            keys=args.keys,
            skew=args.skew,
            count=args.count,
            duration_s=args.duration,
            malformed_ratio=args.malformed_ratio,
            seed=args.seed,
        )
        client_config = client_properties.ClientConfig.load(
            args.command_config, os.environ
        ).resolved
        generator = LoadGenerator(
            settings,
            producer_config(args.bootstrap_servers, args.linger_ms, client_config),
            progress=log.info,
            truth=Truth(load_aggregation(args.aggregation_class)),
        )
    except ValueError as exc:  # ClientPropertiesError and AggregationClassError are ones
        print(f"python -m devkit.loadgen: {exc}", file=sys.stderr)
        return 2
    with StopSignals() as signals:
        summary = signals.run(generator.run)
    text = json.dumps(summary.to_json(), indent=2)
    if args.summary_json:
        args.summary_json.parent.mkdir(parents=True, exist_ok=True)
        args.summary_json.write_text(text + "\n", encoding="utf-8")
        log.info("summary written to %s", args.summary_json)
    print(text, flush=True)
    if summary.failed:
        log.error("%d records failed: %s", summary.failed, summary.first_error)
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
