"""Flink's window TVFs and legacy group windows give the same rows as the native forms."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle import (
    ENGINE_SETTINGS,
    Scenario,
    assert_same_rows,
    expected_sessions,
    expected_windowed,
    run_engine,
)
from strategies import scenarios

AGG = "count(*) AS n, sum(qty) AS sq, max(price) AS mxp"
DUCK_AGG = [("count(*)", "count(*)", "n"), ("sum(qty)", "CAST(sum(qty) AS BIGINT)", "sq"),
            ("max(price)", "max(price)", "mxp")]
COLS = ["sym", "window_start", "window_end", "n", "sq", "mxp"]

FORMS = {
    "tumble": [
        f"SELECT sym, window_start, window_end, {AGG} FROM trades GROUP BY sym, tumble(ts, INTERVAL '1' SECOND)",
        f"SELECT sym, window_start, window_end, {AGG} FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), "
        "INTERVAL '1' SECOND)) GROUP BY window_start, window_end, sym",
        f"SELECT sym, TUMBLE_START(ts, INTERVAL '1' SECOND) AS window_start, TUMBLE_END(ts, INTERVAL '1' SECOND) "
        f"AS window_end, {AGG} FROM trades GROUP BY TUMBLE(ts, INTERVAL '1' SECOND), sym",
    ],
    "hop": [
        f"SELECT sym, window_start, window_end, {AGG} FROM trades GROUP BY sym, hop(ts, INTERVAL '1' SECOND, "
        "INTERVAL '250' MILLISECOND)",
        f"SELECT sym, window_start, window_end, {AGG} FROM trades GROUP BY sym, slide(ts, INTERVAL '1' SECOND, "
        "INTERVAL '250' MILLISECOND)",
        # Flink's HOP takes the slide before the size
        f"SELECT sym, window_start, window_end, {AGG} FROM TABLE(HOP(TABLE trades, DESCRIPTOR(ts), "
        "INTERVAL '250' MILLISECOND, INTERVAL '1' SECOND)) GROUP BY window_start, window_end, sym",
    ],
    "session": [
        f"SELECT sym, window_start, window_end, {AGG} FROM trades GROUP BY sym, session(ts, INTERVAL '300' MILLISECOND)",
        f"SELECT sym, window_start, window_end, {AGG} FROM TABLE(SESSION(TABLE trades, DESCRIPTOR(ts), "
        "INTERVAL '300' MILLISECOND)) GROUP BY window_start, window_end, sym",
        f"SELECT sym, SESSION_START(ts, INTERVAL '300' MILLISECOND) AS window_start, "
        f"SESSION_END(ts, INTERVAL '300' MILLISECOND) AS window_end, {AGG} "
        "FROM trades GROUP BY SESSION(ts, INTERVAL '300' MILLISECOND), sym",
    ],
}


def _expected(kind, sc):
    if kind == "tumble":
        return expected_windowed(sc, size=1000, aggs=DUCK_AGG)
    if kind == "hop":
        return expected_windowed(sc, size=1000, slide=250, aggs=DUCK_AGG)
    return expected_sessions(sc, gap=300, aggs=DUCK_AGG)[0]


FIXED = Scenario([{"ts": t, "sym": s, "tag": None, "price": p, "qty": q} for t, s, p, q in [
    (100, "A", 1.0, 1), (350, "A", 2.0, 2), (1200, "B", None, 3), (900, None, 5.5, None),
    (2600, "A", -1.0, 4), (1000, "B", 3.0, 5), (5000, "C", 0.5, 6), (2400, "A", 7.0, 7)]],
    cuts=[3, 5, 7], delay_ms=500)


@pytest.mark.parametrize("kind,form", [(k, i) for k, forms in FORMS.items() for i in range(len(forms))])
def test_form_on_fixed_input(kind, form):
    run = run_engine(f"CREATE STREAM out AS {FORMS[kind][form]}", FIXED)
    assert_same_rows(run.final, _expected(kind, FIXED), cols=COLS, context=f"{kind} form {form}")


@ENGINE_SETTINGS.__class__(ENGINE_SETTINGS, max_examples=10)
@given(sc=scenarios(max_rows=40), kind=st.sampled_from(sorted(FORMS)))
def test_all_forms_agree_on_random_input(sc, kind):
    results = [run_engine(f"CREATE STREAM out AS {sql}", sc) for sql in FORMS[kind]]
    exp = _expected(kind, sc)
    for i, run in enumerate(results):
        assert_same_rows(run.final, exp, cols=COLS, context=f"{kind} form {i}")
        assert results[0].metrics["late_events_dropped"] == run.metrics["late_events_dropped"]
