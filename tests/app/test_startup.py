"""What makes a start fast, and the clock that shows where a start goes: the worker daemon that
preloads without a thread, the driver's class archive setting, the start's phase breakdown."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.processor import class_archive, class_archive_build
from app.processor.kafka_source import SCHEMA
from app.processor.pipeline import _with_class_archive
from app.processor.settings import parse_settings
from app.processor.startup import StartupClock, read_start_line

REPO = Path(__file__).resolve().parents[2]
BASE = """\
application.id=page-view-counter
bootstrap.servers=localhost:9092
input.topic=page-views
output.topic=page-view-counts
changelog.topic=page-view-counter-counts-changelog
dlq.topic=page-view-counter-dlq
consumer.group.instance.id=page-view-counter-0
producer.transactional.id=page-view-counter-0
"""


def _python(code: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS",)}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra_env)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


def test_the_worker_daemon_preloads_the_workers_imports_without_starting_a_thread() -> None:
    # A fork copies one thread: a thread started by an import would be missing in every worker.
    result = _python(
        "import sys\n"
        "from app.processor.python_daemon import PRELOADED, preload, threads\n"
        "safe = preload()\n"
        "missing = [m for m in PRELOADED if m not in sys.modules]\n"
        "print(safe, threads(), missing)\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "1", "[]"]


@pytest.mark.parametrize("setting", ["true", "false"])
def test_the_worker_daemon_exempts_its_preloaded_imports_from_collection(setting: str) -> None:
    # A full collection walks every tracked object; what is frozen is not tracked any more.
    result = _python(
        "import gc\n"
        "from app.processor.python_daemon import freeze_preloaded, preload\n"
        "preload()\n"
        "tracked = len(gc.get_objects())\n"
        "froze = freeze_preloaded()\n"
        "print(froze, tracked, gc.get_freeze_count(), len(gc.get_objects()))\n",
        PROCESSOR_PYTHON_GC_FREEZE=setting,
    )
    assert result.returncode == 0, result.stderr
    froze, tracked, frozen, tracked_after = result.stdout.split()
    assert int(tracked) > 50_000  # pandas, pyarrow and pyspark.sql
    if setting == "true":
        assert froze == "True"
        assert int(frozen) > int(tracked) // 2  # less the imports' garbage, collected first
        assert int(tracked_after) < 100
    else:
        assert (froze, frozen) == ("False", "0")
        assert int(tracked_after) > int(tracked) // 2


def test_pyarrow_starts_a_thread_at_import_unless_the_daemon_configures_it() -> None:
    # Why the daemon sets its environment first: without it the preload would not be fork-safe.
    result = _python("import os, pyarrow\nprint(len(os.listdir('/proc/self/task')))\n")
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 1


def test_make_setup_built_this_environments_class_archive() -> None:
    """`make setup` (which `make test` runs first) builds the archive, and a failed build only
    logs so that a machine without it still runs: a change that breaks the training run would
    otherwise cost every start its seconds without a word."""
    path = class_archive.default_path()
    assert path.exists(), (
        f"no Spark class archive at {path}: the training run failed, see .venv/class-archive.log "
        "(`python -m app.processor.class_archive_build` rebuilds it)"
    )


def test_the_class_archive_setting_names_none_this_environments_or_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "env"))
    built = tmp_path / "env" / "share" / "processor" / "spark-classes.jsa"
    assert class_archive.default_path() == built
    assert class_archive.resolve("") is None
    assert class_archive.resolve(" ") is None
    assert class_archive.resolve("auto") is None  # not built in this environment: none
    built.parent.mkdir(parents=True)
    built.write_bytes(b"an archive")
    assert class_archive.resolve("auto") == built
    assert class_archive.resolve(str(tmp_path / "x.jsa")) == tmp_path / "x.jsa"


def test_the_driver_maps_an_existing_class_archive_beside_its_own_java_options(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "spark-classes.jsa"
    archive.write_bytes(b"an archive")
    settings = parse_settings(
        BASE + "spark.driver.extraJavaOptions=-Dfile.encoding=UTF-8\n",
        overrides={"class.data.archive": str(archive)},
    )
    conf = _with_class_archive(settings)
    assert conf["spark.driver.extraJavaOptions"] == (
        f"-Dfile.encoding=UTF-8 -XX:SharedArchiveFile={archive}"
    )
    assert settings.spark_conf()["spark.driver.extraJavaOptions"] == "-Dfile.encoding=UTF-8"


def test_a_missing_class_archive_starts_without_it_and_says_how_to_build_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    archive = tmp_path / "missing.jsa"
    settings = parse_settings(BASE, overrides={"class.data.archive": str(archive)})
    with caplog.at_level(logging.WARNING):
        conf = _with_class_archive(settings)
    assert "SharedArchiveFile" not in conf["spark.driver.extraJavaOptions"]
    assert f"class.data.archive={archive}: no such file" in caplog.text
    assert "python -m app.processor.class_archive_build" in caplog.text


def test_the_start_clock_counts_from_the_process_start_not_from_its_import() -> None:
    result = _python(
        "import time\ntime.sleep(1.5)\n"
        "from app.processor.startup import process_age_s\nprint(process_age_s())\n"
    )
    assert result.returncode == 0, result.stderr
    assert 1.5 <= float(result.stdout) < 60


def test_the_start_breakdown_names_each_phase_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = StartupClock()
    clock.mark("SparkSession")
    clock.mark("query start")
    with caplog.at_level(logging.INFO, logger="app.processor.startup"):
        total = clock.report("first batch", time.monotonic())
        clock.report("first batch", time.monotonic())
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert lines[0].startswith(f"first batch committed {total:.1f} s after the process started: ")
    phases = [part.rsplit(" ", 2) for part in lines[0].split(": ", 1)[1].split(", ")]
    assert [name for name, _, _ in phases] == ["SparkSession", "query start", "first batch"]
    # The phases cover the start from the process start on, without a gap (0.05 s rounding each).
    assert sum(float(took) for _, took, _ in phases) == pytest.approx(total, abs=0.15)


def test_a_pods_log_gives_its_start_back_phase_by_phase(caplog: pytest.LogCaptureFixture) -> None:
    # The real node's bench reads a pod's start from `kubectl logs`, among the other lines.
    clock = StartupClock()
    clock.mark("interpreter and imports")
    clock.mark("SparkSession")
    with caplog.at_level(logging.INFO, logger="app.processor.startup"):
        total = clock.report("first batch", time.monotonic())
    text = f"a line before\n2026-12-07 INFO {caplog.records[0].getMessage()}\na line after\n"
    read = read_start_line(text)
    assert read is not None
    assert read[0] == pytest.approx(total, abs=0.05)
    assert list(read[1]) == ["interpreter and imports", "SparkSession", "first batch"]
    assert read_start_line("a processor still starting\n") is None


def test_the_training_query_reads_every_column_of_the_real_source() -> None:
    # A source field the training lacks fails the archive build, which `make setup` only warns
    # about: every start would then go without the archive.
    assert list(class_archive_build.TRAINING_COLUMNS) == [field.name for field in SCHEMA.fields]
