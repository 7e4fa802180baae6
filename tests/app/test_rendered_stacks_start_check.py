"""Every stack the repository ships, and the variants the program's tests build, as rendered, pass
the processor's own start-time check.

The Pulumi program computes settings (the session timeout from the restart budget, the poll
interval beside it) that the processor validates again at start, with librdkafka's rules among
its own. A rendered ConfigMap the processor refuses would crash-loop every pod of that stack, so
each stack's rendered `processor.properties` goes through the same `parse_settings` a pod runs,
with the pod's identity and its mounted files in place (its user's password, the CA).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from app.processor.settings import parse_settings
from devkit.local_tls import write_broker_tls
from tests.app.rendered_manifests import Manifests, render

STACKS = sorted(p.name.split(".")[1] for p in Path(__file__).parents[2].glob("Pulumi.*.yaml"))
# Where a pod mounts its user's Secret (the password file `${dir:...}` reads) and the CA.
USER_SECRET_MOUNT = "/etc/kafka-user"
CA_MOUNT = "/etc/kafka-ca"


def test_the_repository_ships_dev_and_prod() -> None:
    assert STACKS == ["dev", "prod"]


# The variants the program tests build beside the shipped files (tests/infra): each membership
# mode, stateless, and cert-manager certificates, on both profiles. Rendered the same way, so a
# combination the processor would refuse fails here.
VARIANTS: dict[str, dict[str, Any]] = {
    "as-shipped": {},
    "static": {"processor": {"membershipMode": "static", "numStandbyReplicas": 1}},
    "handoff": {"processor": {"membershipMode": "handoff", "replicas": 2, "numStandbyReplicas": 1}},
    "stateless": {"processor": {"stateful": False, "membershipMode": "static"}},
    "long-restart-budget": {"processor": {"minReadySeconds": 600}},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("stack", STACKS)
def test_every_shipped_stack_and_variant_passes_the_processors_start_check(
    stack: str, variant: str, tmp_path: Path
) -> None:
    render(stack, tmp_path / "manifests", VARIANTS[variant])
    config_maps = Manifests.load(tmp_path / "manifests").config_maps()
    [text] = [
        data["processor.properties"]
        for data in config_maps.values()
        if "processor.properties" in data
    ]
    secret = tmp_path / "kafka-user"
    secret.mkdir()
    (secret / "password").write_text("a-password")
    ca = write_broker_tls(tmp_path / "kafka-ca")  # a real CA: librdkafka loads the file
    settings = parse_settings(
        text.replace(USER_SECRET_MOUNT, str(secret)).replace(CA_MOUNT, str(ca)),
        env={**os.environ, "POD_NAME": "page-view-counter-0"},
    )
    consumer = settings.consumer_config()
    assert int(consumer["max.poll.interval.ms"]) >= int(consumer["session.timeout.ms"])
