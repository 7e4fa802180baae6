"""The pipeline's topics, reconciled into the cluster by a Job that runs `python -m app.topics`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from app.topic_specs import TopicSpec, dumps
from infra import workload

SPECS_DIR = "/etc/topics"
SPECS_FILE = "topics.json"
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
        # Everything in the immutable Job template that can change, so a change is a new Job.
        revision = workload.content_name(
            name, specs_json + "args: " + " ".join(command_line) + args.image
        )

        specs = k8s.core.v1.ConfigMap(
            f"{name}-specs",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=revision, namespace=ns, labels=component_labels
            ),
            data={SPECS_FILE: specs_json},
            opts=child,
        )
        self.job_name = revision
        files = workload.config_and_tmp("specs", specs.metadata.name, SPECS_DIR)
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
                                volume_mounts=files.mounts,
                            )
                        ],
                        volumes=files.volumes,
                    ),
                ),
            ),
            # No ttlSecondsAfterFinished: the completed Job is the record that this revision of
            # the specs was applied; a Job deleted behind Pulumi's back would run again.
            opts=child,
        )
        # The reconciler serves nothing: no ingress at all (its egress to Kafka stays open).
        k8s.networking.v1.NetworkPolicy(
            name,
            metadata=k8s.meta.v1.ObjectMetaArgs(name=name, namespace=ns, labels=component_labels),
            spec=k8s.networking.v1.NetworkPolicySpecArgs(
                pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=workload.selector(name)),
                policy_types=["Ingress"],
            ),
            opts=child,
        )
        self.register_outputs({"jobName": self.job_name})
