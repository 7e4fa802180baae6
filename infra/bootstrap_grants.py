"""The bootstrap ACLs, granted inside each broker's pod by a container on the broker's own image.

KRaft cannot create ACLs when the storage is formatted, and deny-by-default holds for the topic
reconciler (which grants everyone else's) and for the brokers' readiness user, so someone with
the brokers' rights grants theirs on a new cluster. That is the `grant-acls` container: the
`apache/kafka` image (the same trust boundary as the broker, the only holder of the broker's
key), its busybox `sh` and Kafka's own `kafka-acls.sh`, connected as the broker on its INTERNAL
listener. It runs `kafka-acls.sh --add` once per line of `bootstrap-acls.args` (rendered by
`policies.contract.acl_grants`, which the pack renders again from the JSON and compares: no JSON
parsing in shell), retries until its broker answers, and again whenever the mounted ConfigMap file
changes (a ConfigMap update reaches a mounted file without a restart). Kafka keeps a binding it
already has, so every round is idempotent; nothing is ever removed.
"""

from __future__ import annotations

from policies.contract.acl_grants import GRANTS_FILE
from policies.contract.kafka_security import TLS_CA_FILE, TLS_COMBINED_FILE

# The tool's client settings: the broker's key store and CA (paths only, nothing secret).
GRANT_CLIENT_FILE = "grant-client.properties"
KAFKA_ACLS = "/opt/kafka/bin/kafka-acls.sh"
# The script's own files, in the pod's /tmp: a heartbeat touched every round (the container's
# probes read it), and the last tool output, shown when a line fails.
STATE_DIR = "/tmp"
HEARTBEAT = f"{STATE_DIR}/bootstrap-acls.alive"
# Seconds between two looks at the file (and between two tries while the broker is starting).
PERIOD_S = 15
# A round that has not come back in this many minutes is stuck (the liveness probe's limit):
# each kafka-acls.sh call gives up after the request timeout below.
STUCK_MINUTES = 5
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


def grant_script(bootstrap_dir: str, bootstrap_server: str) -> str:
    """The `grant-acls` container's `sh -c` script (busybox sh, `sha256sum`, `kafka-acls.sh`)."""
    output = f"{STATE_DIR}/kafka-acls.out"
    return f"""set -eu
set -f  # each rendered line is split into words, never globbed
lines={bootstrap_dir}/{GRANTS_FILE}
config={bootstrap_dir}/{GRANT_CLIENT_FILE}
server={bootstrap_server}
granted=""
touch {HEARTBEAT}
echo "granting the ACLs of $lines as the broker on $server, again on each change"
while :; do
  touch {HEARTBEAT}
  digest=$(sha256sum "$lines" | cut -d ' ' -f 1)
  if [ "$digest" != "$granted" ]; then
    failed=""
    while IFS= read -r line; do
      [ -n "$line" ] || continue
      # shellcheck disable=SC2086 # the line's words are the tool's arguments
      if ! {KAFKA_ACLS} --bootstrap-server "$server" --command-config "$config" \\
          --add $line < /dev/null > {output} 2>&1; then  # stdin: the lines, not the tool's
        failed=$line
        break
      fi
    done < "$lines"
    if [ -z "$failed" ]; then
      granted=$digest
      echo "granted every ACL of $lines (sha256 $digest)"
    else
      echo "kafka-acls.sh --add $failed: failed (the broker may be starting), retrying:"
      tail -n 5 {output}
    fi
  fi
  sleep {PERIOD_S}
done
"""
