"""TLS settings that keep the encryption but drop what it is for: the one list everyone refuses.

A connection with certificate verification off trusts any certificate, one without hostname
verification any certificate the CA ever signed, and TLS below 1.2 has known breaks: each is a
man-in-the-middle waiting to happen while every listener still reads "SSL". The same keys exist
for Kafka's brokers and Java clients and for librdkafka (the processor); a prefix
(`consumer.`, `producer.`, `listener.name.<listener>.`) scopes a key without changing it, so
keys are matched by their last dotted segments.

Standard library only: the processor, the stack validation and the policy pack import it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

HOSTNAME_VERIFICATION = "ssl.endpoint.identification.algorithm"
CERTIFICATE_VERIFICATION = "enable.ssl.certificate.verification"  # librdkafka only
TLS_PROTOCOL = "ssl.protocol"
ENABLED_PROTOCOLS = "ssl.enabled.protocols"
SECURE_TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")


@dataclass(frozen=True)
class TlsWeakening:
    """One setting that weakens TLS, as written, with what it must be instead."""

    key: str
    value: str
    required: str
    why: str


def _scoped(key: str, base: str) -> bool:
    return key == base or key.endswith(f".{base}")


def _weak_versions(value: str) -> list[str]:
    versions = [v.strip() for v in value.split(",") if v.strip()]
    return [v for v in versions if v not in SECURE_TLS_VERSIONS]


def tls_weakenings(configs: Mapping[str, str]) -> Iterator[TlsWeakening]:
    """Every setting of `configs` (broker or client, any prefix) that weakens TLS."""
    for key, value in configs.items():
        text = value.strip()
        if _scoped(key, HOSTNAME_VERIFICATION) and text.lower() != "https":
            yield TlsWeakening(
                key,
                value,
                "https (or absent: https is the default)",
                "without hostname verification any certificate the CA signed, for any host, "
                "is accepted as the broker's",
            )
        elif _scoped(key, CERTIFICATE_VERIFICATION) and text.lower() != "true":
            yield TlsWeakening(
                key,
                value,
                "true (or absent: true is the default)",
                "without certificate verification any certificate, self-signed by anyone, is "
                "accepted and the connection is open to a man in the middle",
            )
        elif _scoped(key, TLS_PROTOCOL) and text not in SECURE_TLS_VERSIONS:
            yield TlsWeakening(
                key,
                value,
                " or ".join(SECURE_TLS_VERSIONS) + " (or absent: TLSv1.3 is the default)",
                "TLS before 1.2 (and SSL) has known attacks and is disabled in current JVMs",
            )
        elif _scoped(key, ENABLED_PROTOCOLS) and (not text or _weak_versions(text)):
            yield TlsWeakening(
                key,
                value,
                "only " + ", ".join(SECURE_TLS_VERSIONS) + " (or absent: the default)",
                f"it enables {', '.join(_weak_versions(text)) or 'no protocol'}: TLS before "
                "1.2 (and SSL) has known attacks and lets a man in the middle downgrade",
            )
