"""A throwaway CA and broker certificate for the local secured `KraftCluster`.

The files are named and shaped as the prod pods read them (`contract.kafka_security`:
`ca.crt`, `tls.crt`, `tls.key` in PKCS#8, `tls-combined.pem` = key + chain), so the local cluster
runs the brokers' TLS settings unchanged. The broker certificate's subject is the cluster's super
user (`CN=kafka-broker`) and names `localhost` and `127.0.0.1`, where the local brokers listen.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from contract.kafka_security import (
    BROKER_CERTIFICATE_SUBJECT,
    TLS_CA_FILE,
    TLS_CERT_FILE,
    TLS_COMBINED_FILE,
    TLS_KEY_FILE,
)

# A day: the cluster lives for one test session.
VALIDITY = datetime.timedelta(days=1)
# Clock skew between the writer and the JVMs is nil here, but a certificate valid from "now"
# fails a check made in the same second on a coarser clock.
BACKDATE = datetime.timedelta(minutes=5)
SANS: tuple[x509.GeneralName, ...] = (
    x509.DNSName("localhost"),
    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
)

# A CA signs certificates (and revocation lists), nothing else.
CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True, content_commitment=False, key_encipherment=False,
    data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
    encipher_only=False, decipher_only=False,
)  # fmt: skip


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA's key and self-signed certificate; `generation` names it as the stack's settings do."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @classmethod
    def new(cls, common_name: str = "kraft-cluster-test-ca") -> CertificateAuthority:
        """A fresh CA valid for `VALIDITY`."""
        now = datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(common_name)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(CA_KEY_USAGE, critical=True)
            .sign(key, hashes.SHA256())
        )
        return cls(key, certificate)

    @property
    def pem(self) -> bytes:
        """The CA's certificate in PEM: what a trust store holds."""
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def broker_certificate(self) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        """A new key and the brokers' certificate (`CN=kafka-broker`, `SANS`) signed by this CA."""
        now = datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name.from_rfc4514_string(BROKER_CERTIFICATE_SUBJECT))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.SubjectAlternativeName(list(SANS)), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            # A broker is a TLS server to clients and a TLS client to the other brokers.
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        return key, certificate


def write_broker_tls(
    directory: Path,
    signer: CertificateAuthority | None = None,
    trusted: Sequence[bytes] = (),
) -> Path:
    """Write a broker certificate signed by `signer` (a new CA by default) and the trust bundle
    `ca.crt` of the `trusted` PEM certificates (the signer's alone by default) into
    `directory`; `directory`.

    A bundle of two CAs is the first phase of a CA rollover: every peer then accepts a
    certificate from either, so brokers can move to the new CA's certificate one at a time."""
    directory.mkdir(parents=True, exist_ok=True)
    signer = signer or CertificateAuthority.new()
    key, certificate = signer.broker_certificate()
    bundle = b"".join(trusted or (signer.pem,))
    cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
    key_pem = _pem_key(key)
    (directory / TLS_CA_FILE).write_bytes(bundle)
    (directory / TLS_CERT_FILE).write_bytes(cert_pem)
    (directory / TLS_KEY_FILE).write_bytes(key_pem)
    (directory / TLS_KEY_FILE).chmod(0o600)
    # The key store's chain: the certificate and the CA that signed it.
    (directory / TLS_COMBINED_FILE).write_bytes(key_pem + cert_pem + signer.pem)
    (directory / TLS_COMBINED_FILE).chmod(0o600)
    return directory
