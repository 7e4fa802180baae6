"""The bootstrap users' credentials and ACLs, set inside each broker's pod by a container on the
broker's own image.

KRaft cannot create ACLs when the storage is formatted, and deny-by-default holds for the topic
reconciler (which grants everyone else's) and for the brokers' readiness user, so someone with
the brokers' rights grants theirs on a new cluster. That is the `grant-acls` container: the
`apache/kafka` image (the same trust boundary as the broker, the only holder of the broker's
key), its busybox `sh` and Kafka's own `kafka-acls.sh`, connected as the broker on its INTERNAL
listener. Its script (`contract.container_commands.grant_script`, which the pack renders
again and compares) first sets the bootstrap users' SCRAM credentials of the current revision
from their Secrets (`kafka-configs.sh`: a volume formatted by an earlier stack holds that stack's
passwords), then runs `kafka-acls.sh --add` once per line of `bootstrap-acls.args` (rendered by
`contract.acl_grants`, which the pack renders again from the JSON and compares: no JSON
parsing in shell), retries until its broker answers, and again whenever the mounted ConfigMap file
changes (a ConfigMap update reaches a mounted file without a restart). Kafka keeps a binding it
already has, so every round is idempotent; nothing is ever removed.

This module renders the tool's client settings; the script and its files are the contract's,
named here too for what runs the script outside a pod (`tests/app/secured_kafka.py`).
"""

from __future__ import annotations

from contract.container_commands import (
    GRANT_CLIENT_FILE,
    KAFKA_ACLS,
    KAFKA_CONFIGS,
    STATE_DIR,
    grant_script,
)
from contract.kafka_security import TLS_CA_FILE, TLS_COMBINED_FILE

__all__ = [
    "GRANT_CLIENT_FILE",
    "KAFKA_ACLS",
    "KAFKA_CONFIGS",
    "REQUEST_TIMEOUT_MS",
    "STATE_DIR",
    "grant_client_properties",
    "grant_script",
]

# A broker that is still starting: each kafka-acls.sh call gives up after this, and the script's
# next round tries again (its liveness limit, `STUCK_MINUTES`, is well above it).
REQUEST_TIMEOUT_MS = 30_000


def grant_client_properties(tls_dir: str) -> str:
    """`kafka-acls.sh --command-config`: the broker's PEM key store, on its INTERNAL listener."""
    settings = {
        "security.protocol": "SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": f"{tls_dir}/{TLS_COMBINED_FILE}",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": f"{tls_dir}/{TLS_CA_FILE}",
        # A broker that is still starting: give up this round, the next one tries again.
        "request.timeout.ms": str(REQUEST_TIMEOUT_MS),
        "default.api.timeout.ms": str(REQUEST_TIMEOUT_MS),
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())
