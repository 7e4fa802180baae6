"""Loopback ports for the local brokers, instances and probes: below the kernel's ephemeral range,
never handed out twice by one process."""

from __future__ import annotations

import random
import socket
from pathlib import Path

HOST = "127.0.0.1"


class NoFreePort(RuntimeError):
    """No port below the ephemeral range was free after many tries."""


def _ephemeral_low() -> int:
    """The lowest port the kernel gives outgoing connections (Linux; 32768 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports are picked below the kernel's ephemeral range: a port found free there can still be taken
# by any client's outgoing connection before the broker binds it (seen: a node failing with
# "Address already in use" while other clusters' clients connected); below it only an explicit
# bind competes. Ports handed out by this process are never handed out again.
_PORTS_FROM = 10_000
_handed_out: set[int] = set()
_random_ports = random.Random()


def free_port(host: str = HOST) -> int:
    """A TCP port on `host` that was free a moment ago, outside the ephemeral range."""
    low = _ephemeral_low()
    if low <= _PORTS_FROM:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])
    for _ in range(1000):
        port = _random_ports.randrange(_PORTS_FROM, low)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise NoFreePort(f"no free port on {host} in {_PORTS_FROM}-{low - 1} after 1000 tries")
