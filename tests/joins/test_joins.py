"""Every join kind against DuckDB over the same out-of-order rows, with watermarks; changelogs
are folded by ``__weight`` first. Also: WHERE/ON pushdown, residual conditions, aggregates and
windows over joins, self-joins, subqueries and UNION ALL in FROM."""

from __future__ import annotations

import pytest

from tests.joins.harness import make_rows, oracle, run_db, same

SEEDS = [1, 2, 3]
_L = "l.k, l.v, l.ts"
_R = "r.k, r.w, r.ts"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", ["INNER", "LEFT", "RIGHT", "FULL"])
def test_equi_join_equals_duckdb(kind, seed):
    batches = make_rows(seed)
    got, db = run_db(f"SELECT {_L}, {_R} FROM l {kind} JOIN r ON l.k = r.k", batches)
    assert ("__weight" in got.column_names) == (kind != "INNER")
    same(got, oracle(f"SELECT {_L}, {_R} FROM l {kind} JOIN r ON l.k = r.k", batches))
    db.close()


@pytest.mark.parametrize("kind", ["LEFT", "FULL"])
def test_outer_join_retracts_the_padded_row_when_a_match_arrives(kind):
    got, db = run_db(f"SELECT l.k, l.v, r.w FROM l {kind} JOIN r ON l.k = r.k",
                     [("l", _batch("l", [(1, "a", 10)])), ("r", _batch("r", [(1, 5, 20)]))])
    assert got.to_pylist() == [{"k": 1, "v": "a", "w": None, "__weight": 1},
                               {"k": 1, "v": "a", "w": None, "__weight": -1},
                               {"k": 1, "v": "a", "w": 5, "__weight": 1}]
    db.close()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", ["INNER", "LEFT", "RIGHT", "FULL"])
def test_interval_join_equals_duckdb_and_is_append_only(kind, seed):
    batches = make_rows(seed)
    cond = "l.k = r.k AND l.ts BETWEEN r.ts - INTERVAL '3' SECOND AND r.ts + INTERVAL '500' MILLISECOND"
    got, db = run_db(f"SELECT {_L}, {_R} FROM l {kind} JOIN r ON {cond}", batches)
    assert "__weight" not in got.column_names  # padded rows come once, when the row expires
    assert db.metrics()["late_events_dropped"] == 0
    duck_cond = "l.k = r.k AND l.ts BETWEEN r.ts - 3000 AND r.ts + 500"
    same(got, oracle(f"SELECT {_L}, {_R} FROM l {kind} JOIN r ON {duck_cond}", batches))
    db.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_interval_join_in_where_with_one_sided_bounds(seed):
    """The comma form (Flink's and Nexmark's): keys and time bounds from WHERE."""
    batches = make_rows(seed)
    q = f"SELECT {_L}, {_R} FROM l, r WHERE l.k = r.k AND l.ts >= r.ts - INTERVAL '1' SECOND AND r.ts > l.ts"
    got, db = run_db(q, batches)
    same(got, oracle(q.replace("INTERVAL '1' SECOND", "1000"), batches))
    db.close()


@pytest.mark.parametrize("kind", ["INNER", "LEFT", "RIGHT", "FULL"])
def test_residual_and_pushed_conditions_equal_duckdb(kind):
    batches = make_rows(4)
    q = (f"SELECT {_L}, {_R} FROM l {kind} JOIN r ON l.k = r.k AND r.w > 3 AND l.v <> 'x' AND l.ts < r.ts "
         "WHERE l.k IS NULL OR l.k < 30")
    got, db = run_db(q, batches)
    same(got, oracle(q, batches))
    db.close()


def test_aggregate_over_a_join_equals_duckdb():
    batches = make_rows(5)
    q = "SELECT l.k, count(*) AS n, sum(r.w) AS sw FROM l JOIN r ON l.k = r.k WHERE r.w < 8 GROUP BY l.k"
    got, db = run_db(q, batches)
    same(got, oracle(q, batches))
    db.close()


def test_aggregate_over_an_outer_join_changelog_equals_duckdb():
    batches = make_rows(6)
    q = "SELECT l.v, count(*) AS n, count(r.w) AS m, sum(r.w) AS sw FROM l LEFT JOIN r ON l.k = r.k GROUP BY l.v"
    got, db = run_db(q, batches)
    same(got, oracle(q, batches))
    db.close()


def test_window_over_an_interval_join_equals_duckdb():
    """An interval join passes event time on (held back by its interval): windows close over it."""
    batches = make_rows(7)
    q = ("SELECT l.k, window_start, count(*) AS n FROM l JOIN r ON l.k = r.k "
         "AND l.ts BETWEEN r.ts - INTERVAL '2' SECOND AND r.ts GROUP BY l.k, tumble(l.ts, INTERVAL '5' SECOND)")
    got, db = run_db(q, batches)
    assert "__weight" not in got.column_names
    want = oracle("SELECT l.k, l.ts // 5000 * 5000 AS ws, count(*) FROM l JOIN r ON l.k = r.k "
                  "AND l.ts BETWEEN r.ts - 2000 AND r.ts GROUP BY l.k, ws", batches)
    same(got, want)
    db.close()


def test_self_join_equals_duckdb():
    batches = make_rows(8)
    q = "SELECT a.k, a.ts, b.ts FROM l AS a JOIN l AS b ON a.k = b.k AND a.v = b.v"
    got, db = run_db(q, batches)
    same(got, oracle(q, batches))
    db.close()


def test_three_way_join_and_subquery_equal_duckdb():
    batches = make_rows(9, n=300, keys=15)
    q = ("SELECT a.k, a.v, r.w, q.n FROM l AS a JOIN r ON a.k = r.k "
         "JOIN (SELECT k, count(*) AS n FROM r GROUP BY k) AS q ON q.k = a.k")
    got, db = run_db(q, batches)
    same(got, oracle(q, batches))
    db.close()


def test_union_all_in_from_equals_duckdb():
    batches = make_rows(10)
    q = "SELECT k, count(*) AS n FROM (SELECT k, ts FROM l UNION ALL SELECT k, ts FROM r) AS u GROUP BY k"
    got, db = run_db(q, batches)
    same(got, oracle(q, batches))
    db.close()


def test_star_names_and_ambiguity():
    got, db = run_db("SELECT * FROM l JOIN r ON l.k = r.k", [("l", _batch("l", [(1, "a", 10)])),
                                                             ("r", _batch("r", [(1, 5, 20)]))])
    assert got.column_names == ["k", "v", "ts", "k0", "w", "ts0"]
    db.close()
    import laminardb

    db = laminardb.open()
    from tests.joins.harness import SOURCES

    db.execute(SOURCES)
    with pytest.raises(laminardb.LaminarError, match="ambiguous"):
        db.execute("CREATE STREAM s AS SELECT k FROM l JOIN r ON l.k = r.k")
    with pytest.raises(laminardb.LaminarError, match="needs an equality"):
        db.execute("CREATE STREAM s AS SELECT l.k FROM l JOIN r ON l.ts < r.ts")
    assert any("Join[inner" in line for line in db.execute(
        "EXPLAIN SELECT l.k FROM l JOIN r ON l.k = r.k").to_arrow().column(0).to_pylist())
    db.close()


def _batch(name: str, values: list[tuple]):
    import pyarrow as pa

    from tests.joins.harness import L_SCHEMA, R_SCHEMA

    schema = L_SCHEMA if name == "l" else R_SCHEMA
    return pa.RecordBatch.from_pylist([dict(zip(schema.names, v, strict=True)) for v in values], schema=schema)
