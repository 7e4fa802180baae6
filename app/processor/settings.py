"""The processor's settings: one Java-style properties file, validated at start.

The file is the contract shared by the Pulumi program (which renders it into a ConfigMap), this
application (which reads it) and the policy pack (which checks it). Its layout follows Kafka
Streams: common keys plain, consumer settings prefixed ``consumer.``, producer settings prefixed
``producer.``, Spark settings under their own ``spark.`` names. ``${env:NAME}`` is replaced by the
environment variable NAME (the syntax of Kafka's EnvVarConfigProvider), which is how the pod name
becomes the static member id and the transactional id.

Every default is in `DEFAULTS`; every problem found is reported at once in one `SettingsError`.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import confluent_kafka

from app.clients.client_properties import CLIENT_COMMON_KEYS, CLIENT_COMMON_PREFIXES
from app.processor import class_archive
from app.processor.aggregation import AggregationClassError, load_aggregation
from contract import membership
from contract.java_properties import is_credential_key, parse_properties, resolve_env
from contract.processor_keys import (
    BOOL_KEYS,
    CLASSIC_PROTOCOL_ONLY,
    DEFAULTS,
    INSTANCE_ID_KEY,
    KNOWN_KEYS,
    PAIR_CONTROL_TOPIC_KEY,
    PAIR_SIDE_KEY,
    PROTOCOL_CONSUMER,
    REQUIRED,
    ROWS,
    TRANSACTIONAL_ID_KEY,
)
from contract.tls_settings import tls_weakenings

CONSUMER_PREFIX = "consumer."
PRODUCER_PREFIX = "producer."
SPARK_PREFIX = "spark."


_INT = re.compile(r"[+-]?\d+")
_LOCAL_MASTER = re.compile(r"local(?:\[(\d+|\*)(?:,\d+)?\])?")


class SettingsError(ValueError):
    """The processor's settings are invalid; `problems` lists every one found."""

    def __init__(self, problems: Sequence[str], source: Path | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        count = f"{len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}"
        listing = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid processor settings{where} ({count}):\n{listing}")


# --- the settings ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessorSettings:
    """The validated, typed settings of one processor instance."""

    application_id: str
    bootstrap_servers: str
    input_topic: str
    output_topic: str
    changelog_topic: str
    dlq_topic: str
    processing_guarantee: str
    stateful: bool
    state_dir: Path
    health_port: int
    trigger_interval_ms: int
    max_records_per_batch: int
    shutdown_timeout_ms: int
    task_timeout_ms: int
    group_protocol: str
    membership_mode: str
    num_standby_replicas: int
    # the Spark driver's class-data-sharing archive to map (`class.data.archive`), if any
    class_data_archive: Path | None
    # Spark's Python processes fork from a preloaded server (`python.forkserver`)
    python_forkserver: bool
    # the preloaded imports are exempt from Python's collector (`python.gc.freeze`)
    python_gc_freeze: bool
    # the pipeline's `Aggregation`, module.Class (`aggregation.class`)
    aggregation_class: str
    # `pair.side` (a, b) of an active/standby pair and its `pair.control.topic`; None: single
    pair_side: str | None
    pair_control_topic: str | None
    # consumer.group.instance.id resolved (the pod name) for a static member, else None.
    instance_id: str | None
    transactional_id: str
    # Every effective key (defaults included), `${env:...}` resolved.
    properties: Mapping[str, str] = field(repr=False)
    source: Path | None = None

    @property
    def checkpoint_dir(self) -> Path:
        """Spark's checkpoint (offsets log and state store), on the state volume."""
        return checkpoint_dir(self.state_dir)

    @property
    def executor_cores(self) -> int:
        """The task slots of the local Spark (`spark.master`: `local[N]`, `local[*]`, `local`)."""
        match = _LOCAL_MASTER.fullmatch(self.properties.get("spark.master", ""))
        if match is None or match.group(1) is None:
            return 1  # `local`, or a cluster master, whose executors are not this process's
        if match.group(1) == "*":
            return os.cpu_count() or 1
        return max(1, int(match.group(1)))

    @property
    def trigger_processing_time(self) -> str:
        """The trigger interval in the form `DataStreamWriter.trigger(processingTime=...)` takes."""
        return f"{self.trigger_interval_ms} milliseconds"

    def consumer_config(self) -> dict[str, str]:
        """librdkafka configuration of the group member (the driver's consumer)."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.application_id,
            **self._client_common(),
            **_strip_prefix(self.properties, CONSUMER_PREFIX),
            # Offsets go into the sink's transaction; nothing is stored behind its back.
            "enable.auto.offset.store": "false",
        }

    def producer_config(self) -> dict[str, str]:
        """librdkafka configuration of the transactional producer (the sink)."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            **self._client_common(),
            **_strip_prefix(self.properties, PRODUCER_PREFIX),
        }

    def spark_conf(self) -> dict[str, str]:
        """Every `spark.*` setting, for `SparkSession.builder.config(map=...)`."""
        return {k: v for k, v in self.properties.items() if k.startswith(SPARK_PREFIX)}

    def masked_properties(self) -> dict[str, str]:
        """The effective properties with secret-looking values replaced, safe to print or log."""
        return {k: ("****" if is_secret_key(k) else v) for k, v in sorted(self.properties.items())}

    def _client_common(self) -> dict[str, str]:
        return {k: v for k, v in self.properties.items() if _is_client_common(k)}


# The layout of the state in Spark's checkpoint (`keyed_state.py`: its grouping, its state
# schema, its buckets). Spark refuses a checkpoint whose state schema differs, so a processor of
# another layout starts a checkpoint of its own and restores its state from the changelog, the
# same path as a lost volume. 1: a state per key (the directory `checkpoint`); 2: per bucket.
STATE_LAYOUT = 2


def checkpoint_dir(state_dir: Path) -> Path:
    """The checkpoint directory under an instance's `state.dir`, of this `STATE_LAYOUT`."""
    return state_dir / f"checkpoint-layout-{STATE_LAYOUT}"


def earlier_checkpoints(state_dir: Path) -> list[Path]:
    """Checkpoint directories under `state.dir` of another state layout than this one's."""
    current = checkpoint_dir(state_dir)
    return sorted(
        path
        for pattern in ("checkpoint", "checkpoint-layout-*")
        for path in state_dir.glob(pattern)
        if path.is_dir() and path != current
    )


def is_secret_key(key: str) -> bool:
    """Whether a key's value must never be printed: SASL settings and every credential
    (`java_properties.is_credential_key`: passwords, secrets, tokens, private keys)."""
    lowered = key.lower()
    bare = _strip_client_prefix(lowered)
    return bare.startswith("sasl.") or is_credential_key(key)


def _strip_client_prefix(key: str) -> str:
    for prefix in (CONSUMER_PREFIX, PRODUCER_PREFIX):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def _is_client_common(key: str) -> bool:
    return key in CLIENT_COMMON_KEYS or key.startswith(CLIENT_COMMON_PREFIXES)


def _strip_prefix(properties: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix) :]: v for k, v in properties.items() if k.startswith(prefix)}


@dataclass(frozen=True)
class _Value:
    value: str
    origin: str  # "default", "override" or "<file>:<line>"

    @property
    def is_default(self) -> bool:
        return self.origin == "default"


def load_settings(
    path: Path,
    env: Mapping[str, str] = os.environ,
    overrides: Mapping[str, str] = MappingProxyType({}),
) -> ProcessorSettings:
    """Read, resolve and validate the properties file at `path` (`overrides` win over the file).

    Raises `SettingsError` listing every problem found (unknown or missing keys, wrong types,
    unset environment variables, inconsistent settings), each with the key, the value and
    what is allowed.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(
            [f"cannot read the properties file: {exc.strerror or exc}"], source=path
        ) from exc
    return parse_settings(text, env=env, overrides=overrides, source=path)


def parse_settings(
    text: str,
    env: Mapping[str, str] = os.environ,
    overrides: Mapping[str, str] = MappingProxyType({}),
    source: Path | None = None,
) -> ProcessorSettings:
    """Like `load_settings`, from the text of a properties file (`source` names it in errors)."""
    problems: list[str] = []
    values: dict[str, _Value] = {key: _Value(value, "default") for key, value in DEFAULTS.items()}
    try:
        entries = parse_properties(text)
    except ValueError as exc:
        raise SettingsError([str(exc)], source=source) from exc
    where = str(source) if source else "<properties>"
    for entry in entries:
        values[entry.key] = _Value(entry.value, f"{where}:{entry.line}")
    for key, value in overrides.items():
        values[key] = _Value(str(value), "override")

    resolved: dict[str, _Value] = {}
    for key, item in values.items():
        try:
            resolved[key] = _Value(resolve_env(item.value, env), item.origin)
        except LookupError as exc:
            problems.append(_problem(key, item, str(exc)))
            resolved[key] = item  # reported once; the checks below still see that it is set
    problems += _validate(resolved)
    if problems:
        raise SettingsError(problems, source=source)
    return _build(resolved, source)


def _problem(key: str, item: _Value, message: str) -> str:
    origin = "" if item.origin == "default" else f" ({item.origin})"
    return f"{key}={item.value!r}{origin}: {message}"


def _validate(values: dict[str, _Value]) -> list[str]:
    problems: list[str] = []
    for key in REQUIRED:
        if not values.get(key, _Value("", "")).value.strip():
            problems.append(f"{key} is required and missing or empty")
    for key, item in values.items():
        problems += _check_key(key, item)
    problems += _check_protocol(values)
    problems += _check_membership(values)
    problems += _check_pair(values)
    problems += [
        _problem(w.key, values[w.key], f"must be {w.required}: {w.why}; remove it")
        for w in tls_weakenings({key: item.value for key, item in values.items()})
    ]
    item = values["aggregation.class"]
    try:
        load_aggregation(item.value)
    except AggregationClassError as err:
        problems.append(_problem("aggregation.class", item, err.why))
    if not problems:
        # librdkafka is the authority on the client settings: names, ranges, combinations.
        problems += _check_with_librdkafka(values)
    return problems


def _check_key(key: str, item: _Value) -> list[str]:
    row = ROWS.get(key)
    if row is None and not (_is_client_common(key) or _is_passthrough(key)):
        close = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}?" if close else "see DEFAULTS for the known keys"
        return [
            _problem(
                key,
                item,
                "unknown key; known: the contract's keys, consumer.*/producer.* (librdkafka), "
                f"spark.*, security.protocol, sasl.*, ssl.*; {hint}",
            )
        ]
    problem = row.problem(item.value) if row is not None else None
    if problem is not None:
        return [_problem(key, item, problem)]
    return _check_client_key(key, item)


def _check_client_key(key: str, item: _Value) -> list[str]:
    """Ask librdkafka about one client key on its own, so the error names the key."""
    # (role, client class, the config it needs besides the key)
    roles: list[
        tuple[str, type[confluent_kafka.Consumer] | type[confluent_kafka.Producer], dict[str, str]]
    ] = []
    if key.startswith(CONSUMER_PREFIX) or _is_client_common(key):
        roles.append(("consumer", confluent_kafka.Consumer, {"group.id": "settings-check"}))
    if key.startswith(PRODUCER_PREFIX) or _is_client_common(key):
        roles.append(("producer", confluent_kafka.Producer, {}))
    for role, client, base in roles:
        message = _librdkafka_error(client, {**base, _strip_client_prefix(key): item.value})
        if message is None or message.startswith("Failed to create"):
            continue  # a combination of keys: checked above, or by _check_with_librdkafka
        if "No such configuration property" in message:
            close = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=3, cutoff=0.75)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            return [_problem(key, item, f"librdkafka has no {role} property by that name{hint}")]
        return [_problem(key, item, f"librdkafka rejects it for the {role}: {message}")]
    return []


def _librdkafka_error(
    client: type[confluent_kafka.Consumer] | type[confluent_kafka.Producer],
    config: Mapping[str, str],
) -> str | None:
    """Create the client without `bootstrap.servers` (nothing connects); its error, if any."""
    try:
        instance = client({**config, "logger": _QUIET})
    except confluent_kafka.KafkaException as exc:
        error = exc.args[0] if exc.args else None
        return error.str() if isinstance(error, confluent_kafka.KafkaError) else str(exc)
    if isinstance(instance, confluent_kafka.Consumer):
        instance.close()
    return None


def _is_passthrough(key: str) -> bool:
    return key.startswith((CONSUMER_PREFIX, PRODUCER_PREFIX, SPARK_PREFIX))


def _int_or_none(values: Mapping[str, _Value], key: str) -> int | None:
    item = values.get(key)
    if item is None or not _INT.fullmatch(item.value.strip()):
        return None  # its row's check reports it
    return int(item.value)


def _frame(values: Mapping[str, _Value], breach: membership.Breach) -> str:
    item = values.get(breach.key)
    if item is None:
        return f"{breach.key} is {breach.found}: {breach.message()}"
    return _problem(breach.key, item, breach.message())


def _check_protocol(values: dict[str, _Value]) -> list[str]:
    if values["consumer.group.protocol"].value == PROTOCOL_CONSUMER:
        explicit = {k: values[k].value for k in CLASSIC_PROTOCOL_ONLY if not values[k].is_default}
        for key in CLASSIC_PROTOCOL_ONLY:
            if values[key].is_default:
                del values[key]  # librdkafka rejects them with this protocol
        breaches = membership.classic_only_breaches(PROTOCOL_CONSUMER, explicit)
        return [_frame(values, b) for b in breaches]
    session = _int_or_none(values, "consumer.session.timeout.ms")
    heartbeat = _int_or_none(values, "consumer.heartbeat.interval.ms")
    max_poll = _int_or_none(values, "consumer.max.poll.interval.ms")
    found = []
    if session is not None and heartbeat is not None:
        found.append(membership.heartbeat_breach(session_ms=session, heartbeat_ms=heartbeat))
    if session is not None and max_poll is not None:
        found.append(membership.poll_interval_breach(session_ms=session, max_poll_ms=max_poll))
    return [_frame(values, b) for b in found if b is not None]


def _check_membership(values: dict[str, _Value]) -> list[str]:
    problems: list[str] = []
    tx = values.get(TRANSACTIONAL_ID_KEY)
    if tx is None or not tx.value.strip():
        problems.append(
            f"{TRANSACTIONAL_ID_KEY} is required for processing.guarantee=exactly_once_v2 "
            "(one per instance, e.g. ${env:POD_NAME})"
        )
    if any(ROWS[key].problem(values[key].value) for key in ("stateful", "membership.mode")):
        return problems  # reported by their rows; the rules need valid values
    stateful = values["stateful"].value.lower() == "true"
    mode = values["membership.mode"].value
    instance = values.get(INSTANCE_ID_KEY)
    breaches = membership.instance_id_breaches(
        stateful=stateful, mode=mode, instance_id=instance.value if instance else None
    )
    # The processor does not know its StatefulSet: replicas and the restart budget are the
    # Pulumi program's and the pack's to check.
    standby = _int_or_none(values, "num.standby.replicas")
    if standby is not None:
        breaches += membership.handoff_breaches(
            stateful=stateful, mode=mode, standby_replicas=standby, replicas=None
        )
    return [
        _problem("stateful", values["stateful"], f"{b.key} must be {b.required}: {b.why}")
        if b.key not in values
        else _frame(values, b)
        for b in breaches
    ] + problems


def _check_pair(values: Mapping[str, _Value]) -> list[str]:
    side = values.get(PAIR_SIDE_KEY)
    control = values.get(PAIR_CONTROL_TOPIC_KEY)
    if side is None or ROWS[PAIR_SIDE_KEY].problem(side.value):
        return []  # a single deployment, or reported by its row
    if control is None or not control.value.strip():
        return [
            _problem(
                PAIR_SIDE_KEY,
                side,
                f"a side of a pair needs {PAIR_CONTROL_TOPIC_KEY}, the topic that says which "
                "side publishes (the Pulumi program renders both)",
            )
        ]
    return []


_QUIET = logging.getLogger(f"{__name__}.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def _check_with_librdkafka(values: dict[str, _Value]) -> list[str]:
    """The combinations librdkafka checks (e.g. max.poll.interval.ms >= session.timeout.ms)."""
    settings = _build(values, None)
    problems = []
    checks = (
        ("consumer", CONSUMER_PREFIX, settings.consumer_config(), confluent_kafka.Consumer),
        ("producer", PRODUCER_PREFIX, settings.producer_config(), confluent_kafka.Producer),
    )
    for role, prefix, config, client in checks:
        offline = {k: v for k, v in config.items() if k != "bootstrap.servers"}
        message = _librdkafka_error(client, offline)
        if message is not None:
            problems.append(f"librdkafka rejects the {role} settings ({prefix}*): {message}")
    return problems


def _build(values: Mapping[str, _Value], source: Path | None) -> ProcessorSettings:
    def get(key: str) -> str:
        return values[key].value

    instance = values.get(INSTANCE_ID_KEY)
    stateful = get("stateful").lower() == "true"
    properties = {key: item.value for key, item in values.items()}
    for key in BOOL_KEYS:
        if key in properties:
            properties[key] = properties[key].lower()
    return ProcessorSettings(
        application_id=get("application.id"),
        bootstrap_servers=get("bootstrap.servers"),
        input_topic=get("input.topic"),
        output_topic=get("output.topic"),
        changelog_topic=get("changelog.topic"),
        dlq_topic=get("dlq.topic"),
        processing_guarantee=get("processing.guarantee"),
        stateful=stateful,
        state_dir=Path(get("state.dir")),
        health_port=int(get("health.port")),
        trigger_interval_ms=int(get("trigger.interval.ms")),
        max_records_per_batch=int(get("max.records.per.batch")),
        shutdown_timeout_ms=int(get("shutdown.timeout.ms")),
        task_timeout_ms=int(get("task.timeout.ms")),
        group_protocol=get("consumer.group.protocol"),
        membership_mode=get("membership.mode"),
        num_standby_replicas=int(get("num.standby.replicas")),
        class_data_archive=class_archive.resolve(get("class.data.archive")),
        python_forkserver=get("python.forkserver").lower() == "true",
        python_gc_freeze=get("python.gc.freeze").lower() == "true",
        aggregation_class=get("aggregation.class"),
        pair_side=get(PAIR_SIDE_KEY) if PAIR_SIDE_KEY in values else None,
        pair_control_topic=(
            get(PAIR_CONTROL_TOPIC_KEY)
            if PAIR_SIDE_KEY in values and PAIR_CONTROL_TOPIC_KEY in values
            else None
        ),
        instance_id=instance.value if (stateful and instance is not None) else None,
        transactional_id=values[TRANSACTIONAL_ID_KEY].value,
        properties=MappingProxyType(dict(sorted(properties.items()))),
        source=source,
    )


# --- command line ----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Validate a properties file and print the effective settings (secrets masked)."""
    parser = argparse.ArgumentParser(
        prog="python -m app.processor.settings",
        description="Validate the processor's properties file and print the effective settings "
        "(defaults included, ${env:...} resolved, secret-looking values masked).",
        epilog="exit codes: 0 valid, 1 invalid settings, 2 usage error",
    )
    parser.add_argument("--properties", type=Path, required=True, metavar="FILE")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.properties)
    except SettingsError as exc:
        print(exc, file=sys.stderr)
        return 1
    explicit = {line.key for line in parse_properties(args.properties.read_text("utf-8"))}
    masked = settings.masked_properties()
    print(f"# effective processor settings (secrets masked)\n# set in {args.properties}")
    for key in sorted(masked.keys() & explicit):
        print(f"{key}={masked[key]}")
    print("# defaults")
    for key in sorted(masked.keys() - explicit):
        print(f"{key}={masked[key]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
