"""The stack's Prometheus alerting rules (`dashboards/alerts.yaml`) as a `PrometheusRule`.

Deployed beside the PodMonitors (`processor.metricsScrape: podMonitor`), where the Prometheus
Operator is installed; with another Prometheus, load the same file under `rule_files:`. One file
holds the rules, so the one Prometheus reads and the one this deploys cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from infra import workload

ALERTS_FILE = Path(__file__).resolve().parents[1] / "dashboards" / "alerts.yaml"


def alert_rules() -> dict[str, Any]:
    """`dashboards/alerts.yaml`: Prometheus' rule-file shape, which is a PrometheusRule's spec."""
    return yaml.safe_load(ALERTS_FILE.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class AlertRulesArgs:
    namespace: str


class AlertRules(pulumi.ComponentResource):
    """A PrometheusRule of the stack's alerts, in the stack's namespace."""

    def __init__(
        self, name: str, args: AlertRulesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("stateful-streaming:monitoring:AlertRules", name, None, opts)
        self.rule = k8s.apiextensions.CustomResource(
            name,
            api_version="monitoring.coreos.com/v1",
            kind="PrometheusRule",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=workload.PART_OF,
                namespace=args.namespace,
                labels=workload.labels(workload.PART_OF, "alerts"),
            ),
            spec=alert_rules(),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"ruleName": workload.PART_OF})
