"""Windowed and unwindowed aggregation against the DuckDB oracle, on random out-of-order input.

Each hypothesis example draws rows (a few keys incl. NULL, nullable values, out-of-order event
times), random ``insert()`` batch boundaries and a random watermark delay, runs them through
laminardb and compares with ``oracle`` after every batch and after ``finish()``.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle import (
    AGGREGATES,
    ENGINE_SETTINGS,
    Scenario,
    agg_select,
    assert_same_rows,
    consolidate,
    duck_sessions_by_gap,
    expected_sessions,
    expected_unwindowed,
    expected_windowed,
    run_engine,
)
from strategies import scenarios


def _check_window_close(run, expected: pa.Table, scenario: Scenario, cols: list[str]) -> None:
    """After each batch exactly the windows closed by then were emitted; all of them after finish."""
    for b, got in enumerate(run.per_batch):
        exp_b = expected.filter(pa.compute.less_equal(expected["closed_after"], b))
        assert_same_rows(got, exp_b, cols=cols, context=f"after batch {b} (delay {scenario.delay_ms})")
    assert_same_rows(run.final, expected, cols=cols, context="after finish")


def _late_rows_tumble_hop(scenario: Scenario, size: int, slide: int):
    """Rows all of whose windows had closed before their batch: the last window containing ts."""
    late = []
    for r in scenario.annotated().to_dict("records"):
        last_end = (r["ts"] // slide) * slide + size
        if last_end <= r["wm_before"]:
            late.append(r)
    return late


OUT_COLS = ["sym", "window_start", "window_end", *[a[2] for a in AGGREGATES]]


@ENGINE_SETTINGS
@given(sc=scenarios(), size=st.sampled_from([500, 1000, 1500]))
def test_tumble_matches_duckdb(sc, size):
    sql = (f"CREATE STREAM out AS SELECT sym, window_start, window_end, {agg_select('engine')} "
           f"FROM trades GROUP BY sym, tumble(ts, INTERVAL '{size}' MILLISECOND)")
    run = run_engine(sql, sc)
    expected = expected_windowed(sc, size=size)
    _check_window_close(run, expected, sc, OUT_COLS)
    late = _late_rows_tumble_hop(sc, size, size)
    assert run.metrics["late_events_dropped"] == len(late)
    assert run.metrics["events_ingested"] == len(sc.rows)


@ENGINE_SETTINGS
@given(sc=scenarios(), shape=st.sampled_from([(1000, 500), (1500, 500), (1000, 300), (600, 600)]),
       alias=st.sampled_from(["hop", "slide"]))
def test_hop_matches_duckdb(sc, shape, alias):
    size, slide = shape
    sql = (f"CREATE STREAM out AS SELECT sym, window_start, window_end, {agg_select('engine')} "
           f"FROM trades GROUP BY sym, {alias}(ts, INTERVAL '{size}' MILLISECOND, INTERVAL '{slide}' MILLISECOND)")
    run = run_engine(sql, sc)
    expected = expected_windowed(sc, size=size, slide=slide)
    _check_window_close(run, expected, sc, OUT_COLS)
    assert run.metrics["late_events_dropped"] == len(_late_rows_tumble_hop(sc, size, slide))


@ENGINE_SETTINGS
@given(sc=scenarios(), gap=st.sampled_from([100, 300, 800]))
def test_session_matches_duckdb(sc, gap):
    sql = (f"CREATE STREAM out AS SELECT sym, window_start, window_end, {agg_select('engine')} "
           f"FROM trades GROUP BY sym, session(ts, INTERVAL '{gap}' MILLISECOND)")
    run = run_engine(sql, sc)
    expected, rows = expected_sessions(sc, gap=gap)
    _check_window_close(run, expected, sc, OUT_COLS)
    assert run.metrics["late_events_dropped"] == int(rows["late"].sum())
    if sc.delay_ms >= 10**7:  # nothing closes before finish: the textbook lag/running-sum sessions agree
        assert_same_rows(run.final, duck_sessions_by_gap(rows, gap=gap), cols=OUT_COLS, context="lag sessions")


@ENGINE_SETTINGS
@given(sc=scenarios(max_rows=40))
def test_unwindowed_emit_changes_matches_duckdb_after_every_batch(sc):
    sql = f"CREATE STREAM out AS SELECT sym, {agg_select('engine')} FROM trades GROUP BY sym"
    run = run_engine(sql, sc)
    assert "__weight" in run.final.column_names
    assert run.final.schema.field("__weight").type == pa.int64()
    rows = sc.annotated()
    cols = ["sym", *[a[2] for a in AGGREGATES]]
    for b, got in enumerate(run.per_batch):
        prefix = rows[rows["batch"] <= b]
        assert_same_rows(consolidate(got), expected_unwindowed(prefix), cols=cols, context=f"after batch {b}")
    assert_same_rows(consolidate(run.final), expected_unwindowed(rows), cols=cols, context="after finish")
    # an update is -1 old then +1 new; unchanged rows emit nothing
    _check_changelog_shape(run.final, key=["sym"])
    assert run.metrics["late_events_dropped"] == 0


def _check_changelog_shape(changelog: pa.Table, key: list[str]) -> None:
    """Per key, weights alternate +1, -1, +1, ...; a retraction repeats the live row exactly;
    no row is retracted and re-inserted unchanged."""
    live: dict[tuple, dict] = {}
    for r in changelog.to_pylist():
        k = tuple(r[c] for c in key)
        body = {c: v for c, v in r.items() if c != "__weight"}
        if r["__weight"] == 1:
            assert k not in live, f"+1 for {k} while {live.get(k)} is live (missing retraction)"
            live[k] = body
        else:
            assert r["__weight"] == -1, r
            assert live.get(k) == body, f"retraction {body} does not match the live row {live.get(k)}"
            del live[k]
    # consecutive -1 / +1 of an identical row would be a no-op update
    rows = changelog.to_pylist()
    for a, b in zip(rows, rows[1:], strict=False):
        if a["__weight"] == -1 and b["__weight"] == 1:
            assert {c: v for c, v in a.items() if c != "__weight"} != {c: v for c, v in b.items() if c != "__weight"}, \
                f"no-op update emitted: {a}"


@ENGINE_SETTINGS
@given(sc=scenarios(max_rows=40), size=st.sampled_from([500, 1000]))
def test_tumble_emit_changes_consolidates_to_duckdb(sc, size):
    sql = (f"CREATE STREAM out AS SELECT sym, window_start, window_end, {agg_select('engine')} "
           f"FROM trades GROUP BY sym, tumble(ts, INTERVAL '{size}' MILLISECOND) EMIT CHANGES")
    run = run_engine(sql, sc)
    expected = expected_windowed(sc, size=size)
    rows = sc.annotated()
    for b, got in enumerate(run.per_batch):
        exp_b = expected_windowed(Scenario(sc.rows[: int((rows["batch"] <= b).sum())], sc.cuts, sc.delay_ms), size=size)
        assert_same_rows(consolidate(got), exp_b, cols=OUT_COLS, context=f"after batch {b}")
    assert_same_rows(consolidate(run.final), expected, cols=OUT_COLS, context="after finish")
    _check_changelog_shape(run.final, key=["sym", "window_start"])


@ENGINE_SETTINGS
@given(sc=scenarios(), having=st.sampled_from(["count(*) > 1", "sum(qty) >= 5", "max(price) IS NOT NULL AND count(DISTINCT tag) >= 2"]))
def test_having_on_tumble(sc, having):
    sql = (f"CREATE STREAM out AS SELECT sym, window_start, window_end, {agg_select('engine')} "
           f"FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND) HAVING {having}")
    run = run_engine(sql, sc)
    expected = expected_windowed(sc, size=1000, having=f"HAVING {having}")
    assert_same_rows(run.final, expected, cols=OUT_COLS, context="after finish")


@ENGINE_SETTINGS
@given(sc=scenarios(max_rows=30), having=st.sampled_from(["count(*) > 2", "sum(qty) > 10"]))
def test_having_unwindowed_changes(sc, having):
    sql = f"CREATE STREAM out AS SELECT sym, {agg_select('engine')} FROM trades GROUP BY sym HAVING {having}"
    run = run_engine(sql, sc)
    rows = sc.annotated()
    cols = ["sym", *[a[2] for a in AGGREGATES]]
    for b, got in enumerate(run.per_batch):
        assert_same_rows(consolidate(got), expected_unwindowed(rows[rows["batch"] <= b], having=f"HAVING {having}"),
                         cols=cols, context=f"after batch {b}")


@ENGINE_SETTINGS
@given(sc=scenarios(), kind=st.sampled_from(["tumble", "hop", "session"]))
def test_late_data_to_routes_exactly_the_late_rows(sc, kind):
    if kind == "tumble":
        win, size, slide = "tumble(ts, INTERVAL '1' SECOND)", 1000, 1000
    elif kind == "hop":
        win, size, slide = "hop(ts, INTERVAL '1' SECOND, INTERVAL '250' MILLISECOND)", 1000, 250
    else:
        win = "session(ts, INTERVAL '300' MILLISECOND)"
    sql = (f"CREATE STREAM out AS SELECT sym, window_start, window_end, count(*) AS n "
           f"FROM trades GROUP BY sym, {win} LATE DATA TO late_trades")
    run = run_engine(sql, sc, late_stream="late_trades")
    if kind == "session":
        _, rows = expected_sessions(sc, gap=300)
        late = rows[rows["late"]].to_dict("records")
    else:
        late = _late_rows_tumble_hop(sc, size, slide)
    assert run.late.column_names == ["ts", "sym", "tag", "price", "qty"]
    assert_same_rows(run.late, [{c: r[c] if r[c] == r[c] else None for c in ["ts", "sym", "tag", "price", "qty"]}
                                for r in late] if late else pa.table({c: [] for c in ["ts", "sym", "tag", "price", "qty"]}),
                     context="late rows")
    assert run.metrics["late_events_routed"] == len(late)
    assert run.metrics["late_events_dropped"] == 0
    assert sum(run.final["n"].to_pylist()) + len(late) >= len(sc.rows)  # hop counts a row once per window


def test_unkeyed_tumble_and_global_aggregate():
    sc = Scenario([{"ts": t, "sym": s, "tag": None, "price": p, "qty": q} for t, s, p, q in
                   [(10, "A", 1.0, 1), (900, None, None, 2), (1100, "B", 2.5, None), (50, "A", 4.0, 3), (2500, "C", -1.0, 7)]],
                  cuts=[2, 3], delay_ms=0)
    run = run_engine(f"CREATE STREAM out AS SELECT window_start, window_end, {agg_select('engine')} "
                     "FROM trades GROUP BY tumble(ts, INTERVAL '1' SECOND)", sc)
    expected = expected_windowed(sc, size=1000, keyed=False)
    assert_same_rows(run.final, expected, cols=["window_start", "window_end", *[a[2] for a in AGGREGATES]])
    # row (50, A) arrives after wm = 1100 → window [0, 1000) closed: late, dropped
    assert run.metrics["late_events_dropped"] == 1


@ENGINE_SETTINGS.__class__(ENGINE_SETTINGS, max_examples=15)
@given(sc=scenarios(max_rows=30), gap=st.sampled_from([100, 400]))
def test_session_emit_changes_consolidates_to_duckdb(sc, gap):
    """Merging sessions retract both old rows and insert the merged one; the net changelog after
    every batch equals the sessions the oracle holds over the rows so far (open and closed)."""
    sql = (f"CREATE STREAM out AS SELECT sym, window_start, window_end, {agg_select('engine')} "
           f"FROM trades GROUP BY sym, session(ts, INTERVAL '{gap}' MILLISECOND) EMIT CHANGES")
    run = run_engine(sql, sc)
    rows = sc.annotated()
    for b, got in enumerate(run.per_batch):
        n = int((rows["batch"] <= b).sum())
        exp_b, _ = expected_sessions(Scenario(sc.rows[:n], sc.cuts, sc.delay_ms), gap=gap)
        assert_same_rows(consolidate(got), exp_b, cols=OUT_COLS, context=f"after batch {b}")
    expected, late = expected_sessions(sc, gap=gap)
    assert_same_rows(consolidate(run.final), expected, cols=OUT_COLS, context="after finish")
    assert run.metrics["late_events_dropped"] == int(late["late"].sum())


def test_tumble_and_session_with_negative_event_times():
    sc = Scenario([{"ts": t, "sym": "x", "tag": None, "price": None, "qty": q} for t, q in
                   [(-1500, 1), (-1, 2), (0, 3), (200, 4), (100, 5)]], cuts=[3, 4], delay_ms=1000)
    run = run_engine(f"CREATE STREAM out AS SELECT sym, window_start, window_end, {agg_select('engine')} "
                     "FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)", sc)
    assert_same_rows(run.final, expected_windowed(sc, size=1000), cols=OUT_COLS)
    assert sorted(run.final["window_start"].to_pylist()) == [-2000, -1000, 0]
    run = run_engine(f"CREATE STREAM out AS SELECT sym, window_start, window_end, {agg_select('engine')} "
                     "FROM trades GROUP BY sym, session(ts, INTERVAL '100' MILLISECOND)", sc)
    expected, _ = expected_sessions(sc, gap=100)
    assert_same_rows(run.final, expected, cols=OUT_COLS)
    # -1 and 0 and 100 and 200 chain (gaps ≤ 100 touch); -1500 stands alone
    assert sorted((r["window_start"], r["window_end"], r["n"]) for r in run.final.to_pylist()) == \
        [(-1500, -1400, 1), (-1, 300, 4)]


def _row(ts, sym="A", qty=1):
    return {"ts": ts, "sym": sym, "tag": None, "price": None, "qty": qty}


@pytest.mark.parametrize("late_ts,is_late", [(999, True), (1000, False), (0, True)])
def test_tumble_lateness_boundary(late_ts, is_late):
    """wm = 1000 after the first batch: [0, 1000) has closed (wm ≥ end), [1000, 2000) has not."""
    sc = Scenario([_row(1000), _row(late_ts, "B")], cuts=[1], delay_ms=0)
    run = run_engine("CREATE STREAM out AS SELECT sym, window_start, count(*) AS n FROM trades "
                     "GROUP BY sym, tumble(ts, INTERVAL '1' SECOND) LATE DATA TO lt", sc, late_stream="lt")
    assert run.metrics["late_events_routed"] == int(is_late)
    assert run.late["ts"].to_pylist() == ([late_ts] if is_late else [])
    assert sorted(run.final["sym"].to_pylist()) == (["A"] if is_late else ["A", "B"])
    assert_same_rows(run.final, expected_windowed(sc, size=1000, aggs=[("count(*)", "count(*)", "n")]),
                     cols=["sym", "window_start", "n"])


@pytest.mark.parametrize("late_ts,is_late", [(900, True), (901, False)])
def test_session_lateness_boundary(late_ts, is_late):
    """wm = 1000: a lone row's session [ts, ts + 100) has closed iff ts + 100 ≤ 1000."""
    sc = Scenario([_row(1000), _row(late_ts, "B")], cuts=[1], delay_ms=0)
    run = run_engine("CREATE STREAM out AS SELECT sym, window_start, window_end, count(*) AS n FROM trades "
                     "GROUP BY sym, session(ts, INTERVAL '100' MILLISECOND)", sc)
    assert run.metrics["late_events_dropped"] == int(is_late)
    _, rows = expected_sessions(sc, gap=100)
    assert int(rows["late"].sum()) == int(is_late)


def test_session_touching_rows_merge_and_a_late_row_can_join_an_open_session():
    # 0 and 100 touch (gap exactly 100): one session [0, 200); 301 starts a new one (gap 201 > 100)
    # then with wm = 301 - 50 = 251 a row at 120 (own window [120, 220) closed) joins nothing open
    # → late; a row at 260 joins [301, 401) even though it is behind the watermark.
    sc = Scenario([_row(0), _row(100), _row(301), _row(120), _row(260)], cuts=[3, 4], delay_ms=50)
    run = run_engine("CREATE STREAM out AS SELECT sym, window_start, window_end, count(*) AS n FROM trades "
                     "GROUP BY sym, session(ts, INTERVAL '100' MILLISECOND)", sc)
    assert sorted((r["window_start"], r["window_end"], r["n"]) for r in run.final.to_pylist()) == \
        [(0, 200, 2), (260, 401, 2)]
    assert run.metrics["late_events_dropped"] == 1
