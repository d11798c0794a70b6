"""ASOF JOIN against DuckDB's over the same out-of-order rows: every time condition (>=, >, <=, <),
inner and LEFT, LaminarDB's MATCH_CONDITION form and DuckDB's; append-only output, emitted once
final; right state bounded per key by the watermark; snapshot/restore mid-stream; typed refusals."""

from __future__ import annotations

import pyarrow as pa
import pytest

import laminardb
from laminardb.operators.plan_operator import PlanOperator
from laminardb.sql.exceptions import UnsupportedJoinError
from tests.joins.harness import (
    SOURCES,
    Driver,
    make_rows,
    oracle,
    plan_for,
    resumed_output,
    rows,
    run_db,
    same,
)

OPS = [">=", ">", "<=", "<"]
_COLS = "l.k, l.v, l.ts, r.w, r.ts AS rts"


def asof_rows(seed: int, n: int = 600, keys: int = 40):
    """``make_rows`` with one right row per (key, time): DuckDB breaks ties between right rows of
    equal time arbitrarily (laminardb: the later arrival wins), so the oracle needs none."""
    seen: set[tuple] = set()
    out = []
    for src, b in make_rows(seed, n, keys):
        if src == "r":
            keep = []
            for i, (k, ts) in enumerate(zip(b.column("k").to_pylist(), b.column("ts").to_pylist(), strict=True)):
                if (k, ts) not in seen:
                    seen.add((k, ts))
                    keep.append(i)
            if not keep:
                continue
            b = b.take(pa.array(keep, pa.int64()))
        out.append((src, b))
    return out


def _ours(op: str, kind: str = "") -> str:
    return f"SELECT {_COLS} FROM l {kind} ASOF JOIN r MATCH_CONDITION(l.ts {op} r.ts) ON l.k = r.k"


def _duck(op: str, kind: str = "") -> str:
    return f"SELECT {_COLS} FROM l ASOF {kind} JOIN r ON l.k = r.k AND l.ts {op} r.ts"


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("kind", ["", "LEFT"])
@pytest.mark.parametrize("op", OPS)
def test_asof_join_equals_duckdb(op, kind, seed):
    batches = asof_rows(seed)
    got, db = run_db(_ours(op, kind), batches)
    assert "__weight" not in got.column_names  # each left row once, when its match is final
    assert db.metrics()["late_events_dropped"] == 0
    same(got, oracle(_duck(op, kind), batches))
    db.close()


@pytest.mark.parametrize("form", [
    "SELECT {c} FROM l ASOF LEFT JOIN r ON l.k = r.k AND l.ts >= r.ts",  # DuckDB's
    "SELECT {c} FROM l ASOF LEFT JOIN r MATCH_CONDITION(r.ts <= l.ts) ON r.k = l.k",  # sides swapped
    "SELECT {c} FROM l LEFT ASOF JOIN r AS r MATCH_CONDITION(l.ts >= r.ts) ON l.k = r.k",
])
def test_other_spellings_are_the_same_join(form):
    batches = asof_rows(3)
    got, db = run_db(form.format(c=_COLS), batches)
    same(got, oracle(_duck(">=", "LEFT"), batches))
    db.close()


def test_a_match_waits_for_the_right_watermark_and_is_final():
    db = laminardb.open()
    db.execute(SOURCES)
    db.execute("CREATE STREAM j AS SELECT l.k, l.ts, r.w FROM l ASOF JOIN r MATCH_CONDITION(l.ts >= r.ts) ON l.k = r.k")
    sub = db.subscribe_stream("j")
    db.insert("r", [{"k": 1, "w": 10, "ts": 1000}])
    db.insert("l", [{"k": 1, "v": "a", "ts": 1500}])
    assert sub.to_arrow().num_rows == 0  # a right row at 1001…1500 may still come
    db.insert("r", [{"k": 1, "w": 11, "ts": 1200}])  # it does
    db.insert("l", [{"k": 9, "v": "z", "ts": 9000}])
    db.insert("r", [{"k": 9, "w": 0, "ts": 9000}])  # both watermarks now 7000 > 1500
    assert sub.to_arrow().to_pylist() == [{"k": 1, "ts": 1500, "w": 11}]
    db.close()


def test_right_state_is_bounded_per_key_by_the_watermark():
    """>=: a key keeps its latest right row before the watermark plus the newer ones."""
    batches = asof_rows(4, n=3000, keys=20)
    d = Driver(PlanOperator(plan_for(_ours(">=", "LEFT"))))
    join = d.op.joins()[0]
    peak = 0
    for src, b in batches:
        d.feed(src, b)
        left, right = join.state_rows()
        peak = max(peak, right)
        # 21 keys' latest row + rows newer than the watermark (~2 s of rows, one per 50 ms)
        assert right <= 21 + 80, right
        assert left <= 80, left
    assert peak > 21
    d.out += d.op.on_watermark(max(d.max_ts.values()) + 10_000)
    assert join.state_rows() == (0, 21)  # one row per key (incl. NULL-free keys 0…20) is all that stays
    same(d.finish(), oracle(_duck(">=", "LEFT"), batches))


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("op", [">=", "<"])
def test_restore_mid_stream_gives_the_same_output(op, split):
    query = _ours(op, "LEFT")
    batches = asof_rows(5)
    got = resumed_output(lambda: plan_for(query), batches, split=split)
    whole = Driver(PlanOperator(plan_for(query)))
    for src, b in batches:
        whole.feed(src, b)
    want = whole.finish()
    assert rows(got) == rows(want)
    same(want, oracle(_duck(op, "LEFT"), batches))


def test_a_window_over_an_asof_join_equals_duckdb():
    """>= keeps the left row's time as event time: windows close over the join."""
    batches = asof_rows(6)
    q = ("SELECT l.k, window_start, count(*) AS n, sum(r.w) AS sw FROM l ASOF JOIN r MATCH_CONDITION(l.ts >= r.ts) "
         "ON l.k = r.k GROUP BY l.k, tumble(l.ts, INTERVAL '5' SECOND)")
    got, db = run_db(q, batches)
    assert "__weight" not in got.column_names
    want = oracle("SELECT l.k, l.ts // 5000 * 5000 AS ws, count(*), sum(r.w) FROM l ASOF JOIN r "
                  "ON l.k = r.k AND l.ts >= r.ts GROUP BY l.k, ws", batches)
    same(got, want)
    db.close()


@pytest.mark.parametrize("sql,fragment", [
    ("SELECT l.k FROM l ASOF JOIN r MATCH_CONDITION(l.ts >= r.ts) ON l.v = 'a'", "needs an equality"),
    ("SELECT l.k FROM l ASOF JOIN r ON l.k = r.k", "needs one time condition"),
    ("SELECT l.k FROM l RIGHT ASOF JOIN r MATCH_CONDITION(l.ts >= r.ts) ON l.k = r.k", "only inner and LEFT"),
    ("SELECT l.k FROM l ASOF JOIN r MATCH_CONDITION(l.k >= r.w) ON l.k = r.k", "no event-time column"),
    ("SELECT l.k FROM l ASOF JOIN r MATCH_CONDITION(l.ts >= r.ts) ON l.k = r.k AND l.ts < r.ts + 5",
     "equalities (the keys) only"),
])
def test_bad_asof_joins_are_refused_with_a_typed_error(sql, fragment):
    db = laminardb.open()
    db.execute(SOURCES)
    with pytest.raises(UnsupportedJoinError) as e:
        db.execute(f"CREATE STREAM j AS {sql}")
    assert e.value.code == "LDB-1002" and fragment in str(e.value)
    db.close()


def test_an_asof_join_over_a_changelog_is_refused():
    db = laminardb.open()
    db.execute(SOURCES)
    db.execute("CREATE STREAM c AS SELECT k, count(*) AS n, max(ts) AS ts FROM r GROUP BY k EMIT CHANGES")
    with pytest.raises(UnsupportedJoinError, match="append-only inputs"):
        db.execute("CREATE STREAM j AS SELECT l.k FROM l ASOF JOIN c MATCH_CONDITION(l.ts >= c.ts) ON l.k = c.k")
    db.close()
