"""Fetch the rows of a PostgreSQL table by key, many keys in one query, as Arrow.

Entry point: ``PostgresLookup(spec)`` (a ``sql.lookup_tables.LookupTableSpec``);
``fetch(keys) -> pa.Table`` for a list of key columns (distinct key tuples, no NULLs) returns
the rows of the table whose key columns equal one of them, typed as the table was declared.
One statement per call: ``WHERE k = ANY(%s)`` for one key column, ``WHERE (k1, k2) IN (SELECT *
FROM unnest(%s, %s))`` for several. Rows come back through ``COPY (…) TO STDOUT (FORMAT csv)``
and are parsed by Arrow's CSV reader: column-wise, no Python object per row or value.

Failures (refused connection, lost connection, permission, missing table, a timeout) raise
``LookupTableUnavailableError`` naming the server and table, never the password; the broken
connection is dropped and the next ``fetch`` connects again. ``lookup.max-retries`` more
attempts (50 ms, 100 ms, 200 ms … apart) are made before raising.
"""

from __future__ import annotations

import io
import time

import pyarrow as pa
import pyarrow.csv as pacsv

from laminardb.connectors.exceptions import LookupTableUnavailableError

__all__ = ["PostgresLookup"]

_CONNECT_TIMEOUT_S = 5
_STATEMENT_TIMEOUT_MS = 30_000


class PostgresLookup:
    """One connection (opened on first use) to the table of ``spec``; see the module docstring."""

    def __init__(self, spec) -> None:
        self.spec = spec
        self._conn = None
        self.queries = 0  # statements sent (one per fetch that reached the server)
        self.rows_fetched = 0
        self.errors = 0  # failed attempts

    # ------------------------------------------------------------------ connection
    def _connect(self):
        import psycopg2

        s = self.spec
        kw = dict(s.params)
        kw.setdefault("connect_timeout", str(_CONNECT_TIMEOUT_S))
        conn = psycopg2.connect(host=s.host, port=s.port, dbname=s.dbname, user=s.user, password=s.password,
                                options=f"-c statement_timeout={_STATEMENT_TIMEOUT_MS} -c TimeZone=UTC "
                                        "-c DateStyle=ISO", **kw)
        conn.autocommit = True
        return conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection: nothing left to do
                pass

    # ------------------------------------------------------------------ fetch
    def statement(self, key_cols: list[str]) -> str:
        """The SELECT for ``key_cols`` (placeholders: one array per key column)."""
        from psycopg2 import sql

        cols = sql.SQL(", ").join(sql.Identifier(f.name) for f in self.spec.schema)
        table = sql.Identifier(*self.spec.table)
        if len(key_cols) == 1:
            where = sql.SQL("{} = ANY(%s)").format(sql.Identifier(key_cols[0]))
        else:
            keys = sql.SQL(", ").join(sql.Identifier(k) for k in key_cols)
            args = sql.SQL(", ").join(sql.Placeholder() for _ in key_cols)
            where = sql.SQL("({}) IN (SELECT * FROM unnest({}))").format(keys, args)
        return sql.SQL("SELECT {} FROM {} WHERE {}").format(cols, table, where)

    def fetch(self, key_cols: list[str], keys: list[pa.Array]) -> pa.Table:
        """The rows whose ``key_cols`` equal a tuple of ``keys`` (parallel arrays), in one query."""
        params = [k.to_pylist() for k in keys]  # psycopg2 adapts each list to one ARRAY parameter
        last: Exception | None = None
        for attempt in range(self.spec.max_retries + 1):
            if attempt:
                time.sleep(min(0.05 * 2 ** (attempt - 1), 1.0))
            try:
                return self._fetch_once(key_cols, params)
            except Exception as e:  # noqa: BLE001 - psycopg2.Error and socket errors alike: retried, then typed
                self.errors += 1
                self.close()
                last = e
        raise LookupTableUnavailableError(
            f"lookup table {self.spec.name!r}: {self.spec.where()} did not answer after "
            f"{self.spec.max_retries + 1} attempts ({type(last).__name__}: {str(last).strip()[:300]}). Check that "
            f"the server runs and that user {self.spec.user!r} may SELECT from the table; the input rows of this "
            "batch are kept and joined when the server answers again (with the next input batch)") from None

    def _fetch_once(self, key_cols: list[str], params: list[list]) -> pa.Table:
        if self._conn is None:
            self._conn = self._connect()
        with self._conn.cursor() as cur:
            query = cur.mogrify(self.statement(key_cols), params).decode()
            buf = io.BytesIO()
            self.queries += 1
            cur.copy_expert(f"COPY ({query}) TO STDOUT WITH (FORMAT csv)", buf)
        table = _read_csv(buf.getvalue(), self.spec.schema)
        self.rows_fetched += table.num_rows
        return table


def _read_csv(data: bytes, schema: pa.Schema) -> pa.Table:
    """PostgreSQL's CSV (NULL: an empty unquoted field; '': a quoted one) → a table of ``schema``."""
    if not data:
        return schema.empty_table()
    read = pacsv.ReadOptions(column_names=schema.names, autogenerate_column_names=False)
    convert = pacsv.ConvertOptions(column_types=schema, null_values=[""], strings_can_be_null=True,
                                   quoted_strings_can_be_null=False, true_values=["t"], false_values=["f"])
    table = pacsv.read_csv(io.BytesIO(data), read_options=read, convert_options=convert)
    return table.cast(schema) if table.schema != schema else table
