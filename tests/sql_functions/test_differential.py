"""Differential test: random scalar expressions — every function and operator of docs/sql.md,
every CAST pair — evaluated by laminardb and by DuckDB over the same random rows.

Each example draws a few rows (NULLs, '', unicode, negative numbers, overflow edges, NaN/inf,
dates from year 1 to 9999) and up to ``PER_VIEW`` expressions (``fuzz_grammar``/``fuzz_rules``).
laminardb runs them all as the columns of one MATERIALIZED VIEW (projection) and the BOOLEAN
ones also as WHERE conditions; DuckDB runs each expression's translation, which computes
Flink's rule where laminardb follows Flink (docs/sql.md lists each difference). The two must
agree (DOUBLEs within 1e-9 relative, NaN equal to NaN), or laminardb must refuse the
expression with a typed error (LDB-code) when the view is created — and only expressions
the grammar marks as refused by design may be refused.

Bounded for ``make test``: ``derandomize=True`` (the same examples on every run) and
``LAMINARDB_FUZZ_EXAMPLES`` examples (default 150, ~15 s on 2 cores). A long run:
``LAMINARDB_FUZZ_EXAMPLES=5000 LAMINARDB_FUZZ_RANDOM=1 pytest tests/sql_functions/test_differential.py``
(random seeds: every run explores new expressions; a failure prints the seed to replay).
"""

from __future__ import annotations

import math
import os
import random
import re

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import laminardb
from tests.sql_functions.fuzz_grammar import (
    ALL,
    CLOCK_MS,
    COLUMNS,
    DDL,
    MACROS,
    E,
    expressions,
    rows,
)

EXAMPLES = int(os.environ.get("LAMINARDB_FUZZ_EXAMPLES", "150"))
RANDOM = os.environ.get("LAMINARDB_FUZZ_RANDOM", "") not in ("", "0")
PER_VIEW = 12
DEPTH = 3

# no shrinking: a failure names its expression, its row and both values already, and shrinking
# re-plans a database per step (minutes)
FUZZ = settings(max_examples=EXAMPLES, derandomize=not RANDOM, deadline=None, database=None, print_blob=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])

_ARROW = {"a": pa.int64(), "b": pa.int64(), "i": pa.int32(), "x": pa.float64(), "y": pa.float64(), "s": pa.string(),
          "u": pa.string(), "p": pa.bool_(), "q": pa.bool_(), "ts": pa.timestamp("ms"), "t6": pa.timestamp("us"),
          "d": pa.date32()}
SCHEMA = pa.schema([("id", pa.int64()), *[(c, _ARROW[c]) for c in COLUMNS]])


def table_of(drawn: list[dict]) -> pa.Table:
    cols = {"id": pa.array(range(len(drawn)), pa.int64())}
    for c, t in _ARROW.items():
        vals = [r[c] for r in drawn]
        if pa.types.is_timestamp(t) or pa.types.is_date(t):
            storage = pa.int64() if pa.types.is_timestamp(t) else pa.int32()
            cols[c] = pa.array(vals, storage).cast(t)
        else:
            cols[c] = pa.array(vals, t)
    return pa.table(cols, schema=SCHEMA)


_DUCK = None


def duck_connection():
    global _DUCK
    if _DUCK is None:
        _DUCK = duckdb.connect()
        for m in MACROS:
            _DUCK.execute(m)
    return _DUCK


def duck_rows(sql: str, table: pa.Table) -> pa.Table:
    con = duck_connection()
    # DuckDB 2.0.1: epoch_ms() on a TIMESTAMP_MS column raises; it reads microseconds
    con.register("rows", table.set_column(table.schema.get_field_index("ts"), "ts", table["ts"].cast(pa.timestamp("us"))))
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.unregister("rows")


# --------------------------------------------------------------------------- comparison


def kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_timestamp(t):
        return "ts"
    if pa.types.is_date(t):
        return "date"
    return str(t)


EXPECTED_KIND = {"INT": "int", "BIGINT": "int", "DOUBLE": "float", "VARCHAR": "str", "BOOLEAN": "bool",
                 "TIMESTAMP": "ts", "TIMESTAMP6": "ts", "DATE": "date"}


def plain(col: pa.ChunkedArray | pa.Array) -> list:
    """Python values, times as integers (µs, days): datetime cannot hold every Arrow value."""
    if pa.types.is_timestamp(col.type):
        col = pc.cast(pc.cast(col, pa.timestamp("us")), pa.int64())
    elif pa.types.is_date(col.type):
        col = pc.cast(col, pa.int32())
    elif pa.types.is_decimal(col.type):
        col = pc.cast(col, pa.float64())
    return col.to_pylist()


def same(x, y) -> bool:
    if x is None or y is None:
        return x is None and y is None
    if isinstance(x, float) or isinstance(y, float):
        x, y = float(x), float(y)
        if math.isnan(x) or math.isnan(y):
            return math.isnan(x) and math.isnan(y)
        return x == y or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-300)
    return x == y


# --------------------------------------------------------------------------- the engine


def refusal(db, sql: str) -> Exception | None:
    try:
        db.execute(sql)
    except laminardb.LaminarError as e:
        return e
    return None


def assert_typed(e: Exception | None, what: str) -> None:
    assert e is not None, f"laminardb accepted {what}, which it refuses by design"
    assert isinstance(e, laminardb.LaminarError) and re.fullmatch(r"LDB-\d{4}", e.code), f"{what}: untyped {e!r}"


def run(drawn: list[dict], exprs: list[E], filters: list[E]) -> None:
    table = table_of(drawn)
    db = laminardb.open(config={"clock": lambda: CLOCK_MS})
    try:
        db.execute(DDL)
        for k, e in enumerate([e for e in exprs + filters if not e.ok()]):
            assert_typed(refusal(db, f"CREATE MATERIALIZED VIEW r{k} AS SELECT {e.lam} AS v FROM t"), e.lam)
        exprs = [e for e in exprs if e.ok()]
        filters = [f for f in filters if f.ok()]
        cols = ", ".join(f"{e.lam} AS c{k}" for k, e in enumerate(exprs))
        err = refusal(db, f"CREATE MATERIALIZED VIEW v AS SELECT id{', ' if cols else ''}{cols} FROM t")
        if err is not None:
            for e in exprs:  # which one?
                one = refusal(db, f"CREATE MATERIALIZED VIEW one AS SELECT {e.lam} AS v FROM t")
                assert one is None, f"laminardb refused {e.lam}: {one!r}"
                db.execute("DROP MATERIALIZED VIEW one")
            raise AssertionError(f"laminardb refused the view: {err!r}")
        for k, f in enumerate(filters):
            e = refusal(db, f"CREATE MATERIALIZED VIEW w{k} AS SELECT id FROM t WHERE {f.lam}")
            assert e is None, f"laminardb refused WHERE {f.lam}: {e!r}"
        half = max(1, table.num_rows // 2)
        try:
            db.insert("t", table.slice(0, half))
            if table.num_rows > half:
                db.insert("t", table.slice(half))
        except Exception as err:  # noqa: BLE001 - name the expression that raised mid-stream
            raise AssertionError(f"laminardb raised while running rows: {err!r}; {_culprit(drawn, exprs + filters)}") from err
        got = db.query("SELECT * FROM v").to_arrow().sort_by("id")
        got_where = [sorted(db.query(f"SELECT id FROM w{k}").to_arrow()["id"].to_pylist()) for k in range(len(filters))]
    finally:
        db.close()

    assert got.num_rows == table.num_rows
    if exprs:
        sql = "SELECT id, " + ", ".join(f"{e.duck} AS c{k}" for k, e in enumerate(exprs)) + " FROM rows ORDER BY id"
        want = _duck_or_fail(sql, table, exprs)
        for k, e in enumerate(exprs):
            g, w = got[f"c{k}"], want[f"c{k}"]
            assert kind(g.type) == EXPECTED_KIND[e.type], f"{e.lam}: laminardb's type is {g.type}, documented {e.type}"
            for r, (gv, wv) in enumerate(zip(plain(g), plain(w), strict=True)):
                assert same(gv, wv), (f"{e.lam}\n  laminardb: {gv!r}\n  Flink's rule (DuckDB: {e.duck}): {wv!r}\n"
                                      f"  row: {drawn[r]}")
    for k, f in enumerate(filters):
        want_ids = sorted(_duck_or_fail(f"SELECT id FROM rows WHERE {f.duck}", table, [f])["id"].to_pylist())
        assert got_where[k] == want_ids, f"WHERE {f.lam}: laminardb kept {got_where[k]}, DuckDB ({f.duck}) {want_ids}"


def _culprit(drawn: list[dict], exprs: list[E]) -> str:
    for e in exprs:
        db = laminardb.open(config={"clock": lambda: CLOCK_MS})
        try:
            db.execute(DDL)
            db.execute(f"CREATE MATERIALIZED VIEW one AS SELECT {e.lam} AS v FROM t")
            db.insert("t", table_of(drawn))
        except Exception as err:  # noqa: BLE001
            return f"the expression: {e.lam} ({err!r})"
        finally:
            db.close()
    return "no single expression raised"


def _duck_or_fail(sql: str, table: pa.Table, exprs: list[E]) -> pa.Table:
    try:
        return duck_rows(sql, table)
    except duckdb.Error:
        for e in exprs:  # name the translation DuckDB cannot run
            try:
                duck_rows(f"SELECT {e.duck} FROM rows", table)
            except duckdb.Error as one:
                raise AssertionError(f"the DuckDB translation of {e.lam} fails: {e.duck}: {one}") from None
        raise


def draw_expressions(seed: int) -> tuple[list[E], list[E]]:
    rnd = random.Random(seed)
    exprs = [expressions(rnd.choice(ALL), DEPTH).draw(rnd) for _ in range(rnd.randint(1, PER_VIEW))]
    filters = [expressions("BOOLEAN", DEPTH).draw(rnd) for _ in range(rnd.randint(1, 2))]
    return exprs, filters


@FUZZ
@given(drawn=rows(), seed=st.integers(0, 2**32 - 1))
def test_laminardb_agrees_with_duckdb(drawn, seed):
    exprs, filters = draw_expressions(seed)
    run(drawn, exprs, filters)
