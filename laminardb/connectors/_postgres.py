"""What the PostgreSQL sinks share: their options, the connection, the table and the set-based
writes. Entry points: :func:`read_options` → :class:`PgOptions`, :func:`connect`,
:func:`ensure_table`, :func:`write_rows`, :func:`pg_error`.

Rows go in column-wise: Arrow writes the CSV that ``COPY … FROM STDIN`` reads (no per-row
Python). A keyed sink (``primary_key``) collapses each key to its last change, bulk-loads those
rows into a TEMP table with COPY and applies them with one ``DELETE … USING`` and one
``INSERT … ON CONFLICT (pk) DO UPDATE``.

The password is only ever handed to libpq: messages name the target as ``user@host:port/db``
and every server message is scrubbed of the password before it is shown.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from laminardb.connectors.exceptions import (
    PostgresAuthError,
    PostgresConfigError,
    PostgresPrivilegeError,
    PostgresSchemaError,
    PostgresUnavailableError,
    PostgresWriteError,
)
from laminardb.errors import ConnectorError

__all__ = ["OPTIONS", "PgOptions", "connect", "ensure_table", "pg_error", "quote_ident", "read_options", "write_rows"]

#: the keys ``INTO POSTGRES (…)`` takes
OPTIONS = ("url", "hostname", "port", "username", "password", "database-name", "table", "primary_key")
_PARAM_OF = {"hostname": "host", "port": "port", "username": "user", "password": "password",
             "database-name": "dbname"}
# seconds libpq waits for the server to answer a connect: long enough for a busy server, short
# enough that a checkpoint whose commit meets a dead server fails (and retries) promptly
_CONNECT_TIMEOUT_S = 10
# how long a write waits for a lock another session holds on the table before it fails and is
# retried at the next checkpoint (the commit holds the checkpoint lock while it waits)
_LOCK_TIMEOUT = "10s"
_STAGE = "_laminardb_stage"
_OP = "__laminardb_op"

# Arrow type → the column type a new table gets
_PG_TYPE = [
    (pa.types.is_boolean, lambda t: "boolean"),
    (lambda t: t in (pa.int8(), pa.int16(), pa.uint8()), lambda t: "smallint"),
    (lambda t: t in (pa.int32(), pa.uint16()), lambda t: "integer"),
    (lambda t: t in (pa.int64(), pa.uint32()), lambda t: "bigint"),
    (lambda t: t == pa.uint64(), lambda t: "numeric(20,0)"),
    (lambda t: t in (pa.float16(), pa.float32()), lambda t: "real"),
    (lambda t: t == pa.float64(), lambda t: "double precision"),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), lambda t: "text"),
    (pa.types.is_date, lambda t: "date"),
    (pa.types.is_time, lambda t: "time"),
    (lambda t: pa.types.is_timestamp(t) and t.tz is None, lambda t: "timestamp"),
    (pa.types.is_timestamp, lambda t: "timestamptz"),
    (pa.types.is_decimal, lambda t: f"numeric({t.precision},{t.scale})"),
]
_INTS = {"smallint", "integer", "bigint", "numeric"}
# the column types (format_type without its modifier) an existing table may have per Arrow type
_FITS = {
    "boolean": {"boolean"},
    "smallint": _INTS, "integer": _INTS - {"smallint"}, "bigint": {"bigint", "numeric"},
    "numeric": {"numeric"}, "real": {"real", "double precision", "numeric"},
    "double precision": {"double precision", "numeric"},
    "text": {"text", "character varying", "character", "json", "jsonb", "uuid"},
    "date": {"date", "timestamp without time zone", "timestamp with time zone"},
    "time": {"time without time zone"},
    "timestamp": {"timestamp without time zone", "timestamp with time zone"},
    "timestamptz": {"timestamp with time zone", "timestamp without time zone"},
}


@dataclass(frozen=True)
class PgOptions:
    """A PostgreSQL sink's options, read and checked."""

    params: dict[str, str] = field(repr=False)  # libpq parameters, the password among them
    schema: str | None
    table: str
    primary_key: tuple[str, ...]

    @property
    def where(self) -> str:
        """The target for messages: ``user@host:port/db`` — never the password."""
        p = self.params
        return f"{p.get('user', '?')}@{p.get('host', '?')}:{p.get('port', '5432')}/{p.get('dbname', '?')}"

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}" if self.schema else self.table

    def scrub(self, text: str) -> str:
        """``text`` with the password blanked out (a server message may echo the DSN)."""
        pw = self.params.get("password")
        return text.replace(pw, "***") if pw else text


def read_options(name: str, options: dict[str, str]) -> PgOptions:
    """Check the ``INTO POSTGRES (…)`` options of sink ``name``.

    Raises:
        PostgresConfigError: a key is unknown, a required one is missing, or the url is not a
            ``postgresql://`` or ``jdbc:postgresql://`` URL.
    """
    where = f"PostgreSQL sink {name!r}"
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise PostgresConfigError(f"{where}: unknown option {', '.join(map(repr, unknown))}; the options "
                                  f"are {', '.join(OPTIONS)}")
    params: dict[str, str] = {}
    url = options.get("url")
    if url:
        params = _url_params(where, url)
    for key, param in _PARAM_OF.items():
        if options.get(key):
            params[param] = str(options[key])
    for need, key in (("host", "hostname"), ("dbname", "database-name")):
        if not params.get(need):
            raise PostgresConfigError(f"{where} needs {key} = '…' (or url = 'postgresql://user@host:5432/db')")
    table = str(options.get("table") or "").strip()
    if not table:
        raise PostgresConfigError(f"{where} needs table = '…' (the table to write, e.g. 'public.orders')")
    schema, _, bare = table.rpartition(".")
    if not bare or (not schema and "." in table):
        raise PostgresConfigError(f"{where}: table = {table!r} is not a table name; write 'table' or 'schema.table'")
    pk = tuple(c.strip() for c in str(options.get("primary_key") or "").split(",") if c.strip())
    return PgOptions(params=params, schema=schema or None, table=bare, primary_key=pk)


def _url_params(where: str, url: str) -> dict[str, str]:
    """``postgresql://user:pw@host:port/db`` or JDBC's ``jdbc:postgresql://host:port/db?user=…``
    (libpq reads both once the ``jdbc:`` prefix is gone) → libpq parameters."""
    from psycopg2.extensions import parse_dsn

    text = url[5:] if url.lower().startswith("jdbc:") else url
    if not re.match(r"(?i)postgres(ql)?://", text):
        raise PostgresConfigError(f"{where}: url must start with 'postgresql://' or 'jdbc:postgresql://'")
    try:
        return {k: str(v) for k, v in parse_dsn(text).items()}
    except Exception as exc:  # noqa: BLE001 - psycopg2.ProgrammingError; its text may hold the password
        msg = str(exc).strip()
        pw = re.search(r"://[^:/@]*:([^@/]*)@", text) or re.search(r"[?&]password=([^&]*)", text)
        if pw and pw.group(1):
            msg = msg.replace(pw.group(1), "***")
        raise PostgresConfigError(f"{where}: cannot read url: {msg}; write "
                                  "'postgresql://user@host:5432/db' or 'jdbc:postgresql://host:5432/db'") from None


def connect(opts: PgOptions, what: str) -> Any:
    """A psycopg2 connection (not autocommit) in UTC with a lock timeout.

    Raises:
        PostgresUnavailableError, PostgresAuthError, PostgresConfigError: see :func:`pg_error`.
    """
    import psycopg2

    try:
        conn = psycopg2.connect(**opts.params, connect_timeout=_CONNECT_TIMEOUT_S,
                                application_name="laminardb-sink")
        with conn.cursor() as cur:
            cur.execute(f"SET TimeZone = 'UTC'; SET lock_timeout = '{_LOCK_TIMEOUT}'")
        conn.commit()
    except psycopg2.Error as exc:
        raise pg_error(opts, what, exc) from None
    return conn


def pg_error(opts: PgOptions, what: str, exc: BaseException) -> ConnectorError:
    """The typed error for a psycopg2 failure while doing ``what`` (the password scrubbed)."""
    text = opts.scrub(str(exc).strip().replace("\n", " "))
    code = getattr(exc, "pgcode", None) or ""
    head = f"{what} ({opts.where}): {text}"
    if code == "42501":
        return PostgresPrivilegeError(f"{head}; GRANT the sink's role what it needs (CREATE on the schema for "
                                      "a new table, SELECT, INSERT, UPDATE, DELETE on the table and on "
                                      "laminardb_epochs), then the next checkpoint writes the kept rows")
    if code in ("28000", "28P01") or re.search(r"password authentication failed|role \".*\" does not exist|"
                                               r"no pg_hba.conf entry", text):
        return PostgresAuthError(f"{head}; check username and password, and that pg_hba.conf lets this "
                                 "host log in")
    if code == "3D000" or re.search(r"database \".*\" does not exist", text):
        return PostgresConfigError(f"{head}; create the database or fix database-name")
    if code == "3F000":
        return PostgresConfigError(f"{head}; create the schema or fix the table's schema name")
    if not code:  # no SQLSTATE: the connection failed or was lost
        return PostgresUnavailableError(f"{head}; check that the server runs and that hostname/port are "
                                        "right: rows wait in the database directory until it answers")
    return PostgresWriteError(f"{head} [SQLSTATE {code}]; the rows are kept and written again at the "
                              "next checkpoint")


def quote_ident(*parts: str | None) -> str:
    """``schema.table`` (or one name) as quoted SQL identifiers, exactly as written."""
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts if p)


def pg_type(name: str, t: pa.DataType) -> str:
    for test, make in _PG_TYPE:
        if test(t):
            return make(t)
    raise PostgresSchemaError(f"column {name!r} has type {t}, which the PostgreSQL sink cannot write; "
                              "CAST it in the stream to a number, text, date, time or timestamp")


# --------------------------------------------------------------------------- the table

def ensure_table(cur: Any, opts: PgOptions, schema: pa.Schema, sink: str) -> None:
    """Create the table from ``schema`` (with the primary key), or check the one that is there:
    every column present with a type the values fit, other columns nullable or defaulted, and
    a unique index on exactly the primary key.

    Raises:
        PostgresSchemaError: the table does not fit the stream.
    """
    where = f"PostgreSQL sink {sink!r}"
    types = {f.name: pg_type(f.name, f.type) for f in schema}
    target = quote_ident(opts.schema, opts.table)
    cur.execute("SELECT to_regclass(%s)::oid", (target,))
    oid = cur.fetchone()[0]
    if oid is None:
        cols = [f"{quote_ident(n)} {t}" for n, t in types.items()]
        if opts.primary_key:
            cols.append(f"PRIMARY KEY ({', '.join(map(quote_ident, opts.primary_key))})")
        cur.execute(f"CREATE TABLE IF NOT EXISTS {target} ({', '.join(cols)})")
        return
    cur.execute("SELECT attname, format_type(atttypid, atttypmod), attnotnull, atthasdef FROM pg_attribute "
                "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (oid,))
    have = {n: (re.sub(r"\(.*?\)", "", t).replace("  ", " ").strip(), notnull, hasdef)
            for n, t, notnull, hasdef in cur.fetchall()}
    problems = []
    for n, t in types.items():
        if n not in have:
            problems.append(f"column {n!r} is missing")
        elif have[n][0] not in _FITS[re.sub(r"\(.*\)", "", t)]:
            problems.append(f"column {n!r} is {have[n][0]}, the stream's is {t}")
    problems += [f"column {n!r} is NOT NULL without a default and not in the stream"
                 for n, (_, notnull, hasdef) in have.items() if n not in types and notnull and not hasdef]
    if opts.primary_key:
        cur.execute("SELECT array_agg(a.attname::text) FROM pg_index i JOIN pg_attribute a "
                    "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                    "WHERE i.indrelid = %s AND i.indisunique GROUP BY i.indexrelid", (oid,))
        if set(opts.primary_key) not in [set(r[0]) for r in cur.fetchall()]:
            problems.append(f"no primary key or unique index on ({', '.join(opts.primary_key)})")
    if problems:
        raise PostgresSchemaError(
            f"{where}: table {opts.qualified} does not fit the stream: {'; '.join(problems)}. ALTER the table, "
            "write to a new table (the sink creates it), or select the table's columns in the stream")


# --------------------------------------------------------------------------- the writes

def _csv(table: pa.Table) -> io.BytesIO:
    """``table`` as headerless CSV for COPY: Arrow quotes every string, so an empty string is
    ``""`` and a NULL is an empty field, which is how COPY's CSV format tells them apart."""
    buf = io.BytesIO()
    pacsv.write_csv(table, buf, pacsv.WriteOptions(include_header=False))
    buf.seek(0)
    return buf


def last_change_per_key(table: pa.Table, key: tuple[str, ...], weight: str | None) -> tuple[pa.Table, int]:
    """Each key's last row in order (with its weight): a ``-old, +new`` pair is an update, a
    final ``-1`` a delete. Rows with a NULL key cannot be in the table: dropped and counted."""
    if weight is not None:
        table = table.filter(pc.not_equal(table[weight], 0))
    valid = None
    for k in key:
        v = pc.is_valid(table[k])
        valid = v if valid is None else pc.and_(valid, v)
    kept = table.filter(valid) if valid is not None else table
    dropped = table.num_rows - kept.num_rows
    if kept.num_rows == 0:
        return kept, dropped
    rows = pa.array(np.arange(kept.num_rows, dtype=np.int64))
    last = kept.select(list(key)).append_column("__row", rows).group_by(list(key), use_threads=False) \
        .aggregate([("__row", "max")])
    return kept.take(np.sort(last["__row_max"].to_numpy())), dropped


def write_rows(cur: Any, opts: PgOptions, table: pa.Table, columns: list[str], weight: str | None) -> int:
    """Write ``table`` (the stream's rows, ``weight``: its changelog column) in the current
    transaction: COPY for an unkeyed sink, staged upsert/delete for a keyed one. Returns the
    number of rows dropped for a NULL key."""
    target = quote_ident(opts.schema, opts.table)
    cols = ", ".join(map(quote_ident, columns))
    if not opts.primary_key:
        if weight is not None:  # only reached for insert-only data (a changelog needs a key)
            table = table.filter(pc.greater(table[weight], 0))
        if table.num_rows:
            cur.copy_expert(f"COPY {target} ({cols}) FROM STDIN WITH (FORMAT csv)", _csv(table.select(columns)))
        return 0
    last, dropped = last_change_per_key(table, opts.primary_key, weight)
    if last.num_rows == 0:
        return dropped
    ops = pc.sign(last[weight]).cast(pa.int16()) if weight is not None else pa.repeat(1, last.num_rows).cast(pa.int16())
    staged = last.select(columns).append_column(_OP, ops)
    cur.execute(f"CREATE TEMP TABLE {_STAGE} ON COMMIT DROP AS SELECT {cols}, 0::smallint AS {_OP} "
                f"FROM {target} WITH NO DATA")
    cur.copy_expert(f"COPY {_STAGE} ({cols}, {_OP}) FROM STDIN WITH (FORMAT csv)", _csv(staged))
    on_key = " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in opts.primary_key)
    cur.execute(f"DELETE FROM {target} AS t USING {_STAGE} AS s WHERE s.{_OP} < 0 AND {on_key}")
    rest = [c for c in columns if c not in opts.primary_key]
    action = ("DO UPDATE SET " + ", ".join(f"{quote_ident(c)} = EXCLUDED.{quote_ident(c)}" for c in rest)) if rest else "DO NOTHING"
    cur.execute(f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {_STAGE} WHERE {_OP} > 0 "
                f"ON CONFLICT ({', '.join(map(quote_ident, opts.primary_key))}) {action}")
    return dropped
