"""The local cluster's certificates, made with openssl: a CA, the service-account key pair, a
certificate per component (the API server's for 127.0.0.1 and the `kubernetes` Service's names),
and a kubeconfig for each client certificate."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


CLIENT = (
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    "extendedKeyUsage=clientAuth\n"
)


def issue(pki: Path, name: str, subj: str, ext: str = CLIENT) -> None:
    """<pki>/<name>.crt and .key, signed by the cluster's CA (a client certificate by default)."""
    ca_key, ca_crt = pki / "ca.key", pki / "ca.crt"
    key, csr, crt, extf = (pki / f"{name}.{s}" for s in ("key", "csr", "crt", "ext"))
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(csr),
        "-subj",
        subj,
    )
    extf.write_text(ext)
    openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_crt),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-out",
        str(crt),
        "-days",
        "30",
        "-extfile",
        str(extf),
    )
    csr.unlink()
    extf.unlink()


def make_pki(pki: Path) -> None:
    """The cluster's CA, the service-account key pair and a certificate for each component."""
    pki.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt = pki / "ca.key", pki / "ca.crt"
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca_crt),
        "-days",
        "30",
        "-subj",
        "/CN=cluster-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )
    # the service-account token signing pair
    openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))

    issue(
        pki,
        "apiserver",
        "/CN=kube-apiserver",
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,"
        "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
        "DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1\n",
    )
    issue(pki, "admin", "/O=system:masters/CN=kubernetes-admin")
    issue(pki, "controller-manager", "/CN=system:kube-controller-manager")
    issue(pki, "scheduler", "/CN=system:kube-scheduler")
    # the API server's client of a real node's kubelet (logs, exec), as kubeadm names it
    issue(pki, "apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client")
    # kwok acts as the kubelet of every simulated node and marks pods Ready: an admin client,
    # as kwokctl gives it
    issue(pki, "kwok", "/O=system:masters/CN=kwok-controller")


def write_kubeconfig(path: Path, pki: Path, server: str, user: str) -> None:
    """A kubeconfig at `path` for `user`'s certificate, trusting the cluster's CA."""

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": b64(pki / "ca.crt"),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(pki / f"{user}.crt"),
                    "client-key-data": b64(pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
    path.write_text(json.dumps(cfg, indent=2))  # JSON is YAML: every client reads it
    path.chmod(0o600)
