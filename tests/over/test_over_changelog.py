"""OVER aggregates with ROWS BETWEEN n PRECEDING AND CURRENT ROW over a changelog (the Top-N
below them retracts rows), checked against DuckDB's window functions over the final Top-N table:
the changelog folded by ``__weight`` equals them at the end, and — when ORDER BY is not event
time, so every change applies at once — after every batch. Ties of the ORDER BY value are
broken by the row's numeric columns in column order (NULLs first), which DuckDB reproduces.
Also: snapshot/restore mid-stream (whole, and split by vnode), the state holds only current
rows, the typed refusals, and a change that lies behind the watermark is corrected, not dropped."""

from __future__ import annotations

import pyarrow as pa
import pytest

import laminardb
from laminardb.operators.over_changelog import OverChangelogOperator
from laminardb.operators.plan_operator import PlanOperator
from tests.engine.oracle import duck
from tests.over.harness import (
    SOURCE,
    Driver,
    durable_resumed_output,
    fold,
    make_batches,
    plan_for,
    resumed_output,
    run_db,
    table,
)

# the Top-2 of each k by v (ties: earlier arrival) — a changelog: rows leave the top, numbers change
TOP = ("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn FROM s) "
       "WHERE rn <= 2")
TOP_DUCK = ("SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY k ORDER BY v DESC NULLS LAST, seq) AS rn "
            "FROM s) WHERE rn <= 2")
# the Top-N's numeric columns in order (k, v, ts, seq, rn) break ties of the ORDER BY value
TIES = "k NULLS FIRST, v NULLS FIRST, ts, seq, rn"


def _frame(n: int) -> str:
    return f"ROWS BETWEEN {n} PRECEDING AND CURRENT ROW"


QUERIES = {
    # event-time order, partitioned by a column the Top-N does not partition by (NULL keys too)
    "by_g_ts": (f"SELECT k, g, v, ts, seq, rn, SUM(v) OVER w3 AS s3, COUNT(*) OVER w3 AS c3, COUNT(v) OVER w3 AS cv, "
                f"AVG(v) OVER w3 AS a3, MIN(v) OVER w3 AS lo, MAX(v) OVER w3 AS hi FROM ({TOP}) AS T",
                "PARTITION BY g ORDER BY ts", 3,
                f"SELECT k, g, v, ts, seq, rn, CAST(sum(v) OVER w3 AS BIGINT), count(*) OVER w3, count(v) OVER w3, avg(v) OVER w3, "
                f"min(v) OVER w3, max(v) OVER w3 FROM ({TOP_DUCK}) T WINDOW w3 AS "
                f"(PARTITION BY g ORDER BY ts, {TIES} {_frame(3)})"),
    # no PARTITION BY, a frame of 10 (q6's)
    "global_ts": (f"SELECT seq, AVG(v) OVER w3 AS a FROM ({TOP}) AS T", "ORDER BY ts", 10,
                  f"SELECT seq, avg(v) OVER (ORDER BY ts, {TIES} {_frame(10)}) FROM ({TOP_DUCK}) T"),
    # frames of different lengths in one SELECT (a change reaches the longest)
    "two_frames": (f"SELECT seq, SUM(v) OVER (PARTITION BY g ORDER BY ts {_frame(1)}) AS s1, "
                   f"MAX(v) OVER (PARTITION BY g ORDER BY ts {_frame(5)}) AS m5, "
                   f"COUNT(*) OVER (PARTITION BY g ORDER BY ts {_frame(0)}) AS c0 FROM ({TOP}) AS T", "", 0,
                   f"SELECT seq, CAST(sum(v) OVER (PARTITION BY g ORDER BY ts, {TIES} {_frame(1)}) AS BIGINT), "
                   f"max(v) OVER (PARTITION BY g ORDER BY ts, {TIES} {_frame(5)}), "
                   f"count(*) OVER (PARTITION BY g ORDER BY ts, {TIES} {_frame(0)}) FROM ({TOP_DUCK}) T"),
    # ORDER BY a plain number: every change applies at once
    "by_k_v": (f"SELECT k, seq, SUM(ts) OVER w3 AS s FROM ({TOP}) AS T", "PARTITION BY k % 3 ORDER BY v", 2,
               f"SELECT k, seq, CAST(sum(ts) OVER (PARTITION BY k % 3 ORDER BY v NULLS FIRST, {TIES} {_frame(2)}) AS BIGINT) "
               f"FROM ({TOP_DUCK}) T"),
}


def _sql(name: str) -> str:
    q, window, n, _ = QUERIES[name]
    return q.replace("OVER w3", f"OVER ({window} {_frame(n)})")


def _norm(t: pa.Table) -> list[tuple]:
    out = [tuple(round(v, 9) if isinstance(v, float) else v for v in r)
           for r in zip(*[c.to_pylist() for c in t.columns], strict=True)]
    return sorted(out, key=repr)


def _check(got: pa.Table, want: pa.Table) -> None:
    got = fold(got)
    assert got.num_columns == want.num_columns
    a, b = _norm(got), _norm(want)
    assert len(a) == len(b) > 0
    assert a == b


@pytest.mark.parametrize("name", list(QUERIES))
@pytest.mark.parametrize("seed", [1, 5])
def test_folded_output_equals_duckdb(name, seed):
    batches = make_batches(seed)
    out, db = run_db(_sql(name), batches)
    assert db.metrics()["late_events_dropped"] == 0
    db.close()
    assert "__weight" in out.column_names
    _check(out, duck(QUERIES[name][3], s=table(batches)))


def test_not_ordered_by_event_time_every_batch_is_right_at_once():
    """ORDER BY v (not a time column): each change applies in its batch, so after every batch the
    fold is DuckDB's window over the Top-N of the rows so far — insertions, retractions and the
    corrections of the frames after them all in place."""
    batches = make_batches(3)
    d = Driver(PlanOperator(plan_for(_sql("by_k_v"))))
    for i, b in enumerate(batches):
        d.feed(b)
        if i % 4 == 3:
            _check(d.so_far(), duck(QUERIES["by_k_v"][3], s=table(batches[: i + 1])))


def test_retractions_behind_the_watermark_are_applied_not_dropped():
    """The Top-N retracts rows long behind the watermark; their frames are corrected at once,
    and rows ahead of the watermark wait for it (emitted once their time is reached)."""
    batches = make_batches(2)
    d = Driver(PlanOperator(plan_for(_sql("by_g_ts"))))
    for b in batches:
        d.feed(b)
    op = next(n.op for n in d.op.nodes if isinstance(getattr(n, "op", None), OverChangelogOperator))
    assert op.late_dropped == 0 and op.unmatched == 0
    seen = d.so_far()
    retracted = seen.filter(pa.compute.equal(seen["__weight"], -1))
    assert retracted.num_rows > 0
    # some retraction came when the watermark was already past the retracted row's time
    behind = [wm for b, wm in zip(d.out, d.emitted_at, strict=True) for w, ts in
              zip(b.column("__weight").to_pylist(), b.column("ts").to_pylist(), strict=True) if w < 0 and ts < wm]
    assert behind
    _check(d.finish(), duck(QUERIES["by_g_ts"][3], s=table(batches)))


def test_state_holds_the_current_rows_only():
    batches = make_batches(4)
    d = Driver(PlanOperator(plan_for(_sql("by_g_ts"))))
    for b in batches:
        d.feed(b)
    d.finish()
    op = next(n.op for n in d.op.nodes if isinstance(getattr(n, "op", None), OverChangelogOperator))
    top = duck(TOP_DUCK, s=table(batches))
    assert op.state_rows() == len(op.rowid) == top.num_rows  # nothing pending, one entry per current row
    assert op.rows.n - op.rows.n_dead == top.num_rows


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("name", ["by_g_ts", "by_k_v"])
def test_restore_mid_stream_gives_the_same_output(name, split):
    query = _sql(name)
    batches = make_batches(11)
    resumed = resumed_output(query, batches, split=split)
    _check(resumed, duck(QUERIES[name][3], s=table(batches)))


def test_a_durable_database_resumes_from_its_checkpoint(tmp_path):
    batches = make_batches(8)
    resumed = durable_resumed_output(_sql("by_g_ts"), batches, tmp_path / "db")
    _check(resumed, duck(QUERIES["by_g_ts"][3], s=table(batches)))


@pytest.mark.parametrize("select", [
    f"SELECT k, LAG(v) OVER (PARTITION BY g ORDER BY ts) FROM ({TOP}) AS T",
    f"SELECT k, SUM(v) OVER (PARTITION BY g ORDER BY ts) FROM ({TOP}) AS T",
    f"SELECT k, SUM(v) OVER (PARTITION BY g ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) "
    f"FROM ({TOP}) AS T",
    f"SELECT k, SUM(v) OVER (PARTITION BY k ORDER BY g {_frame(2)}) FROM ({TOP}) AS T",
])
def test_unsupported_shapes_over_a_changelog_are_refused(select):
    db = laminardb.open()
    db.execute(SOURCE)
    with pytest.raises(laminardb.LaminarError) as err:
        db.execute(f"CREATE STREAM q AS {select}")
    assert err.value.code == "LDB-1002"
    assert "changelog" in str(err.value)
    db.close()


def test_explain_names_the_changelog():
    db = laminardb.open()
    db.execute(SOURCE)
    text = "\n".join(db.execute(f"EXPLAIN CREATE STREAM q AS {_sql('by_g_ts')}").to_arrow().column(0).to_pylist())
    db.close()
    assert "Over[changelog" in text and "TopN[n=2, changelog]" in text
