"""Evaluate the pack over recorded resources exactly the way the Pulumi engine does.

The resources go through pulumi_policy's own analyzer servicer (the object `PolicyPack` serves
over gRPC) as the protobuf requests the engine sends: `Configure` with the per-stack policy
config, `Analyze` per resource and `AnalyzeStack` once. So every policy sees what it sees under
`pulumi preview`: `ResourceValidationArgs` / `StackValidationArgs` built by pulumi_policy, props
wrapped by `unknown_checking_proxy`, numbers as floats, enforcement levels resolved the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import jsonschema
from google.protobuf import struct_pb2
from pulumi.output import Unknown
from pulumi.runtime import proto, rpc
from pulumi_policy import EnforcementLevel, Policy
from pulumi_policy.policy import _PolicyAnalyzerServicer

from policies.rules import PACK_NAME

PACK_VERSION = "0.1.0"

_LEVELS = {
    "advisory": proto.ADVISORY,
    "mandatory": proto.MANDATORY,
    "remediate": proto.REMEDIATE,
    "disabled": proto.DISABLED,
}
_LEVEL_NAMES = {value: name for name, value in _LEVELS.items()}


class PolicyConfigError(ValueError):
    """A policy pack config file that the Pulumi CLI would refuse."""


class Resource(Protocol):
    """What the evaluation needs of a resource (`infra.render.RecordedResource` has it).

    Read-only members, so frozen dataclasses and properties satisfy it too.
    """

    @property
    def type(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def urn(self) -> str: ...
    @property
    def props(self) -> Mapping[str, Any]: ...
    @property
    def parent(self) -> str | None: ...
    @property
    def dependencies(self) -> Sequence[str]: ...
    @property
    def custom_timeouts(self) -> Mapping[str, str] | None: ...
    @property
    def protect(self) -> bool: ...


@dataclass(frozen=True)
class Violation:
    """One diagnostic the engine would print."""

    policy: str
    level: str  # "mandatory" or "advisory"
    message: str  # the policy's own message (without the description the engine prepends)
    description: str
    urn: str | None

    @property
    def mandatory(self) -> bool:
        """Whether it fails `pulumi preview` (and the offline check)."""
        return self.level == "mandatory"


def load_policy_config(path: Path, policies: Sequence[Policy]) -> dict[str, Any]:
    """Read and validate `policies/config.<stack>.json` as the CLI does before it runs a pack."""
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise PolicyConfigError(f"{path}: cannot read policy config: {error}") from error
    validate_policy_config(config, policies, source=str(path))
    return config


def validate_policy_config(
    config: Mapping[str, Any], policies: Sequence[Policy], source: str = "policy config"
) -> None:
    """Unknown policy names, unknown enforcement levels and thresholds off their schema fail."""
    if not isinstance(config, Mapping):
        raise PolicyConfigError(f"{source}: must be a JSON object keyed by policy name")
    by_name = {p.name: p for p in policies}
    for name, value in config.items():
        if name != "all" and name not in by_name:
            raise PolicyConfigError(
                f"{source}: {name!r} is not a policy of this pack; known: {sorted(by_name)}"
            )
        level = value if isinstance(value, str) else (value or {}).get("enforcementLevel")
        if level is not None and level not in _LEVELS:
            raise PolicyConfigError(
                f"{source}: {name}.enforcementLevel={level!r}; allowed: {sorted(_LEVELS)}"
            )
        if name == "all" or not isinstance(value, Mapping):
            continue
        thresholds = {k: v for k, v in value.items() if k != "enforcementLevel"}
        schema = by_name[name].config_schema
        known = schema.properties if schema else {}
        json_schema = {"type": "object", "properties": known, "additionalProperties": False}
        try:
            jsonschema.validate(thresholds, json_schema)
        except jsonschema.ValidationError as error:
            path = ".".join(map(str, error.absolute_path)) or "(thresholds)"
            raise PolicyConfigError(
                f"{source}: {name}.{path}: {error.message}; thresholds of {name}: "
                f"{sorted(known) or 'none'}"
            ) from error


def _struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(json.loads(json.dumps(value, default=_wire)))
    return struct


def _wire(value: Any) -> str:
    """A value JSON has no form for: an unknown (a preview's) as the engine sends it."""
    return rpc.UNKNOWN if isinstance(value, Unknown) else str(value)


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def duration_seconds(text: str | None) -> float:
    """A Pulumi custom timeout (a Go duration such as `40m` or `1h30m`) in seconds; 0 if unset."""
    if not text:
        return 0.0
    parts = _DURATION_PART.findall(text)
    if "".join(n + u for n, u in parts) != text:
        raise ValueError(f"custom timeout {text!r} is not a duration like 10m, 1h30m or 90s")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def _options(resource: Resource) -> proto.AnalyzerResourceOptions:
    timeouts = resource.custom_timeouts or {}
    return proto.AnalyzerResourceOptions(
        protect=resource.protect,
        parent=resource.parent or "",
        customTimeouts=proto.AnalyzerResourceOptions.CustomTimeouts(
            create=duration_seconds(timeouts.get("create")),
            update=duration_seconds(timeouts.get("update")),
            delete=duration_seconds(timeouts.get("delete")),
        ),
    )


def _configure(
    servicer: _PolicyAnalyzerServicer, policies: Sequence[Policy], config: Mapping[str, Any]
) -> None:
    """Send the engine's `Configure`: every policy with its resolved level and thresholds."""
    default = config.get("all")
    request = proto.ConfigureAnalyzerRequest()
    for policy in policies:
        entry = config.get(policy.name, {})
        if isinstance(entry, str):
            entry = {"enforcementLevel": entry}
        own = policy.enforcement_level or EnforcementLevel.ADVISORY
        level = entry.get("enforcementLevel") or default or own.value
        thresholds = {k: v for k, v in entry.items() if k != "enforcementLevel"}
        request.policyConfig[policy.name].CopyFrom(
            proto.PolicyConfig(enforcementLevel=_LEVELS[level], properties=_struct(thresholds))
        )
    servicer.Configure(request, None)


def evaluate(
    resources: Iterable[Resource], policies: Sequence[Policy], config: Mapping[str, Any]
) -> list[Violation]:
    """Run every policy over the resources; return the violations in engine order."""
    resources = list(resources)
    validate_policy_config(config, policies)
    servicer = _PolicyAnalyzerServicer(
        PACK_NAME, PACK_VERSION, list(policies), EnforcementLevel.ADVISORY
    )
    _configure(servicer, policies, config)
    descriptions = {p.name: p.description for p in policies}
    diagnostics: list[Any] = []
    for resource in resources:
        request = proto.AnalyzeRequest(
            type=resource.type,
            properties=_struct(resource.props),
            urn=resource.urn,
            name=resource.name,
            options=_options(resource),
        )
        diagnostics.extend(
            (diagnostic, resource.urn) for diagnostic in servicer.Analyze(request, None).diagnostics
        )
    stack_request = proto.AnalyzeStackRequest(
        resources=[
            proto.AnalyzerResource(
                type=r.type,
                properties=_struct(r.props),
                urn=r.urn,
                name=r.name,
                options=_options(r),
                parent=r.parent or "",
                dependencies=list(r.dependencies),
            )
            for r in resources
        ]
    )
    diagnostics.extend(
        (diagnostic, diagnostic.urn or None)
        for diagnostic in servicer.AnalyzeStack(stack_request, None).diagnostics
    )
    violations = []
    for diagnostic, urn in diagnostics:
        description = descriptions.get(diagnostic.policyName, diagnostic.description)
        message = diagnostic.message
        if message.startswith(description):
            message = message[len(description) :].lstrip("\n") or description
        violations.append(
            Violation(
                policy=diagnostic.policyName,
                level=_LEVEL_NAMES[diagnostic.enforcementLevel],
                message=message,
                description=description,
                urn=urn,
            )
        )
    return violations
