"""LAG / LEAD over event time: ``OVER ([PARTITION BY …] ORDER BY <event time>)`` in a stream.

Entry point: ``OverOperator(node)`` for a ``plan.Over``; ``process(batch, wm_before)``,
``on_watermark(wm)``, ``snapshot() -> StateImage``, ``restore(blob, *, vnodes=None)`` and
``late_dropped``.

As Flink runs OVER in a stream: a row waits (``pending``) until the watermark of the ORDER BY
column has reached its time — no row that precedes it can come after that — then the rows
released together are sorted by (partition, time, arrival) behind the tail each partition kept
from before, and each row gets ``LAG(x, k)`` = ``x`` of the row ``k`` before it in its partition
(``LEAD``: ``k`` after it), or the default (NULL). A row with a ``LEAD`` is emitted once ``k``
later rows of its partition are released, or at the end of input. Each row is emitted once:
the output is append-only. Rows behind the watermark are late: dropped and counted.

A partition keeps its last (largest LAG offset + largest LEAD offset) rows, in a
``topn._Store`` whose slots find a batch's partitions' tails without scanning the others. The
index arithmetic is one numba kernel over the sorted partition ids; the values move with
Arrow ``take`` (any column type). Snapshot (kind ``"over"``): ``pending`` and ``tail``, each row
with ``__vnode`` = the stable hash of its partition key.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from laminardb.operators._buffers import numeric_view
from laminardb.operators._interner import Interner
from laminardb.operators.join import gather
from laminardb.operators.snapshot import StateImage, decode, mismatch
from laminardb.operators.topn import _Pending, _Store, _with_vnode
from laminardb.sql.plan import Over
from laminardb.sql.watermarks import END_OF_TIME, NO_WATERMARK

_KID, _TS, _SEQ, _DONE = "__kid", "__ts", "__seq", "__emitted"


@njit(cache=True, nogil=True)
def _places(kid_sorted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows before, rows after) each row within its run of equal partition ids."""
    n = len(kid_sorted)
    before = np.empty(n, np.int64)
    after = np.empty(n, np.int64)
    start = 0
    for i in range(n + 1):
        if i == n or (i > 0 and kid_sorted[i] != kid_sorted[i - 1]):
            for j in range(start, i):
                before[j] = j - start
                after[j] = i - 1 - j
            start = i
    return before, after


class OverOperator:
    """LAG/LEAD in event-time order, append-only; see the module docstring."""

    def __init__(self, node: Over) -> None:
        self.node = node
        self.in_schema: pa.Schema = node.child.schema
        self.width = len(self.in_schema) - node.hidden
        self.schema: pa.Schema = node.schema
        self.state_schema = pa.schema(list(self.in_schema) + [  # of ``pending``
            pa.field(_KID, pa.int64()), pa.field(_TS, pa.int64()), pa.field(_SEQ, pa.int64())])
        self.interner = Interner([self.in_schema.field(i).type for i in node.partition]) if node.partition else None
        self.lags = max([f.offset for f in node.funcs if f.kind == "lag"], default=0)
        self.leads = max([f.offset for f in node.funcs if f.kind == "lead"], default=0)
        self.pending = _Pending(self.state_schema)  # rows the watermark has not reached yet
        self.store = _Store(self.in_schema, self.lags + self.leads)  # each partition's tail
        self.seq = 0
        self.late_dropped = 0

    def _kids(self, cols: list[pa.Array], n: int) -> np.ndarray:
        return np.zeros(n, np.int64) if self.interner is None else self.interner.intern(cols)

    def process(self, batch: pa.RecordBatch, wm_before: int = NO_WATERMARK) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        wm = self.node.time_map(wm_before)
        col = batch.column(self.node.order_col)
        ts = numeric_view(col).astype(np.int64, copy=False)
        late = ts < wm if wm != NO_WATERMARK else np.zeros(len(ts), np.bool_)
        if col.null_count:
            late |= col.is_null().to_numpy(zero_copy_only=False)
        self.late_dropped += int(late.sum())
        keep = ~late
        if keep.any():
            rows = batch.filter(pa.array(keep)) if not keep.all() else batch
            m = rows.num_rows
            kid = self._kids([rows.column(i) for i in self.node.partition], m)
            seq = np.arange(self.seq, self.seq + m, dtype=np.int64)
            self.seq += m
            t = pa.Table.from_arrays(list(rows.columns[: len(self.in_schema)]) + [
                pa.array(kid), pa.array(ts[keep]), pa.array(seq)], schema=self.state_schema)
            self.pending.add(t)
        return self._release(wm, final=False)

    def on_watermark(self, wm: int) -> list[pa.RecordBatch]:
        return self._release(self.node.time_map(wm), final=wm == END_OF_TIME)


    def _release(self, wm: int, *, final: bool) -> list[pa.RecordBatch]:
        if wm == NO_WATERMARK:
            return []
        st = self.store
        now = self.pending.take_ready(END_OF_TIME if final else wm)
        kid_now = now.column(_KID).to_numpy()
        if final:  # the end of input: every partition's waiting rows go out
            touched = np.union1d(np.flatnonzero((st.slots >= 0).any(axis=1)), kid_now)
        else:
            touched = np.unique(kid_now)
        if not len(touched):
            return []
        st.reserve_keys(self._n_keys())
        old = st.slots[touched].ravel()
        old = old[old >= 0]
        k, m = len(old), now.num_rows
        held = st.gather(old)
        cols = [pa.concat_arrays([h, now.column(i).combine_chunks()]) if k else now.column(i).combine_chunks()
                for i, h in enumerate(held)]
        kid = np.concatenate([st.kid[old], kid_now])
        ts = np.concatenate([st.ts[old], now.column(_TS).to_numpy()])
        seq = np.concatenate([st.seq[old], now.column(_SEQ).to_numpy()])
        done = np.concatenate([st.done[old], np.zeros(m, np.bool_)])
        ids = np.concatenate([old, np.full(m, -1, np.int64)])
        order = np.lexsort((seq, ts, kid))  # partition, event time, arrival
        take = pa.array(order)
        cols = [c.take(take) for c in cols]
        kid, ts, seq, done, ids = kid[order], ts[order], seq[order], done[order], ids[order]
        before, after = _places(kid)
        emit = ~done & ((after >= self.leads) | final)
        out = [self._rows(cols, emit, before, after)] if emit.any() else []
        # the tails: the last (LAG + LEAD) rows of each partition stay, the rest of the old ones die
        keep = after < self.lags + self.leads
        was_old = ids >= 0
        dead = ids[was_old & ~keep]
        st.alive[dead] = False
        st.n_dead += len(dead)
        st.done[ids[was_old & keep]] = (done | emit)[was_old & keep]
        fresh = np.flatnonzero(~was_old & keep)
        if len(fresh):
            sel = pa.array(fresh)
            rows = pa.RecordBatch.from_arrays([c.take(sel) for c in cols], schema=self.in_schema)
            ids[fresh] = st.append(rows, kid[fresh], seq[fresh], np.zeros(len(fresh), np.int64), ts[fresh],
                                   (done | emit)[fresh])
        st.slots[touched] = -1
        inside = np.flatnonzero(keep)
        st.slots[kid[inside], self.lags + self.leads - 1 - after[inside]] = ids[inside]
        st.compact()
        return out

    def _n_keys(self) -> int:
        return 1 if self.interner is None else len(self.interner)

    def _rows(self, cols: list[pa.Array], emit: np.ndarray, before: np.ndarray, after: np.ndarray) -> pa.RecordBatch:
        at = np.flatnonzero(emit)
        sel = pa.array(at)
        out = [cols[i].take(sel) for i in range(self.width)]
        for f in self.node.funcs:
            if f.kind == "lag":
                ok = before[at] >= f.offset
                src = at - f.offset
            else:
                ok = after[at] >= f.offset
                src = at + f.offset
            idx = pa.array(np.where(ok, src, 0), mask=~ok)  # a NULL index takes NULL
            vals = cols[f.arg].take(idx)
            if f.default is not None:
                dflt = cols[f.default].take(sel)
                if dflt.type != vals.type:
                    dflt = pc.cast(dflt, vals.type)
                vals = pc.if_else(pa.array(ok), vals, dflt)
            out.append(vals)
        return pa.RecordBatch.from_arrays(out, schema=self.schema)

    # ------------------------------------------------------------------ state
    def state_rows(self) -> int:
        return self.pending.num_rows + self.store.n_live

    def state_bytes(self) -> int:
        st = self.store
        return self.pending.nbytes + sum(c.nbytes for c in st.chunks) + st.slots.nbytes + 41 * len(st.kid)

    @property
    def fingerprint(self) -> dict:
        n = self.node
        return {"types": [str(f.type) for f in self.in_schema], "partition": list(n.partition),
                "order": n.order_col, "funcs": [[f.kind, f.arg, f.offset, f.default] for f in n.funcs]}

    def snapshot(self) -> StateImage:
        """``pending`` (immutable Arrow chunks, only ever replaced) and the tails (stored chunks
        are immutable; the per-row arrays are copied here), gathered and encoded later."""
        part = list(self.node.partition)
        st = self.store
        ids, pos = st.held()
        tail = partial(_tail_rows, list(st.chunks), list(st.starts), st.schema, ids, st.ts[ids], st.seq[ids],
                       st.done[ids], pos, part)
        tables = {"pending": partial(_with_vnode, self.pending.table().drop_columns([_KID]), part), "tail": tail}
        return StateImage("over", meta={"plan": self.fingerprint}, counters={"late_dropped": self.late_dropped},
                          tables=tables)

    def restore(self, blob: bytes, *, vnodes=None) -> None:
        """Load a snapshot of the same plan; blobs of disjoint vnode subsets add up."""
        snap = decode(blob, kind="over")
        if snap.meta.get("plan") != self.fingerprint:
            raise mismatch("over", snap.meta.get("plan"), self.fingerprint)
        snap = snap.select(vnodes)
        for name in ("pending", "tail"):
            t = snap.tables[name]
            if not t.num_rows:
                continue
            cols = [t.column(f.name).combine_chunks() for f in self.in_schema]
            kid = self._kids([cols[i] for i in self.node.partition], t.num_rows)
            seq = t.column(_SEQ).to_numpy()
            self.seq = max(self.seq, int(seq.max()) + 1)
            if name == "pending":
                rows = pa.Table.from_arrays(cols + [pa.array(kid), t.column(_TS).combine_chunks(), pa.array(seq)],
                                            schema=self.state_schema)
                self.pending.add(rows)
                continue
            st = self.store
            st.reserve_keys(self._n_keys())
            batch = pa.RecordBatch.from_arrays(cols, schema=self.in_schema)
            ids = st.append(batch, kid, seq, np.zeros(len(kid), np.int64), t.column(_TS).to_numpy(),
                            t.column(_DONE).to_numpy(zero_copy_only=False))
            st.slots[kid, t.column("__pos").to_numpy() - 1] = ids
        if snap.counters is not None:
            self.late_dropped += int(snap.counters["late_dropped"])


def _tail_rows(chunks, starts, schema: pa.Schema, ids, ts, seq, done, pos, key_cols: list[int]) -> pa.Table:
    t = pa.Table.from_arrays(gather(chunks, starts, schema, ids), schema=schema)
    t = t.append_column(_TS, pa.array(ts, pa.int64())).append_column(_SEQ, pa.array(seq, pa.int64()))
    t = t.append_column(_DONE, pa.array(done, pa.bool_())).append_column("__pos", pa.array(pos, pa.int64()))
    return _with_vnode(t, key_cols)
