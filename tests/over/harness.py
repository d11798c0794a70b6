"""Rows, a reactor-like driver and DuckDB helpers for the OVER (Top-N, deduplication) tests.

``make_batches(seed)`` gives one source ``s(k, g, v, ts, seq)`` whose event times run out of
order by up to ``DELAY`` ms (never behind the watermark, so no row is late), with repeated and
NULL partition keys and sort values; ``seq`` is the arrival order, which DuckDB uses to break
ties the way Flink does (earlier arrival first; later first for keep-last deduplication).
``run_db`` feeds the batches through a connection; ``Driver`` feeds one ``PlanOperator`` as the
reactor would, so a test can look at the output after every batch, or snapshot and restore.
``fold`` nets a changelog by ``__weight``; ``same`` compares two tables as sorted multisets.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa

import laminardb
from laminardb.operators.plan_operator import PlanOperator
from laminardb.sql.ddl import parse_statement
from laminardb.sql.plan import RelationInfo
from laminardb.sql.planner import lookup_from, plan_query
from laminardb.sql.watermarks import END_OF_TIME, NO_WATERMARK
from tests.engine.oracle import duck

DELAY = 2000
SOURCE = (f"CREATE SOURCE s (k BIGINT, g VARCHAR, v BIGINT, ts BIGINT NOT NULL, seq BIGINT, "
          f"WATERMARK FOR ts AS ts - INTERVAL '{DELAY}' MILLISECOND)")
SCHEMA = pa.schema([("k", pa.int64()), ("g", pa.string()), ("v", pa.int64()), ("ts", pa.int64()),
                    ("seq", pa.int64())])


def make_batches(seed: int, n: int = 900, keys: int = 12) -> list[pa.RecordBatch]:
    rnd = random.Random(seed)
    clock = 0
    rows = []
    for i in range(n):
        clock += rnd.randint(0, 60)
        rows.append({"k": None if rnd.random() < 0.05 else rnd.randint(0, keys),
                     "g": rnd.choice(["a", "b", None]),
                     "v": None if rnd.random() < 0.05 else rnd.randint(0, 30),
                     "ts": max(0, clock - rnd.randint(0, DELAY)), "seq": i})
    out, at = [], 0
    while at < n:
        m = rnd.randint(1, 40)
        out.append(pa.RecordBatch.from_pylist(rows[at: at + m], schema=SCHEMA))
        at += m
    return out


def table(batches) -> pa.Table:
    return pa.Table.from_batches(list(batches), schema=SCHEMA)


def run_db(query: str, batches, *, name: str = "q") -> tuple[pa.Table, laminardb.Connection]:
    db = laminardb.open()
    db.execute(SOURCE)
    db.execute(f"CREATE STREAM {name} AS {query}")
    sub = db.subscribe_stream(name)
    for b in batches:
        db.insert("s", b)
    db.finish()
    return sub.to_arrow(), db


def plan_for(query: str):
    rels = {"s": RelationInfo("s", SCHEMA, "ts", kind="source")}
    return plan_query(parse_statement(f"CREATE STREAM q AS {query}").query, lookup_from(rels))


class Driver:
    """Feeds a ``PlanOperator`` like the reactor: watermark = max event time − DELAY, advanced
    after each batch; ``emitted_at`` holds the watermark each output batch was produced under."""

    def __init__(self, op: PlanOperator) -> None:
        self.op = op
        self.max_ts = NO_WATERMARK
        self.out: list[pa.RecordBatch] = []
        self.emitted_at: list[int] = []

    @property
    def wm(self) -> int:
        return NO_WATERMARK if self.max_ts == NO_WATERMARK else self.max_ts - DELAY

    def _add(self, outs, wm: int) -> None:
        self.out += outs
        self.emitted_at += [wm] * len(outs)

    def feed(self, batch: pa.RecordBatch) -> None:
        before = self.wm
        outs, _ = self.op.process_input("s", batch, before)
        self._add(outs, before)
        self.max_ts = max(self.max_ts, int(np.max(batch.column("ts").to_numpy())))
        if self.wm > before:
            self._add(self.op.on_watermark(self.wm), self.wm)

    def so_far(self) -> pa.Table:
        return pa.Table.from_batches(self.out, schema=self.op.schema)

    def finish(self) -> pa.Table:
        self._add(self.op.on_watermark(END_OF_TIME), END_OF_TIME)
        return self.so_far()


def resumed_output(query: str, batches, *, split: bool) -> pa.Table:
    """The output of ``query`` over ``batches`` with a snapshot after the first half restored
    into a fresh operator (``split``: as two owners' halves of the vnodes, which add up) — what
    a subscriber sees across a restore; compare it with an unbroken run."""
    from laminardb.operators.snapshot import DEFAULT_VNODES

    cut = len(batches) // 2
    first = Driver(PlanOperator(plan_for(query)))
    for b in batches[:cut]:
        first.feed(b)
    image = first.op.snapshot()
    fresh = PlanOperator(plan_for(query))
    if split:
        fresh.restore(image.encode(range(DEFAULT_VNODES // 2)))
        fresh.restore(image.encode(range(DEFAULT_VNODES // 2, DEFAULT_VNODES)))
    else:
        fresh.restore(image.encode())
    second = Driver(fresh)
    second.max_ts = first.max_ts  # the reactor restores its watermark from the checkpoint
    for b in batches[cut:]:
        second.feed(b)
    second.finish()
    return pa.concat_tables([first.so_far(), second.so_far()])


def durable_resumed_output(query: str, batches, directory) -> pa.Table:
    """The output of ``query`` over ``batches`` through a durable database checkpointed after
    the first half, closed and opened again: what a subscriber sees across the restart."""
    cut = len(batches) // 2
    db = laminardb.open(str(directory))
    db.execute(SOURCE)
    db.execute(f"CREATE STREAM q AS {query}")
    sub = db.subscribe_stream("q")
    for b in batches[:cut]:
        db.insert("s", b)
    db.checkpoint()
    before = sub.to_arrow()
    db.close()
    db = laminardb.open(str(directory))
    sub = db.subscribe_stream("q")
    for b in batches[cut:]:
        db.insert("s", b)
    db.finish()
    after = sub.to_arrow()
    db.close()
    return pa.concat_tables([before, after])


def assert_equals_duckdb(query: str, duck_sql: str, seed: int, *, changelog: bool) -> None:
    """``query`` over seeded batches, with nothing dropped late, equals DuckDB's ``duck_sql``
    over the same rows (folded by ``__weight`` when ``changelog``, which it must then be)."""
    batches = make_batches(seed)
    got, db = run_db(query, batches)
    assert db.metrics()["late_events_dropped"] == 0
    db.close()
    assert ("__weight" in got.column_names) == changelog
    same(got, oracle(duck_sql, batches))


def fold(t: pa.Table) -> pa.Table:
    """A changelog netted by ``__weight`` (every net weight must be 0 or positive)."""
    if "__weight" not in t.column_names:
        return t
    cols = [c for c in t.column_names if c != "__weight"]
    if t.num_rows == 0:
        return t.select(cols)
    g = t.group_by(cols, use_threads=False).aggregate([("__weight", "sum")])
    w = g.column("__weight_sum").to_numpy()
    assert (w >= 0).all(), "a changelog retracted a row it never inserted"
    return g.select(cols).take(pa.array(np.repeat(np.arange(len(w)), w), pa.int64()))


def rows(t: pa.Table) -> list[tuple]:
    return sorted(zip(*[c.to_pylist() for c in t.columns], strict=True), key=repr)


def same(got: pa.Table, want: pa.Table) -> None:
    got = fold(got)
    assert got.num_columns == want.num_columns, (got.schema, want.schema)
    a, b = rows(got), rows(want)
    assert len(a) == len(b), f"{len(a)} rows, DuckDB has {len(b)}"
    assert a == b


def oracle(sql: str, batches) -> pa.Table:
    return duck(sql, s=table(batches))
