"""The stack configuration: one typed, validated object built from `Pulumi.<stack>.yaml`.

The settings' models are in `infra.stack_settings`, every default in `infra.presets.PRESETS` (a
stack file sets only what differs), the rules that span settings in `infra.setting_rules`. This
module merges a stack's values over its preset, validates them and names the setting at fault.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
from pydantic import BaseModel, ValidationError

from contract.stack_pipeline import PROJECT
from infra.presets import PRESETS
from infra.setting_rules import DNS_LABEL, validate
from infra.stack_settings import StackConfig, StackConfigError, setting_error

_PROFILES = tuple(PRESETS)
_TOP_LEVEL = (
    "profile",
    "namespace",
    "keepDataOnDestroy",
    "kafka",
    "topics",
    "processor",
    "security",
)


def merge_settings(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge for nested sections; maps that hold free-form configs merge key by key too."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_settings(merged[key], value)
        else:
            merged[key] = value
    return merged


def build_stack_config(stack: str, raw: Mapping[str, Any]) -> StackConfig:
    """Build and validate the stack configuration from the project's keys (without the prefix).

    `raw` holds the values of `Pulumi.<stack>.yaml` under `stateful-streaming:`; structured
    values may be mappings or their JSON text, as the Pulumi CLI passes them.
    """
    raw = _nested(raw)
    unknown = sorted(set(raw) - set(_TOP_LEVEL))
    if unknown:
        raise setting_error(unknown[0], raw[unknown[0]], f"unknown key; known keys: {_TOP_LEVEL}")
    profile = raw.get("profile", stack if stack in PRESETS else None)
    if profile not in PRESETS:
        raise setting_error(
            "profile", profile, f"must be one of {', '.join(_PROFILES)} (the preset of defaults)"
        )
    merged = merge_settings(PRESETS[profile], {k: v for k, v in raw.items() if k != "profile"})
    try:
        config = StackConfig.model_validate({**merged, "stack": stack, "profile": profile})
    except ValidationError as err:
        raise _setting_error_of(err) from None
    if not DNS_LABEL.match(config.namespace):
        raise setting_error("namespace", config.namespace, "must be a DNS label (a-z, 0-9, -)")
    validate(config)
    return config


def _nested(raw: Mapping[str, Any]) -> dict[str, Any]:
    """`section.field` keys (what `pulumi new`'s prompts and `pulumi config set` without
    `--path` write) as the nested settings they name; both forms may be mixed, and a dotted key
    is applied over its section."""
    nested: dict[str, Any] = {k: v for k, v in raw.items() if "." not in k}
    for key, value in raw.items():
        if "." in key:
            section, _, setting = key.partition(".")
            if (
                section in _TOP_LEVEL
                and section in nested
                and not isinstance(nested[section], Mapping)
            ):
                raise setting_error(section, nested[section], "must be a map of settings")
            nested[section] = merge_settings(nested.get(section) or {}, {setting: value})
    return nested


# pydantic's error types, as the one error shape says them.
_ALLOWED = {
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "dict_type": "must be a map of names to values",
    "model_type": "must be a map of settings",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "missing": "missing and no default",
}


def _setting_error_of(error: ValidationError) -> StackConfigError:
    """The first problem pydantic found, named as the stack file names the setting."""
    first = error.errors(include_url=False)[0]
    loc = [str(part) for part in first["loc"]]
    kind = first["type"]
    if kind == "extra_forbidden":
        allowed = f"unknown key; known keys: {sorted(_section_keys(loc[:-1]))}"
    elif kind == "literal_error":
        allowed = f"must be one of {', '.join(map(str, _literal_values(loc)))}"
    else:
        allowed = _ALLOWED.get(kind, first["msg"])
    return setting_error(".".join(loc), first.get("input"), allowed)


def _section_model(loc: Sequence[str]) -> type[BaseModel] | None:
    model: type[BaseModel] = StackConfig
    for key in loc:
        fields = {f.alias or name: f for name, f in model.model_fields.items()}
        annotation = fields[key].annotation if key in fields else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _section_keys(loc: Sequence[str]) -> list[str]:
    model = _section_model(loc)
    if model is None:
        return []
    return [f.alias or name for name, f in model.model_fields.items()]


def _literal_values(loc: Sequence[str]) -> tuple[Any, ...]:
    model = _section_model(loc[:-1])
    fields = {f.alias or n: f for n, f in model.model_fields.items()} if model else {}
    field = fields.get(loc[-1])
    return typing.get_args(field.annotation) if field else ()


def known_keys() -> list[str]:
    """Every key a stack file may set: each section, and each section's settings as
    `section.setting` (what `pulumi config set` without `--path` writes)."""
    return [*_TOP_LEVEL, *(f"{s}.{k}" for s in _TOP_LEVEL for k in _section_keys([s]))]


def load_stack_config() -> StackConfig:
    """The running stack's configuration, read through `pulumi.Config` and validated.

    The known keys are read one by one, which works wherever the program runs (the language
    host, an Automation API inline program, the mocks). A key no setting has (a typo) is an
    error naming the known ones, not a setting silently left at its default: the language host
    passes the whole configuration in PULUMI_CONFIG (`pulumi.runtime.get_config_env`), where
    the unknown ones are found.
    """
    settings = pulumi.Config(PROJECT)
    passed = {f"{PROJECT}:{key}": settings.get(key) for key in known_keys()}
    passed |= pulumi.runtime.get_config_env()
    return stack_config_from_cli(pulumi.get_stack(), passed)


def stack_config_from_cli(stack: str, passed: Mapping[str, Any]) -> StackConfig:
    """The stack configuration from settings as the CLI passes them to a program
    (`stateful-streaming:<key>` to JSON or plain text), validated; other projects' keys and
    unset ones (None) are not this program's."""
    prefix = f"{PROJECT}:"
    raw = {
        key.removeprefix(prefix): _parsed(value)
        for key, value in passed.items()
        if key.startswith(prefix) and value is not None
    }
    return build_stack_config(stack, raw)


def _parsed(value: Any) -> Any:
    """A structured value from its JSON text, as the CLI passes it; other text as it is."""
    try:
        return json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        return value
