"""The containers of a broker pod: the broker, the storage format step and the grant loop on the
broker's image, and the readiness sidecar on the processor's.

Each runs what `contract.container_commands` renders for it, the one render the pack compares
with; `infra/kafka_cluster.py` puts them in the pod with their volumes.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from contract import container_commands
from contract.container_commands import (
    BOOTSTRAP_DIR,
    DATA_DIR,
    HEAP_OPTS_VARIABLE,
    NODE_ID_VARIABLE,
    READINESS_PORT,
    USERS_DIR,
    ContainerCommand,
)
from contract.workload_shapes import CLIENT_PORT, CONTROLLER_PORT, INTERNAL_PORT
from infra import workload
from infra.stack_settings import KafkaConfig

# The bootstrap ConfigMap at `BOOTSTRAP_DIR`, read by the format step, the grant container and
# the readiness sidecar alike.
BOOTSTRAP_MOUNT = k8s.core.v1.VolumeMountArgs(
    name="bootstrap", mount_path=BOOTSTRAP_DIR, read_only=True
)

# The pod's ordinal, set by the StatefulSet controller (beta 1.28, GA 1.32): node N is always
# pod kafka-N, so the voters list needs no script to derive it.
NODE_ID_ENV = k8s.core.v1.EnvVarArgs(
    name=NODE_ID_VARIABLE,
    value_from=k8s.core.v1.EnvVarSourceArgs(
        field_ref=k8s.core.v1.ObjectFieldSelectorArgs(
            field_path="metadata.labels['apps.kubernetes.io/pod-index']"
        )
    ),
)


def _on_broker_image(
    cfg: KafkaConfig, runs: ContainerCommand, **fields: Any
) -> k8s.core.v1.ContainerArgs:
    """A container of the broker's image running `runs`, the contract's command for it."""
    return k8s.core.v1.ContainerArgs(
        name=runs.name,
        image=cfg.image,
        image_pull_policy=cfg.image_pull_policy,
        command=list(runs.command),
        **fields,
    )


def broker(
    cfg: KafkaConfig,
    env: list[k8s.core.v1.EnvVarArgs],
    resources: k8s.core.v1.ResourceRequirementsArgs,
    security: k8s.core.v1.SecurityContextArgs,
    mounts: list[k8s.core.v1.VolumeMountArgs],
) -> k8s.core.v1.ContainerArgs:
    """The broker: the contract's command on the broker's image, its probes and ports."""
    return _on_broker_image(
        cfg,
        container_commands.kafka_broker(),
        env=env,
        ports=[
            k8s.core.v1.ContainerPortArgs(name="client", container_port=CLIENT_PORT),
            k8s.core.v1.ContainerPortArgs(name="controller", container_port=CONTROLLER_PORT),
        ],
        resources=resources,
        security_context=security,
        startup_probe=k8s.core.v1.ProbeArgs(
            tcp_socket=k8s.core.v1.TCPSocketActionArgs(port=CONTROLLER_PORT),
            initial_delay_seconds=cfg.startup_probe.initial_delay_seconds,
            period_seconds=cfg.startup_probe.period_seconds,
            failure_threshold=cfg.startup_probe.failure_threshold,
        ),
        # Ready: an unfenced member of the cluster, in the ISR of every partition it hosts,
        # as the sidecar beside it judges (`app.admin.broker_readiness`). The StatefulSet
        # controller rolls the next broker only then, so a roll never takes a second
        # replica away while the first is behind.
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
    )


def format_storage(
    cfg: KafkaConfig,
    env: list[k8s.core.v1.EnvVarArgs],
    resources: k8s.core.v1.ResourceRequirementsArgs,
    security: k8s.core.v1.SecurityContextArgs,
    mounts: list[k8s.core.v1.VolumeMountArgs],
) -> k8s.core.v1.ContainerArgs:
    """Formats a new volume with the bootstrap users' SCRAM credentials (secured clusters)."""
    return _on_broker_image(
        cfg,
        container_commands.format_storage(),
        # The broker's own settings and identity: it formats what the broker runs.
        env=[e for e in env if e.name != HEAP_OPTS_VARIABLE],
        resources=resources,
        security_context=security,
        volume_mounts=[
            k8s.core.v1.VolumeMountArgs(name="data", mount_path=DATA_DIR),
            BOOTSTRAP_MOUNT,
            k8s.core.v1.VolumeMountArgs(name="users", mount_path=USERS_DIR, read_only=True),
            *mounts,
        ],
    )


def readiness_sidecar(
    image: pulumi.Input[str],
    image_pull_policy: str,
    security: k8s.core.v1.SecurityContextArgs,
    mounts: list[k8s.core.v1.VolumeMountArgs],
) -> k8s.core.v1.ContainerArgs:
    """`app.admin.broker_readiness` beside the broker: one admin client, no JVM per probe.

    On a secured cluster (`mounts`: its user's Secret, the CA and the bootstrap ConfigMap)
    it connects to the broker's CLIENT listener as the readiness user, who may only
    DESCRIBE: a compromised processor image gets no more than an observer. It answers
    ready only once the bootstrap ACLs exist (DescribeAcls), so the reconciler Job (which
    Pulumi starts once every broker is ready) is never refused on a new cluster, and it
    serves the certificates' expiry on /metrics.
    """
    runs = container_commands.broker_readiness(CLIENT_PORT, secured=bool(mounts))
    return k8s.core.v1.ContainerArgs(
        name=runs.name,
        image=image,
        image_pull_policy=image_pull_policy,
        # `args`: the image's ENTRYPOINT (tini) stays PID 1.
        args=list(runs.args),
        env=[NODE_ID_ENV],
        volume_mounts=mounts or None,
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


def grant_acls(
    cfg: KafkaConfig, mounts: list[k8s.core.v1.VolumeMountArgs]
) -> k8s.core.v1.ContainerArgs:
    """`grant-acls`: the bootstrap users' credentials and ACLs, set as the broker from the
    broker's own image.

    The broker's key stays with the image that runs the broker; the script
    (`contract.container_commands.grant_script`) needs only busybox sh and Kafka's jars
    (its `ConfigCommand` and `AclCommand`).
    `mounts`: the broker's TLS Secret, its writable /tmp and the bootstrap users' passwords.
    """
    runs = container_commands.grant_acls(INTERNAL_PORT)
    # Each round touches the heartbeat; one stuck longer than the contract allows is restarted.
    alive = k8s.core.v1.ExecActionArgs(command=list(runs.probe))
    return _on_broker_image(
        cfg,
        runs,
        volume_mounts=[*mounts, BOOTSTRAP_MOUNT],
        resources=workload.guaranteed_resources("250m", "384Mi"),
        security_context=workload.container_security_context(),
        startup_probe=k8s.core.v1.ProbeArgs(
            exec_=alive,
            period_seconds=5,
            failure_threshold=12,
        ),
        # Ready while its loop runs: the pod's readiness waits on the bootstrap ACLs through
        # the readiness sidecar (DescribeAcls: they exist in the cluster), so a restarted
        # broker does not wait for its own container to grant them again.
        readiness_probe=k8s.core.v1.ProbeArgs(
            exec_=alive,
            period_seconds=10,
            failure_threshold=3,
        ),
        liveness_probe=k8s.core.v1.ProbeArgs(
            exec_=alive,
            period_seconds=60,
            failure_threshold=3,
        ),
    )
