"""A password rotation and a CA rollover move one step per `pulumi up`, from what is running.

Each setting is valid on its own; a jump between two valid settings can still lock clients out
of a running cluster. `security.credentialsRevision` picks the SCRAM mechanism by its parity and
sets the new passwords beside the current ones: a jump of two overwrites the current ones while
every client still uses them. A CA rollover is a chain of states (docs/security.md,
"Certificates"): trust [g], trust [g, g+1], sign with g+1, trust [g+1], ...; skipping one
restarts brokers with a certificate their peers do not trust yet, or drops a CA a broker still
serves. The running state is the stack's own last `security` output (`infra.deployed_stack`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contract.stack_pipeline import PROJECT
from infra.stack_settings import SecurityConfig, StackConfigError

# The stack output that records the running state.
DEPLOYED_OUTPUT = "security"


def deployed_state(security: SecurityConfig) -> dict[str, Any]:
    """What this run leaves running, for the next run to check against."""
    return {
        "credentialsRevision": security.credentials_revision,
        "caGeneration": security.ca_generation,
        "trustedCaGenerations": list(security.trusted_cas),
    }


def rollover_step(generation: int, trusted: Sequence[int]) -> int | None:
    """The state's place in the rollover chain (trust [1] is 0, trust [1, 2] 1, sign with 2 is 2,
    trust [2] 3, ...); None for a state outside it."""
    base = 3 * (generation - 1)
    states = {
        (generation,): base,
        (generation, generation + 1): base + 1,
        (generation - 1, generation): base - 1,
    }
    return states.get(tuple(sorted(set(trusted))))


def _ca_state(generation: int, trusted: Sequence[int]) -> str:
    return f"caGeneration {generation}, trustedCaGenerations {sorted(set(trusted))}"


def refuse_skipped_steps(security: SecurityConfig, running: Mapping[str, Any]) -> None:
    """StackConfigError when the settings are more than one step from the running state."""
    if not running:
        return  # a new stack: nothing runs yet
    was = int(running["credentialsRevision"])
    wanted = security.credentials_revision
    if wanted not in (was, was + 1):
        raise StackConfigError(
            f"{PROJECT}:security.credentialsRevision = {wanted}: the running stack is at "
            f"revision {was}, and a rotation moves one revision per `pulumi up` (the new "
            "passwords are set beside the current ones; a jump of two would replace the ones "
            "every client still uses, and a step back would bring retired ones back). Set "
            f"{was + 1}, run `pulumi up`, and repeat."
            if wanted > was
            else f"{PROJECT}:security.credentialsRevision = {wanted}: the running stack is at "
            f"revision {was}, and a revision never goes back (its credentials were retired). "
            f"Keep {was}, or rotate forward to {was + 1}."
        )
    was_generation = int(running["caGeneration"])
    was_trusted = [int(g) for g in running["trustedCaGenerations"]]
    before = rollover_step(was_generation, was_trusted)
    after = rollover_step(security.ca_generation, security.trusted_cas)
    if before is None or after is None or abs(after - before) <= 1:
        return
    raise StackConfigError(
        f"{PROJECT}:security = {_ca_state(security.ca_generation, security.trusted_cas)}: the "
        f"running stack is at {_ca_state(was_generation, was_trusted)}, and a CA rollover "
        "moves one step per `pulumi up`: trust both, then sign with the new, then drop the "
        'old (docs/security.md, "Certificates"). '
        f"The next step from here: {_next_step(was_generation, was_trusted)}."
    )


def _next_step(generation: int, trusted: Sequence[int]) -> str:
    if sorted(set(trusted)) == [generation]:
        return f"trustedCaGenerations [{generation}, {generation + 1}]"
    if sorted(set(trusted)) == [generation, generation + 1]:
        return f"caGeneration {generation + 1}"
    return f"trustedCaGenerations [{generation}]"
