"""SARIF 2.1.0 for code-review tools (GitHub code scanning annotates the pull request with it).

Each result points at the source that made the resource: the `infra/<module>.py` that defines
the component the resource belongs to (found by its type token), `infra/__main__.py` for a
resource made outside any component, and `Pulumi.<stack>.yaml` for stack-level findings. URIs
are relative to the repository root, which is how code scanning resolves them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from policies.evaluate import PolicyInfo, Resource, Violation

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVEL = {"mandatory": "error", "advisory": "warning"}


def _source_of_type(repo: Path, type_token: str) -> tuple[str, int] | None:
    """The infra module (and line) whose source declares a component type token."""
    for path in sorted((repo / "infra").glob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if f'"{type_token}"' in line or f"'{type_token}'" in line:
                return path.relative_to(repo).as_posix(), number
    return None


def locate(
    repo: Path, stack: str, resources: Iterable[Resource], urn: str | None
) -> dict[str, Any]:
    """A SARIF physicalLocation for the resource with this URN (or the stack file)."""
    by_urn = {r.urn: r for r in resources}
    resource = by_urn.get(urn or "")
    uri, line = f"Pulumi.{stack}.yaml", 1
    if resource is not None:
        uri, line = "infra/__main__.py", 1
        parent = by_urn.get(resource.parent or "")
        while parent is not None:
            found = _source_of_type(repo, parent.type)
            if found:
                uri, line = found
                break
            parent = by_urn.get(parent.parent or "")
    return {
        "physicalLocation": {
            "artifactLocation": {"uri": uri},
            "region": {"startLine": line},
        }
    }


def to_sarif(
    *,
    repo: Path,
    stack: str,
    policies: Sequence[PolicyInfo],
    resources: Sequence[Resource],
    violations: Sequence[Violation],
    levels: Mapping[str, str],
) -> dict[str, Any]:
    """The SARIF log of one run: every policy as a rule, every violation as a result."""
    rule_index = {p.name: i for i, p in enumerate(policies)}
    rules = [
        {
            "id": p.name,
            "name": p.name,
            "shortDescription": {"text": p.description.split(": ")[0].split(". ")[0]},
            "fullDescription": {"text": p.description},
            "defaultConfiguration": {"level": _SARIF_LEVEL.get(levels[p.name], "note")},
            "properties": {"enforcementLevel": levels[p.name]},
        }
        for p in policies
    ]
    results = [
        {
            "ruleId": v.policy,
            "ruleIndex": rule_index[v.policy],
            "level": _SARIF_LEVEL.get(v.level, "note"),
            "message": {"text": v.message},
            "locations": [locate(repo, stack, resources, v.urn)],
            "properties": {"urn": v.urn or "", "stack": stack, "enforcementLevel": v.level},
        }
        for v in violations
    ]
    return _log(stack, rules, results)


# The rule of a run that stopped before any policy ran: the stack's settings, the policy config
# or the pack itself refused. Code scanning shows it like a violation, so the pull request sees
# why its check failed.
REFUSAL_RULE = "policy-check-refused"


def refusal_sarif(*, stack: str, uri: str, line: int, message: str) -> dict[str, Any]:
    """The SARIF log of a refused run: one error at the file that was refused."""
    rule = {
        "id": REFUSAL_RULE,
        "name": REFUSAL_RULE,
        "shortDescription": {"text": "The stack was refused before the policies ran"},
        "fullDescription": {
            "text": "A stack setting, the policy config or the pack itself was refused: no "
            "policy ran. The message names what and how to fix it."
        },
        "defaultConfiguration": {"level": "error"},
        "properties": {"enforcementLevel": "mandatory"},
    }
    result = {
        "ruleId": REFUSAL_RULE,
        "ruleIndex": 0,
        "level": "error",
        "message": {"text": message},
        "locations": [
            {"physicalLocation": {"artifactLocation": {"uri": uri}, "region": {"startLine": line}}}
        ],
        "properties": {"stack": stack, "enforcementLevel": "mandatory"},
    }
    return _log(stack, [rule], [result])


def _log(stack: str, rules: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "stateful-streaming-policies",
                        "informationUri": "https://www.pulumi.com/docs/iac/using-pulumi/crossguard/",
                        "rules": rules,
                    }
                },
                "automationDetails": {"id": f"policy-check/{stack}/"},
                "results": results,
            }
        ],
    }


def write_sarif(path: Path, log: Mapping[str, Any]) -> None:
    """Write the log as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(log, indent=2) + "\n")
