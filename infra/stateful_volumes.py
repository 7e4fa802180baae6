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

Both moves are checked at preview against what the last `pulumi up` deployed (the stack's own
`volumes` output, read back through `infra.deployed_stack`): a claim never shrinks, and a claim
grows only on a storage class that allows expansion, read from the cluster. Either refusal names
the setting and the way out before anything changes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from contract.stack_pipeline import PROJECT

# The stack output that records each claim template's deployed size and storage class.
from infra.stack_settings import StackConfigError, quantity

# The stack output that records each claim template's deployed size and storage class.
DEPLOYED_OUTPUT = "volumes"


@dataclass(frozen=True)
class ClaimTemplate:
    """What a `volumeClaimTemplates` entry says about the volume: its name, class and size."""

    name: str
    storage_class_name: str
    storage: str

    def args(self, storage: pulumi.Input[str]) -> k8s.core.v1.PersistentVolumeClaimArgs:
        """The `volumeClaimTemplates` entry: pod N always mounts `<name>-<statefulset>-N`."""
        return k8s.core.v1.PersistentVolumeClaimArgs(
            metadata=k8s.meta.v1.ObjectMetaArgs(name=self.name),
            spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
                access_modes=["ReadWriteOnce"],
                storage_class_name=self.storage_class_name or None,
                resources=k8s.core.v1.VolumeResourceRequirementsArgs(requests={"storage": storage}),
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


class StatefulVolumes:
    """A StatefulSet's claims: their templates at a size checked against what is deployed, the
    options that let a template change replace the object without its pods, and the patches
    that grow the claims it already made.

    `setting` is the stack setting that sizes them (`kafka`, `processor`), for the refusals.
    """

    def __init__(
        self,
        setting: str,
        statefulset: str,
        namespace: str,
        templates: Sequence[ClaimTemplate],
        deployed: pulumi.Input[Mapping[str, Any]],
        parent: pulumi.Resource,
    ) -> None:
        self.setting = setting
        self.statefulset = statefulset
        self.namespace = namespace
        self.templates = tuple(templates)
        self.parent = parent
        self._sizes = {t.name: self._checked_size(t, deployed) for t in self.templates}

    @property
    def _storage_setting(self) -> str:
        return f"{PROJECT}:{self.setting}.storage"

    def key(self, template: ClaimTemplate) -> str:
        """The template's entry in the `volumes` output: `<statefulset>/<template>`."""
        return f"{self.statefulset}/{template.name}"

    def claim_templates(self) -> list[k8s.core.v1.PersistentVolumeClaimArgs]:
        """The `volumeClaimTemplates`, each at its checked size."""
        return [t.args(self._sizes[t.name]) for t in self.templates]

    def options(self) -> pulumi.ResourceOptions:
        """The StatefulSet's options for a template change: replaced, deleted first, orphaning."""
        return pulumi.ResourceOptions(
            replace_on_changes=["spec.volumeClaimTemplates"],
            delete_before_replace=True,
            hooks=pulumi.ResourceHookBinding(
                before_delete=[orphaning_delete(self.statefulset, self.namespace, self.templates)]
            ),
        )

    def _checked_size(
        self, template: ClaimTemplate, deployed: pulumi.Input[Mapping[str, Any]]
    ) -> pulumi.Output[str]:
        """The template's size once it is known to be safe against what is deployed: the same,
        or bigger on a class that can expand. Both the template and the patches wait on it, so a
        refusal fails the preview, and `up` before the StatefulSet is touched."""

        def check(deployed: Mapping[str, Any]) -> pulumi.Input[str]:
            before = deployed.get(self.key(template))
            if not before:
                return template.storage  # not deployed yet: made at this size
            was, wanted = before["storage"], template.storage
            if quantity(wanted) == quantity(was):
                return template.storage
            if quantity(wanted) < quantity(was):
                raise StackConfigError(
                    f"{self._storage_setting} = {wanted!r}: the claims of StatefulSet "
                    f"{self.namespace}/{self.statefulset} are {was} and a claim never shrinks. "
                    f"Keep {was} or more; to move to smaller volumes, deploy a new stack and "
                    "move the data there."
                )
            storage_class = before.get("storageClassName") or template.storage_class_name
            found = k8s.storage.v1.StorageClass.get(
                f"{self.statefulset}-{template.name}-storage-class",
                storage_class,
                opts=pulumi.ResourceOptions(parent=self.parent),
            )
            return found.allow_volume_expansion.apply(
                lambda allowed: self._expandable(template, was, storage_class, bool(allowed))
            )

        return pulumi.Output.from_input(deployed).apply(check)

    def _expandable(self, template: ClaimTemplate, was: str, storage_class: str, ok: bool) -> str:
        if ok:
            return template.storage
        raise StackConfigError(
            f"{self._storage_setting} = {template.storage!r}: the claims of StatefulSet "
            f"{self.namespace}/{self.statefulset} are {was} on storage class {storage_class!r}, "
            "which does not allow volume expansion (allowVolumeExpansion is not true). If its "
            "provisioner can resize volumes, allow it (`kubectl patch storageclass "
            f"{storage_class} -p '{{\"allowVolumeExpansion\": true}}'`) and run `pulumi up` "
            f"again; otherwise keep {self.setting}.storage at {was}."
        )

    def grow(
        self, prefix: str, statefulset: k8s.apps.v1.StatefulSet, replicas: int
    ) -> pulumi.Output[dict[str, dict[str, str]]]:
        """Each existing claim at its template's size: a server-side apply patch per pod's
        claim, applied once the StatefulSet is rolled out (its controller has made every claim
        by then). Returns the `volumes` entries: each template's size and the claims' class."""
        entries = {}
        for template in self.templates:
            patches = [
                k8s.core.v1.PersistentVolumeClaimPatch(
                    f"{prefix}-{template.name}-{ordinal}",
                    metadata=k8s.meta.v1.ObjectMetaPatchArgs(
                        name=f"{template.name}-{self.statefulset}-{ordinal}",
                        namespace=self.namespace,
                        annotations={
                            # The controller wrote the size when it made the claim: take it over.
                            "pulumi.com/patchForce": "true",
                            # The provider would wait for the claim to be "ready", which on a
                            # WaitForFirstConsumer class (kind's `standard`) means Pending: a
                            # claim in use is Bound, so every `up` hung 5 minutes per claim and
                            # failed. A size patch has nothing to wait for.
                            "pulumi.com/skipAwait": "true",
                        },
                    ),
                    spec=k8s.core.v1.PersistentVolumeClaimSpecPatchArgs(
                        resources=k8s.core.v1.VolumeResourceRequirementsPatchArgs(
                            requests={"storage": self._sizes[template.name]}
                        ),
                    ),
                    # A claim's size is a required field: the patch gives it up by leaving it
                    # as it is (a scale-in or destroy keeps the claim, and its size, anyway).
                    opts=pulumi.ResourceOptions(
                        parent=self.parent, depends_on=[statefulset], retain_on_delete=True
                    ),
                )
                for ordinal in range(replicas)
            ]
            # The class the claims got (the cluster's default when the template names none).
            made_in: pulumi.Input[str] = template.storage_class_name
            if patches:
                made_in = patches[0].spec.apply(partial(_claims_class, template))
            entries[self.key(template)] = pulumi.Output.all(
                storage=self._sizes[template.name], storageClassName=made_in
            )
        return pulumi.Output.all(**entries)


def _claims_class(
    template: ClaimTemplate, spec: k8s.core.v1.outputs.PersistentVolumeClaimSpecPatch | None
) -> str:
    """The storage class a patched claim reports (the template's when it reports none)."""
    return (spec.storage_class_name if spec else None) or template.storage_class_name
