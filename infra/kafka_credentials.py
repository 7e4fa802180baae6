"""The secured cluster's credentials: the brokers' TLS certificate and one SCRAM user per workload.

Everything secret is a Pulumi secret (encrypted in the stack's state) and a Kubernetes Secret;
pods read them as files or `secretKeyRef` variables, never from a ConfigMap. The settings that
use them are in `contract/kafka_security.py`; who may do what is in
`contract/acl_specs.py`.

Each user's Secret holds one password per SCRAM mechanism (keys `scram-sha-256`, `scram-sha-512`)
and, under `password`, the one of the current credentials revision. A revision renews only its own
mechanism's password (`contract.kafka_security.scram_mechanism`), so during a rotation the
previous one is still there for what still uses it: a pod mounts the key of the mechanism its
properties name, which an in-place update of the Secret never changes under it, and the reconciler
logs in with the previous one until its new credential exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
import pulumi_tls as tls

from contract.acl_specs import KafkaUser
from contract.kafka_security import (
    BROKER_CERTIFICATE_SUBJECT,
    PASSWORD_KEY,
    TLS_CA_FILE,
    TLS_CERT_FILE,
    TLS_COMBINED_FILE,
    TLS_KEY_FILE,
    previous_scram_mechanism,
    scram_client_configs,
    scram_key,
    scram_mechanism,
)
from contract.workload_shapes import CA_DIR, USER_DIR
from infra import workload
from infra.certificate_authority import generated_cas, trust_bundle
from infra.stack_settings import SecurityConfig

# The file of the previous revision's password, in the reconciler's mount of its own Secret.
PREVIOUS_PASSWORD_FILE = "previous-password"
# The brokers' certificate is renewed by the first `pulumi up` in its last 30 days (pulumi-tls
# marks it ready for renewal then); its CA lasts longer (infra/certificate_authority.py).
CERTIFICATE_VALIDITY_HOURS = 365 * 24
EARLY_RENEWAL_HOURS = 30 * 24
# The broker certificate's key: RSA 2048, what cert-manager issues by default and every Kafka
# client and JVM reads.
KEY_ALGORITHM = "RSA"
KEY_BITS = 2048
# Alphanumeric: the password goes into `--add-scram 'SCRAM-SHA-512=[name=...,password=...]'`,
# whose parser splits on `,`, `=` and brackets.
PASSWORD_LENGTH = 40


@dataclass(frozen=True)
class ClientAccess:
    """What a workload's pod needs to connect as its SCRAM user (all empty on PLAINTEXT)."""

    # Security settings for its properties file; the password is a file of its user's Secret,
    # `${dir:/etc/kafka-user:password}` (Kafka's DirectoryConfigProvider syntax).
    properties: dict[str, str] = field(default_factory=dict)
    mounts: list[k8s.core.v1.VolumeMountArgs] = field(default_factory=list)
    volumes: list[k8s.core.v1.VolumeArgs] = field(default_factory=list)
    # On the pod template: a new password (a new revision) restarts the pods, whose clients
    # read it at start.
    annotations: dict[str, str] = field(default_factory=dict)
    # Unless pinned without `previous`: the settings that replace `properties`' mechanism and
    # password with the previous revision's, valid until they are retired.
    previous_properties: dict[str, str] = field(default_factory=dict)


def user_secret_name(cluster: str, user: str) -> str:
    """The Secret holding one SCRAM user's password."""
    return f"{cluster}-user-{user}"


def tls_secret_name(cluster: str) -> str:
    """The Secret holding the brokers' key, certificate and CA (cert-manager's layout)."""
    return f"{cluster}-tls"


@dataclass(frozen=True)
class KafkaCredentialsArgs:
    """Inputs of `KafkaCredentials`."""

    namespace: str
    # The Kafka cluster's name: the Secrets are named after it.
    cluster: str
    security: SecurityConfig
    users: Sequence[KafkaUser]
    # Every name a client or a broker reaches a broker by (the certificate's SANs).
    dns_names: Sequence[str]


class KafkaCredentials(pulumi.ComponentResource):
    """The TLS Secret (generated or from cert-manager) and a password Secret per SCRAM user."""

    tls_secret: str
    user_secrets: dict[str, str]
    credentials_revision: int
    # The SCRAM mechanism of the current revision's passwords, and the previous revision's.
    scram_mechanism: str
    previous_scram_mechanism: str
    # Changes with the certificate: the brokers' pod template carries it, so a renewal rolls
    # them (a broker reads its key store at start).
    certificate_revision: pulumi.Output[str]
    # Changes with the CAs in the clients' trust store: their pod templates carry it.
    trust_revision: str

    def __init__(
        self, name: str, args: KafkaCredentialsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("stateful-streaming:kafka:KafkaCredentials", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        labels = workload.labels(args.cluster, "kafka-credentials")
        self.tls_secret = tls_secret_name(args.cluster)
        revision = self.credentials_revision = args.security.credentials_revision
        self.scram_mechanism = scram_mechanism(revision)
        self.previous_scram_mechanism = previous_scram_mechanism(revision)
        if args.security.certificates == "cert-manager":
            certificate = self._cert_manager_certificate(name, args, labels, child)
        else:
            certificate = self._generated_certificate(name, args, labels, child)
        self.certificate_revision = certificate.apply(
            lambda text: workload.content_name("certificate", text)
        )
        # The generated CAs a client trusts (cert-manager's issuer CA is rolled outside Pulumi).
        self.trust_revision = (
            "issuer"
            if args.security.certificates == "cert-manager"
            else "ca-" + "-".join(map(str, args.security.trusted_cas))
        )

        self.user_secrets = {}
        for user in args.users:
            passwords = {
                mechanism: self._password(name, user.name, mechanism, revision, child)
                for mechanism in (self.scram_mechanism, self.previous_scram_mechanism)
            }
            secret = user_secret_name(args.cluster, user.name)
            k8s.core.v1.Secret(
                f"{name}-{user.name}",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=secret,
                    namespace=args.namespace,
                    labels=labels,
                    annotations={"stateful-streaming.io/purpose": user.purpose},
                ),
                type="Opaque",
                string_data={
                    "username": user.name,
                    PASSWORD_KEY: passwords[self.scram_mechanism].result,
                    **{scram_key(m): password.result for m, password in passwords.items()},
                },
                opts=child,
            )
            self.user_secrets[user.name] = secret
        self.register_outputs({"tlsSecret": self.tls_secret, "userSecrets": self.user_secrets})

    @staticmethod
    def _password(
        name: str, user: str, mechanism: str, revision: int, opts: pulumi.ResourceOptions
    ) -> random.RandomPassword:
        """`user`'s password for `mechanism`: renewed by each revision that uses the mechanism
        (its keeper is the latest such revision), kept by the others."""
        latest = revision if scram_mechanism(revision) == mechanism else revision - 1
        return random.RandomPassword(
            # SCRAM-SHA-512's keeps the name of the one password every user had before the
            # mechanisms alternated: a stack at revision 1 keeps its passwords.
            f"{name}-{user}"
            if mechanism == scram_mechanism(1)
            else f"{name}-{user}-{scram_key(mechanism)}",
            length=PASSWORD_LENGTH,
            special=False,
            keepers={"credentialsRevision": str(latest)},
            opts=opts,
        )

    def client_access(
        self, user: str, *, pinned: bool = False, previous: bool = False
    ) -> ClientAccess:
        """The properties, password file and CA mount of a pod that connects as `user`.

        By default the pod mounts the user's whole Secret, whose files the kubelet updates in
        place when a rotation renews them, and `previous_properties` log in with the previous
        revision's mechanism and password: for a pod that does not roll on a rotation and
        follows its changed files itself (the brokers' readiness sidecars, which must log in
        before the Job that sets the new credential runs). `pinned` mounts only the key of the
        current revision's mechanism, which the next rotation leaves alone: for a pod that rolls
        on a rotation (its pod template carries `annotations`) and reads its password once, so
        that the file under it always matches the mechanism its properties name. `previous`
        (pinned too) adds the previous revision's password and `previous_properties`.
        """
        if user not in self.user_secrets:
            raise KeyError(f"no SCRAM user {user!r}; users: {sorted(self.user_secrets)}")
        pinned = pinned or previous
        # Key -> file name; None: every key of the Secret, a file named after it.
        files: dict[str, str] | None = None
        previous_file: str | None = scram_key(self.previous_scram_mechanism)
        if pinned:
            files = {scram_key(self.scram_mechanism): PASSWORD_KEY}
            previous_file = PREVIOUS_PASSWORD_FILE if previous else None
            if previous_file is not None:
                files[scram_key(self.previous_scram_mechanism)] = previous_file
        previous_properties = (
            {
                "sasl.mechanism": self.previous_scram_mechanism,
                "sasl.password": f"${{dir:{USER_DIR}:{previous_file}}}",
            }
            if previous_file is not None
            else {}
        )
        return ClientAccess(
            properties=scram_client_configs(
                user,
                f"${{dir:{USER_DIR}:{PASSWORD_KEY}}}",
                f"{CA_DIR}/{TLS_CA_FILE}",
                self.scram_mechanism,
            ),
            mounts=[
                k8s.core.v1.VolumeMountArgs(name="kafka-user", mount_path=USER_DIR, read_only=True),
                k8s.core.v1.VolumeMountArgs(name="kafka-ca", mount_path=CA_DIR, read_only=True),
            ],
            # Files, not environment variables: nothing that prints the environment shows them.
            # Only the CA of the TLS Secret: a client never sees the brokers' key.
            volumes=[
                k8s.core.v1.VolumeArgs(
                    name="kafka-user",
                    secret=k8s.core.v1.SecretVolumeSourceArgs(
                        secret_name=self.user_secrets[user],
                        default_mode=0o440,
                        items=None
                        if files is None
                        else [
                            k8s.core.v1.KeyToPathArgs(key=key, path=path)
                            for key, path in files.items()
                        ],
                    ),
                ),
                k8s.core.v1.VolumeArgs(
                    name="kafka-ca",
                    secret=k8s.core.v1.SecretVolumeSourceArgs(
                        secret_name=self.tls_secret,
                        default_mode=0o440,
                        items=[k8s.core.v1.KeyToPathArgs(key=TLS_CA_FILE, path=TLS_CA_FILE)],
                    ),
                ),
            ],
            annotations={
                "stateful-streaming.io/credentials-revision": str(self.credentials_revision),
                # librdkafka reads `ssl.ca.location` at start: a CA rollover's trust step rolls.
                "stateful-streaming.io/trust": self.trust_revision,
            },
            previous_properties=previous_properties,
        )

    def users_volume(self, name: str, only: Sequence[str] | None = None) -> k8s.core.v1.VolumeArgs:
        """Every SCRAM user's password (or `only` these users') of the current revision as a file
        named after the user (mount it at `contract.container_commands.USERS_DIR`, where the
        format step, the grant container and the reconciler read them). The key does not change
        with the revision, so a rotation does not change the pod template of a pod that mounts
        this (the brokers')."""
        unknown = sorted(set(only or ()) - set(self.user_secrets))
        if unknown:
            raise KeyError(f"no SCRAM users {unknown}; users: {sorted(self.user_secrets)}")
        return k8s.core.v1.VolumeArgs(
            name=name,
            projected=k8s.core.v1.ProjectedVolumeSourceArgs(
                default_mode=0o440,
                sources=[
                    k8s.core.v1.VolumeProjectionArgs(
                        secret=k8s.core.v1.SecretProjectionArgs(
                            name=secret,
                            items=[k8s.core.v1.KeyToPathArgs(key=PASSWORD_KEY, path=user)],
                        )
                    )
                    for user, secret in self.user_secrets.items()
                    if only is None or user in only
                ],
            ),
        )

    def _generated_certificate(
        self,
        name: str,
        args: KafkaCredentialsArgs,
        labels: dict[str, str],
        opts: pulumi.ResourceOptions,
    ) -> pulumi.Output[str]:
        """The stack's CAs and the brokers' certificate signed by the current one (pulumi-tls);
        the certificate and every trusted CA, for the brokers' pod template."""
        security = args.security
        cas = generated_cas(name, args.cluster, security.trusted_cas, KEY_ALGORITHM, KEY_BITS, opts)
        signer = cas[security.ca_generation]
        bundle = trust_bundle(cas)
        key = tls.PrivateKey(
            f"{name}-broker", algorithm=KEY_ALGORITHM, rsa_bits=KEY_BITS, opts=opts
        )
        request = tls.CertRequest(
            f"{name}-broker",
            private_key_pem=key.private_key_pem,
            subject=tls.CertRequestSubjectArgs(
                common_name=BROKER_CERTIFICATE_SUBJECT.removeprefix("CN=")
            ),
            dns_names=list(args.dns_names),
            opts=opts,
        )
        certificate = tls.LocallySignedCert(
            f"{name}-broker",
            cert_request_pem=request.cert_request_pem,
            ca_private_key_pem=signer.key.private_key_pem,
            ca_cert_pem=signer.certificate.cert_pem,
            validity_period_hours=CERTIFICATE_VALIDITY_HOURS,
            early_renewal_hours=EARLY_RENEWAL_HOURS,
            # The same certificate serves the listeners and identifies the broker to the others.
            allowed_uses=["digital_signature", "key_encipherment", "server_auth", "client_auth"],
            opts=opts,
        )
        k8s.core.v1.Secret(
            f"{name}-tls",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=self.tls_secret, namespace=args.namespace, labels=labels
            ),
            type="kubernetes.io/tls",
            string_data={
                TLS_CERT_FILE: certificate.cert_pem,
                # PKCS#8: the only unencrypted form Kafka's PEM key store reads.
                TLS_KEY_FILE: key.private_key_pem_pkcs8,
                TLS_CA_FILE: bundle,
                TLS_COMBINED_FILE: pulumi.Output.concat(
                    key.private_key_pem_pkcs8, certificate.cert_pem
                ),
            },
            opts=opts,
        )
        # A broker reads its trust store at start too: a new CA in it rolls the brokers.
        return pulumi.Output.concat(certificate.cert_pem, bundle)

    def _cert_manager_certificate(
        self,
        name: str,
        args: KafkaCredentialsArgs,
        labels: dict[str, str],
        opts: pulumi.ResourceOptions,
    ) -> pulumi.Output[str]:
        """A cert-manager `Certificate` that writes the same Secret layout (CombinedPEM on)."""
        security = args.security
        k8s.apiextensions.CustomResource(
            f"{name}-tls",
            api_version="cert-manager.io/v1",
            kind="Certificate",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=self.tls_secret, namespace=args.namespace, labels=labels
            ),
            spec={
                "secretName": self.tls_secret,
                "commonName": BROKER_CERTIFICATE_SUBJECT.removeprefix("CN="),
                "dnsNames": list(args.dns_names),
                "duration": f"{CERTIFICATE_VALIDITY_HOURS}h",
                "renewBefore": f"{EARLY_RENEWAL_HOURS}h",
                "privateKey": {
                    "algorithm": KEY_ALGORITHM,
                    "size": KEY_BITS,
                    "encoding": "PKCS8",
                    "rotationPolicy": "Always",
                },
                "usages": ["digital signature", "key encipherment", "server auth", "client auth"],
                # The key and the chain in one file, as Kafka's PEM key store reads them.
                "additionalOutputFormats": [{"type": "CombinedPEM"}],
                "issuerRef": {
                    "name": security.issuer_name,
                    "kind": security.issuer_kind,
                    "group": "cert-manager.io",
                },
            },
            opts=opts,
        )
        # cert-manager renews behind Pulumi's back: restarting the brokers after a renewal is
        # the operator's (see docs/security.md); a new issuer is a new revision here.
        return pulumi.Output.from_input(f"{security.issuer_kind}/{security.issuer_name}")
