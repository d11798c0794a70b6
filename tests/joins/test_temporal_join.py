"""Temporal joins: the event-time join against a versioned source (``PRIMARY KEY … NOT ENFORCED``,
upsert semantics) checked against DuckDB's correlated "latest version at or before" query over
the same out-of-order rows; its bounded state and snapshot/restore; the processing-time lookup
join against a source, a view's changelog and a file; typed refusals."""

from __future__ import annotations

import pyarrow as pa
import pytest

import laminardb
from laminardb.operators.plan_operator import PlanOperator
from laminardb.operators.snapshot import DEFAULT_VNODES
from laminardb.sql.exceptions import SqlParseError, UnsupportedJoinError, UnsupportedSqlError
from laminardb.sql.plan import RelationInfo
from laminardb.sql.planner import lookup_from, plan_query
from tests.joins.harness import (
    DELAY,
    L_SCHEMA,
    R_SCHEMA,
    Driver,
    duck,
    make_rows,
    resumed_output,
    rows,
    same,
    tables,
)

VERSIONED = f"""
CREATE SOURCE l (k BIGINT, v VARCHAR, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts - INTERVAL '{DELAY}' MILLISECOND);
CREATE SOURCE r (k BIGINT, w BIGINT, ts BIGINT NOT NULL, PRIMARY KEY (k) NOT ENFORCED,
                 WATERMARK FOR ts AS ts - INTERVAL '{DELAY}' MILLISECOND);
"""
_COLS = "l.k, l.v, l.ts, r.w, r.ts AS rts"


def _query(kind: str = "") -> str:
    return f"SELECT {_COLS} FROM l {kind} JOIN r FOR SYSTEM_TIME AS OF l.ts ON l.k = r.k"


def _oracle(batches, kind: str = "") -> pa.Table:
    """The version of each left row's key at its time: the right row of greatest (ts, arrival)
    at or before it — a correlated query, independent of any ASOF implementation."""
    t = tables(batches)
    r = t["r"].append_column("seq", pa.array(range(t["r"].num_rows), pa.int64()))
    join = "LEFT JOIN" if kind else "JOIN"
    return duck(f"""SELECT {_COLS} FROM l {join} r ON l.k = r.k AND (r.ts, r.seq) = (
                      SELECT max((r2.ts, r2.seq)) FROM r r2 WHERE r2.k = l.k AND r2.ts <= l.ts)""", l=t["l"], r=r)


def _run(query: str, batches) -> tuple[pa.Table, laminardb.Connection]:
    db = laminardb.open()
    db.execute(VERSIONED)
    db.execute(f"CREATE STREAM j AS {query}")
    sub = db.subscribe_stream("j")
    for src, b in batches:
        db.insert(src, b)
    db.finish()
    return sub.to_arrow(), db


def _plan(query: str):
    from laminardb.sql.ddl import parse_statement

    rels = {"l": RelationInfo("l", L_SCHEMA, "ts", kind="source"),
            "r": RelationInfo("r", R_SCHEMA, "ts", kind="source", primary_key=("k",))}
    return plan_query(parse_statement(f"CREATE STREAM j AS {query}").query, lookup_from(rels))


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kind", ["", "LEFT"])
def test_event_time_temporal_join_equals_duckdb(kind, seed):
    batches = make_rows(seed)  # with versions of equal time: the later arrival is the version
    got, db = _run(_query(kind), batches)
    assert "__weight" not in got.column_names
    assert db.metrics()["late_events_dropped"] == 0
    same(got, _oracle(batches, kind))
    db.close()


def test_version_state_is_bounded_by_the_watermark():
    batches = make_rows(4, n=3000, keys=20)
    d = Driver(PlanOperator(_plan(_query("LEFT"))))
    join = d.op.joins()[0]
    for src, b in batches:
        d.feed(src, b)
        left, right = join.state_rows()
        assert right <= 21 + 80 and left <= 80, (left, right)  # the latest version per key + newer ones
    d.out += d.op.on_watermark(max(d.max_ts.values()) + 10_000)
    assert join.state_rows() == (0, 21)
    same(d.finish(), _oracle(batches, "LEFT"))


@pytest.mark.parametrize("split", [False, True])
def test_restore_mid_stream_gives_the_same_output(split):
    batches = make_rows(5)
    got = resumed_output(lambda: _plan(_query("LEFT")), batches, split=split)
    same(got, _oracle(batches, "LEFT"))


def test_explain_names_the_temporal_join():
    db = laminardb.open()
    db.execute(VERSIONED)
    plan = "\n".join(db.execute(f"EXPLAIN {_query()}").to_arrow()["plan"].to_pylist())
    assert "TemporalJoin[event time" in plan
    db.close()


@pytest.mark.parametrize("ddl,sql,error,fragment", [
    ("CREATE SOURCE s (k BIGINT, w BIGINT, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts)",
     "SELECT l.k FROM l JOIN s FOR SYSTEM_TIME AS OF l.ts ON l.k = s.k", UnsupportedJoinError,
     "needs a versioned source"),
    ("CREATE SOURCE s (k BIGINT, c BIGINT, ts BIGINT NOT NULL, PRIMARY KEY (k, c) NOT ENFORCED, "
     "WATERMARK FOR ts AS ts)", "SELECT l.k FROM l JOIN s FOR SYSTEM_TIME AS OF l.ts ON l.k = s.k",
     UnsupportedJoinError, "whole primary key"),
    ("CREATE SOURCE s (k BIGINT, ts BIGINT, PRIMARY KEY (k) NOT ENFORCED)",
     "SELECT l.k FROM l JOIN s FOR SYSTEM_TIME AS OF l.ts ON l.k = s.k", UnsupportedJoinError,
     "needs its event time"),
    ("CREATE SOURCE s (k BIGINT, PRIMARY KEY (k))", None, UnsupportedSqlError, "NOT ENFORCED"),
    ("CREATE SOURCE s (k BIGINT, PRIMARY KEY (x) NOT ENFORCED)", None, SqlParseError, "no column 'x'"),
    ("CREATE SOURCE s (k BIGINT, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts)",
     "SELECT l.k FROM l FULL JOIN s FOR SYSTEM_TIME AS OF l.ts ON l.k = s.k", UnsupportedJoinError,
     "only inner and LEFT"),
])
def test_bad_temporal_joins_are_refused_with_a_typed_error(ddl, sql, error, fragment):
    db = laminardb.open()
    db.execute(VERSIONED)
    with pytest.raises(error) as e:
        db.execute(ddl)
        db.execute(f"CREATE STREAM j AS {sql}")
    assert e.value.code.startswith("LDB-1") and fragment in str(e.value)
    db.close()


# --------------------------------------------------------------------------- lookup (processing time)
_LOOKUP = ("SELECT b.k, b.v, s.w FROM (SELECT *, PROCTIME() AS pt FROM l) AS b {kind} JOIN {table} "
           "FOR SYSTEM_TIME AS OF b.pt AS s ON b.k = s.k")


def _drain(sub) -> list[dict]:
    out = []
    while (b := sub.try_next()) is not None:
        out += pa.Table.from_batches([b]).to_pylist()
    return sorted(out, key=repr)


@pytest.mark.parametrize("kind", ["", "LEFT"])
def test_lookup_join_reads_the_table_as_of_each_arrival(kind):
    db = laminardb.open()
    db.execute(VERSIONED)
    db.execute(f"CREATE STREAM j AS {_LOOKUP.format(kind=kind, table='r')}")
    sub = db.subscribe_stream("j")
    db.insert("r", [{"k": 1, "w": 10, "ts": 100}, {"k": 2, "w": 20, "ts": 100}])
    db.insert("l", [{"k": 1, "v": "a", "ts": 0}, {"k": 3, "v": "c", "ts": 0}])
    first = _drain(sub)  # at once, whatever the watermarks
    want = [{"k": 1, "v": "a", "w": 10}] + ([{"k": 3, "v": "c", "w": None}] if kind else [])
    assert first == sorted(want, key=repr)
    db.insert("r", [{"k": 1, "w": 11, "ts": 50}, {"k": 3, "w": 30, "ts": 50}])  # no revision of what was emitted
    assert _drain(sub) == []
    db.insert("l", [{"k": 1, "v": "b", "ts": 0}, {"k": 3, "v": "d", "ts": 0}])
    assert _drain(sub) == sorted([{"k": 1, "v": "b", "w": 10}, {"k": 1, "v": "b", "w": 11},
                                  {"k": 3, "v": "d", "w": 30}], key=repr)
    db.close()


def test_lookup_join_against_a_view_follows_its_changelog():
    db = laminardb.open()
    db.execute(VERSIONED)
    db.execute("CREATE MATERIALIZED VIEW counts AS SELECT k, count(*) AS w FROM r GROUP BY k EMIT CHANGES")
    db.execute(f"CREATE STREAM j AS {_LOOKUP.format(kind='LEFT', table='counts')}")
    sub = db.subscribe_stream("j")
    seen = []
    for n in range(1, 4):
        db.insert("r", [{"k": 1, "w": 0, "ts": n}])
        db.insert("l", [{"k": 1, "v": str(n), "ts": n}, {"k": 2, "v": str(n), "ts": n}])
        seen += _drain(sub)
    # each left row sees the count as it was when it came: the old counts were retracted
    assert sorted(seen, key=repr) == sorted([{"k": 1, "v": str(n), "w": n} for n in range(1, 4)] +
                                            [{"k": 2, "v": str(n), "w": None} for n in range(1, 4)], key=repr)
    assert sum(db.engine.reactor.nodes["j"].op.joins()[0].state_rows()) == 1  # one live row of counts
    db.close()


def test_lookup_join_state_survives_a_snapshot():
    db = laminardb.open()
    db.execute(VERSIONED)
    db.execute(f"CREATE STREAM j AS {_LOOKUP.format(kind='', table='r')}")
    db.insert("r", [{"k": k, "w": k * 10, "ts": 1} for k in range(50)])
    op = db.engine.reactor.nodes["j"].op
    fresh = PlanOperator(op.plan)
    image = op.snapshot()
    fresh.restore(image.encode(range(DEFAULT_VNODES // 2)))
    fresh.restore(image.encode(range(DEFAULT_VNODES // 2, DEFAULT_VNODES)))
    left = pa.RecordBatch.from_pylist([{"k": k, "v": "x", "ts": 5} for k in range(0, 60, 7)], schema=L_SCHEMA)
    a, _ = op.process_input("l", left)
    b, _ = fresh.process_input("l", left)
    assert rows(pa.Table.from_batches(a)) == rows(pa.Table.from_batches(b)) != []
    db.close()
