"""GroupAggregate and SessionAggregate against straightforward Python computations."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from laminardb.operators.group_aggregate import END_OF_TIME, NO_WATERMARK, GroupAggregate
from laminardb.operators.session import SessionAggregate
from laminardb.sql.plan import AggSpec, WindowSpec

SPECS = [
    AggSpec("count_star", None, pa.int64()),
    AggSpec("sum", pa.int64(), pa.int64()),
    AggSpec("min", pa.string(), pa.string()),
    AggSpec("last_value", pa.int64(), pa.int64()),
    AggSpec("count_distinct", pa.int64(), pa.int64()),
]


def _rows(result):
    return sorted(tuple(r.values()) for r in result.new.to_pylist())


def test_tumble_close_matches_python():
    rng = np.random.default_rng(3)
    ts = np.sort(rng.integers(0, 10_000, 2000)).astype(np.int64)
    keys = rng.choice(["a", "b", "c"], 2000)
    vals = rng.integers(0, 5, 2000)
    names = rng.choice(["x", "yy", "z"], 2000)
    g = GroupAggregate(key_types=[pa.string()], specs=SPECS, window=WindowSpec("tumble", size=1000), emit="close")
    args = [None, pa.array(vals), pa.array(names), pa.array(vals), pa.array(vals)]
    g.process(2000, [pa.array(keys)], args, ts, None, NO_WATERMARK)
    out = _rows(g.on_watermark(END_OF_TIME))
    expected = {}
    for t, k, v, nm in zip(ts, keys, vals, names, strict=True):
        w = (int(t) // 1000) * 1000
        e = expected.setdefault((w, w + 1000, str(k)), [0, 0, None, None, set()])
        e[0] += 1
        e[1] += int(v)
        e[2] = nm if e[2] is None or nm < e[2] else e[2]
        e[3] = int(v)  # ts sorted, so the last row seen is the latest
        e[4].add(int(v))
    want = sorted((a, b, k, c, s, m, last, len(d)) for (a, b, k), (c, s, m, last, d) in expected.items())
    assert out == want


def test_hop_assigns_every_window_and_flags_late():
    g = GroupAggregate(key_types=[], specs=SPECS[:1], window=WindowSpec("hop", size=1000, slide=250), emit="close")
    ts = np.array([1100, 100], np.int64)
    _, late = g.process(2, [], [None], ts, None, 1050)
    # 100 belongs to windows ending at 1000, 850?, …: all ≤ 1050 → late; 1100 is not
    assert late.tolist() == [False, True]
    out = _rows(g.on_watermark(END_OF_TIME))
    assert out == [(250, 1250, 1), (500, 1500, 1), (750, 1750, 1), (1000, 2000, 1)]


def test_changes_emits_old_and_new():
    g = GroupAggregate(key_types=[pa.string()], specs=SPECS[:2], window=None, emit="changes")
    r1, _ = g.process(2, [pa.array(["a", "a"])], [None, pa.array([1, 2])], None, None, NO_WATERMARK)
    assert r1.old_valid.tolist() == [False]
    assert r1.pair.to_pylist()[1] == {"__k0": "a", "__a0": 2, "__a1": 3}  # old half, then new half
    r2, _ = g.process(1, [pa.array(["a"])], [None, pa.array([10])], None, None, NO_WATERMARK)
    assert r2.old_valid.tolist() == [True] and r2.new_valid.tolist() == [True]
    assert r2.pair.to_pylist() == [{"__k0": "a", "__a0": 2, "__a1": 3}, {"__k0": "a", "__a0": 3, "__a1": 13}]


def test_session_merges_when_a_row_bridges():
    s = SessionAggregate(key_types=[pa.string()], specs=SPECS[:2], gap=100, emit="close", time_type=pa.int64())
    k = pa.array(["a", "a"])
    s.process(2, [k], [None, pa.array([1, 1])], np.array([0, 200], np.int64), None, NO_WATERMARK)
    # 100 is within the gap of both sessions [0, 100) and [200, 300): all three merge
    s.process(1, [pa.array(["a"])], [None, pa.array([5])], np.array([100], np.int64), None, NO_WATERMARK)
    out = s.on_watermark(END_OF_TIME)
    assert out.new.to_pylist() == [{"__ws": 0, "__we": 300, "__k0": "a", "__a0": 3, "__a1": 7}]


def test_session_late_row_only_when_no_open_session_takes_it():
    s = SessionAggregate(key_types=[pa.string()], specs=SPECS[:1], gap=100, emit="close", time_type=pa.int64())
    s.process(1, [pa.array(["a"])], [None], np.array([1000], np.int64), None, NO_WATERMARK)
    # watermark 1050: the open session [1000, 1100) still takes a row at 950 (it touches)
    _, late = s.process(2, [pa.array(["a", "b"])], [None], np.array([950, 900], np.int64), None, 1050)
    assert late.tolist() == [False, True]
