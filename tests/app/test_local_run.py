"""The README's main command, `python -m devkit.local`, run as a newcomer runs it (its own
3-node Apache Kafka, instances in hand-off mode rolled once mid-run), smaller and with another
pipeline's aggregation (distinct users per product: a set as the state, a size that repeats as
the output): the roll completes, the final check passes and the report and logs exist.

LONG: two real processor instances (Spark JVMs) start, are rolled one after the other, and stop;
a few minutes on 2 cores. Timings are printed by the command, never asserted here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.stack_pipeline import PROJECT, read_stack_pipeline, stack_file
from contract.topic_specs import PipelineNames
from devkit.local.instances import REPO_ROOT

# The local run's pipeline: the dev stack's, as the run reads it (a fork renames it there).
APP = read_stack_pipeline(stack_file(REPO_ROOT, "dev")).names.application_id

RUN_TIMEOUT_S = 600


def _rolled_run(state: Path, *options: str) -> tuple[str, dict[str, Any]]:
    """The README's command, small, rolled once: its output and its report, both checked to
    say the run was exact and the roll complete."""
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    run = subprocess.run(
        [sys.executable, "-m", "devkit.local", "--instances", "2", "--partitions", "2",
         "--rate", "50", "--keys", "20", "--roll-after", "2", "--min-ready-s", "2",
         "--until-rolled", "--state-dir", str(state), *options],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    print(run.stdout[-4000:])
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "final check: OK" in run.stdout
    report = json.loads((state / "report.json").read_text())
    check = report["check"]
    assert check["ok"] and check["duplicates"] == 0
    assert check["produced"] == report["produced"]["valid"] > 0
    assert check["keys"] == len(report["produced"]["expected"]) > 0
    roll = report["roll"]
    assert roll["completed"] and roll["error"] is None, roll
    assert set(roll["longest_gap_s"]) == {"0", "1"}, roll
    assert roll["max_gap_s"] == max(roll["longest_gap_s"].values()) > 0, roll
    for instance in report["instances"].values():
        assert instance["exit_code"] == 0
        assert Path(instance["log"]).stat().st_size > 0
    assert report["dead_letters"]["ok"] is True, report["dead_letters"]
    # Every broker began a controlled shutdown; none outlived the deadline (the last one may
    # outlive its quorum: `KraftCluster.shutdown`).
    assert "node(s) stopped by controlled shutdown" in run.stdout
    assert "after SIGTERM" not in run.stdout
    return run.stdout, report


def test_local_run_rolls_the_instances_and_its_output_is_exact_for_the_chosen_pipeline(
    tmp_path: Path,
) -> None:
    state = tmp_path / "local"
    stdout, report = _rolled_run(
        state,
        "--aggregation-class",
        "app.pipelines.distinct_users.DistinctUsers",
        "--malformed-ratio",
        "0.05",
    )
    assert f"{APP}-0" in stdout and f"{APP}-1" in stdout
    # The aggregation's malformed records reached the dead-letter topic, each once.
    sent = report["dead_letters"]["sent"]
    assert sum(sent.values()) > 0 and report["dead_letters"]["found"] == sent
    assert all(key.startswith("p-") for key in report["produced"]["expected"])  # product ids
    assert report["local_cluster"] is True
    assert "roll done in" in stdout
    for i in (0, 1):
        properties = (state / "config" / f"{APP}-{i}.properties").read_text()
        assert "membership.mode=handoff" in properties
        assert "num.standby.replicas=1" in properties
        assert f"state.dir={state / f'{APP}-{i}'}" in properties


def test_a_kip848_group_rolls_exactly_with_its_own_session_set_on_the_broker(
    tmp_path: Path,
) -> None:
    """Kafka 4's consumer group protocol: the broker assigns, the reconciler sets the group's
    own session and heartbeat, and the instances have none of the classic client settings."""
    state = tmp_path / "local"
    stdout, _ = _rolled_run(state, "--group-protocol", "consumer")
    assert f"{APP}  set     consumer.session.timeout.ms: the brokers' default ->" in stdout
    for i in (0, 1):
        properties = (state / "config" / f"{APP}-{i}.properties").read_text()
        assert "consumer.group.protocol=consumer" in properties
        assert "consumer.session.timeout.ms" not in properties
        assert "consumer.heartbeat.interval.ms" not in properties


def test_more_instances_than_partitions_is_refused_with_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from devkit.local.__main__ import EXIT_USAGE, parse_args

    with pytest.raises(SystemExit) as exited:
        parse_args(["--instances", "5", "--partitions", "4"])
    assert exited.value.code == EXIT_USAGE
    error = capsys.readouterr().err
    assert "--instances 5 > --partitions 4" in error
    assert "never becomes ready" in error


def test_local_run_runs_the_stacks_pipeline_unless_told_another_aggregation(
    tmp_path: Path,
) -> None:
    from devkit.local.__main__ import parse_args

    revenue = "app.pipelines.product_revenue.ProductRevenue"
    stack = tmp_path / "Pulumi.shop.yaml"
    config = {
        f"{PROJECT}:processor.applicationId": "product-revenue",  # as `pulumi new` writes it
        f"{PROJECT}:topics": {"inputTopic": "orders", "outputTopic": "revenue-per-product"},
        f"{PROJECT}:processor": {"properties": {"aggregation.class": revenue}},
    }
    stack.write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    args = parse_args(["--stack", str(stack)])
    assert args.names == PipelineNames("product-revenue", "orders", "revenue-per-product")
    assert args.aggregation_class == revenue
    other = "app.pipelines.distinct_users.DistinctUsers"
    assert (
        parse_args(["--stack", str(stack), "--aggregation-class", other]).aggregation_class == other
    )


def test_an_unknown_stack_is_refused_naming_the_stacks_there_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from devkit.local.__main__ import EXIT_USAGE, parse_args

    with pytest.raises(SystemExit) as exited:
        parse_args(["--stack", "nope"])
    assert exited.value.code == EXIT_USAGE
    assert "--stack nope: stack 'nope': no Pulumi.nope.yaml" in capsys.readouterr().err


def test_local_run_defaults_to_the_dev_stacks_partitions() -> None:
    from devkit.local.__main__ import parse_args

    assert parse_args([]).partitions == 6


def test_local_run_keeps_a_copy_on_every_other_instance_as_prod_does() -> None:
    from devkit.local.__main__ import parse_args

    assert parse_args([]).standby_replicas == 2
    assert parse_args(["--instances", "2"]).standby_replicas == 1
    assert parse_args(["--standby-replicas", "1"]).standby_replicas == 1


@pytest.mark.parametrize(
    "marker",
    ["change(s) applied", "Ctrl-C stops."],
    ids=["before-the-instances", "while-they-start"],
)
def test_a_ctrl_c_at_any_moment_of_the_start_stops_cleanly(marker: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    run = subprocess.Popen(
        [sys.executable, "-m", "devkit.local", "--instances", "2", "--partitions", "2",
         "--rate", "30", "--keys", "10", "--state-dir", str(tmp_path / "local")],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # the Ctrl-C goes to it alone
    )  # fmt: skip
    assert run.stdout is not None
    seen: list[str] = []
    try:
        for line in run.stdout:  # ends when the run does: no deadline needed for the marker
            seen.append(line)
            if marker in line:
                run.send_signal(signal.SIGINT)
                break
        rest, _ = run.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    output = "".join(seen) + rest
    assert any(marker in line for line in seen), output[-4000:]
    assert run.returncode == 0, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    assert "SIGINT: stopping" in output
    assert "final check: OK" in output or "nothing to check" in output, output[-4000:]
