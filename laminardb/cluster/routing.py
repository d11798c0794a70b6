"""Which rows an actor owns: vnode = stable_hash(partition key) % V, vnode → actor.

Entry points: ``Routing`` (the ownership map the client computes or reads from Raft) and
``partition_mode(plan)``, which says how a query's input is split between actors:
``keyed`` by its GROUP BY key, ``range`` (contiguous row ranges, for stateless queries,
so concatenating the actors' outputs preserves row order), ``partial``/``local_global``
(row ranges aggregated into partials merged on the client; see ``partial.py``), or
``single`` (one actor).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from laminardb.operators import _kernels as K
from laminardb.operators._buffers import encode_rows, string_view
from laminardb.sql.arrays import fixed_buffer
from laminardb.sql.plan import QueryPlan

DEFAULT_VNODES = 256


def partition_mode(plan: QueryPlan, *, local_global: bool = True) -> str:
    from laminardb.cluster.partial import local_global_eligible, partial_eligible

    if plan.aggregate is None:
        return "range"
    if not plan.aggregate.keys:
        # unkeyed: partial aggregates on every actor merged by the client when the
        # aggregates allow it (COUNT/SUM/AVG/MIN/MAX); else all rows to one owner
        return "partial" if partial_eligible(plan) else "single"
    if local_global and local_global_eligible(plan):
        return "local_global"
    return "keyed"


@dataclass
class Routing:
    """vnode → actor index for V vnodes."""

    owner: np.ndarray  # int64[V]

    @classmethod
    def from_members(cls, n_actors: int, vnodes: int = DEFAULT_VNODES) -> Routing:
        from laminardb.raft.plan import plan_assignment

        members = [f"actor-{i}" for i in range(n_actors)]
        plan = plan_assignment(vnodes, members=members)
        owner = np.array([int(plan.assignment[v].split("-")[1]) for v in range(vnodes)], dtype=np.int64)
        return cls(owner)

    @property
    def vnodes(self) -> int:
        return len(self.owner)


def range_slice(n_rows: int, actor: int, n_actors: int) -> tuple[int, int]:
    start = (n_rows * actor) // n_actors
    end = (n_rows * (actor + 1)) // n_actors
    return start, end


def split_by_owner(batch: pa.RecordBatch, keys: list[pa.Array], owner: np.ndarray,
                   n_actors: int) -> list[pa.RecordBatch]:
    """``batch`` cut into one part per actor by the owner of each row's vnode: one hash per
    row and one ``take`` (the parts are slices of it), rows keep their order within a part."""
    offsets, data = encode_rows(keys)
    order = np.empty(batch.num_rows, np.int64)
    counts = np.zeros(n_actors, np.int64)
    K.owner_order(offsets, data, owner, n_actors, order, counts)
    routed = gather(batch, order)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return [routed.slice(int(bounds[a]), int(counts[a])) for a in range(n_actors)]


def gather(batch: pa.RecordBatch, order: np.ndarray) -> pa.RecordBatch:
    """``batch.take(order)``, with numpy/numba for the common NULL-free columns (Arrow's
    take is several times slower on strings), Arrow's take for the rest."""
    cols = []
    for col in batch.columns:
        t = col.type
        width = _byte_width(t)
        if col.null_count == 0 and width:  # ints, floats, timestamps, dates: move the raw bytes
            values = fixed_buffer(col, np.dtype(f"u{width}"))
            cols.append(pa.Array.from_buffers(t, len(order), [None, pa.py_buffer(values[order])]))
        elif col.null_count == 0 and (pa.types.is_string(t) or pa.types.is_binary(t)):
            offsets, data = string_view(col)
            out_offsets = np.empty(len(order) + 1, np.int32)
            out = K.gather_strings(offsets, data, order, out_offsets)
            cols.append(pa.Array.from_buffers(t, len(order), [None, pa.py_buffer(out_offsets), pa.py_buffer(out)]))
        else:
            cols.append(col.take(pa.array(order)))
    return pa.RecordBatch.from_arrays(cols, schema=batch.schema)


def _byte_width(t: pa.DataType) -> int:
    """Bytes per value of a fixed-width type numpy can move as unsigned ints, else 0."""
    try:
        bits = t.bit_width
    except ValueError:  # variable width
        return 0
    return bits // 8 if bits in (8, 16, 32, 64) else 0


def route_rows(plan: QueryPlan, batch: pa.RecordBatch, owner: np.ndarray, n_actors: int) -> list[pa.RecordBatch]:
    """A keyed query's input rows, WHERE applied, split by the owner of their key's vnode."""
    from laminardb.sql.expressions import evaluate_mask

    if plan.where is not None and batch.num_rows:
        batch = batch.filter(pa.array(evaluate_mask(plan.where, batch)))
    keys = [k.evaluate(batch) for k in plan.aggregate.keys]
    return split_by_owner(batch, keys, owner, n_actors)
