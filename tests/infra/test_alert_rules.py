"""The alerting rules go where the PodMonitors go, as the file Prometheus would load."""

from __future__ import annotations

from infra.alert_rules import alert_rules
from offline.render import RecordedStack, record_stack


def _rules(stack: RecordedStack) -> list[dict]:
    return [o for o in stack.kubernetes_objects() if o["kind"] == "PrometheusRule"]


def test_pod_monitor_stacks_deploy_the_alerts_file_as_a_prometheus_rule() -> None:
    recorded = record_stack("prod", {"processor": {"metricsScrape": "podMonitor"}})
    (rule,) = _rules(recorded)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "streaming"
    assert rule["spec"] == alert_rules()


def test_no_prometheus_rule_without_the_operator(stack: RecordedStack) -> None:
    assert _rules(stack) == []
