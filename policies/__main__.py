"""The policy pack as the Pulumi CLI runs it: `pulumi preview --policy-pack policies`.

The CLI runs `python <pack dir>`, so this directory is first on sys.path and the rules are
imported as the top-level package `rules`. `PolicyPack(...)` serves gRPC and never returns:
nothing else belongs in this file (tests and `python -m policies.check` import `policies.rules`).
"""

from pulumi_policy import EnforcementLevel, PolicyPack
from rules import PACK_NAME, all_policies

PolicyPack(
    name=PACK_NAME,
    policies=all_policies(),
    enforcement_level=EnforcementLevel.MANDATORY,
)
