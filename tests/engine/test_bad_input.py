"""Bad SQL and bad rows raise typed ``LaminarError``s; the engine keeps running and loses no valid row."""

from __future__ import annotations

import pyarrow as pa
import pytest
from oracle import assert_same_rows

import laminardb

SOURCE = ("CREATE SOURCE trades (ts BIGINT NOT NULL, sym VARCHAR, price DOUBLE, qty BIGINT, "
          "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)")
BARS = ("CREATE STREAM bars AS SELECT sym, window_start, count(*) AS n, sum(qty) AS q, sum(price) AS p "
        "FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)")
TOTALS = "CREATE STREAM totals AS SELECT sym, count(*) AS n, sum(qty) AS q FROM trades GROUP BY sym"

BAD_SQL = [
    ("SELEC sym FROM trades", "LDB-1001"),
    ("CREATE STREAM s AS SELECT sym FROM trades\nWHERE qty >", "LDB-1001"),
    ("CREATE STREAM s AS SELECT sym FROM trades ORDER BY sym", "LDB-1002"),
    ("CREATE STREAM s AS SELECT a.sym FROM trades a JOIN trades b ON a.price < b.price", "LDB-1002"),
    ("CREATE STREAM s AS SELECT * FROM no_such_source", "LDB-1003"),
    ("DROP STREAM no_such_stream", "LDB-1003"),
    ("CREATE STREAM s AS SELECT no_such_col FROM trades", "LDB-1008"),
    ("CREATE STREAM s AS SELECT sym FROM trades WHERE no_such_col > 1", "LDB-1008"),
    ("CREATE STREAM s AS SELECT sym, qty, count(*) AS n FROM trades GROUP BY sym", "LDB-1007"),
    ("CREATE STREAM s AS SELECT sym, window_start, price FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)",
     "LDB-1007"),
]


def _run(bad_inserts: bool, bad_sql: bool):
    """Feed good batches (and, optionally, bad ones in between); return the two streams' outputs."""
    db = laminardb.open()
    db.execute(SOURCE)
    db.execute(BARS)
    db.execute(TOTALS)
    bars, totals = db.subscribe_stream("bars"), db.subscribe_stream("totals")
    good = [
        [{"ts": 100, "sym": "A", "price": 1.5, "qty": 1}, {"ts": 300, "sym": "B", "price": 2.0, "qty": 2}],
        [{"ts": 1200, "sym": "A", "price": 0.5, "qty": 3}],
        [{"ts": 2500, "sym": None, "price": None, "qty": None}, {"ts": 900, "sym": "B", "price": 1.0, "qty": 4}],
        [{"ts": 5000, "sym": "A", "price": 3.0, "qty": 5}],
    ]
    bad = [
        ({"ts": None, "sym": "A", "price": 1.0, "qty": 1}, "LDB-2002"),
        ([{"ts": 1, "sym": "A"}, {"ts": None, "sym": "B"}], "LDB-2002"),   # whole batch refused
        ({"ts": 1, "sym": "A", "bogus": 3}, "LDB-2001"),
        ([{"ts": 1, "sym": "A"}, {"ts": 2, "SYM": "B"}], "LDB-2001"),  # two spellings of sym: was a raw KeyError
        (pa.table({"ts": [1], "sym": [1.5]}).cast(pa.schema([("ts", pa.int64()), ("sym", pa.float64())])), None),
        ({"ts": "not a number", "sym": "A"}, "LDB-2003"),
        ({"ts": 1, "qty": "x"}, "LDB-2003"),
    ]
    errors = []
    for i, batch in enumerate(good):
        if bad_sql:
            sql, code = BAD_SQL[i % len(BAD_SQL)]
            with pytest.raises(laminardb.LaminarError) as e:
                db.execute(sql)
            errors.append((sql, e.value.code, code))
        if bad_inserts:
            for data, code in bad:
                try:
                    db.insert("trades", data)
                except laminardb.LaminarError as exc:
                    errors.append((repr(data), exc.code, code))
                else:
                    if code is not None:
                        errors.append((repr(data), None, code))
        db.insert("trades", batch)
    db.finish()
    return bars.to_arrow(), totals.to_arrow(), db.metrics(), errors


def test_no_valid_rows_lost_around_bad_inserts_and_bad_sql():
    ref_bars, ref_totals, ref_m, _ = _run(False, False)
    assert ref_bars.num_rows > 0
    bars, totals, m, errors = _run(True, True)
    wrong = [(what, got, want) for what, got, want in errors if want is not None and got != want]
    assert not wrong, f"wrong error codes (input, got, expected): {wrong}"
    assert_same_rows(bars, ref_bars)
    assert_same_rows(totals, ref_totals)
    assert m["watermarks"] == ref_m["watermarks"]


@pytest.mark.parametrize("sql,code", BAD_SQL, ids=[c + ":" + s[:40] for s, c in BAD_SQL])
def test_bad_sql_codes(sql, code):
    db = laminardb.open()
    db.execute(SOURCE)
    with pytest.raises(laminardb.LaminarError) as e:
        db.execute(sql)
    assert e.value.code == code, str(e.value)
    # the catalog is unchanged and the engine still works
    assert db.execute("SHOW STREAMS").to_arrow().num_rows == 0
    db.execute(TOTALS)
    sub = db.subscribe_stream("totals")
    db.insert("trades", {"ts": 1, "sym": "A", "price": 1.0, "qty": 2})
    assert sub.to_arrow().to_pylist() == [{"sym": "A", "n": 1, "q": 2, "__weight": 1}]


def test_syntax_error_reports_line_and_column():
    db = laminardb.open()
    db.execute(SOURCE)
    with pytest.raises(laminardb.LaminarError) as e:
        db.execute("SHOW STREAMS;\nCREATE STREAM s AS SELECT sym FROM trades WHERE qty >")
    assert e.value.code == "LDB-1001"
    assert "line 2, column 53" in str(e.value), str(e.value)


def test_syntax_error_line_in_multiline_create_stream():
    db = laminardb.open()
    db.execute(SOURCE)
    with pytest.raises(laminardb.LaminarError) as e:
        db.execute("CREATE STREAM s AS\nSELECT sym\nFROM trades\nWHERE qty >")
    assert e.value.code == "LDB-1001"
    assert "line 4, column 11" in str(e.value), str(e.value)


def test_unknown_objects_in_api_calls():
    db = laminardb.open()
    db.execute(SOURCE)
    for call in (lambda: db.insert("nope", {"ts": 1}), lambda: db.subscribe_stream("nope"),
                 lambda: db.query("SELECT * FROM nope"), lambda: db.execute("DESCRIBE nope")):
        with pytest.raises(laminardb.LaminarError) as e:
            call()
        assert e.value.code == "LDB-1003"


def test_duplicate_names_are_refused_and_the_original_kept():
    db = laminardb.open()
    db.execute(SOURCE)
    db.execute(TOTALS)
    with pytest.raises(laminardb.LaminarError):
        db.execute("CREATE STREAM totals AS SELECT sym FROM trades")
    with pytest.raises(laminardb.LaminarError):
        db.execute(SOURCE)
    sub = db.subscribe_stream("totals")
    db.insert("trades", {"ts": 1, "sym": "A", "price": 1.0, "qty": 2})
    assert sub.to_arrow().column_names == ["sym", "n", "q", "__weight"]


def test_null_in_not_null_refuses_whole_batch_and_does_not_move_watermark():
    db = laminardb.open()
    db.execute(SOURCE)
    db.execute(BARS)
    sub = db.subscribe_stream("bars")
    with pytest.raises(laminardb.LaminarError) as e:
        db.insert("trades", [{"ts": 99999, "sym": "A", "price": 1.0, "qty": 1}, {"ts": None, "sym": "A"}])
    assert e.value.code == "LDB-2002"
    assert db.metrics()["events_ingested"] == 0
    db.insert("trades", {"ts": 10, "sym": "A", "price": 1.0, "qty": 1})   # not late: the bad batch left no trace
    db.finish()
    assert sub.to_arrow().to_pylist() == [{"sym": "A", "window_start": 0, "n": 1, "q": 1, "p": 1.0}]
    assert db.metrics()["late_events_dropped"] == 0


def test_missing_nullable_columns_are_null():
    db = laminardb.open()
    db.execute(SOURCE)
    db.execute("CREATE STREAM raw AS SELECT * FROM trades")
    sub = db.subscribe_stream("raw")
    db.insert("trades", [{"ts": 5}, {"ts": 6, "sym": "B", "qty": 2}])
    assert sub.to_arrow().to_pylist() == [{"ts": 5, "sym": None, "price": None, "qty": None},
                                          {"ts": 6, "sym": "B", "price": None, "qty": 2}]


def test_integer_strings_and_ints_convert_losslessly():
    db = laminardb.open()
    db.execute(SOURCE)
    db.execute("CREATE STREAM raw AS SELECT * FROM trades")
    sub = db.subscribe_stream("raw")
    db.insert("trades", pa.table({"ts": pa.array([1], pa.int32()), "price": pa.array([2], pa.int64()),
                                  "qty": pa.array(["7"])}))
    assert sub.to_arrow().to_pylist() == [{"ts": 1, "sym": None, "price": 2.0, "qty": 7}]


def test_lossy_float_to_bigint_is_a_conversion_error():
    db = laminardb.open()
    db.execute(SOURCE)
    db.execute("CREATE STREAM raw AS SELECT ts, qty FROM trades")
    sub = db.subscribe_stream("raw")
    with pytest.raises(laminardb.LaminarError) as e:
        db.insert("trades", {"ts": 1, "qty": 1.5})
    assert e.value.code == "LDB-2003"
    assert sub.to_arrow().num_rows == 0
