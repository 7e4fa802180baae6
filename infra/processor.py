"""The stateful stream processor: a StatefulSet whose pods keep their identity and their state."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from contract import container_commands
from contract.container_commands import PROPERTIES_DIR, PROPERTIES_FILE
from contract.java_properties import format_properties
from contract.topic_specs import DeploymentNames
from contract.workload_shapes import KAFKA_CLIENT_LABEL
from infra import stateful_volumes, workload
from infra.kafka_cluster import KafkaCluster
from infra.kafka_credentials import ClientAccess, KafkaCredentials
from infra.processor_properties import HEALTH_PORT, STATE_DIR, processor_properties
from infra.stack_settings import ProcessorConfig, StackConfig

PROCESSOR_UID = 10001


@dataclass(frozen=True)
class ProcessorArgs:
    """Inputs of a `Processor`."""

    namespace: str
    config: ProcessorConfig
    properties: dict[str, str]
    # Where its pods may connect: the brokers' client port (`KafkaCluster.client_egress`).
    kafka_egress: k8s.networking.v1.NetworkPolicyEgressRuleArgs
    # Which deployment this is (`config.deployments`): its application id names the
    # StatefulSet, its pods and everything beside it.
    deployment: DeploymentNames
    # Its SCRAM user's password and the cluster's CA (nothing on a PLAINTEXT cluster).
    access: ClientAccess = field(default_factory=ClientAccess)
    # The other side of an active/standby pair, whose zones this side keeps out of.
    partner: workload.PairPartner | None = None
    # The claims the last `pulumi up` left (its `volumes` output, `infra.deployed_stack`): a
    # disk change is checked against them at preview.
    deployed_volumes: pulumi.Input[Mapping[str, Any]] = field(default_factory=dict)


class Processor(pulumi.ComponentResource):
    """One pod = one processor instance = one member of the consumer group.

    Pod `<app>-N` always mounts claim `state-<app>-N` and joins the group as `<app>-N`
    (static membership): a restart within the session timeout resumes with the same
    partitions and the same local state, so nothing moves and nothing is replayed. `<app>` is
    the deployment's application id: a side of an active/standby pair has its own.
    """

    name: str
    stateful_set: k8s.apps.v1.StatefulSet

    def __init__(
        self, name: str, args: ProcessorArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("stateful-streaming:processor:Processor", name, None, opts)
        cfg, ns = args.config, args.namespace
        app = args.deployment.application_id
        child = pulumi.ResourceOptions(parent=self)
        component_labels = workload.labels(app, "processor")
        self.name = app
        # A side of a pair runs its own image (`processor.pairImages`): a release rolls one side
        # at a time while the other publishes.
        image = cfg.image_of(args.deployment.side)

        properties_text = format_properties(args.properties)
        # Named after its content: a settings change is a new ConfigMap and so a rolling update.
        config_map = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=workload.content_name(f"{app}-config", properties_text),
                namespace=ns,
                labels=component_labels,
            ),
            data={PROPERTIES_FILE: properties_text},
            opts=child,
        )
        workload.headless_service(
            app,
            ns,
            service_labels=component_labels,
            ports=[("health", HEALTH_PORT)],
            publish_not_ready=False,
            opts=child,
        )
        workload.disruption_budget(app, ns, component_labels, child)
        workload.service_account(app, ns, component_labels, child)
        workload.network_policy(
            app,
            ns,
            component_labels,
            # Only the health and metrics port, and only from the namespace Prometheus runs in
            # (the kubelet's probes are not subject to NetworkPolicies).
            ingress=[
                k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                    from_=[workload.namespace_peer(cfg.metrics_namespace)],
                    ports=workload.tcp_ports(HEALTH_PORT),
                )
            ],
            egress=[args.kafka_egress],
            opts=child,
        )

        if cfg.metrics_scrape == "podMonitor":
            workload.pod_monitor(f"{name}-metrics", app, ns, component_labels, "health", child)

        volumes = stateful_volumes.StatefulVolumes(
            "processor",
            app,
            ns,
            [stateful_volumes.ClaimTemplate("state", cfg.storage_class_name, cfg.storage)],
            args.deployed_volumes,
            self,
        )
        self.stateful_set = k8s.apps.v1.StatefulSet(
            name,
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=app,
                namespace=ns,
                labels=component_labels,
                annotations={
                    **workload.checkov_skips(workload.image_skips([image], cfg.image_pull_policy)),
                    **workload.roll_complete(cfg.replicas, cfg.partition),
                },
            ),
            spec=k8s.apps.v1.StatefulSetSpecArgs(
                service_name=app,
                replicas=cfg.replicas,
                # Created and scaled one pod at a time, each after the previous is ready: every
                # join is one small cooperative rebalance, and restores do not compete.
                pod_management_policy=cfg.pod_management_policy,
                # A pod counts as available only after it has been ready this long: the roll
                # moves on once the restarted instance is processing, not merely started.
                min_ready_seconds=cfg.min_ready_seconds,
                # One pod at a time (rollingUpdate.maxUnavailable is behind a feature gate);
                # `partition` holds pods below that ordinal on the old revision (canaries).
                update_strategy=k8s.apps.v1.StatefulSetUpdateStrategyArgs(
                    type="RollingUpdate",
                    rolling_update=k8s.apps.v1.RollingUpdateStatefulSetStrategyArgs(
                        partition=cfg.partition
                    ),
                ),
                persistent_volume_claim_retention_policy=workload.RETAIN_CLAIMS,
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=workload.selector(app)),
                template=self._pod_template(app, image, args, component_labels, config_map),
                volume_claim_templates=volumes.claim_templates(),
            ),
            opts=pulumi.ResourceOptions.merge(
                pulumi.ResourceOptions(
                    parent=self,
                    custom_timeouts=workload.roll_timeouts(
                        cfg.replicas, cfg.restart_budget_seconds
                    ),
                ),
                volumes.options(),
            ),
        )
        self.volumes = volumes.grow(name, self.stateful_set, cfg.replicas)
        self.register_outputs({"name": self.name, "volumes": self.volumes})

    @staticmethod
    def _pod_template(
        app: str,
        image: str,
        args: ProcessorArgs,
        component_labels: dict[str, str],
        config_map: k8s.core.v1.ConfigMap,
    ) -> k8s.core.v1.PodTemplateSpecArgs:
        cfg, access = args.config, args.access
        affinity, spread = workload.placement(
            app, anti_affinity=cfg.anti_affinity, zone_spread=cfg.zone_spread, partner=args.partner
        )

        http_probe = partial(workload.http_probe, port=HEALTH_PORT)
        runs = container_commands.processor()
        files = workload.config_and_tmp("config", config_map.metadata.name, PROPERTIES_DIR)
        return k8s.core.v1.PodTemplateSpecArgs(
            metadata=k8s.meta.v1.ObjectMetaArgs(
                labels={**component_labels, **KAFKA_CLIENT_LABEL},
                annotations={
                    **(
                        workload.scrape_annotations(HEALTH_PORT)
                        if cfg.metrics_scrape == "annotations"
                        else {}
                    ),
                    **access.annotations,
                }
                or None,
            ),
            spec=k8s.core.v1.PodSpecArgs(
                service_account_name=app,
                automount_service_account_token=False,
                # The longest batch plus stopping the query and closing the consumer.
                termination_grace_period_seconds=cfg.termination_grace_period_seconds,
                security_context=workload.pod_security_context(PROCESSOR_UID),
                affinity=affinity,
                topology_spread_constraints=spread,
                containers=[
                    k8s.core.v1.ContainerArgs(
                        name=runs.name,
                        image=image,
                        image_pull_policy=cfg.image_pull_policy,
                        # `args`, not `command`: `command` replaces the image's ENTRYPOINT,
                        # and tini (PID 1: forwards SIGTERM, reaps the JVM's children) must run.
                        args=list(runs.args),
                        # POD_NAME is the instance id: group.instance.id and transactional.id.
                        env=workload.downward_env(),
                        ports=[
                            k8s.core.v1.ContainerPortArgs(name="health", container_port=HEALTH_PORT)
                        ],
                        resources=workload.guaranteed_resources(cfg.cpu, cfg.memory),
                        security_context=workload.container_security_context(),
                        startup_probe=http_probe(
                            "/live",
                            initial_delay_seconds=cfg.startup_probe.initial_delay_seconds,
                            period_seconds=cfg.startup_probe.period_seconds,
                            failure_threshold=cfg.startup_probe.failure_threshold,
                        ),
                        # Ready = the query runs, the assignment is known and restore is done.
                        readiness_probe=http_probe("/ready", period_seconds=5, failure_threshold=3),
                        liveness_probe=http_probe("/live", period_seconds=10, failure_threshold=6),
                        # /tmp: Spark's scratch space (spark.local.dir) and the JVM's temp files.
                        volume_mounts=[
                            k8s.core.v1.VolumeMountArgs(name="state", mount_path=STATE_DIR),
                            *files.mounts,
                            *access.mounts,
                        ],
                    )
                ],
                volumes=[*files.volumes, *access.volumes],
            ),
        )


def processors_of(
    config: StackConfig,
    kafka: KafkaCluster,
    credentials: KafkaCredentials | None,
    deployed_volumes: pulumi.Input[Mapping[str, Any]],
    opts: pulumi.ResourceOptions,
) -> list[Processor]:
    """The stack's processor deployments: one, or the two sides of an active/standby pair
    (`processor.pair`), each with its own user, group, changelog, image and pods, kept out of
    each other's zones."""
    processors = []
    for deployment in config.processor.deployments:
        access = (
            # Pinned: the processor rolls on a rotation and reads its password at start.
            credentials.client_access(deployment.application_id, pinned=True)
            if credentials
            else ClientAccess()
        )
        partner = (
            workload.PairPartner(deployment.partner, config.pair_zone_anti_affinity)
            if deployment.partner is not None
            else None
        )
        processors.append(
            Processor(
                "processor" if deployment.side is None else f"processor-{deployment.side}",
                ProcessorArgs(
                    namespace=config.namespace,
                    config=config.processor,
                    properties=processor_properties(
                        config, kafka.bootstrap_servers, access.properties, deployment
                    ),
                    kafka_egress=kafka.client_egress,
                    deployment=deployment,
                    access=access,
                    partner=partner,
                    deployed_volumes=deployed_volumes,
                ),
                opts=opts,
            )
        )
    return processors
