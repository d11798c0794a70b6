"""Operator snapshots: restoring into a fresh operator continues exactly like the unbroken one.

Every case is real SQL planned by ``laminardb.sql`` (as the reactor does) and run through
``QueryOperator``; a ``ViewStore`` keeps the output like a materialized view. A scenario feeds
random batches with event-time watermarks, takes ``snapshot()`` at a random step, keeps feeding
the original for a while before ``encode()`` (an image must not see later ingest), restores the
bytes into fresh operators — whole, or as two vnode halves — and compares every later output.
"""

from __future__ import annotations

from unittest import mock

import msgpack
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from laminardb.checkpoint.exceptions import SnapshotFormatError
from laminardb.cluster import routing
from laminardb.engine import views
from laminardb.engine.views import ViewStore
from laminardb.operators._buffers import hash_rows
from laminardb.operators.group_aggregate import END_OF_TIME, NO_WATERMARK
from laminardb.operators.query_operator import QueryOperator
from laminardb.operators.snapshot import DEFAULT_VNODES, SNAPSHOT_VERSION, decode
from laminardb.sql import ddl
from laminardb.sql.plan import WEIGHT, RelationInfo
from laminardb.sql.planner import plan_query

SETTINGS = settings(max_examples=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

COLUMNS = [("sym", pa.string()), ("tag", pa.string()), ("price", pa.float64()), ("qty", pa.int64())]
SCHEMAS = {"ms": pa.schema([("ts", pa.int64()), *COLUMNS]),
           "timestamp": pa.schema([("ts", pa.timestamp("ms")), *COLUMNS])}

AGGS = ("count(*) AS n, count(qty) AS cq, count(DISTINCT tag) AS cdt, count(DISTINCT qty) AS cdq, "
        "sum(qty) AS sq, sum(price) AS sp, avg(price) AS ap, min(price) AS mnp, max(qty) AS mxq, "
        "min(tag) AS mnt, max(tag) AS mxt, first_value(price) AS fp, last_value(tag) AS lt, "
        "first_value(tag) AS ft, last_value(qty) AS lq")
TUMBLE = "tumble(ts, INTERVAL '1' SECOND)"
HOP = "hop(ts, INTERVAL '1' SECOND, INTERVAL '250' MILLISECOND)"
SESSION = "session(ts, INTERVAL '300' MILLISECOND)"
WIN = "window_start, window_end, "

# name → (source schema, SQL of each query in the chain; a later one reads the one before)
CASES: dict[str, tuple[str, list[str]]] = {
    "unwindowed_changes": ("ms", [f"SELECT sym, {AGGS} FROM trades GROUP BY sym EMIT CHANGES"]),
    "unwindowed_close": ("ms", [f"SELECT sym, {AGGS} FROM trades GROUP BY sym EMIT ON WINDOW CLOSE"]),
    "tumble_close": ("ms", [f"SELECT sym, {WIN}{AGGS} FROM trades GROUP BY sym, {TUMBLE} EMIT ON WINDOW CLOSE"]),
    "tumble_changes": ("ms", [f"SELECT sym, {WIN}{AGGS} FROM trades GROUP BY sym, {TUMBLE} EMIT CHANGES"]),
    "hop_close": ("ms", [f"SELECT sym, {WIN}{AGGS} FROM trades GROUP BY sym, {HOP} EMIT ON WINDOW CLOSE"]),
    "hop_changes": ("ms", [f"SELECT sym, {WIN}{AGGS} FROM trades GROUP BY sym, {HOP} EMIT CHANGES"]),
    "session_close": ("ms", [f"SELECT sym, {WIN}{AGGS} FROM trades GROUP BY sym, {SESSION} EMIT ON WINDOW CLOSE"]),
    "session_changes": ("ms", [f"SELECT sym, {WIN}{AGGS} FROM trades GROUP BY sym, {SESSION} EMIT CHANGES"]),
    "two_keys_timestamp": ("timestamp", [f"SELECT sym, qty, {WIN}count(*) AS n, max(tag) AS mt, "
                                         f"last_value(price) AS lp FROM trades GROUP BY sym, qty, {TUMBLE}"]),
    "unkeyed": ("ms", [f"SELECT {WIN}count(*) AS n, min(tag) AS mt, count(DISTINCT sym) AS cd "
                       f"FROM trades GROUP BY {TUMBLE}"]),
    "having": ("ms", [f"SELECT sym, {WIN}count(*) AS n, sum(qty) AS sq FROM trades "
                      f"GROUP BY sym, {TUMBLE} HAVING count(*) > 1 EMIT CHANGES"]),
    "stateless": ("ms", ["SELECT ts, sym, price * 2 AS p2 FROM trades WHERE qty > 3"]),
    "changelog_input": ("ms", ["SELECT sym, count(*) AS n, sum(qty) AS sq FROM trades GROUP BY sym",
                               "SELECT n, count(*) AS c, sum(sq) AS t, avg(sq) AS a FROM prev GROUP BY n"]),
    # allowed lateness: windows that fired stay open (fired_wm, session __fired flags in the snapshot)
    "tumble_close_lateness": ("ms", [f"SELECT sym, {WIN}{AGGS} FROM trades GROUP BY sym, {TUMBLE} "
                                     "EMIT ON WINDOW CLOSE WITH (allowed_lateness = INTERVAL '700' MILLISECOND)"]),
    "hop_changes_lateness": ("ms", [f"SELECT sym, {WIN}count(*) AS n, sum(qty) AS sq FROM trades "
                                    f"GROUP BY sym, {HOP} EMIT CHANGES WITH (allowed_lateness = INTERVAL '1' SECOND)"]),
    "session_close_lateness": ("ms", [f"SELECT sym, {WIN}{AGGS} FROM trades GROUP BY sym, {SESSION} "
                                      "EMIT ON WINDOW CLOSE WITH (allowed_lateness = INTERVAL '1500' MILLISECOND)"]),
}


def build_plans(case: str):
    schema_name, sqls = CASES[case]
    rel = RelationInfo("trades", SCHEMAS[schema_name], "ts", False)
    plans = []
    for sql in sqls:
        stmt = ddl.parse_statement(f"CREATE STREAM s AS {sql}")
        plans.append(plan_query(stmt.query, lambda name, r=rel: r))
        out = plans[-1].output_schema
        rel = RelationInfo("prev", out, plans[-1].time_col, plans[-1].changelog)
    return plans


class Pipeline:
    """A chain of operators as the reactor runs them, its output kept in a view."""

    def __init__(self, plans) -> None:
        self.ops = [QueryOperator(p) for p in plans]
        last = self.ops[-1]
        self.view = ViewStore(last.schema, changelog=last.plan.changelog)

    def step(self, batch: pa.RecordBatch | None, wm_before: int, wm_after: int) -> list[list[dict]]:
        outs: list[pa.RecordBatch] = []
        if batch is not None:
            outs, _ = self.ops[0].process(batch, wm_before)
        if wm_after > wm_before:
            outs = outs + self.ops[0].on_watermark(wm_after)
        for op in self.ops[1:]:
            nxt = []
            for b in outs:
                nxt += op.process(b, NO_WATERMARK)[0]
            if wm_after == END_OF_TIME:
                nxt += op.on_watermark(END_OF_TIME)
            outs = nxt
        for b in outs:
            self.view.append(b)
        return [b.to_pylist() for b in outs if b.num_rows]

    def snapshot(self):
        return [op.snapshot() for op in self.ops], self.view.snapshot()

    def restore(self, images, *, halves: tuple[set, set] | None, at_restore: bool) -> None:
        ops_images, view_image = images
        for op, img in zip(self.ops, ops_images, strict=True):
            if halves is None:
                op.restore(img.encode())
            elif at_restore:  # one whole blob, each half picked out on restore
                blob = img.encode()
                for half in halves:
                    op.restore(blob, vnodes=half)
            else:
                for half in halves:
                    op.restore(img.encode(vnodes=half))
        self.view.restore(view_image.encode())


@st.composite
def scenarios(draw):
    """Steps of (rows, watermark after): event times drift up with jitter both ways, so
    rows arrive late; the watermark follows max event time − delay, with random jumps."""
    n_steps = draw(st.integers(1, 9))
    grid = draw(st.sampled_from([1, 50, 250]))
    delay = draw(st.sampled_from([0, 200, 1000]))
    t, max_ts, wm = 0, 0, NO_WATERMARK
    steps = []
    for _ in range(n_steps):
        rows = []
        for _ in range(draw(st.integers(0, 7))):
            t += draw(st.integers(0, 200))
            ts = max(0, t + draw(st.sampled_from([0, 0, 0, -150, -700, -2500, 400]))) // grid * grid
            max_ts = max(max_ts, ts)
            rows.append({"ts": ts, "sym": draw(st.sampled_from(["A", "B", "C", "D", "E", "F", None])),
                         "tag": draw(st.sampled_from(["x", "y", "zz", "", None])),
                         "price": draw(st.one_of(st.none(), st.integers(-40, 40).map(lambda v: v / 4))),
                         "qty": draw(st.one_of(st.none(), st.integers(-2, 6)))})
        if rows:
            wm = max(wm, max_ts - delay)
        wm = max(wm, wm + draw(st.sampled_from([0, 0, 0, 300, 1500])) if wm != NO_WATERMARK else wm)
        steps.append((rows, wm))
    steps.append(([], END_OF_TIME))
    cut = draw(st.integers(0, len(steps) - 1))
    encode_after = draw(st.integers(cut, len(steps)))  # the original runs on before encode()
    split = draw(st.integers(1, DEFAULT_VNODES - 1))
    return steps, cut, encode_after, split


def _row(ts: int, sym: str) -> dict:
    return {"ts": ts, "sym": sym, "tag": "x", "price": None, "qty": None}


# Found by hypothesis: after a restore, a row that bridges two of a key's sessions (F [101, 401)
# and [501, 801)) merges them into the other slot than in the unbroken operator (the key's session
# list is relinked in slot order on load), and the retractions of the two came out swapped.
BRIDGING_MERGE_AFTER_RESTORE = (
    [([_row(0, "A")] * 4, 0), ([_row(0, "A")], 0),
     ([_row(0, "A")] * 5 + [_row(400, "A"), _row(0, "B")], 400), ([], 1900),
     ([_row(101, "A")] * 5 + [_row(101, "F"), _row(501, "F")], 1900),
     ([_row(201, "F")] + [_row(201, "A")] * 3, 1900), ([], 1900), ([], END_OF_TIME)],
    5, 5, 1)


def run(case: str, scenario, *, mode: str) -> None:
    steps, cut, encode_after, split = scenario
    schema = SCHEMAS[CASES[case][0]]
    plans = build_plans(case)
    unbroken = Pipeline(plans)
    restored = Pipeline(plans)
    expected, got = [], []
    images = None
    wm = NO_WATERMARK
    marks = []
    for i, (rows, wm_after) in enumerate(steps):
        if i == cut:
            images = unbroken.snapshot()
        if i == encode_after:
            restore_from(restored, images, mode, split)
        batch = pa.RecordBatch.from_pylist(rows, schema=schema) if rows else None
        marks.append((batch, wm, wm_after))
        expected.append(unbroken.step(batch, wm, wm_after))
        wm = wm_after
    if encode_after == len(steps):
        restore_from(restored, images, mode, split)
    for batch, before, after in marks[cut:]:
        got.append(restored.step(batch, before, after))
    expected = expected[cut:]
    event("output after the snapshot" if any(expected) else "no output after the snapshot")
    if mode == "whole":
        assert got == expected
        assert _sorted(restored.view.table()) == _sorted(unbroken.view.table())
        assert restored.view.table().to_pylist() == unbroken.view.table().to_pylist()
    else:  # rows of one output in another order: keys were re-interned blob by blob
        assert [[_sorted(b) for b in step] for step in got] == [[_sorted(b) for b in step] for step in expected]
        assert _sorted(restored.view.table()) == _sorted(unbroken.view.table())
    for a, b in zip(restored.ops, unbroken.ops, strict=True):
        assert a.late_dropped == b.late_dropped


def restore_from(pipeline: Pipeline, images, mode: str, split: int) -> None:
    halves = None if mode == "whole" else (set(range(split)), set(range(split, DEFAULT_VNODES)))
    pipeline.restore(images, halves=halves, at_restore=mode == "halves_on_restore")


def _sorted(rows) -> list[str]:
    if isinstance(rows, pa.Table):
        rows = rows.to_pylist()
    return sorted(repr(sorted(r.items())) for r in rows)


@pytest.mark.parametrize("case", sorted(CASES))
@SETTINGS
@given(scenario=scenarios())
@example(scenario=BRIDGING_MERGE_AFTER_RESTORE)
def test_restore_continues_like_the_unbroken_operator(case, scenario):
    with mock.patch.object(views, "_COMPACT_MIN_ROWS", 6):  # changelog views compact in the test too
        run(case, scenario, mode="whole")


@pytest.mark.parametrize("case", ["tumble_close", "hop_changes", "session_changes", "two_keys_timestamp",
                                  "unwindowed_changes", "changelog_input", "unkeyed", "stateless",
                                  "tumble_close_lateness", "session_close_lateness"])
@pytest.mark.parametrize("mode", ["halves", "halves_on_restore"])
@settings(SETTINGS, max_examples=20)
@given(scenario=scenarios())
@example(scenario=BRIDGING_MERGE_AFTER_RESTORE)
def test_vnode_halves_add_up_to_the_whole_state(case, mode, scenario):
    run(case, scenario, mode=mode)


def _fed_operator() -> QueryOperator:
    (plan,) = build_plans("tumble_close")
    op = QueryOperator(plan)
    rows = [{"ts": 10 * i, "sym": s, "tag": "t", "price": 1.0, "qty": i} for i, s in enumerate("ABCDEFGH")]
    op.process(pa.RecordBatch.from_pylist(rows, schema=SCHEMAS["ms"]), NO_WATERMARK)
    return op


def test_unknown_version_is_refused_with_both_versions_named():
    doc = msgpack.unpackb(_fed_operator().snapshot().encode(), raw=False)
    doc["version"] = 99
    with pytest.raises(SnapshotFormatError) as e:
        QueryOperator(build_plans("tumble_close")[0]).restore(msgpack.packb(doc, use_bin_type=True))
    assert e.value.code == "LDB-5001"
    assert "99" in str(e.value) and f"version {SNAPSHOT_VERSION}" in str(e.value)


@pytest.mark.parametrize("blob", [b"", b"garbage\x00\xff", msgpack.packb({"format": "other", "version": 1}),
                                  msgpack.packb([1, 2, 3]), b"\x80\x04\x95"])
def test_garbage_is_refused(blob):
    with pytest.raises(SnapshotFormatError) as e:
        decode(blob)
    assert e.value.code == "LDB-5001" and "not a laminardb state snapshot" in str(e.value)


def test_snapshot_of_another_plan_or_kind_is_refused():
    blob = _fed_operator().snapshot().encode()
    with pytest.raises(SnapshotFormatError, match="different query"):
        QueryOperator(build_plans("hop_close")[0]).restore(blob)
    with pytest.raises(SnapshotFormatError, match="cannot be restored into"):
        ViewStore(SCHEMAS["ms"], changelog=False).restore(blob)


def test_encode_writes_only_the_requested_vnodes():
    img = _fed_operator().snapshot()
    whole = decode(img.encode())
    groups = whole.tables["groups"]
    assert groups.num_rows == 8 and whole.counters == {"late_dropped": 0}
    vnodes = sorted(set(groups.column("__vnode").to_pylist()))
    one = decode(img.encode(vnodes=vnodes[:1]))
    assert set(one.tables["groups"].column("__vnode").to_pylist()) == set(vnodes[:1])
    assert one.counters is None if vnodes[0] != 0 else one.counters is not None
    assert decode(img.encode(vnodes=[0])).counters == {"late_dropped": 0}
    keys = whole.tables["keys"]  # the vnode is the one routing computes: stable hash % V
    want = hash_rows([keys.column("__k0").combine_chunks()]) % np.uint64(routing.DEFAULT_VNODES)
    assert keys.column("__vnode").to_numpy().tolist() == want.tolist()
    assert DEFAULT_VNODES == routing.DEFAULT_VNODES


def test_image_is_not_changed_by_later_ingest():
    op = _fed_operator()
    img = op.snapshot()
    before = decode(img.encode()).tables["groups"].to_pylist()
    more = [{"ts": 5, "sym": s, "tag": "u", "price": 2.0, "qty": 7} for s in "ABCXYZ"]
    op.process(pa.RecordBatch.from_pylist(more, schema=SCHEMAS["ms"]), NO_WATERMARK)
    op.on_watermark(END_OF_TIME)
    img2 = op.snapshot()
    assert decode(img.encode()).tables["groups"].to_pylist() == before
    assert decode(img2.encode()).tables["groups"].num_rows == 0


def test_lateness_state_is_in_the_snapshot():
    """A window that fired and is kept for lateness re-fires after a restore as before it."""
    (plan,) = build_plans("tumble_close_lateness")
    op = QueryOperator(plan)
    rows = [{"ts": 100, "sym": "A", "tag": "t", "price": 1.0, "qty": 1}]
    op.process(pa.RecordBatch.from_pylist(rows, schema=SCHEMAS["ms"]), NO_WATERMARK)
    assert [b.to_pylist()[0]["n"] for b in op.on_watermark(1200)] == [1]   # [0, 1000) fired, kept until 1700
    snap = decode(op.snapshot().encode())
    assert snap.meta["agg"]["fired_wm"] == 1200 and snap.meta["plan"]["lateness"] == 700
    fresh = QueryOperator(plan)
    fresh.restore(op.snapshot().encode())
    late = pa.RecordBatch.from_pylist([{"ts": 500, "sym": "A", "tag": "u", "price": 2.0, "qty": 2}], schema=SCHEMAS["ms"])
    outs, dropped = fresh.process(late, 1200)
    assert dropped is None
    assert [(r["n"], r["__weight"]) for b in outs for r in b.to_pylist()] == [(1, -1), (2, 1)]
    assert fresh.on_watermark(1700) == []                                   # purged, no second firing
    outs, dropped = fresh.process(late, 1700)
    assert outs == [] and dropped.num_rows == 1                              # later than the lateness


def test_changelog_view_round_trip():
    schema = pa.schema([("k", pa.string()), ("v", pa.int64()), (WEIGHT, pa.int64())])
    v = ViewStore(schema, changelog=True)
    v.append(pa.RecordBatch.from_pylist([{"k": "a", "v": 1, WEIGHT: 1}, {"k": "b", "v": 2, WEIGHT: 1}], schema=schema))
    v.append(pa.RecordBatch.from_pylist([{"k": "a", "v": 1, WEIGHT: -1}], schema=schema))
    w = ViewStore(schema, changelog=True)
    w.restore(v.snapshot().encode())
    assert w.table().to_pylist() == v.table().to_pylist() == [{"k": "b", "v": 2}]
    with pytest.raises(ValueError, match="not split by vnode"):
        v.snapshot().encode(vnodes=[0])
