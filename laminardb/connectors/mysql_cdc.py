"""MySQL / MariaDB change data capture: :class:`MySqlCdcSource`, the connector behind
``CREATE SOURCE … FROM MYSQL_CDC (…)`` and Flink's ``'connector' = 'mysql-cdc'``.

A CDC source is a changelog keyed by its primary key (``changelog_source``): the first poll
returns a consistent snapshot of the table (+1 per row), later polls the row-based binlog from
exactly that point — WriteRows +1, DeleteRows −1, UpdateRows −before/+after — in whole
transactions (:mod:`laminardb.connectors._mysql_binlog`).

Snapshot position, without a global lock on MariaDB: ``START TRANSACTION WITH CONSISTENT
SNAPSHOT`` then ``SHOW STATUS LIKE 'binlog_snapshot_%'`` is the binlog file/offset that snapshot
sees exactly (InnoDB), so writers are never blocked; ``BINLOG_GTID_POS(file, offset)`` turns it
into the GTID state the stream starts from. MySQL has no such status: there the snapshot is
taken under a brief ``FLUSH TABLES WITH READ LOCK`` (as Debezium does; RELOAD privilege) and
the stream starts from ``SHOW MASTER STATUS`` 's file/offset.

The snapshot is delivered a chunk per poll in primary-key order; a checkpoint inside it keeps
the key ranges read and their positions, and a restart goes on from there
(:mod:`laminardb.connectors._mysql_snapshot`).

Checkpoints (``checkpoint_state``) hold MariaDB's GTID state (it survives binlog rotation and a
move to a replica with the same GTIDs) plus the file/offset for reading; MySQL: file/offset.
"""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

import pyarrow as pa

from laminardb.connectors._mysql_binlog import BinlogReader, Position, Transaction
from laminardb.connectors._mysql_columns import (
    column_array,
    plan_columns,
    table_columns,
    table_map_matches,
)
from laminardb.connectors._mysql_snapshot import (
    Segment,
    SegmentFilter,
    SnapshotReader,
    after,
    chunkable,
)
from laminardb.connectors.changelog_source import weighted_batch
from laminardb.connectors.exceptions import CdcConfigError, CdcSchemaError, CdcUnavailableError

__all__ = ["MySqlCdcSource", "check_binlog_settings"]

_log = logging.getLogger(__name__)

_STATE_VERSION = 1
_SNAPSHOT_CHUNK_ROWS = 8096  # snapshot rows per poll (Flink CDC's scan.incremental.snapshot.chunk.size)
_MAX_POLL_ROWS = 65_536  # binlog rows per poll (whole transactions; one may exceed it)
_SERVER_IDS = (1 << 24, (1 << 32) - 1)  # random default server-id: far from hand-picked ones
_CONNECT_TIMEOUT_S = 10
# server errors that retrying cannot fix: access denied (user, database, replication grant)
_ACCESS_DENIED = (1044, 1045, 1142, 1227)
_REQUIRED = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL"}


def check_binlog_settings(variables: dict[str, str], *, source: str) -> None:
    """Refuse a server whose binlog cannot give whole row images (``SHOW GLOBAL VARIABLES``)."""
    for name, want in _REQUIRED.items():
        have = str(variables.get(name, "")).upper()
        if have != want:
            how = ("start the server with --log-bin" if name == "log_bin"
                   else f"SET GLOBAL {name} = '{want}' (and {name} = {want} in the server's config)")
            msg = (f"source {source!r}: the server has {name} = {have or 'unset'}; MySQL CDC needs "
                   f"{name} = {want}: {how}")
            raise CdcConfigError(msg)


class MySqlCdcSource:
    """One table's changes as a changelog (declared columns + ``__weight``).

    Args:
        name: the source name.
        schema: the declared columns (without ``__weight``).
        primary_key: the declared PRIMARY KEY; it must be the table's.
        options: Flink CDC names: ``hostname``, ``port`` (3306), ``username``, ``password``,
            ``database-name``, ``table-name``, ``server-id`` (default random), ``scan.startup.mode``
            (``initial``: snapshot then binlog, default; ``latest-offset``: binlog from now),
            ``scan.incremental.snapshot.chunk.size`` (snapshot rows per poll, 8096),
            ``connect.timeout`` (seconds), ``server-time-zone`` (accepted; TIMESTAMP is read as UTC).
        restore_state: a :meth:`checkpoint_state` to resume from.

    Raises:
        CdcConfigError: a bad option, server setting, missing table or primary key mismatch.
        CdcSchemaError: a declared column missing upstream or of a type that does not fit.
        CdcUnavailableError: the server cannot be reached.
    """

    def __init__(self, *, name: str, schema: pa.Schema, primary_key: tuple[str, ...],
                 options: dict[str, str], restore_state: dict[str, Any] | None = None) -> None:
        self.name, self.schema = name, schema
        self.database = _option(options, "database-name", name)
        table = _option(options, "table-name", name)
        self.table = table.split(".", 1)[1] if table.startswith(f"{self.database}.") else table
        self._where = f"{self.database}.{self.table}"
        mode = str(options.get("scan.startup.mode", "initial")).lower()
        if mode not in ("initial", "latest-offset"):
            raise CdcConfigError(f"source {name!r}: scan.startup.mode must be 'initial' or "
                                 f"'latest-offset', not {mode!r}")
        self._settings = {
            "host": _option(options, "hostname", name), "port": _int(options, "port", 3306, name),
            "user": _option(options, "username", name), "password": str(options.get("password", "")),
            "connect_timeout": _int(options, "connect.timeout", _CONNECT_TIMEOUT_S, name)}
        self.server_id = _int(options, "server-id", random.randint(*_SERVER_IDS), name)
        self._chunk_rows = max(1, _int(options, "scan.incremental.snapshot.chunk.size", _SNAPSHOT_CHUNK_ROWS, name))
        self.rows_read = self.transactions = 0
        self._closed = False
        self._reader: BinlogReader | None = None
        self._ctl: Any = None  # lag()'s connection, opened when first asked
        self._ctl_lock = threading.Lock()  # lag() is asked from flush() and metrics() threads
        conn = self._connect()
        try:
            self._check_server(conn)
            self._upstream = table_columns(conn, self.database, self.table)
            self._check_table(conn, primary_key)
            self._plans = plan_columns(name, schema, self._upstream, self._where,
                                       charsets_logged=self._charsets_logged)
            by_name = {p.name.lower(): i for i, p in enumerate(self._plans)}
            self._key_idx = [by_name[k.lower()] for k in self._key_cols]
            # the stream's position (None: the snapshot is not complete) and the snapshot's key
            # ranges with their positions (_mysql_snapshot); a restart inside a snapshot goes on
            self._position, self._segments = _restored(name, self._where, restore_state)
            if self._position is None and not self._segments and mode == "latest-offset":
                self._position = self._current_position(conn)
        finally:
            conn.close()
        self._snapshot: SnapshotReader | None = None
        self._filter = (SegmentFilter(self._segments, self._plans, self._key_idx)
                        if self._position is not None and len(self._segments) > 1 else None)
        self._signatures: dict[tuple[int, ...], list[int]] = {}
        self._recheck = False  # an ALTER TABLE went by: the next TableMap reads information_schema
        p = self._position
        at = None if p is None else f"GTID {p.gtid}" if p.gtid is not None else f"{p.file}:{p.pos}"
        _log.info("source %s: %s", name, f"binlog of {self._where} resumes at {at}" if at is not None
                  else f"snapshot of {self._where} goes on after key {self._segments[-1].upto}"
                  if self._segments else f"snapshot of {self._where} first")

    # -- connecting and checking -------------------------------------------------------------

    def _connect(self, **extra: Any) -> Any:
        import pymysql

        try:
            return pymysql.connect(**self._settings, autocommit=True, charset="utf8mb4", **extra)
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else None
            where = f"{self._settings['host']}:{self._settings['port']}"
            if code in _ACCESS_DENIED:
                raise CdcConfigError(f"source {self.name!r}: MySQL at {where} refused user "
                                     f"{self._settings['user']!r}: {exc.args[-1]}; check username/password "
                                     "and the grants (SELECT, REPLICATION SLAVE, REPLICATION CLIENT)") from None
            raise CdcUnavailableError(f"source {self.name!r}: cannot reach MySQL at {where}: "
                                      f"{exc.args[-1]}") from None

    def _check_server(self, conn: Any) -> None:
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            self.mariadb = "mariadb" in str(cur.fetchone()[0]).lower()
            cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                        "('log_bin', 'binlog_format', 'binlog_row_image', 'binlog_row_metadata')")
            variables = {str(k).lower(): str(v) for k, v in cur.fetchall()}
        check_binlog_settings(variables, source=self.name)
        self._charsets_logged = variables.get("binlog_row_metadata", "").upper() == "FULL"

    def _check_table(self, conn: Any, primary_key: tuple[str, ...]) -> None:
        if not self._upstream:
            raise CdcConfigError(f"source {self.name!r}: table {self._where} does not exist (or the "
                                 "user may not see it): check database-name and table-name")
        with conn.cursor() as cur:
            cur.execute("SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                        "TABLE_NAME = %s", (self.database, self.table))
            engine = str(cur.fetchone()[0] or "")
            cur.execute("SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
                        (self.database, self.table))
            upstream_key = [str(r[0]).lower() for r in cur.fetchall()]
        if engine.lower() != "innodb":
            raise CdcConfigError(f"source {self.name!r}: table {self._where} uses the {engine} engine; "
                                 "a consistent snapshot needs InnoDB: ALTER TABLE … ENGINE = InnoDB")
        declared = {f.name.lower() for f in self.schema}
        if sorted(upstream_key) != sorted(k.lower() for k in primary_key) or not set(upstream_key) <= declared:
            raise CdcConfigError(
                f"source {self.name!r}: declared PRIMARY KEY ({', '.join(primary_key)}) is not the primary "
                f"key of {self._where} ({', '.join(upstream_key) or 'none'}); declare the table's own key")
        self._key_cols = [c.name for k in upstream_key for c in self._upstream if c.name.lower() == k]

    def _current_position(self, conn: Any) -> Position:
        with conn.cursor() as cur:
            if self.mariadb:
                cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
                return Position(str(cur.fetchone()[0] or ""), None, None)
            cur.execute("SHOW MASTER STATUS")
            file, pos = cur.fetchone()[:2]
            return Position(None, str(file), int(pos))

    # -- reading -----------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 100) -> tuple[pa.RecordBatch | None, int | None]:
        """The next chunk of the snapshot, then the binlog rows of the next whole transactions, as one
        changelog batch (None if none came within ``timeout_ms``); no watermark of its own."""
        if self._closed:
            return None, None
        if self._position is None:
            return self._snapshot_chunk(), None
        if self._reader is None:
            self._reader = self._start_reader(self._position)
        txns = self._reader.take(_MAX_POLL_ROWS, timeout_ms / 1000)
        if not txns:
            return None, None
        self._position = txns[-1].end
        return self._batch(txns), None

    def _snapshot_chunk(self) -> pa.RecordBatch | None:
        """The next chunk of the snapshot (keys in order; the whole table at once unless the
        primary key is all-integer, see ``_mysql_snapshot``); after the last, the stream's start:
        the earliest snapshot position, so nothing is missed or read twice."""
        import pymysql

        try:
            if self._snapshot is None:
                self._snapshot = self._open_snapshot()
            snap = self._snapshot
            arrays, n = snap.next_chunk()
        except pymysql.err.MySQLError as exc:
            if self._snapshot is not None and self._snapshot.rows == 0:
                self._segments.pop()  # this snapshot delivered nothing: the next one replaces it
            self._drop_snapshot()
            raise CdcUnavailableError(f"source {self.name!r}: the snapshot of {self._where} failed: "
                                      f"{exc.args[-1]} (retried)") from None
        if snap.done:
            self._drop_snapshot()
            self._segments[-1] = Segment(None, snap.position)
            self._position = min((g.at for g in self._segments), key=lambda p: (p.file or "", p.pos or 0))
            _log.info("source %s: snapshot of %s complete, the binlog follows", self.name, self._where)
            if len(self._segments) > 1:
                self._filter = SegmentFilter(self._segments, self._plans, self._key_idx)
            else:
                self._segments = []
        else:
            self._segments[-1] = Segment(snap.last_key, snap.position)
        if not n:
            return None
        self.rows_read += n
        return weighted_batch(self.schema, arrays, pa.array([1] * n, pa.int64()))

    def _open_snapshot(self) -> SnapshotReader:
        conn = self._connect()
        try:
            self._upstream = table_columns(conn, self.database, self.table)
            self._plans = plan_columns(self.name, self.schema, self._upstream, self._where,
                                       charsets_logged=self._charsets_logged)
            after_key = self._segments[-1].upto if self._segments else None
            whole = not chunkable(self._plans, self._key_idx)
            snap = SnapshotReader(conn, source=self.name, table=f"`{self.database}`.`{self.table}`",
                                  plans=self._plans, key_cols=self._key_cols, key_idx=self._key_idx,
                                  after_key=after_key, chunk_rows=None if whole else self._chunk_rows,
                                  begin=self._begin_snapshot)
        except BaseException:
            conn.close()
            raise
        self._segments.append(Segment(after_key, snap.position))  # empty so far: (after_key, after_key]
        return snap

    def _drop_snapshot(self) -> None:
        if self._snapshot is not None:
            snap, self._snapshot = self._snapshot, None
            try:
                snap.close()
            except Exception:  # noqa: BLE001 - a broken connection: nothing left to release
                pass

    def _begin_snapshot(self, cur: Any) -> Position:
        if self.mariadb:  # exact position of the snapshot, writers never blocked
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
            file, pos = status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
            gtid = cur.fetchone()[0]
            # NULL (no GTID state known there): stream by file/offset rather than from '' (the
            # first binlog), which would read changes the snapshot already holds
            return Position(None if gtid is None else str(gtid), file, pos)
        cur.execute("FLUSH TABLES WITH READ LOCK")  # MySQL: no snapshot status; block writes briefly
        try:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute("SHOW MASTER STATUS")
            file, pos = cur.fetchone()[:2]
        finally:
            cur.execute("UNLOCK TABLES")
        return Position(None, str(file), int(pos))

    def _start_reader(self, start: Position) -> BinlogReader:
        reader = BinlogReader(settings={**self._settings, "charset": "utf8mb4"}, server_id=self.server_id,
                              database=self.database, table=self.table, start=start,
                              on_table_map=self._on_table_map, on_alter=self._on_alter, name=self.name)
        reader.start()
        return reader

    def _on_alter(self) -> None:
        """An ALTER TABLE of the table went by (reader thread): check the next TableMap afresh."""
        self._signatures.clear()
        self._recheck = True

    def _on_table_map(self, codes: list[int]) -> list[int]:
        """The declared columns' ordinals for a TableMap of the table; a new column layout, or
        any after an ALTER TABLE, is checked against ``information_schema`` again (reader thread)."""
        key = tuple(codes)
        if key in self._signatures:
            return self._signatures[key]
        if self._recheck or not table_map_matches(self._plans, self._upstream, codes):
            conn = self._connect()
            try:
                upstream = table_columns(conn, self.database, self.table)
            finally:
                conn.close()
            plans = plan_columns(self.name, self.schema, upstream, self._where,  # dropped / retyped
                                 charsets_logged=self._charsets_logged)
            if not table_map_matches(plans, upstream, codes):
                msg = (f"source {self.name!r}: the binlog logs {self._where} with {len(codes)} columns of "
                       "other types than the table has now (it was altered again since); the source "
                       "stopped rather than guess: recreate the source to snapshot the table again")
                raise CdcSchemaError(msg)
            before = {p.name: p.upstream for p in self._plans}
            retyped = [p for p in plans if before.get(p.name) != p.upstream]
            if retyped:
                p = retyped[0]
                msg = (f"source {self.name!r}: column {p.name!r} of {self._where} was retyped upstream "
                       f"({before.get(p.name)} → {p.upstream}); the source stopped rather than mix values "
                       "of both types: recreate the source to snapshot the table again")
                raise CdcSchemaError(msg)
            self._upstream, self._plans, self._recheck = upstream, plans, False
        ordinals = [p.ordinal for p in self._plans]
        self._signatures[key] = ordinals
        return ordinals

    def _batch(self, txns: list[Transaction]) -> pa.RecordBatch | None:
        rows, weights = [], []
        self.transactions += sum(1 for t in txns if t.rows)
        for t in txns:
            flt = self._filter
            if flt is not None and after(t.end, flt.last):  # past every snapshot segment
                self._filter, self._segments, flt = None, [], None
            if flt is None:
                rows += t.rows
                weights += t.weights
            else:
                for row, w, keep in zip(t.rows, t.weights, flt.keep(t.rows, t.end), strict=True):
                    if keep:
                        rows.append(row)
                        weights.append(w)
        if not rows:
            return None
        weights = pa.array(weights, pa.int64())
        values = list(zip(*rows, strict=True))
        arrays = [column_array(p, v, source=self.name) for p, v in zip(self._plans, values, strict=True)]
        self.rows_read += len(rows)
        return weighted_batch(self.schema, arrays, weights)

    # -- state -------------------------------------------------------------------------------

    def checkpoint_state(self) -> dict[str, Any]:
        """The position after the rows the last poll returned (msgpack-able): MariaDB's GTID
        state and/or the binlog file/offset, and ``segments`` while binlog rows are still
        filtered by the snapshot's key ranges; ``snapshot`` (those ranges) while it is read."""
        p = self._position
        segments = [g.state() for g in self._segments]
        if p is None:
            return {"v": _STATE_VERSION, "table": self._where, "snapshot": segments}
        return {"v": _STATE_VERSION, "table": self._where, "gtid": p.gtid, "file": p.file, "pos": p.pos,
                "segments": segments}

    def lag(self) -> int:
        """Rows read but not yet returned, plus 1 while the server's binlog is ahead of what
        the reader has read (or the snapshot is still to come)."""
        if self._closed:
            return 0
        if self._position is None:
            return 1
        reader = self._reader
        if reader is None:
            return 1
        queued = reader.queued_rows()
        with self._ctl_lock:
            try:
                if self._ctl is None:
                    self._ctl = self._connect()
                with self._ctl.cursor() as cur:
                    cur.execute("SHOW MASTER STATUS")
                    file, pos = cur.fetchone()[:2]
            except Exception:  # noqa: BLE001 - unknown is not behind; fetch_failure() says why
                self._ctl = None
                return queued
        read = (reader.read_file or "", reader.read_pos or 0)
        return queued + (1 if read < (str(file), int(pos)) else 0)

    def fetch_failure(self) -> tuple[float, str] | None:
        """``(seconds failing, last reason)`` while the binlog stream keeps failing."""
        import time

        failing = None if self._reader is None else self._reader.failure()
        return None if failing is None else (time.monotonic() - failing[0], failing[1])

    def changelog_metrics(self) -> dict[str, Any]:
        """For ``metrics()['sources'][name]['changelog']`` (no server round trip): the table,
        the position after the rows returned, snapshot progress, counts."""
        p = self._position
        at = None if p is None else f"GTID {p.gtid}" if p.gtid is not None else f"{p.file}:{p.pos}"
        snapshot = None if p is not None else {"after_key": None if not self._segments
                                               else self._segments[-1].upto}
        reader = self._reader
        return {"table": self._where, "position": at, "server_id": self.server_id, "snapshot": snapshot,
                "transactions": self.transactions, "rows": self.rows_read,
                "queued_rows": 0 if reader is None else reader.queued_rows()}

    def close(self) -> None:
        """Stop the binlog reader and close connections; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._drop_snapshot()
        if self._reader is not None:
            self._reader.close()
        with self._ctl_lock:
            if self._ctl is not None:
                self._ctl.close()
                self._ctl = None


def _option(options: dict[str, str], key: str, source: str) -> str:
    value = options.get(key)
    if not value:
        raise CdcConfigError(f"source {source!r}: option {key!r} is required (mysql-cdc)")
    return str(value)


def _int(options: dict[str, str], key: str, default: int, source: str) -> int:
    value = options.get(key)
    if value in (None, ""):
        return default
    try:
        return int(str(value))
    except ValueError:
        raise CdcConfigError(f"source {source!r}: option {key!r} must be an integer, not {value!r}") from None


def _restored(source: str, where: str, state: dict[str, Any] | None) -> tuple[Position | None, list[Segment]]:
    """The stream position of a :meth:`MySqlCdcSource.checkpoint_state` (None: the snapshot is
    not complete) and the snapshot's segments."""
    if state is None:
        return None, []
    if state.get("v") != _STATE_VERSION:
        from laminardb.checkpoint.exceptions import SnapshotFormatError

        raise SnapshotFormatError(f"source {source!r}: the checkpointed MySQL position has layout "
                                  f"{state.get('v')!r}, this laminardb reads layout {_STATE_VERSION}")
    if state.get("table") != where:
        raise CdcConfigError(f"source {source!r}: the checkpoint holds a position in {state.get('table')}, "
                             f"the source reads {where}: drop and recreate the source to snapshot it")
    if "snapshot" in state:
        return None, [Segment.restore(d) for d in state["snapshot"]]
    segments = [Segment.restore(d) for d in state.get("segments") or ()]
    return Position(state.get("gtid"), state.get("file"), state.get("pos")), segments
