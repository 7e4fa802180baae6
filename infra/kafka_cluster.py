"""A KRaft Kafka cluster: combined broker+controller nodes on an image of Apache Kafka's jars.

The broker's settings are rendered here whole, and its container runs Kafka's own main class
(`contract.container_commands.kafka_broker`), never an image's start scripts: the official
`apache/kafka` image and one built from the same release's Maven jars run it alike.

On a secured cluster each broker pod runs three containers: the broker; `grant-acls`, on the
broker's image with the broker's certificate, which grants the bootstrap ACLs
(`infra/bootstrap_grants.py`); and the readiness sidecar on the processor's image
(`app.admin.broker_readiness`), which connects as its own describe-only SCRAM user and never sees
the broker's key (the containers: `infra/broker_containers.py`). What each container runs, and
the folders and files its command names, are `contract.container_commands`' (the pack renders
them again and compares).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from contract import acl_grants, acl_specs, container_commands
from contract.acl_specs import KafkaUser
from contract.container_commands import (
    BOOTSTRAP_ACLS_FILE,
    CLUSTER_ID_VARIABLE,
    DATA_DIR,
    GRANT_CLIENT_FILE,
    HEAP_OPTS_VARIABLE,
    READINESS_CLIENT_FILE,
    READINESS_PORT,
    READINESS_PREVIOUS_CLIENT_FILE,
    SCRAM_MECHANISM_FILE,
    SERVER_PROPERTIES_VARIABLE,
    STATE_DIR,
    USERS_DIR,
)
from contract.java_properties import format_properties
from contract.kafka_security import (
    CLIENT_LISTENER,
    INTERNAL_LISTENER,
    broker_security_configs,
    listeners,
)
from contract.workload_shapes import (
    CLIENT_PORT,
    CONTROLLER_PORT,
    INTERNAL_PORT,
    KAFKA_CLIENT_LABEL,
    TLS_DIR,
)
from infra import bootstrap_grants, broker_containers, cluster_identity, stateful_volumes, workload
from infra.kafka_credentials import KafkaCredentials
from infra.stack_settings import KafkaConfig, SecurityConfig, quantity

# A restarted broker is ready once back in every ISR: the roll's budget per broker allows this
# long for its replicas to catch up with what was written while it was down.
CATCH_UP_SECONDS = 300
# The image runs as uid 1000 (appuser); its files are world-readable, so any non-root uid works.
KAFKA_UID = 10001


def pod_dns_name(name: str, namespace: str, pod: str) -> str:
    """A broker pod's name in cluster DNS, through the cluster's headless Service."""
    return f"{pod}.{name}-headless.{namespace}.svc.cluster.local"


def broker_dns_names(name: str, namespace: str, replicas: int) -> list[str]:
    """Every name a broker is reached by: its pod, the client Service, and localhost (sidecar)."""
    return [
        *(pod_dns_name(name, namespace, f"{name}-{ordinal}") for ordinal in range(replicas)),
        f"{name}.{namespace}.svc.cluster.local",
        f"{name}.{namespace}.svc",
        "localhost",
    ]


def bootstrap_config_map(cluster: str) -> str:
    """What a new cluster starts from: its format settings, the bootstrap users' ACLs and the
    pod helpers' client settings. Its name is fixed, and it is updated in place
    (`infra.provider_settings`)."""
    return f"{cluster}-bootstrap"


def heap_megabytes(memory: str) -> int:
    """About half the memory limit for the heap; the page cache Kafka reads from gets the rest."""
    return int(quantity(memory) / 2**20 // 2)


@dataclass(frozen=True)
class KafkaClusterArgs:
    """Inputs of a `KafkaCluster`."""

    namespace: str
    config: KafkaConfig
    broker_configs: dict[str, str]
    # Keep the cluster id resource from being deleted by accident (`pulumi destroy` asks first).
    protect_cluster_id: bool
    # The processor's image, which also holds the brokers' readiness sidecar.
    readiness_image: str
    readiness_image_pull_policy: str
    security: SecurityConfig
    # The TLS Secret and the SCRAM users' Secrets; None on a PLAINTEXT cluster.
    credentials: KafkaCredentials | None
    # Users whose ACLs the brokers grant on a secured cluster: the topic reconciler, which
    # cannot grant itself its first rights under deny-by-default and manages everyone else's,
    # and the readiness user, which must describe the cluster before any broker is ready.
    bootstrap_users: Sequence[KafkaUser] = ()
    # The SCRAM user the readiness sidecars connect as (one of the bootstrap users).
    readiness_user: str = acl_specs.BROKER_READINESS_USER
    # How Prometheus finds the sidecars' /metrics, and the only namespace that may reach them:
    # the processor's settings (`processor.metricsScrape`, `processor.metricsNamespace`).
    metrics_scrape: str = "none"
    metrics_namespace: str = "monitoring"
    # The claims the last `pulumi up` left (its `volumes` output, `infra.deployed_stack`): a
    # disk change is checked against them at preview.
    deployed_volumes: pulumi.Input[Mapping[str, Any]] = field(default_factory=dict)
    # The cluster id the last `pulumi up` exported (`infra.cluster_identity`); "" or {} on a
    # new stack.
    deployed_cluster_id: pulumi.Input[Any] = ""


class KafkaCluster(pulumi.ComponentResource):
    """Kafka in KRaft mode: a StatefulSet of broker+controller nodes and everything around it."""

    bootstrap_servers: str
    # The egress rule a client pod needs: the brokers' client port (its NetworkPolicy's).
    client_egress: k8s.networking.v1.NetworkPolicyEgressRuleArgs
    cluster_id: pulumi.Output[str]
    stateful_set: k8s.apps.v1.StatefulSet

    def __init__(
        self, name: str, args: KafkaClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("stateful-streaming:kafka:KafkaCluster", name, None, opts)
        cfg, ns = args.config, args.namespace
        child = pulumi.ResourceOptions(parent=self)
        headless = f"{name}-headless"
        component_labels = workload.labels(name, "kafka")
        self.bootstrap_servers = container_commands.bootstrap_servers(name, ns, CLIENT_PORT)
        self.client_egress = k8s.networking.v1.NetworkPolicyEgressRuleArgs(
            to=[workload.pod_peer(workload.selector(name))],
            ports=workload.tcp_ports(CLIENT_PORT),
        )

        self.cluster_id = self._cluster_id(name, args)
        self._services(name, headless, args, component_labels, child)
        env = self._broker_env(name, args)
        bootstrap = self._bootstrap_config_map(name, args, component_labels, child)
        restart_budget = (
            cfg.termination_grace_period_seconds
            + cfg.startup_probe.budget_seconds
            + CATCH_UP_SECONDS
            + 60
        )
        volumes = stateful_volumes.StatefulVolumes(
            "kafka",
            name,
            ns,
            [stateful_volumes.ClaimTemplate("data", cfg.storage_class_name, cfg.storage)],
            args.deployed_volumes,
            self,
        )
        self.stateful_set = k8s.apps.v1.StatefulSet(
            name,
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=name,
                namespace=ns,
                labels=component_labels,
                annotations={
                    **workload.checkov_skips(
                        {
                            **workload.image_skips([cfg.image], cfg.image_pull_policy),
                            **workload.image_skips(
                                [args.readiness_image], args.readiness_image_pull_policy
                            ),
                        }
                    ),
                    **workload.roll_complete(cfg.replicas),
                },
            ),
            spec=k8s.apps.v1.StatefulSetSpecArgs(
                service_name=headless,
                replicas=cfg.replicas,
                # The quorum needs a majority before any node is ready: start them all at once.
                pod_management_policy="Parallel",
                update_strategy=k8s.apps.v1.StatefulSetUpdateStrategyArgs(type="RollingUpdate"),
                persistent_volume_claim_retention_policy=workload.RETAIN_CLAIMS,
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=workload.selector(name)),
                template=self._pod_template(cfg, args, name, component_labels, env, bootstrap),
                volume_claim_templates=volumes.claim_templates(),
            ),
            opts=pulumi.ResourceOptions.merge(
                pulumi.ResourceOptions(
                    parent=self,
                    custom_timeouts=workload.roll_timeouts(cfg.replicas, restart_budget),
                    depends_on=[bootstrap] if bootstrap else None,
                ),
                volumes.options(),
            ),
        )
        self.volumes = volumes.grow(name, self.stateful_set, cfg.replicas)
        self.register_outputs(
            {
                "bootstrapServers": self.bootstrap_servers,
                "clusterId": self.cluster_id,
                "volumes": self.volumes,
            }
        )

    def _cluster_id(self, name: str, args: KafkaClusterArgs) -> pulumi.Output[str]:
        """The KRaft cluster id: the running cluster's, else the setting, else generated once."""
        chosen: pulumi.Input[str]
        if args.config.cluster_id:
            # Given by the stack (kafka.clusterId): the id of the volumes it adopts.
            chosen = args.config.cluster_id
        else:
            # Generated at the first `pulumi up` and kept in the stack's state: no keepers, so no
            # setting can replace it. A new id would make every broker refuse its existing data.
            chosen = random.RandomId(
                f"{name}-cluster-id",
                byte_length=16,
                opts=pulumi.ResourceOptions(parent=self, protect=args.protect_cluster_id),
            ).b64_url
        # A running cluster keeps its id whatever becomes of the setting or the generated one.
        return cluster_identity.cluster_id(args.deployed_cluster_id, chosen)

    def _services(
        self,
        name: str,
        headless: str,
        args: KafkaClusterArgs,
        component_labels: dict[str, str],
        child: pulumi.ResourceOptions,
    ) -> None:
        """The Services, disruption budget, account, NetworkPolicy and scrape around the pods."""
        ns = args.namespace
        workload.headless_service(
            headless,
            ns,
            service_labels=component_labels,
            ports=[
                ("client", CLIENT_PORT),
                ("controller", CONTROLLER_PORT),
                ("internal", INTERNAL_PORT),
            ],
            # Nodes find each other before any is ready: the quorum forms from these names.
            publish_not_ready=True,
            opts=child,
        )
        k8s.core.v1.Service(
            name,
            metadata=k8s.meta.v1.ObjectMetaArgs(name=name, namespace=ns, labels=component_labels),
            spec=k8s.core.v1.ServiceSpecArgs(
                selector=workload.selector(name),
                ports=[k8s.core.v1.ServicePortArgs(name="client", port=CLIENT_PORT)],
            ),
            opts=child,
        )
        workload.disruption_budget(name, ns, component_labels, child)
        workload.service_account(name, ns, component_labels, child)
        self._network_policy(name, ns, component_labels, args.metrics_namespace, child)
        if args.metrics_scrape == "podMonitor":
            workload.pod_monitor(f"{name}-metrics", name, ns, component_labels, "readiness", child)

    def _broker_env(self, name: str, args: KafkaClusterArgs) -> list[k8s.core.v1.EnvVarArgs]:
        """The broker container's environment: its id, its rendered server.properties, its heap."""
        cfg, ns = args.config, args.namespace
        voters = ",".join(
            f"{i}@{pod_dns_name(name, ns, f'{name}-{i}')}:{CONTROLLER_PORT}"
            for i in range(cfg.replicas)
        )
        # $(POD_NAME) is expanded by the kubelet from the variable defined before it.
        pod_host = pod_dns_name(name, ns, "$(POD_NAME)")
        # The same three listeners in every stack; only their security protocols differ.
        node = {
            "process.roles": "broker,controller",
            "listeners": listeners(CLIENT_PORT, INTERNAL_PORT, CONTROLLER_PORT),
            "advertised.listeners": f"{CLIENT_LISTENER}://{pod_host}:{CLIENT_PORT},"
            f"{INTERNAL_LISTENER}://{pod_host}:{INTERNAL_PORT}",
            **broker_security_configs(args.security.client_listener, TLS_DIR),
            "controller.quorum.voters": voters,
            # A subdirectory: a fresh volume's root may hold lost+found, which Kafka rejects.
            "log.dirs": f"{DATA_DIR}/logs",
        }
        settings = {**node, **args.broker_configs}
        heap = heap_megabytes(cfg.memory)
        return workload.downward_env(
            k8s.core.v1.EnvVarArgs(name=CLUSTER_ID_VARIABLE, value=self.cluster_id),
            broker_containers.NODE_ID_ENV,
            # After POD_NAME, which the kubelet substitutes into the advertised listeners.
            k8s.core.v1.EnvVarArgs(
                name=SERVER_PROPERTIES_VARIABLE, value=format_properties(settings)
            ),
            k8s.core.v1.EnvVarArgs(name=HEAP_OPTS_VARIABLE, value=f"-Xms{heap}m -Xmx{heap}m"),
        )

    @staticmethod
    def _bootstrap_config_map(
        name: str,
        args: KafkaClusterArgs,
        component_labels: dict[str, str],
        child: pulumi.ResourceOptions,
    ) -> k8s.core.v1.ConfigMap | None:
        """What the grant containers and readiness sidecars read on a secured cluster (none on
        a PLAINTEXT one)."""
        if args.credentials is None:
            return None
        readiness = args.credentials.client_access(args.readiness_user)
        return k8s.core.v1.ConfigMap(
            bootstrap_config_map(name),
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=bootstrap_config_map(name), namespace=args.namespace, labels=component_labels
            ),
            data={
                # Not in the pod template: the grant containers and the sidecars read an
                # update without a roll.
                BOOTSTRAP_ACLS_FILE: acl_specs.dumps(list(args.bootstrap_users)),
                acl_grants.GRANTS_FILE: acl_grants.grant_lines(list(args.bootstrap_users)),
                GRANT_CLIENT_FILE: bootstrap_grants.grant_client_properties(TLS_DIR),
                READINESS_CLIENT_FILE: format_properties(readiness.properties),
                READINESS_PREVIOUS_CLIENT_FILE: format_properties(readiness.previous_properties),
                SCRAM_MECHANISM_FILE: args.credentials.scram_mechanism,
            },
            opts=child,
        )

    @staticmethod
    def _pod_template(
        cfg: KafkaConfig,
        args: KafkaClusterArgs,
        name: str,
        component_labels: dict[str, str],
        env: list[k8s.core.v1.EnvVarArgs],
        bootstrap: k8s.core.v1.ConfigMap | None,
    ) -> k8s.core.v1.PodTemplateSpecArgs:
        affinity, spread = workload.placement(
            name, anti_affinity=cfg.anti_affinity, zone_spread=cfg.zone_spread
        )
        resources = workload.guaranteed_resources(cfg.cpu, cfg.memory)
        security = workload.container_security_context()
        # The root is read-only: the node's server.properties and the tools' files go to /tmp.
        mounts = [k8s.core.v1.VolumeMountArgs(name="tmp", mount_path=STATE_DIR)]
        volumes = [
            k8s.core.v1.VolumeArgs(name="tmp", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs())
        ]
        init_containers: list[k8s.core.v1.ContainerArgs] = []
        tls_mounts: list[k8s.core.v1.VolumeMountArgs] = []
        annotations: dict[str, pulumi.Input[str]] = {}
        grant: list[k8s.core.v1.ContainerArgs] = []
        readiness_mounts: list[k8s.core.v1.VolumeMountArgs] = []
        credentials = args.credentials
        if credentials is not None and bootstrap is not None:
            tls_mounts = [
                k8s.core.v1.VolumeMountArgs(name="tls", mount_path=TLS_DIR, read_only=True)
            ]
            volumes += [
                k8s.core.v1.VolumeArgs(
                    name="tls",
                    secret=k8s.core.v1.SecretVolumeSourceArgs(
                        secret_name=credentials.tls_secret, default_mode=0o440
                    ),
                ),
                credentials.users_volume("users"),
                k8s.core.v1.VolumeArgs(
                    name=broker_containers.BOOTSTRAP_MOUNT.name,
                    # By its name, not its output: no replacement of the ConfigMap can reach
                    # the StatefulSet's spec (`opts.depends_on` keeps the order).
                    config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(
                        name=bootstrap_config_map(name)
                    ),
                ),
            ]
            init_containers.append(
                broker_containers.format_storage(cfg, env, resources, security, mounts)
            )
            # A renewed certificate rolls the brokers: each reads its key store at start.
            annotations = {"stateful-streaming.io/certificate": credentials.certificate_revision}
            # The bootstrap users' passwords: the grant container sets their credentials, which
            # a kept volume adopted by a new stack holds from the old one.
            volumes.append(
                credentials.users_volume(
                    "bootstrap-users", only=[u.name for u in args.bootstrap_users]
                )
            )
            bootstrap_users = k8s.core.v1.VolumeMountArgs(
                name="bootstrap-users", mount_path=USERS_DIR, read_only=True
            )
            grant = [broker_containers.grant_acls(cfg, [*tls_mounts, *mounts, bootstrap_users])]
            # The readiness user's password and the CA, never the broker's key. No revision
            # annotation: the sidecar reads a new password itself, and a roll of the brokers
            # waiting on a credential only the reconciler (after the roll) sets would never end.
            readiness = credentials.client_access(args.readiness_user)
            volumes += readiness.volumes
            readiness_mounts = [*readiness.mounts, broker_containers.BOOTSTRAP_MOUNT]
        if args.metrics_scrape == "annotations":
            annotations.update(workload.scrape_annotations(READINESS_PORT))
        return k8s.core.v1.PodTemplateSpecArgs(
            metadata=k8s.meta.v1.ObjectMetaArgs(
                labels=component_labels, annotations=annotations or None
            ),
            spec=k8s.core.v1.PodSpecArgs(
                service_account_name=name,
                automount_service_account_token=False,
                # The kubelet's links for the Service named `kafka` (KAFKA_PORT,
                # KAFKA_SERVICE_HOST, ...) would be read as settings by any image's start that
                # turns KAFKA_* variables into them, and nothing here needs them.
                enable_service_links=False,
                termination_grace_period_seconds=cfg.termination_grace_period_seconds,
                security_context=workload.pod_security_context(KAFKA_UID),
                affinity=affinity,
                topology_spread_constraints=spread,
                init_containers=init_containers or None,
                containers=[
                    broker_containers.broker(cfg, env, resources, security, [*mounts, *tls_mounts]),
                    *grant,
                    broker_containers.readiness_sidecar(
                        args.readiness_image,
                        args.readiness_image_pull_policy,
                        security,
                        readiness_mounts,
                    ),
                ],
                volumes=volumes,
            ),
        )

    @staticmethod
    def _network_policy(
        name: str,
        ns: str,
        component_labels: dict[str, str],
        metrics_namespace: str,
        opts: pulumi.ResourceOptions,
    ) -> k8s.networking.v1.NetworkPolicy:
        """Brokers reach each other on every port; only labelled clients reach the client port,
        and only `metrics_namespace` (Prometheus) the readiness sidecars' port.

        Out of the pods: the other brokers (replication, the quorum; the readiness sidecar's
        admin client follows the metadata to their client port) and the cluster DNS, nothing else.
        """
        brokers = workload.pod_peer(workload.selector(name))
        return workload.network_policy(
            name,
            ns,
            component_labels,
            ingress=[
                k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                    from_=[brokers],
                    ports=workload.tcp_ports(CLIENT_PORT, CONTROLLER_PORT, INTERNAL_PORT),
                ),
                k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                    from_=[workload.pod_peer(KAFKA_CLIENT_LABEL)],
                    ports=workload.tcp_ports(CLIENT_PORT),
                ),
                # /metrics (the kubelet's probes are not subject to NetworkPolicies).
                k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                    from_=[workload.namespace_peer(metrics_namespace)],
                    ports=workload.tcp_ports(READINESS_PORT),
                ),
            ],
            egress=[
                k8s.networking.v1.NetworkPolicyEgressRuleArgs(
                    to=[brokers],
                    ports=workload.tcp_ports(CLIENT_PORT, CONTROLLER_PORT, INTERNAL_PORT),
                )
            ],
            opts=opts,
        )
