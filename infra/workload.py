"""Building blocks the Kafka and processor StatefulSets share: labels, hardened security
contexts, placement, the headless Service and PodDisruptionBudget every StatefulSet needs, and
the Pulumi timeout that covers a full roll."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import pulumi
import pulumi_kubernetes as k8s

from contract.images import is_digest_pinned
from contract.workload_shapes import (
    DNS_NAMESPACE,
    DNS_POD_LABELS,
    DNS_PORT,
    NAMESPACE_NAME_LABEL,
)

PART_OF = "stateful-streaming"


# Anti-affinity and spread keys: one pod a node, pods spread over zones.
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
ZONE_TOPOLOGY = "topology.kubernetes.io/zone"


def labels(name: str, component: str) -> dict[str, str]:
    """Recommended labels; `name` and `instance` select the pods of one workload."""
    return {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": "pulumi",
    }


def selector(name: str) -> dict[str, str]:
    """The immutable subset of `labels` that selects a workload's pods."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": name}


def content_name(prefix: str, content: str) -> str:
    """A name that changes with the content: a new ConfigMap or Job rolls what uses it."""
    return f"{prefix}-{hashlib.sha256(content.encode()).hexdigest()[:8]}"


def checkov_skips(reasons: Mapping[str, str]) -> dict[str, str]:
    """Checkov skip annotations (`checkov.io/skipN: CKV_ID=reason`), one per exception."""
    return {
        f"checkov.io/skip{i}": f"{check}={reason}"
        for i, (check, reason) in enumerate(sorted(reasons.items()), start=1)
    }


def image_skips(images: Iterable[str], image_pull_policy: str) -> dict[str, str]:
    """The image checks a workload's images fail as configured, with the reason for each."""
    skips = {}
    if not all(is_digest_pinned(image) for image in images):
        # Prod's stack validation refuses an image without a digest; dev runs a local build.
        skips["CKV_K8S_43"] = "a dev stack may run images by tag; prod requires digests"
    if image_pull_policy != "Always":
        skips["CKV_K8S_15"] = "dev loads the image into kind (kind load); no registry to pull"
    return skips


def pod_security_context(uid: int) -> k8s.core.v1.PodSecurityContextArgs:
    """Non-root pod, the runtime's default seccomp profile, volumes writable by `uid`'s group."""
    return k8s.core.v1.PodSecurityContextArgs(
        run_as_non_root=True,
        run_as_user=uid,
        run_as_group=uid,
        fs_group=uid,
        # Only chown a volume when its root has the wrong group: fast restarts on large PVCs.
        fs_group_change_policy="OnRootMismatch",
        seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
    )


def container_security_context() -> k8s.core.v1.SecurityContextArgs:
    """Least privilege: no capabilities, no escalation, nothing written outside the mounts."""
    return k8s.core.v1.SecurityContextArgs(
        allow_privilege_escalation=False,
        read_only_root_filesystem=True,
        privileged=False,
        capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"]),
    )


def http_probe(
    path: str,
    port: int,
    *,
    period_seconds: int,
    failure_threshold: int,
    initial_delay_seconds: int | None = None,
    timeout_seconds: int | None = None,
) -> k8s.core.v1.ProbeArgs:
    """A probe that GETs `path` on `port` (2xx/3xx: success)."""
    return k8s.core.v1.ProbeArgs(
        http_get=k8s.core.v1.HTTPGetActionArgs(path=path, port=port),
        initial_delay_seconds=initial_delay_seconds,
        period_seconds=period_seconds,
        timeout_seconds=timeout_seconds,
        failure_threshold=failure_threshold,
    )


def guaranteed_resources(cpu: str, memory: str) -> k8s.core.v1.ResourceRequirementsArgs:
    """Requests equal to limits: Guaranteed QoS, the last class evicted under node pressure."""
    amounts = {"cpu": cpu, "memory": memory}
    return k8s.core.v1.ResourceRequirementsArgs(requests=amounts, limits=amounts)


@dataclass(frozen=True)
class PairPartner:
    """The other side of an active/standby pair, as one side's placement sees it.

    The pair is the processor's zone redundancy, not each side's spread: a side prefers one
    zone for all its pods and keeps out of every zone that holds a pod of the other side
    (`strength`: required in prod), so a zone's outage takes at most one side, and the other,
    whole in another zone, takes over (`pair_switch switch --force`). A side's own zone spread
    (maxSkew 1 over zones) would put its N replicas into N zones and leave the other side no
    zone on an ordinary 3-zone cluster.
    """

    name: str  # the other side's workload (its application id)
    strength: Literal["required", "preferred"]


def _pod_term(name: str, topology_key: str) -> k8s.core.v1.PodAffinityTermArgs:
    """A pod (anti-)affinity term on the pods of workload `name`."""
    return k8s.core.v1.PodAffinityTermArgs(
        label_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector(name)),
        topology_key=topology_key,
    )


def _weighted(
    terms: Sequence[k8s.core.v1.PodAffinityTermArgs],
) -> list[k8s.core.v1.WeightedPodAffinityTermArgs] | None:
    """Preferred terms, each at the highest weight (there is nothing to rank them against)."""
    return [
        k8s.core.v1.WeightedPodAffinityTermArgs(weight=100, pod_affinity_term=term)
        for term in terms
    ] or None


def placement(
    name: str, *, anti_affinity: str, zone_spread: bool, partner: PairPartner | None = None
) -> tuple[k8s.core.v1.AffinityArgs, list[k8s.core.v1.TopologySpreadConstraintArgs] | None]:
    """Hostname anti-affinity (required or preferred), and either an even spread over zones (if
    asked) or, for a side of a pair (`partner`), the pair's zone placement instead: a preferred
    affinity to the side's own pods on the zone and an anti-affinity against the partner's."""
    required: list[k8s.core.v1.PodAffinityTermArgs] = []
    preferred: list[k8s.core.v1.PodAffinityTermArgs] = []
    (required if anti_affinity == "required" else preferred).append(
        _pod_term(name, HOSTNAME_TOPOLOGY)
    )
    pod_affinity = None
    if partner is not None:
        (required if partner.strength == "required" else preferred).append(
            _pod_term(partner.name, ZONE_TOPOLOGY)
        )
        # Preferred, not required: a zone with fewer free nodes than replicas lets the side
        # spill into a second zone rather than leave pods pending.
        pod_affinity = k8s.core.v1.PodAffinityArgs(
            preferred_during_scheduling_ignored_during_execution=_weighted(
                [_pod_term(name, ZONE_TOPOLOGY)]
            )
        )
    pod_anti_affinity = k8s.core.v1.PodAntiAffinityArgs(
        required_during_scheduling_ignored_during_execution=required or None,
        preferred_during_scheduling_ignored_during_execution=_weighted(preferred),
    )
    spread = None
    # A side's zone redundancy is the other side (see `PairPartner`), never its own spread.
    if zone_spread and partner is None:
        spread = [
            k8s.core.v1.TopologySpreadConstraintArgs(
                max_skew=1,
                topology_key=ZONE_TOPOLOGY,
                when_unsatisfiable="DoNotSchedule",
                label_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector(name)),
            )
        ]
    affinity = k8s.core.v1.AffinityArgs(
        pod_affinity=pod_affinity, pod_anti_affinity=pod_anti_affinity
    )
    return affinity, spread


def downward_env(*extra: k8s.core.v1.EnvVarArgs) -> list[k8s.core.v1.EnvVarArgs]:
    """POD_NAME and POD_NAMESPACE from the downward API, then `extra`."""
    return [
        k8s.core.v1.EnvVarArgs(
            name="POD_NAME",
            value_from=k8s.core.v1.EnvVarSourceArgs(
                field_ref=k8s.core.v1.ObjectFieldSelectorArgs(field_path="metadata.name")
            ),
        ),
        k8s.core.v1.EnvVarArgs(
            name="POD_NAMESPACE",
            value_from=k8s.core.v1.EnvVarSourceArgs(
                field_ref=k8s.core.v1.ObjectFieldSelectorArgs(field_path="metadata.namespace")
            ),
        ),
        *extra,
    ]


# The claims outlive the StatefulSet and its scale-down: state and logs are never deleted
# by an automated change (GA since Kubernetes 1.32).
RETAIN_CLAIMS = k8s.apps.v1.StatefulSetPersistentVolumeClaimRetentionPolicyArgs(
    when_deleted="Retain", when_scaled="Retain"
)


def headless_service(
    name: str,
    namespace: str,
    *,
    service_labels: Mapping[str, str],
    ports: Sequence[tuple[str, int]],
    publish_not_ready: bool,
    opts: pulumi.ResourceOptions,
) -> k8s.core.v1.Service:
    """The StatefulSet's governing Service: stable DNS names `<pod>.<name>.<namespace>.svc`."""
    return k8s.core.v1.Service(
        name,
        metadata=k8s.meta.v1.ObjectMetaArgs(name=name, namespace=namespace, labels=service_labels),
        spec=k8s.core.v1.ServiceSpecArgs(
            cluster_ip="None",
            publish_not_ready_addresses=publish_not_ready,
            selector=selector(service_labels["app.kubernetes.io/name"]),
            ports=[
                k8s.core.v1.ServicePortArgs(name=port_name, port=port, target_port=port)
                for port_name, port in ports
            ],
        ),
        opts=opts,
    )


def disruption_budget(
    name: str, namespace: str, service_labels: Mapping[str, str], opts: pulumi.ResourceOptions
) -> k8s.policy.v1.PodDisruptionBudget:
    """At most one pod of the workload voluntarily down (drains, node upgrades) at a time."""
    return k8s.policy.v1.PodDisruptionBudget(
        name,
        metadata=k8s.meta.v1.ObjectMetaArgs(name=name, namespace=namespace, labels=service_labels),
        spec=k8s.policy.v1.PodDisruptionBudgetSpecArgs(
            max_unavailable=1,
            selector=k8s.meta.v1.LabelSelectorArgs(
                match_labels=selector(service_labels["app.kubernetes.io/name"])
            ),
        ),
        opts=opts,
    )


def service_account(
    name: str, namespace: str, service_labels: Mapping[str, str], opts: pulumi.ResourceOptions
) -> k8s.core.v1.ServiceAccount:
    """A workload's own identity with no API token mounted: none of the pods call the API."""
    return k8s.core.v1.ServiceAccount(
        name,
        metadata=k8s.meta.v1.ObjectMetaArgs(name=name, namespace=namespace, labels=service_labels),
        automount_service_account_token=False,
        opts=opts,
    )


def pod_peer(match_labels: Mapping[str, str]) -> k8s.networking.v1.NetworkPolicyPeerArgs:
    """The pods with these labels, in the policy's own namespace."""
    return k8s.networking.v1.NetworkPolicyPeerArgs(
        pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=dict(match_labels))
    )


def namespace_peer(namespace: str) -> k8s.networking.v1.NetworkPolicyPeerArgs:
    """Every pod of one namespace, selected by its name (never `namespaceSelector: {}`)."""
    return k8s.networking.v1.NetworkPolicyPeerArgs(
        namespace_selector=k8s.meta.v1.LabelSelectorArgs(
            match_labels={NAMESPACE_NAME_LABEL: namespace}
        )
    )


def tcp_ports(*numbers: int) -> list[k8s.networking.v1.NetworkPolicyPortArgs]:
    """TCP ports of a NetworkPolicy rule."""
    return [k8s.networking.v1.NetworkPolicyPortArgs(port=n, protocol="TCP") for n in numbers]


def dns_egress() -> k8s.networking.v1.NetworkPolicyEgressRuleArgs:
    """Name lookups: the cluster DNS pods in kube-system, port 53 over UDP and TCP."""
    return k8s.networking.v1.NetworkPolicyEgressRuleArgs(
        to=[
            k8s.networking.v1.NetworkPolicyPeerArgs(
                namespace_selector=k8s.meta.v1.LabelSelectorArgs(
                    match_labels={NAMESPACE_NAME_LABEL: DNS_NAMESPACE}
                ),
                pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=DNS_POD_LABELS),
            )
        ],
        ports=[
            k8s.networking.v1.NetworkPolicyPortArgs(port=DNS_PORT, protocol=protocol)
            for protocol in ("UDP", "TCP")
        ],
    )


def network_policy(
    name: str,
    namespace: str,
    service_labels: Mapping[str, str],
    *,
    ingress: Sequence[k8s.networking.v1.NetworkPolicyIngressRuleArgs],
    egress: Sequence[k8s.networking.v1.NetworkPolicyEgressRuleArgs],
    opts: pulumi.ResourceOptions,
) -> k8s.networking.v1.NetworkPolicy:
    """Both directions of a workload's pods: only `ingress` reaches them, they reach only
    `egress` and the cluster DNS (an empty list denies that direction)."""
    return k8s.networking.v1.NetworkPolicy(
        name,
        metadata=k8s.meta.v1.ObjectMetaArgs(name=name, namespace=namespace, labels=service_labels),
        spec=k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=k8s.meta.v1.LabelSelectorArgs(
                match_labels=selector(service_labels["app.kubernetes.io/name"])
            ),
            policy_types=["Ingress", "Egress"],
            ingress=list(ingress) or None,
            egress=[*egress, dns_egress()],
        ),
        opts=opts,
    )


# pulumi-kubernetes' own wait for a StatefulSet ends when the last pod is Ready, not once it has
# been ready for `minReadySeconds`, and up to 4.33 it can end before the controller has even seen
# the change (pulumi-kubernetes #4094: it compared metadata.generation, not
# status.observedGeneration). Its `pulumi.com/waitFor` annotation replaces that wait: every
# JSONPath condition must hold on a status whose observedGeneration is current.
WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"


def roll_complete(replicas: int, partition: int = 0) -> dict[str, str]:
    """The annotation that makes `pulumi up` return once a StatefulSet's roll is over: every
    pod from `partition` up on the new revision and every pod available (ready for
    `minReadySeconds`)."""
    conditions = [
        f"jsonpath={{.status.replicas}}={replicas}",
        f"jsonpath={{.status.updatedReplicas}}={replicas - partition}",
        f"jsonpath={{.status.availableReplicas}}={replicas}",
    ]
    return {WAIT_FOR_ANNOTATION: json.dumps(conditions)}


def roll_timeouts(replicas: int, restart_budget_seconds: int) -> pulumi.CustomTimeouts:
    """Pulumi's wait for a StatefulSet: every pod restarted one at a time, plus 5 minutes."""
    minutes = -(-replicas * restart_budget_seconds // 60) + 5
    return pulumi.CustomTimeouts(create=f"{minutes}m", update=f"{minutes}m")


@dataclass(frozen=True)
class ReadOnlyRootVolumes:
    """A read-only root filesystem's companions: a ConfigMap mounted read-only, a writable /tmp."""

    mounts: list[k8s.core.v1.VolumeMountArgs]
    volumes: list[k8s.core.v1.VolumeArgs]


def config_and_tmp(
    name: str, config_map_name: pulumi.Input[str], mount_path: str
) -> ReadOnlyRootVolumes:
    """The ConfigMap `config_map_name` at `mount_path` (read-only) and an emptyDir at /tmp."""
    return ReadOnlyRootVolumes(
        mounts=[
            k8s.core.v1.VolumeMountArgs(name=name, mount_path=mount_path, read_only=True),
            k8s.core.v1.VolumeMountArgs(name="tmp", mount_path="/tmp"),
        ],
        volumes=[
            k8s.core.v1.VolumeArgs(
                name=name,
                config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(name=config_map_name),
            ),
            k8s.core.v1.VolumeArgs(name="tmp", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs()),
        ],
    )


# Where the processor and the brokers' readiness sidecars serve Prometheus' text format.
METRICS_PATH = "/metrics"


def scrape_annotations(port: int) -> dict[str, str]:
    """The convention a Prometheus `kubernetes-pods` scrape job reads (the community Helm chart's
    relabels the pod name to `pod`, as the dashboard needs)."""
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port),
        "prometheus.io/path": METRICS_PATH,
    }


def pod_monitor(
    resource_name: str,
    workload_name: str,
    namespace: str,
    labels: Mapping[str, str],
    port_name: str,
    opts: pulumi.ResourceOptions,
) -> k8s.apiextensions.CustomResource:
    """A Prometheus Operator PodMonitor for every pod of a workload, on its named port.

    The operator labels each target with its pod's name (`pod`), which the dashboard's
    per-instance panels and its `pod` variable select on.
    """
    return k8s.apiextensions.CustomResource(
        resource_name,
        api_version="monitoring.coreos.com/v1",
        kind="PodMonitor",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=workload_name, namespace=namespace, labels=dict(labels)
        ),
        spec={
            "selector": {"matchLabels": selector(workload_name)},
            "podMetricsEndpoints": [{"port": port_name, "path": METRICS_PATH}],
        },
        opts=opts,
    )
