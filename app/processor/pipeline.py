"""The Spark side: the session and the streaming query (source -> keyed state -> sink)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from app.processor import class_archive
from app.processor.aggregation import load_aggregation
from app.processor.assignment_file import assignment_path
from app.processor.kafka_source import SOURCE_NAME, KafkaGroupSource, SourceOptions
from app.processor.keyed_state import aggregate
from app.processor.settings import INSTANCE_ID_KEY, ProcessorSettings
from app.processor.sink import TransactionalSink

log = logging.getLogger(__name__)

_STATE_SERVER_LOGGER = (
    "org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer"
)

# Only the group member holds the instance id; the source's clients never join the group.
_MEMBER_ONLY = (INSTANCE_ID_KEY.removeprefix("consumer."),)


def spark_session(settings: ProcessorSettings, python_exec: Path | None = None) -> SparkSession:
    """The local Spark application of this instance, with every `spark.*` setting; its Python
    processes start with `python_exec` (the fork server's launcher) if given."""
    # Spark's Python workers (the source's reader, the stateful processor) must run in this
    # environment, not whatever `python3` is first on the PATH.
    if python_exec is not None:
        os.environ["PYSPARK_PYTHON"] = str(python_exec)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(settings.application_id)
    for key, value in _with_class_archive(settings).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    # It warns on every read of a state variable that has no value yet (a page's first view):
    # dozens of lines a minute that say nothing.
    log4j = spark._jvm.org.apache.logging.log4j  # type: ignore[union-attr]
    log4j.core.config.Configurator.setLevel(_STATE_SERVER_LOGGER, log4j.Level.ERROR)
    spark.dataSource.register(KafkaGroupSource)
    return spark


def _with_class_archive(settings: ProcessorSettings) -> dict[str, str]:
    """The `spark.*` settings, the driver JVM told to map the class archive if there is one."""
    conf = settings.spark_conf()
    archive = settings.class_data_archive
    if archive is None:
        log.info("no Spark class archive (class.data.archive): the driver loads every class")
    elif not archive.is_file():
        log.warning(
            "class.data.archive=%s: no such file; the driver starts without it (3-6 s slower). "
            "Build it with: python -m app.processor.class_archive_build --out %s",
            archive,
            archive,
        )
    else:
        key = "spark.driver.extraJavaOptions"
        conf[key] = " ".join(filter(None, (conf.get(key), class_archive.java_options(archive))))
    return conf


def source_options(settings: ProcessorSettings) -> SourceOptions:
    """What the Kafka source's reader processes need to know."""
    config = {k: v for k, v in settings.consumer_config().items() if k not in _MEMBER_ONLY}
    # The readers fetch ranges known to exist: waiting for more bytes only delays each fetch.
    config.setdefault("fetch.wait.max.ms", "10")
    return SourceOptions(
        input_topic=settings.input_topic,
        changelog_topic=settings.changelog_topic,
        assignment_path=str(assignment_path(settings.state_dir)),
        checkpoint_path=str(settings.checkpoint_dir),
        max_records_per_batch=settings.max_records_per_batch,
        read_tasks=settings.executor_cores,
        consumer_config=config,
        task_timeout_ms=settings.task_timeout_ms,
        aggregation_class=settings.aggregation_class,
    )


def start_query(
    spark: SparkSession, settings: ProcessorSettings, sink: TransactionalSink
) -> StreamingQuery:
    """Start (or resume, from the checkpoint on the state volume) the streaming query."""
    events = (
        spark.readStream.format(SOURCE_NAME)
        .option("source", source_options(settings).to_option())
        .load()
    )
    return (
        aggregate(events, load_aggregation(settings.aggregation_class))
        .writeStream.queryName(settings.application_id.replace("-", "_"))
        .outputMode("update")
        .foreachBatch(sink.write_batch)
        .trigger(processingTime=settings.trigger_processing_time)
        .option("checkpointLocation", str(settings.checkpoint_dir))
        .start()
    )
