"""Kafka properties files keep TLS whole: certificates and host names verified, TLS 1.2 or later.

The processor's, the reconciler's and the brokers' properties reach their pods through
ConfigMaps; a `.properties` entry that turns verification off (with or without a `consumer.`,
`producer.` or `listener.name.<listener>.` prefix) still connects over "SSL" and so passes every
listener rule. The brokers' own environment is checked by `kafka-listener-encryption`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import ResourceValidationArgs

from contract.java_properties import load_properties
from contract.tls_settings import tls_weakenings

from .config import MANDATORY, resource_rule
from .manifests import CONFIG_MAP, get, label
from .messages import violation


def check_tls_verification(args: ResourceValidationArgs, _: Mapping[str, Any]) -> Iterator[str]:
    """No `.properties` entry of a ConfigMap weakens TLS."""
    if args.resource_type != CONFIG_MAP:
        return
    subject = label(args.resource_type, args.props)
    for file, text in get(args.props, "data", default={}).items():
        if not (file.endswith(".properties") and isinstance(text, str)):
            continue
        try:
            properties = load_properties(text)
        except ValueError:
            continue  # reported as unreadable by credentials-in-secrets
        for weakening in tls_weakenings(properties):
            yield violation(
                subject,
                f"data[{file}] {weakening.key}",
                weakening.value or "empty",
                weakening.required,
                f"remove {weakening.key}: {weakening.why}; a client that cannot verify the "
                "brokers needs their CA in its trust store (ssl.ca.location), not verification "
                "turned off",
            )


POLICIES = [
    resource_rule(
        name="kafka-tls-verification",
        description=(
            "Kafka properties files in ConfigMaps keep TLS whole: no "
            "ssl.endpoint.identification.algorithm other than https, no "
            "enable.ssl.certificate.verification=false, no ssl.protocol or "
            "ssl.enabled.protocols below TLSv1.2, whatever the prefix."
        ),
        level=MANDATORY,
        check=check_tls_verification,
    ),
]
