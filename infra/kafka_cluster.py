"""A KRaft Kafka cluster: combined broker+controller nodes on the official `apache/kafka` image."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from infra import workload
from infra.config import KafkaConfig, quantity

CLIENT_PORT = 9092
CONTROLLER_PORT = 9093
# The broker-readiness sidecar's HTTP port (`app.broker_readiness`).
READINESS_PORT = 8090
# A restarted broker is ready once back in every ISR: the roll's budget per broker allows this
# long for its replicas to catch up with what was written while it was down.
CATCH_UP_SECONDS = 300
DATA_DIR = "/var/lib/kafka/data"
# The image runs as uid 1000 (appuser); its files are world-readable, so any non-root uid works.
KAFKA_UID = 10001


def broker_env_name(config: str) -> str:
    """The official image's environment variable for a broker setting.

    `min.insync.replicas` -> `KAFKA_MIN_INSYNC_REPLICAS` (`.` -> `_`, `_` -> `__`, `-` -> `___`),
    as the image's `configure` script reads them back into `server.properties`.
    """
    return "KAFKA_" + config.replace("_", "__").replace("-", "___").replace(".", "_").upper()


# The pod's ordinal, set by the StatefulSet controller (beta 1.28, GA 1.32): node N is always
# pod kafka-N, so the voters list needs no script to derive it.
NODE_ID_ENV = k8s.core.v1.EnvVarArgs(
    name="KAFKA_NODE_ID",
    value_from=k8s.core.v1.EnvVarSourceArgs(
        field_ref=k8s.core.v1.ObjectFieldSelectorArgs(
            field_path="metadata.labels['apps.kubernetes.io/pod-index']"
        )
    ),
)


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


class KafkaCluster(pulumi.ComponentResource):
    """Kafka in KRaft mode: a StatefulSet of broker+controller nodes and everything around it."""

    bootstrap_servers: str
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
        self.bootstrap_servers = f"{name}.{ns}.svc.cluster.local:{CLIENT_PORT}"

        # Generated at the first `pulumi up` and kept in the stack's state: no keepers, so no
        # setting can replace it. A new id would make every broker refuse its existing data.
        cluster_id = random.RandomId(
            f"{name}-cluster-id",
            byte_length=16,
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect_cluster_id),
        )
        self.cluster_id = cluster_id.b64_url

        workload.headless_service(
            headless,
            ns,
            service_labels=component_labels,
            ports=[("client", CLIENT_PORT), ("controller", CONTROLLER_PORT)],
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
        self._network_policy(name, ns, component_labels, child)

        def pod_dns(ordinal: int) -> str:
            return f"{name}-{ordinal}.{headless}.{ns}.svc.cluster.local"

        voters = ",".join(f"{i}@{pod_dns(i)}:{CONTROLLER_PORT}" for i in range(cfg.replicas))
        node = {
            "process.roles": "broker,controller",
            "listeners": f"PLAINTEXT://:{CLIENT_PORT},CONTROLLER://:{CONTROLLER_PORT}",
            # $(POD_NAME) is expanded by the kubelet from the variable defined before it.
            "advertised.listeners": f"PLAINTEXT://$(POD_NAME).{headless}.{ns}.svc.cluster.local:"
            f"{CLIENT_PORT}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.quorum.voters": voters,
            # A subdirectory: a fresh volume's root may hold lost+found, which Kafka rejects.
            "log.dirs": f"{DATA_DIR}/logs",
        }
        heap = heap_megabytes(cfg.memory)
        env = workload.downward_env(
            k8s.core.v1.EnvVarArgs(name="CLUSTER_ID", value=self.cluster_id),
            NODE_ID_ENV,
            *(
                k8s.core.v1.EnvVarArgs(name=broker_env_name(key), value=value)
                for key, value in {**node, **args.broker_configs}.items()
            ),
            k8s.core.v1.EnvVarArgs(name="KAFKA_HEAP_OPTS", value=f"-Xms{heap}m -Xmx{heap}m"),
        )
        restart_budget = (
            cfg.termination_grace_period_seconds
            + cfg.startup_probe.budget_seconds
            + CATCH_UP_SECONDS
            + 60
        )
        self.stateful_set = k8s.apps.v1.StatefulSet(
            name,
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=name,
                namespace=ns,
                labels=component_labels,
                annotations=workload.checkov_skips(
                    {
                        **workload.processor_image_skips(args.readiness_image_pull_policy),
                        "CKV_K8S_43": "the fork pins apache/kafka and the processor image by "
                        "digest for its registry",
                    }
                ),
            ),
            spec=k8s.apps.v1.StatefulSetSpecArgs(
                service_name=headless,
                replicas=cfg.replicas,
                # The quorum needs a majority before any node is ready: start them all at once.
                pod_management_policy="Parallel",
                update_strategy=k8s.apps.v1.StatefulSetUpdateStrategyArgs(type="RollingUpdate"),
                persistent_volume_claim_retention_policy=workload.RETAIN_CLAIMS,
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=workload.selector(name)),
                template=self._pod_template(cfg, args, name, component_labels, env),
                volume_claim_templates=[
                    workload.state_claim("data", cfg.storage_class_name, cfg.storage)
                ],
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                custom_timeouts=workload.roll_timeouts(cfg.replicas, restart_budget),
            ),
        )
        self.register_outputs(
            {"bootstrapServers": self.bootstrap_servers, "clusterId": self.cluster_id}
        )

    @staticmethod
    def _pod_template(
        cfg: KafkaConfig,
        args: KafkaClusterArgs,
        name: str,
        component_labels: dict[str, str],
        env: list[k8s.core.v1.EnvVarArgs],
    ) -> k8s.core.v1.PodTemplateSpecArgs:
        affinity, spread = workload.placement(
            name, anti_affinity=cfg.anti_affinity, zone_spread=cfg.zone_spread
        )
        resources = workload.guaranteed_resources(cfg.cpu, cfg.memory)
        security = workload.container_security_context()
        # The image's start script writes server.properties into /opt/kafka/config and logs into
        # /opt/kafka/logs; with a read-only root those are emptyDirs, seeded with the image's files.
        writable = {"config": "/opt/kafka/config", "logs": "/opt/kafka/logs", "tmp": "/tmp"}
        mounts = [
            k8s.core.v1.VolumeMountArgs(name=volume, mount_path=path)
            for volume, path in writable.items()
        ]
        return k8s.core.v1.PodTemplateSpecArgs(
            metadata=k8s.meta.v1.ObjectMetaArgs(labels=component_labels),
            spec=k8s.core.v1.PodSpecArgs(
                service_account_name=name,
                automount_service_account_token=False,
                # The image turns every KAFKA_* variable into a broker setting, and the kubelet's
                # links for the Service named `kafka` are KAFKA_PORT, KAFKA_SERVICE_HOST, ...:
                # they became `port=tcp://...` and `service.host=...` in server.properties.
                enable_service_links=False,
                termination_grace_period_seconds=cfg.termination_grace_period_seconds,
                security_context=workload.pod_security_context(KAFKA_UID),
                affinity=affinity,
                topology_spread_constraints=spread,
                init_containers=[
                    k8s.core.v1.ContainerArgs(
                        name="seed-config",
                        image=cfg.image,
                        image_pull_policy="Always",
                        command=["sh", "-c", "cp -R /opt/kafka/config/. /seed/"],
                        resources=resources,
                        security_context=security,
                        volume_mounts=[
                            k8s.core.v1.VolumeMountArgs(name="config", mount_path="/seed")
                        ],
                    )
                ],
                containers=[
                    k8s.core.v1.ContainerArgs(
                        name="kafka",
                        image=cfg.image,
                        image_pull_policy="Always",
                        env=env,
                        ports=[
                            k8s.core.v1.ContainerPortArgs(
                                name="client", container_port=CLIENT_PORT
                            ),
                            k8s.core.v1.ContainerPortArgs(
                                name="controller", container_port=CONTROLLER_PORT
                            ),
                        ],
                        resources=resources,
                        security_context=security,
                        startup_probe=k8s.core.v1.ProbeArgs(
                            tcp_socket=k8s.core.v1.TCPSocketActionArgs(port=CONTROLLER_PORT),
                            initial_delay_seconds=cfg.startup_probe.initial_delay_seconds,
                            period_seconds=cfg.startup_probe.period_seconds,
                            failure_threshold=cfg.startup_probe.failure_threshold,
                        ),
                        # Ready: an unfenced member of the cluster, in the ISR of every partition
                        # it hosts, as the sidecar beside it judges (`app.broker_readiness`). The
                        # StatefulSet controller rolls the next broker only then, so a roll never
                        # takes a second replica away while the first is behind.
                        readiness_probe=workload.http_probe(
                            "/ready",
                            READINESS_PORT,
                            period_seconds=10,
                            timeout_seconds=8,
                            failure_threshold=3,
                        ),
                        liveness_probe=k8s.core.v1.ProbeArgs(
                            tcp_socket=k8s.core.v1.TCPSocketActionArgs(port=CONTROLLER_PORT),
                            period_seconds=10,
                            failure_threshold=6,
                        ),
                        volume_mounts=[
                            k8s.core.v1.VolumeMountArgs(name="data", mount_path=DATA_DIR),
                            *mounts,
                        ],
                    ),
                    KafkaCluster._readiness_sidecar(args, security),
                ],
                volumes=[
                    k8s.core.v1.VolumeArgs(
                        name=volume, empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs()
                    )
                    for volume in writable
                ],
            ),
        )

    @staticmethod
    def _readiness_sidecar(
        args: KafkaClusterArgs, security: k8s.core.v1.SecurityContextArgs
    ) -> k8s.core.v1.ContainerArgs:
        """`app.broker_readiness` beside the broker: one admin client, no JVM per probe."""
        return k8s.core.v1.ContainerArgs(
            name="broker-readiness",
            image=args.readiness_image,
            image_pull_policy=args.readiness_image_pull_policy,
            # `args`: the image's ENTRYPOINT (tini) stays PID 1.
            args=[
                "python",
                "-m",
                "app.broker_readiness",
                "--node-id",
                "$(KAFKA_NODE_ID)",
                "--bootstrap-server",
                f"localhost:{CLIENT_PORT}",
                "--port",
                str(READINESS_PORT),
            ],
            env=[NODE_ID_ENV],
            ports=[k8s.core.v1.ContainerPortArgs(name="readiness", container_port=READINESS_PORT)],
            # Python and one admin client: about 40 MiB resident, a few ms of CPU per probe.
            resources=workload.guaranteed_resources("100m", "128Mi"),
            security_context=security,
            startup_probe=workload.http_probe(
                "/live", READINESS_PORT, period_seconds=2, failure_threshold=30
            ),
            readiness_probe=workload.http_probe(
                "/live", READINESS_PORT, period_seconds=10, failure_threshold=3
            ),
            liveness_probe=workload.http_probe(
                "/live", READINESS_PORT, period_seconds=10, failure_threshold=3
            ),
        )

    @staticmethod
    def _network_policy(
        name: str, ns: str, component_labels: dict[str, str], opts: pulumi.ResourceOptions
    ) -> k8s.networking.v1.NetworkPolicy:
        """Brokers reach each other on both ports; only labelled clients reach the client port."""

        def peer(match_labels: dict[str, Any]) -> k8s.networking.v1.NetworkPolicyPeerArgs:
            return k8s.networking.v1.NetworkPolicyPeerArgs(
                pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=match_labels)
            )

        def ports(*numbers: int) -> list[k8s.networking.v1.NetworkPolicyPortArgs]:
            return [
                k8s.networking.v1.NetworkPolicyPortArgs(port=n, protocol="TCP") for n in numbers
            ]

        return k8s.networking.v1.NetworkPolicy(
            name,
            metadata=k8s.meta.v1.ObjectMetaArgs(name=name, namespace=ns, labels=component_labels),
            spec=k8s.networking.v1.NetworkPolicySpecArgs(
                pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=workload.selector(name)),
                policy_types=["Ingress"],
                ingress=[
                    k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                        from_=[peer(workload.selector(name))],
                        ports=ports(CLIENT_PORT, CONTROLLER_PORT),
                    ),
                    k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                        from_=[peer(workload.KAFKA_CLIENT_LABEL)], ports=ports(CLIENT_PORT)
                    ),
                ],
            ),
            opts=opts,
        )
