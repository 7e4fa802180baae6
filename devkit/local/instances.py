"""Processor instances as local processes: the local analogue of the StatefulSet's pods.

Instance i is `page-view-counter-<i>` (its POD_NAME), with its own state directory (the pod's
PVC), its own health port, its own properties file written from the same contract the Pulumi
program renders into the ConfigMap, and its log in a file. `status()` reads what a Kubernetes
probe or Prometheus would: /ready and /metrics, plus the assignment the instance published.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from prometheus_client.parser import text_string_to_metric_families

from app.processor import assignment_file
from app.processor.settings import checkpoint_dir, load_settings
from app.processor.state_restore import copies_path, read_copies
from contract.java_properties import format_properties
from contract.membership import kip848_group_configs
from contract.processor_keys import (
    CLASSIC_PROTOCOL_ONLY,
    CRASH_SAFE_TRANSACTION_TIMEOUT_MS,
    DEFAULTS,
    INSTANCE_ID_KEY,
    MEMBERSHIP_STATIC,
    PROTOCOL_CONSUMER,
    TRANSACTIONAL_ID_KEY,
)
from contract.restart_budget import RestartBudget, session_timeout_ms
from contract.topic_specs import PipelineNames
from devkit.local_ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
HTTP_TIMEOUT_S = 2.0
# SIGTERM lets the instance finish its batch (up to the processor's drain timeout) and stop Spark.
STOP_TIMEOUT_S = 90.0


# A local instance's worst-case restart (the local run, the test harness, the benchmarks): a stop
# that lets the running batch finish, then a start on the same machine. Its static member's
# session is the contract's formula over it, as the Pulumi program computes a pod's.
LOCAL_RESTART_BUDGET = RestartBudget(grace_seconds=15, startup_seconds=10, min_ready_seconds=0)
LOCAL_SESSION_TIMEOUT_MS = session_timeout_ms(
    static_member=True, budget=LOCAL_RESTART_BUDGET, margin_seconds=5
)


@dataclass(frozen=True)
class InstanceOptions:
    """The settings an experiment varies; everything else is the contract's default."""

    stateful: bool = True  # False: dynamic membership, leaves the group on close
    membership_mode: str = DEFAULTS["membership.mode"]
    num_standby_replicas: int = int(DEFAULTS["num.standby.replicas"])
    session_timeout_ms: int = LOCAL_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = int(DEFAULTS["consumer.heartbeat.interval.ms"])
    # classic, or consumer (KIP-848: the session and heartbeat above become the group's own
    # configs, which `LocalPipeline` sets through the reconciler as the Job does in a cluster).
    group_protocol: str = DEFAULTS["consumer.group.protocol"]
    trigger_interval_ms: int = int(DEFAULTS["trigger.interval.ms"])
    max_records_per_batch: int = int(DEFAULTS["max.records.per.batch"])
    spark_cores: int = 1
    # Extra contract keys, applied last.
    extra: Mapping[str, str] = field(default_factory=dict)


def instance_properties(
    names: PipelineNames,
    bootstrap_servers: str,
    state_dir: Path,
    health_port: int,
    options: InstanceOptions,
) -> dict[str, str]:
    """One instance's properties, keyed exactly as the contract names them."""
    properties = {
        "application.id": names.application_id,
        "bootstrap.servers": bootstrap_servers,
        "input.topic": names.input_topic,
        "output.topic": names.output_topic,
        "changelog.topic": names.changelog_topic,
        "dlq.topic": names.dlq_topic,
        "stateful": str(options.stateful).lower(),
        "membership.mode": options.membership_mode,
        "num.standby.replicas": str(options.num_standby_replicas),
        "state.dir": str(state_dir),
        "health.port": str(health_port),
        "trigger.interval.ms": str(options.trigger_interval_ms),
        "max.records.per.batch": str(options.max_records_per_batch),
        "consumer.session.timeout.ms": str(options.session_timeout_ms),
        "consumer.heartbeat.interval.ms": str(options.heartbeat_interval_ms),
        TRANSACTIONAL_ID_KEY: "${env:POD_NAME}",
        # As the Pulumi program renders it: a crashed instance's open transaction blocks its
        # partitions' next owner this long at most.
        "producer.transaction.timeout.ms": str(CRASH_SAFE_TRANSACTION_TIMEOUT_MS),
        "spark.master": f"local[{options.spark_cores}]",
        "spark.sql.shuffle.partitions": str(options.spark_cores),
        "spark.local.dir": str(state_dir.parent / "spark-tmp" / state_dir.name),
    }
    if options.stateful and options.membership_mode == MEMBERSHIP_STATIC:
        # Static membership: the member id is the instance's name, as the pod name is in k8s.
        properties[INSTANCE_ID_KEY] = "${env:POD_NAME}"
    if options.group_protocol == PROTOCOL_CONSUMER:
        properties["consumer.group.protocol"] = PROTOCOL_CONSUMER
        for key in CLASSIC_PROTOCOL_ONLY:  # the group's own configs instead
            properties.pop(key, None)
    return {**properties, **options.extra}


def group_configs(options: InstanceOptions) -> dict[str, str]:
    """The group's own configs under KIP-848 (none under the classic protocol)."""
    if options.group_protocol != PROTOCOL_CONSUMER:
        return {}
    return kip848_group_configs(
        session_ms=options.session_timeout_ms, heartbeat_ms=options.heartbeat_interval_ms
    )


@dataclass(frozen=True)
class InstanceStatus:
    """One instance as its endpoints and published assignment show it."""

    name: str
    running: bool
    ready: bool
    partitions: tuple[int, ...] | None  # None: no assignment published yet
    metrics: Mapping[str, float]  # sample name (with labels) -> value
    standby: tuple[int, ...] = ()  # the standby copies it keeps, as published
    copies: frozenset[int] = frozenset()  # the partitions whose state its copies file records

    def metric(self, name: str) -> float:
        """Sum of every sample named `name` (all label values)."""
        return sum(v for k, v in self.metrics.items() if k == name or k.startswith(name + "{"))


class ProcessorProcess:
    """One `python -m app.processor` process (see the module docstring)."""

    def __init__(
        self,
        index: int,
        base_dir: Path,
        names: PipelineNames,
        bootstrap_servers: str,
        options: InstanceOptions,
    ) -> None:
        self.index = index
        self.name = f"{names.application_id}-{index}"
        self.state_dir = base_dir / self.name
        self.properties_path = base_dir / "config" / f"{self.name}.properties"
        self.log_path = base_dir / "logs" / f"{self.name}.log"
        self.names = names
        self.bootstrap_servers = bootstrap_servers
        self.options = options
        self.health_port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.starts = 0

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The process id of the last run (None before the first start)."""
        return None if self._process is None else self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit code of the last run (None while running or before the first start)."""
        return None if self._process is None else self._process.poll()

    def write_properties(self) -> Path:
        """Write this instance's properties file and check it as the processor does at start
        (`SettingsError` names each refused setting); its path."""
        properties = instance_properties(
            self.names, self.bootstrap_servers, self.state_dir, self.health_port, self.options
        )
        self.properties_path.parent.mkdir(parents=True, exist_ok=True)
        self.properties_path.write_text(
            format_properties(properties, f"{self.name}: written by python -m devkit.local"),
            encoding="utf-8",
        )
        load_settings(self.properties_path, {**os.environ, **self._identity()})
        return self.properties_path

    def _identity(self) -> dict[str, str]:
        """What the StatefulSet gives a pod's environment: its name."""
        return {"POD_NAME": self.name}

    def start(self) -> None:
        """Start the process (again); its output is appended to `log_path`."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        self.write_properties()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        env = {
            **os.environ,
            **self._identity(),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        self._process = subprocess.Popen(
            self.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO_ROOT,
            # Its own process group: a Ctrl-C in the terminal goes to the runner, which then
            # stops the instances in order.
            start_new_session=True,
        )
        self.starts += 1

    def command(self) -> list[str]:
        """The process's command line."""
        return [sys.executable, "-m", "app.processor", "--properties", str(self.properties_path)]

    def terminate(self) -> None:
        """Send SIGTERM and return at once (the instance finishes its batch and stops)."""
        if self.running:
            assert self._process is not None
            self._process.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """Wait up to `timeout_s` for the process to exit, then SIGKILL it; the exit code."""
        process = self._process
        if process is None:
            return None
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        return process.returncode

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL; the exit code."""
        self.terminate()
        return self.wait(timeout_s)

    def kill(self) -> int | None:
        """SIGKILL at once (a crashed pod, a node lost)."""
        if self.running:
            assert self._process is not None
            self._process.kill()
        return self.wait()

    def wipe_state(self) -> None:
        """Delete the state directory: a pod that comes back on a new, empty volume."""
        if self.running:
            raise RuntimeError(f"{self.name} is running; stop it before wiping its state")
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def status(self) -> InstanceStatus:
        """Readiness, metrics and assignment now (empty when the endpoint does not answer)."""
        published = assignment_file.read(assignment_file.assignment_path(self.state_dir))
        running = self.running
        known = published if running else None
        return InstanceStatus(
            name=self.name,
            running=running,
            ready=running and self._ready(),
            partitions=known.partitions if known is not None else None,
            metrics=self.metrics() if running else {},
            standby=known.standby if known is not None else (),
            copies=frozenset(read_copies(copies_path(checkpoint_dir(self.state_dir)))),
        )

    def get(self, path: str) -> tuple[int, bytes] | None:
        """GET `path` from the instance's health port: (status, body), None when it does not
        answer."""
        url = f"http://127.0.0.1:{self.health_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, exc.read()
            except (OSError, http.client.HTTPException):
                return None  # the process went away while answering
        except (OSError, TimeoutError, http.client.HTTPException):
            return None  # not listening yet, or gone

    def _ready(self) -> bool:
        answer = self.get("/ready")
        return answer is not None and answer[0] == 200 and json.loads(answer[1])["ready"]

    def metrics(self) -> dict[str, float]:
        """The instance's /metrics samples (empty when it does not answer)."""
        answer = self.get("/metrics")
        if answer is None or answer[0] != 200:
            return {}
        return parse_metrics(answer[1].decode("utf-8"))


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text to {`name{label="value",...}`: value} (labels sorted; no labels: name)."""
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples
