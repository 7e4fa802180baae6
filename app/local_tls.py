"""A throwaway CA and broker certificate for the local secured `KraftCluster`.

The files are named and shaped as the prod pods read them (`app.kafka_security`: `ca.crt`,
`tls.crt`, `tls.key` in PKCS#8, `tls-combined.pem` = key + chain), so the local cluster runs the
brokers' TLS settings unchanged. The broker certificate's subject is the cluster's super user
(`CN=kafka-broker`) and names `localhost` and `127.0.0.1`, where the local brokers listen.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from app.kafka_security import (
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


def write_broker_tls(directory: Path) -> Path:
    """Write a new CA and a broker certificate signed by it into `directory`; `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("kraft-cluster-test-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(CA_KEY_USAGE, critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name.from_rfc4514_string(BROKER_CERTIFICATE_SUBJECT)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_name)
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
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
    key_pem = _pem_key(key)
    (directory / TLS_CA_FILE).write_bytes(ca_pem)
    (directory / TLS_CERT_FILE).write_bytes(cert_pem)
    (directory / TLS_KEY_FILE).write_bytes(key_pem)
    (directory / TLS_KEY_FILE).chmod(0o600)
    (directory / TLS_COMBINED_FILE).write_bytes(key_pem + cert_pem + ca_pem)
    (directory / TLS_COMBINED_FILE).chmod(0o600)
    return directory
