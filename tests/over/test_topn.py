"""ROW_NUMBER() OVER (…) bounded by ``rn <= N``: streaming Top-N (a changelog) and deduplication,
against DuckDB's window functions over the same rows (the changelog folded by ``__weight``)."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

import laminardb
from laminardb.operators.plan_operator import PlanOperator
from laminardb.sql.exceptions import UnsupportedSqlError
from tests.over.harness import (
    Driver,
    assert_equals_duckdb,
    fold,
    make_batches,
    oracle,
    plan_for,
    rows,
    run_db,
    same,
)


def _over(select: str, window: str, where: str, inner_from: str = "s", inner_select: str = "*") -> str:
    return (f"SELECT {select} FROM (SELECT {inner_select}, ROW_NUMBER() OVER ({window}) AS rn "
            f"FROM {inner_from}) WHERE {where}")


# name → (laminardb query, DuckDB query). Flink orders NULLs lowest (first ascending, last
# descending) and breaks ties by arrival (``seq``), the later first for keep-last deduplication.
CASES = {
    "top3_with_rank": (
        _over("*", "PARTITION BY k ORDER BY v DESC", "rn <= 3"),
        _over("k, g, v, ts, seq, rn", "PARTITION BY k ORDER BY v DESC NULLS LAST, seq", "rn <= 3",
              inner_select="k, g, v, ts, seq")),
    "top2_two_keys_no_rank": (
        _over("k, g, v, seq", "PARTITION BY k, g ORDER BY v", "rn < 3"),
        _over("k, g, v, seq", "PARTITION BY k, g ORDER BY v NULLS FIRST, seq", "rn < 3")),
    "global_top5": (
        _over("v, seq, rn", "ORDER BY v DESC, ts", "rn <= 5"),
        _over("v, seq, rn", "ORDER BY v DESC NULLS LAST, ts NULLS FIRST, seq", "rn <= 5")),
    "expressions_and_filters": (
        "SELECT k, v, rn FROM (SELECT k, v, ts, ROW_NUMBER() OVER (PARTITION BY k % 3 ORDER BY v * 2 DESC NULLS "
        "FIRST, ts DESC) AS rn FROM s WHERE g IS NOT NULL) WHERE 4 >= rn AND (v > 3 OR v IS NULL)",
        "SELECT k, v, rn FROM (SELECT k, v, ts, ROW_NUMBER() OVER (PARTITION BY k % 3 ORDER BY v * 2 DESC NULLS "
        "FIRST, ts DESC, seq) AS rn FROM s WHERE g IS NOT NULL) WHERE 4 >= rn AND (v > 3 OR v IS NULL)"),
    "keep_last_row": (
        _over("k, v, ts, seq", "PARTITION BY k ORDER BY ts DESC", "rn <= 1"),
        _over("k, v, ts, seq", "PARTITION BY k ORDER BY ts DESC, seq DESC", "rn <= 1")),
    "over_a_window_aggregate": (
        "SELECT ws, k, c, rn FROM (SELECT window_start AS ws, k, count(*) AS c, ROW_NUMBER() OVER (PARTITION BY "
        "window_start ORDER BY count(*) DESC, k) AS rn FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(ts), INTERVAL '5' "
        "SECOND)) GROUP BY window_start, window_end, k) WHERE rn <= 2",
        "SELECT ws, k, c, rn FROM (SELECT ws, k, c, ROW_NUMBER() OVER (PARTITION BY ws ORDER BY c DESC, k NULLS "
        "FIRST) AS rn FROM (SELECT ts // 5000 * 5000 AS ws, k, count(*) AS c FROM s GROUP BY ALL)) WHERE rn <= 2"),
    "over_a_lag_stream": (  # Top-N over LAG's output, which comes in event-time order (ts, then arrival)
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY d DESC) AS rn FROM (SELECT k, ts, seq, "
        "v - LAG(v, 1, 0) OVER (PARTITION BY k ORDER BY ts) AS d FROM s) AS x) WHERE rn <= 2",
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY d DESC NULLS LAST, ts, seq) AS rn FROM "
        "(SELECT k, ts, seq, v - LAG(v, 1, 0) OVER (PARTITION BY k ORDER BY ts, seq) AS d FROM s) AS x) WHERE rn <= 2"),
    "over_an_interval_join": (
        "SELECT * FROM (SELECT a.k, a.seq AS sa, b.seq AS sb, ROW_NUMBER() OVER (PARTITION BY a.k ORDER BY "
        "a.v + b.v DESC, a.seq, b.seq) AS rn FROM s AS a JOIN s AS b ON a.k = b.k AND a.ts BETWEEN "
        "b.ts - INTERVAL '1' SECOND AND b.ts) WHERE rn <= 2",
        "SELECT * FROM (SELECT a.k, a.seq AS sa, b.seq AS sb, ROW_NUMBER() OVER (PARTITION BY a.k ORDER BY "
        "a.v + b.v DESC NULLS LAST, a.seq, b.seq) AS rn FROM s AS a JOIN s AS b ON a.k = b.k AND a.ts BETWEEN "
        "b.ts - 1000 AND b.ts) WHERE rn <= 2"),
}


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", list(CASES))
def test_top_n_equals_duckdb(name, seed):
    assert_equals_duckdb(*CASES[name], seed, changelog=True)  # Top-N is a changelog


def test_the_changelog_is_right_after_every_batch():
    """Folded after each batch, the output is DuckDB's Top-N of the rows so far; rows that leave
    the top and rows whose number changes are retracted."""
    query, duck_sql = CASES["top3_with_rank"]
    batches = make_batches(3, n=400)
    d = Driver(PlanOperator(plan_for(query)))
    for i, b in enumerate(batches):
        d.feed(b)
        same(d.so_far(), oracle(duck_sql, batches[: i + 1]))
    weights = pc.unique(d.so_far().column("__weight")).to_pylist()
    assert sorted(weights) == [-1, 1]


def test_rank_not_read_retracts_only_rows_that_leave():
    """Without rn downstream a row stays as emitted until it leaves the top: fewer changes."""
    with_rank, _ = CASES["top3_with_rank"]
    without = _over("k, g, v, ts, seq", "PARTITION BY k ORDER BY v DESC", "rn <= 3")
    batches = make_batches(4)
    a, db = run_db(with_rank, batches)
    db.close()
    b, db = run_db(without, batches)
    db.close()
    assert b.num_rows < a.num_rows
    assert rows(fold(b)) == rows(fold(a).select(["k", "g", "v", "ts", "seq"]))


# --------------------------------------------------------------------------- deduplication
KEEP_FIRST = _over("k, g, v, ts, seq", "PARTITION BY k, g ORDER BY ts", "rn = 1")
KEEP_FIRST_DUCK = _over("k, g, v, ts, seq", "PARTITION BY k, g ORDER BY ts, seq", "rn = 1")


@pytest.mark.parametrize("seed", [5, 6])
def test_keep_first_row_is_append_only_and_equals_duckdb(seed):
    batches = make_batches(seed)
    got, db = run_db(KEEP_FIRST, batches)
    assert db.metrics()["late_events_dropped"] == 0
    db.close()
    assert "__weight" not in got.column_names
    same(got, oracle(KEEP_FIRST_DUCK, batches))


def test_keep_first_row_waits_for_the_watermark():
    """A partition's row is emitted once the watermark has reached its time, never before, and
    each emitted row is final (append-only: the output so far is always part of the result)."""
    batches = make_batches(7)
    d = Driver(PlanOperator(plan_for(_over("*", "PARTITION BY k, g ORDER BY ts", "rn <= 1"))))
    final = rows(oracle(KEEP_FIRST_DUCK, batches))
    for b in batches:
        d.feed(b)
        so_far = d.so_far()
        assert set(rows(so_far.drop_columns(["rn"]))) <= set(final)
    for batch, wm in zip(d.out, d.emitted_at, strict=True):
        assert (batch.column("ts").to_numpy() <= wm).all()
        assert pc.all(pc.equal(batch.column("rn"), 1)).as_py()
    assert rows(d.finish().drop_columns(["rn"])) == final


def test_keep_first_row_drops_and_counts_late_rows():
    db = laminardb.open()
    db.execute("CREATE SOURCE e (k BIGINT, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)")
    db.execute("CREATE STREAM f AS SELECT k, ts FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) "
               "AS rn FROM e) WHERE rn = 1")
    sub = db.subscribe_stream("f")
    db.insert("e", [{"k": 1, "ts": 10_000}])  # watermark 8000 after this batch
    db.insert("e", [{"k": 2, "ts": 5_000}, {"k": 3, "ts": 9_000}, {"k": 1, "ts": 9_500}])
    assert db.metrics()["late_events_dropped"] == 1  # k=2 at 5000 < 8000
    db.finish()
    assert sorted(sub.to_arrow().to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "ts": 9_500}, {"k": 3, "ts": 9_000}]
    db.close()


# --------------------------------------------------------------------------- what is refused
@pytest.mark.parametrize("sql,fragment", [
    (_over("*", "PARTITION BY k ORDER BY v", "rn > 2"), "an unbounded row number is not supported yet"),
    (_over("*", "PARTITION BY k ORDER BY v", "rn = 2"), "equal to 2 is not supported yet"),
    (_over("*", "PARTITION BY k", "rn <= 2"), "needs ORDER BY"),
    (_over("*", "PARTITION BY k ORDER BY v ROWS BETWEEN 1 PRECEDING AND CURRENT ROW", "rn <= 2"), "no frame"),
    ("SELECT * FROM (SELECT *, PERCENT_RANK() OVER (PARTITION BY k ORDER BY v) AS rn FROM s) WHERE rn <= 2",
     "PERCENT_RANK() OVER (…) is not supported yet"),
    ("SELECT * FROM (SELECT *, LAG(v) OVER (PARTITION BY k ORDER BY ts) AS p FROM s) WHERE p > 2", "LAG"),
    ("SELECT * FROM (SELECT k, count(*) AS c, ROW_NUMBER() OVER (ORDER BY count(*) DESC) AS rn FROM s GROUP BY k) "
     "WHERE rn <= 3", "over a changelog"),
    ("SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v) AS rn FROM s", "only bounded in the query around it"),
])
def test_other_over_forms_are_refused_with_a_typed_error(sql, fragment):
    db = laminardb.open()
    db.execute("CREATE SOURCE s (k BIGINT, g VARCHAR, v BIGINT, ts BIGINT NOT NULL, seq BIGINT, "
               "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)")
    with pytest.raises(UnsupportedSqlError) as err:
        db.execute(f"CREATE STREAM x AS {sql}")
    assert err.value.code == "LDB-1002"
    assert fragment in str(err.value)
    db.close()


def test_explain_names_top_n_and_deduplication():
    db = laminardb.open()
    db.execute("CREATE SOURCE s (k BIGINT, g VARCHAR, v BIGINT, ts BIGINT NOT NULL, seq BIGINT, "
               "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)")
    top = "\n".join(db.execute(f"EXPLAIN CREATE STREAM t AS {CASES['top3_with_rank'][0]}").to_arrow().column(0).to_pylist())
    assert "TopN[n=3, changelog]" in top
    dedup = "\n".join(db.execute(f"EXPLAIN CREATE STREAM d AS {KEEP_FIRST}").to_arrow().column(0).to_pylist())
    assert "Deduplicate[keep first, append-only]" in dedup
    db.close()


@pytest.mark.parametrize("name", ["top3_with_rank", "top2_two_keys_no_rank", "keep_last_row"])
def test_compacting_the_store_keeps_the_tops(name, monkeypatch):
    """Rows that leave a top die in place; with compaction forced after every few dead rows the
    result (and a snapshot taken after compactions) stays right."""
    from laminardb.operators import topn

    monkeypatch.setattr(topn, "_COMPACT_MIN_DEAD", 4)
    query, duck_sql = CASES[name]
    batches = make_batches(8)
    d = Driver(PlanOperator(plan_for(query)))
    for b in batches[: len(batches) // 2]:
        d.feed(b)
    fresh = PlanOperator(plan_for(query))
    fresh.restore(d.op.snapshot().encode())
    d.op = fresh
    for b in batches[len(batches) // 2:]:
        d.feed(b)
    same(d.finish(), oracle(duck_sql, batches))


def test_ad_hoc_queries_refuse_over_windows():
    db = laminardb.open()
    db.execute("CREATE SOURCE e (k BIGINT, v BIGINT, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)")
    db.execute("CREATE MATERIALIZED VIEW m AS SELECT k, sum(v) AS total FROM e GROUP BY k")
    for sql in ("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY total DESC) AS rn FROM m) WHERE rn <= 2",
                "SELECT k, LAG(total) OVER (ORDER BY k) AS p FROM m"):
        with pytest.raises(UnsupportedSqlError, match="not in ad-hoc queries"):
            db.query(sql)
    db.close()


def test_global_keep_first_row_emits_one_row():
    batches = make_batches(14)
    got, db = run_db(_over("k, seq", "ORDER BY ts", "rn = 1"), batches)
    db.close()
    assert "__weight" not in got.column_names
    same(got, oracle(_over("k, seq", "ORDER BY ts, seq", "rn = 1"), batches))
