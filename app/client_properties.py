"""Kafka client properties files (`--command-config`), read the same way by every tool.

The reconciler and the load generator take their security settings (`security.protocol`,
`sasl.*`, `ssl.*`, librdkafka's names) from one such file, as Kafka's own tools do;
`${dir:DIRECTORY:FILE}` and `${env:NAME}` are resolved, so the file holds no secret (the
password is a file of a mounted Secret).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from app.java_properties import parse_properties, resolve_env

FLAG = "--command-config"
HELP = (
    "Kafka client properties (security.protocol, sasl.*, ssl.*; ${dir:DIRECTORY:FILE} and "
    "${env:NAME} are resolved), as for Kafka's own tools: secrets never go on the command line"
)


class ClientPropertiesError(ValueError):
    """The client properties file is unreadable, malformed or names an unset variable."""


def add_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--command-config FILE` to a tool's command line."""
    parser.add_argument(FLAG, type=Path, metavar="FILE", help=HELP)


def load_client_config(path: Path | None, env: Mapping[str, str]) -> dict[str, str]:
    """Client properties from `path` (none: no settings), references resolved."""
    if path is None:
        return {}
    try:
        entries = parse_properties(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ClientPropertiesError(f"cannot read {FLAG} {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ClientPropertiesError(f"invalid {FLAG} {path}: {exc}") from exc
    config = {}
    for entry in entries:
        try:
            config[entry.key] = resolve_env(entry.value, env)
        except LookupError as exc:
            raise ClientPropertiesError(f"{FLAG} {path}:{entry.line} {entry.key}: {exc}") from exc
    return config
