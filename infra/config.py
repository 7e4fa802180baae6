"""The stack configuration: one typed, validated object built from `Pulumi.<stack>.yaml`.

Every default lives in `PRESETS` below; a stack file sets only what differs. Keys are named the
way their upstream docs name them: Kubernetes fields in camelCase (`minReadySeconds`), Kafka and
processor settings with their dotted names (`group.initial.rebalance.delay.ms`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pulumi
from pulumi.runtime.config import CONFIG, get_config_env
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from infra.processor_properties import HEARTBEAT_INTERVAL_MS, processor_properties
from policies.contract import membership
from policies.contract.acl_specs import KafkaUser, pipeline_users
from policies.contract.broker_keys import durable_broker_configs
from policies.contract.java_properties import is_credential_key, is_reference
from policies.contract.kafka_security import PLAINTEXT, owned_by_security, scram_mechanism
from policies.contract.processor_keys import (
    INSTANCE_ID_KEY,
    PAIR_CONTROL_TOPIC_KEY,
    PAIR_SIDE_KEY,
    PROTOCOL_CONSUMER,
    key_problems,
)
from policies.contract.quantity import parse_quantity
from policies.contract.restart_budget import RestartBudget, probe_budget_seconds, session_timeout_ms
from policies.contract.stack_pipeline import PROJECT
from policies.contract.tls_settings import tls_weakenings
from policies.contract.topic_specs import (
    DeploymentNames,
    GroupConfigSpec,
    PipelineNames,
    TopicRole,
    TopicSpec,
    TopicSpecError,
    pipeline_topics,
    processor_deployments,
)
from policies.rules.credential_values import find_credentials
from policies.rules.images import is_digest_pinned

# The broker image, pinned by digest (the index digest of Docker Hub's apache/kafka:4.3.1, the
# release whose jars `app/devkit/kafka_release.py` runs locally): a tag can be pushed again, and a
# roll would then run two versions side by side.
KAFKA_IMAGE = (
    "apache/kafka:4.3.1@sha256:77e3df9054047a88b520d0cc46e16696d3b22022e1d580aeccd2632df6532837"
)
# Where the prod stack expects the processor image your CI pushes, pinned by the digest that
# `docker push` printed; the zeros are the example's placeholder, which a fork replaces.
EXAMPLE_PROCESSOR_IMAGE = "ghcr.io/example/stateful-streaming-processor:0.1.0@sha256:" + "0" * 64


class StackConfigError(ValueError):
    """A stack setting that cannot be deployed; the message names the setting and the fix."""


def setting_error(key: str, value: Any, allowed: str) -> StackConfigError:
    """The one error shape: the setting, the value found, what is allowed and where to change it."""
    return StackConfigError(
        f"{PROJECT}:{key} = {value!r}: {allowed}. Change it in Pulumi.<stack>.yaml "
        f"(`pulumi config set --path '{PROJECT}:{key}' <value>`)."
    )


class _Section(BaseModel):
    """A section of the stack file: keys in camelCase as Kubernetes and the stack file write them,
    unknown keys refused, values as YAML and `pulumi config set` give them (strings included)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        extra="forbid",
        frozen=True,
        coerce_numbers_to_str=True,
    )


class ProbeConfig(_Section):
    """A startup probe's budget: how long a pod may take to come up before it is restarted."""

    initial_delay_seconds: int
    period_seconds: int
    failure_threshold: int

    @property
    def budget_seconds(self) -> int:
        """The longest a container may take to pass this probe."""
        return round(
            probe_budget_seconds(
                self.initial_delay_seconds, self.failure_threshold, self.period_seconds
            )
        )


class KafkaConfig(_Section):
    """The KRaft cluster: combined broker+controller nodes."""

    replicas: int
    image: str
    storage_class_name: str
    storage: str
    cpu: str
    memory: str
    anti_affinity: Literal["required", "preferred"]
    zone_spread: bool
    termination_grace_period_seconds: int
    startup_probe: ProbeConfig
    # Broker settings in Kafka's own names; merged over the safe defaults in `broker_configs`.
    configs: dict[str, str]
    # The KRaft cluster id (`kafka-storage.sh random-uuid`). Empty: generated once at the first
    # `pulumi up` and kept in the stack's state. Set it to adopt brokers' existing volumes, or
    # where the random provider is not at hand; it can never change for a running cluster.
    cluster_id: str

    def broker_configs(
        self,
        replication_factor: int,
        min_insync_replicas: int,
        derived: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """The broker settings the cluster runs with: durable defaults, what the stack's other
        sections need (`derived`), then the stack's own."""
        durable = durable_broker_configs(replication_factor, min_insync_replicas)
        return dict(sorted({**durable, **(derived or {}), **self.configs}.items()))


class TopicsConfig(_Section):
    """The pipeline's topics (see `policies.contract.topic_specs.pipeline_topics`)."""

    input_topic: str
    output_topic: str
    partitions: int
    replication_factor: int
    min_insync_replicas: int
    changelog_segment_bytes: int
    dlq_partitions: int
    allow_partition_increase: bool
    # Topic-level configs by role (input, output, changelog, dlq), merged over the defaults.
    configs: dict[str, dict[str, str]]


class PairImagesConfig(_Section):
    """Each side's image of an active/standby pair (`processor.pairImages`), unset: the
    processor's image. A release sets one side's at a time (docs/operations.md, "Releasing with
    the pair"), so only that side's StatefulSet rolls while the other publishes."""

    a: str | None = None
    b: str | None = None

    def of(self, side: str) -> str | None:
        """The side's own image; None where unset."""
        images: dict[str, str | None] = self.model_dump()
        return images[side]

    def set_images(self) -> dict[str, str]:
        """The sides whose image is set, by side."""
        return {side: image for side, image in self.model_dump().items() if image is not None}


class ProcessorConfig(_Section):
    """The stateful processor StatefulSet and its properties file."""

    application_id: str
    image: str
    image_pull_policy: Literal["Always", "IfNotPresent"]
    replicas: int
    stateful: bool
    # The processor's `membership.mode`: static (a restart keeps its partitions, they wait for
    # it) or handoff (a stopping pod leaves the group, its partitions move at once).
    membership_mode: Literal["static", "handoff"]
    # The consumer group protocol: classic (client-side assignor, session and heartbeat) or
    # consumer (KIP-848: the broker assigns, and the group's session and heartbeat are group
    # configs the reconciler Job sets).
    group_protocol: Literal["classic", "consumer"]
    # The processor's `num.standby.replicas`: warm copies of each partition's state on other
    # instances, so a partition that moves (a hand-off, a failover) restores only the changelog
    # tail instead of the whole changelog. 0..replicas-1; handoff needs at least 1.
    num_standby_replicas: int
    cpu: str
    memory: str
    storage_class_name: str
    storage: str
    anti_affinity: Literal["required", "preferred"]
    zone_spread: bool
    pod_management_policy: Literal["OrderedReady", "Parallel"]
    min_ready_seconds: int
    termination_grace_period_seconds: int
    startup_probe: ProbeConfig
    # RollingUpdate `partition`: pods with an ordinal below it keep the old revision (canaries).
    partition: int
    # Added to the worst-case restart when computing `consumer.session.timeout.ms`.
    session_timeout_margin_seconds: int
    # How Prometheus finds the pods' /metrics (the dashboard needs each pod's name as `pod`):
    # `podMonitor` creates a PodMonitor (clusters with the Prometheus Operator), `annotations`
    # sets the conventional prometheus.io/* pod annotations, `none` leaves scraping to you.
    metrics_scrape: Literal["podMonitor", "annotations", "none"]
    # The namespace whose pods may reach the health port (/metrics, /ready, /live): where
    # Prometheus runs. Selected by its `kubernetes.io/metadata.name` label, never all namespaces.
    metrics_namespace: str
    # Processor properties (the contract's names), merged over the computed ones.
    properties: dict[str, str]
    # An active/standby pair (docs/operations.md): two complete deployments, sides a and b, each
    # its own group, state, user and transactional ids, both reading all input; only the active
    # one publishes, and which one that is lives in the pair's compacted control topic.
    pair: bool
    # A side's own image, for a release one side at a time; only with `pair`.
    pair_images: PairImagesConfig

    @property
    def deployments(self) -> tuple[DeploymentNames, ...]:
        """The processor's deployments: one, or the two sides of the pair."""
        return processor_deployments(self.application_id, pair=self.pair)

    def image_of(self, side: str | None) -> str:
        """The image a deployment runs: a side's from `pairImages`, else the processor's."""
        own = self.pair_images.of(side) if side is not None else None
        return own if own is not None else self.image

    @property
    def restart_budget(self) -> RestartBudget:
        """Worst case for one pod to stop, start and count as available again."""
        return RestartBudget(
            grace_seconds=self.termination_grace_period_seconds,
            startup_seconds=self.startup_probe.budget_seconds,
            min_ready_seconds=self.min_ready_seconds,
        )

    @property
    def restart_budget_seconds(self) -> int:
        """The restart budget in whole seconds."""
        return round(self.restart_budget.total_seconds)

    @property
    def static_member(self) -> bool:
        """Whether the processor joins with a `group.instance.id` (stateful, static mode)."""
        return membership.is_static_member(self.stateful, self.membership_mode)

    @property
    def computed_session_timeout_ms(self) -> int:
        """The session timeout this member's failure path needs (`restart_budget`)."""
        return session_timeout_ms(
            static_member=self.static_member,
            budget=self.restart_budget,
            margin_seconds=self.session_timeout_margin_seconds,
        )

    @property
    def heartbeat_interval_ms(self) -> int:
        """The heartbeat: the processor's default, at most a third of the session."""
        return min(HEARTBEAT_INTERVAL_MS, self.computed_session_timeout_ms // 3)

    @property
    def group_configs(self) -> dict[str, str]:
        """The group's own configs under KIP-848 (none under the classic protocol)."""
        if self.group_protocol != PROTOCOL_CONSUMER:
            return {}
        return membership.kip848_group_configs(
            session_ms=self.computed_session_timeout_ms, heartbeat_ms=self.heartbeat_interval_ms
        )

    @property
    def cores(self) -> int:
        """Whole cores for `spark.master=local[N]`: the CPU limit, at least one."""
        return max(1, math.floor(cpu_cores(self.cpu)))


class SecurityConfig(_Section):
    """Who may reach the brokers and how (`policies/contract/kafka_security.py`: the listeners)."""

    # The client listener's security protocol: SASL_SSL (SCRAM users, TLS, ACLs) or PLAINTEXT
    # (no authentication, no authorizer: a dev cluster on a laptop, visible here).
    client_listener: Literal["PLAINTEXT", "SASL_SSL"]
    # Where the brokers' certificate comes from: generated by this program (pulumi-tls, kept
    # in the stack's state) or a cert-manager `Certificate` from the issuer named below.
    certificates: Literal["generated", "cert-manager"]
    issuer_name: str
    issuer_kind: Literal["ClusterIssuer", "Issuer"]
    # Bump it by one to generate new SCRAM passwords for every user (rotation, see
    # docs/security.md): it picks the SCRAM mechanism too, SHA-512 on odd revisions and SHA-256 on
    # even ones, so the new credentials are set beside the old ones rather than over them.
    credentials_revision: int
    # The generated CA that signs the brokers' certificate, and the CAs every trust store holds
    # (empty: that one alone). A CA rollover takes three `pulumi up`s: trust [g, g+1], then sign
    # with g+1, then trust [g+1] (docs/security.md, "Certificates"; infra/certificate_authority.py).
    ca_generation: int
    trusted_ca_generations: tuple[int, ...]

    @property
    def secured(self) -> bool:
        """Whether the cluster runs with TLS, SCRAM users and ACLs."""
        return self.client_listener != PLAINTEXT

    @property
    def trusted_cas(self) -> tuple[int, ...]:
        """The CA generations in every trust store, oldest first."""
        return tuple(sorted(set(self.trusted_ca_generations) or {self.ca_generation}))


class StackConfig(_Section):
    """Everything the program deploys for one stack."""

    stack: str
    profile: Literal["dev", "prod"]
    namespace: str
    # `pulumi destroy` leaves the namespace, and with it the brokers' and processors' claims
    # (the StatefulSets retain them, the namespace's deletion would not): deleting data is a
    # separate, deliberate step (docs/operations.md, "What destroy leaves").
    keep_data_on_destroy: bool
    kafka: KafkaConfig
    topics: TopicsConfig
    processor: ProcessorConfig
    security: SecurityConfig

    @property
    def kafka_users(self) -> list[KafkaUser]:
        """The SCRAM users and their ACLs (none on a PLAINTEXT cluster: nothing checks them)."""
        if not self.security.secured:
            return []
        return pipeline_users(
            application_id=self.processor.application_id,
            topics=self.topic_specs,
            configured_groups=[g.group for g in self.group_config_specs],
            pair=self.processor.pair,
        )

    @property
    def group_config_specs(self) -> list[GroupConfigSpec]:
        """Each processor group's own configs for the reconciler (KIP-848 only)."""
        configs = self.processor.group_configs
        if not configs:
            return []
        return [GroupConfigSpec(d.application_id, configs) for d in self.processor.deployments]

    @property
    def names(self) -> PipelineNames:
        """The pipeline's names as this stack sets them."""
        return PipelineNames(
            self.processor.application_id, self.topics.input_topic, self.topics.output_topic
        )

    @property
    def pair_zone_anti_affinity(self) -> Literal["required", "preferred"]:
        """How strictly a pair's sides keep out of each other's zones: required in prod (a zone's
        outage must leave one side whole), preferred elsewhere (kind has one node, one zone)."""
        return "required" if self.profile == "prod" else "preferred"

    @property
    def topic_specs(self) -> list[TopicSpec]:
        """The topics as typed specs, with the stack's per-role config overrides applied."""
        t = self.topics
        specs = pipeline_topics(
            application_id=self.processor.application_id,
            input_topic=t.input_topic,
            output_topic=t.output_topic,
            partitions=t.partitions,
            replication_factor=t.replication_factor,
            min_insync_replicas=t.min_insync_replicas,
            changelog_segment_bytes=t.changelog_segment_bytes,
            dlq_partitions=t.dlq_partitions,
            pair=self.processor.pair,
        )
        return [
            dataclasses.replace(s, configs={**s.configs, **t.configs.get(s.role.value, {})})
            for s in specs
        ]

    @property
    def broker_configs(self) -> dict[str, str]:
        """The Kafka brokers' settings for this stack: under KIP-848 with group.consumer.*
        bounds that admit the processor group's own configs (the stack's `kafka.configs` win)."""
        return self.kafka.broker_configs(
            self.topics.replication_factor,
            self.topics.min_insync_replicas,
            membership.kip848_bounds_admitting(self.processor.group_configs),
        )


# The pipeline's default names (a fork renames them in `policies/contract/topic_specs.py`).
PIPELINE = PipelineNames()

_BASE: dict[str, Any] = {
    "namespace": "streaming",
    "keepDataOnDestroy": True,
    "kafka": {
        "replicas": 3,
        "image": KAFKA_IMAGE,
        "storageClassName": "standard",
        "storage": "2Gi",
        "cpu": "500m",
        "memory": "1Gi",
        "antiAffinity": "preferred",
        "zoneSpread": False,
        "terminationGracePeriodSeconds": 60,
        # Log recovery after an unclean stop can take minutes on a large disk.
        "startupProbe": {"initialDelaySeconds": 10, "periodSeconds": 10, "failureThreshold": 30},
        "configs": {"group.initial.rebalance.delay.ms": "0"},
        "clusterId": "",
    },
    "topics": {
        "inputTopic": PIPELINE.input_topic,
        "outputTopic": PIPELINE.output_topic,
        "partitions": 6,
        "replicationFactor": 3,
        "minInsyncReplicas": 2,
        # 64 MiB: the active segment is never compacted, so this bounds what a restore replays.
        "changelogSegmentBytes": 64 * 1024 * 1024,
        "dlqPartitions": 1,
        "allowPartitionIncrease": False,
        "configs": {},
    },
    "processor": {
        "applicationId": PIPELINE.application_id,
        "image": "stateful-streaming/processor:0.1.0",
        "imagePullPolicy": "IfNotPresent",
        "replicas": 2,
        "stateful": True,
        "membershipMode": "static",
        "groupProtocol": "classic",
        "numStandbyReplicas": 0,
        "cpu": "1",
        "memory": "2Gi",
        "storageClassName": "standard",
        "storage": "1Gi",
        "antiAffinity": "preferred",
        "zoneSpread": False,
        "podManagementPolicy": "OrderedReady",
        "minReadySeconds": 10,
        # The longest batch (a few seconds) plus stopping the query and closing the consumer.
        "terminationGracePeriodSeconds": 60,
        # SparkSession start (7-10 s) plus a restore from the changelog.
        "startupProbe": {"initialDelaySeconds": 5, "periodSeconds": 5, "failureThreshold": 24},
        "partition": 0,
        "sessionTimeoutMarginSeconds": 15,
        # Opt-in: a PodMonitor needs the Prometheus Operator's CRD, annotations a scrape job
        # that reads them; neither is there on every cluster.
        "metricsScrape": "none",
        "metricsNamespace": "monitoring",
        "properties": {},
        # Opt-in: two complete deployments cost twice the processor's resources.
        "pair": False,
        "pairImages": {},
    },
    "security": {
        "clientListener": "PLAINTEXT",
        "certificates": "generated",
        "issuerName": "",
        "issuerKind": "Issuer",
        "credentialsRevision": 1,
        "caGeneration": 1,
        "trustedCaGenerations": [],
    },
}

# Every default, per profile: `dev` fits a kind cluster on a laptop, `prod` a real cluster.
PRESETS: dict[str, dict[str, Any]] = {
    "dev": _BASE,
    "prod": {
        **_BASE,
        "kafka": {
            **_BASE["kafka"],
            "storageClassName": "",
            "storage": "100Gi",
            "cpu": "2",
            "memory": "8Gi",
            "antiAffinity": "required",
            "zoneSpread": True,
            "terminationGracePeriodSeconds": 120,
            # A cold start waits this long for more members before the first assignment.
            "configs": {"group.initial.rebalance.delay.ms": "3000"},
        },
        "topics": {**_BASE["topics"], "partitions": 12},
        "processor": {
            **_BASE["processor"],
            "image": EXAMPLE_PROCESSOR_IMAGE,
            "imagePullPolicy": "Always",
            "replicas": 3,
            # A rollout with static membership stops each restarted pod's partitions for its
            # whole restart; a hand-off moves them at once, to their standby copy
            # (docs/benchmarks.md has the rollout measured both ways). A copy on each other
            # replica (replicas - 1): the assignor does not know where copies are, so with
            # fewer a moved partition may restore its whole changelog (docs/benchmarks.md,
            # "Warm copies": the copies cost changelog reads, no measurable CPU).
            "membershipMode": "handoff",
            "numStandbyReplicas": 2,
            "cpu": "2",
            "memory": "4Gi",
            "storageClassName": "",
            "storage": "20Gi",
            "antiAffinity": "required",
            "zoneSpread": True,
            "minReadySeconds": 30,
            "terminationGracePeriodSeconds": 120,
            "startupProbe": {
                "initialDelaySeconds": 10,
                "periodSeconds": 10,
                "failureThreshold": 30,
            },
        },
        "security": {**_BASE["security"], "clientListener": "SASL_SSL"},
    },
}

_PROFILES = tuple(PRESETS)
_TOP_LEVEL = (
    "profile",
    "namespace",
    "keepDataOnDestroy",
    "kafka",
    "topics",
    "processor",
    "security",
)
# 16 bytes in URL-safe base64 without padding: the last character carries 2 bits, so it is one of
# the 16 whose low 4 bits are zero (Kafka's Uuid.fromString refuses anything else).
_KAFKA_CLUSTER_ID = re.compile(r"[A-Za-z0-9_-]{21}[AQgw]")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def quantity(text: str) -> float:
    """A Kubernetes resource quantity (`500m`, `2`, `4Gi`) as a number."""
    return parse_quantity(text)


def cpu_cores(text: str) -> float:
    """CPU quantity in cores."""
    return parse_quantity(text)


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge for nested sections; maps that hold free-form configs merge key by key too."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def build_stack_config(stack: str, raw: Mapping[str, Any]) -> StackConfig:
    """Build and validate the stack configuration from the project's keys (without the prefix).

    `raw` holds the values of `Pulumi.<stack>.yaml` under `stateful-streaming:`; structured
    values may be mappings or their JSON text, as the Pulumi CLI passes them.
    """
    raw = _nested(raw)
    unknown = sorted(set(raw) - set(_TOP_LEVEL))
    if unknown:
        raise setting_error(unknown[0], raw[unknown[0]], f"unknown key; known keys: {_TOP_LEVEL}")
    profile = raw.get("profile", stack if stack in PRESETS else None)
    if profile not in PRESETS:
        raise setting_error(
            "profile", profile, f"must be one of {', '.join(_PROFILES)} (the preset of defaults)"
        )
    merged = _merge(PRESETS[profile], {k: v for k, v in raw.items() if k != "profile"})
    try:
        config = StackConfig.model_validate({**merged, "stack": stack, "profile": profile})
    except ValidationError as err:
        raise _setting_error_of(err) from None
    if not _DNS_LABEL.match(config.namespace):
        raise setting_error("namespace", config.namespace, "must be a DNS label (a-z, 0-9, -)")
    _validate(config)
    return config


def _nested(raw: Mapping[str, Any]) -> dict[str, Any]:
    """`section.field` keys (what `pulumi new`'s prompts and `pulumi config set` without
    `--path` write) as the nested settings they name; both forms may be mixed, and a dotted key
    is applied over its section."""
    nested: dict[str, Any] = {k: v for k, v in raw.items() if "." not in k}
    for key, value in raw.items():
        if "." in key:
            section, _, setting = key.partition(".")
            if (
                section in _TOP_LEVEL
                and section in nested
                and not isinstance(nested[section], Mapping)
            ):
                raise setting_error(section, nested[section], "must be a map of settings")
            nested[section] = _merge(nested.get(section) or {}, {setting: value})
    return nested


# pydantic's error types, as the one error shape says them.
_ALLOWED = {
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "dict_type": "must be a map of names to values",
    "model_type": "must be a map of settings",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "missing": "missing and no default",
}


def _setting_error_of(error: ValidationError) -> StackConfigError:
    """The first problem pydantic found, named as the stack file names the setting."""
    first = error.errors(include_url=False)[0]
    loc = [str(part) for part in first["loc"]]
    kind = first["type"]
    if kind == "extra_forbidden":
        allowed = f"unknown key; known keys: {sorted(_section_keys(loc[:-1]))}"
    elif kind == "literal_error":
        allowed = f"must be one of {', '.join(map(str, _literal_values(loc)))}"
    else:
        allowed = _ALLOWED.get(kind, first["msg"])
    return setting_error(".".join(loc), first.get("input"), allowed)


def _section_model(loc: Sequence[str]) -> type[BaseModel] | None:
    model: type[BaseModel] = StackConfig
    for key in loc:
        fields = {f.alias or name: f for name, f in model.model_fields.items()}
        annotation = fields[key].annotation if key in fields else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _section_keys(loc: Sequence[str]) -> list[str]:
    model = _section_model(loc)
    if model is None:
        return []
    return [f.alias or name for name, f in model.model_fields.items()]


def _literal_values(loc: Sequence[str]) -> tuple[Any, ...]:
    model = _section_model(loc[:-1])
    fields = {f.alias or n: f for n, f in model.model_fields.items()} if model else {}
    field = fields.get(loc[-1])
    return typing.get_args(field.annotation) if field else ()


def _validate(config: StackConfig) -> None:
    """Rules that span settings; each raises the one error that names the setting to change."""
    kafka, topics, processor = config.kafka, config.topics, config.processor
    if kafka.cluster_id and not _KAFKA_CLUSTER_ID.fullmatch(kafka.cluster_id):
        raise setting_error(
            "kafka.clusterId",
            kafka.cluster_id,
            "must be a KRaft cluster id: 22 characters of URL-safe base64 (16 bytes), as "
            "`kafka-storage.sh random-uuid` prints it, or empty to generate one at the first up",
        )
    if config.profile == "prod" and kafka.replicas < 3:
        raise setting_error(
            "kafka.replicas",
            kafka.replicas,
            "a prod stack needs at least 3 brokers (replication factor 3, min.insync.replicas 2)",
        )
    if kafka.replicas < 1 or kafka.replicas % 2 == 0:
        raise setting_error(
            "kafka.replicas",
            kafka.replicas,
            "must be odd (1, 3, 5): every node is a KRaft controller and a quorum needs a majority",
        )
    if config.profile == "prod" and kafka.anti_affinity != "required":
        raise setting_error(
            "kafka.antiAffinity", kafka.anti_affinity, "must be required in prod: one broker a node"
        )
    if topics.replication_factor > kafka.replicas:
        raise setting_error(
            "topics.replicationFactor",
            topics.replication_factor,
            f"must be at most kafka.replicas ({kafka.replicas})",
        )
    highest = max(1, topics.replication_factor - 1)
    if not 1 <= topics.min_insync_replicas <= highest:
        raise setting_error(
            "topics.minInsyncReplicas",
            topics.min_insync_replicas,
            f"must be between 1 and {highest} (replicationFactor - 1) "
            "so that producers with acks=all keep writing while one broker rolls",
        )
    roles = [role.value for role in TopicRole]
    for role in topics.configs:
        if role not in roles:
            raise setting_error(
                f"topics.configs.{role}", topics.configs[role], f"roles: {', '.join(roles)}"
            )
    try:
        config.topic_specs  # noqa: B018 - building the specs is the check
    except TopicSpecError as err:
        raise setting_error("topics", "...", str(err)) from err
    if processor.replicas < 1 or processor.replicas > topics.partitions:
        raise setting_error(
            "processor.replicas",
            processor.replicas,
            f"must be between 1 and topics.partitions ({topics.partitions}): "
            "a member beyond the partition count owns nothing",
        )
    if processor.membership_mode == "handoff" and not processor.stateful:
        raise setting_error(
            "processor.membershipMode",
            processor.membership_mode,
            "handoff hands partitions and their state over, so it needs processor.stateful=true; "
            "allowed: static, handoff",
        )
    if not 0 <= processor.partition <= processor.replicas:
        raise setting_error(
            "processor.partition", processor.partition, f"must be 0..{processor.replicas}"
        )
    if not _DNS_LABEL.match(processor.application_id):
        raise setting_error(
            "processor.applicationId", processor.application_id, "must be a DNS label"
        )
    if not _DNS_LABEL.match(processor.metrics_namespace):
        raise setting_error(
            "processor.metricsNamespace",
            processor.metrics_namespace,
            "must be the name of the namespace Prometheus scrapes from (a DNS label); only its "
            "pods may reach the processor's health and metrics port",
        )
    for key in ("cpu", "memory", "storage"):
        for section, obj in (("kafka", kafka), ("processor", processor)):
            try:
                quantity(getattr(obj, key))
            except ValueError as err:
                raise setting_error(f"{section}.{key}", getattr(obj, key), str(err)) from err
    _validate_processor_properties(config)
    standby = membership.standby_breach(
        standby_replicas=processor.num_standby_replicas, replicas=processor.replicas
    )
    if standby is not None:
        raise setting_error(
            "processor.numStandbyReplicas", processor.num_standby_replicas, standby.message()
        )
    _validate_security(config)
    _validate_pair_images(processor)
    _validate_images(config)


# Node settings the cluster component derives from the StatefulSet (identity, quorum, storage).
_NODE_OWNED_KEYS = frozenset(
    {"process.roles", "node.id", "broker.id", "controller.quorum.voters", "log.dirs", "log.dir"}
)


# Contract keys that stack settings render (key -> ProcessorConfig field): a breach of them names
# the setting and its value, not the key.
_STACK_FIELD_OF = {
    "stateful": "stateful",
    "membership.mode": "membership_mode",
    "num.standby.replicas": "num_standby_replicas",
    "replicas": "replicas",
}


def _validate_processor_properties(config: StackConfig) -> None:
    """The properties the program renders pass the contract's rows and membership rules.

    The processor checks the same at start, and the pack in review: a stack that renders
    settings its own processor refuses fails here, at `pulumi up`.
    """
    processor = config.processor
    for key, problem in key_problems(processor.properties):
        raise setting_error(f"processor.properties.{key}", processor.properties[key], problem)
    for key in (PAIR_SIDE_KEY, PAIR_CONTROL_TOPIC_KEY):
        if key in processor.properties:
            raise setting_error(
                f"processor.properties.{key}",
                processor.properties[key],
                f"set processor.pair instead (now {str(processor.pair).lower()}; allowed: true, "
                "false): the program then renders both sides of the pair, each with its own "
                "application id, user and changelog, its pair.side and the pair's control topic; "
                "one deployment cannot be a side on its own",
            )
    protocol = processor.properties.get("consumer.group.protocol", processor.group_protocol)
    if protocol != processor.group_protocol:
        raise setting_error(
            "processor.properties.consumer.group.protocol",
            protocol,
            f"set processor.groupProtocol instead (now {processor.group_protocol}; allowed: "
            "classic, consumer): the program then renders the client settings the protocol "
            "allows and, under consumer, the group's own session and heartbeat",
        )
    rendered = processor_properties(config, bootstrap_servers="", client_security={})
    stateful, mode = processor.stateful, processor.membership_mode
    breaches = [
        *membership.instance_id_breaches(
            stateful=stateful, mode=mode, instance_id=rendered.get(INSTANCE_ID_KEY)
        ),
        *membership.handoff_breaches(
            stateful=stateful,
            mode=mode,
            standby_replicas=processor.num_standby_replicas,
            replicas=processor.replicas,
        ),
        *membership.classic_only_breaches(protocol, processor.properties),
    ]
    brokers = config.broker_configs
    if protocol == PROTOCOL_CONSUMER:
        group = processor.group_configs
        for breach in membership.kip848_bound_breaches(group, brokers):
            raise setting_error(f"kafka.configs.{breach.key}", breach.found, breach.message())
        session = int(group[membership.GROUP_SESSION_TIMEOUT_KEY])
        heartbeat = int(group[membership.GROUP_HEARTBEAT_INTERVAL_KEY])
        (low_key, low), (high_key, high) = membership.KIP848_BOUNDS[
            membership.GROUP_SESSION_TIMEOUT_KEY
        ]
        low, high = int(brokers.get(low_key, low)), int(brokers.get(high_key, high))
    else:
        session = int(rendered["consumer.session.timeout.ms"])
        heartbeat = int(rendered["consumer.heartbeat.interval.ms"])
        low = int(
            brokers.get("group.min.session.timeout.ms", membership.BROKER_MIN_SESSION_TIMEOUT_MS)
        )
        high = int(
            brokers.get("group.max.session.timeout.ms", membership.BROKER_MAX_SESSION_TIMEOUT_MS)
        )
    breaches += membership.session_breaches(
        stateful=stateful,
        mode=mode,
        session_ms=session,
        budget=processor.restart_budget,
        broker_min_ms=low,
        broker_max_ms=high,
    )
    optional = [
        membership.heartbeat_breach(session_ms=session, heartbeat_ms=heartbeat),
        membership.poll_interval_breach(
            session_ms=session, max_poll_ms=int(rendered["consumer.max.poll.interval.ms"])
        ),
    ]
    breaches += [b for b in optional if b is not None]
    for breach in breaches:
        field = _STACK_FIELD_OF.get(breach.key)
        if field is not None:
            alias = ProcessorConfig.model_fields[field].alias
            raise setting_error(f"processor.{alias}", getattr(processor, field), breach.message())
        overridden = breach.key in processor.properties
        fix = "" if overridden else " (computed from the StatefulSet's restart budget)"
        raise setting_error(
            f"processor.properties.{breach.key}",
            processor.properties.get(breach.key, breach.found),
            f"{breach.message()}{fix}",
        )


def _validate_pair_images(processor: ProcessorConfig) -> None:
    """`processor.pairImages` names images of a pair's sides, and only of a pair's."""
    images = processor.pair_images.set_images()
    if images and not processor.pair:
        raise setting_error(
            "processor.pairImages",
            images,
            "allowed only with processor.pair: true (now false): a single deployment runs "
            "processor.image; remove processor.pairImages, or set processor.pair to true",
        )
    for side, image in images.items():
        if not image.strip():
            raise setting_error(
                f"processor.pairImages.{side}",
                image,
                f"must be an image reference; remove the key for side {side} to run "
                "processor.image",
            )


def _validate_images(config: StackConfig) -> None:
    """Prod runs images pinned by digest: a tag can move, and a roll would then mix versions."""
    if config.profile != "prod":
        return
    images = {
        "kafka.image": config.kafka.image,
        "processor.image": config.processor.image,
        **{
            f"processor.pairImages.{side}": image
            for side, image in config.processor.pair_images.set_images().items()
        },
    }
    for key, image in images.items():
        if not is_digest_pinned(image):
            raise setting_error(
                key,
                image,
                "a prod stack runs images pinned by digest, image[:tag]@sha256:<64 hex digits> "
                "(the digest `docker push` or `docker buildx imagetools inspect` prints); a tag "
                "can be pushed again, and a rolling restart would then run two versions",
            )


def _validate_ca_rollover(security: SecurityConfig) -> None:
    """The generated CAs form one of a rollover's states: one CA, or two consecutive ones."""
    generation, trusted = security.ca_generation, security.trusted_cas
    if generation < 1:
        raise setting_error("security.caGeneration", generation, "must be at least 1")
    if security.certificates == "cert-manager" and (generation, trusted) != (1, (1,)):
        raise setting_error(
            "security.caGeneration",
            generation,
            "applies to the generated CA; with certificates: cert-manager the issuer's CA is "
            'rolled over in cert-manager (docs/security.md, "Certificates"); remove caGeneration '
            "and trustedCaGenerations",
        )
    if generation not in trusted:
        raise setting_error(
            "security.trustedCaGenerations",
            list(security.trusted_ca_generations),
            f"must hold caGeneration ({generation}): the brokers would serve a certificate "
            "that no trust store accepts",
        )
    if trusted[0] < 1 or len(trusted) > 2 or trusted[-1] - trusted[0] > 1:
        raise setting_error(
            "security.trustedCaGenerations",
            list(security.trusted_ca_generations),
            f"must be [{generation}] or two consecutive generations with it, [{generation - 1}, "
            f"{generation}] or [{generation}, {generation + 1}]: a rollover moves one "
            "generation at a time",
        )


def _validate_security(config: StackConfig) -> None:
    security = config.security
    if config.profile == "prod" and not security.secured:
        raise setting_error(
            "security.clientListener",
            security.client_listener,
            "a prod stack needs SASL_SSL (TLS on every listener, SCRAM users, ACLs that deny "
            "by default); PLAINTEXT lets every pod that reaches the brokers read and write "
            "every topic and is for a dev cluster on a laptop; allowed here: SASL_SSL",
        )
    for key, value in config.kafka.configs.items():
        owner = (
            "the listeners' security, from security.clientListener "
            "(policies/contract/kafka_security.py)"
            if owned_by_security(key)
            else "the cluster's layout (infra/kafka_cluster.py)"
            if key in _NODE_OWNED_KEYS
            else None
        )
        if owner is not None:
            raise setting_error(
                f"kafka.configs.{key}",
                "****" if is_credential_key(key) else value,
                f"set by the program from {owner}; remove it. Allowed in kafka.configs: broker "
                "settings outside listeners, TLS, SASL, authorization and the node layout",
            )
    for key, value in config.processor.properties.items():
        for weakening in tls_weakenings({key: value}):
            raise setting_error(
                f"processor.properties.{key}",
                value,
                f"must be {weakening.required}: {weakening.why} (the processor refuses it at "
                "start); remove it",
            )
    if security.certificates == "cert-manager" and not security.issuer_name:
        raise setting_error(
            "security.issuerName",
            security.issuer_name,
            "certificates from cert-manager need the name of a CA issuer (its Secrets carry "
            "ca.crt, the clients' trust store); allowed: an Issuer or ClusterIssuer name",
        )
    if (
        config.profile == "prod"
        and security.certificates == "cert-manager"
        and security.issuer_kind == "ClusterIssuer"
    ):
        raise setting_error(
            "security.issuerKind",
            security.issuer_kind,
            "a prod stack needs a namespaced Issuer: a ClusterIssuer signs a CN=kafka-broker "
            "certificate for whoever asks in any namespace, and every such certificate is a "
            "super user of these brokers (super.users=User:CN=kafka-broker); allowed here: Issuer",
        )
    _validate_ca_rollover(security)
    if security.credentials_revision < 1:
        raise setting_error(
            "security.credentialsRevision", security.credentials_revision, "must be at least 1"
        )
    for key, value in config.processor.properties.items():
        # The revision picks the mechanism, so a rotation never replaces a password in use; a
        # pinned one would leave the processor with a retired credential after every second one.
        if security.secured and (key == "sasl.mechanism" or key.endswith(".sasl.mechanism")):
            raise setting_error(
                f"processor.properties.{key}",
                value,
                "set by the program from security.credentialsRevision "
                f"({scram_mechanism(1)} on odd revisions, {scram_mechanism(2)} on even ones: "
                "the gapless rotation in docs/security.md); remove it",
            )
    # A credential in Pulumi.<stack>.yaml is in git and in every preview: the processor reads
    # its secrets from its environment (`${env:NAME}`, from a Secret), never from the file.
    for key, value in config.processor.properties.items():
        if is_credential_key(key) and not is_reference(value):
            raise setting_error(
                f"processor.properties.{key}",
                "****",
                "a credential never goes into plain stack config; on a SASL_SSL cluster the "
                "program creates the processor's user and password (a Secret); your own "
                "secret goes into a Kubernetes Secret, mounted and referenced as "
                "${dir:DIRECTORY:FILE}",
            )
        # Also inside a value: `-Djavax.net.ssl.keyStorePassword=...` in JVM options.
        inside = find_credentials(value)
        if inside:
            raise setting_error(
                f"processor.properties.{key}",
                "****",
                f"holds a credential in clear in its {inside[0].key} (value not shown); a "
                "credential never goes into plain stack config: put it into a Kubernetes Secret, "
                f"mount it and write {inside[0].key}=${{dir:DIRECTORY:FILE}} in the value (the "
                "processor resolves a reference anywhere in a value)",
            )


def load_stack_config() -> StackConfig:
    """The running stack's configuration, read from the Pulumi runtime and validated."""
    prefix = f"{PROJECT}:"
    raw: dict[str, Any] = {}
    for key, value in {**get_config_env(), **CONFIG.get()}.items():
        if not key.startswith(prefix):
            continue
        try:
            raw[key[len(prefix) :]] = json.loads(value) if isinstance(value, str) else value
        except json.JSONDecodeError:
            raw[key[len(prefix) :]] = value
    return build_stack_config(pulumi.get_stack(), raw)
