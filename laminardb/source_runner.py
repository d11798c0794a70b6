"""Background pollers for connector-backed sources (``CREATE SOURCE … FROM KAFKA``).

Entry point: ``SourceRunner(reactor, node)``, started by ``Connection.start()``. One thread
per source polls its connector and hands each batch, with the connector's watermark, to
the reactor under the reactor's lock — so the reactor stays single-threaded. A failing
poll is counted and retried with backoff; it never kills the thread or the pipeline.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)

_POLL_TIMEOUT_MS = 100  # short, so stop() and flush() are noticed quickly
_MAX_BACKOFF_S = 2.0


class SourceRunner:
    def __init__(self, reactor, node) -> None:
        self.reactor = reactor
        self.node = node
        self.errors = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"laminardb-source-{node.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        backoff = 0.05
        conn = self.node.connector
        position = getattr(conn, "checkpoint_state", None)
        while not self._stop.is_set():
            try:
                batch, wm = conn.poll(_POLL_TIMEOUT_MS)
                # the connector's position right after this poll: what a checkpoint taken
                # after this batch is ingested resumes from (never ahead of the ingested data)
                state = position() if position is not None else None
                if batch is None or batch.num_rows == 0:
                    self._idle.set()
                with self.reactor.lock:
                    if self.reactor.finished:
                        return
                    try:
                        self.reactor.ingest(self.node, batch, watermark=wm)
                    finally:  # a query's error does not un-ingest the batch
                        if state is not None:
                            self.node.connector_state = state
                backoff = 0.05
            except Exception as e:  # noqa: BLE001 - a source must survive broker hiccups and query errors
                self.errors += 1
                self.last_error = f"{type(e).__name__}: {e}"
                log.warning("source %s: %s", self.node.name, self.last_error)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def wait_caught_up(self, timeout_s: float) -> bool:
        """Wait (bounded) until the connector has no lag and its last poll came back empty."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._idle.clear()
            if self._idle.wait(max(0.0, deadline - time.monotonic())) and self.node.connector.lag() == 0:
                return True
        return False

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
