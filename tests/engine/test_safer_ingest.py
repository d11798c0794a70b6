"""Safer ingest: implausible event times refused with the likely unit, ``max_future``, ISO-8601
text with zones and aware datetimes as UTC (the CLI's conversion), and ``on_error`` —
'raise' names the row, 'skip' returns an ``InsertResult``, 'dead_letter' fills
``<source>__rejected``; a hypothesis test checks that bad rows never change the good rows'
results (oracles: the engine over the good rows alone, and DuckDB)."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle import ENGINE_SETTINGS, SOURCE_DDL, agg_select, assert_same_rows, expected_windowed
from strategies import scenarios

import laminardb
from laminardb.connectors import read_file
from laminardb.engine.insert_batch import InsertResult

UTC = dt.UTC
T0 = 1_704_103_200_000  # 2024-01-01T10:00:00Z in epoch ms
SRC = ("CREATE SOURCE t (ts BIGINT NOT NULL, k VARCHAR, v DOUBLE, "
       "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)")
BARS = ("CREATE STREAM bars AS SELECT k, window_start, count(*) AS n FROM t "
        "GROUP BY k, tumble(ts, INTERVAL '1' SECOND)")


@pytest.fixture
def t(db):
    db.execute(SRC)
    db.execute(BARS)
    db.execute("CREATE STREAM raw AS SELECT * FROM t")
    return db


# ------------------------------------------------------------------ the event-time guard
@pytest.mark.parametrize("value,unit", [(T0 * 1000, "microseconds: divide by 1000"),
                                        (T0 * 1_000_000, "nanoseconds: divide by 1,000,000")])
def test_wrong_unit_event_time_is_refused_and_later_rows_are_not_late(t, value, unit):
    bars = t.subscribe_stream("bars")
    t.insert("t", {"ts": T0, "k": "a", "v": 1.0})
    with pytest.raises(laminardb.LaminarError) as e:
        t.insert("t", [{"ts": T0 + 10, "k": "a", "v": 1.0}, {"ts": value, "k": "b", "v": 1.0}])
    assert e.value.code == "LDB-2004"
    assert "row 1:" in str(e.value) and f"looks like epoch {unit}" in str(e.value)
    assert "event_time_range" in str(e.value)
    r = t.insert("t", [{"ts": value, "k": "b", "v": 1.0}, {"ts": T0 + 1500, "k": "a", "v": 2.0}], on_error="skip")
    assert (int(r), r.rejected) == (1, 1)
    assert t.metrics()["watermarks"]["t"] == T0 + 500, "the watermark never saw the refused row"
    t.insert("t", {"ts": T0 + 900, "k": "a", "v": 3.0})  # valid and not late
    t.finish()
    assert t.metrics()["late_events_dropped"] == 0
    got = bars.to_arrow().to_pylist()  # no OverflowError: no year-56-million window
    assert sorted((r["window_start"], r["n"]) for r in got) == [(T0, 2), (T0 + 1000, 1)]


@pytest.mark.parametrize("precision", [3, 6])
def test_timestamp_columns_refuse_wrong_units_with_the_likely_unit(db, precision):
    db.execute(f"CREATE SOURCE e (ts TIMESTAMP({precision}) NOT NULL, WATERMARK FOR ts AS ts)")
    rows = [{"ts": T0}, {"ts": T0 * 1000}, {"ts": T0 * 1_000_000}, {"ts": T0 / 1000 + 0.25},
            {"ts": dt.datetime(1850, 1, 1)}]
    r = db.insert("e", rows, on_error="skip")
    assert int(r) == 1
    why = {x["index"]: x["error"] for x in r.rejected_rows.to_pylist()}
    assert "epoch microseconds" in why[1] and "epoch nanoseconds" in why[2]
    assert "epoch seconds: multiply by 1000" in why[3]
    assert "outside the event-time range 1900-01-01/3000-01-01" in why[4]
    assert db.metrics()["watermarks"]["e"] == T0 * (1 if precision == 3 else 1000)


def test_event_time_range_option_catches_epoch_seconds_or_is_off(db):
    db.execute("CREATE SOURCE s (ts BIGINT NOT NULL, WATERMARK FOR ts AS ts) "
               "WITH (event_time_range = '2000-01-01/2100-01-01T00:00:00Z')")
    r = db.insert("s", [{"ts": T0 // 1000}, {"ts": T0}], on_error="skip")
    assert int(r) == 1
    assert "looks like epoch seconds: multiply by 1000" in r.rejected_rows.column("error")[0].as_py()
    db.execute("CREATE SOURCE o (ts BIGINT NOT NULL, WATERMARK FOR ts AS ts) WITH (event_time_range = 'off')")
    assert db.insert("o", [{"ts": T0 * 1000}, {"ts": -5}]) == 2
    db.execute("CREATE SOURCE h (ts BIGINT NOT NULL, WATERMARK FOR ts AS ts) WITH (event_time_range = '2000-01-01/')")
    assert db.insert("h", {"ts": T0 * 1000}) == 1  # no upper bound


@pytest.mark.parametrize("options", [
    "event_time_range = 'yesterday/today'", "event_time_range = '2030-01-01/2020-01-01'",
    "event_time_range = '2020-01-01'", "max_future = 'soon'", "max_future = '5 fortnights'",
])
def test_bad_event_time_options_are_sql_errors(db, options):
    with pytest.raises(laminardb.LaminarError) as e:
        db.execute(f"CREATE SOURCE x (ts BIGINT NOT NULL, WATERMARK FOR ts AS ts) WITH ({options})")
    assert e.value.code == "LDB-1002"
    assert "write e.g." in str(e.value) or "FROM must be before TO" in str(e.value)


def test_event_time_options_without_a_watermark_are_checked_and_kept(db):
    with pytest.raises(laminardb.LaminarError) as e:
        db.execute("CREATE SOURCE x (ts BIGINT NOT NULL) WITH (max_future = 'soon')")
    assert e.value.code == "LDB-1002"
    db.execute("CREATE SOURCE y (ts BIGINT NOT NULL, n BIGINT) WITH (max_future = '1 second')")
    assert db.insert("y", [{"ts": 1}, {"ts": T0 * 1000}]) == 2  # no event time yet: nothing to judge


def test_max_future_refuses_rows_far_ahead_whatever_the_batch_boundaries(db):
    db.execute("CREATE SOURCE f (ts BIGINT NOT NULL, n BIGINT, WATERMARK FOR ts AS ts) "
               "WITH (max_future = '1 hour')")
    hour = 3_600_000
    ts = [T0, T0 + 2 * hour, T0 + hour - 1, T0 + 2 * hour - 2, T0 + 10 * hour, T0 + hour]
    rows = [{"ts": v, "n": i} for i, v in enumerate(ts)]
    whole = db.insert("f", rows, on_error="skip")
    assert sorted(whole.rejected_rows.column("index").to_pylist()) == [1, 4]
    assert "ahead of the source's max event time so far (max_future = 1 hour)" in \
        whole.rejected_rows.column("error")[0].as_py()
    db.execute("CREATE SOURCE g (ts BIGINT NOT NULL, n BIGINT, WATERMARK FOR ts AS ts) WITH (max_future = '1h')")
    refused = [i for i, row in enumerate(rows) if db.insert("g", row, on_error="skip").rejected]
    assert refused == [1, 4], "one row at a time refuses the same rows"
    with pytest.raises(laminardb.LaminarError) as e:
        db.insert("g", {"ts": T0 + 5 * hour, "n": 9})
    assert e.value.code == "LDB-2005" and "row 0:" in str(e.value)


# ------------------------------------------------------------------ timestamps as the CLI reads them
def test_iso_text_with_zones_and_aware_datetimes_are_utc_like_the_cli(db, tmp_path):
    db.execute("CREATE SOURCE e (ts TIMESTAMP(3) NOT NULL, k VARCHAR, WATERMARK FOR ts AS ts)")
    db.execute("CREATE STREAM raw AS SELECT * FROM e")
    sub = db.subscribe_stream("raw")
    texts = ["2024-01-01T10:00:00Z", "2024-01-01T15:30:00+05:30", "2024-01-01 05:00:00-0500",
             "2024-01-01T10:00:00.250", "2024-01-01"]
    db.insert("e", [{"ts": s, "k": str(i)} for i, s in enumerate(texts)])
    db.insert("e", [{"ts": dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2))), "k": "aware"},
                    {"ts": dt.datetime(2024, 1, 1, 10, 0, 0, 123456, tzinfo=UTC), "k": "utc"}])
    db.insert("e", {"ts": float(T0), "k": "float"})  # a whole number of ms as a float
    got = [r["ts"] for r in sub.to_arrow().to_pylist()]
    ten = dt.datetime(2024, 1, 1, 10)
    assert got == [ten, ten, ten, ten + dt.timedelta(milliseconds=250), dt.datetime(2024, 1, 1),
                   ten, ten + dt.timedelta(milliseconds=123), ten]
    # the file reader of `laminardb run` gives the same values for the same text
    path = tmp_path / "in.csv"
    path.write_text("ts,k\n" + "\n".join(f"{s},{i}" for i, s in enumerate(texts)) + "\n")
    schema = pa.schema([pa.field("ts", pa.timestamp("ms"), nullable=False), ("k", pa.string())])
    from_file = pa.Table.from_batches(list(read_file(path, schema=schema, dead_letter=False)))
    assert from_file.column("ts").to_pylist() == got[:5]


def test_numbers_are_not_text_in_insert_but_are_in_text_formats(t):
    raw = t.subscribe_stream("raw")
    with pytest.raises(laminardb.LaminarError) as e:
        t.insert("t", pa.table({"ts": [1, 2], "k": [1.5, 2.5]}))
    assert e.value.code == "LDB-2003" and "row 0:" in str(e.value)
    assert t.insert_json("t", '{"ts": 1, "k": 123}') == 1
    assert raw.to_arrow().column("k").to_pylist() == ["123"]


# ------------------------------------------------------------------ on_error
def test_raise_names_the_row_and_refuses_the_whole_call(t):
    raw = t.subscribe_stream("raw")
    table = pa.table({"ts": list(range(10)), "k": ["a"] * 10, "v": ["1.5"] * 5 + ["x"] + ["2"] * 4})
    with pytest.raises(laminardb.LaminarError) as e:
        t.insert("t", table)  # a vectorized conversion: the message still names the row
    assert e.value.code == "LDB-2003"
    assert "row 5: column 'v': x is not a valid DOUBLE" in str(e.value)
    assert "1 of 10 rows refused" in str(e.value) and "on_error='skip'" in str(e.value)
    with pytest.raises(laminardb.LaminarError) as e:
        t.insert("t", [{"ts": 1}, {"ts": 2, "bogus": 1}, {"ts": None}])
    assert e.value.code == "LDB-2001" and "row 1:" in str(e.value)
    with pytest.raises(laminardb.LaminarError) as e:
        t.insert("t", [{"ts": 1}, {"ts": 2}, {"ts": None}])
    assert e.value.code == "LDB-2002" and "row 2:" in str(e.value)
    assert raw.to_arrow().num_rows == 0 and t.metrics()["events_ingested"] == 0
    with pytest.raises(laminardb.LaminarError) as e:
        t.insert("t", table, on_error="ignore")
    assert e.value.code == "LDB-9003"


def test_skip_returns_an_int_with_the_rejected_rows(t):
    raw = t.subscribe_stream("raw")
    rows = [{"ts": 1, "k": "a", "v": 1.0}, {"ts": "later", "k": "b"}, {"ts": 3, "k": "c", "v": "x"},
            {"ts": 4, "k": "d"}]
    r = t.insert("t", rows, on_error="skip")
    assert isinstance(r, InsertResult) and isinstance(r, int) and r == 2 and r.accepted == 2
    assert r.rejected == 2 and repr(r) == "InsertResult(accepted=2, rejected=2, late=0)"
    assert r.rejected_rows.schema.names == ["index", "raw", "error"]
    got = r.rejected_rows.to_pylist()
    assert [g["index"] for g in got] == [1, 2]
    assert json.loads(got[0]["raw"]) == rows[1] and "column 'ts': later is not a valid BIGINT" in got[0]["error"]
    assert raw.to_arrow().column("k").to_pylist() == ["a", "d"]
    plain = t.insert("t", {"ts": 6})  # on_error='raise' returns the same int, with nothing refused
    assert t.insert("t", {"ts": 5, "k": "e"}) == 5 - 4 and isinstance(plain, InsertResult) and plain.rejected == 0


def test_dead_letters_are_a_stream_like_any_other(t):
    dead = t.subscribe_stream("t__rejected")
    t.execute("CREATE STREAM bad_ts AS SELECT index, error FROM t__rejected WHERE error LIKE '%ts%'")
    bad_ts = t.subscribe_stream("bad_ts")
    r = t.insert("t", [{"ts": T0 * 1000, "k": "us"}, {"ts": 2, "k": "ok"}, {"ts": 3, "v": "nan?"}],
                 on_error="dead_letter")
    assert int(r) == 1 and r.rejected == 2
    assert dead.to_arrow().column("index").to_pylist() == [0, 2]
    assert dead.to_arrow().to_pylist() == r.rejected_rows.to_pylist()
    assert bad_ts.to_arrow().column("index").to_pylist() == [0]
    assert t.execute("DESCRIBE t__rejected").to_arrow().column("column").to_pylist() == ["index", "raw", "error"]
    assert "t__rejected" not in t.execute("SHOW STREAMS").to_arrow().column("name").to_pylist()
    with pytest.raises(laminardb.LaminarError):
        t.execute("DROP STREAM t__rejected")
    with pytest.raises(laminardb.LaminarError):
        t.execute("DROP SOURCE t")  # bars, raw and bad_ts read it
    for s in ("bars", "raw", "bad_ts"):
        t.execute(f"DROP STREAM {s}")
    t.execute("DROP SOURCE t")
    assert dead.ended
    t.execute(SRC)  # the name is free again
    with pytest.raises(laminardb.LaminarError) as e:
        t.execute("CREATE STREAM u__rejected AS SELECT * FROM t; CREATE SOURCE u (ts BIGINT)")
    assert e.value.code == "LDB-1004"


def test_durable_logs_only_the_accepted_rows(tmp_path):
    with laminardb.open(tmp_path / "db") as db:
        db.execute(SRC + "; CREATE MATERIALIZED VIEW c AS SELECT k, count(*) AS n FROM t GROUP BY k")
        r = db.insert("t", [{"ts": 1, "k": "a"}, {"ts": T0 * 1000, "k": "a"}, {"ts": None, "k": "b"},
                            {"ts": 2, "k": "b"}], on_error="dead_letter")
        assert int(r) == 2 and db.offset("t") == 2
    with laminardb.open(tmp_path / "db") as db:
        assert db.offset("t") == 2
        assert sorted(db.query("SELECT * FROM c").to_pylist(), key=lambda x: x["k"]) == [
            {"k": "a", "n": 1}, {"k": "b", "n": 1}]
        assert db.insert("t", {"ts": 3, "k": "a"}) == 1 and db.offset("t") == 3


# ------------------------------------------------------------------ bad rows change nothing else
_BAD_ROWS = st.sampled_from([
    ({"ts": None, "sym": "A"}, "NOT NULL"),
    ({"ts": T0 * 1000, "sym": "A", "qty": 1}, "epoch microseconds"),
    ({"ts": T0 * 1_000_000, "sym": "B"}, "epoch nanoseconds"),
    ({"ts": 5, "sym": "A", "qty": "many"}, "not a valid BIGINT"),
    ({"ts": 5, "sym": "C", "price": "abc"}, "not a valid DOUBLE"),
    ({"ts": 5, "sym": 12.5}, "not a valid VARCHAR"),
    ({"ts": "yesterday", "sym": "A"}, "not a valid BIGINT"),
    ({"ts": 5, "sym": "A", "bogus": 1}, "unknown column"),
    ({"ts": -(2**42), "sym": "B"}, "outside the event-time range"),  # year 1830
])

WINDOWED = ("CREATE STREAM out AS SELECT sym, window_start, window_end, {aggs} FROM trades "
            "GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)")
TOTALS = "CREATE STREAM totals AS SELECT sym, count(*) AS n, sum(qty) AS q, max(price) AS p FROM trades GROUP BY sym"


def _run(batches: list[list[dict]], delay: int, on_error: str | None):
    db = laminardb.open()
    db.execute(SOURCE_DDL.format(delay=delay))
    db.execute(WINDOWED.format(aggs=agg_select("engine")))
    db.execute(TOTALS)
    out, totals, dead = (db.subscribe_stream(s) for s in ("out", "totals", "trades__rejected"))
    results = []
    for batch in batches:
        if on_error is None:
            if batch:
                db.insert("trades", batch)
            results.append(None)
        else:
            r = db.insert("trades", batch, on_error=on_error)
            taken = []
            while (b := dead.try_next()) is not None:
                taken += b.to_pylist()
            results.append((r, taken))
    db.finish()
    run = (out.to_arrow(), totals.to_arrow(), db.metrics(), results)
    db.close()
    return run


@ENGINE_SETTINGS
@given(scenario=scenarios(max_rows=40), data=st.data())
def test_skip_and_dead_letter_give_the_good_rows_results(scenario, data):
    batches, expected = [], []  # per insert: its rows, and (index, why) of its bad rows
    for good in scenario.batches():
        mixed = [(row, None) for row in good]
        for row, why in data.draw(st.lists(_BAD_ROWS, max_size=4)):
            mixed.insert(data.draw(st.integers(0, len(mixed))), (row, why))
        batches.append([row for row, _ in mixed])
        expected.append([(i, why) for i, (_, why) in enumerate(mixed) if why is not None])
    ref_out, ref_totals, ref_m, _ = _run(scenario.batches(), scenario.delay_ms, None)
    oracle = expected_windowed(scenario, size=1000)
    assert_same_rows(ref_out, oracle.drop(["closed_after"]), context="engine over the good rows vs DuckDB")
    for mode in ("skip", "dead_letter"):
        out, totals, m, results = _run(batches, scenario.delay_ms, mode)
        assert_same_rows(out, ref_out, context=mode)
        assert_same_rows(totals, ref_totals, context=mode)
        assert m["watermarks"] == ref_m["watermarks"]
        assert m["late_events_dropped"] == ref_m["late_events_dropped"]
        for (r, taken), bad, batch in zip(results, expected, batches, strict=True):
            where = [i for i, _ in bad]
            assert int(r) == len(batch) - len(bad)
            assert r.rejected_rows.column("index").to_pylist() == where
            for error, (_, why) in zip(r.rejected_rows.column("error").to_pylist(), bad, strict=True):
                assert why in error, (why, error)
            if mode == "dead_letter":
                assert [x["index"] for x in taken] == where, "the rejected stream holds exactly the bad rows"
                assert [json.loads(x["raw"]) for x in taken] == [batch[i] for i in where]
            else:
                assert taken == []
