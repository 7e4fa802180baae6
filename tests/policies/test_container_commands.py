"""What a container runs, not only what the pack reads (docs/security.md): `container-commands`
refuses every container whose command, args, exec probes or lifecycle hooks differ from what
`contract.container_commands` renders from the stack's own inputs, a `$(NAME)` its env
could fill, a file it acts on that is not a reviewed ConfigMap's, and a container the contract
does not declare. Each case is a mutation of a copy of the rendered stack; the rendered stacks
themselves pass."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from contract import container_commands as contract
from contract.kafka_security import SCRAM_SHA_256, SCRAM_SHA_512
from contract.workload_shapes import INTERNAL_PORT
from offline.render import record_stack
from policies.evaluate import Violation
from policies.rules.commands import difference
from tests.infra.conftest import pair_stack
from tests.policies.conftest import Evaluate, levels_of, stack_config
from tests.policies.handmade_stack import broker_settings, edit_broker_settings

RULE = "container-commands"
STS, JOB = ":StatefulSet", ":Job"
# The line a reviewer would dread in a script run with the broker's key.
WILDCARD_GRANT = "kafka-acls.sh --add --allow-principal 'User:*' --operation All --cluster"

Props = dict[str, Any]
PropsEdit = Callable[[Props], None]


def _findings(run: Evaluate, resources: Sequence[Any], stack: str = "prod") -> list[Violation]:
    return [v for v in run(resources, stack_config(stack)) if v.policy == RULE]


def _only(run: Evaluate, resources: Sequence[Any], stack: str = "prod") -> str:
    """The one finding of this rule, a mandatory one naming what to do."""
    (violation,) = _findings(run, resources, stack)
    assert violation.mandatory
    assert "Fix: " in violation.message
    return violation.message


def _edited(
    recorded_stacks: dict[str, Any], stack: str, type_suffix: str, name: str, edit: PropsEdit
) -> list[Any]:
    """A deep copy of a rendered stack with one resource's props edited."""
    resources = copy.deepcopy(list(recorded_stacks[stack].resources))
    (resource,) = [r for r in resources if r.name == name and r.type.endswith(type_suffix)]
    edit(resource.props)
    return resources


def _pod(props: Props) -> Props:
    return props["spec"]["template"]["spec"]


def _container(props: Props, name: str) -> Props:
    """A container (or init container) of a workload's pod, by name."""
    spec = _pod(props)
    (found,) = [c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name]
    return found


def _in(container: str, edit: Callable[[Props], None]) -> PropsEdit:
    """Apply `edit` to one container of the workload."""
    return lambda props: edit(_container(props, container))


def _script_line(line: str) -> Callable[[Props], None]:
    """Append a line to a `sh -c` script."""

    def edit(container: Props) -> None:
        container["command"][2] += line + "\n"

    return edit


def _set(field: str, value: Any) -> Callable[[Props], None]:
    return lambda container: container.__setitem__(field, value)


def _word(field: str, index: int, value: str) -> Callable[[Props], None]:
    return lambda container: container[field].__setitem__(index, value)


def _extra_args(*words: str) -> Callable[[Props], None]:
    return lambda container: container["args"].extend(words)


# The rendered scripts' lengths, which a message names.
GRANT_LINES = len(contract.grant_acls(INTERNAL_PORT).command[2].splitlines())
FORMAT_LINES = len(contract.FORMAT_SCRIPT.splitlines())
BROKER_LINES = len(contract.BROKER_SCRIPT.splitlines())


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_rendered_stacks_run_exactly_the_contracts_commands(
    run, recorded_stacks, stack: str
) -> None:
    assert _findings(run, recorded_stacks[stack].resources, stack) == []


@pytest.mark.parametrize(
    ("stack", "settings"),
    [
        ("prod", {"security": {"credentialsRevision": 2}}),
        ("dev", {"topics": {"allowPartitionIncrease": True, "partitions": 8}}),
    ],
    ids=["prod-rotated-to-sha-256", "dev-allowing-partition-increase"],
)
def test_the_stack_settings_that_change_a_command_line_render_what_the_pack_expects(
    run, stack: str, settings: dict[str, Any]
) -> None:
    """A rotation's mechanisms and the partition-increase flag are inputs the pack reads."""
    assert _findings(run, record_stack(stack, settings).resources, stack) == []


def test_the_rendered_pair_runs_the_contracts_processor_on_both_sides(run) -> None:
    assert _findings(run, pair_stack("prod").resources) == []


# (container's workload, container, edit, what the message says was found)
MUTATIONS = [
    (
        "kafka",
        contract.GRANT_ACLS,
        _script_line(WILDCARD_GRANT),
        f"container grant-acls command is sh -c <script of {GRANT_LINES + 1} lines> (word 3 has "
        f'a line {GRANT_LINES + 1} the contract has not: "{WILDCARD_GRANT}")',
    ),
    (
        "kafka",
        contract.FORMAT_STORAGE,
        _script_line(WILDCARD_GRANT),
        f"container format-storage command is sh -c <script of {FORMAT_LINES + 1} lines> (word "
        f"3 has a line {FORMAT_LINES + 1} the contract has not",
    ),
    (
        "kafka",
        contract.KAFKA,
        _script_line(WILDCARD_GRANT),
        f"container kafka command is sh -c <script of {BROKER_LINES + 1} lines> (word 3 has a "
        f"line {BROKER_LINES + 1} the contract has not",
    ),
    (
        "kafka",
        contract.KAFKA,
        _set("command", []),
        "container kafka command is absent",
    ),
    (
        "kafka",
        contract.GRANT_ACLS,
        lambda c: c["livenessProbe"]["exec"].__setitem__("command", ["sh", "-c", "true"]),
        "container grant-acls livenessProbe.exec.command is sh -c true (word 3 is 'true' where "
        "the contract has",
    ),
    (
        "kafka",
        contract.BROKER_READINESS,
        _set("livenessProbe", {"exec": {"command": ["python", "-c", "import os"]}}),
        "container broker-readiness livenessProbe.exec.command is python -c import os; required: "
        "no exec probe: the contract's broker-readiness has none",
    ),
    (
        "kafka",
        contract.KAFKA,
        _set("lifecycle", {"preStop": {"exec": {"command": ["sh", "-c", WILDCARD_GRANT]}}}),
        f"container kafka lifecycle.preStop.exec.command is sh -c {WILDCARD_GRANT}; required: "
        "no lifecycle hook that runs a command",
    ),
    (
        "kafka",
        contract.BROKER_READINESS,
        _word("args", 2, "app.admin.pair_switch"),
        "container broker-readiness args is python -m app.admin.pair_switch --node-id "
        "$(KAFKA_NODE_ID) --bootstrap-server localhost:9092",
    ),
    (
        "processor",
        contract.PROCESSOR,
        _extra_args("--debug-shell"),
        "container processor args is python -m app.processor --properties "
        "/etc/processor/processor.properties --debug-shell (word 6 '--debug-shell' is more "
        "than the contract has); required: exactly python -m app.processor --properties "
        "/etc/processor/processor.properties, the contract's render for processor. Fix: "
        "render the container from contract/container_commands.py",
    ),
    (
        "topics",
        contract.RECONCILE,
        _word("args", 4, "kafka.attacker.example:9092"),
        "container reconcile args is python -m app.admin.reconcile --bootstrap-servers "
        "kafka.attacker.example:9092",
    ),
    (
        "topics",
        contract.RECONCILE,
        _extra_args("--delete-unknown-acls"),
        "(word 18 '--delete-unknown-acls' is more than the contract has); required: exactly "
        "python -m app.admin.reconcile --bootstrap-servers kafka.streaming.svc.cluster.local:9092",
    ),
]


@pytest.mark.parametrize(
    ("workload", "container", "edit", "found"),
    MUTATIONS,
    ids=[
        "a-wildcard-grant-appended-to-the-grant-script",
        "a-line-appended-to-the-format-script",
        "a-command-chained-to-the-seed-copy",
        "a-command-on-the-broker-that-runs-the-image",
        "a-changed-grant-probe",
        "an-exec-probe-the-sidecar-has-none-of",
        "a-pre-stop-hook",
        "another-module-in-the-readiness-sidecar",
        "an-extra-processor-argument",
        "another-cluster-for-the-reconciler",
        "an-extra-reconciler-flag",
    ],
)
def test_a_container_running_other_than_the_contracts_render_is_refused(
    run, recorded_stacks, workload: str, container: str, edit: Callable[[Props], None], found: str
) -> None:
    type_suffix = JOB if workload == "topics" else STS
    stack = _edited(recorded_stacks, "prod", type_suffix, workload, _in(container, edit))
    message = _only(run, stack)
    assert found in message
    assert "the pack judged" in message  # the fix says why: the pod's credentials run it


def test_a_command_line_is_refused_in_every_stack(run, recorded_stacks) -> None:
    """Not relaxed in dev: what runs is never a threshold."""
    stack = _edited(
        recorded_stacks, "dev", STS, "processor", _in(contract.PROCESSOR, _extra_args("-x"))
    )
    assert levels_of(run, stack, RULE) == {"dev": {"mandatory"}, "prod": {"mandatory"}}


def test_the_grant_script_is_rendered_from_the_brokers_internal_listener(
    run, recorded_stacks
) -> None:
    """The script connects to `localhost:<INTERNAL port>`; moving the listener without the
    script is refused, as the render takes the port from the listeners the pack reviews."""

    def move_internal_listener(props: Props) -> None:
        broker = _container(props, contract.KAFKA)
        listeners = broker_settings(broker)["listeners"]
        edit_broker_settings(broker, {"listeners": listeners.replace(":9094", ":9095")})

    stack = _edited(recorded_stacks, "prod", STS, "kafka", move_internal_listener)
    message = _only(run, stack)
    assert (
        "container grant-acls command is sh -c <script of" in message
        and "'server=localhost:9094' where the contract has 'server=localhost:9095'" in message
        and "from the INTERNAL listener's port 9095 of StatefulSet streaming/kafka" in message
    )


@pytest.mark.parametrize(
    ("current", "retired"), [(SCRAM_SHA_512, SCRAM_SHA_256), (SCRAM_SHA_256, SCRAM_SHA_512)]
)
def test_the_retire_job_may_retire_only_the_mechanism_before_the_current_one(
    run, current: str, retired: str
) -> None:
    """Retiring the credentials revision's own mechanism would lock every client out."""
    revision = 1 if current == SCRAM_SHA_512 else 2
    settings = {"security": {"credentialsRevision": revision}}
    resources = copy.deepcopy(list(record_stack("prod", settings).resources))
    (job,) = [r for r in resources if r.name == "scram-retirement" and r.type.endswith(JOB)]
    args = _container(job.props, contract.RETIRE)["args"]
    assert args[-1] == retired
    args[-1] = current
    message = _only(run, resources)
    assert f"word 11 is '{current}' where the contract has '{retired}'" in message
    assert f"retiring {retired}, the mechanism before its credentials revision's {current}" in (
        message
    )


def _refused_by_the_declaration_alone(
    run: Evaluate, resources: Sequence[Any], stack: str
) -> list[str]:
    """The findings on a container the contract renders nothing for: none of this rule's (it
    judges what the contract's containers run), every one of `workload-shapes`'."""
    assert _findings(run, resources, stack) == []
    found = [v for v in run(resources, stack_config(stack)) if v.policy == "workload-shapes"]
    assert found and all(v.mandatory for v in found)
    return [v.message for v in found]


def test_a_container_the_contract_does_not_declare_is_refused_by_the_declaration(
    run, recorded_stacks
) -> None:
    def add_debug_sidecar(props: Props) -> None:
        kafka = _container(props, contract.KAFKA)
        _pod(props)["containers"].append(
            {**copy.deepcopy(kafka), "name": "debug", "command": ["sh", "-c", "sleep infinity"]}
        )

    resources = _edited(recorded_stacks, "prod", STS, "kafka", add_debug_sidecar)
    (message,) = _refused_by_the_declaration_alone(run, resources, "prod")
    assert message.startswith(
        "StatefulSet streaming/kafka: spec.template.spec.containers[debug] is present; required: "
        "only its declared containers: format-storage, kafka, grant-acls, broker-readiness"
    )


def test_a_grant_container_on_a_plaintext_cluster_is_refused_by_the_declaration(
    run, recorded_stacks
) -> None:
    """Dev's brokers have no SCRAM users or ACLs: the contract runs no grant step there."""
    prod_kafka = next(
        r for r in recorded_stacks["prod"].resources if r.name == "kafka" and r.type.endswith(STS)
    )
    grant = copy.deepcopy(_container(prod_kafka.props, contract.GRANT_ACLS))

    def add_grant(props: Props) -> None:
        _pod(props)["containers"].append(grant)

    resources = _edited(recorded_stacks, "dev", STS, "kafka", add_grant)
    messages = _refused_by_the_declaration_alone(run, resources, "dev")
    assert any(
        "containers[grant-acls] is present; required: declared for a stack whose brokers' "
        "client listener is secured (SASL_SSL), and this stack is not one" in m
        for m in messages
    ), messages


def test_an_env_var_that_would_rewrite_the_grant_script_is_refused(run, recorded_stacks) -> None:
    """The kubelet replaces `$(NAME)` in a command with env var NAME before the shell reads it,
    and env names may hold spaces: a name spelled like the script's `$(sha256sum ...)` would
    put its value into the script."""
    name = "sha256sum \"$lines\" | cut -d ' ' -f 1"
    assert f"$({name})" in contract.grant_acls(INTERNAL_PORT).command[2]

    def add_env(container: Props) -> None:
        container.setdefault("env", []).append(
            {"name": name, "value": f'x"; {WILDCARD_GRANT}; echo "'}
        )

    stack = _edited(recorded_stacks, "prod", STS, "kafka", _in(contract.GRANT_ACLS, add_env))
    message = _only(run, stack)
    assert f"container grant-acls command is a command line with $({name})" in message
    assert "required: no $(NAME) the container's env can fill but those the contract " in message


@pytest.mark.parametrize(
    ("volume", "found"),
    [
        (
            {"name": "bootstrap", "configMap": {"name": "unreviewed-grants"}},
            "from ConfigMap unreviewed-grants, which this stack does not declare",
        ),
        (
            {"name": "bootstrap", "emptyDir": {}},
            "from volume bootstrap (emptyDir), not a ConfigMap",
        ),
        (
            {
                "name": "bootstrap",
                "configMap": {
                    "name": "kafka-bootstrap",
                    "items": [
                        {"key": "readiness-client.properties", "path": "bootstrap-acls.args"}
                    ],
                },
            },
            "from ConfigMap kafka-bootstrap, whose items do not map key bootstrap-acls.args to it",
        ),
    ],
    ids=["an-undeclared-config-map", "a-writable-folder", "another-key-under-its-name"],
)
def test_the_grant_lines_must_be_the_reviewed_config_maps(
    run, recorded_stacks, volume: Props, found: str
) -> None:
    """The script runs the lines of the file at its path: that file must be the one
    `kafka-least-privilege` reviewed, a key of the stack's bootstrap ConfigMap."""

    def replace_volume(props: Props) -> None:
        volumes = _pod(props)["volumes"]
        volumes[:] = [v for v in volumes if v["name"] != "bootstrap"] + [volume]

    stack = _edited(recorded_stacks, "prod", STS, "kafka", replace_volume)
    (message,) = [v.message for v in _findings(run, stack) if "container grant-acls" in v.message]
    path = f"{contract.BOOTSTRAP_DIR}/bootstrap-acls.args"
    assert f"container grant-acls file {path} is {found}; required: key bootstrap-acls.args" in (
        message
    )


def test_the_reconcilers_acls_must_be_the_reviewed_config_maps(run, recorded_stacks) -> None:
    def mount_elsewhere(container: Props) -> None:
        for mount in container["volumeMounts"]:
            if mount["mountPath"] == contract.SPECS_DIR:
                mount["subPath"] = "nested"

    stack = _edited(
        recorded_stacks, "prod", JOB, "topics", _in(contract.RECONCILE, mount_elsewhere)
    )
    messages = [v.message for v in _findings(run, stack)]
    assert len(messages) == 2  # topics.json and acls.json
    assert all(
        f"from volume specs mounted at {contract.SPECS_DIR} with subPath nested" in m
        for m in messages
    )


@pytest.mark.parametrize(
    ("found", "expected", "says"),
    [
        (["a", "b"], ["a", "c"], "word 2 is 'b' where the contract has 'c'"),
        (["a", "b"], ["a"], "word 2 'b' is more than the contract has"),
        (["a"], ["a", "b"], "word 2 'b' of the contract's is missing"),
        (["x\ny\n"], ["x\nz\n"], "line 2 of word 1 is 'y' where the contract has 'z'"),
        (["x\ny\n"], ["x\n"], "word 1 has a line 2 the contract has not: 'y'"),
        (["x\n"], ["x\ny\n"], "word 1 lacks line 2 of the contract's: 'y'"),
    ],
)
def test_a_difference_names_the_first_word_or_script_line_that_departs(
    found: list[str], expected: list[str], says: str
) -> None:
    assert difference(found, expected) == says


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_metadata_version_job_on_the_kafka_image_is_a_client_not_a_broker(
    run, recorded_stacks, stack: str
) -> None:
    """The Job runs `kafka-features.sh` on the brokers' image: the pack renders it as the
    contract's, on the stack's own client address, and does not take it for a Kafka node."""

    def other_release(props: Props) -> None:
        command = _container(props, contract.FINALIZE)["command"]
        command[command.index(contract.RELEASE_VERSION) + 1] = "3.9"

    def extra_word(props: Props) -> None:
        _container(props, contract.FINALIZE)["command"].append("--unsafe")

    resources = recorded_stacks[stack].resources
    assert _findings(run, resources, stack) == []
    # Another release is still the contract's render (the setting shows only there)...
    edited = _edited(recorded_stacks, stack, JOB, "kafka-metadata-version", other_release)
    assert _findings(run, edited, stack) == []
    # ...a word the contract does not render is not.
    edited = _edited(recorded_stacks, stack, JOB, "kafka-metadata-version", extra_word)
    message = _only(run, edited, stack)
    assert "container finalize-metadata-version command" in message
    assert "'--unsafe' is more than the contract has" in message
