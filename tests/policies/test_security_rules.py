"""The security rules of issue 14, passing and failing, on the handmade stack (prod's secured
shape for issue 14) and its dev counterpart, per stack config."""

from __future__ import annotations

import pytest

from app.kafka_security import broker_security_configs, listeners, scram_client_configs
from policies.evaluate import Violation
from policies.rules.java_properties import load_properties
from policies.rules.kafka_cluster import env_name
from tests.policies.conftest import Evaluate, stack_config
from tests.policies.handmade_stack import (
    Edit,
    Resource,
    changed,
    first_container,
    handmade_stack,
    with_env,
    with_properties,
)

LISTENERS = "kafka-listener-encryption"
AUTHORIZER = "kafka-authorizer"
SECURITY_RULES = {LISTENERS, AUTHORIZER}
PROTOCOL_MAP = "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"
SECURED_MAP = "CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL"
CA_FILE = "/etc/kafka-ca/ca.crt"
# What the dev stack renders (issue 14): the same listeners, none of them secured, and no
# authorizer, ACLs or credentials.
DEV_MAP = "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"
_PROD_ONLY_ENV = (
    "KAFKA_AUTHORIZER_CLASS_NAME",
    "KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND",
    "KAFKA_SUPER_USERS",
    "KAFKA_SSL_KEYSTORE_TYPE",
    "KAFKA_SSL_KEYSTORE_LOCATION",
    "KAFKA_SSL_TRUSTSTORE_TYPE",
    "KAFKA_SSL_TRUSTSTORE_LOCATION",
    "KAFKA_LISTENER_NAME_CLIENT_SASL_ENABLED_MECHANISMS",
    "KAFKA_LISTENER_NAME_CLIENT_SCRAM___SHA___512_SASL_JAAS_CONFIG",
    "KAFKA_LISTENER_NAME_INTERNAL_SSL_CLIENT_AUTH",
    "KAFKA_LISTENER_NAME_CONTROLLER_SSL_CLIENT_AUTH",
)


def _kafka(stack: list[Resource], *edits: Edit) -> list[Resource]:
    for edit in edits:
        stack = changed(stack, "kafka", edit, ":StatefulSet")
    return stack


def _findings(run: Evaluate, stack: list[Resource], config: str = "prod") -> list[Violation]:
    """The security rules' findings (asserting no other rule fired)."""
    violations = run(stack, stack_config(config))
    assert {v.policy for v in violations} <= SECURITY_RULES, violations
    return violations


def _only(run: Evaluate, stack: list[Resource], rule: str, config: str = "prod") -> Violation:
    """The one finding of `rule`, and no finding of any other rule."""
    (violation,) = _findings(run, stack, config)
    assert violation.policy == rule
    assert "Fix: " in violation.message
    return violation


def _levels(run: Evaluate, stack: list[Resource], rule: str) -> dict[str, set[str]]:
    return {
        config: {v.level for v in run(stack, stack_config(config)) if v.policy == rule}
        for config in ("dev", "prod")
    }


def dev_stack() -> list[Resource]:
    """The handmade stack as the dev stack renders it: PLAINTEXT, no SASL, no ACLs."""
    stack = _kafka(
        handmade_stack(),
        with_env(PROTOCOL_MAP, DEV_MAP),
        *(with_env(name, None) for name in _PROD_ONLY_ENV),
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


def _kafka_env(stack: list[Resource]) -> dict[str, str]:
    kafka = next(r for r in stack if r.name == "kafka")
    return {e["name"]: e["value"] for e in first_container(kafka)["env"] if "value" in e}


def _processor_properties(stack: list[Resource]) -> dict[str, str]:
    config_map = next(r for r in stack if r.name == "processor-config")
    return load_properties(config_map.props["data"]["processor.properties"])


def _rendered_broker_env(client_listener: str) -> dict[str, str]:
    """The brokers' security env as the Pulumi program renders it from app.kafka_security."""
    brokers = broker_security_configs(client_listener, "/etc/kafka/tls")
    return {
        **{env_name(key): value for key, value in brokers.items()},
        "KAFKA_LISTENERS": listeners(9092, 9094, 9093),
    }


def test_the_handmade_prod_stack_is_configured_as_app_kafka_security_renders_it() -> None:
    """So the rules are proven on what the Pulumi program will render (issue 14)."""
    stack = handmade_stack()
    expected = _rendered_broker_env("SASL_SSL")
    env = _kafka_env(stack)
    assert {name: env.get(name) for name in expected} == expected
    # dev_stack takes away exactly what prod adds
    assert set(_PROD_ONLY_ENV) == set(expected) - set(_rendered_broker_env("PLAINTEXT"))
    clients = scram_client_configs("page-view-counter", "${env:SASL_PASSWORD}", CA_FILE)
    properties = _processor_properties(stack)
    assert {key: properties.get(key) for key in clients} == clients


def test_the_handmade_dev_stack_is_configured_as_app_kafka_security_renders_it() -> None:
    stack = dev_stack()
    expected = _rendered_broker_env("PLAINTEXT")
    env = _kafka_env(stack)
    assert {name: env.get(name) for name in expected} == expected
    assert not set(_PROD_ONLY_ENV) & set(env)
    assert "security.protocol" not in _processor_properties(stack)


# --- kafka-listener-encryption ------------------------------------------------------------


@pytest.mark.parametrize(
    ("protocol_map", "extra_env", "expected"),
    [
        (
            "CLIENT:SASL_PLAINTEXT,INTERNAL:SSL,CONTROLLER:SSL",
            {},
            "client listener CLIENT on port 9092 (env KAFKA_LISTENERS, "
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP) is SASL_PLAINTEXT",
        ),
        (
            "CLIENT:SSL,INTERNAL:SSL,CONTROLLER:SSL",
            {},
            "client listener CLIENT on port 9092 (env KAFKA_LISTENERS, "
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP) is SSL with ssl.client.auth=none; required: "
            "SASL_SSL, or SSL with listener.name.client.ssl.client.auth=required (env "
            "KAFKA_LISTENER_NAME_CLIENT_SSL_CLIENT_AUTH)",
        ),
        (
            "CLIENT:SSL,INTERNAL:SSL,CONTROLLER:SSL",
            {"KAFKA_SSL_CLIENT_AUTH": "requested"},
            "client listener CLIENT on port 9092 (env KAFKA_LISTENERS, "
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP) is SSL with ssl.client.auth=requested",
        ),
        (
            "CLIENT:SASL_SSL,INTERNAL:PLAINTEXT,CONTROLLER:SSL",
            {},
            "inter-broker listener INTERNAL (env KAFKA_INTER_BROKER_LISTENER_NAME, "
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP) is PLAINTEXT; required: SSL or SASL_SSL",
        ),
        (
            "CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SASL_PLAINTEXT",
            {},
            "controller listener CONTROLLER (env KAFKA_CONTROLLER_LISTENER_NAMES, "
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP) is SASL_PLAINTEXT; required: SSL or SASL_SSL",
        ),
        (
            "CLIENT:SASL_SSL,CONTROLLER:SSL",
            {},
            "inter-broker listener INTERNAL (env KAFKA_INTER_BROKER_LISTENER_NAME, "
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP) is absent from "
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
        ),
        (
            SECURED_MAP,
            {"KAFKA_INTER_BROKER_LISTENER_NAME": None},
            "broker config security.inter.broker.protocol (env "
            "KAFKA_SECURITY_INTER_BROKER_PROTOCOL) is PLAINTEXT",
        ),
        (
            SECURED_MAP,
            {"KAFKA_LISTENERS": "INTERNAL://:9094,CONTROLLER://:9093"},
            "the listener on the client port 9092 (env KAFKA_LISTENERS) is absent (listeners "
            "INTERNAL://:9094,CONTROLLER://:9093)",
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
        "nothing-on-the-client-port",
    ],
)
def test_a_listener_without_tls_or_client_authentication_is_reported(
    run, protocol_map: str, extra_env: dict[str, str | None], expected: str
) -> None:
    edits = [with_env(name, value) for name, value in extra_env.items()]
    stack = _kafka(handmade_stack(), with_env(PROTOCOL_MAP, protocol_map), *edits)
    violation = _only(run, stack, LISTENERS)
    assert violation.message.startswith(f"StatefulSet streaming/kafka: {expected}")


@pytest.mark.parametrize(
    ("protocol_map", "client_auth_env"),
    [
        ("CLIENT:SSL,INTERNAL:SSL,CONTROLLER:SSL", "KAFKA_LISTENER_NAME_CLIENT_SSL_CLIENT_AUTH"),
        ("CLIENT:SSL,INTERNAL:SSL,CONTROLLER:SSL", "KAFKA_SSL_CLIENT_AUTH"),
        ("CLIENT:SASL_SSL,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL", None),
    ],
    ids=["mutual-tls-on-the-listener", "mutual-tls-broker-wide", "sasl-ssl-everywhere"],
)
def test_mutual_tls_or_sasl_ssl_listeners_pass(
    run, protocol_map: str, client_auth_env: str | None
) -> None:
    edits = [with_env(PROTOCOL_MAP, protocol_map)]
    if client_auth_env:
        edits.append(with_env(client_auth_env, "required"))
    assert run(_kafka(handmade_stack(), *edits)) == []


def test_the_client_listener_is_found_by_the_configured_port(run) -> None:
    stack = _kafka(
        handmade_stack(),
        with_env(
            "KAFKA_LISTENERS", "CLIENT://:9095,PLAIN://:9092,INTERNAL://:9094,CONTROLLER://:9093"
        ),
        with_env(PROTOCOL_MAP, f"{SECURED_MAP},PLAIN:PLAINTEXT"),
    )
    assert "client listener PLAIN on port 9092" in _only(run, stack, LISTENERS).message
    config = stack_config("prod")
    config[LISTENERS]["clientPort"] = 9095
    assert run(stack, config) == []


def test_the_dev_stack_gets_one_advisory_per_plaintext_listener_and_prod_would_be_blocked(
    run,
) -> None:
    stack = dev_stack()
    dev = _findings(run, stack, "dev")
    assert {(v.policy, v.level) for v in dev} == {(LISTENERS, "advisory")}
    assert sorted(v.message.split(" (env")[0] for v in dev) == [
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
    stack = _kafka(handmade_stack(), with_env("KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND", "true"))
    assert _levels(run, stack, AUTHORIZER) == {"dev": {"advisory"}, "prod": {"mandatory"}}
    message = _only(run, stack, AUTHORIZER).message
    assert "set KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND=false" in message


def test_allow_everyone_without_an_authorizer_is_left_to_the_missing_authorizer(run) -> None:
    stack = _kafka(
        dev_stack(),
        with_env("KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND", "true"),
    )
    assert AUTHORIZER not in {v.policy for v in run(stack, stack_config("dev"))}


@pytest.mark.parametrize(
    "authorizer", [None, "kafka.security.authorizer.AclAuthorizer"], ids=["absent", "zookeeper"]
)
def test_prod_requires_the_standard_authorizer_and_dev_does_not(
    run, authorizer: str | None
) -> None:
    stack = _kafka(handmade_stack(), with_env("KAFKA_AUTHORIZER_CLASS_NAME", authorizer))
    assert _levels(run, stack, AUTHORIZER) == {"dev": set(), "prod": {"mandatory"}}
    found = authorizer or "absent (no authorization)"
    assert _only(run, stack, AUTHORIZER).message.startswith(
        "StatefulSet streaming/kafka: broker config authorizer.class.name (env "
        f"KAFKA_AUTHORIZER_CLASS_NAME) is {found}; required: "
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer. Fix: set "
        "KAFKA_AUTHORIZER_CLASS_NAME=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    )


@pytest.mark.parametrize(
    ("super_users", "levels"),
    [
        ("User:CN=kafka-broker;User:ANONYMOUS", {"dev": {"advisory"}, "prod": {"mandatory"}}),
        ("User:*", {"dev": {"advisory"}, "prod": {"mandatory"}}),
        (None, {"dev": set(), "prod": {"mandatory"}}),
    ],
    ids=["anonymous", "wildcard", "absent"],
)
def test_super_users_are_named_principals_and_prod_needs_them(
    run, super_users: str | None, levels: dict[str, set[str]]
) -> None:
    stack = _kafka(handmade_stack(), with_env("KAFKA_SUPER_USERS", super_users))
    assert _levels(run, stack, AUTHORIZER) == levels
    message = _only(run, stack, AUTHORIZER).message
    assert f"super.users (env KAFKA_SUPER_USERS) is {super_users or 'absent'}; required: " in (
        message
    )
    assert "set KAFKA_SUPER_USERS=User:CN=kafka-broker" in message


def test_several_named_super_users_pass(run) -> None:
    stack = _kafka(
        handmade_stack(), with_env("KAFKA_SUPER_USERS", "User:CN=kafka-broker;User:CN=admin")
    )
    assert run(stack) == []
