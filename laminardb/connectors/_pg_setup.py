"""What a PostgreSQL CDC source checks and prepares on an ordinary connection before it streams:
the server's ``wal_level``, the table (exists, REPLICA IDENTITY FULL, the declared columns and
their types), the publication, the replication slot; and the initial snapshot, read under the
slot's exported snapshot.

Entry points: ``PgTarget`` (the options, parsed), ``connect(target, replication=…)``,
``check_table``, ``ensure_publication``, ``slot_info``, ``read_snapshot``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from laminardb.connectors.changelog_source import (
    check_declared_type,
    column_family,
    text_columns_batch,
)
from laminardb.connectors.exceptions import CdcConfigError, CdcSchemaError, CdcUnavailableError

__all__ = ["PgTarget", "TableInfo", "connect", "check_table", "ensure_publication", "slot_info", "read_snapshot",
           "quote_ident"]

# Both connections render values alike, so the snapshot's text and pgoutput's text convert the
# same way: timestamptz in UTC with its offset, ISO dates, shortest exact floats.
_SESSION = "-c TimeZone=UTC -c DateStyle=ISO,YMD -c extra_float_digits=1 -c IntervalStyle=postgres"
_SNAPSHOT_CHUNK_ROWS = 20_000  # one FETCH: bounded memory per round trip, few round trips


@dataclass(frozen=True)
class PgTarget:
    """A CDC source's options (Flink CDC's names), checked."""

    source: str
    host: str
    port: int
    user: str
    password: str | None = field(repr=False)
    dbname: str
    schema: str
    table: str
    slot: str
    publication: str
    connect_timeout_s: int

    @classmethod
    def from_options(cls, source: str, options: dict[str, str]) -> PgTarget:
        plugin = options.get("decoding.plugin.name", "pgoutput").lower()
        if plugin != "pgoutput":
            raise CdcConfigError(f"source {source!r}: 'decoding.plugin.name' = {plugin!r} is not supported; "
                                 "laminardb decodes PostgreSQL's built-in 'pgoutput' (leave the option out)")
        try:
            port = int(options.get("port", "5432"))
            timeout = int(options.get("connect.timeout", "10"))
        except ValueError as exc:
            raise CdcConfigError(f"source {source!r}: 'port' and 'connect.timeout' are whole numbers ({exc})") from None
        slot = options["slot.name"]
        if not slot.replace("_", "").isalnum() or slot.lower() != slot:
            raise CdcConfigError(f"source {source!r}: 'slot.name' = {slot!r}: PostgreSQL slot names are lower-case "
                                 "letters, digits and underscores")
        return cls(source, options["hostname"], port, options["username"], options.get("password"),
                   options["database-name"], options.get("schema-name", "public"), options["table-name"], slot,
                   options.get("publication.name", slot), timeout)

    @property
    def qualified(self) -> str:
        return f"{quote_ident(self.schema)}.{quote_ident(self.table)}"

    def where(self) -> str:
        return f"source {self.source!r} ({self.host}:{self.port}/{self.dbname}, table {self.schema}.{self.table})"


@dataclass(frozen=True)
class TableInfo:
    """The upstream table as the source reads it: its oid and, per declared column, the
    upstream type oid and the family that converts it."""

    relid: int
    type_oids: dict[str, int]
    families: tuple[str, ...]
    upstream_names: tuple[str, ...]  # per declared column, its name upstream


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def connect(target: PgTarget, *, replication: bool = False):
    """A psycopg2 connection (autocommit), or a logical replication one. The password goes to
    libpq only; it is never part of an error message."""
    import psycopg2
    import psycopg2.extras

    kwargs = dict(host=target.host, port=target.port, user=target.user, dbname=target.dbname,
                  connect_timeout=target.connect_timeout_s, options=_SESSION,
                  application_name=f"laminardb-cdc-{target.source}"[:63])
    if target.password is not None:
        kwargs["password"] = target.password
    try:
        if replication:
            return psycopg2.connect(connection_factory=psycopg2.extras.LogicalReplicationConnection, **kwargs)
        conn = psycopg2.connect(**kwargs)
    except psycopg2.OperationalError as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if target.password:
            why = why.replace(target.password, "***")
        raise CdcUnavailableError(f"{target.where()}: cannot connect: {why}; check hostname, port, username "
                                  "and that pg_hba.conf lets this host in"
                                  + (" for replication" if replication else "")) from None
    conn.autocommit = True
    return conn


def _one(conn, sql: str, args=()):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()


def check_table(conn, target: PgTarget, schema: pa.Schema) -> TableInfo:
    """Refuse, by name, what would make the change stream wrong or unreadable."""
    (wal_level,) = _one(conn, "SHOW wal_level")
    if wal_level != "logical":
        raise CdcConfigError(f"{target.where()}: the server runs with wal_level = {wal_level!r}; logical "
                             "decoding needs wal_level = logical in postgresql.conf (then restart the server)")
    row = _one(conn, "SELECT c.oid, c.relreplident, c.relkind FROM pg_class c JOIN pg_namespace n "
                     "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
               (target.schema, target.table))
    if row is None:
        raise CdcConfigError(f"{target.where()}: no table {target.schema}.{target.table} in database "
                             f"{target.dbname!r}; check 'schema-name' and 'table-name'")
    relid, ident, kind = row
    if kind == "p":  # its changes come per partition; one source per partition works
        raise CdcConfigError(f"{target.where()}: the table is partitioned, which CDC sources do not read yet; "
                             "read each partition with its own source")
    if ident != "f":
        raise CdcConfigError(
            f"{target.where()}: the table's REPLICA IDENTITY is not FULL, so updates and deletes would not carry "
            f"the old row the source retracts; run: ALTER TABLE {target.qualified} REPLICA IDENTITY FULL")
    with conn.cursor() as cur:
        cur.execute("SELECT a.attname, a.atttypid, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
                    "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum", (relid,))
        upstream = {name: (oid, typname) for name, oid, typname in cur.fetchall()}
    folded = {n.lower(): n for n in upstream}
    oids, families, names = {}, [], []
    for col in schema:
        name = col.name if col.name in upstream else folded.get(col.name.lower())
        if name is None:
            raise CdcSchemaError(f"{target.where()}: declared column {col.name!r} is not a column of the table "
                                 f"(it has {', '.join(upstream)}); declare only upstream columns")
        oid, typname = upstream[name]
        family = column_family("postgres", typname)
        check_declared_type(target.source, col.name, typname, family, col.type)
        oids[name] = oid
        families.append(family)
        names.append(name)
    return TableInfo(relid, oids, tuple(families), tuple(names))


def ensure_publication(conn, target: PgTarget) -> None:
    """The publication the slot streams through, for this table only (created if missing)."""
    if _one(conn, "SELECT 1 FROM pg_publication WHERE pubname = %s", (target.publication,)) is None:
        with conn.cursor() as cur:
            cur.execute(f"CREATE PUBLICATION {quote_ident(target.publication)} FOR TABLE {target.qualified}")
        return
    has = _one(conn, "SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s AND tablename = %s",
               (target.publication, target.schema, target.table))
    if has is None:
        raise CdcConfigError(f"{target.where()}: publication {target.publication!r} exists but does not publish the "
                             f"table; run: ALTER PUBLICATION {quote_ident(target.publication)} ADD TABLE "
                             f"{target.qualified} (or name another with 'publication.name')")


def slot_info(conn, target: PgTarget) -> tuple[str, str, str | None, bool] | None:
    """(plugin, database, confirmed_flush_lsn as text, active) of the slot; None: no such slot."""
    return _one(conn, "SELECT plugin, database, confirmed_flush_lsn::text, active FROM pg_replication_slots "
                      "WHERE slot_name = %s", (target.slot,))


def read_snapshot(conn, target: PgTarget, schema: pa.Schema, table: TableInfo, snapshot_name: str) -> pa.RecordBatch:
    """The table as of the slot's exported snapshot, as one +1 batch (read in chunks, each
    converted column-wise). One batch, so no checkpoint can fall inside the snapshot: a
    restart either re-reads all of it (no position yet) or none (the position is the slot's)."""
    cols = ", ".join(f"{quote_ident(n)}::text" for n in table.upstream_names)
    conn.autocommit = False
    batches = []
    try:
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
        with conn.cursor(name="laminardb_cdc_snapshot") as cur:
            cur.itersize = _SNAPSHOT_CHUNK_ROWS
            cur.execute(f"SELECT {cols} FROM {target.qualified}")
            while True:
                rows = cur.fetchmany(_SNAPSHOT_CHUNK_ROWS)
                if not rows:
                    break
                columns = list(zip(*rows, strict=True))
                batches.append(text_columns_batch(schema, table.families, columns,
                                                  np.ones(len(rows), dtype=np.int64), source=target.source))
        conn.rollback()
    finally:
        conn.autocommit = True
    if not batches:
        return text_columns_batch(schema, table.families, [[] for _ in schema], pa.array([], pa.int64()),
                                  source=target.source)
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
