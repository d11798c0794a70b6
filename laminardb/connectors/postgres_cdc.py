"""PostgreSQL change data capture: a table's inserts, updates and deletes as a changelog source.

``CREATE SOURCE t (…, PRIMARY KEY (id) NOT ENFORCED) FROM POSTGRES_CDC (hostname = …, …)`` or
Flink CDC's ``CREATE TABLE t … WITH ('connector' = 'postgres-cdc', …)`` builds a
:class:`PostgresCdcSource`, polled by the engine's ``SourceRunner`` (docs/connectors/postgres_cdc.md).

How it reads: logical replication with the built-in ``pgoutput`` plugin (protocol 1), through
a publication for the table and a replication slot (psycopg2's LogicalReplicationConnection;
``_pgoutput`` decodes the protocol messages, ``_pgoutput_rows`` the row changes in bulk). A
first start creates the slot with an exported snapshot, reads the table under that snapshot as
one batch, then streams from the slot's consistent point — no gap, no overlap. Rows: insert +1,
delete −1, update −old/+new (``__weight``); the table must have REPLICA IDENTITY FULL so updates
and deletes carry the old row. Only whole transactions are returned.

Position: ``checkpoint_state()`` is ``{"slot", "lsn"}``, the LSN just after the last transaction
a poll returned (or the WAL end the server reported while nothing of ours was pending). The
slot is confirmed (``send_feedback(flush_lsn=…)``) only from ``checkpoint_committed(state)`` —
the position of the oldest checkpoint a recovery may restore — so the server keeps every change
a recovery may replay; in memory (no checkpoints) the engine calls it right after each ingest.
(psycopg2 itself forwards the confirmed LSN to the end of WAL named by a server keepalive once
everything received has been confirmed; that skips only WAL holding none of this table's
changes.)

Entry point: ``PostgresCdcSource(name=, schema=, primary_key=, options=, restore_state=)``.
"""

from __future__ import annotations

import logging
import select
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from laminardb.connectors import _pgoutput as pgo
from laminardb.connectors._pg_setup import (
    PgTarget,
    TableInfo,
    check_table,
    connect,
    ensure_publication,
    read_snapshot,
    slot_info,
)
from laminardb.connectors._pgoutput_rows import NO_OLD_ROW, rows_from_messages
from laminardb.connectors.changelog_source import text_columns_batch
from laminardb.connectors.exceptions import (
    CdcConfigError,
    CdcDataError,
    CdcPositionLostError,
    CdcSchemaError,
    CdcUnavailableError,
    CdcUnsupportedChangeError,
)
from laminardb.connectors.polled import FROM_DATA

__all__ = ["PostgresCdcSource"]

log = logging.getLogger("laminardb.source")

_MAX_POLL_ROWS = 50_000  # rows per poll: bounded batches; a larger transaction still comes whole
_IDLE_PING_S = 0.5  # while idle, ask the server this often where its WAL stream is (lag, flush())
_STATUS_INTERVAL_S = 10  # psycopg2's periodic status to the server (well inside wal_sender_timeout)
_LAG_EVERY_S = 1.0  # metrics() measures the WAL lag at most this often (a query to the server)
_ROW_TAGS = frozenset(b"IUD")  # Insert, Update, Delete: kept raw, decoded in bulk
_WAL_PAGE = 8192
_PAGE_HEADERS = (24, 40)  # short / long WAL page header: the insert position after a page boundary


@dataclass(frozen=True)
class _Layout:
    """From a Relation message: the table's oid and, per upstream column, the declared column
    it fills (−1: not declared)."""

    relid: int
    positions: np.ndarray


class PostgresCdcSource:
    """A polled changelog source over one PostgreSQL table; see the module docstring."""

    def __init__(self, *, name: str, schema: pa.Schema, primary_key: tuple[str, ...], options: dict[str, str],
                 restore_state: dict | None = None) -> None:
        self.name = name
        self.schema = schema  # the declared columns (no __weight)
        self.primary_key = primary_key
        self.target = PgTarget.from_options(name, options)
        self._lock = threading.Lock()  # poll / close
        self._side_lock = threading.Lock()  # the side connection: lag() and metrics from other threads
        self._side = None
        self._repl = None
        self._cur = None
        self._table: TableInfo | None = None
        self._layout: _Layout | None = None  # the table's columns as its last Relation message gave them
        # the LSN after the last transaction returned by a poll (what checkpoints record), and
        # after the last one read into _ready (ahead of it only within a poll)
        self._position: int | None = None
        self._read_lsn: int | None = None
        # the transaction being read, and whole transactions not yet returned: raw change
        # messages, each run after the _Layout it is read with
        self._txn: list | None = None
        self._ready: list = []
        self._fatal: Exception | None = None  # a permanent error, raised once _ready is returned
        self._confirm = 0  # what checkpoint_committed allows the slot to confirm
        self._confirmed = 0  # what was sent
        self._last_ping = 0.0
        self._closed = False
        self.transactions = 0
        self.rows_read = 0
        self.lag_bytes: int | None = None
        self._lag_at = 0.0
        if restore_state is not None:
            if restore_state.get("slot") != self.target.slot:
                raise CdcConfigError(f"{self.target.where()}: the checkpoint read slot {restore_state.get('slot')!r}, "
                                     f"the source now names {self.target.slot!r}; recreate the source to start over")
            self._position = self._read_lsn = int(restore_state["lsn"])
        else:  # a new source: refuse a bad table now, while CREATE SOURCE runs (unreachable: at start())
            try:
                side = self._side_conn()
            except Exception as exc:  # noqa: BLE001 - CdcUnavailableError: checked again by the first poll
                log.warning("source %s: %s", name, exc)
            else:
                try:
                    check_table(side, self.target, schema)
                except Exception:
                    self.close()
                    raise

    # ------------------------------------------------------------------ contracts.Source
    def poll(self, timeout_ms: int = 100) -> tuple[pa.RecordBatch | None, Any]:
        with self._lock:
            if self._closed:
                return None, None
            if self._fatal is not None:
                raise self._fatal
            try:
                if self._cur is None:
                    snapshot = self._start()
                    if snapshot is not None:
                        return (snapshot if snapshot.num_rows else None), FROM_DATA
                self._send_confirmed()
                self._read(timeout_ms)
                return self._take(), FROM_DATA
            except Exception as exc:
                if not getattr(exc, "permanent", False):
                    self._reset()  # reconnect and go on from the last returned position
                raise

    def checkpoint_state(self) -> dict[str, Any]:
        return {"slot": self.target.slot, "lsn": self._position}

    def checkpoint_committed(self, state: dict[str, Any]) -> None:
        """The checkpoint holding everything up to ``state['lsn']`` committed: the slot may
        confirm it (sent by the polling thread at its next poll)."""
        lsn = state.get("lsn")
        if lsn is not None and state.get("slot") == self.target.slot:
            self._confirm = max(self._confirm, int(lsn))

    def lag(self) -> int:
        """Bytes of WAL the server has written beyond this source's position (0: caught up;
        at least 1 while a transaction is being read or not yet returned)."""
        if self._position is None or self._cur is None or self._ready or self._txn is not None:
            return 1
        return self._measure_lag()

    def _measure_lag(self) -> int:
        behind = max(0, self._server_wal_lsn() - (self._position or 0))
        if behind in _PAGE_HEADERS and (self._position or 0) % _WAL_PAGE == 0:
            behind = 0  # the position is the page's end; the server's write point is past its header
        self.lag_bytes, self._lag_at = behind, time.monotonic()
        return behind

    def fetch_failure(self) -> tuple[float, str] | None:
        return None  # failures raise from poll()

    def changelog_metrics(self) -> dict[str, Any]:
        """For ``metrics()['sources'][name]['changelog']``: slot, positions, WAL lag in bytes
        (measured at most once a second: one query on the side connection)."""
        if self._position is not None and time.monotonic() - self._lag_at > _LAG_EVERY_S:
            try:
                self._measure_lag()
            except Exception:  # noqa: BLE001 - unreachable: the runner's health says so; lag stays unknown
                self.lag_bytes = None
        return {"slot": self.target.slot, "table": f"{self.target.schema}.{self.target.table}",
                "position": None if self._position is None else pgo.format_lsn(self._position),
                "confirmed": pgo.format_lsn(self._confirmed) if self._confirmed else None,
                "lag_bytes": self.lag_bytes, "transactions": self.transactions, "rows": self.rows_read}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._cur is not None:  # the last checkpoint (close() takes one) confirmed, if it can
                try:
                    self._send_confirmed()
                except Exception:  # noqa: BLE001 - the next start confirms it
                    pass
            self._reset()
        with self._side_lock:
            if self._side is not None:
                self._side.close()
                self._side = None

    # ------------------------------------------------------------------ start
    def _side_conn(self):
        if self._side is None or self._side.closed:
            self._side = connect(self.target)
        return self._side

    def _drop_side(self) -> None:
        """A side connection that failed is not reused (the server may have restarted)."""
        if self._side is not None:
            try:
                self._side.close()
            except Exception:  # noqa: BLE001 - already broken
                pass
            self._side = None

    def _start(self) -> pa.RecordBatch | None:
        """Check the table, then stream from the position (a first start: snapshot first)."""
        t = self.target
        with self._side_lock:
            try:
                side = self._side_conn()
                self._table = check_table(side, t, self.schema)
                ensure_publication(side, t)
                info = slot_info(side, t)
                if self._position is None and info is not None:
                    self._drop_stale_slot(side, info)
            except Exception as exc:
                if not getattr(exc, "permanent", False):
                    self._drop_side()
                raise
        if self._position is not None and info is None:
            raise CdcPositionLostError(
                f"{t.where()}: replication slot {t.slot!r} is gone, so the changes after the last checkpoint "
                "cannot be replayed; drop and recreate the source (it starts over with a fresh snapshot)")
        self._repl = connect(t, replication=True)
        self._cur = self._repl.cursor()
        snapshot = None
        if self._position is None:
            self._cur.execute(f"CREATE_REPLICATION_SLOT {t.slot} LOGICAL pgoutput EXPORT_SNAPSHOT")
            _, consistent, snapshot_name, _ = self._cur.fetchone()
            # the exported snapshot lives until this connection's next command: read it first
            snap_conn = connect(t)
            try:
                snapshot = read_snapshot(snap_conn, t, self.schema, self._table, snapshot_name)
            finally:
                snap_conn.close()
            self._position = self._read_lsn = pgo.parse_lsn(consistent)
            self.rows_read += snapshot.num_rows
            log.info("source %s: snapshot of %s.%s read (%d rows); streaming from %s", self.name, t.schema,
                     t.table, snapshot.num_rows, consistent)
        self._cur.start_replication(slot_name=t.slot, decode=False, start_lsn=self._position,
                                    status_interval=_STATUS_INTERVAL_S,
                                    options={"proto_version": "1", "publication_names": t.publication})
        return snapshot

    def _drop_stale_slot(self, side, info) -> None:
        """A first start (no checkpoint) finds the slot: nothing in this database can resume from
        it, and only a new slot exports the snapshot its stream starts after — so it is dropped
        and made anew, unless another process is reading it or it is not a pgoutput slot here."""
        t = self.target
        plugin, database, _, active = info
        if active:  # retried: a killed reader's walsender lets go of the slot within moments
            raise CdcUnavailableError(f"{t.where()}: replication slot {t.slot!r} is in use by another connection; "
                                      "retrying (if another pipeline reads it, give this source its own 'slot.name')")
        if plugin != "pgoutput" or database != t.dbname:
            raise CdcConfigError(f"{t.where()}: replication slot {t.slot!r} exists for plugin {plugin!r} in "
                                 f"database {database!r}; give this source its own 'slot.name'")
        log.warning("source %s: replication slot %r exists but this source has no checkpoint: dropping it and "
                    "starting over with a fresh snapshot", self.name, t.slot)
        with side.cursor() as cur:
            cur.execute("SELECT pg_drop_replication_slot(%s)", (t.slot,))

    def _reset(self) -> None:
        """Drop the stream; the next poll reconnects at the last returned position."""
        if self._repl is not None:
            try:
                self._repl.close()
            except Exception:  # noqa: BLE001 - already broken
                pass
        self._repl = self._cur = None
        self._layout = None
        self._txn = None
        self._ready = []
        self._read_lsn = self._position

    # ------------------------------------------------------------------ stream
    def _send_confirmed(self) -> None:
        if self._confirm > self._confirmed:
            self._cur.send_feedback(flush_lsn=self._confirm, force=True)  # now, not at the status interval
            self._confirmed = self._confirm

    def _read(self, timeout_ms: int) -> None:
        """Read messages until none is waiting (after ``timeout_ms`` when nothing came at all),
        a permanent error, or ``_MAX_POLL_ROWS`` changes of whole transactions. A change's raw
        bytes are kept as they are (``_pgoutput_rows`` reads them in bulk at the poll's end)."""
        deadline = time.monotonic() + timeout_ms / 1000
        cur = self._cur
        while len(self._ready) < _MAX_POLL_ROWS and self._fatal is None:
            msg = cur.read_message()
            if msg is not None:
                payload = msg.payload
                if payload[0] not in _ROW_TAGS:
                    self._handle(pgo.decode(payload))
                elif self._txn is not None:
                    self._txn.append(payload)  # the per-change path: one append
                else:
                    raise CdcSchemaError(f"{self.target.where()}: a change arrived outside a transaction")
                continue
            if self._txn is None:  # everything sent so far is read: the server's WAL end is ours too
                wal_end = cur.wal_end
                if self._read_lsn is not None and wal_end > self._read_lsn:
                    self._read_lsn = wal_end
            left = deadline - time.monotonic()
            if self._ready or left <= 0:
                return
            now = time.monotonic()
            if now - self._last_ping > _IDLE_PING_S:
                self._last_ping = now
                cur.send_feedback(reply=True)  # the server answers with its WAL end (a keepalive)
            select.select([self._repl], [], [], min(left, _IDLE_PING_S))

    def _handle(self, msg) -> None:
        if isinstance(msg, pgo.Begin):
            self._txn = [self._layout]  # each transaction names the columns its changes are read with
        elif isinstance(msg, pgo.Commit):
            self.transactions += 1
            if self._txn is not None and len(self._txn) > 1 and msg.end_lsn > (self._read_lsn or 0):
                self._ready.extend(self._txn)
            if msg.end_lsn > (self._read_lsn or 0):  # at or below it: a transaction already returned
                self._read_lsn = msg.end_lsn
            self._txn = None
        elif isinstance(msg, pgo.Relation):
            self._relation(msg)
        elif isinstance(msg, pgo.Truncate):
            if self._table is not None and self._table.relid in msg.relids:
                self._txn = None
                self._fatal = CdcUnsupportedChangeError(
                    f"{self.target.where()}: the table was TRUNCATEd, which a changelog cannot express row by "
                    "row; the source stopped after the transactions before it. Recreate the source (a fresh "
                    "snapshot), or delete rows with DELETE instead of TRUNCATE")

    def _identity_lost(self) -> None:
        self._txn = None
        self._fatal = CdcConfigError(
            f"{self.target.where()}: a change arrived without the old row (REPLICA IDENTITY is no longer FULL); "
            f"run ALTER TABLE {self.target.qualified} REPLICA IDENTITY FULL and recreate the source")

    def _relation(self, rel: pgo.Relation) -> None:
        """The table's columns as of the next change: a declared column dropped or retyped stops
        the source (it would write wrong values); a column added upstream is not read."""
        t, table = self.target, self._table
        if (rel.namespace, rel.name) != (t.schema, t.table) or table is None:
            return
        if rel.replica_identity != "f":
            self._identity_lost()
            return
        by_name = {c.name: (i, c.type_oid) for i, c in enumerate(rel.columns)}
        positions = np.full(len(rel.columns), -1, dtype=np.int64)
        for j, (field, upstream) in enumerate(zip(self.schema, table.upstream_names, strict=True)):
            if upstream not in by_name:
                self._schema_changed(f"declared column {field.name!r} no longer exists upstream (dropped or renamed)")
                return
            i, oid = by_name[upstream]
            if oid != table.type_oids[upstream]:
                self._schema_changed(f"column {field.name!r} changed type upstream (type oid "
                                     f"{table.type_oids[upstream]} → {oid})")
                return
            positions[i] = j
        self._layout = _Layout(rel.relid, positions)
        if self._txn is not None:
            self._txn.append(self._layout)  # the changes after it in this transaction read it

    def _schema_changed(self, what: str) -> None:
        self._txn = None
        self._fatal = CdcSchemaError(
            f"{self.target.where()}: {what}; the source stopped after the transactions before the change rather "
            "than write wrong values. Recreate the source with the table's current columns (a fresh snapshot)")

    def _take(self) -> pa.RecordBatch | None:
        """The whole transactions read by this poll as one changelog batch; the position moves
        to the end of the last of them."""
        ready, self._ready = self._ready, []
        batches = []
        layout, changes = None, []
        for item in [*ready, None]:  # runs of changes, each with the layout in force before it
            if isinstance(item, bytes):
                changes.append(item)
                continue
            if changes:
                batches.append(self._changes_batch(layout, changes))
                changes = []
            layout = item if item is not None else layout
        self._position = self._read_lsn
        if not batches:
            return None
        batch = batches[0] if len(batches) == 1 else pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
        self.rows_read += batch.num_rows
        return batch

    def _changes_batch(self, layout: _Layout | None, changes: list[bytes]) -> pa.RecordBatch:
        if layout is None:
            raise CdcSchemaError(f"{self.target.where()}: a change arrived before the table's description")
        weights, columns, error = rows_from_messages(changes, layout.relid, layout.positions, len(self.schema))
        if error == NO_OLD_ROW:
            self._identity_lost()
            raise self._fatal
        if error:
            raise CdcDataError(f"{self.target.where()}: a change message this reader cannot decode (pgoutput "
                               "protocol 1, text values); the source stopped rather than guess")
        return text_columns_batch(self.schema, self._table.families, columns, weights, source=self.name)

    def _server_wal_lsn(self) -> int:
        with self._side_lock:
            try:
                with self._side_conn().cursor() as cur:
                    cur.execute("SELECT pg_current_wal_insert_lsn()::text")  # async commits too
                    return pgo.parse_lsn(cur.fetchone()[0])
            except Exception:
                self._drop_side()
                raise
