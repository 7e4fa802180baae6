"""The pipeline's topics (and, on a secured cluster, its users and ACLs), reconciled into the
cluster by a Job that runs `python -m app.admin.reconcile`."""

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
)
from contract.java_properties import format_properties
from contract.topic_specs import GroupConfigSpec, TopicSpec, dumps
from infra import workload
from infra.kafka_credentials import KafkaCredentials
from infra.reconciler_jobs import (
    RECONCILER_USER,
    ReconcilerPod,
    kafka_client_only,
    reconciler_job,
)


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
