"""Window TVFs without an aggregate (Flink's ``SELECT * FROM TABLE(TUMBLE(…))``): every input row
with ``window_start``, ``window_end`` and ``window_time``, once per window it belongs to (HOP),
as it arrives; checked against DuckDB over the same rows. Also: a window join of two such TVFs,
and qualified window bounds in a join's SELECT list named without their qualifier."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pyarrow as pa
import pytest

import laminardb
from laminardb.errors import LaminarError
from laminardb.sql.exceptions import UnsupportedSqlError
from tests.engine.oracle import oracle_connection

DELAY = 1000
SOURCE = f"CREATE SOURCE t (k BIGINT, v VARCHAR, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts - INTERVAL '{DELAY}' MILLISECOND)"
T_SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), ("ts", pa.int64())])
BOUNDS = ["window_start", "window_end", "window_time"]


def duck(sql: str, **tables: pa.Table) -> list[tuple]:
    return sorted(oracle_connection(**tables).execute(sql).fetchall(), key=repr)


def rows_of(table: pa.Table) -> list[tuple]:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def batches(seed: int, n: int = 400, *, late: bool = True) -> list[list[dict]]:
    """Rows of ``t`` in batches; event time runs out of order, some rows (``late``) far behind
    the watermark, a few before 1970 (negative epoch ms: windows floor, not truncate)."""
    rnd = random.Random(seed)
    clock, rows = -2500, []
    for _ in range(n):
        clock += rnd.randint(0, 60)
        ts = clock - rnd.randint(0, DELAY)
        if late and rnd.random() < 0.1:
            ts -= rnd.randint(DELAY, 5 * DELAY)
        rows.append({"k": rnd.randint(0, 5), "v": rnd.choice(["a", "b", None]), "ts": ts})
    out, i = [], 0
    while i < len(rows):
        j = i + rnd.randint(1, 25)
        out.append(rows[i:j])
        i = j
    return out


def run(query: str, parts: list[list[dict]], *, source: str = SOURCE, extra: tuple[str, ...] = ()) -> pa.Table:
    db = laminardb.open()
    db.execute(source)
    for stmt in extra:
        db.execute(stmt)
    db.execute(f"CREATE STREAM s AS {query}")
    sub = db.subscribe_stream("s")
    for rows in parts:
        db.insert("t", pa.RecordBatch.from_pylist(rows, schema=T_SCHEMA))
    db.finish()
    out = sub.to_arrow()
    db.close()
    return out


def table_of(parts: list[list[dict]]) -> pa.Table:
    return pa.Table.from_pylist([r for p in parts for r in p], schema=T_SCHEMA)


# --------------------------------------------------------------------------- TUMBLE / HOP, all rows
@pytest.mark.parametrize("size,offset", [(1000, 0), (1000, 300), (700, 0)])
def test_tumble_gives_every_row_with_its_window(size, offset):
    parts = batches(1)
    args = f"INTERVAL '{size}' MILLISECOND" + (f", INTERVAL '{offset}' MILLISECOND" if offset else "")
    got = run(f"SELECT * FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), {args}))", parts)
    assert got.column_names == ["k", "v", "ts", *BOUNDS]
    assert "__weight" not in got.column_names
    start = f"CAST(floor((ts - {offset}) / {size}) AS BIGINT) * {size} + {offset}"
    want = duck(f"SELECT *, {start}, {start} + {size}, {start} + {size} - 1 FROM t", t=table_of(parts))
    assert rows_of(got) == want and len(want) == 400  # late rows too: nothing is dropped


@pytest.mark.parametrize("slide,size", [(250, 1000), (300, 1000), (1000, 1000)])
def test_hop_gives_a_row_per_window_it_belongs_to(slide, size):
    parts = batches(2)
    got = run(f"SELECT * FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '{slide}' MILLISECOND, "
              f"INTERVAL '{size}' MILLISECOND))", parts)
    assert got.column_names == ["k", "v", "ts", *BOUNDS]
    starts = (f"unnest(generate_series(CAST(floor((ts - {size}) / {slide}) AS BIGINT) + 1, "
              f"CAST(floor(ts / {slide}) AS BIGINT))) * {slide}")
    want = duck(f"SELECT k, v, ts, s, s + {size}, s + {size} - 1 FROM (SELECT *, {starts} AS s FROM t)",
                t=table_of(parts))
    assert rows_of(got) == want and len(want) >= 400 * (size // slide)


def test_projection_where_and_expressions_over_the_windows():
    parts = batches(3)
    got = run("SELECT k, window_start, window_end, window_end - ts AS rest FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), "
              "INTERVAL '500' MILLISECOND, INTERVAL '2' SECOND)) WHERE k > 2 AND window_start >= 0", parts)
    assert got.column_names == ["k", "window_start", "window_end", "rest"]
    starts = "unnest(generate_series(CAST(floor((ts - 2000) / 500) AS BIGINT) + 1, CAST(floor(ts / 500) AS BIGINT))) * 500"
    want = duck(f"SELECT k, s, s + 2000, s + 2000 - ts FROM (SELECT *, {starts} AS s FROM t) WHERE k > 2 AND s >= 0",
                t=table_of(parts))
    assert rows_of(got) == want and want


def test_qualified_columns_and_a_subquery_over_the_tvf():
    parts = batches(4)
    got = run("SELECT q.k, q.window_start FROM (SELECT t.k, t.window_start FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), "
              "INTERVAL '1' SECOND)) AS t WHERE t.v = 'a') AS q", parts)
    want = duck("SELECT k, CAST(floor(ts / 1000) AS BIGINT) * 1000 FROM t WHERE v = 'a'", t=table_of(parts))
    assert got.column_names == ["k", "window_start"] and rows_of(got) == want


def test_rows_come_out_as_they_arrive_and_none_is_late():
    db = laminardb.open()
    db.execute(SOURCE)
    db.execute("CREATE STREAM s AS SELECT k, ts, window_start FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND))")
    sub = db.subscribe_stream("s")
    db.insert("t", [{"k": 1, "v": "a", "ts": 10_500}])
    assert sub.try_next().to_pylist() == [{"k": 1, "ts": 10_500, "window_start": 10_000}]  # no watermark wait
    db.insert("t", [{"k": 2, "v": "a", "ts": 1_200}])  # 8.3 s behind the watermark: still windowed
    assert sub.try_next().to_pylist() == [{"k": 2, "ts": 1_200, "window_start": 1_000}]
    db.close()


def test_timestamp_column_keeps_its_type():
    db = laminardb.open()
    db.execute("CREATE SOURCE t (k BIGINT, ts TIMESTAMP(3) NOT NULL, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)")
    db.execute("CREATE STREAM s AS SELECT * FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '30' SECOND, "
               "INTERVAL '1' MINUTE))")
    sub = db.subscribe_stream("s")
    t0 = datetime(2024, 1, 2, 10, 0, 45)
    db.insert("t", [{"k": 1, "ts": t0}])
    db.finish()
    got = sub.to_arrow()
    assert [got.schema.field(n).type for n in BOUNDS] == [pa.timestamp("ms")] * 3
    m = timedelta(minutes=1)
    starts = [datetime(2024, 1, 2, 10, 0, 30), datetime(2024, 1, 2, 10, 0, 0)]
    want = [(1, t0, s, s + m, s + m - timedelta(milliseconds=1)) for s in starts]
    assert sorted(tuple(r.values()) for r in got.to_pylist()) == sorted(want)
    db.close()


def test_a_row_with_no_time_has_no_window():
    db = laminardb.open()
    db.execute("CREATE SOURCE t (k BIGINT, ts BIGINT)")  # no watermark: the bounds carry no event time
    db.execute("CREATE STREAM s AS SELECT * FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND))")
    sub = db.subscribe_stream("s")
    db.insert("t", [{"k": 1, "ts": 1500}, {"k": 2, "ts": None}, {"k": 3, "ts": 10}])
    db.finish()
    assert sorted(sub.to_arrow().to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "ts": 1500, "window_start": 1000, "window_end": 2000, "window_time": 1999},
        {"k": 3, "ts": 10, "window_start": 0, "window_end": 1000, "window_time": 999}]
    db.close()


def test_windows_over_the_tvf_rows_close_like_the_window_aggregate():
    """The bounds are event time: GROUP BY them in a second stream is a window aggregate that
    closes with them (append-only), giving what the TVF's own aggregate gives (late rows too)."""
    parts = batches(5)
    tvf = "TABLE(HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '250' MILLISECOND, INTERVAL '1' SECOND))"
    direct = run(f"SELECT k, window_start, window_end, count(*) AS n FROM {tvf} GROUP BY k, window_start, window_end",
                 parts)
    cascade = run("SELECT k, window_start, window_end, count(*) AS n FROM w GROUP BY k, window_start, window_end",
                  parts, extra=(f"CREATE STREAM w AS SELECT * FROM {tvf}",))
    assert "__weight" not in cascade.column_names
    assert rows_of(cascade) == rows_of(direct) and direct.num_rows > 0


def test_top_n_per_window_over_the_tvf():
    """ROW_NUMBER() per window over the TVF's rows (Flink's window Top-N), a changelog here:
    netted, it is the top rows of each window."""
    parts = batches(9, late=False)
    got = run("SELECT k, ts, window_start, rn FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, "
              "window_end ORDER BY ts DESC) AS rn FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND))) "
              "WHERE rn <= 2", parts)
    net: dict[tuple, int] = {}
    for r in got.to_pylist():
        w = r.pop("__weight")
        net[tuple(r.values())] = net.get(tuple(r.values()), 0) + w
    assert all(w in (0, 1) for w in net.values())
    ws = "CAST(floor(ts / 1000) AS BIGINT) * 1000"
    want = duck(f"""SELECT k, ts, ws, rn FROM (SELECT k, ts, {ws} AS ws, ROW_NUMBER() OVER (PARTITION BY {ws}
                    ORDER BY ts DESC) AS rn FROM t) WHERE rn <= 2""", t=table_of(parts))
    assert sorted((r for r, w in net.items() if w), key=repr) == want and want


# --------------------------------------------------------------------------- window joins
JOIN_SOURCES = (f"CREATE SOURCE l (k BIGINT, v VARCHAR, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts - INTERVAL "
                f"'{DELAY}' MILLISECOND); CREATE SOURCE r (k BIGINT, w BIGINT, ts BIGINT NOT NULL, WATERMARK FOR ts "
                f"AS ts - INTERVAL '{DELAY}' MILLISECOND)")
L_SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), ("ts", pa.int64())])
R_SCHEMA = pa.schema([("k", pa.int64()), ("w", pa.int64()), ("ts", pa.int64())])


def join_inputs(seed: int) -> list[tuple[str, pa.RecordBatch]]:
    """Interleaved batches of ``l`` and ``r``, none behind its source's watermark."""
    rnd = random.Random(seed)
    clock, out = 0, []
    for _ in range(150):
        clock += rnd.randint(0, 80)
        src = rnd.choice("lr")
        row = {"k": rnd.randint(0, 6), "ts": clock - rnd.randint(0, DELAY)}
        row |= {"v": rnd.choice("ab")} if src == "l" else {"w": rnd.randint(0, 9)}
        out.append((src, pa.RecordBatch.from_pylist([row], schema=L_SCHEMA if src == "l" else R_SCHEMA)))
    return out


def run_join(query: str, inputs) -> tuple[pa.Table, object]:
    db = laminardb.open()
    db.execute(JOIN_SOURCES)
    db.execute(f"CREATE STREAM j AS {query}")
    (join,) = db.engine.reactor.nodes["j"].op.joins()
    sub = db.subscribe_stream("j")
    for src, b in inputs:
        db.insert(src, b)
    db.finish()
    out = sub.to_arrow()
    db.close()
    return out, join


def join_tables(inputs) -> dict[str, pa.Table]:
    return {name: pa.Table.from_batches([b for s, b in inputs if s == name], schema=schema)
            for name, schema in (("l", L_SCHEMA), ("r", R_SCHEMA))}


def tvf(table: str) -> str:
    return f"TABLE(TUMBLE(TABLE {table}, DESCRIPTOR(ts), INTERVAL '1' SECOND))"


@pytest.mark.parametrize("form", ["subquery", "direct"])
def test_flinks_window_join_of_two_tvfs(form):
    """Flink's window join example: a FULL JOIN of two TVFs on the key and both window bounds;
    the equal bounds bound the join's state, and the output is append-only."""
    left, right = ((f"(SELECT * FROM {tvf('l')})", f"(SELECT * FROM {tvf('r')})") if form == "subquery"
                   else (tvf("l"), tvf("r")))
    inputs = join_inputs(6)
    got, join = run_join(
        f"SELECT L.k AS lk, L.v, R.w, COALESCE(L.window_start, R.window_start) AS window_start, "
        f"COALESCE(L.window_end, R.window_end) AS window_end FROM {left} L FULL JOIN {right} R "
        "ON L.k = R.k AND L.window_start = R.window_start AND L.window_end = R.window_end", inputs)
    assert join.join.interval is not None
    assert "__weight" not in got.column_names
    ws = "CAST(floor(ts / 1000) AS BIGINT) * 1000"
    want = duck(f"""WITH a AS (SELECT *, {ws} AS ws FROM l), b AS (SELECT *, {ws} AS ws FROM r)
                    SELECT a.k, a.v, b.w, COALESCE(a.ws, b.ws), COALESCE(a.ws, b.ws) + 1000
                    FROM a FULL JOIN b ON a.k = b.k AND a.ws = b.ws""", **join_tables(inputs))
    assert rows_of(got) == want and len(want) > 50


def test_qualified_window_bounds_in_a_join_are_named_without_the_qualifier():
    """``SELECT a.window_start, b.window_end`` over a window join names them window_start and
    window_end (a second window_start gets a suffix, as any repeated column)."""
    inputs = join_inputs(7)
    agg = ("(SELECT k, window_start, window_end, {agg} FROM " + "{tvf} GROUP BY k, window_start, window_end)")
    got, _ = run_join(
        "SELECT a.k, a.window_start, b.window_end, b.window_start, a.n, b.m FROM "
        + agg.format(agg="count(*) AS n", tvf=tvf("l")) + " a JOIN "
        + agg.format(agg="sum(w) AS m", tvf=tvf("r")) + " b "
        "ON a.k = b.k AND a.window_start = b.window_start AND a.window_end = b.window_end", inputs)
    assert got.column_names == ["k", "window_start", "window_end", "window_start0", "n", "m"]
    ws = "CAST(floor(ts / 1000) AS BIGINT) * 1000"
    want = duck(f"""WITH a AS (SELECT k, {ws} AS ws, count(*) AS n FROM l GROUP BY ALL),
                         b AS (SELECT k, {ws} AS ws, sum(w) AS m FROM r GROUP BY ALL)
                    SELECT a.k, a.ws, b.ws + 1000, b.ws, a.n, b.m FROM a JOIN b ON a.k = b.k AND a.ws = b.ws""",
                **join_tables(inputs))
    assert rows_of(got) == want and want


# --------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("query,fragment", [
    ("SELECT * FROM TABLE(SESSION(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND))", "GROUP BY window_start"),
    ("SELECT * FROM TABLE(CUMULATE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '1' MINUTE))",
     "not supported yet; use HOP"),
    ("SELECT * FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MILLISECOND, INTERVAL '1' SECOND))",
     "use a larger slide"),
    ("SELECT * FROM TABLE(TUMBLE(TABLE w, DESCRIPTOR(ts), INTERVAL '1' SECOND))", "has window_start"),
])
def test_tvfs_it_cannot_expand_are_refused_with_a_typed_error(query, fragment):
    db = laminardb.open()
    db.execute(SOURCE)
    db.execute("CREATE STREAM w AS SELECT * FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND))")
    with pytest.raises(UnsupportedSqlError) as e:
        db.execute(f"CREATE STREAM s AS {query}")
    assert isinstance(e.value, LaminarError) and e.value.code == "LDB-1002" and fragment in str(e.value)
    db.close()
