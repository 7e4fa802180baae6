"""The cluster's `metadata.version`, finalized by a Job the program orders after the brokers' roll.

A Kafka upgrade is two steps (Kafka's "Upgrading" notes; Strimzi's operator takes the same
two): roll the brokers onto the new release, then raise the cluster's finalized features to the
release's own. Until the second step the brokers run the new binaries at the old
`metadata.version` and the old image can still come back; after it, an older broker no longer
starts on the storage. So the Job here (`kafka-features.sh upgrade --release-version X.Y` on the
brokers' own image, `contract.container_commands.finalize_metadata_version`) depends on
the Kafka StatefulSet, whose `pulumi up` returns only once every pod runs the new template and is
back in every ISR (`infra/workload.py`, `roll_complete`): it runs once every broker runs the
release. The version it finalizes is `kafka.metadataVersion`, or the image's release.

What it finalized is a stack output, read back by the next run (`infra.deployed_stack`): an image
of an older release, or a lower `kafka.metadataVersion`, is refused at preview, before anything
rolls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from contract import container_commands
from contract.container_commands import FEATURES_CLIENT_FILE, FEATURES_DIR, RELEASE
from contract.java_properties import format_properties
from contract.kafka_security import java_scram_client_configs
from contract.stack_pipeline import PROJECT
from infra import workload
from infra.kafka_credentials import KafkaCredentials
from infra.reconciler_jobs import RECONCILER_USER, ReconcilerPod, kafka_client_only, reconciler_job
from infra.stack_settings import KafkaConfig, StackConfigError

# The stack output that records the finalized release (X.Y).
DEPLOYED_OUTPUT = "kafkaMetadataVersion"
# An image tag that names an Apache Kafka release: `apache/kafka:4.3.1@sha256:...` is 4.3.
_IMAGE_RELEASE = re.compile(r":([0-9]+)\.([0-9]+)\.[0-9]+(?:-[\w.]+)?(?:@|$)")


def image_release(image: str) -> str | None:
    """The release (X.Y) an image's tag names; None when the tag names none."""
    found = _IMAGE_RELEASE.search(image)
    return f"{found[1]}.{found[2]}" if found else None


def release_order(release: str) -> tuple[int, int]:
    """`4.10` after `4.9`: a release compared as numbers."""
    major, minor = release.split(".")
    return int(major), int(minor)


def finalized_release(kafka: KafkaConfig) -> str:
    """The release whose `metadata.version` the cluster is finalized at after this `up`."""
    release = kafka.metadata_version or image_release(kafka.image)
    if release is None:  # setting_rules refuses it first
        raise StackConfigError(f"{PROJECT}:kafka.image = {kafka.image!r} names no release")
    return release


def refuse_downgrade(kafka: KafkaConfig, running: Any) -> None:
    """StackConfigError when this `up` would go below the release the cluster is finalized at
    (the stack's last `kafkaMetadataVersion` output; none on a new stack)."""
    if not isinstance(running, str) or not RELEASE.fullmatch(running):
        return
    image = image_release(kafka.image)
    if image is not None and release_order(image) < release_order(running):
        raise StackConfigError(
            f"{PROJECT}:kafka.image = {kafka.image!r}: the cluster's metadata.version is "
            f"finalized at {running} (the last `pulumi up` finalized it), and a broker of "
            f"Apache Kafka {image} does not start on storage finalized at a newer "
            "metadata.version: once finalized, an upgrade has no way back. Keep an image of "
            f"release {running} or later."
        )
    wanted = finalized_release(kafka)
    if release_order(wanted) < release_order(running):
        raise StackConfigError(
            f"{PROJECT}:kafka.metadataVersion = {kafka.metadata_version!r}: the cluster's "
            f"metadata.version is finalized at {running}, and Kafka never lowers it without "
            f"losing metadata. Set {running} or later, or leave it empty (the image's release)."
        )


@dataclass(frozen=True)
class MetadataVersionArgs:
    """Inputs of a `MetadataVersion`."""

    namespace: str
    kafka: KafkaConfig
    bootstrap_servers: str
    # Where its pod may connect: the brokers' client port (`KafkaCluster.client_egress`).
    kafka_egress: k8s.networking.v1.NetworkPolicyEgressRuleArgs
    # On a secured cluster it logs in as the topic reconciler, whose ACLs allow ALTER on the
    # cluster (UpdateFeatures' own), with the current revision's password.
    credentials: KafkaCredentials | None = None


class MetadataVersion(pulumi.ComponentResource):
    """The Job that finalizes the cluster's `metadata.version` at a release, once every broker
    runs it: create it with `depends_on` the Kafka StatefulSet.

    Named after what it runs (release, image, credentials revision): Jobs are immutable, so a new
    release or image is a new Job that runs after the roll, and an unchanged one is left alone.
    On a cluster already there (a new one, a patch release) it finds nothing to raise.
    """

    job_name: str
    # The finalized release, known once the Job has completed (a stack output).
    release: pulumi.Output[str]

    def __init__(
        self, name: str, args: MetadataVersionArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("stateful-streaming:kafka:MetadataVersion", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ns, release = args.namespace, finalized_release(args.kafka)
        runs = container_commands.finalize_metadata_version(
            args.bootstrap_servers, release, secured=args.credentials is not None
        )
        component_labels = workload.labels(name, "kafka-metadata-version")
        access = (
            args.credentials.client_access(RECONCILER_USER, pinned=True)
            if args.credentials is not None
            else None
        )
        client = format_properties(java_scram_client_configs(access.properties)) if access else ""
        annotations = access.annotations if access else {}
        self.job_name = workload.content_name(
            name, " ".join(runs.command) + args.kafka.image + client + str(annotations)
        )
        if access is None:
            mounts = [k8s.core.v1.VolumeMountArgs(name="tmp", mount_path="/tmp")]
            volumes = [
                k8s.core.v1.VolumeArgs(name="tmp", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs())
            ]
        else:
            files = k8s.core.v1.ConfigMap(
                f"{name}-client",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=self.job_name, namespace=ns, labels=component_labels
                ),
                data={FEATURES_CLIENT_FILE: client},
                opts=child,
            )
            mounted = workload.config_and_tmp("client", files.metadata.name, FEATURES_DIR)
            mounts = [*mounted.mounts, *access.mounts]
            volumes = [*mounted.volumes, *access.volumes]
        job = reconciler_job(
            name,
            ReconcilerPod(
                ns,
                self.job_name,
                component_labels,
                args.kafka.image,
                args.kafka.image_pull_policy,
                # The tool's JVM options are its command's (`container_commands.kafka_tool`).
                memory="384Mi",
            ),
            runs,
            mounts,
            volumes,
            child,
        )
        kafka_client_only(name, ns, component_labels, args.kafka_egress, child)
        self.release = job.metadata.name.apply(lambda _: release)
        self.register_outputs({"jobName": self.job_name, "release": self.release})
