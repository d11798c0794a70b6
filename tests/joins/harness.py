"""Rows, a reactor-like driver and DuckDB helpers for the join tests.

``make_rows(seed)`` gives two relations ``l(k, v, ts)`` and ``r(k, w, ts)`` whose event times run
out of order by up to ``DELAY`` ms — within the 2-second watermark delay, so no row is late —
with duplicate and NULL keys, cut into interleaved batches. ``run_db`` feeds them through a
connection; ``Driver`` feeds one ``PlanOperator`` as the reactor would (the query's watermark
is the minimum of its two sources'), so a test can snapshot and restore it mid-stream.
``fold`` nets a changelog by ``__weight``; ``same`` compares two tables as sorted multisets.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from oracle import duck

import laminardb
from laminardb.operators.plan_operator import PlanOperator
from laminardb.sql.ddl import parse_statement
from laminardb.sql.plan import RelationInfo
from laminardb.sql.planner import lookup_from, plan_query
from laminardb.sql.watermarks import END_OF_TIME, NO_WATERMARK

DELAY = 2000
SOURCES = f"""
CREATE SOURCE l (k BIGINT, v VARCHAR, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts - INTERVAL '{DELAY}' MILLISECOND);
CREATE SOURCE r (k BIGINT, w BIGINT, ts BIGINT NOT NULL, WATERMARK FOR ts AS ts - INTERVAL '{DELAY}' MILLISECOND);
"""
L_SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), ("ts", pa.int64())])
R_SCHEMA = pa.schema([("k", pa.int64()), ("w", pa.int64()), ("ts", pa.int64())])


def make_rows(seed: int, n: int = 600, keys: int = 40) -> list[tuple[str, pa.RecordBatch]]:
    """Interleaved batches of ``l`` and ``r``; event time advances ~50 ms a row, each row
    up to DELAY ms behind the clock (never behind its source's watermark)."""
    rnd = random.Random(seed)
    clock = 0
    out: list[tuple[str, list[dict]]] = []
    for _ in range(n):
        clock += rnd.randint(0, 100)
        src = rnd.choice("lr")
        k = None if rnd.random() < 0.05 else rnd.randint(0, keys)
        ts = max(0, clock - rnd.randint(0, DELAY))
        row = {"k": k, "v": rnd.choice(["a", "b", "x", None]), "ts": ts} if src == "l" else \
              {"k": k, "w": rnd.randint(0, 9), "ts": ts}
        if out and out[-1][0] == src and len(out[-1][1]) < rnd.randint(1, 12):
            out[-1][1].append(row)
        else:
            out.append((src, [row]))
    return [(s, pa.RecordBatch.from_pylist(rows, schema=L_SCHEMA if s == "l" else R_SCHEMA)) for s, rows in out]


def tables(batches) -> dict[str, pa.Table]:
    return {name: pa.Table.from_batches([b for s, b in batches if s == name], schema=schema)
            for name, schema in (("l", L_SCHEMA), ("r", R_SCHEMA))}


def run_db(query: str, batches, *, name: str = "j") -> tuple[pa.Table, laminardb.Connection]:
    db = laminardb.open()
    db.execute(SOURCES)
    db.execute(f"CREATE STREAM {name} AS {query}")
    sub = db.subscribe_stream(name)
    for src, b in batches:
        db.insert(src, b)
    db.finish()
    return sub.to_arrow(), db


def plan_for(query: str):
    rels = {"l": RelationInfo("l", L_SCHEMA, "ts", kind="source"), "r": RelationInfo("r", R_SCHEMA, "ts", kind="source")}
    return plan_query(parse_statement(f"CREATE STREAM j AS {query}").query, lookup_from(rels))


class Driver:
    """Feeds a ``PlanOperator`` like the reactor: per source watermark = max event time − DELAY
    after each batch; the query's watermark = the minimum of the two."""

    def __init__(self, op: PlanOperator) -> None:
        self.op = op
        self.max_ts = {"l": NO_WATERMARK, "r": NO_WATERMARK}
        self.out: list[pa.RecordBatch] = []

    @property
    def wm(self) -> int:
        wms = [NO_WATERMARK if m == NO_WATERMARK else m - DELAY for m in self.max_ts.values()]
        return min(wms)

    def feed(self, src: str, batch: pa.RecordBatch) -> None:
        before = self.wm
        outs, _ = self.op.process_input(src, batch, before)
        self.out += outs
        self.max_ts[src] = max(self.max_ts[src], int(np.max(batch.column("ts").to_numpy())))
        if self.wm > before:
            self.out += self.op.on_watermark(self.wm)

    def finish(self) -> pa.Table:
        self.out += self.op.on_watermark(END_OF_TIME)
        return pa.Table.from_batches(self.out, schema=self.op.schema)


def resumed_output(make_plan, batches, *, split: bool) -> pa.Table:
    """The output over ``batches`` (``(source, batch)`` pairs) of the plan ``make_plan()``
    builds, with a snapshot after the first half restored into a fresh operator (``split``: as
    two owners' halves of the vnodes, which add up) — what a subscriber sees across a restore."""
    from laminardb.operators.snapshot import DEFAULT_VNODES

    cut = len(batches) // 2
    first = Driver(PlanOperator(make_plan()))
    for src, b in batches[:cut]:
        first.feed(src, b)
    image = first.op.snapshot()
    fresh = PlanOperator(make_plan())
    if split:
        fresh.restore(image.encode(range(DEFAULT_VNODES // 2)))
        fresh.restore(image.encode(range(DEFAULT_VNODES // 2, DEFAULT_VNODES)))
    else:
        fresh.restore(image.encode())
    second = Driver(fresh)
    second.max_ts = dict(first.max_ts)  # the reactor restores its watermarks from the checkpoint
    for src, b in batches[cut:]:
        second.feed(src, b)
    second.finish()
    return pa.Table.from_batches(first.out + second.out, schema=fresh.schema)


def fold(t: pa.Table) -> pa.Table:
    """A changelog netted by ``__weight`` (every net weight must be 0 or positive)."""
    if "__weight" not in t.column_names:
        return t
    cols = [c for c in t.column_names if c != "__weight"]
    g = t.group_by(cols, use_threads=False).aggregate([("__weight", "sum")])
    w = g.column("__weight_sum").to_numpy()
    assert (w >= 0).all(), "a changelog retracted a row it never inserted"
    return g.select(cols).take(pa.array(np.repeat(np.arange(len(w)), w), pa.int64()))


def rows(t: pa.Table) -> list[tuple]:
    cols = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in t.columns]
    return sorted(zip(*[c.to_pylist() for c in cols], strict=True), key=repr)


def same(got: pa.Table, want: pa.Table) -> None:
    got = fold(got)
    assert got.num_columns == want.num_columns, (got.schema, want.schema)
    a, b = rows(got), rows(want)
    assert len(a) == len(b), f"{len(a)} rows, DuckDB has {len(b)}"
    assert a == b


def oracle(sql: str, batches) -> pa.Table:
    return duck(sql, **tables(batches))


__all__ = ["DELAY", "Driver", "SOURCES", "duck", "fold", "make_rows", "oracle", "pc", "plan_for", "rows", "run_db",
           "same", "tables"]
