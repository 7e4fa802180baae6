"""The security rules (docs/security.md), passing and failing, on the handmade stack (prod's secured
shape) and its dev counterpart, per stack config."""

from __future__ import annotations

import base64

import pytest
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from contract import container_commands, kafka_security
from contract.java_properties import load_properties
from contract.kafka_security import (
    broker_security_configs,
    listeners,
    scram_client_configs,
)
from policies.evaluate import Violation
from policies.rules.broker_security import SCRAM_MECHANISMS
from tests.policies.conftest import Evaluate, findings_of, levels_of, stack_config
from tests.policies.handmade_stack import (
    PEM_PRIVATE_KEY_BLOCK,
    Edit,
    Resource,
    broker_settings_of,
    changed,
    first_container,
    handmade_stack,
    pod,
    with_broker_setting,
    with_env,
    with_properties,
)

LISTENERS = "kafka-listener-encryption"
AUTHORIZER = "kafka-authorizer"
CREDENTIALS = "credentials-in-secrets"
LEAST_PRIVILEGE = "kafka-least-privilege"
TLS_VERIFICATION = "kafka-tls-verification"
SECURITY_RULES = {LISTENERS, AUTHORIZER, CREDENTIALS, LEAST_PRIVILEGE, TLS_VERIFICATION}
PROTOCOL_MAP = "listener.security.protocol.map"
MECHANISMS = "listener.name.client.sasl.enabled.mechanisms"
SECURED_MAP = "CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL"
CA_FILE = "/etc/kafka-ca/ca.crt"
# The processor's password: a file of its user's Secret, mounted (infra.kafka_credentials).
PASSWORD_FILE = "${dir:/etc/kafka-user:password}"
# What the dev stack renders: the same listeners, none of them secured, and no
# authorizer, ACLs or credentials.
DEV_MAP = "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"
_PROD_ONLY_SETTINGS = (
    "authorizer.class.name",
    "allow.everyone.if.no.acl.found",
    "super.users",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "listener.name.client.sasl.enabled.mechanisms",
    "listener.name.client.scram-sha-256.sasl.jaas.config",
    "listener.name.client.scram-sha-512.sasl.jaas.config",
    "listener.name.internal.ssl.client.auth",
    "listener.name.controller.ssl.client.auth",
)


def _kafka(stack: list[Resource], *edits: Edit) -> list[Resource]:
    for edit in edits:
        stack = changed(stack, "kafka", edit, ":StatefulSet")
    return stack


def _findings(run: Evaluate, stack: list[Resource], config: str = "prod") -> list[Violation]:
    """The security rules' findings (asserting no other rule fired)."""
    return findings_of(run, stack, SECURITY_RULES, config)


def _only(run: Evaluate, stack: list[Resource], rule: str, config: str = "prod") -> Violation:
    """The one finding of `rule`, and no finding of any other rule."""
    (violation,) = _findings(run, stack, config)
    assert violation.policy == rule
    assert "Fix: " in violation.message
    return violation


def dev_stack() -> list[Resource]:
    """The handmade stack as the dev stack renders it: PLAINTEXT, no SASL, no ACLs."""
    stack = _kafka(
        handmade_stack(),
        with_broker_setting(PROTOCOL_MAP, DEV_MAP),
        *(with_broker_setting(name, None) for name in _PROD_ONLY_SETTINGS),
    )
    client_security = {
        key: None
        for key in (
            "security.protocol",
            "sasl.mechanism",
            "sasl.username",
            "sasl.password",
            "ssl.ca.location",
        )
    }
    stack = changed(stack, "processor-config", with_properties(client_security))

    def without_acls(r: Resource) -> None:
        del r.props["data"]["acls.json"], r.props["data"]["client.properties"]

    return changed(stack, "topics-specs", without_acls)


def _broker_settings(stack: list[Resource]) -> dict[str, str]:
    return broker_settings_of(next(r for r in stack if r.name == "kafka"))


def _processor_properties(stack: list[Resource]) -> dict[str, str]:
    config_map = next(r for r in stack if r.name == "processor-config")
    return load_properties(config_map.props["data"]["processor.properties"])


def _rendered_broker_settings(client_listener: str) -> dict[str, str]:
    """The brokers' security settings as the Pulumi program renders them from
    contract.kafka_security."""
    brokers = broker_security_configs(client_listener, "/etc/kafka/tls")
    return {**brokers, "listeners": listeners(9092, 9094, 9093)}


def test_the_handmade_prod_stack_is_configured_as_app_kafka_security_renders_it() -> None:
    """So the rules are proven on what the Pulumi program will render."""
    stack = handmade_stack()
    expected = _rendered_broker_settings("SASL_SSL")
    settings = _broker_settings(stack)
    assert {name: settings.get(name) for name in expected} == expected
    # dev_stack takes away exactly what prod adds
    assert set(_PROD_ONLY_SETTINGS) == set(expected) - set(_rendered_broker_settings("PLAINTEXT"))
    clients = scram_client_configs("page-view-counter", PASSWORD_FILE, CA_FILE)
    properties = _processor_properties(stack)
    assert {key: properties.get(key) for key in clients} == clients


def test_the_handmade_dev_stack_is_configured_as_app_kafka_security_renders_it() -> None:
    stack = dev_stack()
    expected = _rendered_broker_settings("PLAINTEXT")
    settings = _broker_settings(stack)
    assert {name: settings.get(name) for name in expected} == expected
    assert not set(_PROD_ONLY_SETTINGS) & set(settings)
    assert "security.protocol" not in _processor_properties(stack)


# --- kafka-listener-encryption ------------------------------------------------------------


@pytest.mark.parametrize(
    ("protocol_map", "extra_env", "expected"),
    [
        (
            "CLIENT:SASL_PLAINTEXT,INTERNAL:SSL,CONTROLLER:SSL",
            {},
            "client listener CLIENT on port 9092 (listeners, "
            "listener.security.protocol.map, env SERVER_PROPERTIES) is SASL_PLAINTEXT",
        ),
        (
            "CLIENT:SSL,INTERNAL:SSL,CONTROLLER:SSL",
            {},
            "client listener CLIENT on port 9092 (listeners, "
            "listener.security.protocol.map, env SERVER_PROPERTIES) is SSL with "
            "ssl.client.auth=none; required: "
            "SASL_SSL, or SSL with listener.name.client.ssl.client.auth=required "
            "(env SERVER_PROPERTIES)",
        ),
        (
            "CLIENT:SSL,INTERNAL:SSL,CONTROLLER:SSL",
            {"ssl.client.auth": "requested"},
            "client listener CLIENT on port 9092 (listeners, "
            "listener.security.protocol.map, env SERVER_PROPERTIES) is SSL with "
            "ssl.client.auth=requested",
        ),
        (
            "CLIENT:SASL_SSL,INTERNAL:PLAINTEXT,CONTROLLER:SSL",
            {},
            "inter-broker listener INTERNAL (inter.broker.listener.name, "
            "listener.security.protocol.map, env SERVER_PROPERTIES) is PLAINTEXT; required: "
            "SASL_SSL, or SSL with "
            "listener.name.internal.ssl.client.auth=required",
        ),
        (
            "CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SASL_PLAINTEXT",
            {},
            "controller listener CONTROLLER (controller.listener.names, "
            "listener.security.protocol.map, env SERVER_PROPERTIES) is SASL_PLAINTEXT; required: "
            "SASL_SSL, or SSL "
            "with listener.name.controller.ssl.client.auth=required",
        ),
        (
            "CLIENT:SASL_SSL,CONTROLLER:SSL",
            {},
            "inter-broker listener INTERNAL (inter.broker.listener.name, "
            "listener.security.protocol.map, env SERVER_PROPERTIES) is absent from "
            "listener.security.protocol.map",
        ),
        (
            SECURED_MAP,
            {"inter.broker.listener.name": None},
            "broker config security.inter.broker.protocol (env SERVER_PROPERTIES) is PLAINTEXT",
        ),
        (
            SECURED_MAP,
            {"listener.name.internal.ssl.client.auth": "none"},
            "inter-broker listener INTERNAL (inter.broker.listener.name, "
            "listener.security.protocol.map, env SERVER_PROPERTIES) is SSL with "
            "ssl.client.auth=none",
        ),
        (
            SECURED_MAP,
            {"listener.name.controller.ssl.client.auth": "requested"},
            "controller listener CONTROLLER (controller.listener.names, "
            "listener.security.protocol.map, env SERVER_PROPERTIES) is SSL with "
            "ssl.client.auth=requested",
        ),
        (
            f"{SECURED_MAP},EXTRA:PLAINTEXT",
            {"listeners": ("CLIENT://:9092,INTERNAL://:9094,CONTROLLER://:9093,EXTRA://:9095")},
            "listener EXTRA on port 9095, beside the client, inter-broker and controller "
            "listeners (listeners, listener.security.protocol.map, env SERVER_PROPERTIES) is "
            "PLAINTEXT",
        ),
        (
            SECURED_MAP,
            {"listeners": "INTERNAL://:9094,CONTROLLER://:9093"},
            "the listener on the client port 9092 (listeners, env SERVER_PROPERTIES) is absent "
            "(listeners INTERNAL://:9094,CONTROLLER://:9093)",
        ),
    ],
    ids=[
        "client-sasl-plaintext",
        "client-ssl-without-client-auth",
        "client-ssl-with-client-auth-requested",
        "inter-broker-plaintext",
        "controller-sasl-plaintext",
        "inter-broker-unmapped",
        "inter-broker-protocol-default",
        "inter-broker-ssl-without-client-auth",
        "controller-ssl-with-client-auth-requested",
        "an-extra-plaintext-listener",
        "nothing-on-the-client-port",
    ],
)
def test_a_listener_without_tls_or_client_authentication_is_reported(
    run, protocol_map: str, extra_env: dict[str, str | None], expected: str
) -> None:
    edits = [with_broker_setting(name, value) for name, value in extra_env.items()]
    stack = _kafka(handmade_stack(), with_broker_setting(PROTOCOL_MAP, protocol_map), *edits)
    violation = _only(run, stack, LISTENERS)
    assert violation.message.startswith(f"StatefulSet streaming/kafka: {expected}")


@pytest.mark.parametrize(
    ("protocol_map", "client_auth_env"),
    [
        ("CLIENT:SSL,INTERNAL:SSL,CONTROLLER:SSL", "listener.name.client.ssl.client.auth"),
        ("CLIENT:SSL,INTERNAL:SSL,CONTROLLER:SSL", "ssl.client.auth"),
        ("CLIENT:SASL_SSL,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL", None),
    ],
    ids=["mutual-tls-on-the-listener", "mutual-tls-broker-wide", "sasl-ssl-everywhere"],
)
def test_mutual_tls_or_sasl_ssl_listeners_pass(
    run, protocol_map: str, client_auth_env: str | None
) -> None:
    edits = [with_broker_setting(PROTOCOL_MAP, protocol_map)]
    if client_auth_env:
        edits.append(with_broker_setting(client_auth_env, "required"))
    assert run(_kafka(handmade_stack(), *edits)) == []


@pytest.mark.parametrize(
    "mechanisms", ["SCRAM-SHA-256", "SCRAM-SHA-512", "SCRAM-SHA-512,SCRAM-SHA-256"]
)
def test_the_client_listener_may_offer_either_scram_mechanism_or_both(run, mechanisms: str) -> None:
    """A rotation moves the users from one SCRAM mechanism to the other ("Rotated." in
    docs/security.md): the listener offers both, and a fork that offers one is fine too."""
    assert SCRAM_MECHANISMS == kafka_security.SCRAM_MECHANISMS
    stack = _kafka(handmade_stack(), with_broker_setting(MECHANISMS, mechanisms))
    assert run(stack) == []


@pytest.mark.parametrize(
    ("env", "value", "found"),
    [
        (MECHANISMS, "SCRAM-SHA-512,PLAIN", "is SCRAM-SHA-512,PLAIN"),
        (
            MECHANISMS,
            None,
            "broker config sasl.enabled.mechanisms (env SERVER_PROPERTIES) is GSSAPI",
        ),
    ],
    ids=["plain-beside-scram", "unset-kafkas-default-gssapi"],
)
def test_a_client_listener_offering_another_sasl_mechanism_is_reported(
    run, env: str, value: str | None, found: str
) -> None:
    violation = _only(run, _kafka(handmade_stack(), with_broker_setting(env, value)), LISTENERS)
    assert "client listener CLIENT's SASL mechanisms" in violation.message
    assert found in violation.message
    assert "required: SCRAM-SHA-256 and/or SCRAM-SHA-512, nothing else" in violation.message
    assert (
        "set listener.name.client.sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512"
        in violation.message
    )


@pytest.mark.parametrize(
    ("env", "value", "expected"),
    [
        (
            "ssl.endpoint.identification.algorithm",
            "",
            "ssl.endpoint.identification.algorithm "
            "(env SERVER_PROPERTIES) is empty; required: https",
        ),
        (
            "listener.name.internal.ssl.endpoint.identification.algorithm",
            "none",
            "listener.name.internal.ssl.endpoint.identification.algorithm "
            "(env SERVER_PROPERTIES) is none",
        ),
        (
            "ssl.enabled.protocols",
            "TLSv1.1,TLSv1.2,TLSv1.3",
            "ssl.enabled.protocols (env SERVER_PROPERTIES) is TLSv1.1,TLSv1.2,TLSv1.3; "
            "required: only TLSv1.2, TLSv1.3",
        ),
        (
            "ssl.protocol",
            "TLSv1",
            "ssl.protocol (env SERVER_PROPERTIES) is TLSv1; required: TLSv1.2 or TLSv1.3",
        ),
    ],
    ids=["no-hostname-verification", "no-hostname-verification-inter-broker", "tls-1.1", "tls-1"],
)
def test_a_broker_setting_that_weakens_tls_is_reported(
    run, env: str, value: str, expected: str
) -> None:
    stack = _kafka(handmade_stack(), with_broker_setting(env, value))
    violation = _only(run, stack, LISTENERS)
    assert violation.message.startswith(f"StatefulSet streaming/kafka: broker config {expected}")
    assert violation.mandatory


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ssl.endpoint.identification.algorithm", "none"),
        ("consumer.ssl.endpoint.identification.algorithm", ""),
        ("enable.ssl.certificate.verification", "false"),
        ("consumer.enable.ssl.certificate.verification", "false"),
        ("producer.enable.ssl.certificate.verification", "False"),
        ("ssl.enabled.protocols", "TLSv1.2,TLSv1.1"),
    ],
)
def test_a_client_setting_that_weakens_tls_is_refused_in_every_stack(
    run, key: str, value: str
) -> None:
    stack = changed(handmade_stack(), "processor-config", with_properties({key: value}))
    for config in ("dev", "prod"):
        (violation,) = [v for v in _findings(run, stack, config) if v.policy == TLS_VERIFICATION]
        assert f"data[processor.properties] {key} is {value or 'empty'}" in violation.message
        assert violation.mandatory


def test_client_settings_that_keep_tls_whole_pass(run) -> None:
    kept = {
        "ssl.endpoint.identification.algorithm": "https",
        "consumer.enable.ssl.certificate.verification": "true",
        "ssl.enabled.protocols": "TLSv1.3,TLSv1.2",
        "ssl.protocol": "TLSv1.3",
    }
    stack = changed(handmade_stack(), "processor-config", with_properties(kept))
    assert run(stack) == []


def test_the_client_listener_is_found_by_the_configured_port(run) -> None:
    stack = _kafka(
        handmade_stack(),
        with_broker_setting(
            "listeners", "CLIENT://:9095,PLAIN://:9092,INTERNAL://:9094,CONTROLLER://:9093"
        ),
        with_broker_setting(PROTOCOL_MAP, f"{SECURED_MAP},PLAIN:PLAINTEXT"),
    )
    assert "client listener PLAIN on port 9092" in _only(run, stack, LISTENERS).message
    config = stack_config("prod")
    config[LISTENERS]["clientPort"] = 9095
    # The PLAINTEXT listener on 9092 is no longer the client listener, and still reported.
    (violation,) = run(stack, config)
    assert "listener PLAIN on port 9092, beside the client" in violation.message


def test_the_dev_stack_gets_one_advisory_per_plaintext_listener_and_prod_would_be_blocked(
    run,
) -> None:
    stack = dev_stack()
    dev = _findings(run, stack, "dev")
    assert {(v.policy, v.level) for v in dev} == {(LISTENERS, "advisory")}
    assert sorted(v.message.split(" (")[0] for v in dev) == [
        "StatefulSet streaming/kafka: client listener CLIENT on port 9092",
        "StatefulSet streaming/kafka: controller listener CONTROLLER",
        "StatefulSet streaming/kafka: inter-broker listener INTERNAL",
    ]
    prod = _findings(run, stack, "prod")
    assert {(v.policy, v.level) for v in prod} == {
        (LISTENERS, "mandatory"),
        (AUTHORIZER, "mandatory"),
    }


# --- kafka-authorizer ---------------------------------------------------------------------


def test_allow_everyone_if_no_acl_found_is_reported_in_every_stack_with_an_authorizer(
    run,
) -> None:
    stack = _kafka(handmade_stack(), with_broker_setting("allow.everyone.if.no.acl.found", "true"))
    assert levels_of(run, stack, AUTHORIZER) == {"dev": {"advisory"}, "prod": {"mandatory"}}
    message = _only(run, stack, AUTHORIZER).message
    assert "set allow.everyone.if.no.acl.found=false" in message


def test_allow_everyone_without_an_authorizer_is_left_to_the_missing_authorizer(run) -> None:
    stack = _kafka(
        dev_stack(),
        with_broker_setting("allow.everyone.if.no.acl.found", "true"),
    )
    assert AUTHORIZER not in {v.policy for v in run(stack, stack_config("dev"))}


@pytest.mark.parametrize(
    "authorizer", [None, "kafka.security.authorizer.AclAuthorizer"], ids=["absent", "zookeeper"]
)
def test_prod_requires_the_standard_authorizer_and_dev_does_not(
    run, authorizer: str | None
) -> None:
    stack = _kafka(handmade_stack(), with_broker_setting("authorizer.class.name", authorizer))
    assert levels_of(run, stack, AUTHORIZER) == {"dev": set(), "prod": {"mandatory"}}
    found = authorizer or "absent (no authorization)"
    assert _only(run, stack, AUTHORIZER).message.startswith(
        "StatefulSet streaming/kafka: broker config authorizer.class.name (env "
        f"SERVER_PROPERTIES) is {found}; required: "
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer. Fix: set "
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    )


# --- credentials-in-secrets ---------------------------------------------------------------

PASSWORD = "hunter2-do-not-print"


@pytest.mark.parametrize(
    "key",
    [
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.truststore.password",
        "ssl.keystore.key",
        "sasl.oauthbearer.client.secret",
        "consumer.sasl.password",
        "producer.ssl.key.password",
    ],
)
def test_a_literal_credential_in_a_properties_file_is_refused_in_every_stack(run, key: str) -> None:
    stack = changed(handmade_stack(), "processor-config", with_properties({key: PASSWORD}))
    assert levels_of(run, stack, CREDENTIALS) == {"dev": {"mandatory"}, "prod": {"mandatory"}}
    message = _only(run, stack, CREDENTIALS).message
    assert f"data[processor.properties] {key} (line " in message
    assert "is a literal credential (value not shown)" in message
    assert f"Fix: keep the credential in a Secret and refer to it: {key}=${{dir:" in message
    assert PASSWORD not in message


def test_a_sasl_jaas_config_with_a_password_is_refused(run) -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="topic-reconciler" password="{PASSWORD}";'
    )
    stack = changed(
        handmade_stack(),
        "topics-specs",
        with_properties({"sasl.jaas.config": jaas}, file="client.properties"),
    )
    message = _only(run, stack, CREDENTIALS).message
    assert message.startswith(
        "ConfigMap streaming/topics-specs: data[client.properties] sasl.jaas.config (line 7) is "
        "a JAAS configuration with a password option in clear (value not shown)"
    )
    assert PASSWORD not in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("sasl.password", "${env:SASL_PASSWORD}"),
        ("ssl.key.password", ""),
        ("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required;"),
        (
            "sasl.jaas.config",
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="a" '
            'password="${env:SASL_PASSWORD}";',
        ),
    ],
    ids=["env-reference", "empty", "jaas-without-password", "jaas-with-a-reference"],
)
def test_references_and_settings_without_a_credential_pass(run, key: str, value: str) -> None:
    edit = with_properties({key: value}, file="client.properties")
    assert run(changed(handmade_stack(), "topics-specs", edit)) == []


def test_references_to_mounted_secrets_and_a_private_key_in_a_secret_pass(run) -> None:
    """The handmade stack itself, as infra renders prod: sasl.password=${dir:...} in two
    ConfigMaps, that directory a mount of the user's Secret, the broker's key in kafka-tls."""
    stack = handmade_stack()
    tls = next(r for r in stack if r.name == "kafka-tls")
    assert base64.b64decode(tls.props["data"]["tls.key"]).decode() == PEM_PRIVATE_KEY_BLOCK
    assert _processor_properties(stack)["sasl.password"] == PASSWORD_FILE
    processor = next(r for r in stack if r.name == "processor")
    (user,) = [v for v in pod(processor)["volumes"] if v["name"] == "kafka-user"]
    assert user["secret"]["secretName"] == "kafka-user-page-view-counter"
    assert [v for v in run(stack, stack_config("dev")) if v.policy == CREDENTIALS] == []
    assert [v for v in run(stack) if v.policy == CREDENTIALS] == []


def test_a_password_from_an_env_var_set_by_a_secret_key_ref_passes(run) -> None:
    def from_env(r: Resource) -> None:
        first_container(r)["env"].append(
            {
                "name": "SASL_PASSWORD",
                "valueFrom": {
                    "secretKeyRef": {"name": "kafka-user-page-view-counter", "key": "password"}
                },
            }
        )

    stack = changed(handmade_stack(), "processor", from_env, ":StatefulSet")
    edit = with_properties({"sasl.password": "${env:SASL_PASSWORD}"})
    assert run(changed(stack, "processor-config", edit)) == []


@pytest.mark.parametrize("field", ["data", "binaryData"])
def test_a_private_key_anywhere_in_a_config_map_is_refused(run, field: str) -> None:
    def add_key(r: Resource) -> None:
        text = f"# the broker's key\n{PEM_PRIVATE_KEY_BLOCK}"
        encoded = base64.b64encode(text.encode()).decode() if field == "binaryData" else text
        r.props.setdefault(field, {})["broker.pem"] = encoded

    message = _only(run, changed(handmade_stack(), "topics-specs", add_key), CREDENTIALS).message
    assert message.startswith(
        "ConfigMap streaming/topics-specs: data[broker.pem] is a PEM private key block "
        "(-----BEGIN ... PRIVATE KEY-----); required: no private key in a ConfigMap. Fix: put "
        "the key in a Secret"
    )


def test_a_credential_as_a_config_map_key_is_refused(run) -> None:
    """A ConfigMap handed to a pod with envFrom holds its settings as keys."""

    def add_password(r: Resource) -> None:
        r.props["data"]["SASL_PASSWORD"] = PASSWORD

    message = _only(run, changed(handmade_stack(), "topics-specs", add_password), CREDENTIALS)
    assert "data[SASL_PASSWORD] is a literal credential (value not shown)" in message.message


def test_an_unreadable_properties_file_is_reported_rather_than_passed(run) -> None:
    def corrupt(r: Resource) -> None:
        r.props["data"]["client.properties"] += "sasl.password=\\u12\n"

    message = _only(run, changed(handmade_stack(), "topics-specs", corrupt), CREDENTIALS).message
    assert "data[client.properties] is unreadable (line 7: malformed \\uxxxx escape" in message


@pytest.mark.parametrize(
    ("workload", "name", "value", "found"),
    [
        ("kafka", "ssl.key.password", PASSWORD, "a literal credential (value not shown)"),
        ("kafka", "ssl.keystore.key", PASSWORD, "a literal credential (value not shown)"),
        (
            "kafka",
            "listener.name.client.scram-sha-512.sasl.jaas.config",
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'password="{PASSWORD}";',
            "a JAAS configuration with a password option in clear (value not shown)",
        ),
        ("processor", "SASL_PASSWORD", PASSWORD, "a literal credential (value not shown)"),
        ("processor", "TLS_PRIVATE_KEY", PASSWORD, "a literal credential (value not shown)"),
        ("processor", "API_TOKEN", UNKNOWN_STRING_VALUE, "a value computed by the program"),
    ],
    ids=[
        "key-password",
        "keystore-key",
        "jaas-password",
        "sasl-password",
        "private-key",
        "computed",
    ],
)
def test_a_secret_looking_env_var_with_a_literal_value_is_refused_in_every_stack(
    run, workload: str, name: str, value: str, found: str
) -> None:
    stack = changed(handmade_stack(), workload, with_env(name, value), ":StatefulSet")
    assert levels_of(run, stack, CREDENTIALS) == {"dev": {"mandatory"}, "prod": {"mandatory"}}
    message = _only(run, stack, CREDENTIALS).message
    container = "kafka" if workload == "kafka" else "processor"
    assert f"container {container} env {name} is {found}; required: valueFrom.secretKeyRef" in (
        message
    )
    assert f"Fix: take {name} from a Secret" in message
    assert PASSWORD not in message


def test_a_literal_password_in_an_init_container_is_refused(run) -> None:
    def init_container(r: Resource) -> None:
        pod(r)["initContainers"] = [
            {
                **first_container(r),
                "name": container_commands.FORMAT_STORAGE,
                "command": list(container_commands.format_storage().command),
                "env": [{"name": "sasl.password", "value": PASSWORD}],
            }
        ]

    stack = changed(handmade_stack(), "kafka", init_container, ":StatefulSet")
    assert "container format-storage env sasl.password" in (_only(run, stack, CREDENTIALS).message)
