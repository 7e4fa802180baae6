"""The brokers' and the clients' security settings, in one place for every cluster this runs on.

The Pulumi program's brokers, the local `KraftCluster` that the Apache Kafka tests start and
every client (processor, reconciler, load generator, benchmarks) take their settings from
here, so a test of the secured cluster tests what prod renders. Keys are Kafka's own broker
settings and librdkafka's client settings.

A secured cluster has three listeners:

- CLIENT (SASL_SSL, SCRAM-SHA-256 and SCRAM-SHA-512): every workload, one SCRAM user each
  (`contract.acl_specs`), on the mechanism of the stack's credentials revision;
- INTERNAL (SSL, client certificate required): replication between brokers, and the brokers'
  `grant-acls` containers (the bootstrap ACLs; the readiness sidecars use CLIENT, as a user);
- CONTROLLER (SSL, client certificate required): the KRaft quorum.

The brokers authenticate to each other with their certificate; its subject is the one super
user. `StandardAuthorizer` denies whatever no ACL allows.

Rotation without a gap: Kafka keeps one SCRAM credential per user and mechanism, so the
mechanism alternates with the credentials revision (`scram_mechanism`). A rotation adds each
user's credential of the new mechanism beside the old one, rolls the clients onto it, and only
then retires the old mechanism's credentials; in between both passwords log in, so a client that
reconnects with the password it read at start is never refused.

Standard library only: the Pulumi program imports this module from its own environment.
"""

from __future__ import annotations

from collections.abc import Mapping

# Kafka's two SCRAM mechanisms, both enabled on the client listener. Revision 1 (every stack's
# first) uses SHA-512, what the listener offered alone before rotations alternated.
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)


def scram_mechanism(revision: int) -> str:
    """The SCRAM mechanism of credentials revision `revision`: SHA-512 on odd revisions, SHA-256
    on even ones, so a rotation's new credentials never replace the ones still in use."""
    if revision < 1:
        raise ValueError(f"credentials revision {revision}: must be at least 1")
    return SCRAM_SHA_512 if revision % 2 else SCRAM_SHA_256


def previous_scram_mechanism(revision: int) -> str:
    """The mechanism of the revision before `revision`: its credentials are retired once every
    client has moved on."""
    return scram_mechanism(revision + 1)


def scram_key(mechanism: str) -> str:
    """A mechanism as a Secret key, a file name and a lower-case config segment
    (`SCRAM-SHA-256` -> `scram-sha-256`), after checking it is one of Kafka's two."""
    if mechanism not in SCRAM_MECHANISMS:
        raise ValueError(
            f"SCRAM mechanism {mechanism!r}: must be one of {', '.join(SCRAM_MECHANISMS)}"
        )
    return mechanism.lower()


PLAINTEXT = "PLAINTEXT"
SASL_SSL = "SASL_SSL"
# The security protocols the client listener may use (the stack setting's allowed values).
CLIENT_LISTENER_PROTOCOLS = (PLAINTEXT, SASL_SSL)

CLIENT_LISTENER = "CLIENT"
INTERNAL_LISTENER = "INTERNAL"
CONTROLLER_LISTENER = "CONTROLLER"

# The broker certificate's subject: the principal Kafka's SSL principal builder derives from
# it (`DEFAULT` mapping: the whole distinguished name) is the cluster's only super user.
BROKER_CERTIFICATE_SUBJECT = "CN=kafka-broker"
BROKER_PRINCIPAL = f"User:{BROKER_CERTIFICATE_SUBJECT}"

# File names inside a TLS Secret as cert-manager writes them (`CombinedPEM` output on): the
# generated certificates use the same, so the pods read either.
TLS_CERT_FILE = "tls.crt"
TLS_KEY_FILE = "tls.key"
TLS_CA_FILE = "ca.crt"
# The key of a Kafka user's Secret that holds the current credentials revision's password (and
# the file name of the password where a user's Secret is mounted); beside it, one key per SCRAM
# mechanism (`scram_key`).
PASSWORD_KEY = "password"
# The private key (PKCS#8, unencrypted) followed by the certificate chain: Kafka's PEM
# key store reads both from one file.
TLS_COMBINED_FILE = "tls-combined.pem"

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


# Broker settings this module derives from the client listener's protocol: a stack's own broker
# configs may not set them, or the cluster would run with a security the stack does not declare
# (and that the policy pack and the clients were not checked against).
SECURITY_OWNED_KEYS = frozenset(
    {
        "listeners",
        "advertised.listeners",
        "listener.security.protocol.map",
        "inter.broker.listener.name",
        "security.inter.broker.protocol",
        "controller.listener.names",
        "authorizer.class.name",
        "allow.everyone.if.no.acl.found",
        "super.users",
        "principal.builder.class",
        "sasl.mechanism.inter.broker.protocol",
        "sasl.mechanism.controller.protocol",
    }
)
SECURITY_OWNED_PREFIXES = ("listener.name.", "ssl.", "sasl.")


def owned_by_security(key: str) -> bool:
    """Whether a broker setting belongs to the listeners' security, set here and nowhere else."""
    return key in SECURITY_OWNED_KEYS or key.startswith(SECURITY_OWNED_PREFIXES)


def listener_protocols(client_protocol: str) -> dict[str, str]:
    """Listener name -> security protocol (`listener.security.protocol.map`'s entries)."""
    if client_protocol not in CLIENT_LISTENER_PROTOCOLS:
        raise ValueError(
            f"client listener protocol {client_protocol!r}: must be one of "
            f"{', '.join(CLIENT_LISTENER_PROTOCOLS)}"
        )
    if client_protocol == PLAINTEXT:
        return {
            CLIENT_LISTENER: PLAINTEXT,
            INTERNAL_LISTENER: PLAINTEXT,
            CONTROLLER_LISTENER: PLAINTEXT,
        }
    return {CLIENT_LISTENER: SASL_SSL, INTERNAL_LISTENER: "SSL", CONTROLLER_LISTENER: "SSL"}


def broker_security_configs(client_protocol: str, tls_dir: str) -> dict[str, str]:
    """The broker settings of the listeners' security, for certificates in `tls_dir`.

    Without TLS (`PLAINTEXT`) only the protocol map and the listener roles: no authentication
    and no authorizer, for a dev cluster that says so in its stack file.
    """
    protocols = listener_protocols(client_protocol)
    configs = {
        "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protocols.items()),
        "inter.broker.listener.name": INTERNAL_LISTENER,
        "controller.listener.names": CONTROLLER_LISTENER,
    }
    if client_protocol == PLAINTEXT:
        return configs
    client = CLIENT_LISTENER.lower()
    return {
        **configs,
        # Both, always: during a rotation the old mechanism's password and the new one's are
        # valid at once (see the module's docstring).
        f"listener.name.{client}.sasl.enabled.mechanisms": ",".join(SCRAM_MECHANISMS),
        **{
            f"listener.name.{client}.{scram_key(m)}.sasl.jaas.config": SCRAM_LOGIN_MODULE
            for m in SCRAM_MECHANISMS
        },
        # Brokers and controllers prove who they are with their certificate.
        f"listener.name.{INTERNAL_LISTENER.lower()}.ssl.client.auth": "required",
        f"listener.name.{CONTROLLER_LISTENER.lower()}.ssl.client.auth": "required",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": f"{tls_dir}/{TLS_COMBINED_FILE}",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": f"{tls_dir}/{TLS_CA_FILE}",
        "authorizer.class.name": STANDARD_AUTHORIZER,
        # Kafka's default, made explicit: what no ACL allows is denied.
        "allow.everyone.if.no.acl.found": "false",
        "super.users": BROKER_PRINCIPAL,
    }


def listeners(client_port: int, internal_port: int, controller_port: int, host: str = "") -> str:
    """`listeners` (or `advertised.listeners` with a host) for the three listeners."""
    return ",".join(
        f"{name}://{host}:{port}"
        for name, port in (
            (CLIENT_LISTENER, client_port),
            (INTERNAL_LISTENER, internal_port),
            (CONTROLLER_LISTENER, controller_port),
        )
    )


def scram_client_configs(
    username: str, password: str, ca_file: str, mechanism: str = SCRAM_SHA_512
) -> dict[str, str]:
    """librdkafka settings of a workload on the CLIENT listener (SCRAM over TLS).

    `password` is usually a reference (`${env:SASL_PASSWORD}`) that the client resolves from
    its environment, so the properties file holds no secret. `mechanism` is the one of the
    credentials revision the password belongs to (`scram_mechanism`).
    """
    scram_key(mechanism)  # one of Kafka's two, or a ValueError naming it
    return {
        "security.protocol": SASL_SSL,
        "sasl.mechanism": mechanism,
        "sasl.username": username,
        "sasl.password": password,
        "ssl.ca.location": ca_file,
    }


# Kafka's built-in provider of `${dir:DIRECTORY:FILE}`: a mounted Secret's file, read at start.
DIRECTORY_CONFIG_PROVIDER = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"


def java_scram_client_configs(librdkafka: Mapping[str, str]) -> dict[str, str]:
    """`scram_client_configs`' login in the Java client's names, for Kafka's own tools
    (`--command-config`).

    The Java client names its user and password inside `sasl.jaas.config`; a `${dir:...}`
    password is resolved by Kafka's `DirectoryConfigProvider` (KIP-421), so the file still holds
    no secret. The CA is a PEM trust store, as the brokers' own.
    """
    scram_key(librdkafka["sasl.mechanism"])
    return {
        "security.protocol": librdkafka["security.protocol"],
        "sasl.mechanism": librdkafka["sasl.mechanism"],
        "sasl.jaas.config": (
            f'{SCRAM_LOGIN_MODULE.removesuffix(";")} username="{librdkafka["sasl.username"]}" '
            f'password="{librdkafka["sasl.password"]}";'
        ),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": librdkafka["ssl.ca.location"],
        "config.providers": "dir",
        "config.providers.dir.class": DIRECTORY_CONFIG_PROVIDER,
    }


def broker_client_configs(tls_dir: str) -> dict[str, str]:
    """librdkafka settings of a client that is the broker (INTERNAL listener, its certificate)."""
    return {
        "security.protocol": "SSL",
        "ssl.ca.location": f"{tls_dir}/{TLS_CA_FILE}",
        "ssl.certificate.location": f"{tls_dir}/{TLS_CERT_FILE}",
        "ssl.key.location": f"{tls_dir}/{TLS_KEY_FILE}",
    }
