"""PostgreSQL sinks: a stream's rows into a table, exactly-once per checkpoint epoch in a durable
database. Entry points: :class:`ExactlyOncePostgresSink` (``laminardb.open(directory)``) and
:class:`PostgresSink` (in memory, at-least-once), both built by ``connectors.sinks.make_sink``
for ``CREATE SINK s FROM stream INTO POSTGRES (url = 'postgresql://…', table = '…')``.

An append-only stream is COPied into the table. With ``primary_key = 'a, b'`` the sink
upserts: each key's last change of the epoch is applied (a changelog's ``-old, +new`` is an
update, a final retraction a delete), set-based from a TEMP staging table.

Exactly-once: rows of the open epoch are staged durably as Arrow IPC (:class:`EpochStage`,
under the database directory). ``commit(e)`` applies each staged epoch ``<= e`` in order, each
as ONE PostgreSQL transaction that also inserts ``(sink, writer, epoch)`` into
``laminardb_epochs`` (next to the table). The transaction first takes an advisory lock for the
writer and reads its newest recorded epoch, skipping epochs at or below it — so an epoch
committed just before a crash (and still staged) is never applied twice, and a commit that
failed (server down, privileges revoked) leaves its epoch staged for the next checkpoint.
``writer`` is an id kept in the sink's stage directory: another database directory writing
with the same sink name into the same schema numbers its epochs independently.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

from laminardb.checkpoint._files import atomic_write
from laminardb.checkpoint.sink import EpochStage, TwoPhaseSink
from laminardb.connectors import _postgres as pg
from laminardb.connectors._sinks import conform_to_sink
from laminardb.connectors.exceptions import (
    PostgresConfigError,
    PostgresPrivilegeError,
    SinkClosedError,
    SinkWriteError,
)
from laminardb.errors import ConnectorError

__all__ = ["EPOCHS_TABLE", "ExactlyOncePostgresSink", "PostgresSink"]

log = logging.getLogger(__name__)

WEIGHT = "__weight"  # laminardb.sql.plan.WEIGHT: +1 insert, -1 retraction of a changelog row
#: the table (in the target's schema) recording which epochs each writer applied
EPOCHS_TABLE = "laminardb_epochs"
_WRITER_FILE = "postgres-writer"
# Fault injection for the crash tests (as checkpoint/local.py): SIGKILL right after an epoch's
# transaction committed, before its staged file is dropped. Unset in normal use.
_CRASH_AT = os.environ.get("LAMINARDB_TEST_CRASH_AT", "")


def _crash_point(step: str) -> None:
    if _CRASH_AT == step:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


class _Target:
    """The table a sink writes: options, connection, the stream's columns."""

    def __init__(self, name: str, schema: pa.Schema, options: dict[str, str]) -> None:
        from laminardb._extras import require

        require("psycopg2", extra="postgres", for_what=f"PostgreSQL sink {name!r}")
        self.name = name
        self.opts = pg.read_options(name, options)
        self.schema = schema
        self.weight = WEIGHT if WEIGHT in schema.names else None
        self.columns = [n for n in schema.names if n != WEIGHT]
        missing = [k for k in self.opts.primary_key if k not in self.columns]
        if missing:
            raise PostgresConfigError(f"PostgreSQL sink {name!r}: primary_key names {', '.join(missing)}, not "
                                      f"columns of the stream ({', '.join(self.columns)})")
        if self.weight is not None and not self.opts.primary_key:
            raise PostgresConfigError(
                f"PostgreSQL sink {name!r}: the stream is a changelog (its rows carry {WEIGHT}: "
                "updates and retractions), so the sink must know each row's key to update or delete "
                "it: add primary_key = 'col, …' (the stream's GROUP BY columns)")
        self.rows_dropped = 0  # rows with a NULL key (a keyed table cannot hold them)
        self._conn: Any = None

    def transaction(self, what: str, body) -> Any:
        """Run ``body(cursor)`` in one transaction and commit; a failure rolls it back and raises
        the typed error. A connection found dead on reuse (the server restarted, an idle
        timeout) is opened again and the transaction tried once more."""
        import psycopg2

        for attempt in (1, 2):
            reused = self._conn is not None and not self._conn.closed
            try:
                if not reused:
                    self._conn = pg.connect(self.opts, f"PostgreSQL sink {self.name!r} could not connect")
                with self._conn.cursor() as cur:
                    out = body(cur)
                self._conn.commit()
                return out
            except psycopg2.Error as exc:
                lost = exc.pgcode is None and bool(self._conn is None or self._conn.closed)
                self._reset()
                if not (lost and reused and attempt == 1):
                    raise pg.pg_error(self.opts, f"PostgreSQL sink {self.name!r} could not {what}", exc) from None
            except BaseException:
                self._reset()
                raise
        raise AssertionError("unreachable")

    def setup(self, with_epochs: bool) -> None:
        """Create or check the table (and ``laminardb_epochs``)."""
        schema = pa.schema([self.schema.field(c) for c in self.columns])

        def body(cur: Any) -> None:
            pg.ensure_table(cur, self.opts, schema, self.name)
            cur.execute("SELECT to_regclass(%s)", (self.epochs,))
            if with_epochs and cur.fetchone()[0] is None:  # IF NOT EXISTS alone needs CREATE on the schema
                cur.execute(f"CREATE TABLE IF NOT EXISTS {self.epochs} (sink text NOT NULL, writer text NOT NULL, "
                            "epoch bigint NOT NULL, target text NOT NULL, rows bigint NOT NULL, "
                            "committed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (sink, writer, epoch))")
            self._check_privileges(cur, with_epochs)

        self.transaction(f"prepare table {self.opts.qualified}", body)

    def _check_privileges(self, cur: Any, with_epochs: bool) -> None:
        """Refuse the sink now, not at every checkpoint, when its role cannot write."""
        need = [(pg.quote_ident(self.opts.schema, self.opts.table), p)
                for p in ("INSERT", *(("UPDATE", "DELETE") if self.opts.primary_key else ()))]
        if with_epochs:
            need += [(self.epochs, "SELECT"), (self.epochs, "INSERT")]
        cur.execute("SELECT " + ", ".join(["has_table_privilege(%s, %s)"] * len(need)),
                    [x for pair in need for x in pair])
        missing = [f"{p} ON {t}" for (t, p), ok in zip(need, cur.fetchone(), strict=True) if not ok]
        if missing:
            raise PostgresPrivilegeError(
                f"PostgreSQL sink {self.name!r} ({self.opts.where}) lacks {', '.join(missing)}: GRANT "
                f"{', '.join(missing)} TO the sink's role, then create the sink again")

    @property
    def epochs(self) -> str:
        return pg.quote_ident(self.opts.schema, EPOCHS_TABLE)

    def write(self, cur: Any, table: pa.Table) -> None:
        dropped = pg.write_rows(cur, self.opts, table, self.columns, self.weight)
        if dropped:
            self.rows_dropped += dropped
            log.warning("PostgreSQL sink %s: %d rows with a NULL in the key (%s) were not written",
                        self.name, dropped, ", ".join(self.opts.primary_key))

    def _reset(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - it is being dropped anyway
                pass

    def close(self) -> None:
        self._reset()


class PostgresSink:
    """At-least-once: every batch is written as it arrives, in its own transaction (an
    in-memory database has no checkpoints to tie commits to).

    Raises (constructor): PostgresConfigError, PostgresUnavailableError, PostgresAuthError,
    PostgresPrivilegeError, PostgresSchemaError — the table is created or checked right away.
    """

    transactional = False

    def __init__(self, *, name: str, schema: pa.Schema, options: dict[str, str]) -> None:
        self._t = _Target(name, schema, options)
        self.name = name
        self.schema = schema
        self.rows_written = 0
        self._closed = False
        self._t.setup(with_epochs=False)

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Write ``batch`` now (one transaction). Raises a typed error if PostgreSQL refuses."""
        if self._closed:
            raise SinkClosedError(f"PostgreSQL sink {self.name!r} is closed")
        data = conform_to_sink(batch, self.schema, f"PostgreSQL sink {self.name!r}")
        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        if table.num_rows:
            self._t.transaction(f"write to {self._t.opts.qualified}", lambda cur: self._t.write(cur, table))
            self.rows_written += table.num_rows

    def flush(self) -> None:
        """Nothing buffered: every write() committed."""

    def close(self) -> None:
        self._closed = True
        self._t.close()


class ExactlyOncePostgresSink(TwoPhaseSink):
    """Writes a stream into a PostgreSQL table, one transaction per checkpoint epoch.

    Args:
        name: the sink's name (recorded in ``laminardb_epochs``).
        schema: the schema of the stream the sink reads (a changelog's has ``__weight``).
        options: the ``POSTGRES (…)`` options (``connectors._postgres.OPTIONS``).
        stage_dir: a directory of the database where the epochs' rows wait for commit.

    Raises:
        PostgresConfigError: an option is missing, unknown or invalid.
        PostgresUnavailableError, PostgresAuthError, PostgresPrivilegeError: the server
            cannot be reached, refuses the login, or the role lacks a privilege.
        PostgresSchemaError: the existing table does not fit the stream.
    """

    commit_outside_lock = True  # commit() reads sealed epochs only

    def __init__(self, *, name: str, schema: pa.Schema, options: dict[str, str],
                 stage_dir: str | os.PathLike[str]) -> None:
        self._t = _Target(name, schema, options)
        self.name = name
        self.schema = schema
        self.rows_written = 0
        self.rows_committed = 0
        self.epochs_committed = 0
        self._failed: str | None = None
        try:
            self._stage = EpochStage(stage_dir, schema)
            self.writer = _writer_id(Path(stage_dir))
        except OSError as exc:
            raise SinkWriteError(f"PostgreSQL sink {name!r} could not create its staging directory "
                                 f"{os.fspath(stage_dir)!r}: {exc}; check the disk and its permissions") from exc
        self._t.setup(with_epochs=True)
        self._recorded = self._t.transaction("read laminardb_epochs", self._done)

    # ------------------------------------------------------------------ phases
    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Stage rows of the open epoch (nothing reaches PostgreSQL before commit)."""
        data = conform_to_sink(batch, self.schema, f"PostgreSQL sink {self.name!r}")
        if self._failed is not None:
            return  # nothing can be committed before recover() rebuilds the epoch
        try:
            for b in data.to_batches() if isinstance(data, pa.Table) else [data]:
                self._stage.append(b)
        except OSError as exc:
            self._failed = (f"PostgreSQL sink {self.name!r} could not stage rows in {str(self._stage.dir)!r}: "
                            f"{exc}; free space, then reopen the database: its output since the last "
                            "checkpoint is rebuilt from the write-ahead log")
            self._stage.close()
            raise SinkWriteError(self._failed) from exc
        self.rows_written += data.num_rows

    def pre_commit(self, epoch: int) -> dict[str, Any]:
        """Seal the open epoch's rows as ``epoch``; returns ``{"rows": n}``."""
        if self._failed is not None:
            raise SinkWriteError(self._failed)
        if self._stage.open_rows == 0:
            return {"rows": 0}  # no rows, no transaction
        try:
            return {"rows": self._stage.seal(epoch)}
        except OSError as exc:
            raise SinkWriteError(f"PostgreSQL sink {self.name!r} could not seal epoch {epoch}: {exc}") from exc

    def commit(self, epoch: int) -> None:
        """Apply every staged epoch ``<= epoch`` that PostgreSQL has not recorded, oldest first,
        one transaction each. Idempotent.

        Raises:
            ConnectorError (a Postgres* error): the epoch stays staged and is retried by the
                next checkpoint's commit (and by recovery).
        """
        for e in [e for e in self._stage.epochs() if e <= epoch]:
            table = self._stage.read(e)
            applied = self._t.transaction(f"commit epoch {e} to {self._t.opts.qualified}",
                                          lambda cur, e=e, table=table: self._apply(cur, e, table))
            if applied:
                self.epochs_committed += 1
                self.rows_committed += table.num_rows
            self._recorded = max(self._recorded, e)
            _crash_point("after_postgres_commit")
            self._stage.drop(e)  # a crash before this: the transaction is recorded, recovery skips it

    def abort(self, epoch: int) -> None:
        """Drop the staged rows of ``epoch``."""
        self._stage.drop(epoch)

    def recover(self, epoch: int, info: dict[str, Any] | None) -> None:
        """After a restart from checkpoint ``epoch``: apply staged epochs ``<= epoch`` PostgreSQL
        lacks (if it cannot now, the next checkpoint does), drop later ones and unsealed rows."""
        self._stage.settle(epoch)
        self._failed = None
        try:
            self.commit(epoch)
        except ConnectorError as exc:
            log.warning("PostgreSQL sink %s: staged epochs wait for the next checkpoint: %s", self.name, exc)
        if self._recorded > epoch:
            # the rows come again in epochs above it, never under a number commit() would skip
            log.warning("PostgreSQL sink %s: %s records epochs up to %d, beyond the database's checkpoint "
                        "%d (a skipped checkpoint, or a directory restored from a backup): their rows are "
                        "written again from epoch %d on", self.name, EPOCHS_TABLE, self._recorded, epoch,
                        self._recorded + 1)

    def highest_epoch(self) -> int:
        return max([self._recorded, *self._stage.epochs()])

    def close(self) -> None:
        """Release the stage file and the connection; staged epochs stay for recovery."""
        self._stage.close()
        self._t.close()

    # ------------------------------------------------------------------ internals
    def _done(self, cur: Any) -> int:
        """The newest epoch ``laminardb_epochs`` records for this writer (0: none)."""
        cur.execute(f"SELECT coalesce(max(epoch), 0) FROM {self._t.epochs} WHERE sink = %s AND writer = %s",
                    (self.name, self.writer))
        return int(cur.fetchone()[0])

    def _apply(self, cur: Any, epoch: int, table: pa.Table) -> bool:
        """One epoch in the open transaction; False if PostgreSQL already has it."""
        # serializes writers of this id (a stale process still committing) around the check
        cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"{self.name}/{self.writer}",))
        # invariant: epochs increase, so everything up to the recorded maximum is in the table
        if epoch <= self._done(cur):
            return False
        self._t.write(cur, table)
        cur.execute(f"INSERT INTO {self._t.epochs} (sink, writer, epoch, target, rows) VALUES (%s, %s, %s, %s, %s)",
                    (self.name, self.writer, epoch, self._t.opts.qualified, table.num_rows))
        return True


def _writer_id(stage_dir: Path) -> str:
    """This database's id for the sink, made once and kept beside its staged epochs."""
    path = stage_dir / _WRITER_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        ident = uuid.uuid4().hex[:16]
        atomic_write(path, ident.encode(), what="PostgreSQL sink writer id")
        return ident
