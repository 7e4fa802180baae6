"""The prod brokers' rendered format step, run with a real Kafka: it bootstraps every SCRAM user.

Runs the `format-storage` init container's script from the rendered prod manifests against the
rendered format settings (TLS listeners, SCRAM, authorizer) with Apache Kafka's own
`StorageTool` (the project's release, or the distribution $KAFKA_HOME names), so Kafka
itself validates the secured configuration the brokers start with.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from contract.container_commands import KAFKA_LIBS, SERVER_PROPERTIES_VARIABLE
from contract.java_properties import format_properties, load_properties
from devkit.kafka_release import ensure as ensure_release
from tests.app.rendered_manifests import Manifests, render

# Where the rendered pod mounts them; the test puts each under its own temporary folder.
MOUNTS = {
    "/etc/kafka/bootstrap": "bootstrap",
    "/etc/kafka/users": "users",
    "/var/lib/kafka/data": "data",
}


def _format_step(manifests: Manifests) -> tuple[str, str, dict[str, str]]:
    """The init container's script, the server.properties of its env and the `kafka-bootstrap`
    files it reads (the SCRAM mechanism of the current credentials revision)."""
    pod = manifests.get("StatefulSet", "kafka")["spec"]["template"]["spec"]
    init = next(c for c in pod["initContainers"] if c["name"] == "format-storage")
    assert init["command"][:2] == ["sh", "-c"]
    env = {e["name"]: e.get("value") for e in init["env"]}
    settings = env[SERVER_PROPERTIES_VARIABLE]
    return init["command"][2], settings, manifests.config_maps()["kafka-bootstrap"]


# Generated ids are URL-safe base64: one in 64 starts with `-`, which a parser takes for an option.
@pytest.mark.parametrize("cluster_id", ["be7vPwBAs4qlyHRJR2Vd_A", "-7ZxatWmgJwRW_uEJAMSNg"])
def test_the_rendered_format_step_bootstraps_every_scram_user(
    tmp_path: Path, cluster_id: str
) -> None:
    release = ensure_release()
    render("prod", tmp_path / "manifests")
    script, server_properties, bootstrap = _format_step(Manifests.load(tmp_path / "manifests"))
    folders = {path: tmp_path / name for path, name in MOUNTS.items()}
    folders[KAFKA_LIBS] = release.libs
    for path, folder in folders.items():
        script = script.replace(path, str(folder))
    # The kubelet substitutes the pod's name (POD_NAME, defined before it in the env).
    format_settings = load_properties(server_properties.replace("$(POD_NAME)", "kafka-1"))
    format_settings["log.dirs"] = str(folders["/var/lib/kafka/data"] / "logs")
    folders["/etc/kafka/bootstrap"].mkdir()
    (folders["/etc/kafka/bootstrap"] / "scram-mechanism").write_text(bootstrap["scram-mechanism"])
    users = {"page-view-counter": "p1", "topic-reconciler": "p2", "observer": "p3"}
    folders["/etc/kafka/users"].mkdir()
    for user, password in users.items():
        (folders["/etc/kafka/users"] / user).write_text(password)
    env = {
        **os.environ,
        "KAFKA_NODE_ID": "1",
        "CLUSTER_ID": cluster_id,
        "SERVER_PROPERTIES": format_properties(format_settings),
        "LOG_DIR": str(tmp_path / "logs"),
    }

    first = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stdout + first.stderr
    # Revision 1's mechanism (prod's credentialsRevision): Kafka accepted it for every user.
    assert "with 3 SCRAM-SHA-512 user(s)" in first.stdout, first.stdout
    meta = load_properties(
        (folders["/var/lib/kafka/data"] / "logs" / "meta.properties").read_text()
    )
    assert meta["cluster.id"] == cluster_id
    checkpoint = (folders["/var/lib/kafka/data"] / "logs" / "bootstrap.checkpoint").read_bytes()
    for user in users:
        assert user.encode() in checkpoint, f"no SCRAM credential for {user} in {checkpoint!r}"
    # A restarted pod finds its storage formatted and leaves it, without putting the passwords
    # on a command line again (the storage tool is not run: no JVM reads them).
    again = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "is formatted already: nothing to do" in again.stdout, again.stdout
    assert (
        checkpoint
        == (folders["/var/lib/kafka/data"] / "logs" / "bootstrap.checkpoint").read_bytes()
    )
