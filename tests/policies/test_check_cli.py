"""`python -m offline.policy_check` end to end: recording, table, exit codes, SARIF read back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from offline.policy_check import main
from tests.infra.conftest import names_of
from tests.policies.conftest import REPO, stack_config


def _sarif(path: Path) -> dict:
    log = json.loads(path.read_text())
    assert log["version"] == "2.1.0"
    assert log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    return run


def _prod_config(tmp_path: Path, min_ready_seconds: int) -> Path:
    """Prod thresholds that fail on purpose: a 600 s batch for the grace period (downgraded to
    advisory), and minReadySeconds (mandatory) when `min_ready_seconds` is above prod's 30."""
    config = stack_config("prod")
    config["processor-min-ready-seconds"]["minSeconds"] = min_ready_seconds
    config["processor-grace-period"].update(enforcementLevel="advisory", longestBatchSeconds=600)
    path = tmp_path / "strict.json"
    path.write_text(json.dumps(config))
    return path


def test_dev_check_reports_only_its_plaintext_listeners_as_advisories_and_exits_0(
    tmp_path, policies
) -> None:
    sarif = tmp_path / "dev.sarif"
    result = subprocess.run(
        [sys.executable, "-m", "offline.policy_check", "--stack", "dev", "--sarif", str(sarif)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"policy check: stack dev, {len(policies)} policies" in result.stdout
    assert "thresholds from policies/config.dev.json" in result.stdout
    # Dev runs PLAINTEXT as a visible stack setting: one advisory per listener says so.
    assert "3 violations: 0 mandatory, 3 advisory" in result.stdout
    run = _sarif(sarif)
    assert [(r["ruleId"], r["level"]) for r in run["results"]] == [
        ("kafka-listener-encryption", "warning")
    ] * 3
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    assert len(rules) == len(policies)
    assert rules["group-session-timeout"]["defaultConfiguration"]["level"] == "error"
    assert rules["statefulset-spread"]["defaultConfiguration"]["level"] == "warning"
    assert "restart" in rules["group-session-timeout"]["fullDescription"]["text"]


def test_mandatory_violation_exits_1_with_table_and_sarif_pointing_at_the_source(
    tmp_path, capsys
) -> None:
    config_path = _prod_config(tmp_path, min_ready_seconds=600)
    sarif = tmp_path / "prod.sarif"

    code = main(["--stack", "prod", "--config", str(config_path), "--sarif", str(sarif)])

    out = capsys.readouterr().out
    assert code == 1
    block = out.split(f"StatefulSet streaming/{names_of('prod').application_id}\n", 1)[1]
    assert "MANDATORY  processor-min-ready-seconds" in block
    assert "spec.minReadySeconds is 30; required: >= 600" in block
    assert "ADVISORY   processor-grace-period" in block
    assert "2 violations: 1 mandatory, 1 advisory" in out
    results = {r["ruleId"]: r for r in _sarif(sarif)["results"]}
    assert set(results) == {"processor-min-ready-seconds", "processor-grace-period"}
    mandatory = results["processor-min-ready-seconds"]
    assert mandatory["level"] == "error"
    assert results["processor-grace-period"]["level"] == "warning"
    assert "required: >= 600" in mandatory["message"]["text"]
    location = mandatory["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "infra/processor.py"
    line = location["region"]["startLine"]
    source = (REPO / "infra" / "processor.py").read_text().splitlines()[line - 1]
    assert "stateful-streaming:processor:Processor" in source


def test_prod_check_is_clean(capsys) -> None:
    assert main(["--stack", "prod"]) == 0
    assert "0 violations: 0 mandatory, 0 advisory" in capsys.readouterr().out


def test_advisory_only_exits_0(tmp_path, capsys) -> None:
    config_path = _prod_config(tmp_path, min_ready_seconds=30)
    assert main(["--stack", "prod", "--config", str(config_path)]) == 0
    assert "1 violation: 0 mandatory, 1 advisory" in capsys.readouterr().out


def test_a_config_the_cli_would_reject_exits_2_naming_the_problem(tmp_path, capsys) -> None:
    for config, expected in [
        ({"no-such-policy": {}}, "'no-such-policy' is not a policy of this pack"),
        (
            {"changelog-segment-size": {"maxSegmentBytes": "64MiB"}},
            "changelog-segment-size.maxSegmentBytes: '64MiB' is not of type 'integer'",
        ),
        ({"kafka-quorum-size": {"minNode": 3}}, "thresholds of kafka-quorum-size: ['minNodes']"),
        ({"kafka-quorum-size": "strict"}, "kafka-quorum-size.enforcementLevel='strict'"),
    ]:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
        assert main(["--stack", "dev", "--config", str(path)]) == 2
        assert expected in capsys.readouterr().err


def test_a_refused_stack_still_writes_sarif_naming_the_setting(
    tmp_path, capsys, monkeypatch
) -> None:
    import offline.policy_check as policy_check
    import offline.render as render

    stack_file = tmp_path / "Pulumi.broken.yaml"
    stack_file.write_text(
        "config:\n"
        "  stateful-streaming:profile: dev\n"
        "  stateful-streaming:processor:\n"
        "    membershipMode: sometimes\n"
    )
    monkeypatch.setattr(render, "ROOT", tmp_path)
    monkeypatch.setattr(policy_check, "REPO", tmp_path)
    sarif = tmp_path / "broken.sarif"
    config = REPO / "policies" / "config.dev.json"
    assert main(["--stack", "broken", "--config", str(config), "--sarif", str(sarif)]) == 2
    assert "membershipMode" in capsys.readouterr().err
    run = _sarif(sarif)
    (result,) = run["results"]
    assert (result["ruleId"], result["level"]) == ("policy-check-refused", "error")
    assert "membershipMode" in result["message"]["text"]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "Pulumi.broken.yaml"
    assert location["region"]["startLine"] == 3  # the processor's settings


def test_a_refused_policy_config_still_writes_sarif(tmp_path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"no-such-policy": {}}))
    sarif = tmp_path / "refused.sarif"
    assert main(["--stack", "dev", "--config", str(path), "--sarif", str(sarif)]) == 2
    (result,) = _sarif(sarif)["results"]
    assert "'no-such-policy' is not a policy of this pack" in result["message"]["text"]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == str(path)
