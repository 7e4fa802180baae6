"""The java.util.Properties text format, and `${env:NAME}` references in its values.

The one reader and writer of the format in the repository: the processor reads its settings
with it, the topic reconciler its `--command-config`, the Pulumi program and the local run
write the processor's file with it, and the policy pack reads the file back from the ConfigMap.
So what the pack checks is exactly what the processor runs.

Part of the contract (`contract/__init__.py`): standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

_ENV_REFERENCE = re.compile(r"\$\{([^}:]*):([^}]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WHOLE_ENV_REFERENCE = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")

_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_LETTER_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}
# Characters that would end a key (separators, whitespace) or start a comment line.
_KEY_SPECIALS = {" ": "\\ ", "=": "\\=", ":": "\\:", "#": "\\#", "!": "\\!"}


@dataclass(frozen=True)
class PropertyLine:
    """One key/value pair of a properties file, with the line its logical line starts on."""

    key: str
    value: str
    line: int


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
    # Java strings are UTF-16: a character beyond U+FFFF is written as two \\u escapes.
    joined = "".join(out).encode("utf-16-le", "surrogatepass")
    return joined.decode("utf-16-le", "surrogatepass")


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
    continuation lines, backslash and \\uXXXX escapes), every entry in file order."""
    entries = []
    for line_no, line in _logical_lines(text):
        raw_key, raw_value = _split_key_value(line)
        entries.append(
            PropertyLine(_unescape(raw_key, line_no), _unescape(raw_value, line_no), line_no)
        )
    return entries


def load_properties(text: str) -> dict[str, str]:
    """The file as a map; a later duplicate key wins, as in `java.util.Properties.load`."""
    return {entry.key: entry.value for entry in parse_properties(text)}


def _escape(text: str, specials: Mapping[str, str]) -> str:
    out = []
    for char in text:
        if char in _LETTER_ESCAPES:
            out.append(_LETTER_ESCAPES[char])
        elif char in specials:
            out.append(specials[char])
        elif " " <= char <= "~":
            out.append(char)
        else:
            # Control and non-ASCII characters as \uXXXX (UTF-16 units, as Properties.store
            # writes them): the file then reads the same as ISO-8859-1, which is how Kafka's
            # own tools load a properties file, and as UTF-8.
            units = char.encode("utf-16-be")
            out.extend(
                f"\\u{int.from_bytes(units[i : i + 2], 'big'):04X}" for i in range(0, len(units), 2)
            )
    return "".join(out)


def format_properties(properties: Mapping[str, str], comment: str | None = None) -> str:
    """Properties text, one `key=value` a line in the given order, escaped so that
    `load_properties` (and `java.util.Properties.load`) read back exactly `properties`.

    `comment` becomes `#` lines at the top.
    """
    lines = [f"# {line}".rstrip() for line in (comment or "").splitlines()]
    for key, value in properties.items():
        escaped_value = _escape(value, {})
        if escaped_value[:1] == " ":
            escaped_value = "\\" + escaped_value  # leading blanks would be read as separator
        lines.append(f"{_escape(key, _KEY_SPECIALS)}={escaped_value}")
    return "\n".join(lines) + "\n"


def resolve_env(value: str, env: Mapping[str, str]) -> str:
    """Replace every config provider reference in `value`; `LookupError` names what is wrong.

    Two of Kafka's providers, with their syntax: `${env:NAME}` (EnvVarConfigProvider, e.g. the
    pod name) and `${dir:DIRECTORY:FILE}` (DirectoryConfigProvider, KIP-632: the content of a
    file, e.g. a key of a Secret mounted as a volume).
    """

    def replace(match: re.Match[str]) -> str:
        provider, name = match.group(1), match.group(2)
        if provider == "dir":
            return _read_directory_entry(match.group(0), name)
        if provider != "env":
            raise LookupError(
                f"config provider {provider!r} in {match.group(0)!r} is not supported; "
                "only ${env:NAME} (environment variables) and ${dir:DIRECTORY:FILE} (files, "
                "e.g. a mounted Secret) are"
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


def _read_directory_entry(reference: str, location: str) -> str:
    directory, _, name = location.rpartition(":")
    if not directory or not name or "/" in name:
        raise LookupError(f"{reference!r}: must be ${{dir:DIRECTORY:FILE}}, FILE a plain name")
    path = f"{directory.rstrip('/')}/{name}"
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except OSError as exc:
        raise LookupError(
            f"{reference!r}: cannot read {path} ({exc.strerror or exc}); mount the Secret "
            "that holds it at that directory"
        ) from exc


def is_reference(value: str) -> bool:
    """Whether a whole value is one `${env:NAME}` or `${dir:DIRECTORY:FILE}` reference."""
    match = _ENV_REFERENCE.fullmatch(value.strip())
    return match is not None and match.group(1) in ("env", "dir")


def env_reference(value: str | None) -> str | None:
    """`${env:POD_NAME}` -> `POD_NAME` when the whole value is one reference, else None."""
    match = _WHOLE_ENV_REFERENCE.fullmatch(value or "")
    return match.group(1) if match else None


# Words in a client or broker setting's name whose value is a credential: Kafka's and
# librdkafka's names (`sasl.password`, `ssl.key.password`, `ssl.keystore.key`,
# `sasl.jaas.config`, `sasl.oauthbearer.client.secret`, ...), with or without a
# `consumer.`/`producer.` prefix.
_CREDENTIAL_WORDS = (
    "password",
    "secret",
    "token",
    "jaas.config",
    "keystore.key",
    "key.pem",
    "private.key",
)


def is_credential_key(key: str) -> bool:
    """Whether a setting's value is a credential, which only a Secret may hold.

    Also for an environment variable's name (`KAFKA_SSL_KEY_PASSWORD`, `TLS_PRIVATE_KEY`):
    `_` reads as `.`, as the official Kafka image maps its variables to settings.
    """
    lowered = key.lower().replace("_", ".")
    return any(word in lowered for word in _CREDENTIAL_WORDS)
