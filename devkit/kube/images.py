#!/usr/bin/env python3
"""The images of the local node, built from the registries with no container daemon.

No registry base can be pulled here, so the base is made from Debian's packages: `debootstrap
--variant=minbase bookworm` with python3 and pip, shaped like the official `python:3.11-slim-
bookworm` (the interpreter also at /usr/local/bin, pip allowed to install). buildah (Debian's,
chroot isolation, its storage under .venv/node/buildah) then builds:

- the processor image from the project's own Dockerfile, with that base as its `PYTHON_IMAGE`;
- the broker image from devkit/kube/broker.Containerfile: Java and the jars of the Apache Kafka
  release the project pins, at /opt/kafka/libs, as in the official apache/kafka image;
- the pause image, from `build/pause/linux/pause.c` of the Kubernetes module, `gcc -static`.

Each is written as a docker-archive, which `devkit/kube/node.py` imports into the node's containerd,
into ~/.cache/stateful-streaming-node (NODE_IMAGES_HOME moves it; outside the clone, as the Go
tools are, so that every checkout on the machine shares them) beside a digest of what it was
built from: the recipe, the base, and for the processor every file its Dockerfile copies. An
image whose inputs are unchanged is not built again.

    python3 devkit/kube/images.py                # all of them (cold: about 6 min; then seconds)
    python3 devkit/kube/images.py broker pause   # only these
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: `python3 devkit/kube/images.py`
from devkit.kafka_release import KAFKA_VERSION  # noqa: E402
from devkit.kube.go_tools import KUBERNETES, go_env  # noqa: E402  (the Kubernetes module: pause.c)

STATE = Path(os.environ.get("NODE_DIR", ROOT / ".venv" / "node"))
CACHE = Path(os.environ.get("NODE_IMAGES_HOME", Path.home() / ".cache" / "stateful-streaming-node"))
IMAGES = CACHE / "images"
BUILDAH_ROOT = CACHE / "buildah"
SUITE = "bookworm"  # the Debian release the project's Dockerfile names
BASE_PACKAGES = "python3,python3-pip,ca-certificates"
# The names the pods ask for: the dev stack's processor image, and what the node test sets as
# kafka.image; the kubelet normalises a short name to docker.io/ as containerd stores it.
BASE_IMAGE = "localhost/stateful-streaming/python:3.11-bookworm"
PROCESSOR_IMAGE = "docker.io/stateful-streaming/processor:0.1.0"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
# The machine's trust store: the registries here are reached through a proxy whose CA only
# the machine's bundle holds; the base carries it so that the builds' apt, pip and uv reach them.
CA_BUNDLE = Path(os.environ.get("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt"))


def broker_image(version: str) -> str:
    """The broker image's name for a Kafka release."""
    return f"docker.io/stateful-streaming/kafka:{version}"


def run(cmd: Sequence[object], **kwargs) -> subprocess.CompletedProcess:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kwargs)


def require(*binaries: str) -> None:
    """Fail at once, naming what is missing and the package that has it."""
    packages = {
        "debootstrap": "debootstrap",
        "buildah": "buildah",
        "gcc": "gcc",
    }
    missing = [b for b in binaries if shutil.which(b) is None]
    if missing:
        names = " ".join(sorted({packages.get(b, b) for b in missing}))
        raise SystemExit(
            f"missing {', '.join(missing)}: apt-get install --no-install-recommends {names}"
        )
    if os.geteuid() != 0:
        raise SystemExit("building the node's images needs root (debootstrap, buildah's chroot)")


def buildah(*args: object, **kwargs) -> subprocess.CompletedProcess:
    return run(
        [
            "buildah",
            "--root",
            BUILDAH_ROOT / "storage",
            "--runroot",
            BUILDAH_ROOT / "run",
            "--storage-driver",
            "overlay",
            *args,
        ],
        **kwargs,
    )


def apt_mirror() -> str:
    """The Debian mirror this machine's apt uses (the only one it reaches)."""
    for source in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in source.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    return "http://deb.debian.org/debian"


def _commit_rootfs(rootfs: Path, name: str, config: Sequence[str]) -> None:
    """A one-layer image of `rootfs`, with `buildah config` options, committed as `name`."""
    container = buildah("from", "scratch", capture_output=True, text=True).stdout.strip()
    try:
        mount = buildah("mount", container, capture_output=True, text=True).stdout.strip()
        run(["cp", "-a", f"{rootfs}/.", mount])
        buildah("config", *config, container)
        buildah("commit", "--quiet", container, name, stdout=subprocess.DEVNULL)
    finally:
        buildah("rm", container, stdout=subprocess.DEVNULL)


def build_base() -> None:
    """Debian minbase with python3 and pip, shaped like python:3.11-slim-bookworm."""
    require("debootstrap", "buildah")
    rootfs = IMAGES / "base-rootfs"
    stamp = IMAGES / ".base-rootfs.done"
    mirror = apt_mirror()
    if not stamp.exists():
        shutil.rmtree(rootfs, ignore_errors=True)
        debootstrap = ["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}"]
        run([*debootstrap, SUITE, rootfs, mirror], stdout=subprocess.DEVNULL)
        stamp.touch()
    # shaped like the python image, at every build (each step can be run again)
    (rootfs / "etc/apt/sources.list").write_text(f"deb {mirror} {SUITE} main\n")
    shutil.copyfile(CA_BUNDLE, rootfs / "etc/ssl/certs/ca-certificates.crt")
    # The python image's pip installs into the system interpreter; Debian's refuses (PEP 668)
    for marker in (rootfs / "usr/lib").glob("python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    local_bin = rootfs / "usr/local/bin"
    for link, target in {
        "python3.11": "/usr/bin/python3.11",
        "python3": "/usr/bin/python3.11",
        "python": "/usr/bin/python3.11",
        "pip": "/usr/bin/pip3",
    }.items():
        (local_bin / link).unlink(missing_ok=True)
        (local_bin / link).symlink_to(target)
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (rootfs / cache).glob("*"):
            if entry.is_file():
                entry.unlink()
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    _commit_rootfs(
        rootfs,
        BASE_IMAGE,
        [
            "--env",
            "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--env",
            "LANG=C.UTF-8",
            "--env",
            f"SSL_CERT_FILE={bundle}",
            "--env",
            f"PIP_CERT={bundle}",
            "--cmd",
            "python3",
        ],
    )
    _export(BASE_IMAGE)  # the node's helper image too (the claims' provisioner runs it)


def _has_image(name: str) -> bool:
    return (
        subprocess.run(
            [
                "buildah",
                "--root",
                str(BUILDAH_ROOT / "storage"),
                "--runroot",
                str(BUILDAH_ROOT / "run"),
                "--storage-driver",
                "overlay",
                "inspect",
                "--type",
                "image",
                name,
            ],
            capture_output=True,
        ).returncode
        == 0
    )


def _bud(name: str, context: Path, containerfile: Path, build_args: dict[str, str]) -> None:
    if not _has_image(BASE_IMAGE) or not archive(BASE_IMAGE).exists():
        build_base()
    args: list[str | Path] = ["bud", "--isolation", "chroot", "--network", "host", "--layers"]
    args += ["--pull-never", "-f", containerfile, "-t", name]
    for key, value in build_args.items():
        args += ["--build-arg", f"{key}={value}"]
    buildah(*args, context)


def archive(name: str) -> Path:
    """The docker-archive of image `name`, for `ctr images import`."""
    return IMAGES / (name.rsplit("/", 1)[-1].replace(":", "-") + ".tar")


def _export(name: str) -> None:
    out = archive(name)
    out.unlink(missing_ok=True)
    buildah("push", "--quiet", name, f"docker-archive:{out}:{name}")


def build_processor() -> None:
    """The project's Dockerfile, with the Debian-built base as PYTHON_IMAGE."""
    require("buildah")
    _bud(PROCESSOR_IMAGE, ROOT, ROOT / "Dockerfile", {"PYTHON_IMAGE": BASE_IMAGE})
    _export(PROCESSOR_IMAGE)


def build_broker() -> None:
    """Java and the pinned Kafka release's jars (resolved by Maven, checked), at /opt/kafka."""
    require("buildah")
    from devkit import kafka_release

    release = kafka_release.ensure()
    version = kafka_release.release_version(release.home)
    if version != KAFKA_VERSION:
        raise SystemExit(
            f"the Kafka release at {release.home} is {version}; the broker image is of "
            f"{KAFKA_VERSION}, the release the project pins: unset KAFKA_HOME"
        )
    image = broker_image(version)
    _bud(
        image,
        release.home,
        ROOT / "devkit" / "kube" / "broker.Containerfile",
        {"BASE_IMAGE": BASE_IMAGE},
    )
    _export(image)


def build_pause() -> None:
    """The pause container from the Kubernetes module's own source."""
    require("gcc", "buildah")
    # the module the kubelet is built from, from the module proxy (a no-op once `make tools` ran)
    fetched = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES}"],
        env=go_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    source = Path(json.loads(fetched.stdout)["Dir"]) / "build/pause/linux/pause.c"
    rootfs = IMAGES / "pause-rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    rootfs.mkdir(parents=True)
    run(["gcc", "-Os", "-static", "-o", rootfs / "pause", f"-DVERSION={KUBERNETES}", source])
    run(["strip", rootfs / "pause"])
    _commit_rootfs(rootfs, PAUSE_IMAGE, ["--entrypoint", '["/pause"]', "--user", "65535:65535"])
    _export(PAUSE_IMAGE)


BUILDS = {
    "base": (BASE_IMAGE, build_base),
    "pause": (PAUSE_IMAGE, build_pause),
    "broker": (broker_image(KAFKA_VERSION), build_broker),
    "processor": (PROCESSOR_IMAGE, build_processor),
}


def processor_context() -> list[Path]:
    """The files of the Dockerfile's build context: the `!` entries of .dockerignore."""
    kept = [
        ROOT / line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    return [
        found
        for path in kept
        for found in ([path] if path.is_file() else sorted(path.rglob("*")))
        if found.is_file() and "__pycache__" not in found.parts
    ]


def inputs(name: str) -> str:
    """A digest of what image `name` is built from: unchanged, the image is not built again."""
    digest = hashlib.sha256(name.encode())
    if name == "base":
        parts = [SUITE.encode(), BASE_PACKAGES.encode(), apt_mirror().encode()]
        parts.append(CA_BUNDLE.read_bytes())  # the base carries the machine's trust store
    elif name == "pause":
        parts = [KUBERNETES.encode()]
    else:
        files = [ROOT / "devkit" / "kube" / "broker.Containerfile"]
        if name == "processor":
            files = [ROOT / "Dockerfile", *processor_context()]
        parts = [inputs("base").encode(), KAFKA_VERSION.encode()]
        parts += [str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes() for f in files]
    for part in parts:
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


def stamp(name: str) -> Path:
    """Beside an image's archive: the digest of the inputs it was built from."""
    image, _ = BUILDS[name]
    return archive(image).with_suffix(".inputs")


def up_to_date(name: str) -> bool:
    image, _ = BUILDS[name]
    return (
        archive(image).exists() and stamp(name).exists() and stamp(name).read_text() == inputs(name)
    )


def fingerprint(name: str) -> str:
    """A short digest of an image archive, for the logs."""
    return hashlib.sha256(archive(name).read_bytes()).hexdigest()[:12]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("names", nargs="*", help=f"of {', '.join(BUILDS)} (default: all)")
    args = ap.parse_args()
    unknown = set(args.names) - set(BUILDS)
    if unknown:
        raise SystemExit(f"unknown: {', '.join(sorted(unknown))}; known: {', '.join(BUILDS)}")
    IMAGES.mkdir(parents=True, exist_ok=True)
    for name in args.names or list(BUILDS):
        image, build = BUILDS[name]
        if up_to_date(name):
            print(f"{name}: up to date ({archive(image)})", flush=True)
            continue
        start = time.monotonic()
        build()
        stamp(name).write_text(inputs(name))
        print(f"{name}: built {image} in {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
