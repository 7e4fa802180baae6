"""The processor's properties file (Java `.properties` syntax), parsed without a JVM."""

from __future__ import annotations

import re

_ENV_REFERENCE = re.compile(r"^\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}$")
_KEY_VALUE = re.compile(r"^(?P<key>[^=:\s]+)\s*(?:[=:]\s*|\s+)?(?P<value>.*)$")


def parse_properties(text: str) -> dict[str, str]:
    """`key=value` / `key: value` lines; `#` and `!` comments; a trailing backslash continues."""
    result: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\"):
            logical += line[:-1]
            continue
        match = _KEY_VALUE.match(logical + line)
        logical = ""
        if match:
            result[match["key"]] = match["value"].strip()
    return result


def env_reference(value: str | None) -> str | None:
    """`${env:POD_NAME}` -> `POD_NAME` (Kafka's EnvVarConfigProvider syntax), else None."""
    match = _ENV_REFERENCE.match(value or "")
    return match.group(1) if match else None
