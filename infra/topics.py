"""The pipeline's topics (and, on a secured cluster, its users and ACLs), reconciled into the
cluster by a Job that runs `python -m app.admin.reconcile`; and the Job that ends a SCRAM
rotation by retiring the previous revision's credentials (`python -m app.admin.scram_retire`),
once every workload that logs in with them has rolled."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from contract import acl_specs, container_commands
from contract.acl_specs import KafkaUser
from contract.container_commands import (
    ACLS_FILE,
    CLIENT_FILE,
    PREVIOUS_CLIENT_FILE,
    SPECS_DIR,
    SPECS_FILE,
    USERS_DIR,
    ContainerCommand,
)
from contract.java_properties import format_properties
from contract.topic_specs import GroupConfigSpec, TopicSpec, dumps
from contract.workload_shapes import KAFKA_CLIENT_LABEL
from infra import workload
from infra.kafka_credentials import KafkaCredentials

# The SCRAM user the Job connects as (one of `contract.acl_specs.pipeline_users`).
RECONCILER_USER = "topic-reconciler"
RECONCILER_UID = 10001


@dataclass(frozen=True)
class TopicReconciliationArgs:
    """Inputs of a `TopicReconciliation`."""

    namespace: str
    specs: Sequence[TopicSpec]
    bootstrap_servers: str
    image: str
    image_pull_policy: str
    allow_partition_increase: bool
    # Where its pod may connect: the brokers' client port (`KafkaCluster.client_egress`).
    kafka_egress: k8s.networking.v1.NetworkPolicyEgressRuleArgs
    # The users and ACLs to reconcile, and their Secrets; none on a PLAINTEXT cluster.
    users: Sequence[KafkaUser] = ()
    credentials: KafkaCredentials | None = None
    # Groups whose own configs the Job sets too (KIP-848: the session and heartbeat).
    groups: Sequence[GroupConfigSpec] = ()


class TopicReconciliation(pulumi.ComponentResource):
    """The topic specs as a ConfigMap and the Job that creates or alters the topics to match.

    Both are named after a hash of the specs: Jobs are immutable, so a changed spec is a new
    Job (and `pulumi up` waits for it to complete), while an unchanged one is left alone.
    """

    job_name: str
    # What `ScramRetirement`'s Job reuses: the pods' labels (the NetworkPolicy selects them)
    # and the ConfigMap's mounts (its users and its client.properties).
    pod_labels: dict[str, str]
    specs_files: workload.ReadOnlyRootVolumes

    def __init__(
        self, name: str, args: TopicReconciliationArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("stateful-streaming:topics:TopicReconciliation", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ns = args.namespace
        specs_json = dumps(list(args.specs), list(args.groups))
        data = {SPECS_FILE: specs_json}
        component_labels = workload.labels(name, "topic-reconciler")
        access = None
        if args.credentials is not None:
            access = args.credentials.client_access(RECONCILER_USER, previous=True)
            data[ACLS_FILE] = acl_specs.dumps(list(args.users))
            data[CLIENT_FILE] = format_properties(access.properties)
            data[PREVIOUS_CLIENT_FILE] = format_properties(access.previous_properties)
        runs = container_commands.topic_reconciler(
            args.bootstrap_servers,
            allow_partition_increase=args.allow_partition_increase,
            scram_mechanism=args.credentials.scram_mechanism if args.credentials else None,
        )
        # Everything in the immutable Job template that can change, so a change is a new Job
        # (a new credentials revision too: the new passwords are upserted by the new Job).
        revision = workload.content_name(
            name,
            "".join(data.values())
            + "args: "
            + " ".join(runs.args)
            + args.image
            + str(access.annotations if access else ""),
        )

        specs = k8s.core.v1.ConfigMap(
            f"{name}-specs",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=revision, namespace=ns, labels=component_labels
            ),
            data=data,
            opts=child,
        )
        self.job_name = revision
        self.pod_labels = component_labels
        files = self.specs_files = workload.config_and_tmp("specs", specs.metadata.name, SPECS_DIR)
        mounts, volumes = [*files.mounts], [*files.volumes]
        if access is not None and args.credentials is not None:
            mounts += [
                *access.mounts,
                k8s.core.v1.VolumeMountArgs(name="users", mount_path=USERS_DIR, read_only=True),
            ]
            volumes += [*access.volumes, args.credentials.users_volume("users")]
        reconciler_job(
            name,
            ReconcilerPod(ns, revision, component_labels, args.image, args.image_pull_policy),
            runs,
            mounts,
            volumes,
            child,
        )
        kafka_client_only(name, ns, component_labels, args.kafka_egress, child)
        self.register_outputs({"jobName": self.job_name})


def kafka_client_only(
    name: str,
    namespace: str,
    pod_labels: dict[str, str],
    kafka_egress: k8s.networking.v1.NetworkPolicyEgressRuleArgs,
    opts: pulumi.ResourceOptions,
) -> k8s.networking.v1.NetworkPolicy:
    """A Job's pods serve nothing: no ingress at all; out, only the brokers and DNS."""
    return workload.network_policy(
        name, namespace, pod_labels, ingress=[], egress=[kafka_egress], opts=opts
    )


@dataclass(frozen=True)
class ReconcilerPod:
    """What a reconciler Job's metadata and container take besides what it runs and mounts."""

    namespace: str
    job_name: str
    labels: dict[str, str]
    image: str
    image_pull_policy: str
    env: Sequence[k8s.core.v1.EnvVarArgs] = ()
    memory: str = "256Mi"


def reconciler_job(
    name: str,
    pod: ReconcilerPod,
    runs: ContainerCommand,
    mounts: Sequence[k8s.core.v1.VolumeMountArgs],
    volumes: Sequence[k8s.core.v1.VolumeArgs],
    opts: pulumi.ResourceOptions,
) -> k8s.batch.v1.Job:
    """A Job whose one container runs `runs` (the contract's) once as the reconciler's user
    (with the reconciler's labels, its pods fall under the same NetworkPolicy)."""
    return k8s.batch.v1.Job(
        name,
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=pod.job_name,
            namespace=pod.namespace,
            labels=pod.labels,
            annotations=workload.checkov_skips(
                workload.image_skips([pod.image], pod.image_pull_policy)
            ),
        ),
        spec=k8s.batch.v1.JobSpecArgs(
            # Retries cover a cluster that is still electing leaders after a roll.
            backoff_limit=6,
            active_deadline_seconds=900,
            template=k8s.core.v1.PodTemplateSpecArgs(
                metadata=k8s.meta.v1.ObjectMetaArgs(labels={**pod.labels, **KAFKA_CLIENT_LABEL}),
                spec=k8s.core.v1.PodSpecArgs(
                    restart_policy="OnFailure",
                    automount_service_account_token=False,
                    security_context=workload.pod_security_context(RECONCILER_UID),
                    containers=[
                        k8s.core.v1.ContainerArgs(
                            name=runs.name,
                            image=pod.image,
                            image_pull_policy=pod.image_pull_policy,
                            # The contract's `args` keep the image's ENTRYPOINT (tini) as
                            # PID 1; a tool of the Kafka image is its `command`.
                            command=list(runs.command) or None,
                            args=list(runs.args) or None,
                            env=list(pod.env) or None,
                            resources=workload.guaranteed_resources("250m", pod.memory),
                            security_context=workload.container_security_context(),
                            volume_mounts=list(mounts),
                        )
                    ],
                    volumes=list(volumes),
                ),
            ),
        ),
        # No ttlSecondsAfterFinished: the completed Job is the record that this revision was
        # applied; a Job deleted behind Pulumi's back would run again.
        opts=opts,
    )


@dataclass(frozen=True)
class ScramRetirementArgs:
    """Inputs of a `ScramRetirement`."""

    reconciliation: TopicReconciliation
    credentials: KafkaCredentials
    bootstrap_servers: str
    namespace: str
    image: str
    image_pull_policy: str


class ScramRetirement(pulumi.ComponentResource):
    """The Job that deletes every user's SCRAM credential of the previous revision's mechanism.

    The last step of a rotation: create it with `depends_on` every workload that logs in as a
    SCRAM user (Pulumi waits for a StatefulSet's roll), so the previous passwords stop working
    only once no running pod uses them. Named after the reconciler's Job and the mechanism it
    retires, it runs again whenever that Job does (and then finds nothing to retire).
    """

    job_name: str

    def __init__(
        self, name: str, args: ScramRetirementArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("stateful-streaming:topics:ScramRetirement", name, None, opts)
        reconciliation, credentials = args.reconciliation, args.credentials
        retired = credentials.previous_scram_mechanism
        self.job_name = workload.content_name(reconciliation.job_name, f"retire {retired}")
        # It logs in with the new credential, which the reconciler's Job has set.
        access = credentials.client_access(RECONCILER_USER, pinned=True)
        files = reconciliation.specs_files
        reconciler_job(
            name,
            ReconcilerPod(
                args.namespace,
                self.job_name,
                reconciliation.pod_labels,
                args.image,
                args.image_pull_policy,
            ),
            container_commands.scram_retire(args.bootstrap_servers, retired),
            [*files.mounts, *access.mounts],
            [*files.volumes, *access.volumes],
            pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"jobName": self.job_name})
