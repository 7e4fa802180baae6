"""Credential assignments inside a free-form value: JVM options, command lines, config text.

A setting's key says whether its whole value is a credential
(`java_properties.is_credential_key`); a credential also hides inside values whose own key says
nothing: `-Djavax.net.ssl.keyStorePassword=...` in `spark.driver.extraJavaOptions` or
`KAFKA_OPTS`, `--password hunter2` in a container's args, `"password": "..."` in a JSON file of
a ConfigMap. `find_credentials` finds those assignments and
judges each inner key with the same `is_credential_key`, so the policy pack and the stack config's
check agree on what a credential is.

Standard library and `java_properties` only: the Pulumi program's stack config check imports it
as `contract.credential_values`, the Pulumi CLI as `rules.credential_values`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from .java_properties import is_credential_key, is_reference

# A key with its separator: `-Dkey=`, `--flag=`, `--flag value`, `key=`, `key: `, `"key": `.
# Keys start at the beginning of the text or after a blank, a quote, an opening bracket, a list
# separator or an `=` (`--add-scram=password=...`), so that the middle of a word is never one.
_KEY = re.compile(
    r"""(?<![^\s"'`,;=(\[{])(?P<prefix>-D|--?)?(?P<quote>["']?)(?P<key>[A-Za-z_][\w.\-]*)(?P=quote)"""
)
# Words that make a credential-looking key name *where* the credential is, not the credential:
# `--password-file /etc/x`, `--scram-passwords-dir`, `ssl.keystore.password.location`.
_POINTER_WORDS = frozenset(
    {"file", "files", "dir", "dirs", "directory", "path", "location", "stdin", "env"}
)
# Unquoted YAML/JSON scalars that hold no credential (`"password": null`, `token: false`).
_NO_VALUE = frozenset({"true", "false", "null", "~"})
# `$(NAME)`: the kubelet expands it in env values, command and args from the container's env.
_KUBELET_EXPANSION = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
# `$NAME`, `${NAME}`, `$1`, `"$@"`: a shell expansion, resolved when the script runs.
_SHELL_EXPANSION = re.compile(r"\$(?:([A-Za-z_]\w*)|\{([A-Za-z_]\w*)\}|[0-9@*#?])")
# `$(cat /path)`, `$(< /path)`, `` `cat /path` ``: a shell reading the value from a file.
_FILE_READ = re.compile(r"\$\(\s*(?:cat\s+[^()]+|<\s*[^()]+)\)|`\s*cat\s+[^`]+`")
_VALUE_END = set(",;)]}\"'`")


@dataclass(frozen=True)
class CredentialAssignment:
    """A credential in clear inside a value: its key as written (`--password`) and line."""

    key: str
    line: int


# What a masked credential reads as, in every message, log line and report.
MASKED = "(masked)"
# A known credential shorter than this is masked only where its key shows it: masking every
# `1` or `on` in a message would hide the finding itself.
_SHORTEST_MASKED = 4


# `option="value"` (or unquoted) pairs of a JAAS login module configuration.
_JAAS_OPTION = re.compile(r'([A-Za-z_][\w.]*)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;]+)')


def is_jaas(key: str) -> bool:
    """Whether a setting is a JAAS configuration (`sasl.jaas.config`, `..._SASL_JAAS_CONFIG`)."""
    return "jaas.config" in key.lower().replace("_", ".")


def literal_credential(key: str, value: str | None) -> bool:
    """Whether a setting holds a credential in clear (`value` None: computed, so not visible).

    A JAAS configuration is a credential only for its password-like options
    (`password="..."`; PlainLoginModule's `user_<name>="..."`): `ScramLoginModule required;`
    holds none.
    """
    if not is_credential_key(key):
        return False
    if value is None:
        return True
    if is_jaas(key):
        return any(
            (is_credential_key(option) or option.startswith("user_"))
            and not is_reference(text.strip('"'))
            for option, text in _JAAS_OPTION.findall(value)
        )
    return bool(value.strip()) and not is_reference(value)


def find_credentials(
    text: str, *, secret_vars: Collection[str] = (), literal_vars: Collection[str] = ()
) -> list[CredentialAssignment]:
    """Every credential assignment in clear inside `text` (never the values themselves).

    Finds JVM `-Dkey=value` options, `--flag value`/`--flag=value` command-line pairs,
    `key=value`, `key: value` and `"key": "value"` lines and JAAS options (`password="..."`,
    PlainLoginModule's `user_<name>="..."`); a key is a credential by `is_credential_key`. Not in
    clear: an empty value, a `${dir:...}`/`${env:...}` reference, `$(NAME)` of a container env var
    from a Secret (`secret_vars`), a shell `$NAME` unless NAME holds a literal value in the pod
    spec (`literal_vars`), and a shell reading a file (`"$(cat /path)"`).
    """
    return [
        CredentialAssignment(written, text.count("\n", 0, start) + 1)
        for written, start, _value in _assignments(text, secret_vars, literal_vars)
    ]


def credentials_in_clear(text: str) -> set[str]:
    """The credential values `find_credentials` finds in `text`: what a message must not show."""
    return {value.text for _written, _start, value in _assignments(text, (), ())}


def mask_credentials(text: str, known: Collection[str] = ()) -> str:
    """`text` with every credential in clear (as `find_credentials` finds them) and every `known`
    credential replaced by `MASKED`: the one step every message, report and log line of a
    credential's finding goes through before anyone reads it."""
    # A message's own words are no value: `--password (value not shown)`, `--password $(NAME)`.
    spans = sorted(
        (v.start, v.end)
        for _w, _s, v in _assignments(text, (), ())
        if v.text and not v.text.startswith("$") and (v.quoted or not v.text.startswith("("))
    )
    masked, last = [], 0
    for start, end in spans:
        if start >= last:
            masked += [text[last:start], MASKED]
            last = end
    text = "".join([*masked, text[last:]])
    for value in sorted((k for k in known if len(k) >= _SHORTEST_MASKED), key=len, reverse=True):
        text = text.replace(value, MASKED)
    return text


def _assignments(
    text: str, secret_vars: Collection[str], literal_vars: Collection[str]
) -> Iterator[tuple[str, int, _Value]]:
    """(the key as written, where it starts, its value) of each credential in clear."""
    skipped = list(_expansion_spans(text))
    jaas = "LoginModule" in text
    for match in _KEY.finditer(text):
        if any(start <= match.start() < end for start, end in skipped):
            continue  # the name of a variable or a file inside `${...}`/`$(...)`, not a key
        key = match.group("key")
        if not (is_credential_key(key) or (jaas and key.startswith("user_"))):
            continue
        if _names_a_pointer(key) or "jaas.config" in key.lower().replace("_", "."):
            # A JAAS configuration holds a credential only in its options, found on their own.
            continue
        value = _value_after(text, match.end(), match.group("prefix"), bool(match.group("quote")))
        if value is None or _not_in_clear(value, secret_vars, literal_vars):
            continue
        yield f"{match.group('prefix') or ''}{key}", match.start(), value


def _names_a_pointer(key: str) -> bool:
    # camelCase keys split as well: `passwordFile` is `password.file`.
    words = re.split(r"[._\-]+", re.sub(r"([a-z0-9])([A-Z])", r"\1.\2", key).lower())
    return words[-1] in _POINTER_WORDS


def _value_after(text: str, index: int, prefix: str | None, quoted_key: bool) -> _Value | None:
    """The value a key at `index` is given, or None where the key is no assignment."""
    after = _skip_blanks(text, index)
    char = text[after : after + 1]
    if char == "=" and text[after + 1 : after + 2] not in ("=", ">"):
        return _read_value(text, _skip_blanks(text, after + 1))
    if char == ":" and prefix != "-D":
        # YAML wants a blank after the colon (`password: x`); a quoted JSON key does not.
        if quoted_key or text[after + 1 : after + 2] in ("", " ", "\t", "\n", "\r"):
            return _read_value(text, _skip_blanks(text, after + 1))
        return None
    if prefix in ("-", "--"):
        # `--password hunter2`: the next word (also past a shell's `\` line continuation),
        # unless it is the next option.
        start = _skip_blanks(text, index, continuation=True)
        if start == index or text[start : start + 1] == "-":
            return None
        return _read_value(text, start)
    return None


@dataclass(frozen=True)
class _Value:
    text: str
    quoted: bool
    # Where the value's text (inside its quotes) starts and ends in the scanned text.
    start: int
    end: int


def _skip_blanks(text: str, index: int, continuation: bool = False) -> int:
    while index < len(text):
        if text[index] in " \t":
            index += 1
        elif continuation and text.startswith("\\\n", index):
            index += 2
        else:
            break
    return index


def _read_value(text: str, start: int) -> _Value | None:
    """The scalar at `start`, unquoted; None for a nested structure (`{`, `[`), read by key."""
    char = text[start : start + 1]
    if char in ("{", "["):
        return None
    if char in ('"', "'"):
        end = _quoted_end(text, start)
        inner_end = max(start + 1, end - 1 if text[end - 1 : end] == char else end)
        return _Value(text[start + 1 : inner_end], True, start + 1, inner_end)
    index = start
    while index < len(text) and not text[index].isspace() and text[index] not in _VALUE_END:
        if text.startswith("$(", index) or text.startswith("${", index):
            index = _expansion_end(text, index)
        else:
            index += 1
    return _Value(text[start:index], False, start, index)


def _quoted_end(text: str, start: int) -> int:
    """The index after the closing quote of the string opening at `start` (or the text's end)."""
    quote = text[start]
    index = start + 1
    while index < len(text):
        if text[index] == "\\" and quote == '"':
            index += 2
        elif text[index] == quote:
            return index + 1
        elif quote == '"' and text.startswith("$(", index):
            index = _expansion_end(text, index)  # `"$(cat "$file")"` nests quotes
        else:
            index += 1
    return len(text)


def _expansion_end(text: str, start: int) -> int:
    """The index after the `)`/`}` closing the `$(`/`${` at `start` (or the text's end)."""
    close = ")" if text[start + 1] == "(" else "}"
    opening = text[start + 1]
    depth = 0
    index = start + 1
    while index < len(text):
        char = text[index]
        if char in ('"', "'"):
            index = _quoted_end(text, index)
            continue
        if char == opening:
            depth += 1
        elif char == close:
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return len(text)


def _expansion_spans(text: str) -> Iterator[tuple[int, int]]:
    index = text.find("$")
    while index != -1:
        if text.startswith("$(", index) or text.startswith("${", index):
            end = _expansion_end(text, index)
            yield index, end
            index = text.find("$", end)
        else:
            index = text.find("$", index + 1)


def _not_in_clear(
    value: _Value, secret_vars: Collection[str], literal_vars: Collection[str]
) -> bool:
    """Whether a credential's value leaves the credential itself out of the text."""
    text = value.text.strip()
    if not text or (not value.quoted and text.lower() in _NO_VALUE):
        return True
    if is_reference(text) or _FILE_READ.fullmatch(text):
        return True
    kubelet = _KUBELET_EXPANSION.fullmatch(text)
    if kubelet:
        # Anything but a Secret puts the credential in the pod spec (a literal env value) or in
        # a ConfigMap; an unknown name is passed on as the text `$(NAME)` itself.
        return kubelet.group(1) in secret_vars
    shell = _SHELL_EXPANSION.fullmatch(text)
    if shell:
        return (shell.group(1) or shell.group(2)) not in literal_vars
    return False
