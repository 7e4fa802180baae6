"""The alerts on the pipeline's own failures, with thresholds from the stack's settings.

The processor exports the series (`app/processor/metrics.py`), the brokers' readiness sidecars
theirs (`app/admin/broker_readiness.py`); the program deploys these rules beside
`dashboards/alerts.yaml`'s (`infra/alert_rules.py`), and `python -m offline.alert_rules --stack
<stack>` prints them for a Prometheus that reads rule files. Each waits for what the stack
allows a healthy pipeline, so a rollout stays quiet:

- a processor pod may be gone for its restart budget (terminationGracePeriodSeconds + the
  startup probe's budget + minReadySeconds), and a roll of N pods takes N of them;
- a broker for its grace period and its startup probe's budget, then catches up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GROUP = "stateful-streaming-pipeline"
# How far back the rates look: a few scrapes (Prometheus' default interval is 1 min; the
# PodMonitor's 15 s), so one missed scrape does not read as a stop.
RATE_WINDOW = "5m"
# A dead letter now and then is the design (a malformed record is set aside, not lost); this
# long a stream of them is a producer or a schema gone wrong.
DEAD_LETTERS_FOR = "15m"


@dataclass(frozen=True)
class AlertThresholds:
    """What the alerts wait for, from one stack's settings."""

    namespace: str
    partitions: int  # the input topic's
    replicas: int  # processor pods (each side's, for a pair)
    deployments: int  # 1, or 2 for an active/standby pair: each owns every partition
    restart_budget_s: int  # one processor pod's (contract/restart_budget.py)
    broker_restart_s: int  # one broker's grace period + startup probe budget

    @property
    def roll_s(self) -> int:
        """A roll of every processor pod, one after another."""
        return self.replicas * self.restart_budget_s

    @property
    def rebalances_per_roll(self) -> int:
        """Rebalances the instances count in one roll: each pod's leaving and joining, seen by
        every instance, in two rounds each (cooperative: revoke, then assign). A hand-off roll
        of 2 pods counted 13 (docs/benchmarks.md, "Membership in the dev stack")."""
        return 2 * 2 * self.replicas * self.replicas * self.deployments


def _rule(
    alert: str, expr: str, for_s: int | str, severity: str, summary: str, description: str
) -> dict[str, Any]:
    return {
        "alert": alert,
        "expr": expr,
        "for": f"{for_s}s" if isinstance(for_s, int) else for_s,
        "labels": {"severity": severity},
        "annotations": {"summary": summary, "description": " ".join(description.split())},
    }


def pipeline_group(t: AlertThresholds) -> dict[str, Any]:
    """The rule group, as a rule file and a PrometheusRule's spec hold it."""
    ns = f'namespace="{t.namespace}"'
    lag = f"processor_consumer_lag_records{{{ns}}}"
    owners = t.deployments * t.partitions
    rules = [
        _rule(
            "ProcessorConsumerLagGrowing",
            f"sum by (namespace, topic) ({lag}) > 0\n"
            f"and deriv(sum by (namespace, topic) ({lag})[{RATE_WINDOW}:30s]) > 0",
            t.restart_budget_s,
            "warning",
            "{{ $labels.topic }}: the processor falls behind, {{ $value | humanize }} records",
            f"""The consumer lag of {{{{ $labels.namespace }}}}/{{{{ $labels.topic }}}} has grown
            for longer than a processor pod's restart budget ({t.restart_budget_s} s), the longest
            a healthy restart lets it grow. The input arrives faster than the processor counts it:
            add replicas or CPU (docs/operations.md, "What each day-2 change does"), or look for
            a slow batch in the processor's log and processor_batch_duration_seconds.""",
        ),
        _rule(
            "ProcessorPartitionStalled",
            f"max by (namespace, topic, partition) ({lag}) > 0\n"
            "unless on (namespace, topic, partition)\n"
            "sum by (namespace, topic, partition) ("
            f"rate(processor_records_in_total{{{ns}}}[{RATE_WINDOW}])) > 0",
            t.restart_budget_s,
            "critical",
            "{{ $labels.topic }}-{{ $labels.partition }}: records wait and none is processed",
            f"""Partition {{{{ $labels.partition }}}} of {{{{ $labels.namespace }}}}/{{{{
            $labels.topic }}}} has an owner and records waiting, and no batch has taken any of
            them for longer than a restart's budget ({t.restart_budget_s} s): its output has
            stopped. The owning pod's log says why (a batch failing and retried, a broker
            unreachable, a transaction fenced); restarting that pod hands the partition over.""",
        ),
        _rule(
            "ProcessorPartitionsUnowned",
            f"(count by (namespace, topic) ({lag}) or on () vector(0)) < {owners}",
            t.restart_budget_s,
            "critical",
            "{{ $value }} of " + str(owners) + " input partitions have an owner that reports them",
            f"""Fewer than the {t.partitions} input partitions{
                " (each side of the pair)" if t.deployments > 1 else ""
            } of {t.namespace} have been owned by a running processor
            for longer than a restart's budget ({t.restart_budget_s} s): nobody processes the
            others. Check the StatefulSet's pods (`kubectl -n {t.namespace} get pods`): a pod
            that does not start, or a group that does not settle
            (ProcessorRebalancingRepeatedly).""",
        ),
        _rule(
            "ProcessorRebalancingRepeatedly",
            f"sum by (namespace) (increase(processor_rebalances_total{{{ns}}}[{t.roll_s}s]))"
            f" > {2 * t.rebalances_per_roll}",
            0,  # the window is the wait: a roll's time
            "warning",
            "{{ $labels.namespace }}: {{ $value | humanize }} rebalances within a roll's time",
            f"""The processor's group rebalanced more than twice as often as a roll of all
            {t.replicas} pods makes it ({t.rebalances_per_roll} within {t.roll_s} s): every
            rebalance pauses the partitions that move. Look for pods restarting (OOMKilled, a
            failing probe) or members timing out (session.timeout.ms in the processor's log).""",
        ),
        _rule(
            "ProcessorDeadLettersArriving",
            f"sum by (namespace, reason) (increase(processor_dlq_records_total{{{ns}}}"
            f"[{RATE_WINDOW}])) > 0",
            DEAD_LETTERS_FOR,
            "warning",
            "{{ $labels.namespace }}: records keep going to the dead-letter topic "
            "({{ $labels.reason }})",
            f"""Malformed records have reached the dead-letter topic for {DEAD_LETTERS_FOR}
            without a pause, reason {{{{ $labels.reason }}}}. Each is kept there with its reason
            and its input offset; a stream of them is a producer or a schema
            that changed. Nothing is lost, but those records are not counted.""",
        ),
        _rule(
            "ProcessorTransactionsAborting",
            f'sum by (namespace) (increase(processor_transactions_total{{result="aborted",{ns}}}'
            f"[{t.roll_s}s])) > {2 * t.replicas * t.deployments}",
            0,
            "warning",
            "{{ $labels.namespace }}: {{ $value | humanize }} sink transactions aborted",
            f"""More sink transactions aborted within a roll's time ({t.roll_s} s) than two per
            pod ({2 * t.replicas * t.deployments}): each abort throws a batch's work away, and its
            records are read and counted again. Look for fencing (two pods with one
            transactional.id), revocations mid-batch, or a broker failing the commits.""",
        ),
        _rule(
            "KafkaBrokerReplicasOutOfSync",
            f"max by (namespace, pod) (kafka_broker_replicas_out_of_sync{{{ns}}}) > 0",
            t.broker_restart_s,
            "critical",
            "{{ $labels.pod }}: {{ $value }} partition replicas out of the ISR",
            f"""Broker {{{{ $labels.pod }}}} has had replicas out of their in-sync set for
            longer than a broker's restart takes ({t.broker_restart_s} s). Those partitions run
            with one replica less: with min.insync.replicas 2 and one more broker lost, their
            writes stop. The broker's log says why it does not catch up (disk, network, a
            throttle); its readiness probe fails meanwhile, so no roll moves on.""",
        ),
    ]
    return {"name": GROUP, "rules": rules}
