"""The load generator against a real broker: records the pipeline's aggregation makes and accepts,
skew, malformed share, the summary and its truth as what was written; and the token bucket's
steadiness on a fake clock."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import TypedDict, Unpack

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from app.pipelines.page_view_count import PageViews
from app.pipelines.product_revenue import Orders, ProductRevenue
from devkit import loadgen
from devkit.loadgen import (
    LoadGenerator,
    LoadSettings,
    TokenBucket,
    producer_config,
    zipf_weights,
)
from devkit.truth import Truth
from tests.app.processor_harness import REPO

PARTITIONS = 3


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    name = f"loadgen-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(30)
    return name


def read_all(bootstrap: str, topic: str, expected: int) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    messages = []
    for _ in range(60):
        messages += [m for m in consumer.consume(1000, timeout=0.5) if m.error() is None]
        if len(messages) >= expected:
            break
    consumer.close()
    return messages


class Settings(TypedDict, total=False):
    """The LoadSettings fields a test sets (topic and rate are generate's)."""

    keys: int
    skew: float
    count: int | None
    duration_s: float | None
    malformed_ratio: float
    seed: int | None
    record_timestamps: bool


def generate(
    bootstrap: str, topic: str, truth: Truth | None = None, **settings: Unpack[Settings]
) -> loadgen.ProducedSummary:
    config = producer_config(bootstrap)
    return LoadGenerator(
        LoadSettings(topic=topic, rate=2000, **settings), config, truth=truth
    ).run()


def test_records_follow_the_input_contract_and_the_summary_counts_them(
    kafka_bootstrap: str, topic: str
) -> None:
    summary = generate(kafka_bootstrap, topic, keys=10, count=300, seed=1, record_timestamps=True)
    messages = read_all(kafka_bootstrap, topic, 300)
    assert summary.failed == 0
    assert summary.total == summary.valid == len(messages) == 300
    per_key: Counter[str] = Counter()
    for message in messages:
        page = message.key().decode()
        value = json.loads(message.value())
        assert value["page"] == page
        assert value["ts"] == message.timestamp()[1]  # event time is the record's timestamp
        per_key[page] += 1
    assert per_key == summary.per_key
    # The default pipeline counts: the truth's output is each page's count.
    assert summary.truth.expected() == {p: str(n).encode() for p, n in per_key.items()}


def test_another_pipelines_aggregation_makes_the_records_and_the_truth(
    kafka_bootstrap: str, topic: str
) -> None:
    revenue = ProductRevenue()
    summary = generate(kafka_bootstrap, topic, Truth(revenue), keys=5, count=200, seed=2)
    totals: Counter[str] = Counter()
    for message in read_all(kafka_bootstrap, topic, 200):
        product = message.key().decode()
        assert product in {Orders().key_name(i) for i in range(5)}
        totals[product] += json.loads(message.value())["amount_cents"]
    assert summary.truth.expected() == {p: str(t).encode() for p, t in totals.items()}


def test_pages_are_skewed_like_zipf(kafka_bootstrap: str, topic: str) -> None:
    summary = generate(kafka_bootstrap, topic, keys=20, skew=1.1, count=1000, seed=3)
    weights = zipf_weights(20, 1.1)
    expected_top = weights[0] / sum(weights) * 1000
    first = PageViews().key_name(0)
    top = summary.per_key[first]
    assert summary.per_key.most_common(1)[0][0] == first
    assert abs(top - expected_top) < 0.2 * expected_top
    uniform = zipf_weights(5, 0.0)
    assert uniform == [1.0] * 5


def test_malformed_share_breaks_the_contract_in_each_named_way(
    kafka_bootstrap: str, topic: str
) -> None:
    summary = generate(kafka_bootstrap, topic, keys=5, count=400, malformed_ratio=0.25, seed=5)
    messages = read_all(kafka_bootstrap, topic, 400)
    assert len(messages) == summary.total == 400
    assert set(summary.malformed) == set(PageViews().malformed_values("/p"))
    assert 60 <= sum(summary.malformed.values()) <= 140
    seen: Counter[str] = Counter()
    for message in messages:
        raw = message.value()
        if raw is None:
            seen["null-value"] += 1
            continue
        try:
            value = json.loads(raw)
        except ValueError:
            seen["invalid-value"] += 1
            continue
        if value["page"] != message.key().decode():
            seen["page-mismatch"] += 1
    assert seen == summary.malformed


def test_command_line_writes_the_summary_json(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    out = tmp_path / "summary.json"
    code = loadgen.main(
        ["--bootstrap-servers", kafka_bootstrap, "--topic", topic, "--rate", "1000",
         "--keys", "7", "--count", "120", "--summary-json", str(out)]
    )  # fmt: skip
    assert code == 0
    summary = json.loads(out.read_text())
    assert summary["produced"] == summary["valid"] == 120
    assert sum(summary["per_key"].values()) == 120
    assert len(summary["per_key"]) <= 7


def test_an_aggregation_class_that_is_no_aggregation_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = loadgen.main(["--bootstrap-servers", "127.0.0.1:1", "--count", "1",
                         "--aggregation-class", "app.pipelines.json_input.REASONS"])  # fmt: skip
    assert code == 2
    assert "aggregation.class='app.pipelines.json_input.REASONS': not an Aggregation" in (
        capsys.readouterr().err
    )


def test_command_config_settings_reach_the_producer_under_its_own_settings(
    tmp_path: Path,
) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.password=${env:LOADGEN_PASSWORD}\n"
        "bootstrap.servers=elsewhere:9092\n"
    )
    assert loadgen.main(["--bootstrap-servers", "127.0.0.1:1", "--count", "1",
                         "--command-config", str(path)]) == 2  # fmt: skip
    config = producer_config(
        "kafka:9092",
        client_config={"security.protocol": "SASL_SSL", "bootstrap.servers": "elsewhere:9092"},
    )
    # The security settings are the file's; where to connect is the command line's.
    assert config["security.protocol"] == "SASL_SSL"
    assert config["bootstrap.servers"] == "kafka:9092"


SIGTERM_RUNS = 30
# Start, stop after the records in flight, flush to a local broker: seconds; a hang is minutes.
EXIT_DEADLINE_S = 60.0


def test_sigterm_at_any_point_stops_the_command_line_within_a_deadline(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    """A signal handler that takes a lock the interrupted main thread may hold (the stop
    Event's, a logging handler's) deadlocks once in a while: signal many runs at random points
    (starting, producing, flushing; once or several times) and require every one to exit."""
    seed = random.randrange(1 << 32)
    rnd = random.Random(seed)
    for run in range(SIGTERM_RUNS):
        log_path = tmp_path / f"loadgen-{run}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "devkit.loadgen", "--bootstrap-servers", kafka_bootstrap,
                 "--topic", topic, "--rate", str(rnd.choice([200, 2000, 20000])), "--keys", "50"],
                cwd=REPO, stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
            signals = rnd.randint(1, 3)
            for _ in range(signals):
                # The point in its life the signal lands at is what varies: not a wait for a
                # condition, the test's input.
                time.sleep(rnd.uniform(0.0, 2.0))
                process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(EXIT_DEADLINE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                pytest.fail(
                    f"run {run} (seed {seed}): python -m devkit.loadgen still running "
                    f"{EXIT_DEADLINE_S:.0f} s after {signals} SIGTERM(s); its log:\n"
                    f"{log_path.read_text(errors='replace')[-3000:]}"
                )
        # Stopped cleanly, or killed by the signal before its handler was installed.
        assert code in (0, -signal.SIGTERM), (
            f"run {run} (seed {seed}): exit code {code}; its log:\n"
            f"{log_path.read_text(errors='replace')[-3000:]}"
        )


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"rate": 0}, "rate=0"),
        ({"keys": 0}, "keys=0"),
        ({"malformed_ratio": 1.5}, "malformed_ratio=1.5"),
        ({"count": 5, "duration_s": 1.0}, "not both"),
    ],
)
def test_bad_settings_are_refused_naming_the_value(settings: dict, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        LoadSettings(**settings)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_spreads_the_rate_instead_of_bursting() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=500, capacity=5, clock=clock)
    taken = []
    for _ in range(1000):  # one second in 1 ms steps
        clock.now += 0.001
        taken.append(bucket.take())
    assert sum(taken) in (499, 500)
    assert max(taken) == 1
    clock.now += 10.0  # a long stall saves up at most `capacity` tokens
    assert bucket.take() == 5
