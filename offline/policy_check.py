"""Offline policy check for pull requests: no cluster, no credentials, no Pulumi CLI.

    python -m offline.policy_check --stack dev [--config policies/config.dev.json] [--sarif FILE]

Records the stack with the Pulumi program under Pulumi's mocks (`offline.render.record_stack`,
configuration from `Pulumi.<stack>.yaml`), launches the pack as `pulumi preview --policy-pack
policies/analyzer --policy-pack-config policies/config.<stack>.json` does and sends it the same
Analyzer requests over gRPC (`policies.evaluate.AnalyzerProcess`), prints
the violations grouped by resource, and exits 1 if any is mandatory (0 otherwise, 2 on bad
input). A rule that a preview of a new stack would skip (it reads a value only `pulumi up`
knows) is a mandatory violation too: the pull request's preview would not have run it.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from contract.credential_values import mask_credentials
from contract.stack_pipeline import PROJECT
from infra.stack_settings import StackConfigError
from offline.render import record_stack
from policies.evaluate import (
    AnalyzerProcess,
    PackLaunchError,
    PolicyConfigError,
    PolicyInfo,
    Resource,
    Violation,
    load_policy_config,
    resolved_levels,
)
from policies.sarif import refusal_sarif, to_sarif, write_sarif

REPO = Path(__file__).resolve().parents[1]


def resource_label(resource: Resource | None) -> str:
    """`StatefulSet streaming/kafka` for Kubernetes objects, the type and name otherwise."""
    if resource is None:
        return "stack"
    metadata = resource.props.get("metadata") if isinstance(resource.props, Mapping) else None
    if isinstance(metadata, Mapping) and "name" in metadata:
        kind = resource.type.rsplit(":", 1)[-1]
        return f"{kind} {metadata.get('namespace', 'default')}/{metadata['name']}"
    return f"{resource.type} {resource.name}"


def print_report(
    out: TextIO,
    *,
    stack: str,
    config_path: Path,
    policies: Sequence[PolicyInfo],
    resources: Sequence[Resource],
    violations: Sequence[Violation],
) -> None:
    """The table: one block per resource, one line per violation, then the totals."""
    by_urn = {r.urn: r for r in resources}
    mandatory = sum(v.mandatory for v in violations)
    shown = config_path.relative_to(REPO) if config_path.is_relative_to(REPO) else config_path
    print(
        f"policy check: stack {stack}, {len(policies)} policies over {len(resources)} "
        f"resources, thresholds from {shown}",
        file=out,
    )
    groups: dict[str, list[Violation]] = {}
    for violation in violations:
        groups.setdefault(resource_label(by_urn.get(violation.urn or "")), []).append(violation)
    width = max((len(v.policy) for v in violations), default=0)
    for label in sorted(groups, key=lambda g: (g == "stack", g)):
        print(f"\n{label}", file=out)
        for v in sorted(groups[label], key=lambda v: (not v.mandatory, v.policy)):
            print(f"  {v.level.upper():<9}  {v.policy:<{width}}  {v.message}", file=out)
    noun = "violation" if len(violations) == 1 else "violations"
    advisory = len(violations) - mandatory
    print(f"\n{len(violations)} {noun}: {mandatory} mandatory, {advisory} advisory", file=out)


# pulumi_policy's notice for a rule that read a value a preview cannot know: the engine skips the
# rule, as an advisory line, and so a pull request's `pulumi preview` never ran it.
_SKIPPED = "can't run policy"


def preview_skips(stack: str, pack: AnalyzerProcess, config: Mapping[str, Any]) -> list[Violation]:
    """The rules a preview of a new stack would skip, each as a mandatory violation: a rule must
    judge what is known (the random and TLS providers' outputs are not, before the first up)."""
    found = pack.evaluate(record_stack(stack, preview=True).resources, config)
    return [
        Violation(
            policy=v.policy,
            level="mandatory",
            message=f"skipped in `pulumi preview` of a new stack: {v.message}; the rule must "
            "judge what is known and leave unknown values to `pulumi up`",
            description=v.description,
            urn=v.urn,
        )
        for v in found
        if _SKIPPED in v.message
    ]


_SETTING = re.compile(rf"{re.escape(PROJECT)}:([A-Za-z0-9]+)")


def refused_source(stack: str, config_path: Path, error: Exception) -> tuple[str, int]:
    """Where a refusal points: the stack file's line of the setting the message names, the
    policy config, or the pack."""
    if isinstance(error, PolicyConfigError):
        shown = config_path.relative_to(REPO) if config_path.is_relative_to(REPO) else config_path
        return shown.as_posix(), 1
    if isinstance(error, PackLaunchError):
        return "policies/analyzer", 1
    stack_file = f"Pulumi.{stack}.yaml"
    named = _SETTING.search(str(error))
    path = REPO / stack_file
    if named and path.exists():
        key = f"{PROJECT}:{named.group(1)}:"
        for number, text in enumerate(path.read_text().splitlines(), start=1):
            if text.strip().startswith(key):
                return stack_file, number
    return stack_file, 1


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: 0 clean or advisory only, 1 mandatory violations, 2 bad input."""
    parser = argparse.ArgumentParser(
        prog="python -m offline.policy_check", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--stack", required=True, help="stack name: Pulumi.<stack>.yaml")
    parser.add_argument("--config", type=Path, help="policy config (policies/config.<stack>.json)")
    parser.add_argument("--sarif", type=Path, help="also write the results as SARIF 2.1.0")
    args = parser.parse_args(argv)

    config_path = args.config or REPO / "policies" / f"config.{args.stack}.json"
    try:
        recorded = record_stack(args.stack)
        with AnalyzerProcess() as pack:
            config = load_policy_config(config_path, pack.policies)
            violations = pack.evaluate(recorded.resources, config)
            violations += preview_skips(args.stack, pack, config)
    except (PolicyConfigError, StackConfigError, PackLaunchError) as error:
        # A refused setting may be the credential itself: shown as the pack shows its findings.
        message = mask_credentials(str(error))
        print(f"error: {message}", file=sys.stderr)
        if args.sarif:
            uri, line = refused_source(args.stack, config_path, error)
            write_sarif(
                args.sarif,
                refusal_sarif(stack=args.stack, uri=uri, line=line, message=message),
            )
            print(f"SARIF written to {args.sarif}")
        return 2
    print_report(
        sys.stdout,
        stack=args.stack,
        config_path=config_path,
        policies=pack.policies,
        resources=recorded.resources,
        violations=violations,
    )
    if args.sarif:
        log = to_sarif(
            repo=REPO,
            stack=args.stack,
            policies=pack.policies,
            resources=recorded.resources,
            violations=violations,
            levels=resolved_levels(pack.policies, config),
        )
        write_sarif(args.sarif, log)
        print(f"SARIF written to {args.sarif}")
    return 1 if any(v.mandatory for v in violations) else 0


if __name__ == "__main__":
    sys.exit(main())
