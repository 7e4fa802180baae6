"""The prod stack's day-2 operations in Pulumi's engine against a real API server: the documented
changes' plans, a password rotation that restarts no broker, and the documented destroy.

Prod's credentials need the random and tls providers, which no registry this project's CI reaches
serves as Go modules (devkit/kube/go_tools.py): where their plugins are not installed the module
skips, and `tests/engine/test_in_place_updates.py` proves the mechanism the rotation relies on.
One stack, one story, in file order, as in test_dev_stack.py.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from pulumi import automation as auto

from app.clients.waiting import wait_until
from devkit.kube.engine_stack import EngineStack
from devkit.kube.go_tools import GO
from devkit.kube.kubectl import kubectl_json
from tests.engine import day2_plans
from tests.engine.test_dev_stack import stamp
from tests.infra.conftest import PREVIOUS_KAFKA_IMAGE, names_of

NAMESPACE = "engine-prod"
PROCESSOR = names_of("prod").application_id
PLUGINS = ("pulumi-resource-random", "pulumi-resource-tls")
SETTINGS: dict[str, Any] = {"namespace": NAMESPACE, "kafka": {"image": PREVIOUS_KAFKA_IMAGE}}


def plugins_missing() -> list[str]:
    """The provider plugins prod needs that neither PATH nor the engine's plugin folder holds."""
    installed = GO / "pulumi-home" / "plugins"
    return [
        plugin
        for plugin in PLUGINS
        if shutil.which(plugin) is None
        and not list(installed.glob(f"resource-{plugin.rsplit('-', 1)[1]}-v*"))
    ]


MISSING = plugins_missing()
pytestmark = pytest.mark.skipif(
    bool(MISSING),
    reason=f"the prod stack needs {', '.join(MISSING)} (the random and tls "
    "providers' plugins; no registry here serves their Go modules); "
    "tests/engine/test_in_place_updates.py proves the mechanism instead",
)


@pytest.fixture(scope="module")
def prod(kubeconfig: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineStack]:
    stack = EngineStack(tmp_path_factory.mktemp("engine-prod"), "prod", kubeconfig, SETTINGS)
    run = stack.up()
    assert run.errors() == [], run.errors()
    print(f"up of a new prod stack: {run.seconds:.1f} s, {run.changes}")
    yield stack


def objects(kubeconfig: str, kind: str, selector: str | None = None) -> dict[str, dict[str, Any]]:
    args = [kind, "-n", NAMESPACE, *(["-l", selector] if selector else [])]
    return {o["metadata"]["name"]: o for o in kubectl_json(kubeconfig, *args)["items"]}


def uids(found: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {name: o["metadata"]["uid"] for name, o in found.items()}


def credential_objects(kubeconfig: str) -> dict[str, dict[str, Any]]:
    """What a rotation changes and the brokers mount: the users' Secrets, ConfigMap
    kafka-bootstrap."""
    found = {n: o for n, o in objects(kubeconfig, "secrets").items() if "-user-" in n}
    found["kafka-bootstrap"] = objects(kubeconfig, "configmaps")["kafka-bootstrap"]
    return found


def test_each_documented_day2_change_plans_what_the_docs_say_and_no_more(
    prod: EngineStack,
) -> None:
    """docs/operations.md's table of prod; no StatefulSet is replaced by any change."""
    day2_plans.check_stack(prod, 3, 12, secured=True)


def test_a_password_rotation_updates_the_credentials_in_place_and_restarts_no_broker(
    prod: EngineStack, kubeconfig: str
) -> None:
    brokers = uids(objects(kubeconfig, "pods", "app.kubernetes.io/name=kafka"))
    processors = uids(objects(kubeconfig, "pods", f"app.kubernetes.io/name={PROCESSOR}"))
    sets = uids(objects(kubeconfig, "statefulsets"))
    mounted = uids(credential_objects(kubeconfig))
    before = objects(kubeconfig, "configmaps")["kafka-bootstrap"]["data"]["scram-mechanism"]
    prod.set(security={"credentialsRevision": 2})
    run = prod.up()
    assert run.errors() == [], run.errors()
    assert uids(objects(kubeconfig, "statefulsets")) == sets, "a StatefulSet was replaced"
    assert uids(objects(kubeconfig, "pods", "app.kubernetes.io/name=kafka")) == brokers
    found = credential_objects(kubeconfig)
    after = found["kafka-bootstrap"]["data"]["scram-mechanism"]
    assert after != before
    assert uids(found) == mounted, "a Secret or the bootstrap ConfigMap was replaced, not updated"
    rolled = objects(kubeconfig, "pods", f"app.kubernetes.io/name={PROCESSOR}")
    assert not set(processors.values()) & set(uids(rolled).values()), "a processor kept its pod"
    created = sorted(stamp(p["metadata"]["creationTimestamp"]) for p in rolled.values())
    print(
        f"rotation 1 -> 2: {run.changes} in {run.seconds:.1f} s; brokers {sorted(brokers)} the "
        f"same pods; processor pods recreated at {[round(c - created[0]) for c in created]} s; "
        f"mechanism {before} -> {after}"
    )


def test_the_documented_destroy_completes_and_the_next_up_finds_the_same_cluster_id(
    prod: EngineStack, kubeconfig: str
) -> None:
    """`pulumi destroy --run-program --exclude-protected` (docs/operations.md): every object
    goes but the claims (and the namespace); the protected cluster id stays in the state, so the
    stack's next `up` formats nothing and its brokers find their data."""
    claims = sorted(objects(kubeconfig, "persistentvolumeclaims"))
    cluster_id = prod.stack.outputs()["kafkaClusterId"].value
    pods = sorted(objects(kubeconfig, "pods"))
    # A plain destroy fails at its preview on the protected id, before anything is deleted
    # (without a preview, as `--skip-preview` or the Automation API run it, it deletes first).
    with pytest.raises(auto.CommandError):
        prod.destroy(run_program=True, preview_only=True)
    assert prod.last_run is not None
    refusals = [
        e for e in prod.last_run.errors() if "RandomId::kafka-cluster-id" in e and "unprotect" in e
    ]
    assert refusals, prod.last_run.errors()
    assert sorted(objects(kubeconfig, "pods")) == pods
    run = prod.destroy(run_program=True, exclude_protected=True)
    assert run.errors() == [], run.errors()
    wait_until(
        lambda: not objects(kubeconfig, "pods"),
        120,
        "every pod of the stack gone",
        interval_s=1.0,
        seen=lambda: sorted(objects(kubeconfig, "pods")),
    )
    assert sorted(objects(kubeconfig, "persistentvolumeclaims")) == claims
    state = prod.stack.export_stack().deployment or {}
    left = [r["type"] for r in state["resources"]]
    assert "random:index/randomId:RandomId" in left, left
    again = prod.up()
    assert again.errors() == [], again.errors()
    sts = objects(kubeconfig, "statefulsets")["kafka"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in sts["containers"][0]["env"]}
    assert env["CLUSTER_ID"] == cluster_id
    print(f"a plain destroy, at its preview: {refusals[0]}")
    print(
        f"destroy --exclude-protected: {run.changes}; kept {claims} and {left}; the next up: "
        f"{again.changes}, cluster id {cluster_id} again"
    )
