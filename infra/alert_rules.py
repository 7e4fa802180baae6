"""The stack's Prometheus alerting rules as a `PrometheusRule`: `dashboards/alerts.yaml`'s, and
the pipeline's (`contract/pipeline_alerts.py`) with thresholds from this stack's settings.

Deployed beside the PodMonitors (`processor.metricsScrape: podMonitor`), where the Prometheus
Operator is installed; with another Prometheus, load what `python -m offline.alert_rules --stack
<stack>` prints under `rule_files:`. Both come from `alert_rules`, so the rules Prometheus reads
and the ones this deploys cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from contract.pipeline_alerts import AlertThresholds, pipeline_group
from infra import workload
from infra.stack_settings import StackConfig

ALERTS_FILE = Path(__file__).resolve().parents[1] / "dashboards" / "alerts.yaml"


def alert_thresholds(config: StackConfig) -> AlertThresholds:
    """What the pipeline's alerts wait for, from the stack's settings."""
    processor, kafka = config.processor, config.kafka
    return AlertThresholds(
        namespace=config.namespace,
        partitions=config.topics.partitions,
        replicas=processor.replicas,
        deployments=len(processor.deployments),
        restart_budget_s=processor.restart_budget_seconds,
        broker_restart_s=kafka.termination_grace_period_seconds
        + kafka.startup_probe.budget_seconds,
    )


def alert_rules(config: StackConfig) -> dict[str, Any]:
    """The rule file (Prometheus' shape, which is a PrometheusRule's spec): the fixed rules of
    `dashboards/alerts.yaml` and the pipeline's for this stack."""
    fixed = yaml.safe_load(ALERTS_FILE.read_text(encoding="utf-8"))
    return {"groups": [*fixed["groups"], pipeline_group(alert_thresholds(config))]}


@dataclass(frozen=True)
class AlertRulesArgs:
    config: StackConfig


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
                namespace=args.config.namespace,
                labels=workload.labels(workload.PART_OF, "alerts"),
            ),
            spec=alert_rules(args.config),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"ruleName": workload.PART_OF})
