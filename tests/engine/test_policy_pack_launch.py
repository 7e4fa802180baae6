"""`pulumi preview --policy-pack policies/analyzer` on a clone without `make setup`: it stops at
once and says what to run (the CLI waited forever for the pack directory's missing venv)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pulumi import automation as auto

from devkit.kube.engine_stack import ROOT, EngineStack, tools_missing


def test_the_pack_without_its_environment_stops_the_preview_at_once_and_says_what_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if tools_missing("pulumi"):
        pytest.fail("needs the pulumi CLI of `make tools`")
    # What a fresh clone has: no .venv/infra for the pack to run in.
    monkeypatch.setenv("POLICY_PACK_PYTHON", str(tmp_path / "no-venv" / "bin" / "python"))
    stack = EngineStack(tmp_path / "workspace", "dev", str(tmp_path / "no-cluster"), {})
    start = time.monotonic()
    with pytest.raises(auto.CommandError) as failed:
        stack.preview(ROOT / "policies" / "config.dev.json")
    seconds = time.monotonic() - start
    message = str(failed.value)
    assert "run `make setup`" in message, message
    assert "policies/analyzer" in message and "failed to start" in message, message
    # A generous bound for a loaded machine; the old way never ended.
    assert seconds < 120, f"{seconds:.0f} s"
