"""What the last `pulumi up` of this stack left: its outputs, read back by the next run.

Some changes are safe only as a step from what is running: a disk grows but never shrinks, a
password rotation and a CA rollover move one step per `pulumi up`. A stack setting alone cannot
tell; the stack's own last outputs can. They are read through a StackReference to the stack
itself (`organization/project/stack`), which a preview reads too, so a refusal comes at preview,
before anything changes. A new stack has none: every check then passes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pulumi


def deployed_outputs() -> pulumi.Output[dict[str, Any]]:
    """The stack outputs of the last `pulumi up` of this stack; {} before the first."""
    stack = pulumi.StackReference(
        "deployed",
        f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}",
    )
    return stack.outputs.apply(lambda outputs: dict(outputs or {}))


def deployed_output(deployed: pulumi.Output[dict[str, Any]], name: str) -> pulumi.Output[Any]:
    """One output of the last `pulumi up`, as it was exported; {} when it had none."""
    return deployed.apply(lambda outputs: outputs.get(name) or {})


def refused_steps(
    deployed: pulumi.Output[dict[str, Any]], refusals: Mapping[str, Callable[[Any], None]]
) -> pulumi.Output[list[pulumi.Resource]]:
    """No resources, once each refusal (by the output it judges: its value, {} when the last
    `up` had none) has passed: make the namespace, which every other resource waits for, depend
    on it, so a refusal stops `up` (and preview) before anything changes."""

    def check(outputs: dict[str, Any]) -> list[pulumi.Resource]:
        for name, refuse in refusals.items():
            refuse(outputs.get(name) or {})
        return []

    return deployed.apply(check)
