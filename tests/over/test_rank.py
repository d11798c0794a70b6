"""RANK() and DENSE_RANK() OVER (…) bounded by ``rk <= N``: streaming Top-N whose ties share a
rank (RANK leaves gaps after them, DENSE_RANK does not), a changelog, against DuckDB's window
functions over the same rows (folded by ``__weight``) — in the end, after every batch (rows that
leave, and ranks that change, are retracted), and through snapshot → restore mid-stream."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import laminardb
from laminardb.operators.plan_operator import PlanOperator
from laminardb.sql.exceptions import UnsupportedSqlError
from tests.over.harness import (
    SOURCE,
    Driver,
    assert_equals_duckdb,
    fold,
    make_batches,
    oracle,
    plan_for,
    resumed_output,
    rows,
    same,
)


def _q(func: str, select: str, window: str, where: str, inner_select: str = "*") -> str:
    return f"SELECT {select} FROM (SELECT {inner_select}, {func}() OVER ({window}) AS rk FROM s) WHERE {where}"


# name → (laminardb query, DuckDB query). Ties share a rank, so no arrival tie-break is needed:
# the result is the same whatever order the rows came in. NULLs sort lowest, as in Flink.
CASES = {
    "rank_top3": (
        _q("RANK", "*", "PARTITION BY k ORDER BY v DESC", "rk <= 3"),
        _q("RANK", "k, g, v, ts, seq, rk", "PARTITION BY k ORDER BY v DESC NULLS LAST", "rk <= 3",
           "k, g, v, ts, seq")),
    "dense_rank_top2_two_keys": (
        _q("DENSE_RANK", "k, g, v, seq, rk", "PARTITION BY k, g ORDER BY v", "rk < 3"),
        _q("DENSE_RANK", "k, g, v, seq, rk", "PARTITION BY k, g ORDER BY v NULLS FIRST", "rk < 3")),
    "global_dense_rank_two_order_keys": (
        _q("DENSE_RANK", "v, g, seq, rk", "ORDER BY v DESC, g", "rk <= 4"),
        _q("DENSE_RANK", "v, g, seq, rk", "ORDER BY v DESC NULLS LAST, g NULLS FIRST", "rk <= 4")),
    "rank_not_read": (
        _q("RANK", "k, v, seq", "PARTITION BY k ORDER BY v", "rk <= 2 AND (v > 3 OR v IS NULL)"),
        _q("RANK", "k, v, seq", "PARTITION BY k ORDER BY v NULLS FIRST", "rk <= 2 AND (v > 3 OR v IS NULL)")),
    "rank_1_by_event_time_keeps_every_tie": (  # not a deduplication: all rows at the first time
        _q("RANK", "k, ts, seq, rk", "PARTITION BY k ORDER BY ts", "rk = 1"),
        _q("RANK", "k, ts, seq, rk", "PARTITION BY k ORDER BY ts", "rk = 1")),
    "dense_rank_by_an_expression": (
        _q("DENSE_RANK", "k, v, rk", "PARTITION BY k % 3 ORDER BY v % 4 DESC", "rk <= 2"),
        _q("DENSE_RANK", "k, v, rk", "PARTITION BY k % 3 ORDER BY v % 4 DESC NULLS LAST", "rk <= 2")),
}


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", list(CASES))
def test_rank_top_n_equals_duckdb(name, seed):
    assert_equals_duckdb(*CASES[name], seed, changelog=True)  # Top-N is a changelog


def test_ranks_share_and_gap_as_in_sql():
    """One partition, hand-checked: v = 9, 7, 7, 5, 5, 3 (in arrival order 5, 7, 9, 7, 5, 3)."""
    db = laminardb.open()
    db.execute(SOURCE)
    for func in ("RANK", "DENSE_RANK"):
        db.execute(f"CREATE STREAM {func.lower()} AS " + _q(func, "v, seq, rk", "ORDER BY v DESC", "rk <= 3"))
    subs = {f: db.subscribe_stream(f) for f in ("rank", "dense_rank")}
    vs = [5, 7, 9, 7, 5, 3]
    db.insert("s", [{"k": 1, "g": "a", "v": v, "ts": 1000 * i, "seq": i} for i, v in enumerate(vs)])
    db.finish()
    got = {f: sorted(rows(fold(s.to_arrow())), key=lambda r: (r[2], r[1])) for f, s in subs.items()}
    db.close()
    assert got["rank"] == [(9, 2, 1), (7, 1, 2), (7, 3, 2)]  # the 5s would be 4th: out
    assert got["dense_rank"] == [(9, 2, 1), (7, 1, 2), (7, 3, 2), (5, 0, 3), (5, 4, 3)]


@pytest.mark.parametrize("name", ["rank_top3", "dense_rank_top2_two_keys"])
def test_the_changelog_is_right_after_every_batch(name):
    """Folded after each batch, the output is DuckDB's answer over the rows so far: rows pushed out
    of the top, and rows whose rank changes, are retracted (-1 with the old rank, +1 with the new)."""
    query, duck_sql = CASES[name]
    batches = make_batches(3, n=400)
    d = Driver(PlanOperator(plan_for(query)))
    for i, b in enumerate(batches):
        d.feed(b)
        same(d.so_far(), oracle(duck_sql, batches[: i + 1]))
    assert sorted(pc.unique(d.so_far().column("__weight")).to_pylist()) == [-1, 1]


def _unbroken(query: str, batches) -> pa.Table:
    d = Driver(PlanOperator(plan_for(query)))
    for b in batches:
        d.feed(b)
    return d.finish()


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("name", ["rank_top3", "dense_rank_top2_two_keys", "global_dense_rank_two_order_keys"])
def test_restore_mid_stream_gives_the_same_output(name, split):
    query = CASES[name][0]
    batches = make_batches(11)
    resumed = fold(resumed_output(query, batches, split=split))
    assert rows(resumed) == rows(fold(_unbroken(query, batches)))


def test_a_snapshot_of_another_numbering_is_refused():
    from laminardb.checkpoint.exceptions import SnapshotFormatError

    query = CASES["rank_top3"][0]
    d = Driver(PlanOperator(plan_for(query)))
    for b in make_batches(12)[:5]:
        d.feed(b)
    blob = d.op.snapshot().encode()
    for other in (query.replace("RANK()", "DENSE_RANK()"), query.replace("RANK()", "ROW_NUMBER()")):
        with pytest.raises(SnapshotFormatError):
            PlanOperator(plan_for(other)).restore(blob)


def test_unbounded_rank_is_refused_with_a_typed_error():
    db = laminardb.open()
    db.execute(SOURCE)
    with pytest.raises(UnsupportedSqlError) as err:
        db.execute("CREATE STREAM x AS " + _q("RANK", "*", "PARTITION BY k ORDER BY v", "rk > 2"))
    assert err.value.code == "LDB-1002" and "unbounded" in str(err.value)
    with pytest.raises(UnsupportedSqlError, match="needs ORDER BY"):
        db.execute("CREATE STREAM x AS " + _q("DENSE_RANK", "*", "PARTITION BY k", "rk <= 2"))
    db.close()
