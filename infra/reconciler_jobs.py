"""The pod every cluster-side Job of the stack runs in (the topic reconciler, the SCRAM
retirement, the metadata.version upgrade): once, as the reconciler's user, on the brokers' client
port and DNS alone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from contract.container_commands import ContainerCommand
from contract.workload_shapes import KAFKA_CLIENT_LABEL
from infra import workload

# The SCRAM user the Job connects as (one of `contract.acl_specs.pipeline_users`).
RECONCILER_USER = "topic-reconciler"
RECONCILER_UID = 10001


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
