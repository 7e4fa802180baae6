"""The pipeline's topics (and, on a secured cluster, its users and ACLs), reconciled into the
cluster by a Job that runs `python -m app.topics`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from app import acl_specs
from app.acl_specs import KafkaUser
from app.topic_specs import TopicSpec, dumps
from infra import workload
from infra.kafka_credentials import USERS_DIR, KafkaCredentials
from policies.rules.java_properties import format_properties

SPECS_DIR = "/etc/topics"
SPECS_FILE = "topics.json"
ACLS_FILE = "acls.json"
CLIENT_FILE = "client.properties"
# The SCRAM user the Job connects as (one of `app.acl_specs.pipeline_users`).
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


class TopicReconciliation(pulumi.ComponentResource):
    """The topic specs as a ConfigMap and the Job that creates or alters the topics to match.

    Both are named after a hash of the specs: Jobs are immutable, so a changed spec is a new
    Job (and `pulumi up` waits for it to complete), while an unchanged one is left alone.
    """

    job_name: str

    def __init__(
        self, name: str, args: TopicReconciliationArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("stateful-streaming:topics:TopicReconciliation", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ns = args.namespace
        specs_json = dumps(list(args.specs))
        data = {SPECS_FILE: specs_json}
        component_labels = workload.labels(name, "topic-reconciler")
        # The container's `args` (the image's ENTRYPOINT, tini, stays PID 1).
        command_line = [
            "python",
            "-m",
            "app.topics",
            "--bootstrap-servers",
            args.bootstrap_servers,
            "--specs",
            f"{SPECS_DIR}/{SPECS_FILE}",
        ]
        if args.allow_partition_increase:
            command_line.append("--allow-partition-increase")
        access = None
        if args.credentials is not None:
            access = args.credentials.client_access(RECONCILER_USER)
            data[ACLS_FILE] = acl_specs.dumps(list(args.users))
            data[CLIENT_FILE] = format_properties(access.properties)
            command_line += [
                "--acls",
                f"{SPECS_DIR}/{ACLS_FILE}",
                "--command-config",
                f"{SPECS_DIR}/{CLIENT_FILE}",
                # Every user's password, upserted as its SCRAM credential: a rotation.
                "--scram-passwords-dir",
                USERS_DIR,
            ]
        # Everything in the immutable Job template that can change, so a change is a new Job
        # (a new credentials revision too: the new passwords are upserted by the new Job).
        revision = workload.content_name(
            name,
            "".join(data.values())
            + "args: "
            + " ".join(command_line)
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
        files = workload.config_and_tmp("specs", specs.metadata.name, SPECS_DIR)
        mounts, volumes = [*files.mounts], [*files.volumes]
        if access is not None and args.credentials is not None:
            mounts += [
                *access.mounts,
                k8s.core.v1.VolumeMountArgs(name="users", mount_path=USERS_DIR, read_only=True),
            ]
            volumes += [*access.volumes, args.credentials.users_volume("users")]
        k8s.batch.v1.Job(
            name,
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=revision,
                namespace=ns,
                labels=component_labels,
                annotations=workload.checkov_skips(
                    workload.processor_image_skips(args.image_pull_policy)
                ),
            ),
            spec=k8s.batch.v1.JobSpecArgs(
                # Retries cover a cluster that is still electing leaders after a roll.
                backoff_limit=6,
                active_deadline_seconds=900,
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        labels={**component_labels, **workload.KAFKA_CLIENT_LABEL}
                    ),
                    spec=k8s.core.v1.PodSpecArgs(
                        restart_policy="OnFailure",
                        automount_service_account_token=False,
                        security_context=workload.pod_security_context(RECONCILER_UID),
                        containers=[
                            k8s.core.v1.ContainerArgs(
                                name="reconcile",
                                image=args.image,
                                image_pull_policy=args.image_pull_policy,
                                args=command_line,
                                resources=workload.guaranteed_resources("250m", "256Mi"),
                                security_context=workload.container_security_context(),
                                volume_mounts=mounts,
                            )
                        ],
                        volumes=volumes,
                    ),
                ),
            ),
            # No ttlSecondsAfterFinished: the completed Job is the record that this revision of
            # the specs was applied; a Job deleted behind Pulumi's back would run again.
            opts=child,
        )
        # The reconciler serves nothing: no ingress at all; out, only the brokers and DNS.
        workload.network_policy(
            name, ns, component_labels, ingress=[], egress=[args.kafka_egress], opts=child
        )
        self.register_outputs({"jobName": self.job_name})
