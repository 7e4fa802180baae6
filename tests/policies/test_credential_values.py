"""Credentials by value (docs/security.md): `credentials-in-secrets` finds a credential inside
a value whose own key says nothing (JVM options, command lines, JSON/YAML/.env/JAAS text), on
the real `pulumi_policy` argument objects, and the rendered stacks keep passing."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from contract.credential_values import CredentialAssignment, find_credentials
from policies.evaluate import Violation
from tests.policies.conftest import Evaluate, stack_config
from tests.policies.handmade_stack import (
    NAMESPACE,
    Resource,
    changed,
    first_container,
    handmade_stack,
    pod,
    with_env,
    with_properties,
)

CREDENTIALS = "credentials-in-secrets"
PASSWORD = "hunter2-do-not-print"
FROM_SECRET = {"secretKeyRef": {"name": "kafka-user-page-view-counter", "key": "password"}}


def _findings(run: Evaluate, stack: list[Any], stack_name: str = "prod") -> list[Violation]:
    return [v for v in run(stack, stack_config(stack_name)) if v.policy == CREDENTIALS]


def _only(run: Evaluate, stack: list[Any]) -> str:
    """The one credentials finding, refused in every stack, which never shows the password."""
    by_stack = {name: _findings(run, stack, name) for name in ("dev", "prod")}
    for found in by_stack.values():
        assert len(found) == 1, [v.message for v in found]
        assert found[0].level == "mandatory"
        assert PASSWORD not in found[0].message
    return by_stack["prod"][0].message


def _keys(text: str, **context: Any) -> list[str]:
    return [found.key for found in find_credentials(text, **context)]


# --- the finder itself ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (
            f"-XX:+UseG1GC -Djavax.net.ssl.keyStorePassword={PASSWORD}",
            "-Djavax.net.ssl.keyStorePassword",
        ),
        (f"-Dconsumer.ssl.key.password={PASSWORD}", "-Dconsumer.ssl.key.password"),
        (f"--password {PASSWORD}", "--password"),
        (f"--sasl-password={PASSWORD}", "--sasl-password"),
        (f"tool --password \\\n  {PASSWORD}", "--password"),
        (f"sasl.password={PASSWORD} --verbose", "sasl.password"),
        (f'{{"user": "a", "password": "{PASSWORD}"}}', "password"),
        (f"sasl:\n  password: {PASSWORD}\n", "password"),
        (f"export KEY_PASSWORD={PASSWORD}\n", "KEY_PASSWORD"),
        (f'kafka {{ password = "{PASSWORD}" }}', "password"),
        (f'PlainLoginModule required username="a" password="{PASSWORD}";', "password"),
        (f'PlainLoginModule required user_admin="{PASSWORD}";', "user_admin"),
        (f"--token ${{env:A}}{PASSWORD}", "--token"),
    ],
    ids=[
        "jvm-option",
        "jvm-option-client-prefix",
        "flag-space-value",
        "flag-equals-value",
        "flag-value-past-a-line-continuation",
        "inline-setting",
        "json",
        "yaml",
        "dotenv",
        "hocon",
        "jaas-password",
        "jaas-plain-user",
        "literal-after-a-reference",
    ],
)
def test_the_finder_names_the_key_of_a_credential_in_clear_and_never_its_value(
    text: str, key: str
) -> None:
    (found,) = find_credentials(text)
    assert found.key == key
    assert PASSWORD not in repr(found)


@pytest.mark.parametrize(
    "text",
    [
        "-Dlog4j2.configurationFile=/etc/log4j2.xml -XX:TieredStopAtLevel=1",
        "-Djavax.net.ssl.keyStorePassword=${dir:/etc/keystore:password}",
        "--password ${env:SASL_PASSWORD}",
        "--password-file /etc/kafka-user/password",
        "--scram-passwords-dir /etc/kafka/users",
        '--password "$(cat /etc/kafka-user/password)"',
        "--password $(< /etc/kafka-user/password)",
        '--password "$SASL_PASSWORD"',
        "--password --verbose",
        '"SCRAM-SHA-512=[name=$(basename "$file"),password=$(cat "$file")]"',
        '{"password": null, "token": "", "sasl.password": "${env:SASL_PASSWORD}"}',
        "password:\nssl.truststore.location: /etc/kafka-ca/ca.crt\n",
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "sasl.password=${dir:/etc/secrets:password}",
        "CLIENT://$(POD_NAME).kafka-headless:9092,User:CN=kafka-broker",
    ],
    ids=[
        "benign-jvm-options",
        "dir-reference",
        "env-reference",
        "password-file",
        "passwords-dir",
        "shell-reads-a-file",
        "shell-redirects-a-file",
        "shell-variable",
        "flag-without-value",
        "format-storage-scram-user",
        "json-null-empty-reference",
        "yaml-empty",
        "jaas-without-options",
        "reference-naming-a-secrets-directory",
        "listeners-and-principals",
    ],
)
def test_the_finder_passes_references_pointers_and_benign_values(text: str) -> None:
    assert find_credentials(text) == []


def test_a_kubelet_expansion_passes_only_for_an_env_var_from_a_secret() -> None:
    text = "-Djavax.net.ssl.keyStorePassword=$(KEYSTORE_PASSWORD)"
    assert _keys(text, secret_vars={"KEYSTORE_PASSWORD"}) == []
    assert _keys(text, literal_vars={"KEYSTORE_PASSWORD"}) == ["-Djavax.net.ssl.keyStorePassword"]
    assert _keys(text) == ["-Djavax.net.ssl.keyStorePassword"]  # unset: passed on as the text


def test_a_shell_variable_with_a_literal_value_in_the_pod_spec_is_a_credential_in_clear() -> None:
    assert _keys('--password "$PW"', literal_vars={"PW"}) == ["--password"]
    assert _keys('--password "$PW"', secret_vars={"PW"}) == []


def test_the_finder_gives_the_line_of_each_assignment() -> None:
    text = f"user: a\npassword: {PASSWORD}\ntoken: ${{env:TOKEN}}\nsecret: {PASSWORD}\n"
    assert find_credentials(text) == [
        CredentialAssignment("password", 2),
        CredentialAssignment("secret", 4),
    ]


# --- processor.properties: a credential inside a setting's value ----------------------------


@pytest.mark.parametrize(
    ("setting", "option"),
    [
        ("spark.driver.extraJavaOptions", "-Djavax.net.ssl.keyStorePassword"),
        ("spark.driver.extraJavaOptions", "-Dconsumer.ssl.key.password"),
        ("spark.executor.extraJavaOptions", "-Dproducer.sasl.password"),
        ("consumer.plugin.options", "--sasl-password"),
    ],
    ids=["jvm-key-store", "jvm-consumer-prefix", "jvm-producer-prefix", "prefixed-setting"],
)
def test_a_credential_inside_a_properties_value_is_refused_naming_setting_and_option(
    run, setting: str, option: str
) -> None:
    value = f"-XX:TieredStopAtLevel=1 {option}={PASSWORD}"
    stack = changed(handmade_stack(), "processor-config", with_properties({setting: value}))
    message = _only(run, stack)
    assert message.startswith(
        f"ConfigMap streaming/page-view-counter-config: data[processor.properties] {setting} "
        f"(line 25) is a value with a literal credential in {option} (value not shown); "
        "required: a ${dir:DIRECTORY:FILE} or ${env:NAME} reference in its place. Fix: keep the "
        f"credential in a Secret and refer to it inside the value: {option}=${{dir:DIRECTORY:FILE}}"
    )


@pytest.mark.parametrize(
    "value",
    [
        "-Dlog4j2.configurationFile=/etc/processor/log4j2.xml -XX:TieredStopAtLevel=1",
        "-Djavax.net.ssl.keyStorePassword=${dir:/etc/keystore:password}",
        "-Djavax.net.ssl.trustStore=/etc/kafka-ca/truststore.p12",
    ],
    ids=["benign-jvm-options", "dir-reference", "trust-store-without-password"],
)
def test_benign_or_referenced_jvm_options_in_properties_pass(run, value: str) -> None:
    edit = with_properties({"spark.driver.extraJavaOptions": value})
    assert _findings(run, changed(handmade_stack(), "processor-config", edit)) == []


# --- env values, command and args of every workload -----------------------------------------


@pytest.mark.parametrize(
    ("workload", "name", "option"),
    [
        ("kafka", "KAFKA_OPTS", "-Djavax.net.ssl.trustStorePassword"),
        ("processor", "JAVA_TOOL_OPTIONS", "-Djavax.net.ssl.keyStorePassword"),
        ("processor", "EXTRA_ARGS", "--sasl-password"),
    ],
    ids=["kafka-opts", "java-tool-options", "any-env-var"],
)
def test_a_credential_inside_any_env_value_is_refused(
    run, workload: str, name: str, option: str
) -> None:
    edit = with_env(name, f"-Xss4m {option}={PASSWORD}")
    message = _only(run, changed(handmade_stack(), workload, edit, ":StatefulSet"))
    container = "kafka" if workload == "kafka" else "processor"
    assert (
        f"container {container} env {name} is a value with a literal credential in {option} "
        "(value not shown); required: $(NAME) of an env var from valueFrom.secretKeyRef in its "
        f"place. Fix: declare an env var from valueFrom.secretKeyRef before {name}"
    ) in message


def test_a_kafka_opts_expanding_an_env_var_from_a_secret_passes(run) -> None:
    def edit(r: Resource) -> None:
        first_container(r)["env"] += [
            {"name": "KEYSTORE_PASSWORD", "valueFrom": FROM_SECRET},
            {
                "name": "KAFKA_OPTS",
                "value": "-Djavax.net.ssl.keyStorePassword=$(KEYSTORE_PASSWORD)",
            },
        ]

    assert _findings(run, changed(handmade_stack(), "kafka", edit, ":StatefulSet")) == []


def test_a_kafka_opts_expanding_a_literal_env_var_is_refused(run) -> None:
    """`$(NAME)` of a literal env var puts the credential into the pod spec all the same."""

    def edit(r: Resource) -> None:
        first_container(r)["env"] += [
            {"name": "KS", "value": PASSWORD},
            {"name": "KAFKA_OPTS", "value": "-Djavax.net.ssl.keyStorePassword=$(KS)"},
        ]

    message = _only(run, changed(handmade_stack(), "kafka", edit, ":StatefulSet"))
    assert "container kafka env KAFKA_OPTS is a value with a literal credential" in message


def _args(*extra: str) -> Any:
    def edit(r: Resource) -> None:
        first_container(r)["args"] += list(extra)

    return edit


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        (("--password", PASSWORD), "--password"),
        ((f"--sasl-password={PASSWORD}",), "--sasl-password"),
        ((f"-Dx.password={PASSWORD}",), "-Dx.password"),
        (("--override", f"sasl.password={PASSWORD}"), "sasl.password"),
    ],
    ids=["flag-then-value", "flag-equals", "jvm-option", "inline-setting"],
)
def test_a_credential_in_container_args_is_refused(
    run, extra: tuple[str, ...], option: str
) -> None:
    stack = changed(handmade_stack(), "processor", _args(*extra), ":StatefulSet")
    assert (
        f"container processor command/args is a literal credential for {option} (value not "
        "shown); required: $(NAME) of an env var from valueFrom.secretKeyRef, or a file of a "
        f"mounted Secret. Fix: give {option} $(NAME) instead"
    ) in _only(run, stack)


def test_a_credential_inline_in_a_shell_command_is_refused(run) -> None:
    def edit(r: Resource) -> None:
        first_container(r)["command"] = [
            "sh",
            "-c",
            "set -eu\nexec kafka-topics.sh --bootstrap-server kafka:9092 \\\n"
            f"  --password {PASSWORD}",
        ]

    stack = changed(handmade_stack(), "kafka", edit, ":StatefulSet")
    assert "container kafka command/args is a literal credential for --password" in _only(
        run, stack
    )


@pytest.mark.parametrize(
    "extra",
    [
        ("--password-file", "/etc/kafka-user/password"),
        ("--password", "$(SASL_PASSWORD)"),
        ("--password", "${env:SASL_PASSWORD}"),
        ("-Dlog4j2.configurationFile=/etc/log4j2.xml",),
        ("sh", "-c", 'exec tool --password "$(cat /etc/kafka-user/password)"'),
    ],
    ids=["password-file", "kubelet-expansion-of-a-secret", "reference", "jvm-option", "cat-a-file"],
)
def test_command_lines_reading_credentials_from_secrets_pass(run, extra: tuple[str, ...]) -> None:
    def edit(r: Resource) -> None:
        first_container(r)["env"].append({"name": "SASL_PASSWORD", "valueFrom": FROM_SECRET})
        first_container(r)["args"] += list(extra)

    assert _findings(run, changed(handmade_stack(), "processor", edit, ":StatefulSet")) == []


def test_a_command_line_part_still_computed_is_skipped_and_the_rest_checked(run) -> None:
    edit = _args("--cluster-id", UNKNOWN_STRING_VALUE, "--password", PASSWORD)
    stack = changed(handmade_stack(), "processor", edit, ":StatefulSet")
    assert "command/args is a literal credential for --password" in _only(run, stack)


def test_a_credential_in_an_init_container_args_is_refused(run) -> None:
    def edit(r: Resource) -> None:
        pod(r)["initContainers"] = [
            {
                **copy.deepcopy(first_container(r)),
                "name": "format-storage",
                "env": [],
                "args": [
                    "kafka-storage.sh",
                    "format",
                    "--add-scram",
                    f"SCRAM-SHA-512=[name=admin,password={PASSWORD}]",
                    f"--add-scram=SCRAM-SHA-256=password={PASSWORD}",
                ],
            }
        ]

    stack = changed(handmade_stack(), "kafka", edit, ":StatefulSet")
    messages = [v.message for v in _findings(run, stack)]
    assert len(messages) == 2
    assert all(
        "container format-storage command/args is a literal credential for password" in m
        and PASSWORD not in m
        for m in messages
    )


# Where each workload kind keeps its pod template (as the Kubernetes API defines it).
_TEMPLATE_PATHS = {
    "Deployment": ("apps/v1", ("spec", "template", "spec")),
    "DaemonSet": ("apps/v1", ("spec", "template", "spec")),
    "Job": ("batch/v1", ("spec", "template", "spec")),
    "CronJob": ("batch/v1", ("spec", "jobTemplate", "spec", "template", "spec")),
    "Pod": ("core/v1", ("spec",)),
}


@pytest.mark.parametrize("kind", sorted(_TEMPLATE_PATHS))
@pytest.mark.parametrize("where", ["containers", "initContainers"])
def test_a_credential_in_args_is_refused_in_every_workload_kind(run, kind: str, where: str) -> None:
    group, path = _TEMPLATE_PATHS[kind]
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox:1.36"}]}
    spec.setdefault(where, []).append(
        {"name": "tool", "image": "busybox:1.36", "args": ["--password", PASSWORD]}
    )
    props: dict[str, Any] = {"metadata": {"name": "tool", "namespace": NAMESPACE}}
    target = props
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = spec
    workload = Resource(f"kubernetes:{group}:{kind}", "tool", props)
    messages = [v.message for v in _findings(run, [workload])]
    assert messages == [
        m for m in messages if m.startswith(f"{kind} streaming/tool: container tool command/args")
    ]
    assert len(messages) == 1
    assert PASSWORD not in messages[0]


# --- ConfigMap files that are not .properties -----------------------------------------------


@pytest.mark.parametrize(
    ("file", "text", "key", "line"),
    [
        ("app.json", f'{{\n  "user": "a",\n  "password": "{PASSWORD}"\n}}\n', "password", 3),
        ("app.yaml", f"kafka:\n  sasl:\n    password: {PASSWORD}\n", "password", 3),
        ("client.env", f"KEY_USER=a\nKEY_PASSWORD={PASSWORD}\n", "KEY_PASSWORD", 2),
        ("app.conf", f'kafka {{\n  ssl.key.password = "{PASSWORD}"\n}}\n', "ssl.key.password", 2),
        (
            "kafka_client_jaas.conf",
            "KafkaClient {\n  org.apache.kafka.common.security.plain.PlainLoginModule required\n"
            f'  username="a"\n  password="{PASSWORD}";\n}};\n',
            "password",
            4,
        ),
    ],
    ids=["json", "yaml", "dotenv", "conf", "jaas"],
)
@pytest.mark.parametrize("field", ["data", "binaryData"])
def test_a_credential_in_a_config_map_file_is_refused_naming_file_key_and_line(
    run, file: str, text: str, key: str, line: int, field: str
) -> None:
    def add_file(r: Resource) -> None:
        encoded = base64.b64encode(text.encode()).decode() if field == "binaryData" else text
        r.props.setdefault(field, {})[file] = encoded

    message = _only(run, changed(handmade_stack(), "topics-specs", add_file))
    assert message.startswith(
        f"ConfigMap streaming/topics-specs: data[{file}] {key} (line {line}) is a literal "
        "credential (value not shown); required: a ${dir:DIRECTORY:FILE} or ${env:NAME} "
        "reference. Fix: keep the credential in a Secret"
    )


@pytest.mark.parametrize(
    ("file", "text"),
    [
        ("app.json", '{"password": "${env:SASL_PASSWORD}", "token": null, "secret": ""}'),
        ("app.yaml", "password: ${dir:/etc/kafka-user:password}\npasswordFile: /etc/x\n"),
        ("client.env", "KEY_PASSWORD_FILE=/etc/kafka-user/password\n"),
    ],
    ids=["json-references", "yaml-reference-and-pointer", "dotenv-pointer"],
)
def test_config_map_files_with_only_references_pass(run, file: str, text: str) -> None:
    def add_file(r: Resource) -> None:
        r.props["data"][file] = text

    assert _findings(run, changed(handmade_stack(), "topics-specs", add_file)) == []


# --- the rendered stacks -----------------------------------------------------------------


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_rendered_stacks_hold_no_credential_by_value(run, recorded_stacks, stack: str) -> None:
    assert _findings(run, recorded_stacks[stack].resources, stack) == []


def test_the_rendered_format_storage_script_reads_its_passwords_from_files_and_passes(
    run, recorded_stacks
) -> None:
    """Not a vacuous pass: prod's init container does put `password=` on a command line."""
    kafka = next(
        r
        for r in recorded_stacks["prod"].resources
        if r.type.endswith(":StatefulSet") and r.name == "kafka"
    )
    (format_storage,) = [c for c in pod(kafka)["initContainers"] if c["name"] == "format-storage"]
    shell, flag, script = format_storage["command"]
    assert (shell, flag) == ("sh", "-c")
    assert 'password=$(cat "$file")' in script
    assert find_credentials(script) == []
    resources = copy.deepcopy(recorded_stacks["prod"].resources)
    literal = script.replace('password=$(cat "$file")', f"password={PASSWORD}")
    target = next(r for r in resources if r.type.endswith(":StatefulSet") and r.name == "kafka")
    for container in pod(target)["initContainers"]:
        if container["name"] == "format-storage":
            container["command"] = [shell, flag, literal]
    assert "container format-storage command/args is a literal credential for password" in (
        _only(run, resources)
    )
