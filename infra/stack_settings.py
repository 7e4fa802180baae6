"""The stack's settings as typed sections: one frozen model per section of `Pulumi.<stack>.yaml`,
keys in camelCase as Kubernetes and the stack file write them, and the one error shape that names
a setting, its value and what is allowed."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from contract import membership
from contract.acl_specs import KafkaUser, pipeline_users
from contract.broker_keys import durable_broker_configs
from contract.kafka_security import PLAINTEXT
from contract.processor_keys import DEFAULTS, PROTOCOL_CONSUMER
from contract.quantity import parse_quantity
from contract.restart_budget import RestartBudget, probe_budget_seconds, session_timeout_ms
from contract.stack_pipeline import PROJECT
from contract.topic_specs import (
    DeploymentNames,
    GroupConfigSpec,
    PipelineNames,
    TopicSpec,
    pipeline_topics,
    processor_deployments,
)

# The processor's default heartbeat (why it is short: its row in the contract's processor_keys);
# the session timeout here is minutes, so a third of it would let a member miss a rebalance for
# far too long.
HEARTBEAT_INTERVAL_MS = int(DEFAULTS["consumer.heartbeat.interval.ms"])


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
    # Every container on the broker's image (the broker, its init containers, the
    # metadata.version Job): IfNotPresent runs an image loaded into the node (`kind load`).
    image_pull_policy: Literal["Always", "IfNotPresent"]
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
    # The release (X.Y) whose `metadata.version` the cluster is finalized at after a roll (the
    # `kafka-features.sh upgrade` Job). Empty: the image's own release, as Strimzi does; set an
    # older one to keep the way back to that release's image open while the new one proves
    # itself. A finalized version never goes down.
    metadata_version: str

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
    """The pipeline's topics (see `contract.topic_specs.pipeline_topics`)."""

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
    """Who may reach the brokers and how (`contract/kafka_security.py`: the listeners)."""

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


def quantity(text: str) -> float:
    """A Kubernetes resource quantity (`500m`, `2`, `4Gi`) as a number."""
    return parse_quantity(text)


def cpu_cores(text: str) -> float:
    """CPU quantity in cores."""
    return parse_quantity(text)
