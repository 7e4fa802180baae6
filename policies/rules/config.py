"""Thresholds: the one place that holds each rule's defaults, its config schema and its reader.

`pulumi preview --policy-pack-config policies/config.<stack>.json` (and the offline runner) pass
per-stack values; a threshold missing from the file takes the default declared here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from .masking import credentials_of, masked

MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY


@dataclass(frozen=True)
class Threshold:
    """One configurable value of a rule, named as it appears in the policy pack config."""

    name: str
    type: str  # a JSON Schema type: "integer", "number", "boolean", "array"
    default: Any
    description: str
    minimum: float | None = None
    # The JSON Schema type of an array's items (e.g. "string" for a list of principals).
    items: str | None = None

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of this value, as the engine validates the policy config with it."""
        schema: dict[str, Any] = {
            "type": self.type,
            "default": self.default,
            "description": self.description,
        }
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        if self.items is not None:
            schema["items"] = {"type": self.items}
        return schema


def config_schema(thresholds: Sequence[Threshold]) -> PolicyConfigSchema | None:
    """A `PolicyConfigSchema` for a rule's thresholds (None for a rule without any)."""
    if not thresholds:
        return None
    return PolicyConfigSchema(properties={t.name: t.schema() for t in thresholds})


def read_thresholds(
    config: Mapping[str, Any] | None, thresholds: Sequence[Threshold]
) -> dict[str, Any]:
    """Configured values over defaults. Numbers arrive as floats from the engine: keep them so."""
    given = config or {}
    return {t.name: given.get(t.name, t.default) for t in thresholds}


# A check yields violation messages; a stack check yields (message, URN of the resource).
ResourceCheck = Callable[[ResourceValidationArgs, Mapping[str, Any]], Iterable[str]]
StackCheck = Callable[[StackValidationArgs, Mapping[str, Any]], Iterable[tuple[str, str | None]]]


def resource_rule(
    *,
    name: str,
    description: str,
    level: EnforcementLevel,
    check: ResourceCheck,
    thresholds: Sequence[Threshold] = (),
) -> ResourceValidationPolicy:
    """A `ResourceValidationPolicy` whose check reads its thresholds from the pack config; its
    messages show no credential of the resource (`masking`)."""

    def validate(args: ResourceValidationArgs, report_violation: Callable[..., None]) -> None:
        settings = read_thresholds(args.get_config(), thresholds)
        messages = list(check(args, settings))
        if messages:
            credentials = credentials_of([(args.resource_type, args.props)])
            for message in messages:
                report_violation(masked(message, credentials))

    return ResourceValidationPolicy(
        name=name,
        description=description,
        enforcement_level=level,
        config_schema=config_schema(thresholds),
        validate=validate,
    )


def stack_rule(
    *,
    name: str,
    description: str,
    level: EnforcementLevel,
    check: StackCheck,
    thresholds: Sequence[Threshold] = (),
) -> StackValidationPolicy:
    """A `StackValidationPolicy` whose check reads its thresholds from the pack config; its
    messages show no credential of any resource of the stack (`masking`)."""

    def validate(args: StackValidationArgs, report_violation: Callable[..., None]) -> None:
        settings = read_thresholds(args.get_config(), thresholds)
        findings = list(check(args, settings))
        if findings:
            credentials = credentials_of((r.resource_type, r.props) for r in args.resources)
            for message, urn in findings:
                report_violation(masked(message, credentials), urn)

    return StackValidationPolicy(
        name=name,
        description=description,
        enforcement_level=level,
        config_schema=config_schema(thresholds),
        validate=validate,
    )
