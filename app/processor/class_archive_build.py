"""Build the Spark driver's class-data-sharing archive (AppCDS): a few seconds off every start.

    python -m app.processor.class_archive_build [--out PATH]

A Spark driver loads about 20,000 classes before its first batch; on 2 cores that is a third of
its start. Java 17 can map the classes an earlier run loaded from an archive instead
(`-XX:SharedArchiveFile`, JEP 350). This builds that archive with a training run of the
processor's own query shape (rate source -> the keyed state's stateful operator on RocksDB ->
foreachBatch) under the processor's Spark defaults, so its classes are the ones a real start
loads. The archive is only valid for the JVM and the jars it was built with, so it lives in the
Python environment that holds those jars (`default_path()`), and the image builds it in its own
layer. A stale or missing archive costs only the seconds: the JVM then loads classes as usual.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from app.clients.waiting import poll_until
from app.processor.aggregation import Aggregation, load_aggregation
from app.processor.class_archive import default_path
from app.processor.input_sample import input_sample_for
from app.processor.kafka_source import SCHEMA
from app.processor.keyed_state import aggregate
from app.processor.pipeline import spark_session
from app.processor.settings import parse_settings
from contract.java_properties import format_properties

log = logging.getLogger("app.processor.class_archive_build")

# The training query runs this many batches (the first is the slow one that loads most classes).
TRAINING_BATCHES = 3
TRAINING_TIMEOUT_S = 300.0
# The JVM writes the archive while it exits, after the Python side is gone.
DUMP_TIMEOUT_S = 180.0
PID_FILE = "jvm.pid"
# The training source's rows, as SQL over the rate source's `value`: one column per field of the
# real source's schema (`kafka_source.SCHEMA`, in its order), cast to that field's type, so the
# training runs the processor's own plan (a new source field fails here, by name, not later).
TRAINING_COLUMNS = {
    "key": "concat('/page/', cast(value % 50 as string))",
    "value": "null",  # the aggregation's example partial (`training_columns`)
    "partition": "value % 2",
    "offset": "value",
    "records": "1",
    "kind": "'input'",
    "restore_epoch": "0",
    "reason": "null",
    "read_us": "0",
}


def training_columns(aggregation: Aggregation) -> dict[str, str]:
    """`TRAINING_COLUMNS` with the value every input row carries: the partial the aggregation
    folds from a record of its sample (a fork's new aggregation is trained on its own data)."""
    sample = input_sample_for(aggregation)
    key = sample.key_name(0)
    partial = aggregation.fold(
        None, key.encode("utf-8"), sample.generate_value(key, random.Random(0), 0)
    )
    if isinstance(partial, str):
        raise ValueError(
            f"{type(sample).__name__}.generate_value() breaks its aggregation's input contract "
            f"({partial}): return a value its fold accepts"
        )
    return {**TRAINING_COLUMNS, "value": f"unhex('{aggregation.encode_partial(partial).hex()}')"}


def _train(out: Path, work_dir: Path) -> int:
    """Run the training query in this process's driver JVM, which dumps to `out` at exit;
    the JVM's pid."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    training = {
        "application.id": "class-archive-training",
        "bootstrap.servers": "localhost:9092",  # never connected to
        "input.topic": "in",
        "output.topic": "out",
        "changelog.topic": "changelog",
        "dlq.topic": "dlq",
        "producer.transactional.id": "class-archive-training",
        "consumer.group.instance.id": "class-archive-training",
        "state.dir": str(work_dir),
        "spark.local.dir": str(work_dir / "spark"),
        "spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={out}",
    }
    settings = parse_settings(format_properties(training), overrides={"class.data.archive": ""})
    aggregation = load_aggregation(settings.aggregation_class)
    columns = training_columns(aggregation)
    spark = spark_session(settings)
    events = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", "200")
        .load()
        .select(
            *(
                F.expr(columns[field.name]).cast(field.dataType).alias(field.name)
                for field in SCHEMA.fields
            )
        )
    )
    batches: list[int] = []

    def run_batch(batch: DataFrame, batch_id: int) -> None:
        batch.toArrow()  # runs the plan, as the sink does
        batches.append(batch_id)

    query = (
        aggregate(events, aggregation)
        .writeStream.outputMode("update")
        .foreachBatch(run_batch)
        .trigger(processingTime="500 milliseconds")
        .option("checkpointLocation", str(work_dir / "checkpoint"))
        .start()
    )
    deadline = time.monotonic() + TRAINING_TIMEOUT_S
    while len(batches) < TRAINING_BATCHES and query.isActive and time.monotonic() < deadline:
        # pyspark annotates the timeout int, but takes float seconds (it waits timeout * 1000 ms).
        query.awaitTermination(0.5)  # type: ignore[arg-type]
    if query.exception() is not None or len(batches) < TRAINING_BATCHES:
        raise RuntimeError(f"the training query ran {len(batches)} batches: {query.exception()}")
    query.stop()
    pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
    spark.stop()
    return pid


def build(out: Path) -> Path:
    """Build the archive at `out` (replacing it); `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="class-archive-") as work_dir:
        # A child process: its driver JVM dumps the archive when it exits, after the child.
        child = subprocess.run(
            [
                sys.executable,
                "-m",
                "app.processor.class_archive_build",
                "--train",
                str(partial),
                "--work-dir",
                work_dir,
            ],
            check=False,
        )
        pid_file = Path(work_dir) / PID_FILE
        if child.returncode != 0 or not pid_file.exists():
            raise RuntimeError(f"the training run failed (exit code {child.returncode})")
        jvm = int(pid_file.read_text(encoding="ascii"))
        if not poll_until(lambda: not _alive(jvm), DUMP_TIMEOUT_S, interval_s=0.5):
            raise RuntimeError(
                f"the driver JVM (pid {jvm}) did not exit within {DUMP_TIMEOUT_S:g} s"
            )
    if not partial.exists():
        raise RuntimeError(
            f"the driver JVM wrote no archive at {partial}: does this Java support "
            "-XX:ArchiveClassesAtExit (Java 13 or later)?"
        )
    partial.replace(out)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Build the archive (or, with --train, run the training query); the exit code."""
    parser = argparse.ArgumentParser(prog="python -m app.processor.class_archive_build")
    parser.add_argument("--out", type=Path, default=default_path())
    parser.add_argument("--train", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.train is not None:
        pid = _train(args.train, args.work_dir)
        (args.work_dir / PID_FILE).write_text(str(pid), encoding="ascii")
        return 0
    started = time.monotonic()
    log.info("building the Spark driver's class archive %s (a training run: a minute)", args.out)
    try:
        out = build(args.out)
    except RuntimeError as exc:
        log.error("no class archive built: %s; the processor starts without one", exc)
        return 1
    log.info(
        "class archive %s: %.0f MB in %.0f s",
        out,
        out.stat().st_size / 1e6,
        time.monotonic() - started,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
