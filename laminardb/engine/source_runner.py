"""Background pollers for connector-backed sources (``CREATE SOURCE … FROM KAFKA``).

Entry point: ``SourceRunner(reactor, node)``, started by ``Connection.start()``. One thread
per source polls its connector and hands each batch, with the connector's watermark, to
the reactor under the reactor's lock — so the reactor stays single-threaded. A failing
poll is counted and retried with backoff; it never kills the thread or the pipeline — except
a *permanent* error (one whose exception has ``permanent = True``, such as the
``ActorLostError`` of a dead actor): that is counted, logged once and stops the runner.

Health: a poll *fails* when it raises, or when the connector reports that its fetches keep
failing (``KafkaSource.fetch_failure()``: the broker is unreachable, no leader, …; the raw
fetcher retries those quietly). Each failing poll counts in ``errors``; the state changes
(connected, broker unreachable / failing, resumed) are logged once each, on the logger
``laminardb.source``; :meth:`health` is what ``metrics()`` shows, and :meth:`failing_for`
is what makes ``flush()`` raise once a source has failed longer than
``config['source_error_timeout']``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger("laminardb.source")

_POLL_TIMEOUT_MS = 100  # short, so stop() and flush() are noticed quickly
_MAX_BACKOFF_S = 2.0


class SourceRunner:
    def __init__(self, reactor, node) -> None:
        self.reactor = reactor
        self.node = node
        self.errors = 0  # failing polls (exceptions and polls while fetches fail)
        self.last_error: str | None = None
        self.last_warning: str | None = None  # the last ``take_warnings()`` one: kept, not overwritten by errors
        self.status = "starting"  # → "connected" after a good poll, "error" while polls fail
        self._last_ok: float | None = None  # time.monotonic() of the last good poll
        self._failing_since: float | None = None
        self.fatal: Exception | None = None  # the permanent error the runner stopped on
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"laminardb-source-{node.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        backoff = 0.05
        conn = self.node.connector
        take_warnings = getattr(conn, "take_warnings", None)  # optional (contracts.Source)
        committed = getattr(conn, "checkpoint_committed", None)  # optional (contracts.Source)
        while not self._stop.is_set():
            try:
                batch, wm = conn.poll(_POLL_TIMEOUT_MS)
                # the connector's position right after this poll: what a checkpoint taken
                # after this batch is ingested resumes from (never ahead of the ingested data)
                state = conn.checkpoint_state()
                if batch is None or batch.num_rows == 0:
                    self._idle.set()
                with self.reactor.lock:
                    if self.reactor.finished:
                        return
                    try:
                        self.reactor.ingest(self.node, batch, watermark=wm)
                    finally:  # a query's error does not un-ingest the batch
                        self.node.connector_state = state
                    no_checkpoints = self.reactor.journal is None
                if committed is not None and no_checkpoints:  # in memory: ingested is as far as it goes
                    committed(state)
                backoff = 0.05
                for warning in take_warnings() if take_warnings is not None else ():
                    self._warned(warning)
                failing = conn.fetch_failure()  # contracts.Source
                if failing is None:
                    self._ok()
                else:
                    self._failed(failing[1], since=time.monotonic() - failing[0])
            except Exception as e:  # noqa: BLE001 - a source must survive broker hiccups and query errors
                if getattr(e, "permanent", False):  # e.g. ActorLostError: retrying cannot help
                    self._fatal(e)
                    return
                self._failed(f"{type(e).__name__}: {e}")
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def _ok(self) -> None:
        now = time.monotonic()
        if self.status == "error":
            down = now - (self._failing_since or now)
            log.info("source %s: resumed after %.1f s of errors (%d so far; last: %s)",
                     self.node.name, down, self.errors, self.last_error)
        elif self.status == "starting":
            log.info("source %s: connected (%s)", self.node.name, _describe(self.node.connector))
        self.status = "connected"
        self._failing_since = None
        self._last_ok = now

    def _failed(self, why: str | None, *, since: float | None = None) -> None:
        now = time.monotonic()
        self.errors += 1
        self.last_error = why or "fetches are failing"
        if self.status != "error":
            self._failing_since = since if since is not None else now
            log.warning("source %s: %s: %s; retrying (logged again when it resumes)", self.node.name,
                        "broker unreachable" if since is not None else "poll failed", self.last_error)
        self.status = "error"

    def _warned(self, warning: Exception) -> None:
        """Something to see that does not stop the source (an offset reset): counted in
        ``errors``, kept as ``last_error`` (with its code), logged once."""
        self.errors += 1
        self.last_error = self.last_warning = str(warning)
        log.warning("source %s: %s", self.node.name, self.last_error)

    def _fatal(self, error: Exception) -> None:
        """A permanent error (the exception says ``permanent = True``): counted, logged once,
        and the runner stops; the connection raises it on the user's next call."""
        self.errors += 1
        self.last_error = f"{type(error).__name__}: {error}"
        if self.status != "error":
            self._failing_since = time.monotonic()
        self.status = "error"
        self.fatal = error
        self._idle.set()  # wake a waiting flush(): it returns False at once
        log.error("source %s: stopped polling on a permanent error: %s", self.node.name, self.last_error)

    def failing_for(self) -> float:
        """Seconds the source has been failing without a good poll (0.0 while healthy)."""
        since = self._failing_since
        return 0.0 if since is None or self.status != "error" else time.monotonic() - since

    def health(self) -> dict[str, Any]:
        """``status``, ``errors``, ``last_error``, ``last_warning``, ``since_last_poll_s``
        (seconds since the last good poll), ``failing_for_s`` — for ``metrics()``."""
        now = time.monotonic()
        return {"status": self.status, "errors": self.errors, "last_error": self.last_error,
                "last_warning": self.last_warning,
                "since_last_poll_s": None if self._last_ok is None else round(now - self._last_ok, 3),
                "failing_for_s": round(self.failing_for(), 3) if self.status == "error" else None}

    def wait_caught_up(self, timeout_s: float, *, error_timeout_s: float | None = None) -> bool:
        """Wait (bounded) until the connector has no lag and its last poll came back empty.

        Returns False at ``timeout_s``, or as soon as the source has been failing for longer
        than ``error_timeout_s`` (the caller raises with :attr:`last_error`).
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.fatal is not None:
                return False
            if error_timeout_s is not None and self.failing_for() > error_timeout_s:
                return False
            self._idle.clear()
            wait = max(0.0, min(deadline - time.monotonic(), 0.5))
            if not self._idle.wait(wait) or self.status == "error":
                continue  # no lag question to a broker that is not answering
            try:
                if self.node.connector.lag() == 0:
                    return True
            except Exception as exc:  # noqa: BLE001 - an unreachable broker: keep waiting
                self.last_error = self.last_error or f"{type(exc).__name__}: {exc}"
        return False

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)


def _describe(connector: Any) -> str:
    brokers, topic = getattr(connector, "brokers", None), getattr(connector, "topic", None)
    return f"brokers {brokers}, topic {topic}" if brokers else type(connector).__name__
