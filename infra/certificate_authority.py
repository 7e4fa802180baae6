"""The stack's own CAs, one per generation, and the trust bundle every pod reads.

A CA cannot be replaced in one step. The brokers verify each other's certificates (the INTERNAL
and CONTROLLER listeners require one), so the first broker to restart with a certificate from a
new CA, trusting only that CA, is refused by the others and refuses them: the quorum and the
replication split. A rollover therefore takes three `pulumi up`s, each a rolling restart:

1. `trustedCaGenerations: [g, g+1]`: the new CA joins every trust store (`ca.crt`); the brokers
   and the clients roll, the brokers still serve the old CA's certificate.
2. `caGeneration: g+1`: the brokers' certificate is signed by the new CA; the brokers roll one at
   a time, and every peer accepts both.
3. `trustedCaGenerations: [g+1]`: the old CA leaves the trust stores, and its key the state.

`tests/app/test_ca_rollover.py` runs these phases on a real 3-node Apache Kafka, and shows the
split that a one-step switch makes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pulumi
import pulumi_tls as tls

# A CA outlives many broker certificates (renewed by the first `pulumi up` in their last 30 days).
CA_VALIDITY_HOURS = 5 * 365 * 24


@dataclass(frozen=True)
class GeneratedCa:
    """One generation's CA: its key signs the brokers' certificate while it is current."""

    key: tls.PrivateKey
    certificate: tls.SelfSignedCert


def ca_resource_name(name: str, generation: int) -> str:
    """Generation 1 keeps the name the one CA had before generations: a stack keeps its CA."""
    return f"{name}-ca" if generation == 1 else f"{name}-ca-{generation}"


def generated_cas(
    name: str,
    cluster: str,
    generations: Iterable[int],
    key_algorithm: str,
    key_bits: int,
    opts: pulumi.ResourceOptions,
) -> dict[int, GeneratedCa]:
    """A CA per generation; each has its own subject, so a trust store tells them apart."""
    cas = {}
    for generation in generations:
        resource = ca_resource_name(name, generation)
        key = tls.PrivateKey(resource, algorithm=key_algorithm, rsa_bits=key_bits, opts=opts)
        subject = f"{cluster} CA" if generation == 1 else f"{cluster} CA {generation}"
        certificate = tls.SelfSignedCert(
            resource,
            private_key_pem=key.private_key_pem,
            subject=tls.SelfSignedCertSubjectArgs(common_name=subject),
            is_ca_certificate=True,
            validity_period_hours=CA_VALIDITY_HOURS,
            allowed_uses=["cert_signing", "crl_signing"],
            opts=opts,
        )
        cas[generation] = GeneratedCa(key, certificate)
    return cas


def trust_bundle(cas: Mapping[int, GeneratedCa]) -> pulumi.Output[str]:
    """Every CA's certificate in one PEM file, oldest first: Kafka's PEM trust store and
    librdkafka's `ssl.ca.location` both trust each certificate in the file."""
    return pulumi.Output.concat(
        *(cas[generation].certificate.cert_pem for generation in sorted(cas))
    )
