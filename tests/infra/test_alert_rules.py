"""The alerting rules: deployed where the PodMonitors go, the same rules `offline.alert_rules`
prints, thresholds from the stack's settings, and each pipeline alert proven by `promtool test
rules` to fire on its failure and stay quiet through a healthy restart or roll."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.pipeline_alerts import GROUP
from devkit.kube.go_tools import BIN as GO_TOOLS_BIN
from infra.alert_rules import alert_rules, alert_thresholds
from infra.config import build_stack_config
from offline import alert_rules as alert_rules_cli
from offline.render import RecordedStack, record_stack
from tests.alert_cases import pipeline_cases, promtool_tests

PROMTOOL = GO_TOOLS_BIN / "promtool"
needs_promtool = pytest.mark.skipif(
    not PROMTOOL.exists(), reason="no promtool (`make tools` builds it)"
)


def _rules(stack: RecordedStack) -> list[dict]:
    return [o for o in stack.kubernetes_objects() if o["kind"] == "PrometheusRule"]


def _pipeline(rules: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (group,) = [g for g in rules["groups"] if g["name"] == GROUP]
    return {rule["alert"]: rule for rule in group["rules"]}


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PROMTOOL), *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def _test_rules(
    rules: dict[str, Any], stack: str, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` of the cases over `rules`, annotations left out (promtool compares
    them whole; `check rules` parses their templates)."""
    bare = copy.deepcopy(rules)
    for group in bare["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(bare))
    thresholds = alert_thresholds(build_stack_config(stack, {}))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(promtool_tests("rules.yaml", thresholds)))
    return _promtool("test", "rules", "tests.yaml", cwd=tmp_path)


def test_pod_monitor_stacks_deploy_the_alerts_as_a_prometheus_rule() -> None:
    recorded = record_stack("prod", {"processor": {"metricsScrape": "podMonitor"}})
    (rule,) = _rules(recorded)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "streaming"
    config = build_stack_config("prod", {"processor": {"metricsScrape": "podMonitor"}})
    assert rule["spec"] == alert_rules(config)


def test_no_prometheus_rule_without_the_operator(stack: RecordedStack) -> None:
    assert _rules(stack) == []


def test_the_rule_file_printed_offline_is_the_one_deployed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert alert_rules_cli.main(["--stack", "prod"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == alert_rules(build_stack_config("prod", {}))


def test_an_unknown_stack_is_refused_with_the_stacks_there_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert alert_rules_cli.main(["--stack", "staging"]) == 2
    assert "Pulumi.staging.yaml not found" in capsys.readouterr().err


def test_the_thresholds_follow_the_stacks_restart_budget_and_size() -> None:
    dev = build_stack_config("dev", {})
    slower = build_stack_config("dev", {"processor": {"minReadySeconds": 70, "replicas": 3}})
    before, after = _pipeline(alert_rules(dev)), _pipeline(alert_rules(slower))
    budget = dev.processor.restart_budget_seconds
    assert before["ProcessorPartitionStalled"]["for"] == f"{budget}s"
    assert after["ProcessorPartitionStalled"]["for"] == f"{budget + 60}s"
    # A roll of 3 pods of the longer budget is the window the rebalances are counted in.
    assert f"[{3 * (budget + 60)}s]" in after["ProcessorRebalancingRepeatedly"]["expr"]
    assert 'namespace="streaming"' in before["ProcessorConsumerLagGrowing"]["expr"]
    more = build_stack_config("dev", {"topics": {"partitions": 12}})
    assert _pipeline(alert_rules(more))["ProcessorPartitionsUnowned"]["expr"].endswith("< 12")


def test_every_pipeline_alert_has_a_firing_and_a_quiet_case() -> None:
    thresholds = alert_thresholds(build_stack_config("dev", {}))
    cases = pipeline_cases(thresholds)
    fired = {c["alertname"] for case in cases for c in case["alert_rule_test"] if c["exp_alerts"]}
    quiet = {
        c["alertname"] for case in cases for c in case["alert_rule_test"] if not c["exp_alerts"]
    }
    alerts = set(_pipeline(alert_rules(build_stack_config("dev", {}))))
    assert fired == quiet == alerts


@needs_promtool
@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_promtool_passes_the_rule_files_and_their_templates(stack: str, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(alert_rules(build_stack_config(stack, {}))))
    checked = _promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_promtool
@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_each_alert_fires_on_its_failure_and_stays_quiet_through_a_healthy_roll(
    stack: str, tmp_path: Path
) -> None:
    tested = _test_rules(alert_rules(build_stack_config(stack, {})), stack, tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


@needs_promtool
def test_promtool_catches_an_alert_that_would_page_through_a_restart(tmp_path: Path) -> None:
    """The cases can fail: an alert that no longer waits out a restart fires in its quiet case."""
    rules = alert_rules(build_stack_config("dev", {}))
    _pipeline(rules)["ProcessorPartitionsUnowned"]["for"] = "30s"
    tested = _test_rules(rules, "dev", tmp_path)
    assert tested.returncode == 1
    assert "ProcessorPartitionsUnowned" in tested.stdout + tested.stderr
