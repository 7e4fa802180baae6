"""The node's network: a bridge of its own, closed to the outside, and what `down` must take away.

Pods sit on BRIDGE (NODE_IP/24) with no default route and no masquerade; forwarding is on for that
bridge alone, and FORWARD rules in a chain of its own (CHAIN) drop whatever would cross from the
bridge to another interface. `network_down` removes that chain, every KUBE- chain kube-proxy's
cleanup leaves, the bridge, and each iptables table the node brought into being (on the
nf_tables backend a table outlives its last rule).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from devkit.kube import control_plane, images
from devkit.kube.processes import sh

STATE = images.STATE
BRIDGE = "ssnode0"
NODE_IP = "10.244.0.1"
POD_CIDR = "10.244.0.0/24"
CHAIN = "SSNODE-FORWARD"
IPTABLES = ("iptables", "ip6tables")
BUILT_IN_CHAINS = {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}
# The iptables tables there were before `up` (the node's first touch of a table creates it).
TABLES_BEFORE = STATE / "iptables-tables-before.json"


def network_up() -> None:
    if sh("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "replace", f"{NODE_IP}/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    # Forwarding for this bridge only (ip_forward stays as it is): a pod's packet to a Service's
    # address comes back out of the bridge after kube-proxy's DNAT.
    Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/forwarding").write_text("1\n")
    sh("iptables", "-N", CHAIN, check=False)
    sh("iptables", "-F", CHAIN)
    sh("iptables", "-A", CHAIN, "-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP")  # pod to elsewhere
    sh("iptables", "-A", CHAIN, "!", "-i", BRIDGE, "-o", BRIDGE, "-j", "DROP")  # elsewhere to pod
    sh("iptables", "-A", CHAIN, "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT")
    if sh("iptables", "-C", "FORWARD", "-j", CHAIN, check=False).returncode != 0:
        sh("iptables", "-I", "FORWARD", "1", "-j", CHAIN)
    cni = STATE / "cni" / "net.d"
    cni.mkdir(parents=True, exist_ok=True)
    conflist = {
        "cniVersion": "1.0.0",
        "name": "stateful-streaming-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": False,  # no default route in the pods
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR, "rangeStart": "10.244.0.10"}]],
                    # Services are reached through the node; nothing else is routed
                    "routes": [{"dst": control_plane.SERVICE_CIDR, "gw": NODE_IP}],
                    "dataDir": str(STATE / "cni" / "ipam"),
                },
            }
        ],
    }
    (cni / "10-node.conflist").write_text(json.dumps(conflist, indent=2))


def put_closing_chain_first() -> None:
    """CHAIN back at the top of FORWARD once kube-proxy has put its jumps there: the node's own
    rules go first, so nothing that kube-proxy's chains accept crosses off the bridge."""
    sh("iptables", "-D", "FORWARD", "-j", CHAIN)
    sh("iptables", "-I", "FORWARD", "1", "-j", CHAIN)


def foreign_kube_chains() -> list[str]:
    """The KUBE- chains already on the machine, each as `tool -t table: chains` (another
    node's, or this one's left over): `down` removes every KUBE- chain, so `up` refuses while
    any is here."""
    return [
        f"{tool} -t {table}: {', '.join(found)}"
        for tool in IPTABLES
        for table in saved(tool)
        if (found := chains(tool, table, "KUBE-"))
    ]


def network_down() -> None:
    sh("iptables", "-D", "FORWARD", "-j", CHAIN, check=False)
    sh("iptables", "-F", CHAIN, check=False)
    sh("iptables", "-X", CHAIN, check=False)
    # `kube-proxy --cleanup` leaves KUBE-FIREWALL (the kubelet's once, so kube-proxy keeps it) in
    # INPUT and OUTPUT; `up` refused a machine that had KUBE- chains, so every one left is ours
    for tool in IPTABLES:
        for table in saved(tool):
            remove_chains(tool, table, "KUBE-")
    sh("ip", "link", "del", BRIDGE, check=False)
    drop_new_tables()


def saved(tool: str) -> dict[str, list[str]]:
    """Each table `tool` has, with its dump's lines (`iptables-save`: unlike `iptables -t T -S`,
    reading a table this way does not create it on the nf_tables backend)."""
    tables: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in sh(f"{tool}-save", check=False).stdout.splitlines():
        if line.startswith("*"):
            lines = tables.setdefault(line[1:], [])
        elif not line.startswith(("#", "COMMIT")):
            lines.append(line)
    return tables


def chains(tool: str, table: str, prefix: str) -> list[str]:
    """The chains of `table` whose names start with `prefix` (none where it does not exist)."""
    return [
        line[1:].split()[0] for line in saved(tool).get(table, []) if line.startswith(f":{prefix}")
    ]


def _untouched(lines: list[str]) -> bool:
    """Whether a table's dump is its built-in chains alone, accepting, with no rule."""
    return all(line.startswith(":") and line.split()[1] == "ACCEPT" for line in lines) and all(
        line[1:].split()[0] in BUILT_IN_CHAINS for line in lines
    )


def record_tables() -> None:
    """The iptables tables the machine has before the node first touches one (once per node)."""
    if not TABLES_BEFORE.exists():
        TABLES_BEFORE.write_text(json.dumps({tool: sorted(saved(tool)) for tool in IPTABLES}))


def drop_new_tables() -> None:
    """The tables the node brought into being, once nothing is left in them: on the nf_tables
    backend a table stays after its last rule goes, so `nft` deletes it (on the legacy one a
    table is a kernel module's, and stays)."""
    if not TABLES_BEFORE.exists():
        return
    before = json.loads(TABLES_BEFORE.read_text())
    nft = shutil.which("nft")
    for tool, family in zip(IPTABLES, ("ip", "ip6"), strict=True):
        for table, lines in saved(tool).items():
            if table in before.get(tool, []) or not _untouched(lines):
                continue
            if nft is None or "nf_tables" not in sh(tool, "-V", check=False).stdout:
                print(f"warning: {tool} table {table} stays (empty)", file=sys.stderr)
                continue
            sh(nft, "delete", "table", family, table, check=False)
    TABLES_BEFORE.unlink()


def remove_chains(tool: str, table: str, prefix: str) -> None:
    """Every rule that jumps to a chain named `prefix...`, then those chains."""
    own = chains(tool, table, prefix)
    if not own:
        return
    for line in sh(tool, "-t", table, "-S", check=False).stdout.splitlines():
        words = line.split()
        if words[:1] == ["-A"] and "-j" in words and words[words.index("-j") + 1] in own:
            sh(tool, "-t", table, "-D", *words[1:], check=False)
    for chain in own:
        sh(tool, "-t", table, "-F", chain, check=False)
    for chain in own:
        sh(tool, "-t", table, "-X", chain, check=False)
