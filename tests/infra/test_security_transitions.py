"""A password rotation and a CA rollover move one step per `pulumi up`, checked at preview
against the stack's own last outputs (`infra.security_transitions`)."""

from __future__ import annotations

from typing import Any

import pytest

from infra.security_transitions import rollover_step
from offline.render import RecordedStack, record_stack

# The rollover chain of docs/security.md: trust [1], trust [1, 2], sign with 2, trust [2], ...
CHAIN = [(1, [1]), (1, [1, 2]), (2, [1, 2]), (2, [2]), (2, [2, 3]), (3, [2, 3]), (3, [3])]


def test_the_rollover_states_form_one_chain() -> None:
    assert [rollover_step(g, t) for g, t in CHAIN] == list(range(len(CHAIN)))
    assert rollover_step(1, [3]) is None


def running(prod: RecordedStack, **state: Any) -> dict[str, Any]:
    """prod's outputs as its last `pulumi up` left them, with its security state changed."""
    return {**prod.outputs, "security": {**prod.outputs["security"], **state}}


def security(generation: int, trusted: list[int], revision: int = 1) -> dict[str, Any]:
    return {
        "security": {
            "caGeneration": generation,
            "trustedCaGenerations": trusted,
            "credentialsRevision": revision,
        }
    }


def test_the_stack_records_its_security_state_for_the_next_run(prod: RecordedStack) -> None:
    assert prod.outputs["security"] == {
        "credentialsRevision": 1,
        "caGeneration": 1,
        "trustedCaGenerations": [1],
    }


@pytest.mark.parametrize("step", range(len(CHAIN) - 1))
def test_each_rollover_step_and_its_way_back_pass(prod: RecordedStack, step: int) -> None:
    (was_g, was_t), (next_g, next_t) = CHAIN[step], CHAIN[step + 1]
    deployed = running(prod, caGeneration=was_g, trustedCaGenerations=was_t)
    record_stack("prod", security(next_g, next_t), deployed=deployed)
    back = running(prod, caGeneration=next_g, trustedCaGenerations=next_t)
    record_stack("prod", security(was_g, was_t), deployed=back)


@pytest.mark.parametrize(
    ("was", "wanted", "next_step"),
    [
        ((1, [1]), (2, [1, 2]), "trustedCaGenerations [1, 2]"),
        ((1, [1]), (2, [2]), "trustedCaGenerations [1, 2]"),
        ((1, [1, 2]), (2, [2]), "caGeneration 2"),
        ((2, [1, 2]), (2, [2, 3]), "trustedCaGenerations [2]"),
    ],
    ids=["sign-before-trusting", "one-step-switch", "drop-before-signing", "trust-next-too-soon"],
)
def test_a_rollover_that_skips_a_step_is_refused_at_preview(
    prod: RecordedStack, was: tuple[int, list[int]], wanted: tuple[int, list[int]], next_step: str
) -> None:
    deployed = running(prod, caGeneration=was[0], trustedCaGenerations=was[1])
    with pytest.raises(Exception, match="a CA rollover moves one step per `pulumi up`") as refused:
        record_stack("prod", security(*wanted), deployed=deployed, preview=True)
    message = str(refused.value)
    assert f"the running stack is at caGeneration {was[0]}, trustedCaGenerations {was[1]}" in (
        message
    )
    assert f"The next step from here: {next_step}." in message


@pytest.mark.parametrize(
    ("wanted", "reason"),
    [(4, "a jump of two would replace the ones every client still uses"), (1, "never goes back")],
)
def test_a_rotation_that_skips_or_goes_back_is_refused_at_preview(
    prod: RecordedStack, wanted: int, reason: str
) -> None:
    deployed = running(prod, credentialsRevision=2)
    with pytest.raises(Exception, match=r"security\.credentialsRevision") as refused:
        record_stack("prod", security(1, [1], wanted), deployed=deployed, preview=True)
    assert reason in str(refused.value)
    assert f"credentialsRevision = {wanted}: the running stack is at revision 2" in str(
        refused.value
    )


def test_a_rotation_by_one_passes(prod: RecordedStack) -> None:
    rotated = record_stack(
        "prod", security(1, [1], 3), deployed=running(prod, credentialsRevision=2)
    )
    assert rotated.outputs["security"]["credentialsRevision"] == 3


def test_a_new_stack_has_nothing_to_step_from(prod: RecordedStack) -> None:
    record_stack("prod", security(2, [2], 5))
