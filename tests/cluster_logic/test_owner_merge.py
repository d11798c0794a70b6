"""Local-global aggregation's global phase on the key owners (``cluster/owner_merge.py``),
without Ray: three "actors" each aggregate a contiguous third of the rows (so every key is on
every actor), cut their closed partials by key owner, and each owner merges what it got.
Oracle: DuckDB's GROUP BY over the raw rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from laminardb.cluster.owner_merge import in_window_order, merge_closed, split_closed
from laminardb.cluster.wire import from_ipc, to_ipc
from tests.coordinator.test_spark_merge import QUERY, SOURCE, _assert_same, _oracle, _raw


def _plan():
    import laminardb

    with laminardb.open() as db:
        db.execute(f"{SOURCE}; CREATE STREAM q AS {QUERY}")
        return db.engine.reactor.nodes["q"].plan


def _closed_per_actor(plan, raw: pa.Table, n_actors: int) -> list[pa.RecordBatch]:
    from laminardb.cluster.partial import PartialState
    from laminardb.sql.arrays import numeric_view

    idx = plan.aggregate.time_index
    out = []
    for rows in np.array_split(np.arange(raw.num_rows), n_actors):
        state = PartialState(plan)
        for batch in raw.take(rows).to_batches(max_chunksize=500):
            state.run(batch, -(2**62), lambda b: numeric_view(b.column(idx)))
        out.append(state.close(2**62))
    return out


def _run(plan, closed: list[pa.RecordBatch], owner: np.ndarray, n_actors: int):
    from laminardb.operators.query_operator import QueryOperator

    to_owner: dict[int, list] = {}
    for part in closed:
        for target, payload in split_closed(part, len(plan.aggregate.keys), owner, n_actors):
            to_owner.setdefault(target, []).append(payload)
    answers = {a: merge_closed(plan, QueryOperator(plan), ps) for a, ps in sorted(to_owner.items())}
    return to_owner, answers


@pytest.mark.parametrize("n_actors", [1, 3])
def test_owners_merge_every_actors_partials_to_duckdbs_answer(n_actors) -> None:
    raw = _raw()
    plan = _plan()
    owner = np.random.default_rng(3).integers(0, n_actors, 64).astype(np.int64)  # vnode → actor
    closed = _closed_per_actor(plan, raw, n_actors)
    to_owner, answers = _run(plan, closed, owner, n_actors)

    assert sum(n for n, _ in answers.values()) == sum(c.num_rows for c in closed)  # every partial merged once
    keys_at = {a: {(r["k0"], r["k1"]) for p in ps for r in from_ipc(p).to_pylist()} for a, ps in to_owner.items()}
    if n_actors > 1:
        assert len(keys_at) > 1  # the keys spread over owners ...
        for a in keys_at:  # ... and a key meets all its partials at one owner only
            for b in keys_at:
                assert a == b or not keys_at[a] & keys_at[b]

    got = in_window_order([[(ws, to_ipc(b)) for ws, b in windows] for _, windows in answers.values()])
    table = pa.Table.from_batches(got)
    _assert_same(table, _oracle(raw))
    starts = table["window_start"].cast(pa.int64()).to_numpy()
    assert (np.diff(starts) >= 0).all(), "one close's windows come out in window order"


def test_nothing_closed_sends_nothing() -> None:
    plan = _plan()
    empty = _closed_per_actor(plan, _raw().slice(0, 0), 2)[0]
    assert split_closed(empty, 2, np.zeros(8, np.int64), 2) == []
