"""Cross-resource lookups for stack policies: which ConfigMap a processor reads, which PDB and
Service cover a StatefulSet, which Kafka cluster a processor talks to."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pulumi_policy import PolicyResource

from contract.container_commands import PROPERTIES_FILE as PROPERTIES_KEY
from contract.java_properties import load_properties

from .manifests import (
    CONFIG_MAP,
    PDB,
    SERVICE,
    STATEFUL_SET,
    WORKLOAD_TYPES,
    get,
    is_kafka_broker,
    is_processor,
    items,
    label,
    name_of,
    namespace_of,
    number,
    pod_labels,
    pod_spec,
)

PROPERTIES_SUFFIX = ".properties"
# A JAAS login module's `username="..."` option (the Java client's SCRAM login).
_JAAS_USERNAME = re.compile(r'\busername="([^"]*)"')
STANDBY_KEY = "num.standby.replicas"


@dataclass(frozen=True)
class ProcessorDeployment:
    """A workload running the processor, with the properties file its pods mount."""

    workload: PolicyResource
    properties: Mapping[str, str]
    config_map: PolicyResource | None

    @property
    def stateful(self) -> bool:
        """`stateful=false` marks a stateless processor (dynamic membership, no local state)."""
        return self.properties.get("stateful", "true").strip().lower() != "false"

    @property
    def standby_replicas(self) -> float:
        """`num.standby.replicas`: warm copies of each partition's state (absent: 0)."""
        return number(self.properties.get(STANDBY_KEY)) or 0.0

    @property
    def standby_found(self) -> str:
        """The value as a message shows it: the file's text, or that it is absent."""
        return self.properties.get(STANDBY_KEY, "absent (default 0)")

    @property
    def properties_subject(self) -> tuple[str, str]:
        """How a message names the properties file (the workload's, when it mounts none), and
        the URN to attach it to."""
        if self.config_map is None:
            workload = self.workload
            subject = f"{label(workload.resource_type, workload.props)} (no {PROPERTIES_KEY})"
            return subject, workload.urn
        config_map = self.config_map
        subject = f"{label(config_map.resource_type, config_map.props)} data[{PROPERTIES_KEY}]"
        return subject, config_map.urn


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, Any]) -> bool:
    """Whether a label selector (`matchLabels` form, or a Service's plain map) selects `labels`."""
    if not isinstance(selector, Mapping):
        return False
    match_labels = selector.get("matchLabels", selector)
    if not isinstance(match_labels, Mapping) or not match_labels:
        return False
    return all(labels.get(k) == v for k, v in match_labels.items())


class StackView:
    """The stack's resources indexed the way the stack policies ask for them."""

    def __init__(self, resources: Iterable[PolicyResource]) -> None:
        self.resources = list(resources)

    def of_type(self, resource_type: str) -> list[PolicyResource]:
        """Resources of one type token."""
        return [r for r in self.resources if r.resource_type == resource_type]

    def workloads(self) -> list[PolicyResource]:
        """Everything that runs pods."""
        return [r for r in self.resources if r.resource_type in WORKLOAD_TYPES]

    def statefulsets(self) -> list[PolicyResource]:
        """The StatefulSets of the stack."""
        return self.of_type(STATEFUL_SET)

    def kafka_clusters(self) -> list[PolicyResource]:
        """Workloads running Kafka nodes."""
        return [r for r in self.workloads() if is_kafka_broker(r.resource_type, r.props)]

    def kafka_for(self, properties: Mapping[str, str]) -> PolicyResource | None:
        """The in-stack Kafka cluster a processor's `bootstrap.servers` names (None: external)."""
        clusters = self.kafka_clusters()
        servers = properties.get("bootstrap.servers", "")
        for cluster in clusters:
            if f"{name_of(cluster.props)}.{namespace_of(cluster.props)}" in servers:
                return cluster
        return clusters[0] if len(clusters) == 1 else None

    def config_map(self, namespace: str, name: str) -> PolicyResource | None:
        """The ConfigMap `namespace/name` declared in this stack."""
        for resource in self.of_type(CONFIG_MAP):
            if namespace_of(resource.props) == namespace and name_of(resource.props) == name:
                return resource
        return None

    def mounted_config_maps(self, workload: PolicyResource) -> list[PolicyResource]:
        """The ConfigMaps of this stack a workload's pods mount (as volumes or projections)."""
        namespace = namespace_of(workload.props)
        found = []
        for volume in items(pod_spec(workload.resource_type, workload.props), "volumes"):
            names = [get(volume, "configMap", "name")] + [
                get(source, "configMap", "name") for source in items(volume, "projected", "sources")
            ]
            for name in filter(None, names):
                config_map = self.config_map(namespace, str(name))
                if config_map is not None:
                    found.append(config_map)
        return found

    def kafka_user(self, workload: PolicyResource) -> str | None:
        """The Kafka user a workload connects as: `sasl.username` (a Java client's: the
        `username` of its `sasl.jaas.config`) of a properties file in a ConfigMap its pods
        mount (else a processor's `application.id`, which names its user).

        For a Kafka cluster that is its readiness sidecars' user (the brokers themselves are
        their certificate, and no properties file of theirs names a SCRAM user)."""
        found: dict[str, str] = {}
        for config_map in self.mounted_config_maps(workload):
            for key, text in get(config_map.props, "data", default={}).items():
                if str(key).endswith(PROPERTIES_SUFFIX) and isinstance(text, str):
                    for setting, value in load_properties(text).items():
                        found.setdefault(setting, value)
        jaas = _JAAS_USERNAME.search(found.get("sasl.jaas.config", ""))
        return (
            found.get("sasl.username")
            or (jaas.group(1) if jaas else None)
            or found.get("application.id")
        )

    def processors(self) -> list[ProcessorDeployment]:
        """Every processor workload with the properties of the ConfigMap its pods mount."""
        found = []
        for workload in self.workloads():
            if not is_processor(workload.resource_type, workload.props):
                continue
            config_map, properties = None, {}
            for volume in items(pod_spec(workload.resource_type, workload.props), "volumes"):
                name = get(volume, "configMap", "name")
                candidate = name and self.config_map(namespace_of(workload.props), name)
                text = get(candidate.props, "data", PROPERTIES_KEY) if candidate else None
                if isinstance(text, str):
                    config_map, properties = candidate, load_properties(text)
                    break
            found.append(ProcessorDeployment(workload, properties, config_map))
        return found

    def covering(self, resource_type: str, workload: PolicyResource) -> list[PolicyResource]:
        """Services or PDBs in the workload's namespace whose selector selects its pods."""
        labels = pod_labels(workload.resource_type, workload.props)
        namespace = namespace_of(workload.props)
        selector_path = ("spec", "selector")
        return [
            r
            for r in self.of_type(resource_type)
            if namespace_of(r.props) == namespace and selects(get(r.props, *selector_path), labels)
        ]

    def pdbs_for(self, workload: PolicyResource) -> list[PolicyResource]:
        """PodDisruptionBudgets that cover a workload's pods."""
        return self.covering(PDB, workload)

    def governing_service(self, statefulset: PolicyResource) -> PolicyResource | None:
        """The Service named by a StatefulSet's `spec.serviceName` (its pods' DNS domain)."""
        name = get(statefulset.props, "spec", "serviceName")
        for service in self.of_type(SERVICE):
            if name_of(service.props) == name and namespace_of(service.props) == namespace_of(
                statefulset.props
            ):
                return service
        return None
