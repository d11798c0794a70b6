"""DATE_FORMAT, REGEXP_EXTRACT, SPLIT_INDEX, the time parts and PROCTIME() run by the engine,
each checked against DuckDB's equivalent over the same rows (NULLs and edge cases included)."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

from laminardb.sql.exceptions import SqlTypeError, UnsupportedSqlError
from tests.engine.oracle import duck
from tests.sql_functions.harness import run_select

# --------------------------------------------------------------------------- rows

_EDGE_MS = [0, -1, -999, -1000, -1001, 999, 1000, 946684799999, 946684800000, 43_200_000, 43_199_999,
            4102444799999, -2208988800000, 1_700_000_000_123]


def _time_rows(n: int = 600, seed: int = 5, *, dense: bool = False) -> pa.Table:
    """Edge times, then ``n`` random ones: spread over two centuries, or (``dense``) within
    half a minute around midnight and noon, many rows per second as in a stream."""
    rng = np.random.default_rng(seed)
    lo, hi = -2_208_988_800_000, 4_102_444_799_999  # 1900-01-01 … 2099-12-31
    if dense:
        base = rng.choice(np.array([946684740000, 946727940000, -60000]), size=n)
        drawn = base + rng.integers(0, 30, size=n) * 1000 + rng.integers(0, 1000, size=n)
    else:
        drawn = rng.integers(lo, hi, size=n)
    ms = np.concatenate([np.array(_EDGE_MS), drawn])
    nulls = np.zeros(len(ms), dtype=bool)
    nulls[rng.integers(0, len(ms), size=n // 20)] = True
    nulls[1] = False
    us = ms * 1000 + rng.integers(0, 1000, size=len(ms))
    return pa.table({
        "id": pa.array(np.arange(len(ms)), pa.int64()),
        "ts": pa.array(ms, pa.timestamp("ms"), mask=nulls),
        "ts6": pa.array(us, pa.timestamp("us"), mask=nulls),
        "ms": pa.array(ms, pa.int64(), mask=nulls),
    })


TIME_DDL = "CREATE SOURCE t (id BIGINT, ts TIMESTAMP(3), ts6 TIMESTAMP(6), ms BIGINT)"

# (Java SimpleDateFormat pattern, the DuckDB strftime format that writes the same)
PATTERNS = [
    ("yyyy-MM-dd HH:mm:ss.SSS", "%Y-%m-%d %H:%M:%S.%g"),
    ("yyyy-MM-dd", "%Y-%m-%d"),
    ("HH:mm", "%H:%M"),
    ("yy/M/d H:m:s", "%y/%-m/%-d %-H:%-M:%-S"),
    ("EEE, d MMM yyyy hh:mm a", "%a, %-d %b %Y %I:%M %p"),
    ("EEEE MMMM DDD h", "%A %B %j %-I"),
    ("'T'HH'h''s' SSS 'at' mm", "T%Hh's %g at %M"),
    ("yyyy%MM''", "%Y%%%m'"),
]


def _sq(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _by_id(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


@pytest.mark.parametrize("dense", [False, True], ids=["spread", "dense"])
@pytest.mark.parametrize("java,fmt", PATTERNS)
def test_date_format_equals_duckdb_strftime(db, java, fmt, dense):
    rows = _time_rows(2_000 if dense else 600, dense=dense)
    sel = (f"SELECT id, DATE_FORMAT(ts, {_sq(java)}) AS a, DATE_FORMAT(ts6, {_sq(java)}) AS b, "
           f"DATE_FORMAT(ms, {_sq(java)}) AS c FROM t")
    got = _by_id(run_select(db, TIME_DDL, sel, rows, batch_rows=500 if dense else 97))
    want = duck(f"SELECT id, strftime(ts, {_sq(fmt)}) AS a, strftime(CAST(ts6 AS TIMESTAMP), {_sq(fmt)}) AS b, "
                f"strftime(epoch_ms(ms), {_sq(fmt)}) AS c FROM rows ORDER BY id", rows=rows)
    assert got.schema.field("a").type == pa.string()
    for col in ("a", "b", "c"):
        assert got[col].to_pylist() == want[col].to_pylist(), col
    assert got["a"].null_count == rows["ts"].null_count > 0


def test_date_format_of_nexmark_q10_columns(db):
    rows = _time_rows()
    sel = "SELECT id, DATE_FORMAT(ts, 'yyyy-MM-dd') AS dt, DATE_FORMAT(ts, 'HH:mm') AS hm FROM t WHERE ts IS NOT NULL"
    got = _by_id(run_select(db, TIME_DDL, sel, rows))
    want = duck("SELECT id, strftime(ts, '%Y-%m-%d') AS dt, strftime(ts, '%H:%M') AS hm FROM rows "
                "WHERE ts IS NOT NULL ORDER BY id", rows=rows)
    assert got.to_pylist() == want.to_pylist()


@pytest.mark.parametrize("part", ["YEAR", "MONTH", "DAYOFMONTH", "DAY", "HOUR", "MINUTE", "SECOND"])
def test_time_parts_equal_duckdb(db, part):
    rows = _time_rows()
    duck_part = {"DAYOFMONTH": "day"}.get(part, part.lower())
    got = _by_id(run_select(db, TIME_DDL, f"SELECT id, {part}(ts) AS a, {part}(ms) AS b FROM t", rows))
    want = duck(f"SELECT id, {duck_part}(ts) AS a, {duck_part}(epoch_ms(ms)) AS b FROM rows ORDER BY id", rows=rows)
    assert got.schema.field("a").type == pa.int64()
    assert got["a"].to_pylist() == want["a"].to_pylist()
    assert got["b"].to_pylist() == want["b"].to_pylist()


# --------------------------------------------------------------------------- strings

_URL_EDGES = ["https://www.nexmark.com/abc/def/item.htm?query=1&channel_id=1234", "channel_id=7",
              "a&channel_id=", "a&channel_id=x&channel_id=y", "xchannel_id=9", "", None, "é&channel_id=ü",
              "https://www.nexmark.com/a/b/item.htm?query=1", "12-345 and 6-7", "NeXmArK", "b", "a"]


def _string_rows(n: int = 500, seed: int = 11) -> pa.Table:
    rng = np.random.default_rng(seed)
    words = np.array(["abc", "x", "", "channel_id=", "&", "/", "::", "12-3", "é", "nexmark", "?q=1", "b"])
    random = ["".join(rng.choice(words, size=rng.integers(0, 8))) for _ in range(n)]
    s = _URL_EDGES + random
    idx = rng.integers(-2, 7, size=len(s)).astype(object)
    idx[rng.integers(0, len(s), size=20)] = None
    return pa.table({"id": pa.array(range(len(s)), pa.int64()), "s": pa.array(s, pa.string()),
                     "i": pa.array(list(idx), pa.int64())})


STRING_DDL = "CREATE SOURCE t (id BIGINT, s VARCHAR, i BIGINT)"

REGEXPS = [("(&|^)channel_id=([^&]*)", 2), ("(&|^)channel_id=([^&]*)", 1), ("(&|^)channel_id=([^&]*)", 0),
           ("(&|^)channel_id=([^&]*)", None), ("[0-9]+", None), (r"(\d+)-(\d+)", 2), ("(?i)NEXMARK", 0),
           ("(a)|(b)", 2), ("(?:ab)(c)", 1), (r"[(]x(\))", 1), ("é(.)", 1)]


@pytest.mark.parametrize("pattern,group", REGEXPS)
def test_regexp_extract_equals_duckdb(db, pattern, group):
    rows = _string_rows()
    args = f"s, {_sq(pattern)}" + ("" if group is None else f", {group}")
    got = _by_id(run_select(db, STRING_DDL, f"SELECT id, REGEXP_EXTRACT({args}) AS r FROM t", rows))
    # Flink: NULL when nothing matches (DuckDB gives ''), the group's text otherwise
    want = duck(f"SELECT id, CASE WHEN regexp_matches(s, {_sq(pattern)}) THEN regexp_extract({args}) END AS r "
                "FROM rows ORDER BY id", rows=rows)
    assert got["r"].to_pylist() == want["r"].to_pylist()
    assert got["r"].null_count > rows["s"].null_count  # some rows do not match


def test_regexp_extract_in_where_as_nexmark_q21(db):
    rows = _string_rows()
    sel = ("SELECT id, REGEXP_EXTRACT(s, '(&|^)channel_id=([^&]*)', 2) AS c FROM t "
           "WHERE REGEXP_EXTRACT(s, '(&|^)channel_id=([^&]*)', 2) IS NOT NULL OR lower(s) IN ('a', 'b')")
    got = _by_id(run_select(db, STRING_DDL, sel, rows))
    p = "'(&|^)channel_id=([^&]*)'"
    want = duck(f"SELECT id, CASE WHEN regexp_matches(s, {p}) THEN regexp_extract(s, {p}, 2) END AS c FROM rows "
                f"WHERE regexp_matches(s, {p}) OR lower(s) IN ('a', 'b') ORDER BY id", rows=rows)
    assert got.to_pylist() == want.to_pylist() and got.num_rows > 0


@pytest.mark.parametrize("delim", ["/", "::", "b", "&"])
def test_split_index_equals_duckdb(db, delim):
    rows = _string_rows()
    lits = ", ".join(f"SPLIT_INDEX(s, {_sq(delim)}, {k}) AS l{k + 1}" for k in range(-1, 6))
    sel = f"SELECT id, {lits}, SPLIT_INDEX(s, {_sq(delim)}, i) AS col FROM t"
    got = _by_id(run_select(db, STRING_DDL, sel, rows))

    def oracle(i: str) -> str:  # 0-based; Flink: NULL for i < 0 and for '' (no pieces at all)
        return f"CASE WHEN {i} < 0 OR s = '' THEN NULL ELSE string_split(s, {_sq(delim)})[{i} + 1] END"

    duck_lits = ", ".join(f"{oracle(str(k))} AS l{k + 1}" for k in range(-1, 6))
    want = duck(f"SELECT id, {duck_lits}, {oracle('i')} AS col FROM rows ORDER BY id", rows=rows)
    assert got.to_pylist() == want.to_pylist()
    assert got["l0"].null_count == rows.num_rows  # index -1
    assert got["l6"].null_count > got["l1"].null_count  # out of range for most rows


def test_split_index_as_nexmark_q22(db):
    rows = pa.table({"id": [1, 2, 3], "s": ["https://www.nexmark.com/abc/def/item.htm?q=1", "a/b", None],
                     "i": [0, 0, 0]})
    sel = "SELECT id, SPLIT_INDEX(s, '/', 3) AS dir1, SPLIT_INDEX(s, '/', 4) AS dir2, SPLIT_INDEX(s, '/', 5) AS dir3 FROM t"
    got = _by_id(run_select(db, STRING_DDL, sel, rows))
    assert got.to_pylist() == [{"id": 1, "dir1": "abc", "dir2": "def", "dir3": "item.htm?q=1"},
                               {"id": 2, "dir1": None, "dir2": None, "dir3": None},
                               {"id": 3, "dir1": None, "dir2": None, "dir3": None}]


# --------------------------------------------------------------------------- PROCTIME()


def test_proctime_is_the_wall_clock_when_the_batch_is_processed(db):
    rows = pa.table({"id": pa.array(range(300), pa.int64()), "s": ["x"] * 300, "i": [0] * 300})
    before = time.time_ns() // 1_000_000
    got = run_select(db, STRING_DDL, "SELECT id, PROCTIME() AS p, HOUR(PROCTIME()) AS h FROM t", rows, batch_rows=100)
    after = time.time_ns() // 1_000_000
    assert got.schema.field("p").type == pa.timestamp("ms")
    ms = got["p"].cast(pa.int64()).to_pylist()
    assert all(before <= m <= after for m in ms) and got["p"].null_count == 0
    assert len(set(ms[:100])) == 1  # one processing time per batch
    assert got["h"].to_pylist()[0] == time.gmtime(ms[0] / 1000).tm_hour


def test_proctime_in_a_flink_view(db):
    db.execute("CREATE SOURCE bid (auction BIGINT, price BIGINT)")
    db.execute("CREATE TEMPORARY VIEW b AS SELECT *, PROCTIME() AS p_time FROM bid")
    sub = db.subscribe_stream("b")
    db.insert("bid", [{"auction": 1, "price": 2}])
    row = sub.to_arrow().to_pylist()[0]
    assert row["auction"] == 1 and row["price"] == 2 and row["p_time"] is not None


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("expr,error,fragment", [
    ("DATE_FORMAT(ts, 'yyyy-ww')", UnsupportedSqlError, "'ww' is not supported"),
    ("DATE_FORMAT(ts, 'yyyy ''x')", UnsupportedSqlError, "unterminated quote"),
    ("DATE_FORMAT(ts, s)", UnsupportedSqlError, "must be a string literal"),
    ("DATE_FORMAT(s, 'yyyy')", SqlTypeError, "expected TIMESTAMP, DATE or BIGINT"),
    ("DATE_FORMAT(ts)", SqlTypeError, "takes 2 arguments"),
    ("REGEXP_EXTRACT(s, '(a)', 2)", SqlTypeError, "group 2 does not exist"),
    ("REGEXP_EXTRACT(s, 'a(?=b)')", UnsupportedSqlError, "not valid RE2"),
    ("REGEXP_EXTRACT(s, s)", UnsupportedSqlError, "string literal"),
    ("REGEXP_EXTRACT(s, '(a)', i)", UnsupportedSqlError, "integer literal"),
    ("SPLIT_INDEX(s, '', 1)", UnsupportedSqlError, "must not be empty"),
    ("SPLIT_INDEX(s, '/', 'x')", SqlTypeError, "must be an integer"),
    ("SPLIT_INDEX(id, '/', 1)", SqlTypeError, "expected VARCHAR"),
    ("PROCTIME(1)", SqlTypeError, "takes 0 arguments"),
    ("NO_SUCH_FN(s)", UnsupportedSqlError, "conn.register_udf('no_such_fn'"),
])
def test_misuse_is_a_typed_error_at_create(db, expr, error, fragment):
    db.execute("CREATE SOURCE t (id BIGINT, s VARCHAR, i BIGINT, ts TIMESTAMP(3))")
    with pytest.raises(error) as e:
        db.execute(f"CREATE STREAM out AS SELECT {expr} AS x FROM t")
    assert fragment in str(e.value)
