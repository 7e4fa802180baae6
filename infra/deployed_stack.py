"""What the last `pulumi up` of this stack left: its outputs, read back by the next run.

Some changes are safe only as a step from what is running: a disk grows but never shrinks, a
password rotation and a CA rollover move one step per `pulumi up`. A stack setting alone cannot
tell; the stack's own last outputs can. They are read through a StackReference to the stack
itself (`organization/project/stack`), which a preview reads too, so a refusal comes at preview,
before anything changes. A new stack has none: every check then passes.
"""

from __future__ import annotations

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
