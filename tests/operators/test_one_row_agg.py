"""The one-row update of an EMIT CHANGES aggregate (``operators/_one_row_agg.py``) leaves the
state and emits the pairs the batch path would.

Differential: the same random rows (NULLs, negatives, int64 limits, NaN and ±0.0, non-ASCII
text) go one row at a time through an operator with the one-row update and through one with
it switched off (the batch path on one-row batches), and as one batch; every output pair and
the snapshot bytes after every step must be equal, across a snapshot/restore and interleaved
multi-row batches. End to end: a durable database fed one ``insert(dict)`` at a time, with a
checkpoint and a reopen in the middle, against DuckDB over the same rows.
"""

from __future__ import annotations

import functools
import math
import random

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import laminardb
from laminardb.operators import group_aggregate
from laminardb.operators.group_aggregate import NO_WATERMARK, GroupAggregate
from laminardb.sql.plan import AggSpec, WindowSpec, result_type

SYMS = ["A", "b", "é", "日本", "", None, "A\u0301", "z"]
FLOATS = [1.5, -0.0, 0.0, None, float("nan"), float("inf"), -2.25, 9007199254740993.0, 3.0, -1e300]
INTS = [1, 0, -1, None, 2**63 - 1, -(2**63), 3, 2**53 + 1, 42, -7]
SMALLS = [0, 7, None, -(2**31), 2**31 - 1, 3]
# (kind, argument column): every accumulator the one-row update covers
CALLS = [("count_star", None), ("count", "f"), ("sum", "i"), ("sum", "f"), ("sum", "s"), ("avg", "i"),
         ("avg", "f"), ("min", "f"), ("max", "i"), ("min", "s"), ("max", "f"), ("first_value", "f"),
         ("last_value", "i"), ("first_value", "s"), ("last_value", "f")]
TYPES = {"k": pa.string(), "n": pa.int64(), "f": pa.float64(), "i": pa.int64(), "s": pa.int32(), "b": pa.bool_()}


def _rows(seed: int, n: int) -> list[dict]:
    rnd = random.Random(seed)
    return [{"k": rnd.choice(SYMS), "n": rnd.choice([None, -3, 0, 1, 2**62]), "t": 1_000 + 20 * (i // 2) + rnd.choice([-400, -200, 0, 0, 30]),
             "f": rnd.choice(FLOATS), "i": rnd.choice(INTS), "s": rnd.choice(SMALLS),
             "b": rnd.choice([True, False, None])} for i in range(n)]


def _operator(window: WindowSpec | None, keys: tuple[str, ...], *, one_row: bool, lateness: int = 0) -> GroupAggregate:
    specs = [AggSpec(kind, None if col is None else TYPES[col], result_type(kind, None if col is None else TYPES[col]))
             for kind, col in CALLS]
    agg = GroupAggregate(key_types=[TYPES[k] for k in keys], specs=specs, window=window, emit="changes",
                         lateness=lateness)
    if not one_row:
        agg._one_row = None
    return agg


def _feed(agg: GroupAggregate, rows: list[dict], keys: tuple[str, ...], wm: int):
    """One ``process`` call over ``rows`` (as the query operator makes it), then the watermark."""
    cols = {c: pa.array([r[c] for r in rows], type=TYPES.get(c, pa.int64())) for c in ("k", "n", "f", "i", "s", "b")}
    ts = np.array([r["t"] for r in rows], dtype=np.int64)
    out, late = agg.process(len(rows), [cols[k] for k in keys], [None if c is None else cols[c] for _, c in CALLS],
                            ts, None, wm)
    return out, late


def _canon(v):
    if isinstance(v, float):
        return "nan" if math.isnan(v) else v.hex()  # -0.0 keeps its sign
    return v


def _pairs(out) -> list | None:
    if out is None:
        return None
    assert out.pair is not None
    out.pair.validate(full=True)
    return [out.old_valid.tolist(), out.new_valid.tolist(), out.pair.schema,
            [[_canon(v) for v in row.values()] for row in out.pair.to_pylist()]]


def _late(late) -> list | None:
    return None if late is None else late.tolist()


@pytest.mark.parametrize(("window", "lateness"), [(None, 0), (WindowSpec("tumble", size=100), 0),
                                                  (WindowSpec("tumble", size=70, offset=13), 0),
                                                  (WindowSpec("tumble", size=100), 150)],
                         ids=["unwindowed", "tumble", "tumble-offset", "tumble-lateness"])
@pytest.mark.parametrize("keys", [("k",), ("k", "n"), ("f", "s"), ("b",), ()],
                         ids=["varchar", "varchar+bigint", "double+int", "boolean", "global"])  # double: NaN, ±0.0
def test_one_row_updates_equal_the_batch_path(window, lateness, keys):
    """Step by step: the same pairs, the same late rows, the same snapshot bytes; then a restore
    of the middle snapshot continues like the unbroken operator; then one batch of the same
    rows ends in the same groups."""
    rows = _rows(len(str(window)) * 7 + len(keys) + lateness, 400)
    make = functools.partial(_operator, window, keys, lateness=lateness)
    chunks, i = [], 0
    while i < len(rows):  # mostly one row, now and then a small batch
        size = 1 if i % 50 < 45 else 3
        chunks.append(rows[i:i + size])
        i += size
    fast, slow = make(one_row=True), make(one_row=False)
    wm, middle, n_late = NO_WATERMARK, None, 0
    for c, part in enumerate(chunks):
        a, b = _feed(fast, part, keys, wm), _feed(slow, part, keys, wm)
        assert _pairs(a[0]) == _pairs(b[0]) and _late(a[1]) == _late(b[1]), c
        n_late += sum(_late(a[1]) or [])
        wm = max(wm, max(r["t"] for r in part) - 100)  # watermark 100 ticks behind: some rows late
        assert fast.on_watermark(wm) is None and slow.on_watermark(wm) is None
        assert fast.snapshot().encode() == slow.snapshot().encode(), c
        if c == len(chunks) // 2:
            middle = (fast.snapshot().encode(), wm, c + 1)
    assert n_late > 0 or window is None, "no late row: the late branch went untested"

    blob, wm, start = middle
    restored = make(one_row=True)
    restored.restore(blob)
    again = make(one_row=False)
    again.restore(blob)
    for c in range(start, len(chunks)):
        a, b = _feed(restored, chunks[c], keys, wm), _feed(again, chunks[c], keys, wm)
        assert _pairs(a[0]) == _pairs(b[0]), c
        wm = max(wm, max(r["t"] for r in chunks[c]) - 100)
        restored.on_watermark(wm)
        again.on_watermark(wm)
    assert restored.snapshot().encode() == again.snapshot().encode()
    # against the unbroken run: the same groups (a restore hands out slots in its own order)
    assert _groups(restored) == _groups(fast)

    if window is None:  # nothing late: one batch of every row ends in the same groups
        whole = make(one_row=False)
        _feed(whole, rows, keys, NO_WATERMARK)
        assert _groups(whole) == _groups(fast)


def _groups(agg: GroupAggregate) -> list:
    return sorted(([_canon(v) for v in r.values()] for r in agg.current().to_pylist()), key=repr)


def test_retractions_free_the_group_as_the_batch_path_does():
    """A changelog input (weights ±1) that retracts a group's last row frees its slot; a later
    row of that key gets a new group, also through the one-row update."""
    keys = ("k",)
    fast, slow = _operator(None, keys, one_row=True), _operator(None, keys, one_row=False)
    row = {"k": "x", "n": 1, "t": 5, "f": 2.5, "i": 4, "s": 1, "b": True}
    only_counts = [("count_star", None), ("count", "f"), ("sum", "i"), ("sum", "f"), ("avg", "f")]
    for agg in (fast, slow):  # invertible aggregates only, as the planner allows over a changelog
        agg.__init__(key_types=[pa.string()], specs=[AggSpec(k, None if c is None else TYPES[c],
                     result_type(k, None if c is None else TYPES[c])) for k, c in only_counts],
                     window=None, emit="changes")
    slow._one_row = None
    assert fast._one_row is not None
    for w in (1, 1, -1, -1, 1):
        outs = []
        for agg in (fast, slow):
            args = [None if c is None else pa.array([row[c]], type=TYPES[c]) for _, c in only_counts]
            out, _ = agg.process(1, [pa.array(["x"])], args, np.array([5]), np.array([w], dtype=np.int64), NO_WATERMARK)
            outs.append(_pairs(out))
        assert outs[0] == outs[1]
        assert fast.snapshot().encode() == slow.snapshot().encode()
        assert fast.groups.n_live == slow.groups.n_live


def _no_fold(*args, **kwargs):
    raise AssertionError("the batch path ran")


def test_the_one_row_update_is_taken_and_the_others_fall_back(monkeypatch):
    """With the batch kernels made to fail, a one-row batch still folds in (so the tests above
    compare two different paths); two rows, COUNT(DISTINCT), string MIN and EMIT ON WINDOW
    CLOSE take the batch path."""
    monkeypatch.setattr(group_aggregate, "fold", _no_fold)
    agg = _operator(WindowSpec("tumble", size=100), ("k",), one_row=True)
    row = {"k": "é", "n": 1, "t": 5, "f": 2.5, "i": 4, "s": 1, "b": None}
    out, _ = _feed(agg, [row], ("k",), NO_WATERMARK)
    assert out.pair.num_rows == 2 and out.new_valid.tolist() == [True]
    with pytest.raises(AssertionError, match="batch path"):
        _feed(agg, [row, row], ("k",), NO_WATERMARK)
    s = pa.string()
    for specs, emit in (([AggSpec("count_distinct", s, pa.int64())], "changes"), ([AggSpec("min", s, s)], "changes"),
                        ([AggSpec("count_star", None, pa.int64())], "close")):
        assert GroupAggregate(key_types=[s], specs=specs, window=None, emit=emit)._one_row is None


SOURCE = ("CREATE SOURCE ev (k VARCHAR, n BIGINT, t BIGINT NOT NULL, f DOUBLE, i BIGINT, s INT, b BOOLEAN, "
          "WATERMARK FOR t AS t - INTERVAL '100' MILLISECOND)")
VIEW = ("CREATE MATERIALIZED VIEW v AS SELECT k, count(*) AS c, count(f) AS cf, sum(s) AS ss, sum(f) AS sf, "
        "avg(s) AS a, min(i) AS mn, max(f) AS mx FROM ev GROUP BY k")
DUCK = ("SELECT k, count(*) AS c, count(f) AS cf, sum(s)::BIGINT AS ss, sum(f) AS sf, avg(s) AS a, min(i) AS mn, "
        "max(f) AS mx FROM t GROUP BY k")


def test_durable_one_row_inserts_with_a_restart_match_duckdb(tmp_path, monkeypatch):
    """``insert(dict)`` row by row into a durable database, checkpointed and reopened half-way
    (the restored state takes the rest, one row at a time), against DuckDB over the same rows.
    The batch kernels fail once the database is open (and warmed up): every row takes the
    one-row update."""
    rows = [r for r in _rows(7, 300) if r["f"] is None or not math.isnan(r["f"])]  # DuckDB orders NaN
    cfg = {"checkpoint_interval": "off"}
    db = laminardb.open(tmp_path / "db", config=cfg)
    db.execute(SOURCE)
    db.execute(VIEW)
    monkeypatch.setattr(group_aggregate, "fold", _no_fold)
    half = len(rows) // 2
    for r in rows[:half]:
        db.insert("ev", r)
    db.checkpoint()
    db.close()
    db = laminardb.open(tmp_path / "db", config=cfg)
    for r in rows[half:]:
        db.insert("ev", r)
    got = db.query("SELECT * FROM v").to_pylist()
    db.close()
    t = pa.Table.from_pylist(rows, schema=pa.schema([(c, TYPES.get(c, pa.int64())) for c in ("k", "n", "t", "f", "i", "s", "b")]))
    want = duckdb.sql(DUCK).arrow().read_all().to_pylist()
    assert t.num_rows == len(rows)
    key = lambda r: (r["k"] is None, r["k"] or "")  # noqa: E731
    got, want = sorted(got, key=key), sorted(want, key=key)
    assert [r["k"] for r in got] == [r["k"] for r in want]
    for g, w in zip(got, want, strict=True):
        for name in w:
            assert g[name] == pytest.approx(w[name], nan_ok=True), (g["k"], name)
