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
from laminardb.connectors import _postgres as pg
from laminardb.connectors._epoch_sink import EpochRecordingSink
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


class ExactlyOncePostgresSink(EpochRecordingSink):
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

    label = "PostgreSQL sink"

    def __init__(self, *, name: str, schema: pa.Schema, options: dict[str, str],
                 stage_dir: str | os.PathLike[str]) -> None:
        self._t = _Target(name, schema, options)
        self.target = f"{EPOCHS_TABLE} of {self._t.opts.qualified}"
        self._open_stage(name, schema, stage_dir)
        try:
            self.writer = _writer_id(Path(stage_dir))
        except OSError as exc:
            raise SinkWriteError(f"PostgreSQL sink {name!r} could not keep its writer id in "
                                 f"{os.fspath(stage_dir)!r}: {exc}; check the disk and its permissions") from exc
        self._t.setup(with_epochs=True)
        self._recovered = self._t.transaction("read laminardb_epochs", self._done)

    # ------------------------------------------------------------------ the target
    def _last_committed(self) -> int:
        return self._t.transaction("read laminardb_epochs", self._done)

    def _apply(self, epoch: int, table: pa.Table) -> bool:
        """One PostgreSQL transaction: the rows, and (sink, writer, epoch) in ``laminardb_epochs``.

        Raises:
            ConnectorError (a Postgres* error): the epoch stays staged and is retried by the
                next checkpoint's commit (and by recovery).
        """
        applied = self._t.transaction(f"commit epoch {epoch} to {self._t.opts.qualified}",
                                      lambda cur: self._apply_in(cur, epoch, table))
        _crash_point("after_postgres_commit")
        return applied

    def _commit_on_recovery(self, epoch: int) -> None:
        """The server may be down while the database opens: the epochs wait, staged."""
        try:
            self.commit(epoch)
        except ConnectorError as exc:
            log.warning("PostgreSQL sink %s: staged epochs wait for the next checkpoint: %s", self.name, exc)

    def close(self) -> None:
        """Release the stage file and the connection; staged epochs stay for recovery."""
        super().close()
        self._t.close()

    # ------------------------------------------------------------------ internals
    def _done(self, cur: Any) -> int:
        """The newest epoch ``laminardb_epochs`` records for this writer (0: none)."""
        cur.execute(f"SELECT coalesce(max(epoch), 0) FROM {self._t.epochs} WHERE sink = %s AND writer = %s",
                    (self.name, self.writer))
        return int(cur.fetchone()[0])

    def _apply_in(self, cur: Any, epoch: int, table: pa.Table) -> bool:
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
