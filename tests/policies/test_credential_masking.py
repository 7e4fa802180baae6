"""No credential in any message: a known password planted in every place the pack reads is
refused, and appears in none of the findings, the offline runner's table or its SARIF."""

from __future__ import annotations

import copy
import io
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from contract import container_commands as contract
from contract.credential_values import mask_credentials
from contract.java_properties import load_properties
from infra.stack_settings import StackConfigError
from offline.policy_check import print_report
from policies.evaluate import resolved_levels
from policies.sarif import to_sarif
from tests.policies.conftest import REPO, stack_config

PASSWORD = f"Planted-{uuid.uuid4().hex}"
Props = dict[str, Any]


def _resource(resources: list[Any], kind: str, name: str) -> Props:
    (found,) = [r for r in resources if r.name == name and r.type.endswith(f":{kind}")]
    return found.props


def _container(props: Props, name: str) -> Props:
    spec = props["spec"]["template"]["spec"]
    (found,) = [c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name]
    return found


def _processor(resources: list[Any]) -> Props:
    return _container(_resource(resources, "StatefulSet", "processor"), contract.PROCESSOR)


def _broker(resources: list[Any], container: str = contract.KAFKA) -> Props:
    return _container(_resource(resources, "StatefulSet", "kafka"), container)


def _append_line(container: Props, line: str) -> None:
    """A line more in a container's `sh -c` script."""
    container["command"][2] = container["command"][2].rstrip("\n") + f"\n{line}\n"


def _processor_properties(line: str) -> Callable[[list[Any]], None]:
    def plant(resources: list[Any]) -> None:
        data = _resource(resources, "ConfigMap", "processor-config")["data"]
        data["processor.properties"] += f"\n{line}\n"

    return plant


def _flag_of_processor(resources: list[Any]) -> None:
    _processor(resources)["args"] += ["--sasl-password", PASSWORD]


def _word_a_secret_holds(resources: list[Any]) -> None:
    """The password of a user's Secret, as a bare word: no key beside it gives it away."""
    (secret,) = [
        r.props
        for r in resources
        if r.type.endswith(":Secret")
        and r.props["metadata"]["name"] == f"kafka-user-{_processor_user(resources)}"
    ]
    data = secret["stringData"]["value"]  # a secret output, in the engine's wire form
    for key in data:
        data[key] = PASSWORD
    _processor(resources)["args"].append(PASSWORD)


def _processor_user(resources: list[Any]) -> str:
    """The processor's Kafka user: its `sasl.username` (a fork renames the pipeline)."""
    text = _resource(resources, "ConfigMap", "processor-config")["data"]["processor.properties"]
    return load_properties(text)["sasl.username"]


def _grant_script_line(resources: list[Any]) -> None:
    _append_line(_broker(resources, contract.GRANT_ACLS), f"echo password={PASSWORD}")


def _broker_script_line(resources: list[Any]) -> None:
    _append_line(_broker(resources, contract.KAFKA), f"export PASSWORD={PASSWORD}")


def _literal_env_var(resources: list[Any]) -> None:
    _processor(resources)["env"].append({"name": "SASL_PASSWORD", "value": PASSWORD})


def _jvm_option(resources: list[Any]) -> None:
    option = f"-Djavax.net.ssl.keyStorePassword={PASSWORD}"
    _broker(resources)["env"].append({"name": "KAFKA_OPTS", "value": option})


def _json_field(resources: list[Any]) -> None:
    data = _resource(resources, "ConfigMap", "topics-specs")["data"]
    data["topics.json"] = json.dumps({**json.loads(data["topics.json"]), "password": PASSWORD})


def _exec_probe(resources: list[Any]) -> None:
    probe = {"exec": {"command": ["check", "--password", PASSWORD]}}
    _processor(resources)["livenessProbe"] = probe


def _job_args(resources: list[Any]) -> None:
    job = _container(_resource(resources, "Job", "topics"), contract.RECONCILE)
    job["args"] += ["--password", PASSWORD]


def _pod_annotation(resources: list[Any]) -> None:
    template = _resource(resources, "StatefulSet", "processor")["spec"]["template"]
    template["metadata"].setdefault("annotations", {})["debug"] = f"password={PASSWORD}"


# Where a credential can be written in a stack (the stacks that have that place).
PLANTINGS: dict[str, tuple[Callable[[list[Any]], None], tuple[str, ...]]] = {
    "a command-line flag of the processor": (_flag_of_processor, ("dev", "prod")),
    "a user's password as a bare command word": (_word_a_secret_holds, ("prod",)),
    "a line of the grant script": (_grant_script_line, ("prod",)),
    "a line of the broker's script": (_broker_script_line, ("dev", "prod")),
    "a literal env var": (_literal_env_var, ("dev", "prod")),
    "a JVM option in KAFKA_OPTS": (_jvm_option, ("dev", "prod")),
    "a setting of a properties file": (
        _processor_properties(f"sasl.password={PASSWORD}"),
        ("dev", "prod"),
    ),
    "a JAAS option": (
        _processor_properties(
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="page-view-counter" password="{PASSWORD}";'
        ),
        ("dev", "prod"),
    ),
    "a field of a JSON file": (_json_field, ("dev", "prod")),
    "an exec probe": (_exec_probe, ("dev", "prod")),
    "a Job's args": (_job_args, ("dev", "prod")),
    "a pod annotation": (_pod_annotation, ("dev", "prod")),
}


@pytest.mark.parametrize(
    ("place", "stack"),
    [(place, stack) for place, (_plant, stacks) in PLANTINGS.items() for stack in stacks],
)
def test_a_planted_password_is_refused_and_shown_nowhere(
    run, policies, recorded_stacks, stack: str, place: str
) -> None:
    resources = copy.deepcopy(list(recorded_stacks[stack].resources))
    PLANTINGS[place][0](resources)
    assert PASSWORD in json.dumps([r.props for r in resources])
    config = stack_config(stack)
    violations = run(resources, config)
    assert any(v.mandatory for v in violations), f"{place} in {stack}: nothing refused it"
    table = io.StringIO()
    print_report(
        table,
        stack=stack,
        config_path=REPO / "policies" / f"config.{stack}.json",
        policies=policies,
        resources=resources,
        violations=violations,
    )
    sarif = to_sarif(
        repo=REPO,
        stack=stack,
        policies=policies,
        resources=resources,
        violations=violations,
        levels=resolved_levels(policies, config),
    )
    shown = {
        "the findings": "\n".join(v.message for v in violations),
        "the table": table.getvalue(),
        "the SARIF": json.dumps(sarif),
    }
    leaked = [where for where, text in shown.items() if PASSWORD in text]
    assert not leaked, f"{place} in {stack}: the password shows in {leaked}: {shown[leaked[0]]}"


def test_a_value_is_masked_where_its_key_shows_and_wherever_it_is_known() -> None:
    assert mask_credentials("word 11 is '--password' then 'x'") == (
        "word 11 is '--password' then 'x'"
    )
    assert mask_credentials("--password hunter2 --user bob") == "--password (masked) --user bob"
    assert mask_credentials('password="s3cr3t-x";') == 'password="(masked)";'
    assert mask_credentials("word 12 is 'hunter2'", {"hunter2"}) == "word 12 is '(masked)'"
    # Too short to mask by value alone: masking every `on` would hide the finding itself.
    assert mask_credentials("replicas on", {"on"}) == "replicas on"


def test_a_refused_setting_that_quotes_a_credential_is_masked_in_the_cli_and_sarif(
    tmp_path, capsys, monkeypatch
) -> None:
    import offline.policy_check as policy_check

    def refuse(stack: str, *args: Any, **kwargs: Any) -> Any:
        raise StackConfigError(f"{stack}: kafka.configs.x is --password {PASSWORD}; remove it")

    monkeypatch.setattr(policy_check, "record_stack", refuse)
    sarif = tmp_path / "refused.sarif"
    assert policy_check.main(["--stack", "dev", "--sarif", str(sarif)]) == 2
    err = capsys.readouterr().err
    assert "kafka.configs.x is --password (masked)" in err
    assert PASSWORD not in err and PASSWORD not in sarif.read_text()


def test_a_message_that_names_a_credential_without_its_value_is_left_as_it_is() -> None:
    message = "a literal credential for --password (value not shown); give --password $(NAME)"
    assert mask_credentials(message) == message


def test_credentials_are_found_through_the_engines_read_only_views_at_preview() -> None:
    """Under `pulumi preview` a rule reads props through pulumi_policy's proxy (a Sequence and
    a Mapping, not list and dict) that raises on a value not known yet: the known ones count."""
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

    from policies.rules.masking import credentials_of

    container = {
        "args": ["--password", PASSWORD, UNKNOWN_STRING_VALUE],
        "env": [
            {"name": "SASL_PASSWORD", "value": PASSWORD + "-env"},
            {"name": "X", "value": UNKNOWN_STRING_VALUE},
        ],
    }
    props = unknown_checking_proxy({"spec": {"template": {"spec": {"containers": [container]}}}})
    found = credentials_of([("kubernetes:apps/v1:StatefulSet", props)])
    assert found == {PASSWORD, PASSWORD + "-env"}
