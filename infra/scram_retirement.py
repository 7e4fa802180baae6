"""The Job that ends a SCRAM rotation by retiring the previous revision's credentials
(`python -m app.admin.scram_retire`), once every workload that logs in with them has rolled."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from contract import container_commands
from infra import workload
from infra.kafka_credentials import KafkaCredentials
from infra.reconciler_jobs import RECONCILER_USER, ReconcilerPod, reconciler_job
from infra.topics import TopicReconciliation


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
        # The type token keeps the module it was born in: it is part of every deployed URN.
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
