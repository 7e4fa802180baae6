"""The health endpoint over real HTTP, and the metrics it serves."""

from __future__ import annotations

import gzip
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from app.processor.health import HealthServer, ReadinessStatus
from app.processor.metrics import ProcessorMetrics

NOT_READY = ReadinessStatus(
    query_running=True, assignment_received=False, restore_done=False, batch_done=False
)
READY = ReadinessStatus(
    query_running=True, assignment_received=True, restore_done=True, batch_done=True
)


class Readiness:
    """A readiness source the test flips, as the processor's lifecycle would."""

    def __init__(self) -> None:
        self.status = NOT_READY

    def __call__(self) -> ReadinessStatus:
        return self.status


@pytest.fixture
def readiness() -> Readiness:
    return Readiness()


@pytest.fixture
def metrics() -> ProcessorMetrics:
    return ProcessorMetrics()


@pytest.fixture
def server(metrics: ProcessorMetrics, readiness: Readiness) -> Iterator[HealthServer]:
    with HealthServer(0, metrics, readiness, host="127.0.0.1", liveness_timeout_s=0.5) as health:
        yield health


def get(server: HealthServer, path: str) -> tuple[int, str, str]:
    """Status, content type and body of GET `path`."""
    url = f"http://127.0.0.1:{server.port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def test_port_zero_picks_a_free_port_and_stop_releases_it(
    metrics: ProcessorMetrics, readiness: Readiness
) -> None:
    health = HealthServer(0, metrics, readiness, host="127.0.0.1").start()
    port = health.port
    assert port > 0
    assert get(health, "/live")[0] == 200
    health.stop()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


def test_live_fails_when_the_heartbeat_is_stale_and_recovers(server: HealthServer) -> None:
    status, content_type, body = get(server, "/live")
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body)["live"] is True

    time.sleep(0.7)
    status, _, body = get(server, "/live")
    assert status == 503
    reason = json.loads(body)["reason"]
    assert "main loop heartbeat is" in reason and "(limit 0.5 s)" in reason

    server.heartbeat()
    assert get(server, "/live")[0] == 200


def test_ready_names_the_failing_conditions_until_all_hold(
    server: HealthServer, readiness: Readiness, metrics: ProcessorMetrics
) -> None:
    status, _, body = get(server, "/ready")
    assert status == 503
    assert json.loads(body) == {
        "ready": False,
        "failing": ["assignment_received", "restore_done", "batch_done"],
    }
    assert metrics.registry.get_sample_value("processor_ready") == 0

    readiness.status = READY
    status, _, body = get(server, "/ready")
    assert status == 200
    assert json.loads(body) == {"ready": True}
    assert metrics.registry.get_sample_value("processor_ready") == 1

    readiness.status = ReadinessStatus(False, True, True, True)  # the query stopped
    status, _, body = get(server, "/ready")
    assert (status, json.loads(body)["failing"]) == (503, ["query_running"])


def test_a_failing_readiness_check_is_not_ready(
    metrics: ProcessorMetrics,
) -> None:
    def broken() -> ReadinessStatus:
        raise RuntimeError("assignment channel closed")

    with HealthServer(0, metrics, broken, host="127.0.0.1") as health:
        status, _, body = get(health, "/ready")
    assert status == 503
    assert json.loads(body) == {
        "ready": False,
        "failing": ["readiness_check"],
        "error": "assignment channel closed",
    }


def test_unknown_path_is_404(server: HealthServer) -> None:
    status, _, body = get(server, "/healthz")
    assert status == 404 and "/live, /ready or /metrics" in body


def test_metrics_show_every_event_with_its_labels(
    server: HealthServer, metrics: ProcessorMetrics, readiness: Readiness
) -> None:
    readiness.status = READY
    metrics.rebalance(assigned=[("page-views", 0), ("page-views", 1)], revoked=[])
    metrics.batch_done(
        1.2,
        {("page-views", 0): 10, ("page-views", 1): 5},
        {"page-view-counts": 7, "page-view-counter-counts-changelog": 7},
    )
    metrics.dlq("undecodable key")
    metrics.lag("page-views", 0, 42)
    metrics.restore_done(1, records=300, seconds=2.5, read_seconds=0.004)
    metrics.transaction(committed=True)
    metrics.transaction(committed=False)
    metrics.batch_skipped()

    status, content_type, text = get(server, "/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    for line in [
        'processor_records_in_total{partition="0",topic="page-views"} 10.0',
        'processor_records_in_total{partition="1",topic="page-views"} 5.0',
        'processor_records_out_total{topic="page-view-counts"} 7.0',
        'processor_dlq_records_total{reason="undecodable key"} 1.0',
        'processor_consumer_lag_records{partition="0",topic="page-views"} 42.0',
        "processor_assigned_partitions 2.0",
        'processor_batch_duration_seconds_bucket{le="1.5"} 1.0',
        "processor_batch_duration_seconds_count 1.0",
        'processor_restore_records_total{partition="1"} 300.0',
        'processor_restore_duration_seconds{partition="1"} 2.5',
        'processor_restore_read_seconds_total{partition="1"} 0.004',
        "processor_rebalances_total 1.0",
        "processor_partitions_assigned_total 2.0",
        "processor_partitions_revoked_total 0.0",
        'processor_transactions_total{result="committed"} 1.0',
        'processor_transactions_total{result="aborted"} 1.0',
        "processor_batches_skipped_total 1.0",
        "processor_ready 1.0",
    ]:
        assert line in text.splitlines(), line


def test_metrics_answer_openmetrics_gzipped_when_prometheus_asks_for_it(
    server: HealthServer, metrics: ProcessorMetrics
) -> None:
    metrics.transaction(committed=True)
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/metrics",
        headers={
            # What Prometheus 3 sends on a scrape.
            "Accept": "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;q=0.4",
            "Accept-Encoding": "gzip",
        },
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        content_type = response.headers["Content-Type"]
        assert response.headers["Content-Encoding"] == "gzip"
        text = gzip.decompress(response.read()).decode()
    assert content_type.startswith("application/openmetrics-text")
    assert 'processor_transactions_total{result="committed"} 1.0' in text.splitlines()
    assert text.endswith("# EOF\n")


def test_revoked_partitions_leave_the_assignment_and_drop_their_lag(
    metrics: ProcessorMetrics,
) -> None:
    metrics.rebalance(assigned=[("t", 0), ("t", 1), ("t", 2)], revoked=[])
    metrics.lag("t", 0, 5)
    metrics.lag("t", 2, 7)
    metrics.rebalance(assigned=[], revoked=[("t", 2)])
    text = metrics.exposition().decode()
    assert "processor_assigned_partitions 2.0" in text
    assert "processor_partitions_revoked_total 1.0" in text
    assert 'processor_consumer_lag_records{partition="0",topic="t"} 5.0' in text
    lag = "processor_consumer_lag_records"
    assert metrics.registry.get_sample_value(lag, {"topic": "t", "partition": "2"}) is None


def test_two_instances_in_one_process_do_not_collide() -> None:
    first, second = ProcessorMetrics(), ProcessorMetrics()
    first.transaction(committed=True)
    assert 'processor_transactions_total{result="committed"} 1.0' in first.exposition().decode()
    assert 'processor_transactions_total{result="committed"} 0.0' in second.exposition().decode()
