"""The policy pack as the Pulumi CLI runs it: `pulumi preview --policy-pack policies`.

The CLI runs `python <pack dir>`. The directory is registered as the package `policies`
whatever its name (a published pack is unpacked under another one), so the rules import under
one name everywhere. The contract they share with the program and the processor (`contract`)
is beside the pack in the repository, and inside it in a published pack (`policies.bundle`).
`PolicyPack(...)` serves gRPC and never returns: nothing else belongs in this file (tests and
`python -m offline.policy_check` import `policies.rules`).
"""

import importlib.util
import sys
from pathlib import Path

_PACK_DIR = Path(__file__).resolve().parent
if "policies" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "policies", _PACK_DIR / "__init__.py", submodule_search_locations=[str(_PACK_DIR)]
    )
    assert _spec is not None and _spec.loader is not None  # the pack's own __init__.py
    sys.modules["policies"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["policies"])
for _home in (_PACK_DIR, _PACK_DIR.parent):
    if (_home / "contract" / "__init__.py").is_file():
        if str(_home) not in sys.path:
            sys.path.insert(0, str(_home))
        break
else:
    sys.exit(
        f"policy pack: no contract/ in {_PACK_DIR} or beside it; run the pack from the "
        "repository, or publish the directory `python -m policies.bundle <dir>` writes"
    )

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402 - after the registration

from policies.rules import PACK_NAME, all_policies  # noqa: E402

PolicyPack(
    name=PACK_NAME,
    policies=all_policies(),
    enforcement_level=EnforcementLevel.MANDATORY,
)
