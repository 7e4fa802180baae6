"""The whole pipeline on one machine: broker, topics, load generator, processor instances.

Used by `python -m devkit.local` (the README's main command) and by the benchmarks. With no
bootstrap servers given it starts a local Apache Kafka of 3 KRaft nodes (`devkit.kraft_cluster`,
the project's release); otherwise it uses the named cluster. Topics are created by the
project's own reconciler (`python -m app.admin.reconcile`), from the same `pipeline_topics(...)`
specs the Pulumi program deploys: replication factor 3 and `min.insync.replicas=2` (what the
stacks declare) on a cluster of 3 or more brokers, one replica per broker on a smaller one.
"""

from __future__ import annotations

import logging
import shutil
import sys
import threading
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

from confluent_kafka.admin import AdminClient

from app.admin import reconcile
from app.clients.client_properties import ClientConfig
from app.processor.aggregation import Aggregation, load_aggregation
from contract.processor_keys import DEFAULTS, PROTOCOL_CONSUMER
from contract.topic_specs import GroupConfigSpec, PipelineNames, dumps, pipeline_topics
from devkit import kafka_streams
from devkit.kraft_cluster import KraftCluster
from devkit.loadgen import LoadGenerator, LoadSettings, ProducedSummary, producer_config
from devkit.local.instances import InstanceOptions, ProcessorProcess, group_configs
from devkit.local.observe import GroupLag, OutputTail, SlowestLag
from devkit.truth import Truth


def broker_count(bootstrap_servers: str, client_config: Mapping[str, str]) -> int:
    """How many brokers the cluster at `bootstrap_servers` has."""
    admin = AdminClient({**client_config, "bootstrap.servers": bootstrap_servers})
    cluster = reconcile.wait_for_cluster(admin, bootstrap_servers, BROKER_COUNT_TIMEOUT_S)
    return len(cluster.brokers)


log = logging.getLogger("devkit.local")

CHANGELOG_SEGMENT_BYTES = 64 * 1024 * 1024
# The stacks' replication factor; a smaller cluster gets one replica per broker.
STACK_REPLICATION_FACTOR = 3
BROKER_COUNT_TIMEOUT_S = 30.0
ENGINE_PROCESSOR = "processor"
ENGINE_KAFKA_STREAMS = "kafka-streams"
ENGINES = (ENGINE_PROCESSOR, ENGINE_KAFKA_STREAMS)


def engine_label(engine: str) -> str:
    """How the benchmarks' tables name what the instances run."""
    return kafka_streams.LABEL if engine == ENGINE_KAFKA_STREAMS else "processor"


def protocol_label(engine: str, protocol: str) -> str:
    """The group protocol a row ran under: Kafka Streams' own under `consumer`."""
    if engine == ENGINE_KAFKA_STREAMS and protocol == PROTOCOL_CONSUMER:
        return f"{kafka_streams.STREAMS_PROTOCOL} (KIP-1071)"
    return protocol


@dataclass(frozen=True)
class PipelineSetup:
    """Where and how the pipeline runs."""

    base_dir: Path
    instances: int = 2
    partitions: int = 4
    bootstrap_servers: str | None = None  # None: start a local 3-node Apache Kafka
    # A secured cluster's client settings (`--command-config`), for every client of the run.
    client: ClientConfig = field(default_factory=ClientConfig)
    names: PipelineNames = field(default_factory=PipelineNames)
    # The instances' `aggregation.class`: it also makes the load and the truth.
    aggregation_class: str = DEFAULTS["aggregation.class"]
    options: InstanceOptions = field(default_factory=InstanceOptions)
    # Every output record kept (the benchmarks' measures), or only counts and gaps (a run of
    # hours must not grow without bound).
    keep_output_records: bool = True
    # With a local cluster: start instance 0 while the brokers boot, so its JVM and Spark start
    # (7-9 s) overlap theirs (6 s). Only for a member that joins the group late (hand-off mode
    # joins after its warm-up batch, when the topics exist): a static member subscribes at once.
    first_instance_with_brokers: bool = False
    # At the end, stop a local cluster's brokers by controlled shutdown (SIGTERM, as a pod's
    # deletion does; about 6 s), or kill them at once (the tests and benchmarks: nothing after
    # the run reads them).
    graceful_broker_stop: bool = False
    # An active/standby pair: `instances` per side (a and b), each side its own group and
    # changelog, side a publishing first (`app/processor/pair.py`).
    pair: bool = False
    # What the instances run: the processor, or Kafka Streams' page-view count on the same
    # topics (`devkit.kafka_streams`: the benchmarks' reference).
    engine: str = ENGINE_PROCESSOR

    def __post_init__(self) -> None:
        if self.instances < 1:
            raise ValueError(f"instances={self.instances}: must be >= 1")
        if self.partitions < 1:
            raise ValueError(f"partitions={self.partitions}: must be >= 1")
        if self.engine not in ENGINES:
            raise ValueError(f"engine={self.engine!r}: must be one of {', '.join(ENGINES)}")
        if self.engine == ENGINE_KAFKA_STREAMS and self.pair:
            raise ValueError("engine=kafka-streams runs a single deployment: no pair")


class LoadThread:
    """The load generator on a thread of this process (its `summary` is the truth)."""

    def __init__(self, generator: LoadGenerator) -> None:
        self.generator = generator
        self.stop_event = threading.Event()
        self.summary: ProducedSummary | None = None
        self._thread = threading.Thread(target=self._run, name="loadgen", daemon=True)

    def _run(self) -> None:
        self.summary = self.generator.run(self.stop_event)

    def start(self) -> LoadThread:
        """Start producing."""
        self._thread.start()
        return self

    @property
    def done(self) -> bool:
        """Whether the generator finished (count or duration reached, or stopped)."""
        return self.summary is not None

    def join(self) -> ProducedSummary:
        """Wait until the generator finishes by itself (count or duration); the summary."""
        self._thread.join()
        assert self.summary is not None
        return self.summary

    def stop(self) -> ProducedSummary:
        """Stop producing, wait for the acknowledgements; the summary."""
        self.stop_event.set()
        return self.join()


class LocalPipeline:
    """Broker + topics + instances; use as a context manager (everything stops on exit).

    `truth` judges the output from the first `load()` on (or from `start_truth()`).
    """

    def __init__(self, setup: PipelineSetup) -> None:
        self.setup = setup
        self.names = setup.names
        self.aggregation: Aggregation = load_aggregation(setup.aggregation_class)
        self.truth: Truth | None = None
        self._stack = ExitStack()
        self.cluster: KraftCluster | None = None  # the local cluster this pipeline started
        self.bootstrap_servers = setup.bootstrap_servers or ""
        self.instances: list[ProcessorProcess] = []
        # Instances a scale-in removed (`scale_to`): stopped, their logs kept.
        self.scaled_in: list[ProcessorProcess] = []
        # The settings every instance is written with (`_start`), a scaled-out one's too.
        self._options: InstanceOptions | None = None
        # A pair's instances per side (a single deployment: none).
        self.sides: dict[str, list[ProcessorProcess]] = {}
        self.lag: GroupLag | SlowestLag | None = None
        self.output: OutputTail | None = None

    def __enter__(self) -> LocalPipeline:
        try:
            self._start()
        except BaseException:
            # The cluster's exit sees the error: it keeps its files and logs their tails.
            if not self._stack.__exit__(*sys.exc_info()):
                raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()

    def _start(self) -> None:
        setup = self.setup
        if setup.bootstrap_servers is None:
            self.cluster = KraftCluster()  # its ports are chosen now, its nodes start below
            self._stack.push(self.cluster)  # exited last: the brokers stop after everything else
            if setup.graceful_broker_stop:
                self._stack.callback(self.cluster.shutdown)
            self.bootstrap_servers = self.cluster.bootstrap_servers
        # The instances' files get the settings as written: references stay references.
        options = replace(
            setup.options,
            extra={
                **setup.client.security(),
                "aggregation.class": setup.aggregation_class,
                **setup.options.extra,
            },
        )
        self._options = options
        self.instances = self._processes(options)
        for instance in self.instances:
            instance.write_properties()  # refused settings stop the run before anything starts
        if self.cluster is not None:
            # A new cluster: checkpoints of an earlier run refer to data that is gone.
            for instance in self.instances:
                shutil.rmtree(instance.state_dir, ignore_errors=True)
        # Stopped last-in first-out: instances before the observers, the broker last.
        self._stack.callback(self.stop_instances)
        if self.cluster is not None:
            if setup.first_instance_with_brokers:
                self.instances[0].start()
            self.cluster.start()
        self.create_topics()
        client = setup.client.resolved
        lags = [
            GroupLag(self.bootstrap_servers, group, self.names.input_topic, client)
            for group in self.groups
        ]
        self.lag = lags[0] if len(lags) == 1 else SlowestLag(lags)
        self._stack.callback(self.lag.close)
        self.output = OutputTail(
            self.bootstrap_servers,
            self.names.output_topic,
            client,
            keep_records=setup.keep_output_records,
        ).start()
        self._stack.callback(self.output.stop)

    def create_topics(self) -> None:
        """Create (or reconcile) the four topics with the project's reconciler (and, under
        KIP-848, the group's own session and heartbeat)."""
        replication = min(
            STACK_REPLICATION_FACTOR,
            broker_count(self.bootstrap_servers, self.setup.client.resolved),
        )
        specs = pipeline_topics(
            application_id=self.names.application_id,
            input_topic=self.names.input_topic,
            output_topic=self.names.output_topic,
            partitions=self.setup.partitions,
            replication_factor=replication,
            min_insync_replicas=2 if replication >= 3 else 1,
            changelog_segment_bytes=CHANGELOG_SEGMENT_BYTES,
            pair=self.setup.pair,
        )
        configs = (
            kafka_streams.group_configs(self.setup.options)
            if self.setup.engine == ENGINE_KAFKA_STREAMS
            else group_configs(self.setup.options)
        )
        groups = [GroupConfigSpec(group, configs) for group in self.groups] if configs else []
        path = self.setup.base_dir / "config" / f"{self.names.application_id}-topics.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dumps(specs, groups), encoding="utf-8")
        code = reconcile.main(
            [
                *("--bootstrap-servers", self.bootstrap_servers, "--specs", str(path)),
                *self.setup.client.arguments(),
            ]
        )
        if code != 0:
            raise RuntimeError(
                f"the topic reconciler failed (exit code {code}) for {path} on "
                f"{self.bootstrap_servers}; see its output above"
            )

    @property
    def groups(self) -> list[str]:
        """The consumer groups of the pipeline's deployments (a pair's: one per side)."""
        return [d.application_id for d in self.names.deployments(pair=self.setup.pair)]

    def _processes(self, options: InstanceOptions) -> list[ProcessorProcess]:
        """The instances: one deployment's, or both sides' of a pair (side a first)."""
        setup = self.setup
        if not setup.pair:
            return [self._instance(i, options) for i in range(setup.instances)]
        for deployment in self.names.deployments(pair=True):
            assert deployment.side is not None
            # Each side is named, grouped and logged by its own application id; the input,
            # output and dead-letter topics are the pipeline's.
            names = replace(self.names, application_id=deployment.application_id)
            side = replace(
                options,
                extra={
                    **options.extra,
                    "dlq.topic": self.names.dlq_topic,
                    "pair.side": deployment.side,
                    "pair.control.topic": self.names.pair_control_topic,
                },
            )
            self.sides[deployment.side] = [
                ProcessorProcess(i, setup.base_dir, names, self.bootstrap_servers, side)
                for i in range(setup.instances)
            ]
        return [instance for side in self.sides.values() for instance in side]

    def _instance(self, index: int, options: InstanceOptions) -> ProcessorProcess:
        """Instance `index` of a single deployment, on the pipeline's engine."""
        kind = (
            kafka_streams.StreamsProcess
            if self.setup.engine == ENGINE_KAFKA_STREAMS
            else ProcessorProcess
        )
        return kind(index, self.setup.base_dir, self.names, self.bootstrap_servers, options)

    def scale_to(
        self,
        count: int,
        on_started: Callable[[ProcessorProcess], None] = lambda instance: None,
    ) -> None:
        """Grow or shrink a single deployment to `count` instances as the StatefulSet
        controller does: new ordinals started lowest first, removed ones stopped highest first,
        each once the one before is done. `on_started` waits after each start (for its
        readiness, as `OrderedReady` does); a removed instance is stopped (SIGTERM, its
        hand-off, waited for) and kept in `scaled_in`."""
        if self.setup.pair or self._options is None:
            raise ValueError("scale_to: a started single deployment only (no pair)")
        if count < 1:
            raise ValueError(f"scale_to({count}): a deployment keeps at least 1 instance")
        while len(self.instances) < count:
            instance = self._instance(len(self.instances), self._options)
            shutil.rmtree(instance.state_dir, ignore_errors=True)  # a new pod's empty volume
            instance.start()
            self.instances.append(instance)
            log.info("scaled out: started %s, log %s", instance.name, instance.log_path)
            on_started(instance)
        while len(self.instances) > count:
            instance = self.instances.pop()
            code = instance.stop()
            self.scaled_in.append(instance)
            log.info("scaled in: %s stopped (exit code %s)", instance.name, code)

    def start_instances(self) -> None:
        """Start every instance."""
        for instance in self.instances:
            instance.start()
            log.info(
                "started %s: health http://127.0.0.1:%d/ready, log %s",
                instance.name,
                instance.health_port,
                instance.log_path,
            )

    def stop_instances(self) -> None:
        """SIGTERM every running instance at once, then wait for each (as a StatefulSet
        deletion does)."""
        running = [i for i in self.instances if i.running]
        for instance in running:
            instance.terminate()
        for instance in running:
            code = instance.wait()
            log.info("%s stopped (exit code %s)", instance.name, code)

    def start_truth(self, initial: Mapping[str, bytes] | None = None) -> Truth:
        """The run's truth, judging every output record read from now on; `initial`: the
        changelog's values before the run (`changelog_values`, a reused cluster)."""
        assert self.output is not None
        # A pair's take-over publishes every key once more: the same values, not duplicates.
        self.truth = Truth(self.aggregation, initial, republished_ok=self.setup.pair)
        self.output.attach(self.truth)
        return self.truth

    def changelog_values(self, timeout_s: float = 60.0) -> dict[str, bytes]:
        """The changelog's newest value per key (read_committed, to its end)."""
        tail = OutputTail(
            self.bootstrap_servers,
            self.names.changelog_topic,
            self.setup.client.resolved,
            keep_records=False,
        ).start()
        try:
            if not tail.wait_until_caught_up(timeout_s, quiet_s=1.0):
                raise RuntimeError(
                    f"reading {self.names.changelog_topic} to its end took over {timeout_s:g} s"
                )
            return tail.snapshot()[0]
        finally:
            tail.stop()

    def load(
        self, settings: LoadSettings, progress: Callable[[str], None] | None = None
    ) -> LoadThread:
        """Start the load generator on a thread, its records folded into the run's truth;
        `progress` gets its counts every few seconds."""
        settings = replace(settings, topic=self.names.input_topic)
        generator = LoadGenerator(
            settings,
            producer_config(self.bootstrap_servers, client_config=self.setup.client.resolved),
            progress=progress,
            truth=self.truth or self.start_truth(),
        )
        return LoadThread(generator).start()
