"""`promtool test rules` cases for the pipeline's alerts: each alert firing on its failure and
quiet through the healthy run nearest to it (a restart, a roll), timed by the stack's thresholds.

The series carry the names and labels the processor and the brokers' sidecars export (as a
PodMonitor scrapes them); `tests/app/test_dashboard.py` checks each name against a real
`ProcessorMetrics` registry and the sidecar, and `tests/infra/test_alert_rules.py` runs promtool.
"""

from __future__ import annotations

from typing import Any

from contract.pipeline_alerts import AlertThresholds

TOPIC = "page-views"
STEP_S = 15  # the PodMonitor's scrape interval


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    shown = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{shown}}}", "values": values}


def _steps(seconds: int) -> int:
    return seconds // STEP_S + 1


def _expect(alert: str, at_s: int, *fired: dict[str, str]) -> dict[str, Any]:
    return {
        "eval_time": f"{at_s}s",
        "alertname": alert,
        "exp_alerts": [{"exp_labels": labels} for labels in fired],
    }


def _case(name: str, series: list[dict[str, str]], *checks: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "interval": f"{STEP_S}s",
        "input_series": series,
        "alert_rule_test": list(checks),
    }


def series_names(cases: list[dict[str, Any]]) -> set[str]:
    """The metric names the cases feed promtool."""
    return {s["series"].split("{")[0] for case in cases for s in case["input_series"]}


def pipeline_cases(t: AlertThresholds) -> list[dict[str, Any]]:
    """A firing case and a quiet case per alert of `contract.pipeline_alerts`."""
    ns = t.namespace
    pod = {"namespace": ns, "pod": "page-view-counter-0"}
    partition0 = {**pod, "topic": TOPIC, "partition": "0"}
    restart, long = t.restart_budget_s, t.restart_budget_s + 600
    n = _steps(long)
    half = _steps(restart // 2)
    gone = (restart - 60) // STEP_S  # scrapes a restart's gap lasts: a minute inside its budget

    def lag(values: str, partition: str = "0") -> dict[str, str]:
        return _series(
            "processor_consumer_lag_records", values, **{**partition0, "partition": partition}
        )

    def records_in(values: str) -> dict[str, str]:
        return _series("processor_records_in_total", values, **partition0)

    last = str(t.partitions - 1)
    # Every partition reported by its owner, on each deployment (both sides of a pair own all).
    owned = [
        _series("processor_consumer_lag_records", f"0x{n}", **{**partition0, "partition": str(p),
                "pod": f"page-view-counter-{side}-0"})
        for side in range(t.deployments)
        for p in range(t.partitions)
        if (side, str(p)) != (0, last)
    ]  # fmt: skip
    severity = {"warning": {"severity": "warning"}, "critical": {"severity": "critical"}}
    topic_labels = {"namespace": ns, "topic": TOPIC}
    rebalances_per_step = 2 * t.rebalances_per_roll * STEP_S // t.roll_s + 1
    return [
        _case(
            "lag grows for longer than a restart: the processor falls behind",
            [lag(f"0+50x{n}"), records_in(f"0+1000x{n}")],
            _expect("ProcessorConsumerLagGrowing", long, {**topic_labels, **severity["warning"]}),
        ),
        _case(
            "a restart's backlog grows for half its budget, then drains: quiet",
            [lag(f"0+50x{half} {50 * half}-50x{half} 0x{n}"), records_in(f"0+1000x{n}")],
            _expect("ProcessorConsumerLagGrowing", restart // 2),
            _expect("ProcessorConsumerLagGrowing", restart),
            _expect("ProcessorConsumerLagGrowing", long),
        ),
        _case(
            "a steady backlog the processor keeps pace with: quiet",
            [lag(f"500x{n}"), records_in(f"0+1000x{n}")],
            _expect("ProcessorConsumerLagGrowing", long),
        ),
        _case(
            "records wait on a partition and no batch takes them: its output stopped",
            [lag(f"10+10x{n}"), records_in(f"500x{n}")],
            _expect(
                "ProcessorPartitionStalled",
                long,
                {**topic_labels, "partition": "0", **severity["critical"]},
            ),
        ),
        _case(
            "a partition with a lag that batches keep taking: quiet",
            [lag(f"20x{n}"), records_in(f"0+300x{n}")],
            _expect("ProcessorPartitionStalled", long),
        ),
        _case(
            "a restart stops a partition's batches for less than its budget: quiet",
            [lag(f"20x{n}"), records_in(f"500x{gone} 500+300x{n}")],
            _expect("ProcessorPartitionStalled", STEP_S * gone),  # the stop's last scrape
        ),
        _case(
            "one partition has had no owner for longer than a restart",
            [*owned, lag(f"0x{_steps(60)} stale", last)],
            _expect(
                "ProcessorPartitionsUnowned",
                long,
                {**topic_labels, **severity["critical"]},
            ),
        ),
        _case(
            "no processor reports anything: every partition unowned",
            [_series("processor_ready", f"1x{_steps(60)} stale", **pod)],
            _expect("ProcessorPartitionsUnowned", long, severity["critical"]),
        ),
        _case(
            "a static restart leaves a partition without an owner for less than its budget: quiet",
            [*owned, lag(f"0x4 stale _x{gone} 0x{n}", last)],  # reported until 60 s, gone at 75 s
            _expect("ProcessorPartitionsUnowned", 75 + STEP_S * gone),  # the gap's last scrape
            _expect("ProcessorPartitionsUnowned", long),
        ),
        _case(
            "the group rebalances again and again",
            [
                _series(
                    "processor_rebalances_total",
                    f"0+{rebalances_per_step}x{_steps(t.roll_s + 600)}",
                    **pod,
                )
            ],
            _expect(
                "ProcessorRebalancingRepeatedly",
                t.roll_s + 600,
                {"namespace": ns, **severity["warning"]},
            ),
        ),
        _case(
            "one roll's rebalances, then a settled group: quiet",
            [
                _series(
                    "processor_rebalances_total",
                    f"0+1x{t.rebalances_per_roll} {t.rebalances_per_roll}x{_steps(t.roll_s + 600)}",
                    **pod,
                )
            ],
            _expect("ProcessorRebalancingRepeatedly", t.roll_s),
            _expect("ProcessorRebalancingRepeatedly", t.roll_s + 600),
        ),
        _case(
            "malformed records keep arriving for longer than a burst",
            [
                _series(
                    "processor_dlq_records_total",
                    f"0+1x{_steps(1800)}",
                    **pod,
                    reason="invalid-value",
                )
            ],
            _expect(
                "ProcessorDeadLettersArriving",
                1800,
                {"namespace": ns, "reason": "invalid-value", **severity["warning"]},
            ),
        ),
        _case(
            "one burst of malformed records: set aside, quiet",
            [
                _series(
                    "processor_dlq_records_total",
                    f"0 50x{_steps(1800)}",
                    **pod,
                    reason="invalid-value",
                )
            ],
            _expect("ProcessorDeadLettersArriving", 120),  # still in the rate's window
            _expect("ProcessorDeadLettersArriving", 600),
            _expect("ProcessorDeadLettersArriving", 1800),
        ),
        _case(
            "sink transactions keep aborting",
            [
                _series(
                    "processor_transactions_total",
                    f"0+1x{_steps(t.roll_s)}",
                    **pod,
                    result="aborted",
                )
            ],
            _expect(
                "ProcessorTransactionsAborting",
                t.roll_s,
                {"namespace": ns, **severity["warning"]},
            ),
        ),
        _case(
            "an abort per pod in a roll (a batch revoked mid-way): quiet",
            [
                _series(
                    "processor_transactions_total",
                    f"0 {t.replicas * t.deployments}x{_steps(t.roll_s)}",
                    **pod,
                    result="aborted",
                ),
                _series(
                    "processor_transactions_total",
                    f"0+4x{_steps(t.roll_s)}",
                    **pod,
                    result="committed",
                ),
            ],
            _expect("ProcessorTransactionsAborting", t.roll_s),
        ),
        _case(
            "a broker stays out of the ISR for longer than its restart",
            [
                _series(
                    "kafka_broker_replicas_out_of_sync",
                    f"3x{_steps(t.broker_restart_s + 600)}",
                    namespace=ns,
                    pod="kafka-1",
                )
            ],
            _expect(
                "KafkaBrokerReplicasOutOfSync",
                t.broker_restart_s + 600,
                {"namespace": ns, "pod": "kafka-1", **severity["critical"]},
            ),
        ),
        _case(
            "a broker roll: out of sync until it catches up, then in sync: quiet",
            [
                _series(
                    "kafka_broker_replicas_out_of_sync",
                    f"3x{_steps(120)} 0x{_steps(t.broker_restart_s + 600)}",
                    namespace=ns,
                    pod="kafka-1",
                )
            ],
            _expect("KafkaBrokerReplicasOutOfSync", 120),
            _expect("KafkaBrokerReplicasOutOfSync", t.broker_restart_s + 600),
        ),
    ]


def promtool_tests(rule_file: str, t: AlertThresholds) -> dict[str, Any]:
    """A `promtool test rules` file of the cases, over `rule_file`."""
    return {
        "rule_files": [rule_file],
        "evaluation_interval": f"{STEP_S}s",
        "tests": pipeline_cases(t),
    }
