"""LaminarDB's own SQL forms run as written, checked against DuckDB.

* a source with no watermark clause gets a zero-delay watermark on the column a window reads;
* ``CREATE SOURCE … WITH (watermark = 'ts', allowed_lateness = …)`` is ``WATERMARK FOR ts AS ts - …``;
* ``CREATE STREAM … WITH (allowed_lateness = …)`` follows Flink's allowed lateness (windows fire
  at their end, late rows within the lateness update them and fire again, state goes at end + L);
* windowed streams carry event time in ``window_start``/``window_end``: windows cascade;
* (the seed examples of LaminarDB's README, SQL reference and Python README, run as written:
  ``test_laminardb_seeds.py``; here: the rules above, on random out-of-order input).
"""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import (
    ENGINE_SETTINGS,
    Scenario,
    agg_select,
    assert_same_rows,
    consolidate,
    duck,
    expected_sessions,
    expected_windowed,
    run_engine,
)
from strategies import scenarios

import laminardb
from laminardb.sql.exceptions import SqlTypeError, UnsupportedSqlError

NO_WATERMARK_DDL = "CREATE SOURCE trades (ts BIGINT, sym VARCHAR, tag VARCHAR, price DOUBLE, qty BIGINT)"
AGGS = [
    ("count(*)", "count(*)", "n"),
    ("sum(qty)", "CAST(sum(qty) AS BIGINT)", "sq"),
    ("max(price)", "max(price)", "mxp"),
    ("count(DISTINCT tag)", "count(DISTINCT tag)", "cdt"),
    ("first_value(price)", "arg_min(price, ts * 1000000 + seq) FILTER (WHERE price IS NOT NULL)", "fp"),
    ("last_value(qty)", "arg_max(qty, ts * 1000000 + seq) FILTER (WHERE qty IS NOT NULL)", "lq"),
]
COLS = ["sym", "window_start", "window_end", *[a[2] for a in AGGS]]
WINDOWS = {
    "tumble": ("tumble(ts, INTERVAL '1' SECOND)", 1000, None),
    "hop": ("hop(ts, INTERVAL '1' SECOND, INTERVAL '250' MILLISECOND)", 1000, 250),
    "hop_flink_order": ("HOP(ts, INTERVAL '250' MILLISECOND, INTERVAL '1' SECOND)", 1000, 250),
    "session": ("session(ts, INTERVAL '300' MILLISECOND)", 300, None),
}


def _windowed_sql(window: str, tail: str = "") -> str:
    return (f"CREATE STREAM out AS SELECT sym, window_start, window_end, {agg_select('engine', AGGS)} "
            f"FROM trades GROUP BY sym, {WINDOWS[window][0]} {tail}")


def _expected(window: str, sc: Scenario) -> pa.Table:
    _, size, slide = WINDOWS[window]
    if window == "session":
        return expected_sessions(sc, gap=size, aggs=AGGS)[0]
    return expected_windowed(sc, size=size, slide=slide, aggs=AGGS)


def _check_per_batch(run, expected: pa.Table, context: str) -> None:
    for b, got in enumerate(run.per_batch):
        closed = expected.filter(pa.compute.less_equal(expected["closed_after"], b))
        assert_same_rows(got, closed, cols=COLS, context=f"{context}, after batch {b}")
    assert_same_rows(run.final, expected, cols=COLS, context=f"{context}, after finish")


# --------------------------------------------------------------------------- implicit watermark


@ENGINE_SETTINGS
@given(sc=scenarios(delays=(0,)), window=st.sampled_from(sorted(WINDOWS)))
def test_a_window_over_a_source_without_watermark_gets_a_zero_delay_one(sc, window):
    """LaminarDB's README: CREATE SOURCE … (…, ts BIGINT) with no WATERMARK, then a window on ts."""
    run = run_engine(_windowed_sql(window), sc, source_ddl=NO_WATERMARK_DDL)
    _check_per_batch(run, _expected(window, sc), f"implicit watermark, {window}")
    declared = run_engine(_windowed_sql(window), sc)  # WATERMARK FOR ts AS ts - INTERVAL '0' MILLISECOND
    assert run.metrics["late_events_dropped"] == declared.metrics["late_events_dropped"]
    assert run.metrics["watermarks"] == declared.metrics["watermarks"]


def test_implicit_watermark_makes_the_column_event_time():
    db = laminardb.open()
    db.execute(NO_WATERMARK_DDL)
    db.insert("trades", {"ts": None, "sym": "A"})  # no window yet: ts is an ordinary column
    plan = "\n".join(db.execute("EXPLAIN CREATE STREAM s AS SELECT sym, count(*) AS n FROM trades "
                                "GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)").to_arrow()["plan"].to_pylist())
    assert "implicit watermark on trades.ts (zero delay)" in plan
    assert db.metrics()["watermarks"] == {"trades": None}  # EXPLAIN changed nothing
    db.execute("CREATE STREAM s AS SELECT sym, count(*) AS n FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)")
    assert db.engine.reactor.event_time_notes("trades") == {
        "ts": "max event time (implicit, zero delay: placed by the window of 's')"}
    with pytest.raises(laminardb.LaminarError) as e:  # from now on rows need their event time
        db.insert("trades", {"ts": None, "sym": "A"})
    assert e.value.code == "LDB-2002"
    db.insert("trades", [{"ts": 1500, "sym": "A"}])
    assert db.metrics()["watermarks"] == {"trades": 1500}
    # a second window must use the same column: the message names the clause to write instead
    with pytest.raises(SqlTypeError) as e:
        db.execute("CREATE STREAM s2 AS SELECT sym, count(*) AS n FROM trades GROUP BY sym, tumble(qty, INTERVAL '1' SECOND)")
    assert "WATERMARK FOR qty AS qty - INTERVAL '1' SECOND" in str(e.value) and "'ts'" in str(e.value)


@pytest.mark.parametrize("ddl,window,message", [
    ("CREATE SOURCE s (id VARCHAR, temp DOUBLE, ts VARCHAR)", "tumble(ts, INTERVAL '10' SECOND)",
     "'ts' is VARCHAR; a window's event-time column is TIMESTAMP(3), TIMESTAMP(6) or BIGINT"),
    ("CREATE SOURCE s (id VARCHAR, temp DOUBLE, ts INT)", "tumble(ts, INTERVAL '10' SECOND)",
     "'ts' is INT"),
    ("CREATE SOURCE s (id VARCHAR, temp DOUBLE, ts BIGINT, t2 BIGINT, WATERMARK FOR t2 AS t2)",
     "tumble(ts, INTERVAL '10' SECOND)", "`WATERMARK FOR ts AS ts - INTERVAL '1' SECOND` in CREATE SOURCE s"),
])
def test_windows_on_columns_that_cannot_be_event_time(ddl, window, message):
    db = laminardb.open()
    db.execute(ddl)
    with pytest.raises(SqlTypeError) as e:
        db.execute(f"CREATE STREAM x AS SELECT id, avg(temp) FROM s GROUP BY id, {window}")
    assert e.value.code == "LDB-1005" and message in str(e.value)


def test_a_kafka_source_must_declare_its_watermark():
    from laminardb.sql import ddl
    from laminardb.sql.plan import RelationInfo
    from laminardb.sql.planner import plan_query

    schema = pa.schema([("ts", pa.int64()), ("k", pa.string())])
    rel = RelationInfo("ks", schema, kind="source", connector="kafka")
    stmt = ddl.parse_statement("CREATE STREAM x AS SELECT k, count(*) FROM ks GROUP BY k, tumble(ts, INTERVAL '1' SECOND)")
    with pytest.raises(SqlTypeError, match="reads KAFKA and declares no watermark.*WATERMARK FOR ts AS ts"):
        plan_query(stmt.query, lambda name: rel)


# --------------------------------------------------------------------------- WITH (watermark, allowed_lateness)


@pytest.mark.parametrize("form", [
    "WITH (watermark = 'ts', allowed_lateness = INTERVAL '{d}' MILLISECOND)",
    "WITH ('watermark' = 'ts', 'allowed_lateness' = '{d} milliseconds')",
    "WITH (watermark = ts, allowed_lateness = {d})",
])
@settings(ENGINE_SETTINGS, max_examples=10)
@given(sc=scenarios(delays=(0, 150, 1000, 2500)))
def test_source_with_watermark_and_allowed_lateness_is_a_watermark_delay(form, sc):
    ddl = NO_WATERMARK_DDL + " " + form.format(d=sc.delay_ms)
    run = run_engine(_windowed_sql("tumble"), sc, source_ddl=ddl)
    _check_per_batch(run, _expected("tumble", sc), form)


def test_readme_source_with_options_runs_as_written():
    db = laminardb.open()
    db.execute("""CREATE SOURCE trades (
        symbol VARCHAR, price DOUBLE, volume BIGINT, ts BIGINT
    ) WITH (
        watermark = 'ts',
        allowed_lateness = INTERVAL '5' SECOND
    );""")
    d = db.execute("DESCRIBE trades").to_arrow().to_pylist()
    assert [r["column"] for r in d if r["event_time"]] == ["ts"]
    db.insert("trades", {"symbol": "A", "price": 1.0, "volume": 1, "ts": 60_000})
    assert db.metrics()["watermarks"] == {"trades": 55_000}


# --------------------------------------------------------------------------- allowed lateness on a stream


# short watermark delays: rows arrive behind closed windows, so late updates and late drops happen
LATE_DELAYS = (0, 150, 1000)


def _pairs_sql(size: int, slide: int | None) -> str:
    slide = slide or size
    return f"""SELECT *, k * {slide} AS window_start, k * {slide} + {size} AS window_end
               FROM (SELECT *, unnest(generate_series(CAST(floor((ts - {size}) / {slide}) AS BIGINT) + 1,
                                                      CAST(floor(ts / {slide}) AS BIGINT))) AS k FROM rows)"""


def _expected_with_lateness(sc: Scenario, size: int, slide: int | None, lateness: int, *,
                            upto: int | None = None, fired_by: int | None = None) -> pa.Table:
    """Flink's rule: a (row, window) pair counts iff end + L > the watermark before the row's batch;
    ``upto``: rows of batches ≤ upto only; ``fired_by``: only windows with end ≤ that watermark."""
    rows = sc.annotated()
    if upto is not None:
        rows = rows[rows["batch"] <= upto]
    fired = "" if fired_by is None else f"HAVING window_end <= {fired_by}"
    return duck(f"""WITH w AS ({_pairs_sql(size, slide)}), kept AS (SELECT * FROM w WHERE window_end + {lateness} > wm_before)
                    SELECT sym, window_start, window_end, {agg_select('duck', AGGS)}
                    FROM kept GROUP BY sym, window_start, window_end {fired}""", rows=rows)


def _check_changelog(table: pa.Table, key: list[str]) -> None:
    """Per window: +1, then −1 of exactly the live row and +1 of the new one, …"""
    live: dict[tuple, dict] = {}
    for r in table.to_pylist():
        k = tuple(r[c] for c in key)
        body = {c: v for c, v in r.items() if c != "__weight"}
        if r["__weight"] == 1:
            assert k not in live, f"+1 for {k} while {live.get(k)} is live"
            live[k] = body
        else:
            assert live.pop(k, None) == body, f"retraction {body} is not the live row"


@ENGINE_SETTINGS
@given(sc=scenarios(delays=LATE_DELAYS), window=st.sampled_from(["tumble", "hop"]),
       lateness=st.sampled_from([250, 1000, 3000]),
       emit=st.sampled_from(["EMIT ON WINDOW CLOSE", "EMIT CHANGES", ""]))
def test_stream_allowed_lateness_follows_flink(sc, window, lateness, emit):
    _, size, slide = WINDOWS[window]
    run = run_engine(_windowed_sql(window, f"{emit} WITH (allowed_lateness = INTERVAL '{lateness}' MILLISECOND)"), sc)
    assert "__weight" in run.final.column_names  # late firings are updates: the stream is a changelog
    wms = sc.wm_after_batches()
    for b, got in enumerate(run.per_batch):
        fired_by = None if emit == "EMIT CHANGES" else wms[b]
        exp = _expected_with_lateness(sc, size, slide, lateness, upto=b, fired_by=fired_by)
        assert_same_rows(consolidate(got), exp, cols=COLS, context=f"after batch {b}")
    assert_same_rows(consolidate(run.final), _expected_with_lateness(sc, size, slide, lateness), cols=COLS,
                     context="after finish")
    _check_changelog(run.final, ["sym", "window_start"])
    late = [r for r in sc.annotated().to_dict("records")
            if (r["ts"] // (slide or size)) * (slide or size) + size + lateness <= r["wm_before"]]
    assert run.metrics["late_events_dropped"] == len(late)


def _sessions_with_lateness(sc: Scenario, gap: int, lateness: int) -> list[dict[int, tuple]]:
    """Per batch: session id of every counted row and whether its session has fired by then.

    Flink's merging windows with allowed lateness: a row joins (and merges) every session of its
    key that touches [ts, ts + gap] and is still kept (end + L > watermark); otherwise it opens a
    session, or is late when ts + gap + L ≤ the watermark before its batch. A session fires when
    the watermark reaches its end, or at once if it changes after firing (a merge with a fired
    session counts) or a late row opens it behind the watermark; it is purged at end + L.
    Returns, after each batch, {seq: (session id, fired)}.
    """
    rows = sc.annotated()
    sessions: dict[int, dict] = {}
    ids = itertools.count()
    out = []
    for b in range(int(rows["batch"].max()) + 1):
        part = rows[rows["batch"] == b]
        wm_before, wm_after = int(part["wm_before"].iloc[0]), int(part["wm_after"].iloc[0])
        touched = set()
        for _, r in part.sort_values(["ts", "seq"], kind="stable").iterrows():
            key = r["sym"] if isinstance(r["sym"], str) else "<null>"  # NULL keys group together
            lo, hi = int(r["ts"]), int(r["ts"]) + gap
            near = [sid for sid, s in sessions.items() if s["alive"] and s["key"] == key
                    and s["start"] <= hi and lo <= s["end"]]
            if not near:
                if hi + lateness <= wm_before:
                    continue  # late
                sid = next(ids)
                sessions[sid] = {"key": key, "start": lo, "end": hi, "fired": False, "alive": True, "rows": []}
            else:
                sid = near[0]
                for other in near[1:]:
                    o = sessions.pop(other)
                    s = sessions[sid]
                    s["start"], s["end"] = min(s["start"], o["start"]), max(s["end"], o["end"])
                    s["fired"] |= o["fired"]
                    s["rows"] += o["rows"]
            s = sessions[sid]
            s["start"], s["end"] = min(s["start"], lo), max(s["end"], hi)
            s["rows"].append(int(r["seq"]))
            touched.add(sid)
        for sid in touched:
            if sid in sessions and sessions[sid]["end"] <= wm_before:
                sessions[sid]["fired"] = True
        for s in sessions.values():
            if s["alive"]:
                s["fired"] |= s["end"] <= wm_after
                s["alive"] = s["end"] + lateness > wm_after
        out.append({seq: (sid, s["fired"]) for sid, s in sessions.items() for seq in s["rows"]})
    return out


@ENGINE_SETTINGS
@given(sc=scenarios(max_rows=40, delays=LATE_DELAYS), lateness=st.sampled_from([200, 1000, 3000]),
       emit=st.sampled_from(["EMIT ON WINDOW CLOSE", "EMIT CHANGES"]))
def test_session_allowed_lateness_follows_flink(sc, lateness, emit):
    gap = WINDOWS["session"][1]
    run = run_engine(_windowed_sql("session", f"{emit} WITH (allowed_lateness = INTERVAL '{lateness}' MILLISECOND)"), sc)
    rows = sc.annotated()
    per_batch = _sessions_with_lateness(sc, gap, lateness)
    for b, (got, owners) in enumerate(zip(run.per_batch, per_batch, strict=True)):
        sid = {seq: s for seq, (s, fired) in owners.items() if fired or emit == "EMIT CHANGES"}
        kept = rows[rows["seq"].isin(list(sid))]
        kept = kept.assign(sid=kept["seq"].map(sid))
        exp = duck(f"SELECT sym, min(ts) AS window_start, max(ts) + {gap} AS window_end, {agg_select('duck', AGGS)} "
                   "FROM kept GROUP BY sid, sym", kept=kept)
        assert_same_rows(consolidate(got), exp, cols=COLS, context=f"after batch {b}")
    if emit != "EMIT CHANGES":
        _check_changelog(run.final, ["sym", "window_start"])
    counted = set(per_batch[-1]) if per_batch else set()
    assert run.metrics["late_events_dropped"] == len(rows) - len(counted)


def test_late_rows_within_the_lateness_update_a_fired_window():
    """LaminarDB's README form, step by step: the window fires, a late row re-fires it as an update."""
    db = laminardb.open()
    db.execute("""CREATE SOURCE trades (symbol VARCHAR, price DOUBLE, volume BIGINT, ts BIGINT NOT NULL,
                  WATERMARK FOR ts AS ts);
                  CREATE STREAM results AS
                  SELECT symbol, COUNT(*) AS cnt
                  FROM trades
                  GROUP BY symbol, tumble(ts, INTERVAL '1' MINUTE)
                  WITH (allowed_lateness = INTERVAL '10' SECOND)
                  LATE DATA TO too_late;""")
    sub, late = db.subscribe_stream("results"), db.subscribe_stream("too_late")
    db.insert("trades", [{"symbol": "A", "ts": 1_000}, {"symbol": "A", "ts": 59_000}])
    db.insert("trades", [{"symbol": "B", "ts": 60_000}])  # watermark 60 s: [0, 60 s) fires
    assert sub.to_arrow().to_pylist() == [{"symbol": "A", "cnt": 2, "__weight": 1}]
    db.insert("trades", [{"symbol": "A", "ts": 30_000}])  # late, within 10 s: an update
    assert sub.to_arrow().to_pylist()[1:] == [{"symbol": "A", "cnt": 2, "__weight": -1},
                                              {"symbol": "A", "cnt": 3, "__weight": 1}]
    db.insert("trades", [{"symbol": "B", "ts": 70_000}])  # watermark 70 s = end + lateness: purged
    db.insert("trades", [{"symbol": "A", "ts": 30_001}])  # later than the lateness: dropped
    assert late.to_arrow().column("ts").to_pylist() == [30_001]
    db.finish()
    assert consolidate(sub.to_arrow()).to_pylist() == [{"symbol": "A", "cnt": 3}, {"symbol": "B", "cnt": 2}]


@pytest.mark.parametrize("sql,message", [
    ("CREATE STREAM x AS SELECT sym, count(*) FROM trades GROUP BY sym WITH (allowed_lateness = INTERVAL '1' SECOND)",
     "applies to windowed aggregations"),
    ("CREATE STREAM x AS SELECT sym FROM trades WITH (allowed_lateness = INTERVAL '1' SECOND)",
     "applies to windowed aggregations"),
    ("CREATE STREAM x WITH (allowed_lateness = '1s') AS SELECT sym, count(*) FROM trades "
     "GROUP BY sym, tumble(ts, INTERVAL '1' SECOND) WITH (allowed_lateness = '2s')", "given twice"),
    ("SELECT sym FROM trades WITH (allowed_lateness = '1s')", "belong to CREATE STREAM"),
])
def test_allowed_lateness_misuse(sql, message):
    db = laminardb.open()
    db.execute(NO_WATERMARK_DDL)
    with pytest.raises(laminardb.LaminarError, match=message):
        db.execute(sql)


def test_allowed_lateness_forms_agree():
    """WITH (…) before AS, after the query, and ALLOW LATENESS give the same plan."""
    from laminardb.sql import ddl

    q = "SELECT sym, count(*) AS n FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)"
    forms = [f"CREATE STREAM s WITH (allowed_lateness = INTERVAL '5' SECOND) AS {q}",
             f"CREATE STREAM s AS {q} WITH ('allowed_lateness' = '5 seconds')",
             f"CREATE STREAM s AS {q} ALLOW LATENESS INTERVAL '5' SECOND EMIT ON WINDOW CLOSE",
             f"CREATE STREAM s AS {q} EMIT ON WINDOW CLOSE WITH (allowed_lateness = 5000)"]
    assert {ddl.parse_statement(f).query.allowed_lateness_ms for f in forms} == {5000}


# --------------------------------------------------------------------------- cascading windows


BARS = ("CREATE STREAM bars AS SELECT sym, window_start, window_end, count(*) AS n, sum(qty) AS sq, "
        "max(price) AS hi, min(price) AS lo, first_value(price) AS op, last_value(price) AS cl "
        "FROM trades GROUP BY sym, tumble(ts, INTERVAL '500' MILLISECOND)")
ROLLUP = ("CREATE STREAM out AS SELECT sym, window_start, window_end, sum(n) AS n, sum(sq) AS sq, max(hi) AS hi, "
          "min(lo) AS lo, first_value(op) AS op, last_value(cl) AS cl FROM bars GROUP BY sym, tumble({col}, "
          "INTERVAL '2' SECOND)")
ROLLUP_DUCK = ("count(*) AS n, CAST(sum(qty) AS BIGINT) AS sq, max(price) AS hi, min(price) AS lo, "
               "arg_min(price, ts * 1000000 + seq) FILTER (WHERE price IS NOT NULL) AS op, "
               "arg_max(price, ts * 1000000 + seq) FILTER (WHERE price IS NOT NULL) AS cl")


@ENGINE_SETTINGS
@given(sc=scenarios(), col=st.sampled_from(["window_start", "window_end"]))
def test_bars_roll_up_into_longer_bars(sc, col):
    """500 ms bars → 2 s bars over the bars' window_start (or window_end) give what DuckDB gives
    over the rows the bars kept, and each 2 s bar closes as soon as its last 500 ms bar did
    (by window_end, the bar [H + 1500, H + 2000) belongs to the next 2 s bar)."""
    run = run_engine(BARS + ";\n" + ROLLUP.format(col=col), sc)
    rows = sc.annotated()
    wms = sc.wm_after_batches()
    bucket = "ts // 500 * 500" if col == "window_start" else "ts // 500 * 500 + 500"
    # the last bar of a 2 s bar by window_start ends at its end; by window_end, 500 ms before it
    last_bar_end = "g.window_end" if col == "window_start" else "g.window_end - 500"
    closes = pa.table({"b": list(range(len(wms))), "wm": wms})
    expected = duck(f"""
        SELECT g.*, coalesce((SELECT min(b) FROM closes WHERE closes.wm >= {last_bar_end}), {len(wms)}) AS closed_after
        FROM (SELECT sym, ({bucket}) // 2000 * 2000 AS window_start, ({bucket}) // 2000 * 2000 + 2000 AS window_end,
                     {ROLLUP_DUCK}
              FROM rows WHERE ts // 500 * 500 + 500 > wm_before GROUP BY ALL) g""", rows=rows, closes=closes)
    cols = ["sym", "window_start", "window_end", "n", "sq", "hi", "lo", "op", "cl"]
    for b, got in enumerate(run.per_batch):
        closed = expected.filter(pa.compute.less_equal(expected["closed_after"], b))
        assert_same_rows(got, closed, cols=cols, context=f"{col}: after batch {b}")
    assert_same_rows(run.final, expected, cols=cols, context=f"{col}: after finish")
    bars_late = [r for r in rows.to_dict("records") if r["ts"] // 500 * 500 + 500 <= r["wm_before"]]
    assert run.metrics["late_events_dropped"] == len(bars_late)  # the roll-up drops nothing


def test_cascade_keeps_event_time_through_a_projection():
    db = laminardb.open()
    db.execute("""CREATE SOURCE t (ts BIGINT, k VARCHAR, v BIGINT);
        CREATE STREAM m1 AS SELECT k, window_start AS bar, count(*) AS n FROM t GROUP BY k, tumble(ts, INTERVAL '1' MINUTE);
        CREATE STREAM busy AS SELECT k, bar, n FROM m1 WHERE n > 1;
        CREATE STREAM h1 AS SELECT k, window_start, sum(n) AS n FROM busy GROUP BY k, tumble(bar, INTERVAL '1' HOUR);""")
    sub = db.subscribe_stream("h1")
    minute = 60_000
    db.insert("t", [{"ts": 5 * minute, "k": "a", "v": 1}, {"ts": 5 * minute + 1, "k": "a", "v": 1},
                    {"ts": 59 * minute, "k": "a", "v": 1}, {"ts": 59 * minute + 9, "k": "a", "v": 1}])
    db.insert("t", [{"ts": 60 * minute, "k": "a", "v": 1}])   # the hour's last bar closes, and the hour
    assert sub.to_arrow().to_pylist() == [{"k": "a", "window_start": 0, "n": 4}]
    with pytest.raises(SqlTypeError, match="event-time columns are bar"):
        db.execute("CREATE STREAM bad AS SELECT k, count(*) FROM busy GROUP BY k, tumble(n, INTERVAL '1' HOUR)")


def test_session_streams_carry_event_time_in_window_end_only():
    db = laminardb.open()
    db.execute("CREATE SOURCE t (ts BIGINT, k VARCHAR);"
               "CREATE STREAM s AS SELECT k, window_start, window_end, count(*) AS n FROM t "
               "GROUP BY k, session(ts, INTERVAL '1' SECOND)")
    db.execute("CREATE STREAM ok AS SELECT k, count(*) AS n FROM s GROUP BY k, tumble(window_end, INTERVAL '1' MINUTE)")
    with pytest.raises(SqlTypeError, match="event-time columns are window_end"):
        db.execute("CREATE STREAM no AS SELECT k, count(*) FROM s GROUP BY k, tumble(window_start, INTERVAL '1' MINUTE)")


def test_changelog_streams_cannot_be_windowed():
    db = laminardb.open()
    db.execute(NO_WATERMARK_DDL)
    db.execute("CREATE STREAM c AS SELECT sym, window_start, count(*) AS n FROM trades "
               "GROUP BY sym, tumble(ts, INTERVAL '1' SECOND) EMIT CHANGES")
    with pytest.raises(UnsupportedSqlError, match="changelog"):
        db.execute("CREATE STREAM x AS SELECT sym, count(*) FROM c GROUP BY sym, tumble(window_start, INTERVAL '1' MINUTE)")
