"""The embedded Connection's API: subscriptions, insert kinds, timestamp event time, variables,
catalog statements, quoted identifiers, cascades, materialized views, metrics, lifecycle."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pandas as pd
import pyarrow as pa
import pytest
from oracle import assert_same_rows

import laminardb

BARS = ("CREATE STREAM bars AS SELECT sym, window_start, window_end, count(*) AS n, sum(qty) AS q "
        "FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)")
ROWS = [{"ts": 100, "sym": "A", "price": 1.0, "qty": 1}, {"ts": 700, "sym": "B", "price": 2.0, "qty": 2},
        {"ts": 1500, "sym": "A", "price": 3.0, "qty": 3}, {"ts": 4200, "sym": "A", "price": 4.0, "qty": 4}]
BARS_ALL = [
    {"sym": "A", "window_start": 0, "window_end": 1000, "n": 1, "q": 1},
    {"sym": "B", "window_start": 0, "window_end": 1000, "n": 1, "q": 2},
    {"sym": "A", "window_start": 1000, "window_end": 2000, "n": 1, "q": 3},
    {"sym": "A", "window_start": 4000, "window_end": 5000, "n": 1, "q": 4},
]


# ------------------------------------------------------------------ subscriptions
def test_subscription_sees_only_rows_after_subscribing(trades):
    trades.execute("CREATE STREAM raw AS SELECT ts, sym, qty FROM trades")
    trades.insert("trades", ROWS[:2])
    sub = trades.subscribe_stream("raw")
    trades.insert("trades", ROWS[2:])
    assert sub.to_arrow().to_pylist() == [{"ts": r["ts"], "sym": r["sym"], "qty": r["qty"]} for r in ROWS[2:]]


def test_window_rows_arrive_when_the_watermark_passes(trades):
    trades.execute(BARS)
    sub = trades.subscribe_stream("bars")
    trades.insert("trades", ROWS[:2])        # wm = 700 - 1000
    assert sub.try_next() is None
    trades.insert("trades", ROWS[2:3])       # wm = 500: [0, 1000) still open
    assert sub.try_next() is None
    trades.insert("trades", ROWS[3:])        # wm = 3200: [0,1000) and [1000,2000) close
    got = []
    while (b := sub.try_next()) is not None:
        got.extend(b.to_pylist())
    assert_same_rows(pa.Table.from_pylist(got), BARS_ALL[:3])
    assert trades.metrics()["watermarks"]["trades"] == 3200
    trades.finish()
    assert_same_rows(sub.to_arrow(), BARS_ALL)


def test_next_timeout_is_bounded_and_returns_waiting_batches(trades):
    trades.execute("CREATE STREAM raw AS SELECT ts, sym FROM trades")
    sub = trades.subscribe_stream("raw")
    t0 = time.monotonic()
    assert sub.next_timeout(150) is None
    waited = time.monotonic() - t0
    assert 0.1 <= waited < 2.0
    trades.insert("trades", ROWS[:1])
    t0 = time.monotonic()
    b = sub.next_timeout(5000)
    assert time.monotonic() - t0 < 1.0
    assert b.to_pylist() == [{"ts": 100, "sym": "A"}]
    assert sub.try_next() is None


def test_next_timeout_wakes_on_insert_from_another_thread(trades):
    trades.execute("CREATE STREAM raw AS SELECT ts, sym FROM trades")
    sub = trades.subscribe_stream("raw")
    timer = threading.Timer(0.2, lambda: trades.insert("trades", ROWS[:1]))
    timer.start()
    b = sub.next_timeout(5000)
    timer.join()
    assert b is not None and b.num_rows == 1


def test_iteration_ends_after_finish(trades):
    trades.execute(BARS)
    sub = trades.subscribe_stream("bars")
    trades.insert("trades", ROWS)
    trades.finish()
    out = []
    done = threading.Event()

    def consume():
        for batch in sub:
            out.extend(batch.to_pylist())
        done.set()

    th = threading.Thread(target=consume, daemon=True)
    th.start()
    assert done.wait(10), "iteration did not end after finish()"
    assert_same_rows(pa.Table.from_pylist(out), BARS_ALL)


def test_cancel_stops_delivery_and_further_reads_raise(trades):
    trades.execute("CREATE STREAM raw AS SELECT ts, sym FROM trades")
    sub = trades.subscribe_stream("raw")
    other = trades.subscribe_stream("raw")
    trades.insert("trades", ROWS[:1])
    sub.cancel()
    trades.insert("trades", ROWS[1:])
    with pytest.raises(laminardb.LaminarError):
        sub.try_next()
    assert sub.to_arrow().num_rows == 1          # nothing delivered after cancel
    assert other.to_arrow().num_rows == len(ROWS)  # other subscribers unaffected


def test_subscription_schema(trades):
    trades.execute(BARS)
    sub = trades.subscribe_stream("bars")
    assert sub.schema.names == ["sym", "window_start", "window_end", "n", "q"]
    assert sub.schema.field("n").type == pa.int64()
    assert sub.schema.field("window_start").type == pa.int64()


# ------------------------------------------------------------------ insert kinds
@pytest.mark.parametrize("kind", ["dict", "list", "record_batch", "table", "pandas", "polars"])
def test_insert_kinds_give_identical_results(trades, kind):
    trades.execute(BARS)
    sub = trades.subscribe_stream("bars")
    schema = pa.schema([("ts", pa.int64()), ("sym", pa.string()), ("price", pa.float64()), ("qty", pa.int64())])
    if kind == "dict":
        for r in ROWS:
            assert trades.insert("trades", r) == 1
    else:
        if kind == "list":
            data = ROWS
        elif kind == "record_batch":
            data = pa.RecordBatch.from_pylist(ROWS, schema=schema)
        elif kind == "table":
            data = pa.Table.from_pylist(ROWS, schema=schema)
        elif kind == "pandas":
            data = pd.DataFrame(ROWS)
        else:
            pl = pytest.importorskip("polars")
            data = pl.DataFrame(ROWS)
            try:
                trades.insert("trades", data)
            except laminardb.LaminarError:
                pytest.skip("polars input is not among the documented input kinds")
            trades.finish()
            assert_same_rows(sub.to_arrow(), BARS_ALL)
            return
        assert trades.insert("trades", data) == len(ROWS)
    trades.finish()
    assert_same_rows(sub.to_arrow(), BARS_ALL)
    assert trades.metrics()["events_ingested"] == len(ROWS)


def test_one_insert_call_is_one_batch_for_lateness(trades):
    """Rows of one batch are judged against the watermark before the batch: a row far behind a
    newer row of the same batch is not late."""
    trades.execute(BARS)
    sub = trades.subscribe_stream("bars")
    trades.insert("trades", [{"ts": 9000, "sym": "A", "price": 1.0, "qty": 1},
                             {"ts": 100, "sym": "A", "price": 1.0, "qty": 1}])
    trades.insert("trades", {"ts": 200, "sym": "A", "price": 1.0, "qty": 1})  # now late: wm = 8000
    trades.finish()
    assert_same_rows(sub.to_arrow(), [
        {"sym": "A", "window_start": 0, "window_end": 1000, "n": 1, "q": 1},
        {"sym": "A", "window_start": 9000, "window_end": 10000, "n": 1, "q": 1}])
    assert trades.metrics()["late_events_dropped"] == 1


# ------------------------------------------------------------------ timestamp event time
@pytest.mark.parametrize("precision,unit", [(3, "ms"), (6, "us")])
def test_timestamp_event_time(db, precision, unit):
    db.execute(f"CREATE SOURCE ev (ts TIMESTAMP({precision}) NOT NULL, k VARCHAR, v BIGINT, "
               "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)")
    db.execute("CREATE STREAM w AS SELECT k, window_start, window_end, count(*) AS n, sum(v) AS s "
               "FROM ev GROUP BY k, tumble(ts, INTERVAL '10' SECOND)")
    sub = db.subscribe_stream("w")
    base = dt.datetime(2024, 3, 1, 12, 0, 0)
    t = pa.timestamp(unit)
    rows = [(base + dt.timedelta(seconds=1, microseconds=500), "a", 1),
            (base + dt.timedelta(seconds=9, milliseconds=999), "a", 2),
            (base + dt.timedelta(seconds=10), "a", 4),
            (base + dt.timedelta(seconds=25), "b", 8)]
    db.insert("ev", pa.table({"ts": pa.array([r[0] for r in rows], t), "k": [r[1] for r in rows],
                              "v": [r[2] for r in rows]}))
    db.finish()
    got = sub.to_arrow()
    assert pa.types.is_timestamp(got.schema.field("window_start").type)
    res = sorted((r["k"], r["window_start"], r["window_end"], r["n"], r["s"]) for r in got.to_pylist())
    s = dt.timedelta(seconds=10)
    assert res == [("a", base, base + s, 2, 3), ("a", base + s, base + 2 * s, 1, 4),
                   ("b", base + 2 * s, base + 3 * s, 1, 8)]


# ------------------------------------------------------------------ variables, catalog, identifiers
def test_variable_substitution():
    db = laminardb.open(config={"vars": {"DELAY": "2", "SIZE": "500"}})
    db.execute("CREATE SOURCE t (ts BIGINT NOT NULL, k VARCHAR, WATERMARK FOR ts AS ts - INTERVAL '${DELAY}' SECOND)")
    db.execute("CREATE STREAM s AS SELECT k, window_start, count(*) AS n FROM t "
               "GROUP BY k, tumble(ts, INTERVAL '${SIZE}' MILLISECOND)")
    sub = db.subscribe_stream("s")
    db.insert("t", [{"ts": 100, "k": "a"}, {"ts": 600, "k": "a"}])
    db.insert("t", [{"ts": 2400, "k": "a"}])   # wm = 400: [0,500) open with delay 2 s... closes only at 500
    assert sub.to_arrow().num_rows == 0
    db.insert("t", [{"ts": 2500, "k": "a"}])   # wm = 500 → [0, 500) closes
    assert sub.to_arrow().to_pylist() == [{"k": "a", "window_start": 0, "n": 1}]


def test_show_describe_explain_drop(trades):
    trades.execute(BARS)
    trades.execute("CREATE MATERIALIZED VIEW totals AS SELECT sym, count(*) AS n FROM trades GROUP BY sym")
    assert trades.execute("SHOW SOURCES").to_arrow()["name"].to_pylist() == ["trades"]
    assert trades.execute("SHOW STREAMS").to_arrow()["name"].to_pylist() == ["bars"]
    assert trades.execute("SHOW MATERIALIZED VIEWS").to_arrow()["name"].to_pylist() == ["totals"]
    d = trades.execute("DESCRIBE trades").to_arrow().to_pylist()
    assert [(r["column"], r["type"], r["nullable"], r["event_time"]) for r in d] == [
        ("ts", "BIGINT", False, True), ("sym", "VARCHAR", True, False),
        ("price", "DOUBLE", True, False), ("qty", "BIGINT", True, False)]
    d = trades.execute("DESCRIBE bars").to_arrow()
    assert d["column"].to_pylist() == ["sym", "window_start", "window_end", "n", "q"]
    plan = "\n".join(trades.execute("EXPLAIN SELECT sym, count(*) FROM trades GROUP BY sym").to_arrow()["plan"].to_pylist())
    assert "trades" in plan and "count" in plan.lower()
    plan = "\n".join(trades.execute(f"EXPLAIN {BARS}").to_arrow()["plan"].to_pylist())
    assert "tumble" in plan.lower() or "window" in plan.lower()
    trades.execute("DROP STREAM bars")
    assert trades.execute("SHOW STREAMS").to_arrow().num_rows == 0
    with pytest.raises(laminardb.LaminarError) as e:
        trades.subscribe_stream("bars")
    assert e.value.code == "LDB-1003"
    trades.execute("DROP MATERIALIZED VIEW totals")
    with pytest.raises(laminardb.LaminarError):
        trades.query("SELECT * FROM totals")
    trades.insert("trades", ROWS)   # the source still works after the drops


def test_drop_source_with_dependents_is_refused(trades):
    trades.execute(BARS)
    with pytest.raises(laminardb.LaminarError):
        trades.execute("DROP SOURCE trades")
    trades.execute("DROP STREAM bars")
    trades.execute("DROP SOURCE trades")
    assert trades.execute("SHOW SOURCES").to_arrow().num_rows == 0


def test_quoted_identifiers(db):
    db.execute('CREATE SOURCE "My Src" ("event ts" BIGINT NOT NULL, `Key` VARCHAR, "v" BIGINT, '
               'WATERMARK FOR "event ts" AS "event ts" - INTERVAL \'0\' SECOND)')
    db.execute('CREATE STREAM "Out Stream" AS SELECT `Key`, "v" * 2 AS "Doubled", window_start '
               'FROM "My Src" GROUP BY `Key`, "v", tumble("event ts", INTERVAL \'1\' SECOND)')
    sub = db.subscribe_stream("Out Stream")
    db.insert("My Src", [{"event ts": 5, "Key": "k", "v": 21}])
    db.finish()
    assert sub.to_arrow().to_pylist() == [{"Key": "k", "Doubled": 42, "window_start": 0}]


# ------------------------------------------------------------------ cascades and views
def test_cascading_window_over_window(trades):
    trades.execute("CREATE STREAM bars AS SELECT sym, window_end AS bar_end, count(*) AS n, sum(qty) AS q "
                   "FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)")
    trades.execute("CREATE STREAM bars5 AS SELECT window_start, window_end, sum(n) AS n, sum(q) AS q FROM bars "
                   "GROUP BY tumble(bar_end, INTERVAL '5' SECOND)")  # a stream's event time is its window end
    sub = trades.subscribe_stream("bars5")
    trades.insert("trades", ROWS)
    trades.insert("trades", {"ts": 12000, "sym": "C", "price": 0.0, "qty": 100})
    trades.finish()
    # bar ends 1000, 1000, 2000 | 5000 | 13000
    assert_same_rows(sub.to_arrow(), [{"window_start": 0, "window_end": 5000, "n": 3, "q": 6},
                                      {"window_start": 5000, "window_end": 10000, "n": 1, "q": 4},
                                      {"window_start": 10000, "window_end": 15000, "n": 1, "q": 100}])


def test_cascade_over_emit_changes_carries_weight(trades):
    trades.execute("CREATE STREAM per_sym AS SELECT sym, sum(qty) AS q FROM trades GROUP BY sym EMIT CHANGES")
    trades.execute("CREATE STREAM big AS SELECT sym, q * 10 AS q10 FROM per_sym WHERE q > 1")
    sub = trades.subscribe_stream("big")
    trades.insert("trades", ROWS[:2])   # A:1, B:2
    trades.insert("trades", ROWS[2:])   # A:1→4→8
    got = sub.to_arrow()
    assert "__weight" in got.column_names
    net = {}
    for r in got.to_pylist():
        net[(r["sym"], r["q10"])] = net.get((r["sym"], r["q10"]), 0) + r["__weight"]
    assert {k: w for k, w in net.items() if w} == {("B", 20): 1, ("A", 80): 1}


def test_materialized_view_query(trades):
    trades.execute("CREATE MATERIALIZED VIEW totals AS SELECT sym, count(*) AS n, sum(qty) AS q FROM trades GROUP BY sym")
    trades.insert("trades", ROWS[:2])
    assert trades.query("SELECT * FROM totals ORDER BY sym").to_arrow().to_pylist() == [
        {"sym": "A", "n": 1, "q": 1}, {"sym": "B", "n": 1, "q": 2}]
    trades.insert("trades", ROWS[2:])
    r = trades.query("SELECT sym, q FROM totals WHERE n > 1 ORDER BY q DESC LIMIT 1")
    assert r.to_arrow().to_pylist() == [{"sym": "A", "q": 8}]
    assert r.to_pandas().to_dict("records") == [{"sym": "A", "q": 8}]
    assert r.to_polars().to_dicts() == [{"sym": "A", "q": 8}]
    assert trades.query("SELECT count(*) AS c FROM totals").to_arrow().to_pylist() == [{"c": 2}]


def test_windowed_materialized_view_holds_closed_windows(trades):
    trades.execute("CREATE MATERIALIZED VIEW mv AS SELECT sym, window_start, count(*) AS n FROM trades "
                   "GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)")
    trades.insert("trades", ROWS)
    trades.finish()
    got = trades.query("SELECT * FROM mv ORDER BY window_start, sym").to_arrow().to_pylist()
    assert got == [{"sym": "A", "window_start": 0, "n": 1}, {"sym": "B", "window_start": 0, "n": 1},
                   {"sym": "A", "window_start": 1000, "n": 1}, {"sym": "A", "window_start": 4000, "n": 1}]


# ------------------------------------------------------------------ metrics and lifecycle
def test_metrics_keys_and_counts(trades):
    trades.execute(BARS)
    m = trades.metrics()
    assert {"events_ingested", "events_emitted", "late_events_dropped", "late_events_routed", "watermarks"} <= set(m)
    trades.insert("trades", ROWS)
    trades.insert("trades", {"ts": 10, "sym": "Z", "price": 1.0, "qty": 1})   # wm 3200: late
    m = trades.metrics()
    assert m["events_ingested"] == 5
    assert m["late_events_dropped"] == 1
    assert m["watermarks"]["trades"] == 3200
    assert m["events_emitted"] == 3


def test_context_manager_closes():
    with laminardb.open() as db:
        db.execute("CREATE SOURCE t (ts BIGINT NOT NULL, WATERMARK FOR ts AS ts)")
        db.execute("CREATE STREAM s AS SELECT ts FROM t")
        sub = db.subscribe_stream("s")
        db.insert("t", {"ts": 1})
    with pytest.raises(laminardb.LaminarError):
        db.insert("t", {"ts": 2})
    assert sub.to_arrow().num_rows == 1
    assert list(sub) == [] or True  # iteration must not block after close
    assert sub.ended
