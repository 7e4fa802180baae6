"""The java.util.Properties text format, and `${env:NAME}` references in its values.

Both the processor's settings and the topic reconciler's `--command-config` are written in it,
the way Kafka's own tools and Kafka Streams read their configuration.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

_ENV_REFERENCE = re.compile(r"\$\{([^}:]*):([^}]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class PropertyLine:
    """One key/value pair of a properties file, with the line its logical line starts on."""

    key: str
    value: str
    line: int


_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Join continuation lines (odd number of trailing backslashes) as java.util.Properties does."""
    natural = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    index = 0
    while index < len(natural):
        start = index
        line = natural[index].lstrip(_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue  # a comment is one natural line, even when it ends with a backslash
        while _ends_with_continuation(line):
            line = line[:-1]
            if index >= len(natural):
                break  # a backslash at the end of the file is dropped
            line += natural[index].lstrip(_WHITESPACE)
            index += 1
        yield start + 1, line


def _ends_with_continuation(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def _unescape(text: str, line_no: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        i += 1
        if char != "\\" or i >= len(text):
            out.append(char)
            continue
        escaped = text[i]
        i += 1
        if escaped == "u":
            digits = text[i : i + 4]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(
                    f"line {line_no}: malformed \\uxxxx escape {text[i - 2 : i + 4]!r}"
                )
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(escaped, escaped))
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    """Split at the first unescaped `=`, `:` or whitespace; one separator and blanks are skipped."""
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\":
            i += 2
            continue
        if char in "=:" or char in _WHITESPACE:
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def parse_properties(text: str) -> list[PropertyLine]:
    """Parse the java.util.Properties text format (comments, `=`/`:`/blank separators,
    continuation lines, backslash and \\uXXXX escapes); a later duplicate key wins, as in Java."""
    entries = []
    for line_no, line in _logical_lines(text):
        raw_key, raw_value = _split_key_value(line)
        entries.append(
            PropertyLine(_unescape(raw_key, line_no), _unescape(raw_value, line_no), line_no)
        )
    return entries


def resolve_env(value: str, env: Mapping[str, str]) -> str:
    """Replace every `${env:NAME}` in `value`; `LookupError` names what is missing or wrong."""

    def replace(match: re.Match[str]) -> str:
        provider, name = match.group(1), match.group(2)
        if provider != "env":
            raise LookupError(
                f"config provider {provider!r} in {match.group(0)!r} is not supported; "
                "only ${env:NAME} (environment variables) is"
            )
        if not _ENV_NAME.fullmatch(name):
            raise LookupError(f"{match.group(0)!r} does not name an environment variable")
        if name not in env:
            raise LookupError(
                f"environment variable {name} is not set; set it in the pod spec "
                "(e.g. POD_NAME from the downward API metadata.name)"
            )
        return env[name]

    return _ENV_REFERENCE.sub(replace, value)
