"""Every container runs the image of the stack setting the contract names for it.

`contract.container_commands.IMAGE_SOURCES` says where each container's image comes from:
`kafka.image` for the brokers, their init and grant containers and the metadata.version Job;
`processor.image` for the processor, the brokers' readiness sidecar, the topic reconciler and
the SCRAM retirement. The pack does not read the stack's settings, so it holds each container
to its setting's anchor in the stack: the brokers' `kafka` container for `kafka.image`, the
processor's container (a single deployment) or the reconciler's (an active/standby pair, whose
sides may run other releases of the same image) for `processor.image`. A command line pinned
by `container-commands` means nothing if another image supplies the binary it runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import PolicyResource, StackValidationArgs

from contract.container_commands import (
    IMAGE_SOURCES,
    KAFKA,
    KAFKA_IMAGE_SETTING,
    PROCESSOR,
    PROCESSOR_IMAGE_SETTING,
    RECONCILE,
)

from .config import MANDATORY, stack_rule
from .manifests import all_containers, image_repository, label, pod_spec
from .messages import violation
from .stack_view import StackView

Finding = tuple[str, str | None]
_DECLARED = "contract/container_commands.py, IMAGE_SOURCES"


def _images(workload: PolicyResource, name: str) -> list[str]:
    spec = pod_spec(workload.resource_type, workload.props)
    return [str(c.get("image", "")) for c in all_containers(spec) if c.get("name") == name]


def _anchors(view: StackView) -> tuple[set[str], str | None, bool]:
    """The brokers' images, the `processor.image` anchor, and whether the stack is a pair."""
    brokers = {i for w in view.kafka_clusters() for i in _images(w, KAFKA)}
    processors = [i for w in view.workloads() for i in _images(w, PROCESSOR)]
    if len(processors) == 1:
        return brokers, processors[0], False
    reconcilers = [i for w in view.workloads() for i in _images(w, RECONCILE)]
    return brokers, (reconcilers[0] if reconcilers else None), len(processors) > 1


def check_image_sources(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """Each declared container on its setting's image, as the stack's anchor runs it."""
    view = StackView(args.resources)
    brokers, processor_image, pair = _anchors(view)
    for workload in view.workloads():
        subject = label(workload.resource_type, workload.props)
        spec = pod_spec(workload.resource_type, workload.props)
        own_broker = set(_images(workload, KAFKA))
        for container in all_containers(spec):
            name = str(container.get("name", "?"))
            setting, image = IMAGE_SOURCES.get(name), str(container.get("image", ""))
            if setting == KAFKA_IMAGE_SETTING:
                allowed = own_broker or brokers
                if allowed and image not in allowed:
                    required = " or ".join(sorted(allowed))
                    yield _finding(subject, name, image, setting, required), workload.urn
            elif setting == PROCESSOR_IMAGE_SETTING and processor_image:
                side = pair and name == PROCESSOR
                if side and image_repository(image) == image_repository(processor_image):
                    continue  # a pair side may run another release of the processor's image
                if not side and image == processor_image:
                    continue
                required = (
                    f"a release of {image_repository(processor_image)}" if side else processor_image
                )
                yield _finding(subject, name, image, setting, required), workload.urn


def _finding(subject: str, container: str, image: str, setting: str, required: str) -> str:
    return violation(
        subject,
        f"container {container} image",
        image or "absent",
        f"{required}, the image of {setting} ({_DECLARED})",
        f"run {container} on {setting}'s image: what its command runs with its pod's "
        "credentials is the binary of the image review approved for it, not of any image "
        "pinned by digest",
    )


POLICIES = [
    stack_rule(
        name="image-sources",
        description=(
            "Every container runs the image of the stack setting the contract names for it "
            "(contract/container_commands.py, IMAGE_SOURCES): kafka.image as the brokers' kafka "
            "container runs it, processor.image as the processor (or, in a pair, the topic "
            "reconciler) runs it; a pair's side may run another release of the same image."
        ),
        level=MANDATORY,
        check=check_image_sources,
    ),
]
