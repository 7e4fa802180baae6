"""The rendered manifests of both stacks pass the Kubernetes schemas and checkov."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from offline.render import main as render_main
from tests.infra.conftest import names_of

ROOT = Path(__file__).resolve().parents[2]
CHECKOV = ROOT / ".venv" / "checkov" / "bin" / "checkov"
# The oldest version the project supports (claim retention is beta there) and the newest
# the installed kubernetes-validate knows.
KUBERNETES_VERSIONS = ["1.31.0", latest_version()]


# Objects per stack; a pair adds a side's six (StatefulSet, Service, PDB, ServiceAccount,
# NetworkPolicy, properties) and, secured, its user's Secret and the switch's.
OBJECTS = {"dev": 18, "prod": 26, "dev-pair": 24, "prod-pair": 34}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("stack", list(OBJECTS))
def test_manifests_pass_strict_schema_validation(
    manifests: dict[str, Path], stack: str, version: str
) -> None:
    files = sorted(manifests[stack].glob("*.yaml"))
    assert len(files) == OBJECTS[stack]
    for path in files:
        # Raises ValidationError naming the field on any unknown or mistyped property.
        kubernetes_validate.validate(yaml.safe_load(path.read_text()), version, strict=True)


def test_schema_validation_rejects_what_it_should(manifests: dict[str, Path]) -> None:
    statefulset = yaml.safe_load((manifests["dev"] / "statefulset-kafka.yaml").read_text())
    statefulset["spec"]["minReadySecond"] = 10
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(statefulset, KUBERNETES_VERSIONS[0], strict=True)


@pytest.mark.skipif(
    not CHECKOV.exists(), reason=f"checkov's own environment is missing ({CHECKOV}): make setup"
)
@pytest.mark.timeout(300)
def test_checkov_finds_no_failed_check(manifests: dict[str, Path]) -> None:
    result = subprocess.run(
        [
            str(CHECKOV),
            "--framework",
            "kubernetes",
            "--skip-download",
            "--output",
            "json",
            "-d",
            str(manifests["dev"].parent),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    report = json.loads(result.stdout)
    summary = report["summary"] if isinstance(report, dict) else report[0]["summary"]
    failed = report["results"]["failed_checks"] if isinstance(report, dict) else []
    assert summary["failed"] == 0, [
        (check["check_id"], check["resource"], check["check_name"]) for check in failed
    ]
    assert summary["passed"] > 500
    # Every skip is a deliberate, annotated exception with its reason: only dev's, whose images
    # are local builds by tag that kind loads (prod pins by digest and pulls: no skip).
    skipped = report["results"]["skipped_checks"] if isinstance(report, dict) else []
    by_stack = {
        stack: {c["check_id"] for c in skipped if f"/{stack}/" in c["file_abs_path"]}
        for stack in OBJECTS
    }
    dev_skips = {"CKV_K8S_43", "CKV_K8S_15"}
    assert by_stack == {"dev": dev_skips, "prod": set(), "dev-pair": dev_skips, "prod-pair": set()}


def test_render_cli_writes_one_manifest_per_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert render_main(["--stack", "prod", "--out", str(tmp_path)]) == 0
    files = sorted(p.name for p in tmp_path.glob("*.yaml"))
    assert "statefulset-kafka.yaml" in files
    assert f"statefulset-{names_of('prod').application_id}.yaml" in files
    assert len(files) == OBJECTS["prod"]
    assert f"{OBJECTS['prod']} manifests" in capsys.readouterr().out
    # A Pulumi secret is written as `pulumi preview` shows it, never its value.
    tls = yaml.safe_load((tmp_path / "secret-kafka-tls.yaml").read_text())
    assert set(tls["stringData"].values()) == {"[secret]"}


def test_render_runs_as_a_module(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "offline.render", "--stack", "dev", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    kafka = yaml.safe_load((tmp_path / "statefulset-kafka.yaml").read_text())
    assert kafka["metadata"]["namespace"] == "streaming"
