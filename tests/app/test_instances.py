"""The local run's view of an instance's health endpoint."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from contract.topic_specs import PipelineNames
from devkit.local.instances import InstanceOptions, ProcessorProcess


def test_a_health_answer_cut_off_by_a_stopping_process_reads_as_no_answer(
    tmp_path: Path,
) -> None:
    # A process that is going away answers 503 and dies before the whole body is sent.
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer_truncated() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b'HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100\r\n\r\n{"re')

    thread = threading.Thread(target=answer_truncated, daemon=True)
    thread.start()
    instance = ProcessorProcess(0, tmp_path, PipelineNames(), "127.0.0.1:9", InstanceOptions())
    instance.health_port = port
    assert instance.get("/ready") is None
    thread.join(10)
    server.close()
