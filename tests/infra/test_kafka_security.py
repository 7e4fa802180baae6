"""The prod stack's Kafka is encrypted, authenticated and authorised; dev says it is not."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from contract import acl_specs, container_commands
from contract.container_commands import FORMAT_SCRIPT
from contract.java_properties import load_properties
from contract.kafka_security import BROKER_PRINCIPAL, STANDARD_AUTHORIZER
from infra.config import build_stack_config
from infra.stack_settings import StackConfigError
from offline.render import RecordedStack, record_stack
from tests.infra.conftest import broker_settings, k8s_object, names_of, stack_config_of


def _app(stack: RecordedStack) -> str:
    """The processor's name and SCRAM user: the application id the stack sets."""
    return names_of(stack).application_id


def _users(stack: RecordedStack) -> tuple[str, ...]:
    """A secured stack's SCRAM users, in the order the program declares them."""
    return (_app(stack), "topic-reconciler", "observer", "broker-readiness")


def _config_map(stack: RecordedStack, prefix: str) -> dict[str, Any]:
    return next(
        o
        for o in stack.kubernetes_objects()
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith(prefix)
    )


def _pod(stack: RecordedStack, kind: str, name_prefix: str) -> dict[str, Any]:
    obj = next(
        o
        for o in stack.kubernetes_objects()
        if o["kind"] == kind and o["metadata"]["name"].startswith(name_prefix)
    )
    return obj["spec"]["template"]


def _volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod["spec"]["volumes"]}


def test_prod_listeners_are_tls_with_scram_for_clients_and_certificates_between_brokers(
    prod: RecordedStack,
) -> None:
    env = broker_settings(k8s_object(prod, "StatefulSet", "kafka"))
    assert env["listeners"] == "CLIENT://:9092,INTERNAL://:9094,CONTROLLER://:9093"
    assert env["listener.security.protocol.map"] == ("CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL")
    assert env["inter.broker.listener.name"] == "INTERNAL"
    # Both SCRAM mechanisms: a rotation moves from one to the other (test_scram_rotation.py).
    assert env["listener.name.client.sasl.enabled.mechanisms"] == ("SCRAM-SHA-256,SCRAM-SHA-512")
    for listener in ("internal", "controller"):
        assert env[f"listener.name.{listener}.ssl.client.auth"] == "required"
    assert env["ssl.keystore.location"] == "/etc/kafka/tls/tls-combined.pem"
    assert env["ssl.truststore.location"] == "/etc/kafka/tls/ca.crt"


def test_prod_denies_what_no_acl_allows_and_only_the_brokers_are_super_users(
    prod: RecordedStack,
) -> None:
    env = broker_settings(k8s_object(prod, "StatefulSet", "kafka"))
    assert env["authorizer.class.name"] == STANDARD_AUTHORIZER
    assert env["allow.everyone.if.no.acl.found"] == "false"
    assert env["super.users"] == BROKER_PRINCIPAL == "User:CN=kafka-broker"


def test_dev_runs_plaintext_without_users_as_its_stack_setting_says(dev: RecordedStack) -> None:
    assert dev.outputs["clientListener"] == "PLAINTEXT"
    env = broker_settings(k8s_object(dev, "StatefulSet", "kafka"))
    assert env["listener.security.protocol.map"] == (
        "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"
    )
    assert "authorizer.class.name" not in env
    assert not [o for o in dev.kubernetes_objects() if o["kind"] == "Secret"]
    assert "acls.json" not in _config_map(dev, "topics-")["data"]
    assert "security.protocol" not in load_properties(
        _config_map(dev, f"{_app(dev)}-config-")["data"]["processor.properties"]
    )


def test_brokers_mount_their_certificate_from_the_tls_secret(prod: RecordedStack) -> None:
    pod = _pod(prod, "StatefulSet", "kafka")
    assert _volumes(pod)["tls"]["secret"]["secretName"] == "kafka-tls"
    for container in pod["spec"]["containers"]:
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        if container["name"] == "broker-readiness":  # the processor's image: no broker key
            assert "tls" not in mounts
            continue
        assert mounts["tls"] == {"name": "tls", "mountPath": "/etc/kafka/tls", "readOnly": True}
    # A renewed certificate changes the template: the brokers roll and read it.
    assert pod["metadata"]["annotations"]["stateful-streaming.io/certificate"].startswith(
        "certificate-"
    )


def test_scram_users_are_bootstrapped_when_the_storage_is_formatted(prod: RecordedStack) -> None:
    pod = _pod(prod, "StatefulSet", "kafka")
    init = {c["name"]: c for c in pod["spec"]["initContainers"]}["format-storage"]
    assert init["command"] == ["sh", "-c", FORMAT_SCRIPT]
    assert "--add-scram" in FORMAT_SCRIPT and "--ignore-formatted" in FORMAT_SCRIPT
    mounts = {m["mountPath"]: m["name"] for m in init["volumeMounts"]}
    assert mounts["/etc/kafka/users"] == "users" and mounts["/var/lib/kafka/data"] == "data"
    # One password file per user of the ACL specs, from that user's Secret.
    sources = _volumes(pod)["users"]["projected"]["sources"]
    files = {s["secret"]["items"][0]["path"]: s["secret"]["name"] for s in sources}
    assert files == {user: f"kafka-user-{user}" for user in _users(prod)}
    # The format reads the broker's own settings and identity, from the same variables.
    (broker, *_) = pod["spec"]["containers"]
    shared = ("POD_NAME", "CLUSTER_ID", "KAFKA_NODE_ID", "SERVER_PROPERTIES")
    assert [e for e in init["env"] if e["name"] in shared] == [
        e for e in broker["env"] if e["name"] in shared
    ]
    assert "server.properties" not in k8s_object(prod, "ConfigMap", "kafka-bootstrap")["data"]


def test_the_readiness_sidecar_holds_no_broker_key_and_connects_as_its_own_user(
    prod: RecordedStack,
) -> None:
    pod = _pod(prod, "StatefulSet", "kafka")
    sidecar = {c["name"]: c for c in pod["spec"]["containers"]}["broker-readiness"]
    volumes = _volumes(pod)
    mounted = {m["name"]: volumes[m["name"]] for m in sidecar["volumeMounts"]}
    # Of the brokers' TLS Secret only the CA; no projected passwords; its own user's Secret.
    assert mounted["kafka-ca"]["secret"] == {
        "secretName": "kafka-tls",
        "defaultMode": 0o440,
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    # The whole of its own Secret: every mechanism's password, so a rotation changes the files
    # in place and never the brokers' pod template (which would roll them before the Job that
    # sets the new credential can run).
    assert mounted["kafka-user"]["secret"] == {
        "secretName": "kafka-user-broker-readiness",
        "defaultMode": 0o440,
    }
    assert "tls" not in mounted and "users" not in mounted
    assert all("projected" not in volume for volume in mounted.values())
    assert not any("valueFrom" in e and "secretKeyRef" in e["valueFrom"] for e in sidecar["env"])
    args = sidecar["args"]
    # Its own SCRAM user on the CLIENT listener, from a properties file without a secret.
    assert args[args.index("--bootstrap-server") + 1] == "localhost:9092"
    config = args[args.index("--command-config") + 1]
    assert config == "/etc/kafka/bootstrap/readiness-client.properties"
    bootstrap = k8s_object(prod, "ConfigMap", "kafka-bootstrap")["data"]
    client = load_properties(bootstrap["readiness-client.properties"])
    assert client["sasl.username"] == acl_specs.BROKER_READINESS_USER
    assert client["sasl.password"] == "${dir:/etc/kafka-user:password}"
    assert client["ssl.ca.location"] == "/etc/kafka-ca/ca.crt"
    assert "--tls-dir" not in args and "--grant-acls" not in args
    # While a rotation is under way, the previous revision's login (still valid until retired).
    fallback = args[args.index("--fallback-command-config") + 1]
    assert fallback == "/etc/kafka/bootstrap/readiness-previous-client.properties"
    previous = load_properties(bootstrap["readiness-previous-client.properties"])
    assert previous == {
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.password": "${dir:/etc/kafka-user:scram-sha-256}",
    }
    assert client["sasl.mechanism"] == "SCRAM-SHA-512"  # revision 1's
    # Describe only: the cluster and the topics a broker hosts.
    reconciled = acl_specs.loads(_config_map(prod, "topics-")["data"]["acls.json"])
    (readiness,) = [u for u in reconciled if u.name == acl_specs.BROKER_READINESS_USER]
    assert {acl.operation for acl in readiness.acls} == {acl_specs.Operation.DESCRIBE}
    assert {acl.resource_type for acl in readiness.acls} == {
        acl_specs.ResourceType.TOPIC,
        acl_specs.ResourceType.CLUSTER,
    }


def _acls_of_lines(lines: list[str]) -> set[tuple[str, str, str, str, str]]:
    """What `kafka-acls.sh --add <line>` adds for each line: (principal, type, name, pattern,
    operation), operations in contract.acl_specs' spelling."""
    flags = {"--topic": "TOPIC", "--group": "GROUP", "--transactional-id": "TRANSACTIONAL_ID"}
    found = set()
    for line in lines:
        words = line.split()
        pairs = list(zip(words[::2], words[1::2], strict=False))
        principal = dict(pairs)["--allow-principal"]
        operations = [
            re.sub(r"(?<!^)(?=[A-Z])", "_", v).upper() for k, v in pairs if k == "--operation"
        ]
        if words[-1] == "--cluster":
            resources = [("CLUSTER", acl_specs.CLUSTER_RESOURCE, "LITERAL")]
        else:
            pattern = dict(pairs)["--resource-pattern-type"].upper()
            resources = [(flags[k], v, pattern) for k, v in pairs if k in flags]
        found |= {(principal, t, n, p, op) for t, n, p in resources for op in operations}
    return found


def test_the_bootstrap_acls_are_granted_as_the_broker_from_the_brokers_own_image(
    prod: RecordedStack,
) -> None:
    pod = _pod(prod, "StatefulSet", "kafka")
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    grant, kafka = containers["grant-acls"], containers["kafka"]
    assert grant["image"] == kafka["image"]
    assert {m["name"] for m in grant["volumeMounts"]} >= {"tls", "bootstrap", "tmp"}
    script = grant["command"][2]
    assert grant["command"][:2] == ["sh", "-c"]
    assert container_commands.KAFKA_ACLS in script and "localhost:9094" in script
    assert "/etc/kafka/bootstrap/bootstrap-acls.args" in script
    # Its probes: the loop runs (the sidecar's DescribeAcls gates the pod's readiness).
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert "bootstrap-acls.alive" in " ".join(grant[probe]["exec"]["command"])
    bootstrap = k8s_object(prod, "ConfigMap", "kafka-bootstrap")["data"]
    client = load_properties(bootstrap["grant-client.properties"])
    assert client["ssl.keystore.location"] == "/etc/kafka/tls/tls-combined.pem"
    assert client["security.protocol"] == "SSL"
    # Exactly the reconciler's and the readiness user's ACLs of the reconciled specs.
    reconciled = acl_specs.loads(_config_map(prod, "topics-")["data"]["acls.json"])
    wanted = [u for u in reconciled if u.name in ("topic-reconciler", "broker-readiness")]
    assert sorted(acl_specs.loads(bootstrap["bootstrap-acls.json"]), key=lambda u: u.name) == (
        sorted(wanted, key=lambda u: u.name)
    )
    # The script's kafka-acls.sh lines add exactly those, grouped: few JVMs per round.
    lines = bootstrap["bootstrap-acls.args"].splitlines()
    assert "--allow-principal User:broker-readiness --operation Describe --cluster" in lines
    assert len(lines) == 6
    assert _acls_of_lines(lines) == {
        (a.principal, a.resource_type.value, a.resource_name, a.pattern_type.value, a.operation)
        for user in wanted
        for a in user.acls
    }
    # An ACL change reaches the mounted files without rolling the brokers.
    assert "bootstrap-acls" not in json.dumps(pod["metadata"])
    # The sidecar checks them before it says ready.
    sidecar = containers["broker-readiness"]
    args = sidecar["args"]
    assert args[args.index("--bootstrap-acls") + 1] == "/etc/kafka/bootstrap/bootstrap-acls.json"


def test_a_plaintext_stack_grants_nothing(dev: RecordedStack) -> None:
    pod = _pod(dev, "StatefulSet", "kafka")
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    assert "grant-acls" not in containers
    sidecar = containers["broker-readiness"]
    assert "--bootstrap-acls" not in sidecar["args"] and "volumeMounts" not in sidecar


def test_each_workload_connects_as_its_own_user_with_a_password_file(prod: RecordedStack) -> None:
    app = _app(prod)
    processor = load_properties(_config_map(prod, f"{app}-config-")["data"]["processor.properties"])
    reconciler = load_properties(_config_map(prod, "topics-")["data"]["client.properties"])
    for settings, user in ((processor, app), (reconciler, "topic-reconciler")):
        assert settings["security.protocol"] == "SASL_SSL"
        assert settings["sasl.mechanism"] == "SCRAM-SHA-512"
        assert settings["sasl.username"] == user
        assert settings["sasl.password"] == "${dir:/etc/kafka-user:password}"
        assert settings["ssl.ca.location"] == "/etc/kafka-ca/ca.crt"
    for kind, prefix, user in (("StatefulSet", app, app), ("Job", "topics-", "topic-reconciler")):
        volumes = _volumes(_pod(prod, kind, prefix))
        assert volumes["kafka-user"]["secret"]["secretName"] == f"kafka-user-{user}"
        # The CA only: no client mounts the brokers' key.
        assert volumes["kafka-ca"]["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]


def test_the_reconciler_job_reconciles_the_acl_specs_and_every_users_password(
    prod: RecordedStack,
) -> None:
    # The stack file's configuration, not the presets': the users are named after its names.
    config = stack_config_of(prod)
    data = _config_map(prod, "topics-")["data"]
    assert acl_specs.loads(data["acls.json"]) == config.kafka_users
    assert [u.name for u in config.kafka_users] == list(_users(prod))
    container = _pod(prod, "Job", "topics-")["spec"]["containers"][0]
    assert container["args"][7:] == [
        "--acls",
        "/etc/topics/acls.json",
        "--command-config",
        "/etc/topics/client.properties",
        "--fallback-command-config",
        "/etc/topics/previous-client.properties",
        "--scram-passwords-dir",
        "/etc/kafka/users",
        "--scram-mechanism",
        "SCRAM-SHA-512",
    ]


def test_no_secret_value_appears_outside_a_secret(prod: RecordedStack) -> None:
    # Passwords and keys (user names are not secret, but travel in the same Secret).
    users = _users(prod)
    secrets = [v for v in prod.secret_values() if v not in users]
    assert len(secrets) >= len(users) + 4  # a password per user, the key, certificates
    for resource in prod.resources:
        if resource.type == "kubernetes:core/v1:Secret":
            continue
        text = json.dumps(resource.props)
        leaked = [value[:12] for value in secrets if value in text]
        assert not leaked, f"{resource.type} {resource.name} holds secret values {leaked}"
    # And the manifests written for review hold none at all.
    written = json.dumps(prod.kubernetes_objects())
    assert not [value for value in secrets if value in written]


def test_rotating_credentials_renews_passwords_reruns_the_job_and_rolls_the_processor(
    prod: RecordedStack,
) -> None:
    rotated = record_stack("prod", {"security": {"credentialsRevision": 2}})
    keepers = {
        r.name: r.props["keepers"]
        for r in rotated.resources
        if r.type == "random:index/randomPassword:RandomPassword"
    }
    # Revision 2 renews each user's SCRAM-SHA-256 password and keeps revision 1's SHA-512 one.
    users = _users(prod)
    assert keepers == {
        **{f"kafka-credentials-{u}-scram-sha-256": {"credentialsRevision": "2"} for u in users},
        **{f"kafka-credentials-{u}": {"credentialsRevision": "1"} for u in users},
    }
    before, after = (
        _pod(s, "StatefulSet", _app(s))["metadata"]["annotations"] for s in (prod, rotated)
    )
    assert before["stateful-streaming.io/credentials-revision"] == "1"
    assert after["stateful-streaming.io/credentials-revision"] == "2"
    assert prod.outputs["topicJob"] != rotated.outputs["topicJob"]


def test_cert_manager_issues_the_same_secret_layout(prod: RecordedStack) -> None:
    recorded = record_stack(
        "prod", {"security": {"certificates": "cert-manager", "issuerName": "kafka-ca"}}
    )
    certificate = k8s_object(recorded, "Certificate", "kafka-tls")
    spec = certificate["spec"]
    assert certificate["apiVersion"] == "cert-manager.io/v1"
    assert spec["secretName"] == "kafka-tls"
    assert spec["commonName"] == "kafka-broker"
    assert spec["privateKey"]["encoding"] == "PKCS8"
    assert spec["additionalOutputFormats"] == [{"type": "CombinedPEM"}]
    assert spec["issuerRef"] == {
        "name": "kafka-ca",
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    assert "kafka-0.kafka-headless.streaming.svc.cluster.local" in spec["dnsNames"]
    assert not [r for r in recorded.resources if r.type.startswith("tls:")]
    assert not [
        o
        for o in recorded.kubernetes_objects()
        if o["kind"] == "Secret" and o["metadata"]["name"] == "kafka-tls"
    ]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            {"security": {"clientListener": "SSL"}},
            ["stateful-streaming:security.clientListener = 'SSL'", "PLAINTEXT, SASL_SSL"],
        ),
        (
            {"security": {"certificates": "cert-manager"}},
            ["stateful-streaming:security.issuerName = ''", "CA issuer"],
        ),
        (
            {"processor": {"properties": {"sasl.password": "hunter2"}}},
            [
                "stateful-streaming:processor.properties.sasl.password = '****'",
                "never goes into plain stack config",
            ],
        ),
        (
            {
                "processor": {
                    "properties": {
                        "spark.driver.extraJavaOptions": (
                            "-XX:TieredStopAtLevel=1 -Djavax.net.ssl.keyStorePassword=hunter2"
                        )
                    }
                }
            },
            [
                "stateful-streaming:processor.properties.spark.driver.extraJavaOptions = '****'",
                "holds a credential in clear in its -Djavax.net.ssl.keyStorePassword (value not "
                "shown)",
                "never goes into plain stack config",
                "-Djavax.net.ssl.keyStorePassword=${dir:DIRECTORY:FILE}",
            ],
        ),
    ],
)
def test_a_bad_security_setting_fails_naming_it(
    override: dict[str, Any], expected: list[str]
) -> None:
    with pytest.raises(StackConfigError) as error:
        build_stack_config("prod", override)
    for text in expected:
        assert text in str(error.value)
    assert "hunter2" not in str(error.value)


def test_a_jvm_option_referring_to_a_mounted_secret_is_accepted_in_stack_config() -> None:
    options = "-Djavax.net.ssl.keyStorePassword=${dir:/etc/keystore:password}"
    config = build_stack_config(
        "prod", {"processor": {"properties": {"spark.driver.extraJavaOptions": options}}}
    )
    assert config.processor.properties["spark.driver.extraJavaOptions"] == options
