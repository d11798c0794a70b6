"""The global phase of local-global aggregation, on the actors that own the keys.

Every actor aggregates the rows it holds (``partial.PartialState``). When the watermark
closes windows, each actor cuts those windows' partials by the owner of each key's vnode
(``split_closed``): one part per owner, inside its answer when small, else as an object
reference. The head collects the parts of one close from every actor and hands each owner
its own in one call; the owner merges them per (window, key) and finishes the rows —
HAVING, projection, output types — exactly as the embedded engine does (``merge_closed``).
This is Flink's local-global aggregation with the global phase partitioned by key: the
head passes references and never merges, decodes or copies a partial row.

The merge keeps no state: a close's partials are merged in the round that closed them, so
a checkpoint (taken between rounds) never holds half-merged windows, and an owner lost
mid-merge fails the round like any other call (the database recovers from its checkpoint).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from laminardb.cluster.exchange import payload_of
from laminardb.cluster.partial import finish_merged, merge_partials
from laminardb.cluster.remote_rows import RemoteBatch
from laminardb.cluster.routing import split_by_owner
from laminardb.cluster.wire import from_ipc
from laminardb.sql.plan import QueryPlan


def split_closed(closed: pa.RecordBatch, n_keys: int, owner: np.ndarray,
                 n_actors: int) -> list[tuple[int, Any]]:
    """The closed windows' partials of this actor as (owner, payload) pairs: the rows of a
    key go to the owner of its vnode, so every actor's partials of one group meet there."""
    if closed.num_rows == 0:
        return []
    if n_actors == 1:
        parts = [closed]
    else:
        parts = split_by_owner(closed, [closed.column(f"k{i}") for i in range(n_keys)], owner, n_actors)
    return [(target, payload_of(part)) for target, part in enumerate(parts) if part.num_rows]


def merge_closed(plan: QueryPlan, finisher, payloads: list) -> tuple[int, list[tuple[int, pa.RecordBatch]]]:
    """Partials every actor sent this owner → (how many partial rows it merged, its final
    rows as (window start, batch) per window, so the head can emit the windows of one close
    in order across owners)."""
    table = pa.Table.from_batches([from_ipc(p) for p in payloads])
    agg = plan.aggregate
    merged = merge_partials(table, agg.specs, len(agg.keys))
    if merged.num_rows == 0:
        return table.num_rows, []
    ws = merged["ws"].combine_chunks().cast(pa.int64()).to_numpy(zero_copy_only=False)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(ws)) + 1, [len(ws)]])  # sorted by ws
    out = []
    for lo, hi in zip(starts[:-1], starts[1:], strict=True):
        for batch in finish_merged(plan, finisher, merged.slice(int(lo), int(hi - lo))):
            if batch.num_rows:
                out.append((int(ws[lo]), batch))
    return table.num_rows, out


def in_window_order(answers: list[list[tuple[int, Any]]]) -> list:
    """The owners' answers to ``merge_closed`` as one close's output: window by window (the
    order the embedded engine closes them in), each window's owners in actor order. A
    window's rows are IPC (decoded here) or a ``RemoteBatch`` (handed on as it is)."""
    tagged = [(ws, i, data) for i, answer in enumerate(answers) for ws, data in answer]
    tagged.sort(key=lambda t: (t[0], t[1]))
    return [data if isinstance(data, RemoteBatch) else from_ipc(data) for _, _, data in tagged]


def by_reference(windows: list[tuple[int, int]], ref: Any) -> list[tuple[int, RemoteBatch]]:
    """An owner's answer with its rows kept (``merge_closed`` with ``rows_back``: (window
    start, rows) per window, the rows one after the other in ``ref``) as (window start,
    ``RemoteBatch``)."""
    out, start = [], 0
    for ws, n in windows:
        out.append((ws, RemoteBatch(ref, n, start)))
        start += n
    return out


__all__ = ["by_reference", "in_window_order", "merge_closed", "split_closed"]
