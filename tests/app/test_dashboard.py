"""The Grafana dashboard and the alerting rules: valid structure, and every PromQL expression
names metrics the processor really exports (read from a real `ProcessorMetrics` registry, every
series present) or the brokers' readiness sidecars do (`app.admin.broker_readiness`); so do the
series the alerts' promtool cases feed them (`tests/alert_cases.py`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from app.admin import broker_readiness
from app.processor.metrics import ProcessorMetrics
from contract.pipeline_alerts import AlertThresholds, pipeline_group
from tests.alert_cases import pipeline_cases, series_names

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "processor.json"
ALERTS = DASHBOARD.parent / "alerts.yaml"
METRIC_NAME = re.compile(r"\b((?:processor|kafka_tls|kafka_broker)_[a-z_]+)\b")
# A stack's thresholds (dev's shape): the names in the rules do not depend on them.
THRESHOLDS = AlertThresholds(
    namespace="streaming",
    partitions=6,
    replicas=2,
    deployments=1,
    restart_budget_s=195,
    broker_restart_s=370,
)


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def exported_names() -> set[str]:
    """Every sample name the processor exposes once each kind of event has happened."""
    metrics = ProcessorMetrics()
    metrics.batch_done(1.2, {("page-views", 0): 10}, {"page-view-counts": 3})
    metrics.dlq("invalid-value")
    metrics.lag("page-views", 0, 5)
    metrics.rebalance(assigned=[("page-views", 0)], revoked=[("page-views", 1)])
    metrics.restore_done(0, 100, 0.5, 0.01)
    metrics.standby_read({1: 20})
    metrics.transaction(committed=False)
    metrics.batch_skipped()
    metrics.set_ready(True)
    metrics.pair_published({0: True})
    text = metrics.exposition().decode("utf-8")
    in_sync = broker_readiness.BrokerReadiness(True, "in sync", 6)
    sidecar = {m.name for m in broker_readiness.sync_metrics(in_sync)}
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples} | {
        broker_readiness.EXPIRY_METRIC,
        *sidecar,
    }


def _expressions(dashboard: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            found.append(query["query"])
    return found


def test_every_expression_names_only_exported_metrics(
    dashboard: dict[str, Any], exported_names: set[str]
) -> None:
    expressions = _expressions(dashboard)
    assert expressions
    for expr in expressions:
        names = METRIC_NAME.findall(expr)
        assert names, f"expression names no processor metric: {expr}"
        unknown = sorted(set(names) - exported_names)
        assert not unknown, f"{expr}: not exported by ProcessorMetrics: {unknown}"


def test_every_exported_metric_family_is_on_the_dashboard(
    dashboard: dict[str, Any], exported_names: set[str]
) -> None:
    used = {n for e in _expressions(dashboard) for n in METRIC_NAME.findall(e)}
    families = {re.sub(r"_(total|bucket|sum|count|created)$", "", n) for n in exported_names}
    shown = {re.sub(r"_(total|bucket|sum|count|created)$", "", n) for n in used}
    assert families - shown == set()


def test_dashboard_is_grafana_json_with_datasource_and_pod_variables(
    dashboard: dict[str, Any],
) -> None:
    assert 36 <= dashboard["schemaVersion"] <= 41
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["pod"]["type"] == "query"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys()
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        for target in panel["targets"]:
            if "processor_" in target["expr"]:  # the $pod variable lists processor pods
                assert 'pod=~"$pod"' in target["expr"], f"{panel['title']}: not filtered by $pod"


def _alert_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    groups = [*document["groups"], pipeline_group(THRESHOLDS)]
    return [rule for group in groups for rule in group["rules"]]


def test_every_alert_names_exported_metrics_a_severity_and_what_to_do(
    exported_names: set[str],
) -> None:
    rules = _alert_rules()
    assert {r["alert"] for r in rules} >= {
        "KafkaCertificateExpiresSoon",
        "KafkaCertificateExpiresThisWeek",
        "ProcessorPartitionStalled",
        "KafkaBrokerReplicasOutOfSync",
    }
    for rule in rules:
        names = set(METRIC_NAME.findall(rule["expr"]))
        assert names and names <= exported_names, (rule["alert"], names - exported_names)
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert {"summary", "description"} <= rule["annotations"].keys()


def test_the_alert_cases_feed_promtool_only_series_that_are_exported(
    exported_names: set[str],
) -> None:
    fed = series_names(pipeline_cases(THRESHOLDS))
    assert fed and fed <= exported_names, fed - exported_names


def test_the_certificate_panel_and_the_alerts_read_the_sidecars_metric(
    dashboard: dict[str, Any],
) -> None:
    panel_metrics = {n for e in _expressions(dashboard) for n in METRIC_NAME.findall(e)}
    alert_metrics = {n for r in _alert_rules() for n in METRIC_NAME.findall(r["expr"])}
    assert broker_readiness.EXPIRY_METRIC in panel_metrics & alert_metrics
