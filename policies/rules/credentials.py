"""Credentials live in Secrets: never in a ConfigMap, never in a container's env, command or args.

Which settings hold a credential and which values only refer to one are
`java_properties.is_credential_key` and `is_reference`, the notions the stack config's check
shares; properties files are read with the one codec. A credential is found by the key that
holds it and also inside a value whose own key says nothing (`-D...Password=` in JVM options,
`--password x` in args, `"password": "..."` in a JSON file): `credential_values.find_credentials`,
which the stack config's check uses too. Messages never show the credential itself: they land
in CI logs and SARIF uploads.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pulumi_policy import ResourceValidationArgs
from pulumi_policy.proxy import UnknownValueError

from contract.credential_values import (
    CredentialAssignment,
    find_credentials,
    is_jaas,
    literal_credential,
)
from contract.java_properties import parse_properties

from .config import MANDATORY, resource_rule
from .manifests import (
    CONFIG_MAP,
    all_containers,
    get,
    items,
    label,
    pod_annotations,
    pod_spec,
    pod_spec_path,
)
from .messages import violation

PEM_PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")
_REFERENCE = "a ${dir:DIRECTORY:FILE} or ${env:NAME} reference"
_CONFIG_MAP_FIX = (
    "keep the credential in a Secret and refer to it: {key}=${{dir:DIRECTORY:FILE}} with the "
    "Secret mounted at DIRECTORY (as the processor's sasl.password=${{dir:/etc/kafka-user:"
    "password}}), or ${{env:NAME}} with the pod's NAME from env valueFrom.secretKeyRef; a "
    "ConfigMap is readable by whoever may read the namespace's configuration and is stored in "
    "clear in the Pulumi state"
)
_IN_VALUE_FIX = (
    "keep the credential in a Secret and refer to it inside the value: {key}=${{dir:DIRECTORY:"
    "FILE}} with the Secret mounted at DIRECTORY, or ${{env:NAME}} with the pod's NAME from env "
    "valueFrom.secretKeyRef (the processor and the topic reconciler resolve a reference anywhere "
    "in a value); a ConfigMap is readable by whoever may read the namespace's configuration and "
    "is stored in clear in the Pulumi state"
)
_TEXT_FIX = (
    "keep the credential in a Secret: mount it and have the program read its file, or give the "
    "program an env var from valueFrom.secretKeyRef, or write a ${{dir:DIRECTORY:FILE}} or "
    "${{env:NAME}} reference where the file's reader resolves one; {key} in a ConfigMap is "
    "readable by whoever may read the namespace's configuration and stored in clear in the "
    "Pulumi state"
)
_POD_SPEC_WHY = (
    "stored in the pod spec, shown by kubectl get -o yaml and kept in clear in the Pulumi state"
)


def _found(key: str) -> str:
    if is_jaas(key):
        return "a JAAS configuration with a password option in clear (value not shown)"
    return "a literal credential (value not shown)"


def _config_map_findings(args: ResourceValidationArgs) -> Iterator[str]:
    subject = label(args.resource_type, args.props)
    data = get(args.props, "data", default={})
    entries = [(key, text) for key, text in data.items() if isinstance(text, str)]
    for key, encoded in get(args.props, "binaryData", default={}).items():
        try:
            entries.append((key, base64.b64decode(str(encoded)).decode("utf-8", "replace")))
        except (binascii.Error, ValueError):
            continue  # not base64: the API server rejects it before anyone can read it
    for key, text in entries:
        private_key = PEM_PRIVATE_KEY.search(text) is not None
        if private_key:
            yield violation(
                subject,
                f"data[{key}]",
                "a PEM private key block (-----BEGIN ... PRIVATE KEY-----)",
                "no private key in a ConfigMap",
                "put the key in a Secret (type kubernetes.io/tls, e.g. kafka-tls with tls.key) "
                "and mount that: whoever can read the ConfigMap can impersonate its owner",
            )
        if key.endswith(".properties"):
            yield from _properties_findings(subject, key, text)
        elif literal_credential(key, text):
            if not private_key:  # one finding per entry
                yield violation(
                    subject,
                    f"data[{key}]",
                    _found(key),
                    _REFERENCE,
                    _CONFIG_MAP_FIX.format(key=key),
                )
        else:
            # JSON, YAML, .conf, .env, JAAS files: the credential's key is inside the text.
            for found in find_credentials(text):
                yield violation(
                    subject,
                    f"data[{key}] {found.key} (line {found.line})",
                    "a literal credential (value not shown)",
                    _REFERENCE,
                    _TEXT_FIX.format(key=found.key),
                )


def _properties_findings(subject: str, file: str, text: str) -> Iterator[str]:
    try:
        entries = parse_properties(text)
    except ValueError as error:
        yield violation(
            subject,
            f"data[{file}]",
            f"unreadable ({error})",
            "a properties file this pack can read, to tell whether it holds a credential",
            "write it with contract.java_properties.format_properties",
        )
        return
    for entry in entries:
        if literal_credential(entry.key, entry.value):
            yield violation(
                subject,
                f"data[{file}] {entry.key} (line {entry.line})",
                _found(entry.key),
                _REFERENCE,
                _CONFIG_MAP_FIX.format(key=entry.key),
            )
            continue
        # A setting that is no credential itself may carry one: JVM options, a command line.
        for found in find_credentials(entry.value):
            yield violation(
                subject,
                f"data[{file}] {entry.key} (line {entry.line})",
                _found_inside(found),
                f"{_REFERENCE} in its place",
                _IN_VALUE_FIX.format(key=found.key),
            )


def _literal_env(var: Mapping[str, Any]) -> tuple[bool, str | None]:
    """Whether an env var has a literal `value`, and the value (None while still computed)."""
    try:  # the proxy's `in` reads the value too, and raises while it is unknown
        if "value" not in var:
            return False, None
        value = var["value"]
    except UnknownValueError:
        return True, None  # computed by the program: still a literal in the pod spec
    return value is not None, None if value is None else str(value)


def _found_inside(found: CredentialAssignment) -> str:
    return f"a value with a literal credential in {found.key} (value not shown)"


def _env_sources(container: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """The container's env vars taken from a Secret, and those with a literal value."""
    secret_vars, literal_vars = set(), set()
    for var in items(container, "env"):
        if not isinstance(var, Mapping):
            continue
        name = str(get(var, "name", default=""))
        if get(var, "valueFrom", "secretKeyRef") is not None:
            secret_vars.add(name)
        elif _literal_env(var)[0]:
            literal_vars.add(name)
    return secret_vars, literal_vars


def _known_strings(container: Mapping[str, Any], field: str) -> list[str]:
    """The parts of `command` or `args` the program has already computed."""
    # The engine's proxy raises on reading a value still computed by the program: the rest of
    # the command line is checked now, that part once it is known.
    try:
        parts = get(container, field)
    except UnknownValueError:
        return []
    if not isinstance(parts, Sequence) or isinstance(parts, str):
        return []
    known = []
    for index in range(len(parts)):
        try:
            part = parts[index]
        except UnknownValueError:
            continue
        if part is not None:
            known.append(str(part))
    return known


def _env_findings(args: ResourceValidationArgs) -> Iterator[str]:
    spec = pod_spec(args.resource_type, args.props)
    subject = label(args.resource_type, args.props)
    for container in all_containers(spec):
        container_name = get(container, "name", default="?")
        secret_vars, literal_vars = _env_sources(container)
        for var in items(container, "env"):
            name = str(get(var, "name", default=""))
            literal, value = _literal_env(var) if isinstance(var, Mapping) else (False, None)
            if literal and literal_credential(name, value):
                yield violation(
                    subject,
                    f"container {container_name} env {name}",
                    _found(name) if value is not None else "a value computed by the program",
                    "valueFrom.secretKeyRef",
                    f"take {name} from a Secret (env valueFrom.secretKeyRef, as SASL_PASSWORD "
                    "comes from kafka-user-<name>'s key password): a literal value is "
                    + _POD_SPEC_WHY,
                )
                continue
            # KAFKA_OPTS, JAVA_TOOL_OPTIONS, any variable: a credential inside its value.
            for found in find_credentials(
                value or "", secret_vars=secret_vars, literal_vars=literal_vars
            ):
                yield violation(
                    subject,
                    f"container {container_name} env {name}",
                    _found_inside(found),
                    "$(NAME) of an env var from valueFrom.secretKeyRef in its place",
                    f"declare an env var from valueFrom.secretKeyRef before {name} and give "
                    f"{found.key} $(THAT_NAME) instead (the kubelet expands it when it starts "
                    f"the container): a literal value is {_POD_SPEC_WHY}",
                )
        command_line = " ".join(
            _known_strings(container, "command") + _known_strings(container, "args")
        )
        for found in find_credentials(
            command_line, secret_vars=secret_vars, literal_vars=literal_vars
        ):
            yield violation(
                subject,
                f"container {container_name} command/args",
                f"a literal credential for {found.key} (value not shown)",
                "$(NAME) of an env var from valueFrom.secretKeyRef, or a file of a mounted Secret",
                f"give {found.key} $(NAME) instead, NAME an env var of the container from "
                "valueFrom.secretKeyRef, or have the program read a file of the Secret mounted "
                'into the pod (a --...-file option, or "$(cat /path)" in a shell script, as the '
                "kafka StatefulSet's format-storage init container reads its SCRAM passwords): "
                f"command and args are {_POD_SPEC_WHY}",
            )


def _annotation_findings(args: ResourceValidationArgs) -> Iterator[str]:
    """Annotations of the object and of its pods: whoever may read the object reads them."""
    subject = label(args.resource_type, args.props)
    places = [("metadata.annotations", get(args.props, "metadata", "annotations"))]
    if pod_spec(args.resource_type, args.props) is not None:
        path = pod_spec_path(args.resource_type).removesuffix(".spec") + ".metadata.annotations"
        places.append((path, pod_annotations(args.resource_type, args.props)))
    for path, given in places:
        if not isinstance(given, Mapping):
            continue
        for key in given:
            try:
                value = given[key]
            except UnknownValueError:
                continue  # computed (a certificate's revision): judged once known, at `up`
            if not isinstance(value, str):
                continue
            if literal_credential(key, value):
                found = [_found(key)]
            else:
                found = [_found_inside(f) for f in find_credentials(value)]
            for text in found:
                yield violation(
                    subject,
                    f"{path}[{key}]",
                    text,
                    "no credential in an annotation",
                    "keep the credential in a Secret and mount it where it is used: an "
                    f"annotation is {_POD_SPEC_WHY.removeprefix('stored in the pod spec, ')}",
                )


def check_credentials(args: ResourceValidationArgs, _: Mapping[str, Any]) -> Iterator[str]:
    """No credential in a ConfigMap, an annotation, a container's env values, command or args."""
    yield from _annotation_findings(args)
    if args.resource_type == CONFIG_MAP:
        yield from _config_map_findings(args)
    else:
        yield from _env_findings(args)


POLICIES = [
    resource_rule(
        name="credentials-in-secrets",
        description=(
            "Credentials (passwords, key store passwords, SASL JAAS passwords, OAuth client "
            "secrets, private keys) live in Secrets: a ConfigMap holds only ${dir:DIRECTORY:FILE} "
            "or ${env:NAME} references to them, also inside values (JVM -D options, command "
            "lines, JSON, YAML, .env and JAAS text); no annotation holds one; a secret-looking "
            "container env var comes from valueFrom.secretKeyRef, never a literal value; no env "
            "value, command or args "
            "holds a credential in clear (only $(NAME) of a Secret's env var, or a file read)."
        ),
        level=MANDATORY,
        check=check_credentials,
    ),
]
