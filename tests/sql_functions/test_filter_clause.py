"""Aggregate ``FILTER (WHERE …)`` clauses, checked against DuckDB over the same rows.

Covered: every aggregate kind with a filter (NULL arguments and NULL conditions included),
unwindowed (an updating changelog, folded by ``__weight``) and windowed (tumble, emitted on
window close) aggregates, a filtered aggregate over a changelog input (retractions), the
operator snapshot of a filtered COUNT(DISTINCT), the validity-bitmap helper on sliced arrays,
and the typed errors for FILTER where it does not belong.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import laminardb
from laminardb.operators.group_aggregate import NO_WATERMARK
from laminardb.operators.query_operator import QueryOperator
from laminardb.operators.snapshot import DEFAULT_VNODES
from laminardb.sql import ddl
from laminardb.sql._agg_filter import null_where_false
from laminardb.sql.plan import RelationInfo
from laminardb.sql.planner import plan_query
from tests.engine.oracle import duck

DDL = ("CREATE SOURCE t (ts BIGINT NOT NULL, sym VARCHAR, tag VARCHAR, price DOUBLE, qty BIGINT, "
       "WATERMARK FOR ts AS ts - INTERVAL '0' SECOND)")
SCHEMA = pa.schema([("ts", pa.int64()), ("sym", pa.string()), ("tag", pa.string()),
                    ("price", pa.float64()), ("qty", pa.int64())])

# the same text runs in laminardb and in DuckDB
FILTERED = ", ".join([
    "count(*) AS n",
    "count(*) FILTER (WHERE qty > 3) AS n_big",                     # qty NULL: not counted
    "count(*) FILTER (WHERE price < 50 AND tag <> 'c') AS n_cheap",
    "count(qty) FILTER (WHERE price >= 20) AS cq",
    "count(DISTINCT tag) FILTER (WHERE qty > 3) AS dt_big",
    "count(DISTINCT qty) FILTER (WHERE tag IS NULL) AS dq_untagged",
    "count(DISTINCT tag) AS dt",
    "sum(qty) FILTER (WHERE price < 50) AS sq_cheap",
    "avg(price) FILTER (WHERE qty > 3) AS ap_big",
    "min(price) FILTER (WHERE qty > 3) AS mn_big",
    "max(qty) FILTER (WHERE tag = 'a') AS mx_a",
    "max(tag) FILTER (WHERE price > 80) AS mxt_dear",
    "min(tag) FILTER (WHERE false) AS never",
])


def _rows(seed: int, n: int = 1_500) -> pa.Table:
    """Rows in event-time order, with NULLs in every nullable column."""
    rng = np.random.default_rng(seed)

    def nulls(values: list, p: float) -> list:
        return [None if rng.random() < p else v for v in values]

    return pa.table({
        "ts": np.sort(rng.integers(0, 20_000, n)),
        "sym": nulls([f"s{i}" for i in rng.integers(0, 7, n)], 0.05),
        "tag": nulls([str(c) for c in rng.choice(list("abcd"), n)], 0.2),
        "price": nulls([round(float(x), 2) for x in rng.uniform(0, 100, n)], 0.1),
        "qty": nulls([int(x) for x in rng.integers(0, 8, n)], 0.15),
    }, schema=SCHEMA)


def _run(db, select: str, rows: pa.Table, *, name: str = "out", batch_rows: int = 97) -> pa.Table:
    db.execute(DDL)
    db.execute(f"CREATE STREAM {name} AS {select}")
    sub = db.subscribe_stream(name)
    for start in range(0, rows.num_rows, batch_rows):
        db.insert("t", rows.slice(start, batch_rows))
    db.finish()
    return sub.to_arrow()


def _fold(t: pa.Table) -> pa.Table:
    """A changelog folded by ``__weight`` into the rows it leaves."""
    if "__weight" not in t.column_names:
        return t
    cols = ", ".join(f'"{n}"' for n in t.column_names if n != "__weight")
    return duck(f"SELECT {cols} FROM t GROUP BY ALL HAVING sum(__weight) > 0", t=t)


def _same(got: pa.Table, want: pa.Table) -> None:
    def norm(t: pa.Table) -> list[tuple]:
        out = [tuple(round(v, 6) if isinstance(v, float) else v for v in r.values()) for r in t.to_pylist()]
        return sorted(out, key=repr)

    assert got.num_rows == want.num_rows > 0
    assert norm(got) == norm(want)


@pytest.mark.parametrize("seed", [1, 2])
def test_unwindowed_filters_match_duckdb(db, seed):
    """GROUP BY a key over an append stream: an updating result, folded to its final rows."""
    rows = _rows(seed)
    got = _run(db, f"SELECT sym, {FILTERED} FROM t GROUP BY sym", rows)
    assert "__weight" in got.column_names
    _same(_fold(got), duck(f"SELECT sym, {FILTERED} FROM t GROUP BY sym", t=rows))


def test_tumbling_window_filters_match_duckdb(db):
    rows = _rows(3)
    got = _run(db, f"SELECT sym, window_start, {FILTERED} FROM t "
                   "GROUP BY sym, tumble(ts, INTERVAL '2' SECOND)", rows)
    assert "__weight" not in got.column_names  # emitted once, when each window closes
    want = duck(f"SELECT sym, ts // 2000 * 2000 AS ws, {FILTERED} FROM t GROUP BY sym, ws", t=rows)
    _same(got, want)


def test_hopping_window_filters_match_duckdb(db):
    """Hop windows expand each row into two windows (the arguments are gathered per window):
    filtered and unfiltered COUNT(DISTINCT)s of one type still agree with DuckDB."""
    rows = _rows(8)
    aggs = ("count(DISTINCT tag) AS dt, count(DISTINCT tag) FILTER (WHERE qty > 3) AS dt_big, "
            "count(DISTINCT sym) FILTER (WHERE price < 40) AS ds_cheap, count(*) FILTER (WHERE tag = 'b') AS nb, "
            "sum(price) FILTER (WHERE qty < 4) AS sp")
    got = _run(db, f"SELECT sym, window_start, {aggs} FROM t "
                   "GROUP BY sym, hop(ts, INTERVAL '2' SECOND, INTERVAL '1' SECOND)", rows)
    windows = "unnest(generate_series(CAST(floor((ts - 2000) / 1000) AS BIGINT) + 1, CAST(floor(ts / 1000) AS BIGINT)))"
    want = duck(f"SELECT sym, ws, {aggs} FROM (SELECT *, {windows} * 1000 AS ws FROM t) GROUP BY sym, ws", t=rows)
    _same(got, want)


def test_expression_group_key_with_filters(db):
    """Nexmark q15's shape: the group key is an expression, several filters share a condition."""
    rows = _rows(4)
    sql = ("SELECT CAST(CAST(floor(ts / 5000.0) AS BIGINT) AS VARCHAR) AS bucket, count(*) FILTER (WHERE qty < 4) AS lo, "
           "count(DISTINCT sym) FILTER (WHERE qty < 4) AS lo_syms, count(DISTINCT tag) FILTER (WHERE qty < 4) AS lo_tags "
           "FROM t GROUP BY CAST(CAST(floor(ts / 5000.0) AS BIGINT) AS VARCHAR)")
    _same(_fold(_run(db, sql, rows)), duck(sql, t=rows))


def test_filter_in_having_matches_duckdb(db):
    """A filtered aggregate only in HAVING: groups enter and leave the result as it flips."""
    rows = _rows(7)
    sql = ("SELECT sym, count(*) AS n FROM t GROUP BY sym "
           "HAVING count(*) FILTER (WHERE qty > 5) > count(*) FILTER (WHERE qty < 2)")
    _same(_fold(_run(db, sql, rows)), duck(sql, t=rows))


def test_filters_over_a_changelog_input_retract(db):
    """The inner stream updates (−1 old, +1 new per change); the filtered outer aggregates
    must take the retracted rows back out exactly as they were counted in."""
    rows = _rows(5)
    inner = "SELECT sym, count(*) AS n, sum(qty) AS sq FROM t GROUP BY sym"
    outer = ("SELECT n % 3 AS b, count(*) FILTER (WHERE sq > 500) AS big, sum(sq) FILTER (WHERE sym <> 's1') AS s, "
             "avg(n) FILTER (WHERE sq IS NOT NULL) AS a, count(sq) FILTER (WHERE n > 200) AS c FROM inner_s GROUP BY n % 3")
    db.execute("CREATE SOURCE t (ts BIGINT NOT NULL, sym VARCHAR, tag VARCHAR, price DOUBLE, qty BIGINT)")
    db.execute(f"CREATE STREAM inner_s AS {inner}")
    db.execute(f"CREATE STREAM out AS {outer}")
    sub = db.subscribe_stream("out")
    for start in range(0, rows.num_rows, 61):
        db.insert("t", rows.slice(start, 61))
    db.finish()
    got = sub.to_arrow()
    assert (got["__weight"].to_numpy() < 0).any()  # it did retract
    want = duck(outer.replace("FROM inner_s", f"FROM ({inner}) AS i"), t=rows)
    _same(_fold(got), want)


@pytest.mark.parametrize("halves", [False, True])
def test_filtered_distinct_count_restores_from_its_snapshot(halves):
    """COUNT(DISTINCT x) FILTER keeps its (group, value) pairs in the snapshot, also when the
    COUNT(DISTINCT)s of one type share their value dictionary: an operator restored mid-stream
    (whole, or as two vnode halves) continues exactly like the unbroken one."""
    rel = RelationInfo("t", SCHEMA, "ts", False)
    sql = ("CREATE STREAM s AS SELECT sym, count(DISTINCT tag) FILTER (WHERE qty > 3) AS d, "
           "count(DISTINCT tag) AS dt, count(DISTINCT sym) FILTER (WHERE price > 50) AS ds, "
           "count(*) FILTER (WHERE price < 30) AS c, max(tag) FILTER (WHERE qty < 2) AS m FROM t GROUP BY sym")
    plan = plan_query(ddl.parse_statement(sql).query, lambda name: rel)
    batches = _rows(6).to_batches(max_chunksize=50)
    unbroken, first = QueryOperator(plan), QueryOperator(plan)
    for b in batches[:15]:
        unbroken.process(b, NO_WATERMARK)
        first.process(b, NO_WATERMARK)
    restored = QueryOperator(plan)
    image = first.snapshot()
    if halves:
        for half in (set(range(0, DEFAULT_VNODES, 2)), set(range(1, DEFAULT_VNODES, 2))):
            restored.restore(image.encode(vnodes=half))
    else:
        restored.restore(image.encode())
    for b in batches[15:]:
        want, _ = unbroken.process(b, NO_WATERMARK)
        got, _ = restored.process(b, NO_WATERMARK)
        assert [x.to_pylist() for x in got] == [x.to_pylist() for x in want]
    def by_key(op: QueryOperator) -> list[dict]:  # halves restore keys in another id order
        return sorted(op.current_rows().to_pylist(), key=repr)

    assert by_key(restored) == by_key(unbroken)


@pytest.mark.parametrize("arr", [
    pa.array([1, None, 3, 4, 5, 6, 7, 8, 9, 10, 11], pa.int64()),
    pa.array(["a", "bb", None, "", "e", "f", "g", "h", "i", "j", "k"]),
    pa.array([1.5, 2.5, None, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5, 11.5]),
    pa.array([True, False, None, True, False, True, False, True, None, True, False]),
])
def test_null_where_false_keeps_values_and_offsets(arr):
    """The new bitmap lines up with sliced arrays (a non-zero offset) and keeps old NULLs."""
    for part in (arr, arr.slice(3), arr.slice(1, 7)):
        mask = np.arange(len(part)) % 3 != 1
        got = null_where_false(part, mask).to_pylist()
        want = [v if keep else None for v, keep in zip(part.to_pylist(), mask, strict=True)]
        assert got == want


@pytest.mark.parametrize(("select", "code"), [
    ("SELECT lower(sym) FILTER (WHERE qty > 1) FROM t", "LDB-1002"),              # not an aggregate
    ("SELECT sym, count(*) FILTER (WHERE count(*) > 1) FROM t GROUP BY sym", "LDB-1002"),
    ("SELECT sym, count(*) FILTER (WHERE qty + 1) FROM t GROUP BY sym", "LDB-1005"),  # not BOOLEAN
    ("SELECT sym, sum(tag) FILTER (WHERE qty > 1) FROM t GROUP BY sym", "LDB-1005"),
    ("SELECT sym, count(*) FILTER (WHERE nope > 1) FROM t GROUP BY sym", "LDB-1008"),
])
def test_filter_where_it_does_not_belong_is_a_typed_error(db, select, code):
    db.execute(DDL)
    with pytest.raises(laminardb.LaminarError) as err:
        db.execute(f"CREATE STREAM out AS {select}")
    assert err.value.code == code
    assert "FILTER" in str(err.value) or code in ("LDB-1005", "LDB-1008")
