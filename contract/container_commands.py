"""What each container of the stack runs: its command, its args, the command of its exec probes,
and the files it acts on, for the Pulumi program and the policy pack alike.

A container runs with its pod's credentials (the brokers' key, a user's password), so what it
runs must be exactly what review judged. The program renders every container from the
functions here (`infra/broker_containers.py`, `infra/processor.py`, `infra/reconciler_jobs.py`),
and the pack's `container-commands` rule renders each again from the same inputs, read from the
stack it reviews (the brokers' listeners, the Kafka cluster's address, the credentials
revision's SCRAM mechanism), and refuses any difference: a line added to a script, another
module, an exec probe or a lifecycle hook the contract does not declare, a `$(NAME)` the kubelet
would substitute, a file acted on that is not a ConfigMap of the stack, or a container it does
not know. Change what a container runs here, never in a manifest.

No container depends on an image's own start scripts: the broker, its format step and Kafka's
tools run as `java -cp '/opt/kafka/libs/*' <main class>`, the command Kafka's `bin/` scripts
end in, so any image that holds the release's jars at `KAFKA_LIBS` and a Java runtime runs them
alike (the official `apache/kafka` image, or one built from the release's Maven jars). The
images' own ENTRYPOINT and CMD are outside a manifest: `pinned-images` holds them by digest.

Standard library only: the Pulumi program, the pack and the processor image import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contract.acl_grants import GRANTS_FILE
from contract.acl_specs import BROKER_READINESS_USER
from contract.kafka_security import scram_key


@dataclass(frozen=True)
class ContainerCommand:
    """What one container runs, as its manifest spells it."""

    # The container's name: the program names it so, and the pack finds its render by it.
    name: str
    # `command` (empty: the image's ENTRYPOINT) and `args` (empty: the image's CMD).
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    # The command every exec probe of the container runs (empty: it has none; an httpGet or
    # tcpSocket probe runs nothing inside it).
    probe: tuple[str, ...] = ()
    # The env vars the kubelet substitutes into `command` and `args` (`$(NAME)`): any other
    # `$(...)` an env var could fill would change what runs.
    substituted: tuple[str, ...] = ()
    # Files it acts on (runs, grants, applies), each a key of a ConfigMap of the stack mounted
    # whole at the file's folder, so the file is one the pack reviews.
    acts_on: tuple[str, ...] = ()


# The containers' names: the program's manifests use them, and the pack finds a render by them.
FORMAT_STORAGE = "format-storage"
KAFKA = "kafka"
GRANT_ACLS = "grant-acls"
BROKER_READINESS = "broker-readiness"
PROCESSOR = "processor"
RECONCILE = "reconcile"
RETIRE = "retire"
FINALIZE = "finalize-metadata-version"
# The stack setting each container's image comes from: a Job that holds a password with ALTER
# on the cluster, or an init container that writes the brokers' configuration, runs the binary
# of the image review approved for it, not any image pinned by digest. The program renders
# them so (`infra/kafka_cluster.py`, `infra/reconciler_jobs.py`, `infra/metadata_version.py`),
# and the pack's `image-sources` holds every container to the image its setting's anchor runs.
KAFKA_IMAGE_SETTING = "kafka.image"
PROCESSOR_IMAGE_SETTING = "processor.image"
IMAGE_SOURCES = {
    FORMAT_STORAGE: KAFKA_IMAGE_SETTING,
    KAFKA: KAFKA_IMAGE_SETTING,
    GRANT_ACLS: KAFKA_IMAGE_SETTING,
    FINALIZE: KAFKA_IMAGE_SETTING,
    BROKER_READINESS: PROCESSOR_IMAGE_SETTING,
    PROCESSOR: PROCESSOR_IMAGE_SETTING,
    RECONCILE: PROCESSOR_IMAGE_SETTING,
    RETIRE: PROCESSOR_IMAGE_SETTING,
}


# --- Apache Kafka's own commands, without its scripts ---------------------------------------

# Where every broker image holds the release's jars (the official image's layout).
KAFKA_LIBS = "/opt/kafka/libs"
# The main classes Kafka's `bin/` scripts run (`kafka-run-class.sh <class>`).
KAFKA_SERVER = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"
CONFIG_COMMAND = "kafka.admin.ConfigCommand"
FEATURE_COMMAND = "org.apache.kafka.tools.FeatureCommand"
# What `kafka-run-class.sh` gives a broker's JVM besides its heap (KAFKA_JVM_PERFORMANCE_OPTS).
JVM_PERFORMANCE_OPTS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
# A tool runs one request and exits: a small heap, and the quick compiler only (its start is
# most of its run).
TOOL_JVM_OPTS = ("-Xmx128m", "-XX:TieredStopAtLevel=1")
# With no log4j2 configuration file, log4j2's default one logs to standard output at the
# level of `log4j2.level` (ERROR when unset): the broker's INFO for `kubectl logs`, a tool's
# errors only (its results are its standard output).
BROKER_LOG_LEVEL = "-Dlog4j2.level=INFO"


def _java(options: tuple[str, ...], main_class: str) -> tuple[str, ...]:
    """`java` with `options` on the release's jars, running `main_class`."""
    return ("java", *options, "-cp", f"{KAFKA_LIBS}/*", main_class)


def kafka_tool(main_class: str) -> tuple[str, ...]:
    """The JVM command line of one of Kafka's tools, its arguments to follow."""
    return _java(TOOL_JVM_OPTS, main_class)


def _shell(words: tuple[str, ...]) -> str:
    """`words` as one line of a `sh` script (the classpath's `*` quoted: java expands it)."""
    return " ".join(f"'{word}'" if "*" in word else word for word in words)


KAFKA_ACLS = _shell(kafka_tool(ACL_COMMAND))
KAFKA_CONFIGS = _shell(kafka_tool(CONFIG_COMMAND))
KAFKA_STORAGE = _shell(kafka_tool(STORAGE_TOOL))


# --- the brokers' pod (infra/kafka_cluster.py) ------------------------------------------------

DATA_DIR = "/var/lib/kafka/data"
# The node's settings, rendered whole by the program into this variable of the broker
# container: a setting changed in the stack changes the pod template and so rolls the brokers,
# and the pack reads every setting where it takes effect. `$(POD_NAME)` in it is the kubelet's.
SERVER_PROPERTIES_VARIABLE = "SERVER_PROPERTIES"
# The JVM's heap (`-Xms -Xmx`), by the name Kafka's own scripts read it.
HEAP_OPTS_VARIABLE = "KAFKA_HEAP_OPTS"
CLUSTER_ID_VARIABLE = "CLUSTER_ID"
# The pod's writable scratch folder (an emptyDir under a read-only root): the broker's
# server.properties, the grant script's heartbeat and tool output.
STATE_DIR = "/tmp"
# Where the format step and the reconciler read every user's password: one file per user,
# named after it (a projected volume of the user Secrets).
USERS_DIR = "/etc/kafka/users"
# What a new cluster starts from (the `<name>-bootstrap` ConfigMap): the ACLs the `grant-acls`
# containers grant (the topic reconciler's and the readiness user's own) as JSON (what the
# readiness sidecars check) and as `kafka-acls.sh` arguments (`GRANTS_FILE`, what the grant
# script runs), and the readiness sidecars' and the grant tool's client settings.
BOOTSTRAP_DIR = "/etc/kafka/bootstrap"
BOOTSTRAP_ACLS_FILE = "bootstrap-acls.json"
GRANT_CLIENT_FILE = "grant-client.properties"
READINESS_CLIENT_FILE = "readiness-client.properties"
# Its previous credentials revision's login, while a rotation is under way.
READINESS_PREVIOUS_CLIENT_FILE = "readiness-previous-client.properties"
# The SCRAM mechanism of the current credentials revision, which the format step creates the
# users with. A file, not part of the script: a rotation changes it without rolling the brokers.
SCRAM_MECHANISM_FILE = "scram-mechanism"
# The broker-readiness sidecar's HTTP port (`app.admin.broker_readiness`): /ready, /live, /metrics.
READINESS_PORT = 8090
# The pod's ordinal, which the program sets from the downward API (the node's `node.id`, the
# sidecar's `--node-id`).
NODE_ID_VARIABLE = "KAFKA_NODE_ID"
# The grant script's own files, in the pod's /tmp: a heartbeat touched every round (the
# container's probes read it), and the last tool output, shown when a line fails.
HEARTBEAT = f"{STATE_DIR}/bootstrap-acls.alive"
# Seconds between two looks at the grant lines (and between two tries while the broker starts).
PERIOD_S = 15
# A round that has not come back in this many minutes is stuck (the liveness probe's limit):
# each kafka-acls.sh call gives up after its request timeout (infra/bootstrap_grants.py).
STUCK_MINUTES = 5

# The node's server.properties: the rendered settings and its node id, into `$config`.
_WRITE_CONFIG = (
    f'printf \'%s\\n\' "${SERVER_PROPERTIES_VARIABLE}" "node.id=${NODE_ID_VARIABLE}" > "$config"'
)

# The broker's JVM: its heap from the pod's env (unquoted: the options are words).
_BROKER_JVM = _java(
    (f"${HEAP_OPTS_VARIABLE}", *JVM_PERFORMANCE_OPTS, BROKER_LOG_LEVEL), KAFKA_SERVER
)

# The broker: its settings and node id into a file, its storage formatted at the first start
# (with `controller.quorum.voters`, a static quorum: every node formats alike, no `--standalone`;
# a secured cluster's `format-storage` has formatted it already, with its SCRAM users), then the
# broker's JVM in place of the shell, so that it receives the kubelet's SIGTERM. The cluster id
# goes as `--cluster-id=<id>`: a generated id is URL-safe base64 and starts with `-` one time in
# 64, which the tool's parser would take for an option.
BROKER_SCRIPT = f"""set -eu
config={STATE_DIR}/server.properties
{_WRITE_CONFIG}
if [ ! -f {DATA_DIR}/logs/meta.properties ]; then
  echo "formatting {DATA_DIR}/logs as node ${NODE_ID_VARIABLE} of cluster ${CLUSTER_ID_VARIABLE}"
  {KAFKA_STORAGE} format --cluster-id="${CLUSTER_ID_VARIABLE}" --config "$config" \\
    --ignore-formatted
fi
# shellcheck disable=SC2086 # the heap options are words
exec {_shell(_BROKER_JVM)} "$config"
"""

# Formats the node's storage with every SCRAM user before the broker's start would format it
# without them (which then finds it formatted, and goes on): KRaft writes users
# given at format into the cluster's first metadata, so they exist before any client connects,
# each with its password of the current credentials revision for that revision's mechanism.
# The passwords are files (a projected volume of the user Secrets), never environment, and reach
# a command line only for the first format: a formatted node skips the step at every later start.
FORMAT_SCRIPT = f"""set -eu
if [ -f {DATA_DIR}/logs/meta.properties ]; then
  echo "{DATA_DIR}/logs is formatted already: nothing to do"
  exit 0
fi
config={STATE_DIR}/format.properties
{_WRITE_CONFIG}
mechanism=$(cat {BOOTSTRAP_DIR}/{SCRAM_MECHANISM_FILE})
set --
for file in {USERS_DIR}/*; do
  set -- "$@" --add-scram "$mechanism=[name=$(basename "$file"),password=$(cat "$file")]"
done
echo "formatting {DATA_DIR}/logs with $(( $# / 2 )) $mechanism user(s)"
exec {KAFKA_STORAGE} format --cluster-id="$CLUSTER_ID" --config "$config" \
  --ignore-formatted "$@"
"""

# The grant container's probes: each round touches the heartbeat; one stuck longer is restarted.
ALIVE_PROBE = ("sh", "-c", f'test -n "$(find {HEARTBEAT} -mmin -{STUCK_MINUTES})"')


def grant_script(bootstrap_dir: str, bootstrap_server: str, users_dir: str = USERS_DIR) -> str:
    """The `grant-acls` container's `sh -c` script (busybox sh, `sha256sum`, `kafka-acls.sh`,
    `kafka-configs.sh`): once per start, the current revision's SCRAM credential of each user in
    `users_dir` (the bootstrap users: the topic reconciler, then the readiness user, so that the
    readiness sidecar reports Ready only once every bootstrap user can log in); then
    `kafka-acls.sh --add` once per line of `GRANTS_FILE`, again whenever the file changes.

    The credentials are set because the format step writes users only into an empty storage: a
    kept volume adopted by a new stack (a destroy that kept the claims, `kafka.clusterId`) holds
    the old stack's passwords, and without its own the reconciler could never log in to set
    everyone else's. The password goes to the tool on its standard input (`printf` is a shell
    builtin): no command line holds it, and a failure's output is shown with it masked."""
    output = f"{STATE_DIR}/kafka-acls.out"
    return f"""set -eu
set -f  # each rendered line is split into words, never globbed
lines={bootstrap_dir}/{GRANTS_FILE}
config={bootstrap_dir}/{GRANT_CLIENT_FILE}
users={users_dir}
server={bootstrap_server}
granted=""
credentials=""
touch {HEARTBEAT}
echo "setting the SCRAM credentials of $users and granting the ACLs of $lines as the broker on \\
$server, the ACLs again on each change"
while :; do
  touch {HEARTBEAT}
  if [ -z "$credentials" ]; then
    mechanism=$(cat {bootstrap_dir}/{SCRAM_MECHANISM_FILE})
    # The readiness user last: a broker its sidecar reports Ready has every bootstrap user's.
    credentials=$( (ls "$users" | grep -vx {BROKER_READINESS_USER} || :
      ls "$users" | grep -x {BROKER_READINESS_USER} || :) | tr '\\n' ' ')
    for user in $credentials; do
      if ! printf '%s\\n' "$mechanism=password=$(cat "$users/$user")" \\
          | {KAFKA_CONFIGS} --bootstrap-server "$server" --command-config "$config" --alter \\
            --entity-type users --entity-name "$user" --add-config-file /dev/stdin \\
            > {output} 2>&1; then
        echo "kafka-configs.sh: setting the $mechanism credential of $user failed" \\
          "(the broker may be starting), retrying:"
        tail -n 5 {output} | sed 's/password=[^],]*/password=(masked)/g'
        credentials=""
        break
      fi
    done
    [ -z "$credentials" ] || echo "set the $mechanism credentials of $credentials"
  fi
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


def format_storage() -> ContainerCommand:
    """`format-storage`: the node's storage formatted with every SCRAM user (secured only)."""
    return ContainerCommand(FORMAT_STORAGE, command=("sh", "-c", FORMAT_SCRIPT))


def kafka_broker() -> ContainerCommand:
    """`kafka`: the node's storage formatted once, then the broker, with the settings of its
    `SERVER_PROPERTIES` variable."""
    return ContainerCommand(KAFKA, command=("sh", "-c", BROKER_SCRIPT))


def grant_acls(internal_port: int) -> ContainerCommand:
    """`grant-acls`: the bootstrap ACLs, granted as the broker on its INTERNAL listener."""
    return ContainerCommand(
        GRANT_ACLS,
        command=("sh", "-c", grant_script(BOOTSTRAP_DIR, f"localhost:{internal_port}")),
        probe=ALIVE_PROBE,
        # It runs every line of it with the broker's key (`kafka-least-privilege` reviews it).
        acts_on=(f"{BOOTSTRAP_DIR}/{GRANTS_FILE}",),
    )


def broker_readiness(client_port: int, *, secured: bool) -> ContainerCommand:
    """`broker-readiness`: `python -m app.admin.broker_readiness` beside the broker, on its
    CLIENT listener; on a secured cluster as the readiness user, checking the bootstrap ACLs."""
    connect: tuple[str, ...] = ("--bootstrap-server", f"localhost:{client_port}")
    if secured:
        connect += (
            "--command-config",
            f"{BOOTSTRAP_DIR}/{READINESS_CLIENT_FILE}",
            "--fallback-command-config",
            f"{BOOTSTRAP_DIR}/{READINESS_PREVIOUS_CLIENT_FILE}",
            "--bootstrap-acls",
            f"{BOOTSTRAP_DIR}/{BOOTSTRAP_ACLS_FILE}",
        )
    return ContainerCommand(
        BROKER_READINESS,
        # `args`: the image's ENTRYPOINT (tini) stays PID 1.
        args=(
            "python",
            "-m",
            "app.admin.broker_readiness",
            "--node-id",
            f"$({NODE_ID_VARIABLE})",
            *connect,
            "--port",
            str(READINESS_PORT),
        ),
        substituted=(NODE_ID_VARIABLE,),
    )


def bootstrap_servers(cluster: str, namespace: str, client_port: int) -> str:
    """The address the Jobs are given: the cluster's client Service in cluster DNS."""
    return f"{cluster}.{namespace}.svc.cluster.local:{client_port}"


# --- the processor (infra/processor.py) -------------------------------------------------------

PROPERTIES_DIR = "/etc/processor"
PROPERTIES_FILE = "processor.properties"


def processor() -> ContainerCommand:
    """`processor`: `python -m app.processor` with the properties the pack reviews."""
    properties = f"{PROPERTIES_DIR}/{PROPERTIES_FILE}"
    return ContainerCommand(
        PROCESSOR,
        # `args`, not `command`: `command` replaces the image's ENTRYPOINT, and tini (PID 1:
        # forwards SIGTERM, reaps the JVM's children) must run.
        args=("python", "-m", "app.processor", "--properties", properties),
        acts_on=(properties,),
    )


# --- the topic reconciler's and the SCRAM retirement's Jobs (infra/reconciler_jobs.py) --------

SPECS_DIR = "/etc/topics"
SPECS_FILE = "topics.json"
ACLS_FILE = "acls.json"
CLIENT_FILE = "client.properties"
# The reconciler's login when Kafka refuses CLIENT_FILE's: in a rotation its new credential does
# not exist until it sets it, and it logs in with the previous revision's (still valid) instead.
PREVIOUS_CLIENT_FILE = "previous-client.properties"
# A stack setting (`topics.allowPartitionIncrease`) that only this flag shows.
ALLOW_PARTITION_INCREASE = "--allow-partition-increase"


def topic_reconciler(
    bootstrap_servers: str, *, allow_partition_increase: bool, scram_mechanism: str | None
) -> ContainerCommand:
    """`reconcile`: `python -m app.admin.reconcile`, the topic specs and, on a secured cluster
    (`scram_mechanism`: the credentials revision's), the users, their ACLs and passwords."""
    args = [
        "python",
        "-m",
        "app.admin.reconcile",
        "--bootstrap-servers",
        bootstrap_servers,
        "--specs",
        f"{SPECS_DIR}/{SPECS_FILE}",
    ]
    if allow_partition_increase:
        args.append(ALLOW_PARTITION_INCREASE)
    acts_on = [f"{SPECS_DIR}/{SPECS_FILE}"]
    if scram_mechanism is not None:
        args += [
            "--acls",
            f"{SPECS_DIR}/{ACLS_FILE}",
            "--command-config",
            f"{SPECS_DIR}/{CLIENT_FILE}",
            "--fallback-command-config",
            f"{SPECS_DIR}/{PREVIOUS_CLIENT_FILE}",
            # Every user's password, upserted as its SCRAM credential of the revision's
            # mechanism beside the previous one's: the first step of a rotation.
            "--scram-passwords-dir",
            USERS_DIR,
            "--scram-mechanism",
            _mechanism(scram_mechanism),
        ]
        acts_on.append(f"{SPECS_DIR}/{ACLS_FILE}")
    return ContainerCommand(RECONCILE, args=tuple(args), acts_on=tuple(acts_on))


def scram_retire(bootstrap_servers: str, retired: str) -> ContainerCommand:
    """`retire`: `python -m app.admin.scram_retire`, deleting every user's credential of the
    `retired` mechanism (the previous revision's) once every client has moved on."""
    acls = f"{SPECS_DIR}/{ACLS_FILE}"
    return ContainerCommand(
        RETIRE,
        args=(
            "python",
            "-m",
            "app.admin.scram_retire",
            "--bootstrap-servers",
            bootstrap_servers,
            "--acls",
            acls,
            "--command-config",
            f"{SPECS_DIR}/{CLIENT_FILE}",
            "--retire",
            _mechanism(retired),
        ),
        acts_on=(acls,),
    )


# --- the metadata.version finalization (infra/metadata_version.py) -----------------------------

FEATURES_DIR = "/etc/kafka/features"
# The Java client's settings of `kafka-features.sh` on a secured cluster (SCRAM over TLS).
FEATURES_CLIENT_FILE = "features-client.properties"
RELEASE_VERSION = "--release-version"
# An Apache Kafka release as the tool takes it (X.Y: 4.3).
RELEASE = re.compile(r"[0-9]+\.[0-9]+")


def finalize_metadata_version(
    bootstrap_servers: str, release: str, *, secured: bool
) -> ContainerCommand:
    """`finalize-metadata-version`: Kafka's own `kafka-features.sh upgrade --release-version
    X.Y`, which raises the cluster's finalized features (`metadata.version` first) to the
    release's own once every broker runs it; a no-op when they are there already."""
    if not RELEASE.fullmatch(release):
        raise ValueError(f"release {release!r}: must be an Apache Kafka release as X.Y (4.3)")
    connect: tuple[str, ...] = ("--bootstrap-server", bootstrap_servers)
    acts_on: tuple[str, ...] = ()
    if secured:
        client_file = f"{FEATURES_DIR}/{FEATURES_CLIENT_FILE}"
        connect += ("--command-config", client_file)
        acts_on = (client_file,)
    return ContainerCommand(
        FINALIZE,
        command=(*kafka_tool(FEATURE_COMMAND), *connect, "upgrade", RELEASE_VERSION, release),
        acts_on=acts_on,
    )


def _mechanism(mechanism: str) -> str:
    """`mechanism`, after checking it is one of Kafka's two SCRAM mechanisms."""
    scram_key(mechanism)
    return mechanism
