"""NOT LIKE, NOT ILIKE and IS NOT agree with DuckDB in WHERE, SELECT and query().

sqlglot 30.30 parses ``s NOT LIKE p`` as ``Like(negate=True)`` where older releases gave
``Not(Like)``; laminardb once ignored ``negate`` and returned LIKE's rows for NOT LIKE.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import laminardb
from tests.engine.oracle import oracle_connection

ROWS = pa.table({"ts": pa.array(range(7), pa.int64()),
                 "s": ["Hello", "help", "HELLO", "", None, "über", "xH%y"]})
PREDICATES = ["s NOT LIKE 'H%'", "s NOT ILIKE 'h%'", "s LIKE 'H%'", "NOT (s LIKE 'H%')", "s IS NOT NULL",
              "NOT s NOT LIKE '%l%'", "s NOT LIKE '_e%'",
              "(s IS NOT NULL) IS NOT TRUE", "s NOT LIKE 'H%' AND s NOT ILIKE '%p'"]


@pytest.mark.parametrize("pred", PREDICATES)
def test_negated_predicate_equals_duckdb(pred):
    db = laminardb.open()
    db.execute(f"CREATE SOURCE t (ts BIGINT NOT NULL, s VARCHAR); "
               f"CREATE MATERIALIZED VIEW kept AS SELECT ts FROM t WHERE {pred}; "
               f"CREATE MATERIALIZED VIEW flags AS SELECT ts, {pred} AS f FROM t")
    db.insert("t", ROWS)
    kept = sorted(db.query("SELECT ts FROM kept").to_arrow()["ts"].to_pylist())
    flags = sorted(tuple(r.values()) for r in db.query("SELECT ts, f FROM flags").to_arrow().to_pylist())
    db.close()
    con = oracle_connection(t=ROWS)
    assert kept == sorted(r[0] for r in con.sql(f"SELECT ts FROM t WHERE {pred}").fetchall())
    assert flags == sorted(con.sql(f"SELECT ts, {pred} FROM t").fetchall())
