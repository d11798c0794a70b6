"""A streaming writer into one source: small inserts batched, explicit watermarks.

Entry point: ``Connection.writer(source)`` → ``Writer`` (the same class for a cluster
database's ``RemoteConnection.writer``)::

    with db.writer("trades") as w:
        for tick in feed:
            w.insert(tick)                 # buffered; flushed every _FLUSH_ROWS rows
        w.watermark(feed.closed_until)     # flush, then raise the source's watermark
    # flushed on exit

Rows buffered in a writer reach the engine as one insert at ``flush()`` — one batch for
lateness, like one ``insert()`` call — and row indexes in errors count from the last flush.

A writer needs of its connection only what ``WriterConnection`` names: ``insert``,
``_advance_watermark``, ``_closed``, and where the source's schema and watermark are read
(``_writer_source``/``_source_watermark``: the embedded engine in this process, or the cluster
client asking its database's head).
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import pyarrow as pa

from laminardb.engine.insert_batch import OnError, check_on_error
from laminardb.errors import EngineError

# Rows a writer buffers before it flushes by itself: large enough to amortize the per-insert
# cost of the engine (~50 µs), small enough that subscribers see output within ~1 ms of rows.
_FLUSH_ROWS = 4096


class WriterConnection(Protocol):
    """What a ``Writer`` calls on its connection (``Connection`` and ``RemoteConnection``)."""

    @property
    def _closed(self) -> bool: ...

    def insert(self, source: str, data: Any, *, on_error: OnError = "raise") -> int: ...

    def _advance_watermark(self, source: str, timestamp: Any) -> int | None: ...

    def _writer_source(self, source: str) -> tuple[str, pa.Schema]:
        """The source's name as the catalog spells it and its schema (LDB-3003: not a source)."""
        ...

    def _source_watermark(self, source: str) -> int | None: ...


def not_a_source(source: str, kind: str) -> EngineError:
    """The error of a writer asked for a stream, view or sink (LDB-3003)."""
    return EngineError(f"{source!r} is a {kind}; a writer writes to a source", code="LDB-3003")


class Writer:
    """Batched inserts into one source, and its explicit watermark; see the module docstring.

    Thread-safe: ``insert``, ``flush`` and ``watermark`` take the writer's lock, so several
    threads may feed one writer.
    """

    def __init__(self, conn: WriterConnection, source: str, *, on_error: str = "raise",
                 flush_rows: int = _FLUSH_ROWS) -> None:
        check_on_error(on_error)
        self.name, self.schema = conn._writer_source(source)
        self.on_error = on_error
        self.rows_written = 0  # rows accepted so far, over every flush
        self.rows_rejected = 0  # rows refused so far (on_error='skip' | 'dead_letter')
        self._conn = conn
        self._flush_rows = max(1, int(flush_rows))
        self._rows: list[dict] = []
        self._lock = threading.RLock()
        self._closed = False

    # ----------------------------------------------------------------- writing
    def insert(self, data: Any) -> None:
        """Add rows: a dict, a list of dicts (buffered), or a RecordBatch / Table / DataFrame
        (inserted after what is buffered, as its own batch)."""
        with self._lock:
            self._check()
            if isinstance(data, dict) and not any(isinstance(v, list | tuple) for v in data.values()):
                self._rows.append(data)
            elif isinstance(data, list) and all(isinstance(r, dict) for r in data):
                self._rows.extend(data)
            else:
                self.flush()
                self._write(data)
                return
            if len(self._rows) >= self._flush_rows:
                self.flush()

    def flush(self) -> int:
        """Insert what is buffered; returns the rows accepted (refused rows raise, or are left
        out under ``on_error='skip'``/``'dead_letter'``)."""
        with self._lock:
            self._check()
            if not self._rows:
                return 0
            rows, self._rows = self._rows, []
            return self._write(rows)

    def _write(self, data: Any) -> int:
        if self.on_error == "raise":
            n = self._conn.insert(self.name, data)
        else:
            n = self._conn.insert(self.name, data, on_error=self.on_error)  # type: ignore[arg-type]
            self.rows_rejected += getattr(n, "rejected", 0)
        self.rows_written += int(n)
        return int(n)

    def watermark(self, timestamp: Any) -> None:
        """Flush, then raise the source's watermark to ``timestamp`` (never lowers it): windows
        ending at or before it close now, and later rows behind it are late. ``timestamp`` is
        in the event-time column's terms: epoch milliseconds, or a ``datetime`` / ISO-8601
        text for TIMESTAMP columns."""
        with self._lock:
            self.flush()
            self._conn._advance_watermark(self.name, timestamp)

    @property
    def current_watermark(self) -> int | None:
        """The source's watermark (ticks of its event-time column; None before any)."""
        return self._conn._source_watermark(self.name)

    @property
    def pending(self) -> int:
        """Rows buffered, not yet inserted."""
        return len(self._rows)

    # ----------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Flush and close (idempotent)."""
        with self._lock:
            if self._closed:
                return
            try:
                if not self._conn._closed:
                    self.flush()
            finally:
                self._closed = True

    def _check(self) -> None:
        if self._closed:
            raise EngineError(f"the writer into {self.name!r} is closed; call connection.writer() for a new one",
                              code="LDB-3010")

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:  # the with-block failed: keep its error, do not insert a half-built buffer
            self._rows.clear()
            self._closed = True

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"open, {len(self._rows)} buffered"
        return f"Writer(source={self.name!r}, {state})"
