"""LAG / LEAD and aggregates OVER (PARTITION BY … ORDER BY <event time> [frame]) in a stream, against DuckDB's window
functions over the same rows (ties in time broken by arrival, ``seq``): append-only, rows taken
in event-time order as the watermark passes them; state survives snapshot → restore."""

from __future__ import annotations

import pytest

import laminardb
from laminardb.operators.plan_operator import PlanOperator
from laminardb.sql.exceptions import SqlError
from tests.over.harness import (
    SOURCE,
    Driver,
    assert_equals_duckdb,
    durable_resumed_output,
    make_batches,
    oracle,
    plan_for,
    resumed_output,
    rows,
    same,
)

W = "OVER (PARTITION BY k ORDER BY ts)"
WD = "OVER (PARTITION BY k ORDER BY ts, seq)"
CASES = {
    "lag": (f"SELECT k, v, ts, seq, LAG(v) {W} AS p FROM s",
            f"SELECT k, v, ts, seq, LAG(v) {WD} AS p FROM s"),
    "lag_offsets_defaults_expressions": (
        f"SELECT k, seq, LAG(g, 2, 'none') {W} AS g2, v - LAG(v, 1, 0) {W} AS dv, LAG(v * 10, 3, -1) {W} AS v3 "
        "FROM s WHERE seq % 7 <> 3",
        f"SELECT k, seq, LAG(g, 2, 'none') {WD} AS g2, v - LAG(v, 1, 0) {WD} AS dv, LAG(v * 10, 3, -1) {WD} AS v3 "
        "FROM s WHERE seq % 7 <> 3"),
    "lead_and_lag": (
        "SELECT k, g, seq, LEAD(v, 2) OVER (PARTITION BY k, g ORDER BY ts) AS n2, "
        "LAG(seq) OVER (PARTITION BY k, g ORDER BY ts) AS prev FROM s",
        "SELECT k, g, seq, LEAD(v, 2) OVER (PARTITION BY k, g ORDER BY ts, seq) AS n2, "
        "LAG(seq) OVER (PARTITION BY k, g ORDER BY ts, seq) AS prev FROM s"),
    "no_partition": ("SELECT seq, LAG(seq) OVER (ORDER BY ts) AS p, LEAD(seq, 1, -1) OVER (ORDER BY ts) AS n FROM s",
                     "SELECT seq, LAG(seq) OVER (ORDER BY ts, seq) AS p, LEAD(seq, 1, -1) OVER (ORDER BY ts, seq) AS n "
                     "FROM s"),
    "rows_frames": (
        f"SELECT k, seq, SUM(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS s3, "
        f"COUNT(*) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS c, "
        f"MIN(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS mn, "
        f"MAX(seq) OVER (PARTITION BY k ORDER BY ts ROWS 1 PRECEDING) AS mg, LAG(v) {W} AS p FROM s",
        f"SELECT k, seq, SUM(v) OVER (PARTITION BY k ORDER BY ts, seq ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS s3, "
        f"COUNT(*) OVER (PARTITION BY k ORDER BY ts, seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS c, "
        f"MIN(v) OVER (PARTITION BY k ORDER BY ts, seq ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS mn, "
        f"MAX(seq) OVER (PARTITION BY k ORDER BY ts, seq ROWS 1 PRECEDING) AS mg, LAG(v) {WD} AS p FROM s"),
    "range_running_totals": (
        "SELECT k, g, seq, AVG(v) OVER (PARTITION BY k, g ORDER BY ts) AS a, MAX(v) OVER (PARTITION BY k, g ORDER BY "
        "ts) AS mx, COUNT(v) OVER (PARTITION BY k, g ORDER BY ts) AS cv, SUM(v) OVER (PARTITION BY k, g ORDER BY ts "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS sv FROM s",
        "SELECT k, g, seq, AVG(v) OVER (PARTITION BY k, g ORDER BY ts) AS a, MAX(v) OVER (PARTITION BY k, g ORDER BY "
        "ts) AS mx, COUNT(v) OVER (PARTITION BY k, g ORDER BY ts) AS cv, SUM(v) OVER (PARTITION BY k, g ORDER BY ts, "
        "seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS sv FROM s"),
    "over_window_bars": (
        "SELECT k, ws, c, c - LAG(c, 1, 0) OVER (PARTITION BY k ORDER BY ws) AS dc FROM (SELECT window_start AS ws, "
        "k, count(*) AS c FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(ts), INTERVAL '5' SECOND)) "
        "GROUP BY window_start, window_end, k) AS bars",
        "SELECT k, ws, c, c - LAG(c, 1, 0) OVER (PARTITION BY k ORDER BY ws) AS dc FROM (SELECT ts // 5000 * 5000 "
        "AS ws, k, count(*) AS c FROM s GROUP BY ALL)"),
}


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", list(CASES))
def test_lag_lead_equal_duckdb(name, seed):
    assert_equals_duckdb(*CASES[name], seed, changelog=False)  # append-only


def test_rows_come_out_once_the_watermark_has_passed_them():
    query, duck_sql = CASES["lag"]
    batches = make_batches(3)
    d = Driver(PlanOperator(plan_for(query)))
    for b in batches:
        d.feed(b)
    d.finish()
    for batch, wm in zip(d.out, d.emitted_at, strict=True):
        assert (batch.column("ts").to_numpy() <= wm).all()
    same(d.so_far(), oracle(duck_sql, batches))


def test_late_rows_are_dropped_and_counted():
    db = laminardb.open()
    db.execute("CREATE SOURCE e (k BIGINT, v BIGINT, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)")
    db.execute("CREATE STREAM f AS SELECT k, v, LAG(v) OVER (PARTITION BY k ORDER BY ts) AS p FROM e")
    sub = db.subscribe_stream("f")
    db.insert("e", [{"k": 1, "v": 1, "ts": 10_000}])
    db.insert("e", [{"k": 1, "v": 2, "ts": 5_000}, {"k": 1, "v": 3, "ts": 9_000}])  # 5000 < watermark 8000
    db.finish()
    assert db.metrics()["late_events_dropped"] == 1
    assert sub.to_arrow().to_pylist() == [{"k": 1, "v": 3, "p": None}, {"k": 1, "v": 1, "p": 3}]
    db.close()


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("name", ["lag_offsets_defaults_expressions", "lead_and_lag", "no_partition", "rows_frames",
                                  "range_running_totals"])
def test_restore_mid_stream_gives_the_same_output(name, split):
    query, duck_sql = CASES[name]
    batches = make_batches(11)
    same(resumed_output(query, batches, split=split), oracle(duck_sql, batches))


def test_a_durable_database_resumes_from_its_checkpoint(tmp_path):
    query, duck_sql = CASES["lead_and_lag"]
    batches = make_batches(21)
    assert rows(durable_resumed_output(query, batches, tmp_path)) == rows(oracle(duck_sql, batches))


@pytest.mark.parametrize("sql,fragment", [
    ("SELECT k, LAG(v) OVER (PARTITION BY k ORDER BY v) AS p FROM s", "must name an event-time column"),
    ("SELECT k, LAG(v) OVER (PARTITION BY k ORDER BY ts DESC) AS p FROM s", "ascending"),
    ("SELECT k, LAG(v) OVER (PARTITION BY k ORDER BY ts) AS p, LEAD(v) OVER (ORDER BY ts) AS n FROM s",
     "must be the same window"),
    ("SELECT a.k, LAG(a.v) OVER (PARTITION BY a.k ORDER BY a.ts) AS p FROM s AS a JOIN s AS b ON a.k = b.k",
     "over a join is not supported yet"),
    ("SELECT k, count(*), LAG(k) OVER (ORDER BY k) FROM s GROUP BY k", "with GROUP BY or aggregates"),
    ("SELECT k, LAG(v, k) OVER (PARTITION BY k ORDER BY ts) AS p FROM s", "whole number literal"),
    ("SELECT k, LAG(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS p FROM s",
     "no frame"),
    ("SELECT k, LAG(g, 1, 0) OVER (PARTITION BY k ORDER BY ts) AS p FROM s", "CAST the default"),
    ("SELECT k, RANK() OVER (PARTITION BY k ORDER BY ts) AS r FROM s", "RANK and other window functions are not"),
    ("SELECT k, SUM(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '1' SECOND PRECEDING AND CURRENT "
     "ROW) AS r FROM s", "the frames supported are"),
    ("SELECT k, SUM(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS r FROM s",
     "the frames supported are"),
    ("SELECT k, SUM(g) OVER (PARTITION BY k ORDER BY ts) AS r FROM s", "needs a numeric argument"),
    ("SELECT k, COUNT(DISTINCT v) OVER (PARTITION BY k ORDER BY ts) AS r FROM s", "DISTINCT"),
    ("SELECT k, SUM(v) OVER (PARTITION BY k ORDER BY ts) AS r, LEAD(v) OVER (PARTITION BY k ORDER BY ts) AS n FROM s",
     "LEAD beside a RANGE frame"),
])
def test_other_forms_are_refused_with_a_typed_error(sql, fragment):
    db = laminardb.open()
    db.execute(SOURCE)
    with pytest.raises(SqlError) as err:
        db.execute(f"CREATE STREAM x AS {sql}")
    assert err.value.code in ("LDB-1002", "LDB-1005")
    assert fragment in str(err.value)
    db.close()


@pytest.mark.parametrize("name", ["lag_offsets_defaults_expressions", "lead_and_lag", "rows_frames"])
def test_compacting_the_tails_keeps_the_values(name, monkeypatch):
    from laminardb.operators import topn

    monkeypatch.setattr(topn, "_COMPACT_MIN_DEAD", 4)
    query, duck_sql = CASES[name]
    batches = make_batches(9)
    d = Driver(PlanOperator(plan_for(query)))
    for b in batches:
        d.feed(b)
    same(d.finish(), oracle(duck_sql, batches))
