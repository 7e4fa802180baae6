"""Kafka Streams beside the processor: the field's reference, run by the benchmarks on the same
brokers, in the same pipeline, measured by the same code (`PageViewCountStreams.java`).

`StreamsProcess` is a `ProcessorProcess` whose process is that Java program: the pipeline writes
its properties (Kafka Streams' own keys), starts, stops, kills and wipes it as it does the
processor's instances, and reads its /ready and /metrics. The class is compiled once per source
with the release's jars (`devkit.kafka_release`, which resolves kafka-streams too) into
`.venv/kafka-streams/<digest>/`.

What Kafka Streams runs with is its documented configuration for the case the project compares
against (docs/benchmarks.md, "The performance targets in one run"):
`processing.guarantee=exactly_once_v2`, `num.stream.threads=2`, static membership
(`group.instance.id` = the instance's name) unless the case is a dynamic one,
`num.standby.replicas` as the case says, the same session timeout and heartbeat as the processor's
instances, and every other key at Kafka Streams' default (`commit.interval.ms` 100 under
exactly-once, a 10 MB record cache). Where the processor runs KIP-848's `consumer` protocol,
Kafka Streams runs its own broker-assigned one, streams groups (KIP-1071): the session, heartbeat
and standby replicas are then the group's configs (`group_configs`), and every member is dynamic.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from contract.java_properties import format_properties
from contract.processor_keys import DEFAULTS, MEMBERSHIP_STATIC, PROTOCOL_CONSUMER
from devkit import kafka_release
from devkit.local.instances import InstanceOptions, InstanceStatus, ProcessorProcess

SOURCE = Path(__file__).with_name("PageViewCountStreams.java")
MAIN_CLASS = "PageViewCountStreams"
CLASSES_CACHE = kafka_release.REPO_ROOT / ".venv" / "kafka-streams"
JAVAC_TIMEOUT_S = 300.0
# The reference setup of the Kafka Streams figures in docs/benchmarks.md.
STREAM_THREADS = 2
PROCESSING_GUARANTEE = "exactly_once_v2"
# Under the bench's `consumer` protocol, Kafka Streams runs its own broker-assigned protocol.
STREAMS_PROTOCOL = "streams"
# The heap a Kafka Streams instance runs with: RocksDB keeps the state off the heap.
HEAP_OPTS = ("-Xms64m", "-Xmx512m")
# Kafka Streams' warnings and errors in the instance's log (log4j2's default configuration).
LOG_OPTS = ("-Dlog4j2.level=WARN",)
# How the tables name it.
LABEL = (
    f"Kafka Streams {kafka_release.KAFKA_VERSION} ({PROCESSING_GUARANTEE}, {STREAM_THREADS} "
    "threads)"
)
# The one aggregation the reference implements.
PAGE_VIEW_COUNT = ("aggregation.class", DEFAULTS["aggregation.class"])


class KafkaStreamsBuildError(RuntimeError):
    """The reference program could not be compiled (no javac, or a compile error)."""


def compiled_classes(release: kafka_release.KafkaRelease | None = None) -> Path:
    """The folder of the compiled `PageViewCountStreams` (compiled on first use per source)."""
    release = release or kafka_release.ensure()
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source + release.version.encode()).hexdigest()[:16]
    target = CLASSES_CACHE / digest
    if (target / f"{MAIN_CLASS}.class").is_file():
        return target
    javac = shutil.which("javac")
    if javac is None:
        raise KafkaStreamsBuildError(
            "the Kafka Streams reference is compiled with javac, and none is on PATH: install a "
            "JDK 17 (Debian: apt-get install openjdk-17-jdk-headless)"
        )
    work = target.with_name(f".{digest}-building")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    result = subprocess.run(
        [javac, "-d", str(work), "-cp", release.classpath, str(SOURCE)],
        capture_output=True,
        text=True,
        timeout=JAVAC_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise KafkaStreamsBuildError(f"javac {SOURCE} failed:\n{result.stderr[-3000:]}")
    shutil.rmtree(target, ignore_errors=True)
    work.rename(target)
    return target


@functools.cache
def java_and_classpath() -> tuple[str, str]:
    """The `java` and the classpath the reference runs with, found once per process: the
    release's check hashes every jar (about 0.4 s), which must not fall inside a restart's
    measured time."""
    release = kafka_release.ensure()
    return kafka_release.java_command(), f"{release.classpath}:{compiled_classes(release)}"


def streams_properties(instance: ProcessorProcess) -> dict[str, str]:
    """The instance's Kafka Streams configuration, keyed as Kafka Streams' documentation names
    them (`input.topic`, `output.topic`, `health.port` and `leave.group.on.close` are the
    harness's own)."""
    options: InstanceOptions = instance.options
    extra = {k: v for k, v in options.extra.items() if (k, v) != PAGE_VIEW_COUNT}
    if extra:
        raise ValueError(
            f"{instance.name}: settings {sorted(extra)} are the processor's; the Kafka Streams "
            f"reference counts page views ({PAGE_VIEW_COUNT[0]}={PAGE_VIEW_COUNT[1]}) with Kafka "
            "Streams' own defaults: no --set, no secured cluster"
        )
    properties = {
        "application.id": instance.names.application_id,
        "bootstrap.servers": instance.bootstrap_servers,
        "input.topic": instance.names.input_topic,
        "output.topic": instance.names.output_topic,
        "health.port": str(instance.health_port),
        "state.dir": str(instance.state_dir),
        "processing.guarantee": PROCESSING_GUARANTEE,
        "num.stream.threads": str(STREAM_THREADS),
    }
    if options.group_protocol == PROTOCOL_CONSUMER:
        # A streams group (KIP-1071): the broker assigns the tasks, and the session, heartbeat
        # and standby replicas are the group's own configs (`group_configs`). Kafka Streams
        # 4.3 has no static member in a streams group (KAFKA-20169, 4.4): it leaves on close.
        return {**properties, "group.protocol": STREAMS_PROTOCOL, "leave.group.on.close": "true"}
    static = options.stateful and options.membership_mode == MEMBERSHIP_STATIC
    properties |= {
        "num.standby.replicas": str(options.num_standby_replicas),
        "session.timeout.ms": str(options.session_timeout_ms),
        "heartbeat.interval.ms": str(options.heartbeat_interval_ms),
        "leave.group.on.close": str(not static).lower(),
    }
    if static:
        # Kafka Streams appends each thread's index to it.
        properties["group.instance.id"] = instance.name
    return properties


def group_configs(options: InstanceOptions) -> dict[str, str]:
    """A streams group's own configs (KIP-1071), which the reconciler sets on the GROUP
    resource: the session, heartbeat and standby replicas the classic client sets itself; none
    under the classic protocol."""
    if options.group_protocol != PROTOCOL_CONSUMER:
        return {}
    return {
        "streams.session.timeout.ms": str(options.session_timeout_ms),
        "streams.heartbeat.interval.ms": str(options.heartbeat_interval_ms),
        "streams.num.standby.replicas": str(options.num_standby_replicas),
    }


class StreamsProcess(ProcessorProcess):
    """One Kafka Streams instance as a local process (see the module docstring)."""

    def write_properties(self) -> Path:
        """Write the instance's properties file; its path."""
        self.properties_path.parent.mkdir(parents=True, exist_ok=True)
        self.properties_path.write_text(
            format_properties(
                streams_properties(self),
                f"{self.name}: Kafka Streams, written by devkit.kafka_streams",
            ),
            encoding="utf-8",
        )
        return self.properties_path

    def command(self) -> list[str]:
        """`java -cp <the release's jars>:<the compiled class> PageViewCountStreams <file>`."""
        java, classpath = java_and_classpath()
        arguments = ["-cp", classpath, MAIN_CLASS, str(self.properties_path)]
        return [java, *HEAP_OPTS, *LOG_OPTS, *arguments]

    def status(self) -> InstanceStatus:
        """Readiness (RUNNING, no store restoring), the active and standby tasks' input
        partitions and the metrics, from the program's health port (a standby task is a built
        copy)."""
        running = self.running
        answer = self.get("/ready") if running else None
        ready = json.loads(answer[1]) if answer is not None and answer[0] == 200 else {}
        standby = tuple(ready.get("standby", ()))
        return InstanceStatus(
            name=self.name,
            running=running,
            ready=bool(ready.get("ready")),
            partitions=tuple(ready["partitions"]) if ready.get("ready") else None,
            metrics=self.metrics() if running else {},
            standby=standby,
            copies=frozenset(standby),
        )
