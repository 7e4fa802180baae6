"""The processor end to end against the session's Apache Kafka, one member.

Each fixture below is one real run of `python -m app.processor`, building on the previous run's
state directory (the same pod restarted), so the whole module costs four Spark starts:

1. `first_run`: a new checkpoint; valid and malformed records; stopped with SIGTERM.
2. `restarted_run`: the same state directory; more records; then SIGKILL in the middle of a
   batch and a third start on the same state directory.
3. `lost_volume_run`: the state directory deleted (a lost PVC); more records.

Expected counts are computed from what the test produced, never from the processor.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.clients.waiting import wait_until
from app.processor.settings import INSTANCE_ID_KEY, checkpoint_dir
from app.processor.source_offsets import newest_batch
from tests.app.processor_harness import (
    REPO,
    Pipeline,
    ProcessorProcess,
    latest_counts,
    produce_page_views,
    produce_raw,
    read_committed,
    wait_for_counts,
)

pytestmark = pytest.mark.timeout(600)

INSTANCE = "page-view-counter-0"
PAGES = 40
RUN_TIMEOUT_S = 180.0

MALFORMED = [
    (None, b'{"page": "/page/1"}', "null-key"),
    (b"\xff\xfe", b'{"page": "x"}', "invalid-key"),
    (b"/page/1", None, "null-value"),
    (b"/page/1", b"not json", "invalid-value"),
    (b"/page/1", b"[1, 2]", "invalid-value"),
    (b"/page/1", b'{"page": "/page/2"}', "page-mismatch"),
]


@dataclass
class Scenario:
    """What the runs share: the pipeline, the pod's state directory, the truth so far."""

    pipeline: Pipeline
    workdir: Path
    state_dir: Path
    truth: Counter[str]

    @property
    def bootstrap(self) -> str:
        return self.pipeline.bootstrap

    def topic(self, role: str) -> str:
        return self.pipeline.topics[f"{role}.topic"]

    def produce(self, events: int, seed: int) -> None:
        self.truth.update(
            produce_page_views(self.bootstrap, self.topic("input"), events, PAGES, seed)
        )

    @property
    def forkserver_folder(self) -> Path:
        """Where the runs' fork servers keep their files: the pod's /tmp is this test's."""
        return self.workdir / "tmp" / "processor-forkserver"

    def forkserver_files(self) -> list[str]:
        """What is in the fork servers' folder now (paths relative to it)."""
        folder = self.forkserver_folder
        return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))

    def start(self, name: str) -> ProcessorProcess:
        properties = self.pipeline.properties(INSTANCE, self.state_dir)
        tmp = self.forkserver_folder.parent
        tmp.mkdir(exist_ok=True)
        return ProcessorProcess(self.workdir, name, properties, env={"TMPDIR": str(tmp)})

    def wait_exact(self, processor: ProcessorProcess) -> float:
        return wait_for_counts(
            processor, self.bootstrap, self.topic("output"), self.truth, RUN_TIMEOUT_S
        )


@dataclass
class RunReport:
    """What a test asserts on, gathered while the processor ran."""

    output: dict[str, int]
    changelog: dict[str, int]
    truth: dict[str, int]
    restore_records: float
    seconds_to_exact: float
    ready_status: int = 0
    exit_code: int | None = None
    stop_seconds: float = 0.0
    records_in: float = 0.0
    dlq_metric: float = 0.0
    changelog_records: int = 0
    log: str = ""
    log_when_ready: str = ""
    # The fork servers' folder after this run stopped.
    forkserver_files: list[str] = field(default_factory=list)
    # Only the run after a SIGKILL: what the killed run left, and what was there once this one
    # had started.
    forkserver_files_left_by_kill: list[str] = field(default_factory=list)
    forkserver_files_after_next_start: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def scenario(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    workdir = tmp_path_factory.mktemp("processor")
    return Scenario(Pipeline.create(kafka_bootstrap), workdir, workdir / "state", Counter())


def _report(scenario: Scenario, processor: ProcessorProcess, seconds: float) -> RunReport:
    return RunReport(
        output=latest_counts(scenario.bootstrap, scenario.topic("output")),
        changelog=latest_counts(scenario.bootstrap, scenario.topic("changelog")),
        truth=dict(scenario.truth),
        restore_records=processor.metric("processor_restore_records_total"),
        seconds_to_exact=seconds,
        records_in=processor.metric("processor_records_in_total"),
        dlq_metric=processor.metric("processor_dlq_records_total"),
    )


@pytest.fixture(scope="module")
def first_run(scenario: Scenario) -> Iterator[RunReport]:
    scenario.produce(3000, seed=1)
    produce_raw(scenario.bootstrap, scenario.topic("input"), [(k, v) for k, v, _ in MALFORMED])
    processor = scenario.start("first")
    try:
        seconds = scenario.wait_exact(processor)
        wait_until(
            lambda: processor.get("/ready")[0] == 200, 60, "/ready to answer 200", interval_s=0.5
        )
        # Lag per partition, exported by the group member: everything is committed now.
        wait_until(
            lambda: (
                processor.get("/metrics")[1].count("processor_consumer_lag_records{") == 2
                and processor.metric("processor_consumer_lag_records") == 0
            ),
            60,
            "the consumer lag of both partitions to reach 0",
            interval_s=0.5,
        )
        report = _report(scenario, processor, seconds)
        report.ready_status = processor.get("/ready")[0]
        report.exit_code, report.stop_seconds = processor.terminate()
        report.log = processor.log()
        report.forkserver_files = scenario.forkserver_files()
        yield report
    finally:
        processor.ensure_stopped()


@pytest.fixture(scope="module")
def restarted_run(scenario: Scenario, first_run: RunReport) -> Iterator[list[RunReport]]:
    """The same pod restarted twice on its state: once cleanly, once after SIGKILL mid-batch."""
    scenario.produce(1000, seed=2)
    second = scenario.start("second")
    third = None
    try:
        wait_until(
            lambda: second.get("/ready")[0] == 200,
            RUN_TIMEOUT_S,
            "/ready to answer 200",
            interval_s=0.5,
        )
        log_when_ready = second.log()
        clean = _report(scenario, second, scenario.wait_exact(second))
        clean.log_when_ready = log_when_ready
        # A batch is in flight when its offsets are logged and its commit is not yet.
        checkpoint = checkpoint_dir(scenario.state_dir)
        committed_before = _newest(checkpoint / "commits")
        scenario.produce(4000, seed=3)
        wait_until(
            lambda: (
                _newest(checkpoint / "offsets") > committed_before
                and _newest(checkpoint / "offsets") > _newest(checkpoint / "commits")
            ),
            RUN_TIMEOUT_S,
            "a micro-batch to start",
            # Often: a batch of these records can start and commit within half a second, and
            # none follows it to be caught in flight (this waited out its deadline once in CI).
            interval_s=0.02,
        )
        second.kill()
        left_by_kill = scenario.forkserver_files()
        third = scenario.start("third")
        after_kill = _report(scenario, third, scenario.wait_exact(third))
        after_kill.forkserver_files_left_by_kill = left_by_kill
        after_kill.forkserver_files_after_next_start = scenario.forkserver_files()
        after_kill.exit_code, after_kill.stop_seconds = third.terminate()
        after_kill.log = third.log()
        after_kill.forkserver_files = scenario.forkserver_files()
        yield [clean, after_kill]
    finally:
        second.ensure_stopped()
        if third is not None:
            third.ensure_stopped()


def _full_restore_run(scenario: Scenario, name: str, seed: int) -> Iterator[RunReport]:
    """A start that must restore every partition from the whole changelog (its checkpoint is
    gone or unreadable), with 1000 new records to count."""
    changelog_records = len(read_committed(scenario.bootstrap, scenario.topic("changelog")))
    scenario.produce(1000, seed=seed)
    processor = scenario.start(name)
    try:
        report = _report(scenario, processor, scenario.wait_exact(processor))
        report.exit_code, report.stop_seconds = processor.terminate()
        report.log = processor.log()
        report.changelog_records = changelog_records  # what a full restore has to read
        yield report
    finally:
        processor.ensure_stopped()


@pytest.fixture(scope="module")
def lost_volume_run(scenario: Scenario, restarted_run: list[RunReport]) -> Iterator[RunReport]:
    shutil.rmtree(scenario.state_dir)
    yield from _full_restore_run(scenario, "fourth", seed=4)


@pytest.fixture(scope="module")
def earlier_layout_run(scenario: Scenario, lost_volume_run: RunReport) -> Iterator[RunReport]:
    """The volume of a version with another state layout: its checkpoint under the old name."""
    checkpoint_dir(scenario.state_dir).rename(scenario.state_dir / "checkpoint")
    yield from _full_restore_run(scenario, "fifth", seed=5)


def _newest(directory: Path) -> int:
    batch = newest_batch(directory)
    return -1 if batch is None else batch


def test_counts_in_output_and_changelog_equal_the_truth(first_run: RunReport) -> None:
    assert first_run.output == first_run.truth
    assert first_run.changelog == first_run.truth
    assert first_run.records_in == sum(first_run.truth.values()) + len(MALFORMED)
    assert first_run.ready_status == 200
    print(f"first run: exact {first_run.seconds_to_exact:.1f} s after start")


def test_malformed_records_go_to_the_dlq_with_their_reason(
    scenario: Scenario, first_run: RunReport
) -> None:
    dlq = read_committed(scenario.bootstrap, scenario.topic("dlq"))
    found = Counter(r.headers["dlq.reason"].decode() for r in dlq)
    assert found == Counter(reason for _, _, reason in MALFORMED)
    assert first_run.dlq_metric == len(MALFORMED)
    for record in dlq:
        assert record.headers["dlq.source.topic"].decode() == scenario.topic("input")
        assert int(record.headers["dlq.source.partition"]) in range(scenario.pipeline.partitions)
        assert int(record.headers["dlq.source.offset"]) >= 0
    # The records are forwarded unchanged.
    assert sorted((r.key or b"", r.value or b"") for r in dlq) == sorted(
        (k or b"", v or b"") for k, v, _ in MALFORMED
    )


def test_sigterm_finishes_and_exits_0(first_run: RunReport) -> None:
    assert first_run.exit_code == 0, first_run.log[-3000:]
    assert "query stopped" in first_run.log
    print(f"first run: stopped {first_run.stop_seconds:.1f} s after SIGTERM")


def test_restart_on_the_same_state_restores_nothing(restarted_run: list[RunReport]) -> None:
    clean, after_kill = restarted_run
    assert clean.output == clean.truth
    assert clean.restore_records == 0
    assert after_kill.restore_records == 0
    print(f"restart: exact {clean.seconds_to_exact:.1f} s after start")


def test_a_restarted_static_member_is_ready_only_after_a_batch_finished(
    restarted_run: list[RunReport],
) -> None:
    # Its partitions and state are held from the start, but the query processes nothing before
    # its first batch (tens of seconds): Ready earlier would let a roll stop the next pod.
    clean, _ = restarted_run
    assert re.search(r"batch \d+: \d+ rows in \d+ ms", clean.log_when_ready), clean.log_when_ready[
        -3000:
    ]


def test_sigkill_mid_batch_loses_and_doubles_nothing(restarted_run: list[RunReport]) -> None:
    _, after_kill = restarted_run
    assert after_kill.output == after_kill.truth
    assert after_kill.changelog == after_kill.truth
    assert after_kill.exit_code == 0, after_kill.log[-3000:]


def test_a_stopped_instance_leaves_no_fork_server_file(
    first_run: RunReport, restarted_run: list[RunReport]
) -> None:
    _, after_kill = restarted_run
    assert first_run.exit_code == after_kill.exit_code == 0
    assert first_run.forkserver_files == []
    assert after_kill.forkserver_files == []


def test_a_killed_instances_fork_server_files_are_removed_by_the_next_start(
    restarted_run: list[RunReport],
) -> None:
    _, after_kill = restarted_run
    left = after_kill.forkserver_files_left_by_kill
    # SIGKILL runs no cleanup: its folder, lock, launcher and socket stay behind...
    killed = {name.split("/")[0] for name in left}
    assert len(killed) == 1, left
    assert {name.split("/", 1)[-1] for name in left} >= {"owner.lock", "python", "server.sock"}
    # ...until the next instance starts: only its own folder is there then.
    now = after_kill.forkserver_files_after_next_start
    assert now and not killed & {name.split("/")[0] for name in now}, now
    assert "removed 1 fork server files of instances that are gone" in after_kill.log


def test_lost_state_volume_is_rebuilt_from_the_changelog(lost_volume_run: RunReport) -> None:
    assert lost_volume_run.output == lost_volume_run.truth
    assert lost_volume_run.changelog == lost_volume_run.truth
    # Every changelog record is still there (the active segment, 64 MiB, is never compacted):
    # the restore reads them all.
    assert lost_volume_run.restore_records == lost_volume_run.changelog_records > 0
    assert "state restored from" in lost_volume_run.log


def test_a_checkpoint_of_another_state_layout_is_removed_and_restored_from_the_changelog(
    scenario: Scenario, earlier_layout_run: RunReport
) -> None:
    assert earlier_layout_run.output == earlier_layout_run.truth
    assert earlier_layout_run.changelog == earlier_layout_run.truth
    assert earlier_layout_run.restore_records == earlier_layout_run.changelog_records > 0
    assert not (scenario.state_dir / "checkpoint").exists()
    assert checkpoint_dir(scenario.state_dir).is_dir()
    assert "checkpoint: its state has another layout than this version's" in earlier_layout_run.log


def test_a_bad_setting_fails_at_start_naming_it(tmp_path: Path) -> None:
    pipeline = Pipeline("127.0.0.1:9", "bad-settings", 1)
    properties = tmp_path / "bad.properties"
    properties.write_text(
        pipeline.properties(INSTANCE, tmp_path / "state")
        + "trigger.interval.ms=soon\n"
        + f"{INSTANCE_ID_KEY.replace('instance', 'instanse')}=x\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "app.processor", "--properties", str(properties)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "trigger.interval.ms" in result.stderr
    assert "'soon'" in result.stderr
    assert INSTANCE_ID_KEY in result.stderr  # the close match offered for the misspelt key
    assert "joining group" not in result.stderr  # it failed before any client started
