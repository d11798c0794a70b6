"""ASOF and event-time temporal joins over a changelog input are refused with a typed error that
says what to do instead; and what it says to do (a windowed aggregate that emits on window
close, upstream) runs and gives DuckDB's ASOF JOIN over the same rows.

Why refused and not supported: either join emits a left row once, when its match is final, and
then forgets the right rows no later left row needs; a retraction of an emitted row would have to
revise a match made from rows no longer held, and a changelog (EMIT CHANGES) has no event time
to say when a match is final."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

import laminardb
from laminardb.errors import LaminarError
from laminardb.sql.exceptions import UnsupportedJoinError
from tests.engine.oracle import oracle_connection

SOURCES = """
CREATE SOURCE l (k BIGINT, v VARCHAR, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
CREATE SOURCE r (k BIGINT, w BIGINT, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
CREATE SOURCE rv (k BIGINT, w BIGINT, ts BIGINT NOT NULL, PRIMARY KEY (k) NOT ENFORCED,
                  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
CREATE STREAM lc AS SELECT k, count(*) AS n, max(ts) AS ts FROM l GROUP BY k EMIT CHANGES;
CREATE STREAM rc AS SELECT k, sum(w) AS w, max(ts) AS ts FROM r GROUP BY k EMIT CHANGES;
"""
L_SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), ("ts", pa.int64())])
R_SCHEMA = pa.schema([("k", pa.int64()), ("w", pa.int64()), ("ts", pa.int64())])


@pytest.mark.parametrize("sql,side", [
    ("SELECT lc.k FROM lc ASOF JOIN r MATCH_CONDITION(lc.ts >= r.ts) ON lc.k = r.k", "its left input"),
    ("SELECT l.k FROM l ASOF LEFT JOIN rc MATCH_CONDITION(l.ts >= rc.ts) ON l.k = rc.k", "its right input 'rc'"),
    ("SELECT l.k FROM l ASOF JOIN rc ON l.k = rc.k AND l.ts <= rc.ts", "its right input 'rc'"),
    ("SELECT lc.k, rv.w FROM lc JOIN rv FOR SYSTEM_TIME AS OF lc.ts ON lc.k = rv.k", "its left input"),
    ("SELECT l.k, rc.w FROM l JOIN rc FOR SYSTEM_TIME AS OF l.ts ON l.k = rc.k", "its right input 'rc'"),
])
def test_a_changelog_input_is_refused_saying_what_to_do(sql, side):
    db = laminardb.open()
    db.execute(SOURCES)
    with pytest.raises(UnsupportedJoinError) as e:
        db.execute(f"CREATE STREAM j AS {sql}")
    err = e.value
    assert isinstance(err, LaminarError) and err.code == "LDB-1002"
    msg = str(err)
    assert f"{side} is a changelog" in msg and "EMIT ON WINDOW CLOSE" in msg and "PROCTIME()" in msg
    db.close()


def test_a_lookup_join_as_of_processing_time_still_reads_a_changelog():
    db = laminardb.open()
    db.execute(SOURCES)
    db.execute("CREATE STREAM j AS SELECT b.k, rc.w FROM (SELECT *, PROCTIME() AS pt FROM l) AS b "
               "JOIN rc FOR SYSTEM_TIME AS OF b.pt ON b.k = rc.k")
    db.close()


def _inputs(seed: int) -> list[tuple[str, list[dict]]]:
    """Rows of ``l`` and ``r``, none behind its source's watermark."""
    rnd = random.Random(seed)
    clock, out = 0, []
    for _ in range(300):
        clock += rnd.randint(0, 60)
        src = rnd.choice("lr")
        row = {"k": rnd.randint(0, 4), "ts": clock - rnd.randint(0, 1000)}
        row |= {"v": rnd.choice("ab")} if src == "l" else {"w": rnd.randint(0, 9)}
        out.append((src, [row]))
    return out


def test_the_advice_runs_a_window_closed_aggregate_joined_asof():
    """EMIT ON WINDOW CLOSE upstream: the bars are append-only, window_end their event time."""
    db = laminardb.open()
    db.execute(SOURCES)
    db.execute("CREATE STREAM bars AS SELECT k, window_end, sum(w) AS total FROM TABLE(TUMBLE(TABLE r, "
               "DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY k, window_start, window_end EMIT ON WINDOW CLOSE")
    db.execute("CREATE STREAM j AS SELECT l.k, l.ts, b.window_end, b.total FROM l "
               "ASOF JOIN bars b MATCH_CONDITION(l.ts >= b.window_end) ON l.k = b.k")
    sub = db.subscribe_stream("j")
    inputs = _inputs(8)
    for src, rows in inputs:
        db.insert(src, rows)
    db.finish()
    got = sorted(tuple(r.values()) for r in sub.to_arrow().to_pylist())
    db.close()
    con = oracle_connection(**{name: pa.Table.from_pylist([x for s, rows in inputs if s == name for x in rows],
                                                          schema=schema)
                               for name, schema in (("l", L_SCHEMA), ("r", R_SCHEMA))})
    want = sorted(con.execute("""
        WITH bars AS (SELECT k, CAST(floor(ts / 1000) AS BIGINT) * 1000 + 1000 AS we, sum(w) AS total
                      FROM r GROUP BY ALL)
        SELECT l.k, l.ts, bars.we, bars.total FROM l ASOF JOIN bars ON l.k = bars.k AND l.ts >= bars.we""").fetchall())
    assert got == want and len(want) > 50
