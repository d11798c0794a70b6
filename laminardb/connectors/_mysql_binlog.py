"""The binlog reader behind a MySQL CDC source: a thread that follows one table's row events
with ``mysql-replication`` 's ``BinLogStreamReader`` and queues them as whole transactions.

Entry point: :class:`BinlogReader` (``start()``, ``take(max_rows, timeout)``, ``failure()``,
``close()``). Each :class:`Transaction` carries the position *after* its commit, so the source
that returns some transactions can checkpoint exactly after them.

Why a thread: ``BinLogStreamReader`` blocks in a socket read until the server sends something;
the runner's ``poll(timeout_ms)`` must return on time. The server's heartbeat (every
``_HEARTBEAT_S``) wakes the thread when idle so it sees ``close()``.

Statements that remove the table's rows without row events (TRUNCATE, DROP, RENAME, CREATE OR
REPLACE, DROP DATABASE) stop the reader after the transactions before them; an ALTER TABLE of
the table makes the source check the next TableMap against ``information_schema``.

Reconnects are done here, from the last whole transaction read: the library's own silent
reconnect would resume a MariaDB GTID stream from where it *first* started (re-reading
everything), so its connection factory refuses to connect a second stream (``_Reconnect``).
"""

from __future__ import annotations

import collections
import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from laminardb.connectors.exceptions import (
    CdcConfigError,
    CdcPositionLostError,
    CdcUnsupportedChangeError,
)

__all__ = ["BinlogReader", "Position", "Transaction"]

# the library warns on every connection that binlog_row_metadata is not FULL (rows are read by
# position here, see _mysql_columns) and on the reconnect this module refuses by design
logging.getLogger("pymysqlreplication").setLevel(logging.ERROR)

_HEARTBEAT_S = 1.0  # idle wake-up for close(); also how soon a dead server is noticed (× 2)
_READ_TIMEOUT_S = 30  # socket timeout of the stream (the server heartbeats well within it)
_BACKOFF_S = (0.2, 5.0)  # first and longest wait between reconnects
_MAX_QUEUED_ROWS = 200_000  # the reader waits (the server's TCP send blocks) beyond this
_POSITION_LOST = 1236  # ER_MASTER_FATAL_ERROR_READING_BINLOG: file purged / GTID not in binlog
# query events logged *inside* a transaction; any other (COMMIT, a DDL statement) ends it
_INSIDE = ("BEGIN", "SAVEPOINT", "ROLLBACK TO", "RELEASE SAVEPOINT")
_ACCESS_DENIED = (1044, 1045, 1142, 1227)  # retrying cannot fix a missing grant


@dataclass(frozen=True)
class Position:
    """Where a stream resumes: MariaDB's GTID state (``domain-server-seq`` per domain) when
    ``gtid`` is set, else the binlog file and the offset after the last transaction."""

    gtid: str | None
    file: str | None
    pos: int | None


@dataclass
class Transaction:
    """One committed transaction's changes to the table: the declared columns' values per row
    (plan order) and each row's weight (+1 insert/after image, −1 delete/before image)."""

    rows: list[tuple] = field(default_factory=list)
    weights: list[int] = field(default_factory=list)
    end: Position | None = None


class _Reconnect(ConnectionError):
    """The library tried to reconnect on its own; the reader reconnects from its position."""


class BinlogReader:
    """Follows ``database.table`` from ``start``; ``on_table_map(type_codes)`` returns the
    ordinals of the declared columns for a TableMap of the table (or raises a permanent error);
    ``on_alter()`` is called at an ALTER TABLE of it (the next TableMap is checked afresh)."""

    def __init__(self, *, settings: dict[str, Any], server_id: int, database: str, table: str,
                 start: Position, on_table_map: Callable[[list[int]], list[int]],
                 on_alter: Callable[[], None], name: str) -> None:
        self._settings, self._server_id = settings, server_id
        self._database, self._table, self._name = database, table, name
        self._on_table_map, self._on_alter = on_table_map, on_alter
        self._gtids = _parse_gtids(start.gtid)
        self._file, self._pos = start.file, start.pos
        self._mariadb = start.gtid is not None
        self._queue: collections.deque[Transaction] = collections.deque()
        self._queued_rows = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._failing: tuple[float, str] | None = None
        self._conn: Any = None
        self.read_file: str | None = None
        self.read_pos: int | None = None  # the last event read (lag)
        self._thread = threading.Thread(target=self._run, name=f"mysql-cdc-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # -- what the source asks ---------------------------------------------------------------

    def take(self, max_rows: int, timeout: float) -> list[Transaction]:
        """Whole transactions queued so far (at least one if any arrives within ``timeout``;
        more up to ``max_rows``); raises the reader's permanent error once the queue is empty."""
        with self._cond:
            if not self._queue and self._error is None:
                self._cond.wait(timeout)
            out: list[Transaction] = []
            rows = 0
            while self._queue and (not out or rows + len(self._queue[0].rows) <= max_rows):
                txn = self._queue.popleft()
                rows += len(txn.rows)
                out.append(txn)
            self._queued_rows -= rows
            self._cond.notify_all()
            if not out and self._error is not None:
                raise self._error
            return out

    def queued_rows(self) -> int:
        with self._cond:
            return self._queued_rows

    def failure(self) -> tuple[float, str] | None:
        """``(monotonic since, why)`` while the stream keeps failing, else None."""
        return self._failing

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        conn = self._conn
        sock = getattr(conn, "_sock", None) if conn is not None else None
        if sock is not None:  # wake a blocked read now rather than at the next heartbeat
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread.is_alive():
            self._thread.join(timeout=_HEARTBEAT_S * 5)

    # -- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        import pymysql

        backoff = _BACKOFF_S[0]
        while not self._stop.is_set():
            try:
                self._stream()
                backoff = _BACKOFF_S[0]
            except Exception as exc:  # noqa: BLE001 - sorted below: permanent or retried
                if self._stop.is_set():
                    return
                if getattr(exc, "permanent", False):
                    self._fail(exc)
                    return
                code = exc.args[0] if isinstance(exc, pymysql.err.MySQLError) and exc.args else None
                if code in _ACCESS_DENIED:
                    self._fail(CdcConfigError(
                        f"source {self._name!r}: the server refused the binlog connection ({exc.args[-1]}); "
                        "grant the user REPLICATION SLAVE and REPLICATION CLIENT"))
                    return
                if code == _POSITION_LOST:
                    where = f"GTID {self._gtid_text()}" if self._mariadb else f"{self._file}:{self._pos}"
                    self._fail(CdcPositionLostError(
                        f"source {self._name!r}: the server no longer has the binlog at {where} "
                        f"({exc.args[1] if len(exc.args) > 1 else exc}); the changes since cannot be "
                        "replayed: keep binlogs longer (binlog_expire_logs_seconds) and recreate the "
                        "source to snapshot the table again"))
                    return
                if self._failing is None:
                    self._failing = (time.monotonic(), f"{type(exc).__name__}: {exc}")
                else:
                    self._failing = (self._failing[0], f"{type(exc).__name__}: {exc}")
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _BACKOFF_S[1])

    def _fail(self, exc: BaseException) -> None:
        with self._cond:
            self._error = exc
            self._cond.notify_all()

    def _stream(self) -> None:
        """One connection's stream, from the last whole transaction; returns when stopped."""
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import (
            GtidEvent,
            HeartbeatLogEvent,
            MariadbGtidEvent,
            QueryEvent,
            RotateEvent,
            XidEvent,
        )
        from pymysqlreplication.row_event import (
            DeleteRowsEvent,
            TableMapEvent,
            UpdateRowsEvent,
            WriteRowsEvent,
        )

        made = {"stream": False}

        def connect(**kw: Any) -> Any:
            import pymysql

            if "db" in kw:  # the library's older name for it (PyMySQL warns)
                kw["database"] = kw.pop("db")
            ctl = kw.get("database") == "information_schema"
            if not ctl:
                if made["stream"]:
                    raise _Reconnect("the binlog connection was lost")
                made["stream"] = True
            conn = pymysql.connect(**kw)
            if not ctl:
                self._conn = conn
            return conn

        position = ({"auto_position": self._gtid_text(), "is_mariadb": True} if self._mariadb
                    else {"log_file": self._file, "log_pos": self._pos, "resume_stream": True})
        stream = BinLogStreamReader(
            connection_settings={**self._settings, "read_timeout": _READ_TIMEOUT_S},
            server_id=self._server_id, blocking=True, slave_heartbeat=_HEARTBEAT_S,
            only_events=[MariadbGtidEvent, GtidEvent, QueryEvent, XidEvent, TableMapEvent,
                         WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, HeartbeatLogEvent,
                         RotateEvent],
            only_schemas=[self._database], only_tables=[self._table], pymysql_wrapper=connect,
            enable_logging=False, **position)
        txn, gtid, ordinals = Transaction(), None, None
        try:
            while not self._stop.is_set():
                event = stream.fetchone()
                if event is None:  # the server ended the stream (shutdown)
                    raise ConnectionError("the server closed the binlog stream")
                self._failing = None
                self.read_file, self.read_pos = stream.log_file, stream.log_pos
                if isinstance(event, (MariadbGtidEvent, GtidEvent)):
                    txn, gtid = Transaction(), getattr(event, "gtid", None)
                elif isinstance(event, TableMapEvent):
                    if event.schema == self._database and event.table == self._table:
                        ordinals = self._on_table_map([c.type for c in event.columns])
                elif isinstance(event, (WriteRowsEvent, DeleteRowsEvent, UpdateRowsEvent)):
                    _add_rows(txn, event, ordinals)
                elif isinstance(event, XidEvent) or (
                        isinstance(event, QueryEvent) and not _query(event).startswith(_INSIDE)):
                    if isinstance(event, QueryEvent):
                        self._check_statement(event)
                    self._commit(txn, gtid, stream.log_file, stream.log_pos)
                    txn, gtid = Transaction(), None
        finally:
            self._conn = None
            stream.close()

    def _check_statement(self, event: Any) -> None:
        """Stop at a statement that removes the table's rows without row events (TRUNCATE,
        DROP, RENAME away): a changelog cannot express it; what came before is delivered."""
        query, schema = _query(event), _text(event.schema)
        verb = _removes_table(query, schema, self._database, self._table)
        if verb is None and _is_table(_ALTER.match(query), schema, self._database, self._table):
            self._on_alter()  # a same-layout change (drop one column, add another) shows only here
        if verb is not None:
            raise CdcUnsupportedChangeError(
                f"source {self._name!r}: {self._database}.{self._table} was {verb} upstream, which the "
                "binlog logs as a statement, not as row deletions: the source stopped after the "
                "transactions before it. Recreate the source (a fresh snapshot); use DELETE instead")

    def _commit(self, txn: Transaction, gtid: str | None, file: str, pos: int) -> None:
        """A transaction ended: queue it with the position after it (backpressure past
        ``_MAX_QUEUED_ROWS``); a transaction without rows of the table only moves the position."""
        if gtid is not None and self._mariadb:
            self._gtids[gtid.split("-", 1)[0]] = gtid
        self._file, self._pos = file, pos
        txn.end = Position(self._gtid_text() if self._mariadb else None, file, pos)
        with self._cond:
            while self._queued_rows > _MAX_QUEUED_ROWS and not self._stop.is_set():
                self._cond.wait(_HEARTBEAT_S)
            if not txn.rows and self._queue and not self._queue[-1].rows:
                self._queue[-1] = txn  # coalesce position-only entries
            else:
                self._queue.append(txn)
                self._queued_rows += len(txn.rows)
            self._cond.notify_all()

    def _gtid_text(self) -> str:
        return ",".join(self._gtids[d] for d in sorted(self._gtids, key=int))


def _add_rows(txn: Transaction, event: Any, ordinals: list[int] | None) -> None:
    """A rows event's images, the declared columns by position (see ``_mysql_columns``)."""
    if ordinals is None:  # no TableMap seen: the library drops such events before us
        return
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent

    def pick(values: dict) -> tuple:
        vals = list(values.values())
        return tuple(vals[i] for i in ordinals)

    if isinstance(event, UpdateRowsEvent):
        for row in event.rows:
            txn.rows += (pick(row["before_values"]), pick(row["after_values"]))
            txn.weights += (-1, 1)
    else:
        w = -1 if isinstance(event, DeleteRowsEvent) else 1
        for row in event.rows:
            txn.rows.append(pick(row["values"]))
            txn.weights.append(w)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")


def _query(event: Any) -> str:
    return _COMMENT.sub(" ", _text(event.query)).strip().upper()


_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_NAME = r"(?:`[^`]+`|\w+)(?:\s*\.\s*(?:`[^`]+`|\w+))?"
_REMOVING = (("TRUNCATED", re.compile(rf"^TRUNCATE\s+(?:TABLE\s+)?({_NAME})")),
             ("REPLACED", re.compile(rf"^CREATE\s+OR\s+REPLACE\s+(?:TEMPORARY\s+)?TABLE\s+({_NAME})")),
             ("DROPPED", re.compile(r"^DROP\s+(?:TEMPORARY\s+)?TABLES?\s+(?:IF\s+EXISTS\s+)?(.+)$", re.S)),
             ("RENAMED", re.compile(rf"^(?:RENAME\s+TABLES?|ALTER\s+TABLE\s+{_NAME}\s+RENAME"
                                    r"(?!\s+(?:COLUMN|INDEX|KEY)\b))\s+(.+)$", re.S)))


_DROP_DATABASE = re.compile(r"^DROP\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+EXISTS\s+)?(`[^`]+`|\w+)")
_ALTER = re.compile(rf"^ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+({_NAME})")


def _is_table(m: re.Match | None, schema: str, database: str, table: str) -> bool:
    return m is not None and _same(m.group(1), schema, database, table)


def _same(name: str, schema: str, database: str, table: str) -> bool:
    """Does ``name`` (``db.tbl`` or ``tbl`` in ``schema``, upper case) denote ``database.table``?"""
    parts = [p.strip().strip("`") for p in name.strip().split(".")]
    db, tbl = (parts[0], parts[1]) if len(parts) == 2 else (schema, parts[0])
    return bool(tbl) and db.upper() == database.upper() and tbl.split()[0].upper() == table.upper()


def _removes_table(query: str, schema: str, database: str, table: str) -> str | None:
    """``'TRUNCATED'`` / ``'DROPPED'`` / ``'RENAMED'`` when ``query`` (upper case) removes the
    rows of ``database.table`` (unqualified names are in the statement's ``schema``), else None."""
    m = _DROP_DATABASE.match(query)
    if m is not None and m.group(1).strip("`").upper() == database.upper():
        return "DROPPED"
    for verb, pattern in _REMOVING:
        m = pattern.match(query)
        if m is None:
            continue
        if verb == "RENAMED" and query.startswith("ALTER"):
            names = [query.split()[2]]  # ALTER TABLE name RENAME …: the table renamed
        elif verb == "RENAMED":
            names = [pair.split(" TO ")[0] for pair in m.group(1).split(",")]  # the old names
        else:
            names = m.group(1).split(",")
        if any(_same(name, schema, database, table) for name in names):
            return verb
    return None


def _parse_gtids(text: str | None) -> dict[str, str]:
    """``'0-1-5,1-1-9'`` → ``{'0': '0-1-5', '1': '1-1-9'}`` (one GTID per replication domain)."""
    out: dict[str, str] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if part:
            out[part.split("-", 1)[0]] = part
    return out
