"""A container's last step before its process, as a container runtime takes it.

    ip netns exec <pod> unshare --uts -- python tests/app/container_entry.py SPEC.json

Run by `tests.app.pod_runtime` inside the pod's network namespace, in a mount namespace of its
own (`ip netns exec` makes one and binds the pod's /etc/hosts into it) and a UTS namespace of its
own. Here, still as root: the pod's hostname, the image's folders and the pod's volumes bound
at their paths, the root made read-only when `readOnlyRootFilesystem` says so, then the user,
groups and working directory of the security context, and `exec` of the container's command.
Standard library only, and run as a file: nothing of the repository is imported before the mounts.

SPEC is JSON: {"hostname", "mounts": [[source, target, read_only], ...] (parents before
children), "read_only_root", "uid", "gid", "groups", "workdir", "argv", "env"}.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path


def mount(source: str, target: str, read_only: bool) -> None:
    """Bind `source` (a path or /proc/N/fd/M) at `target`, read-only if asked."""
    # No canonicalising: a /proc/N/fd/M source would be resolved again by its path name.
    subprocess.run(["mount", "--no-canonicalize", "--bind", source, target], check=True)
    if read_only:
        subprocess.run(["mount", "-o", "remount,bind,ro", target], check=True)


def main(argv: list[str]) -> None:
    """Set the container up as SPEC says and replace this process with its command."""
    spec = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    socket.sethostname(spec["hostname"])
    # Every source is opened before any mount: a volume bound at /tmp would otherwise hide the
    # sources of later mounts that live under the host's /tmp.
    sources = [os.open(source, os.O_PATH) for source, _, _ in spec["mounts"]]
    for fd, (_, target, read_only) in zip(sources, spec["mounts"], strict=True):
        mount(f"/proc/{os.getpid()}/fd/{fd}", target, read_only)
    for fd in sources:
        os.close(fd)
    if spec["read_only_root"]:
        subprocess.run(["mount", "-o", "remount,bind,ro", "/"], check=True)
    os.setgroups(spec["groups"])
    os.setgid(spec["gid"])
    os.setuid(spec["uid"])
    os.chdir(spec["workdir"])
    os.execvpe(spec["argv"][0], spec["argv"], spec["env"])


if __name__ == "__main__":
    main(sys.argv)
