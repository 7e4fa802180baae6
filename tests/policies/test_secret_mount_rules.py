"""Secret mounts least privilege (docs/security.md, `secret-mounts-least-privilege`):
outside the brokers' own image, a workload (or a sidecar in a broker's pod) reads only its own
Kafka user's Secret and `ca.crt` of the brokers' TLS Secret; on the real pulumi_policy objects,
over the handmade and rendered prod stacks.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

from policies.evaluate import Violation
from tests.infra.conftest import names_of
from tests.policies.conftest import Evaluate, findings_of, stack_config
from tests.policies.handmade_stack import Resource, changed, first_container, handmade_stack, pod

RULE = "secret-mounts-least-privilege"
# The readiness sidecar, as a finding names it: not a container the declaration gives the key.
NOT_A_HOLDER = (
    "container broker-readiness (not one of the broker's own containers "
    "(format-storage, kafka, grant-acls))"
)
PROCESSOR = "StatefulSet streaming/page-view-counter"
TLS_FIX = "Fix: take only the CA: secret.items: [{key: ca.crt, path: ca.crt}]"

Edit = Callable[[Resource], None]


def _caught(run: Evaluate, stack: list[Any], config: str = "prod") -> list[Violation]:
    """The rule's findings, asserting no other rule fired and each is mandatory with a fix."""
    violations = findings_of(run, stack, {RULE}, config)
    assert violations, "the rule found nothing"
    assert all(v.mandatory and "Fix: " in v.message for v in violations)
    return violations


def _volume(r: Resource, name: str) -> dict[str, Any]:
    (volume,) = [v for v in pod(r)["volumes"] if v["name"] == name]
    return volume


def _processor(edit: Edit) -> list[Resource]:
    return changed(handmade_stack(), "processor", edit, ":StatefulSet")


def _ca_items(*keys: str) -> Edit:
    def edit(r: Resource) -> None:
        _volume(r, "kafka-ca")["secret"]["items"] = [{"key": k, "path": k} for k in keys]

    return edit


def _whole_tls(r: Resource) -> None:
    del _volume(r, "kafka-ca")["secret"]["items"]


def _projected_key(r: Resource) -> None:
    pod(r)["volumes"].append(
        {
            "name": "bundle",
            "projected": {
                "sources": [{"secret": {"name": "kafka-tls", "items": [{"key": "tls.key"}]}}]
            },
        }
    )


def _env_key(r: Resource) -> None:
    first_container(r)["env"].append(
        {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "kafka-tls", "key": "tls.key"}}}
    )


def _env_from(r: Resource) -> None:
    first_container(r)["envFrom"] = [{"secretRef": {"name": "kafka-tls"}}]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            _whole_tls,
            "volume kafka-ca is Secret kafka-tls, the whole Secret (ca.crt, tls-combined.pem, "
            "tls.crt, tls.key); required: only ca.crt of the brokers' TLS Secret",
        ),
        (
            _ca_items("ca.crt", "tls.key"),
            "volume kafka-ca is Secret kafka-tls, keys (tls.key); required: only ca.crt",
        ),
        (
            _projected_key,
            "projected volume bundle is Secret kafka-tls, keys (tls.key)",
        ),
        (_env_key, "container processor env KEY is Secret kafka-tls, keys (tls.key)"),
        (_env_from, "container processor envFrom is Secret kafka-tls, the whole Secret"),
    ],
    ids=["whole-secret", "tls.key-item", "projected-tls.key", "env-tls.key", "envFrom"],
)
def test_a_processor_that_takes_the_brokers_key_is_caught(run, edit: Edit, expected: str) -> None:
    for config in ("dev", "prod"):
        (violation,) = _caught(run, _processor(edit), config)
        assert violation.message.startswith(f"{PROCESSOR}: {expected}")
        assert TLS_FIX in violation.message


def test_a_processor_that_mounts_another_users_secret_is_caught(run) -> None:
    def observer(r: Resource) -> None:
        _volume(r, "kafka-user")["secret"]["secretName"] = "kafka-user-observer"

    (violation,) = _caught(run, _processor(observer))
    assert violation.message.startswith(
        f"{PROCESSOR}: volume kafka-user is Secret kafka-user-observer (user observer's "
        "password); required: only the Secret of the Kafka user it connects as "
        "(page-view-counter: kafka-user-page-view-counter)"
    )
    assert "this workload can act as observer" in violation.message


def test_a_processor_that_mounts_every_users_password_is_caught_once_per_other_user(run) -> None:
    def users(r: Resource) -> None:
        pod(r)["volumes"].append(
            {
                "name": "users",
                "projected": {
                    "sources": [
                        {"secret": {"name": f"kafka-user-{u}", "items": [{"key": "password"}]}}
                        for u in ("page-view-counter", "topic-reconciler", "observer")
                    ]
                },
            }
        )

    violations = _caught(run, _processor(users))
    assert sorted(v.message.split(" (user ")[0] for v in violations) == [
        f"{PROCESSOR}: projected volume users is Secret kafka-user-observer",
        f"{PROCESSOR}: projected volume users is Secret kafka-user-topic-reconciler",
    ]


def test_its_own_users_secret_and_the_ca_pass_as_volume_or_env(run) -> None:
    def own_env(r: Resource) -> None:
        first_container(r)["env"].append(
            {
                "name": "SASL_PASSWORD",
                "valueFrom": {
                    "secretKeyRef": {"name": "kafka-user-page-view-counter", "key": "password"}
                },
            }
        )

    assert run(_processor(own_env)) == []
    assert run(_processor(_ca_items("ca.crt"))) == []


def test_the_brokers_mount_their_key_and_every_password(run, recorded_stacks) -> None:
    """The rendered prod brokers: kafka-tls whole, every user's password for --add-scram."""
    resources = recorded_stacks["prod"].resources
    kafka = _find(resources, ":StatefulSet", "kafka")
    volumes = {v["name"]: v for v in kafka.props["spec"]["template"]["spec"]["volumes"]}
    assert "items" not in volumes["tls"]["secret"]
    assert len(volumes["users"]["projected"]["sources"]) == 4
    assert [v for v in run(resources, stack_config("prod")) if v.policy == RULE] == []


def _find(resources: Any, type_suffix: str, name: str) -> Any:
    (found,) = [r for r in resources if r.type.endswith(type_suffix) and r.name == name]
    return found


def _rendered_processor_secret(recorded_stacks) -> str:
    """The processor's password Secret in the rendered prod stack, named after the application
    id its stack file sets (the handmade stack's is its own)."""
    return f"kafka-user-{names_of(recorded_stacks['prod']).application_id}"


def _prod(run: Evaluate, recorded_stacks, target: tuple[str, str], edit) -> list[Violation]:
    """The rule's findings on a mutated copy of the rendered prod stack."""
    resources = copy.deepcopy(list(recorded_stacks["prod"].resources))
    edit(_find(resources, *target).props)
    return [v for v in run(resources, stack_config("prod")) if v.policy == RULE]


def _job_volume(name: str, edit: Callable[[dict[str, Any]], None]):
    def apply(props: dict[str, Any]) -> None:
        (volume,) = [v for v in props["spec"]["template"]["spec"]["volumes"] if v["name"] == name]
        edit(volume)

    return apply


def test_the_topic_job_mounting_the_whole_tls_secret_is_caught(run, recorded_stacks) -> None:
    job = _find(recorded_stacks["prod"].resources, ":Job", "topics")
    (violation,) = _prod(
        run,
        recorded_stacks,
        (":Job", "topics"),
        _job_volume("kafka-ca", lambda v: v["secret"].pop("items")),
    )
    name = job.props["metadata"]["name"]
    assert violation.mandatory
    assert violation.message.startswith(
        f"Job streaming/{name}: volume kafka-ca is Secret kafka-tls, the whole Secret "
        "(ca.crt, tls-combined.pem, tls.crt, tls.key)"
    )


def test_the_topic_job_reads_the_passwords_only_because_it_may_set_them(
    run, recorded_stacks
) -> None:
    """The reconciler sets every user's SCRAM credential (ALTER on the cluster), so its users
    volume passes; without that right the same volume gives it passwords it has no use for."""

    def without_cluster_alter(props: dict[str, Any]) -> None:
        data = json.loads(props["data"]["acls.json"])
        for user in data["users"]:
            user["acls"] = [a for a in user["acls"] if a["resource_type"] != "CLUSTER"]
        props["data"]["acls.json"] = json.dumps(data)

    violations = _prod(run, recorded_stacks, (":ConfigMap", "topics-specs"), without_cluster_alter)
    assert sorted(v.message.split(" (user ")[0].split(": ", 1)[1] for v in violations) == sorted(
        [
            "projected volume users is Secret kafka-user-broker-readiness",
            "projected volume users is Secret kafka-user-observer",
            f"projected volume users is Secret {_rendered_processor_secret(recorded_stacks)}",
        ]
    )


def test_the_rendered_processor_mounting_the_observers_secret_is_caught(
    run, recorded_stacks
) -> None:
    def observer(volume: dict[str, Any]) -> None:
        volume["secret"]["secretName"] = "kafka-user-observer"

    (violation,) = _prod(
        run, recorded_stacks, (":StatefulSet", "processor"), _job_volume("kafka-user", observer)
    )
    assert "volume kafka-user is Secret kafka-user-observer (user observer's password)" in (
        violation.message
    )


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_rendered_stacks_mount_only_what_each_workload_needs(
    run, recorded_stacks, stack
) -> None:
    violations = run(recorded_stacks[stack].resources, stack_config(stack))
    assert [v for v in violations if v.policy == RULE] == []


# --- the brokers' pods: only the broker's own containers, on its image, hold its key ----------

KAFKA = "StatefulSet streaming/kafka"


def _kafka_container(name: str, edit: Callable[[dict[str, Any]], None]):
    """An edit of one container of the rendered brokers' pod (and the pod's volumes)."""

    def apply(props: dict[str, Any]) -> None:
        pod_spec = props["spec"]["template"]["spec"]
        (container,) = [c for c in pod_spec["containers"] if c["name"] == name]
        edit(container)

    return apply


def _mount(volume: str, path: str) -> Callable[[dict[str, Any]], None]:
    def edit(container: dict[str, Any]) -> None:
        container["volumeMounts"].append({"name": volume, "mountPath": path, "readOnly": True})

    return edit


def test_the_rendered_brokers_pod_passes_with_its_sidecar_on_its_own_user(
    run, recorded_stacks
) -> None:
    """The readiness sidecar (the processor's image) mounts its user's Secret and the CA; the
    grant-acls container (the broker's image) the broker's key: both pass."""
    kafka = _find(recorded_stacks["prod"].resources, ":StatefulSet", "kafka")
    containers = {c["name"]: c for c in kafka.props["spec"]["template"]["spec"]["containers"]}
    assert {m["name"] for m in containers["grant-acls"]["volumeMounts"]} >= {"tls"}
    assert containers["grant-acls"]["image"] == containers["kafka"]["image"]
    assert containers["broker-readiness"]["image"] != containers["kafka"]["image"]
    assert _prod(run, recorded_stacks, (":StatefulSet", "kafka"), lambda props: None) == []


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            _mount("tls", "/etc/kafka/tls"),
            "volume tls is Secret kafka-tls, the whole Secret (ca.crt, tls-combined.pem, "
            "tls.crt, tls.key)",
        ),
        (
            lambda c: c["env"].append(
                {
                    "name": "KEY",
                    "valueFrom": {"secretKeyRef": {"name": "kafka-tls", "key": "tls.key"}},
                }
            ),
            "container broker-readiness env KEY is Secret kafka-tls, keys (tls.key)",
        ),
    ],
    ids=["tls-volume", "env-tls.key"],
)
def test_a_fork_giving_the_brokers_key_back_to_the_readiness_sidecar_is_caught(
    run, recorded_stacks, edit: Callable[[dict[str, Any]], None], expected: str
) -> None:
    (violation,) = _prod(
        run, recorded_stacks, (":StatefulSet", "kafka"), _kafka_container("broker-readiness", edit)
    )
    assert violation.mandatory
    assert violation.message.startswith(f"{KAFKA}: {NOT_A_HOLDER}: {expected}")
    assert "(format-storage, kafka, grant-acls) may hold it" in violation.message


def test_the_grant_container_holds_the_key_by_its_declared_name_and_runs_the_brokers_image(
    run, recorded_stacks
) -> None:
    """Who may hold the key is a name the workload declaration fixes; which image that container
    runs is `image-sources`' (the stack's `kafka.image`): a foreign image is refused there."""

    def foreign_image(container: dict[str, Any]) -> None:
        container["image"] = "ghcr.io/example/acl-granter:1.0@sha256:" + "1" * 64

    resources = copy.deepcopy(list(recorded_stacks["prod"].resources))
    _kafka_container("grant-acls", foreign_image)(_find(resources, ":StatefulSet", "kafka").props)
    violations = run(resources, stack_config("prod"))
    assert [v for v in violations if v.policy == RULE] == []
    (refused,) = [v for v in violations if v.policy == "image-sources"]
    assert refused.mandatory and "grant-acls" in refused.message


def test_a_readiness_sidecar_with_every_users_password_is_caught_per_other_user(
    run, recorded_stacks
) -> None:
    violations = _prod(
        run,
        recorded_stacks,
        (":StatefulSet", "kafka"),
        _kafka_container("broker-readiness", _mount("users", "/etc/kafka/users")),
    )
    assert sorted(v.message.split(" (user ")[0].split("): ", 1)[1] for v in violations) == sorted(
        [
            "projected volume users is Secret kafka-user-observer",
            f"projected volume users is Secret {_rendered_processor_secret(recorded_stacks)}",
            "projected volume users is Secret kafka-user-topic-reconciler",
        ]
    )


def test_a_sidecar_dressed_as_a_broker_is_still_held_to_the_rule(run, recorded_stacks) -> None:
    """The broker's image and the env var the image reads its role from are what a change can
    give any container: the readiness sidecar given both, and the brokers' key, is caught."""

    def dress_as_broker(container: dict[str, Any]) -> None:
        kafka = _find(recorded_stacks["prod"].resources, ":StatefulSet", "kafka")
        (broker,) = [
            c for c in kafka.props["spec"]["template"]["spec"]["containers"] if c["name"] == "kafka"
        ]
        container["image"] = broker["image"]
        container["env"] = [
            *container.get("env", []),
            {"name": "process.roles", "value": "broker"},
        ]
        _mount("tls", "/etc/kafka/tls")(container)

    (violation,) = _prod(
        run,
        recorded_stacks,
        (":StatefulSet", "kafka"),
        _kafka_container("broker-readiness", dress_as_broker),
    )
    assert violation.message.startswith(
        f"{KAFKA}: {NOT_A_HOLDER}: volume tls is Secret kafka-tls, the whole Secret"
    )


def test_a_second_kafka_statefulset_holding_the_clusters_key_is_caught(
    run, recorded_stacks
) -> None:
    """A workload is taken for a broker by what it runs, which a new StatefulSet can run: it
    holds its own cluster's Secrets, never those of `kafka`."""
    resources = copy.deepcopy(list(recorded_stacks["prod"].resources))
    kafka = _find(resources, ":StatefulSet", "kafka")
    twin = dataclasses.replace(
        kafka, name="kafka-debug", urn=kafka.urn + "-debug", props=copy.deepcopy(kafka.props)
    )
    twin.props["metadata"]["name"] = "kafka-debug"
    resources.append(twin)
    found = [v for v in run(resources, stack_config("prod")) if v.policy == RULE]
    assert found, "a second Kafka StatefulSet mounting kafka-tls passed"
    assert all(v.message.startswith("StatefulSet streaming/kafka-debug: ") for v in found)
    assert any(
        "volume tls is Secret kafka-tls, of Kafka cluster kafka; required: only the Secrets of "
        "its own cluster (kafka-debug-tls, kafka-debug-user-<user>)" in v.message
        for v in found
    ), found
