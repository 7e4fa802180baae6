"""What the real node could leave behind on the machine, read before `up` and after `down`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from devkit.kube import node

# The machine-wide settings a kubelet, kube-proxy or a CNI plugin writes when let
SYSCTLS = [
    *node.KUBELET_SYSCTLS,
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/forwarding",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
]


def _rules(tool: str) -> list[str]:
    """Every table's rules, without the packet counters and the dump's comments."""
    dump = subprocess.run([tool], capture_output=True, text=True, check=True).stdout
    return [
        line.split(" [", 1)[0] if line.startswith(":") else line
        for line in dump.splitlines()
        if not line.startswith("#")
    ]


def _nft_tables() -> list[str]:
    """The nf_tables tables (iptables-nft's and any kube-proxy makes in nftables mode)."""
    if shutil.which("nft") is None:
        return []
    listed = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True)
    return sorted(listed.stdout.splitlines())


def snapshot() -> dict[str, object]:
    """The machine's iptables rules, settings, mounts, links and the node's cgroups."""
    return {
        "iptables": _rules("iptables-save"),
        "ip6tables": _rules("ip6tables-save"),
        "nft tables": _nft_tables(),
        "sysctls": {k: Path(f"/proc/sys/{k}").read_text().strip() for k in SYSCTLS},
        "mounts": sorted(
            line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
        ),
        "links": sorted(p.name for p in Path("/sys/class/net").iterdir()),
        "cgroups": sorted(
            str(h) for h in node.cgroup_hierarchies() if (h / node.CGROUP_ROOT.lstrip("/")).exists()
        ),
        "container logs": sorted(p.name for p in Path("/var/log/containers").glob("*")),
    }


def differences(before: dict[str, object], after: dict[str, object]) -> list[str]:
    """What changed, one line per part, naming what is new and what went."""
    found = []
    for part, was in before.items():
        now = after[part]
        if now == was:
            continue
        if isinstance(was, list) and isinstance(now, list):
            found.append(
                f"{part}: new {sorted(set(now) - set(was))}, gone {sorted(set(was) - set(now))}"
            )
        else:
            found.append(f"{part}: {was} -> {now}")
    return found
