"""Volumes that grow with a `pulumi up`: a StatefulSet's claims and its claim template.

A StatefulSet's `volumeClaimTemplates` cannot change, and the claims it made are not its to
resize. So a bigger `storage` takes two moves, as the Kubernetes documentation and the operators
(Strimzi, ECK) make them:

1. each claim `<template>-<statefulset>-<ordinal>` is patched to the new size. The storage class
   must allow expansion (`allowVolumeExpansion: true`); the API server refuses the patch
   otherwise, and a claim never shrinks.
2. the StatefulSet object is recreated with the new template, without its pods: deleted with
   `propagationPolicy: Orphan` and created again. The new object adopts the running pods (same
   selector, same pod template, so no pod restarts); pods made later get claims of the new size.

Pulumi replaces the StatefulSet when its claim templates change (delete before create: the name
is fixed). The `before_delete` hook below makes that delete an orphaning one when, and only when,
the claim templates are what changed; any other delete (`pulumi destroy`) takes the pods with it.
A hook lives in the program, so `pulumi destroy` of a stack that has one runs with
`--run-program`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s


@dataclass(frozen=True)
class ClaimTemplate:
    """What a `volumeClaimTemplates` entry says about the volume: its name, class and size."""

    name: str
    storage_class_name: str
    storage: str

    def args(self) -> k8s.core.v1.PersistentVolumeClaimArgs:
        """The `volumeClaimTemplates` entry: pod N always mounts `<name>-<statefulset>-N`."""
        return k8s.core.v1.PersistentVolumeClaimArgs(
            metadata=k8s.meta.v1.ObjectMetaArgs(name=self.name),
            spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
                access_modes=["ReadWriteOnce"],
                storage_class_name=self.storage_class_name or None,
                resources=k8s.core.v1.VolumeResourceRequirementsArgs(
                    requests={"storage": self.storage}
                ),
            ),
        )


def _templates_of(inputs: Mapping[str, Any] | None) -> list[ClaimTemplate]:
    """The claim templates of a StatefulSet's recorded inputs (wire names)."""
    spec = (inputs or {}).get("spec") or {}
    found = []
    for entry in spec.get("volumeClaimTemplates") or []:
        claim_spec = entry.get("spec") or {}
        requests = (claim_spec.get("resources") or {}).get("requests") or {}
        found.append(
            ClaimTemplate(
                name=(entry.get("metadata") or {}).get("name", ""),
                storage_class_name=claim_spec.get("storageClassName") or "",
                storage=str(requests.get("storage", "")),
            )
        )
    return found


def _kubectl_context() -> list[str]:
    """`--context` for kubectl when the stack names one (`kubernetes:context`), as the provider."""
    context = pulumi.Config("kubernetes").get("context")
    return ["--context", context] if context else []


def orphaning_delete(
    name: str, namespace: str, templates: Sequence[ClaimTemplate]
) -> pulumi.ResourceHook:
    """A `before_delete` hook: when the StatefulSet goes because its claim templates changed,
    delete it first with `--cascade=orphan`, so its pods keep running into the new one."""

    def hook(args: pulumi.ResourceHookArgs) -> None:
        if _templates_of(args.old_inputs) == list(templates):
            return  # not a resize: the engine's own delete, pods and all
        pulumi.log.info(
            f"StatefulSet {namespace}/{name}: claim templates changed; deleting the object "
            "without its pods (--cascade=orphan), the new one adopts them"
        )
        result = subprocess.run(
            [
                "kubectl",
                *_kubectl_context(),
                "delete",
                "statefulset",
                name,
                "--namespace",
                namespace,
                "--cascade=orphan",
                "--ignore-not-found",
                "--wait=true",
                "--timeout=120s",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"StatefulSet {namespace}/{name}: kubectl delete --cascade=orphan failed "
                f"({result.stderr.strip()}); the pods still run under the old object: fix the "
                "access and run `pulumi up` again"
            )

    return pulumi.ResourceHook(f"orphaning-delete-{namespace}-{name}", hook)


def resizable(
    name: str, namespace: str, templates: Sequence[ClaimTemplate]
) -> pulumi.ResourceOptions:
    """The StatefulSet's options for a claim template change: replaced, delete first, orphaning."""
    return pulumi.ResourceOptions(
        replace_on_changes=["spec.volumeClaimTemplates"],
        delete_before_replace=True,
        hooks=pulumi.ResourceHookBinding(
            before_delete=[orphaning_delete(name, namespace, templates)]
        ),
    )


def grow_claims(
    prefix: str,
    statefulset: k8s.apps.v1.StatefulSet,
    namespace: str,
    replicas: int,
    templates: Sequence[ClaimTemplate],
    parent: pulumi.Resource,
) -> list[k8s.core.v1.PersistentVolumeClaimPatch]:
    """Each existing claim at its template's size: a server-side apply patch per pod's claim,
    applied once the StatefulSet is rolled out (its controller has made every claim by then)."""
    name = statefulset.metadata.name
    patches = []
    for template in templates:
        for ordinal in range(replicas):
            claim = pulumi.Output.concat(template.name, "-", name, f"-{ordinal}")
            patches.append(
                k8s.core.v1.PersistentVolumeClaimPatch(
                    f"{prefix}-{template.name}-{ordinal}",
                    metadata=k8s.meta.v1.ObjectMetaPatchArgs(
                        name=claim,
                        namespace=namespace,
                        # The controller wrote the size when it made the claim: take it over.
                        annotations={"pulumi.com/patchForce": "true"},
                    ),
                    spec=k8s.core.v1.PersistentVolumeClaimSpecPatchArgs(
                        resources=k8s.core.v1.VolumeResourceRequirementsPatchArgs(
                            requests={"storage": template.storage}
                        ),
                    ),
                    # A claim's size is a required field: the patch gives it up by leaving it
                    # as it is (a scale-in or destroy keeps the claim, and its size, anyway).
                    opts=pulumi.ResourceOptions(
                        parent=parent, depends_on=[statefulset], retain_on_delete=True
                    ),
                )
            )
    return patches
