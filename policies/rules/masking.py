"""The credentials a message must not show, gathered from the resources the pack reads.

Every rule's message goes through `contract.credential_values.mask_credentials` with these
before it leaves the pack (`config.resource_rule`, `config.stack_rule`), and again in the
offline runner before its table and SARIF (`policies.evaluate`): a message that quotes a word of
a command line (`word 11 is 'hunter2'`) shows the value without the key that would give it away,
so the values themselves are masked wherever they appear. Messages reach the CLI's output, CI
logs and SARIF uploads.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from pulumi_policy.proxy import UnknownValueError

from contract.credential_values import (
    credentials_in_clear,
    is_jaas,
    literal_credential,
    mask_credentials,
)

from .manifests import SECRET

# The outputs that are a credential, of the resources that generate one.
_GENERATED = {
    "random:index/randomPassword:RandomPassword": ("result", "bcryptHash"),
    "tls:index/privateKey:PrivateKey": (
        "privateKeyPem",
        "privateKeyPemPkcs8",
        "privateKeyOpenssh",
    ),
}
# A Secret's keys that hold what anyone may read: a name, a certificate.
_PUBLIC_SECRET_KEYS = frozenset({"username", "user", "ca.crt", "tls.crt"})
_PRIVATE_KEY = "PRIVATE KEY-----"
# Pulumi's wire form of a secret (`pulumi.runtime.rpc`'s `_special_sig_key`, `_special_secret_sig`).
_SIGNATURE_KEY = "4dabf18193072939515e22adb298388d"
_SECRET_SIGNATURE = "1b47061264138c4ac30d75fd1eb44270"


def credentials_of(resources: Iterable[tuple[str, Any]]) -> set[str]:
    """Every credential in clear in these (type, props): a Secret's values, a generated
    password or key, a credential-named setting's literal value (`password: x`, an env var
    `SASL_PASSWORD=x`), and an assignment inside any text or command line (`--password x`)."""
    found: set[str] = set()
    for resource_type, props in resources:
        if resource_type == SECRET:
            found |= _secret_values(props)
        for output in _GENERATED.get(resource_type, ()):
            value = _field(props, output)
            if isinstance(value, str) and value:
                found.add(value)
        _collect(props, found)
    return found


def masked(message: str, credentials: Iterable[str]) -> str:
    """`message` as it may be shown: every credential in it replaced by `(masked)`."""
    return mask_credentials(message, set(credentials))


def _secret_values(props: Any) -> set[str]:
    values = set()
    for field in ("data", "stringData"):
        entries = _field(props, field)
        if not isinstance(entries, Mapping):
            continue
        for key, value in _known_items(entries):
            if not isinstance(value, str) or key in _PUBLIC_SECRET_KEYS:
                continue
            values.add(value)
            if field == "data":
                try:
                    values.add(base64.b64decode(value, validate=True).decode("utf-8"))
                except (binascii.Error, ValueError):
                    continue
    return values


def _field(props: Any, field: str) -> Any:
    try:
        return _unwrapped(props.get(field)) if isinstance(props, Mapping) else None
    except UnknownValueError:
        return None


def _unwrapped(value: Any) -> Any:
    """A secret output's value: the engine sends it wrapped, `{<secret signature>: ..., value}`."""
    if isinstance(value, Mapping) and value.get(_SIGNATURE_KEY) == _SECRET_SIGNATURE:
        return value.get("value")
    return value


def _collect(value: Any, found: set[str], key: str = "") -> None:
    value = _unwrapped(value)
    if isinstance(value, str):
        if _PRIVATE_KEY in value or _literal(key, value):
            found.add(value)
        else:
            found |= credentials_in_clear(value)
    elif isinstance(value, Mapping):
        entries = dict(_known_items(value))
        # An env var names its credential in `name`: {name: SASL_PASSWORD, value: x}.
        named = entries.get("name") if isinstance(entries.get("name"), str) else ""
        for field, inner in entries.items():
            _collect(inner, found, named if field == "value" and named else str(field))
    elif isinstance(value, Sequence):
        # The engine's proxy is a Sequence, not a list. `["--password", "x"]`: the pair shows
        # only across the words.
        inner_values = [inner for _, inner in _known_items(value)]
        found |= credentials_in_clear(" ".join(w for w in inner_values if isinstance(w, str)))
        for inner in inner_values:
            _collect(inner, found, key)


def _known_items(value: Mapping[Any, Any] | Sequence[Any]) -> Iterator[tuple[Any, Any]]:
    """A mapping's or a sequence's entries, leaving out what a preview cannot know yet."""
    keys = list(value) if isinstance(value, Mapping) else range(len(value))
    for key in keys:
        try:
            yield key, value[key]
        except UnknownValueError:
            continue  # computed during preview: nothing to show yet


def _literal(key: str, value: str) -> bool:
    """A credential-named setting's whole value in clear (a JAAS configuration holds its
    credentials in options, which `credentials_in_clear` finds)."""
    if is_jaas(key) or key.endswith(("Name", "Ref")):
        return False  # `secretName: kafka-tls` names where the credential is
    return literal_credential(key, value)
