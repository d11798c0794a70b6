"""LAG / LEAD and aggregates over event time: ``OVER ([PARTITION BY …] ORDER BY <event time>)``.

Entry point: ``OverOperator(node)`` for a ``plan.Over``; ``process(batch, wm_before)``,
``on_watermark(wm)``, ``snapshot() -> StateImage``, ``restore(blob, *, vnodes=None)`` and
``late_dropped``.

As Flink runs OVER in a stream: a row waits (``pending``) until the watermark of the ORDER BY
column has reached its time — no row that precedes it can come after that (past it, for a
RANGE frame: no row of equal time can follow) — then the rows released together are sorted by
(partition, time, arrival) behind the tail each partition kept from before, and each row gets
``LAG(x, k)`` = ``x`` of the row ``k`` before it in its partition (``LEAD``: ``k`` after it), or
the default (NULL), and each aggregate over its frame: the ``n`` rows before it (``ROWS n
PRECEDING``, from the tail) or all rows so far (a count and an accumulator per partition). A row
with a ``LEAD`` is emitted once ``k`` later rows of its partition are released, or at the end of
input. Each row is emitted once: the output is append-only. Rows behind the watermark are late:
dropped and counted. (Over a changelog input: ``over_changelog.OverChangelogOperator``.)

A partition keeps its last (largest LAG offset or ROWS frame + largest LEAD offset) rows, in a
``topn._Store`` whose slots find a batch's partitions' tails without scanning the others. The
index arithmetic and the frames are numba kernels over the sorted partition ids; LAG/LEAD
values move with Arrow ``take`` (any column type). Snapshot (kind ``"over"``): ``pending``,
``tail`` and ``acc`` (the unbounded aggregates), each row with ``__vnode`` = the stable hash of
its partition key.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from laminardb.operators._interner import Interner
from laminardb.operators.join import gather
from laminardb.operators.snapshot import StateImage, checked_snapshot
from laminardb.operators.topn import _Pending, _Store, _with_vnode
from laminardb.sql.arrays import numeric_view
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


_AGG_CODE = {"sum": 0, "count": 0, "count_star": 0, "avg": 0, "min": 1, "max": 2}


@njit(cache=True, nogil=True, inline="always")
def fold_value(a, v, first, code):
    """``v`` folded into a running sum/min/max (``code`` 0/1/2); ``first``: ``a`` holds nothing yet."""
    if first:
        return v
    if code == 0:
        return a + v
    if code == 1:
        return min(a, v)
    return max(a, v)


@njit(cache=True, nogil=True)
def _frame_agg(code, kid, ts, vals, valid, emit, before, n, peers, st_cnt, st_acc, out_cnt, out_acc):
    """Count and sum/min/max (``code`` 0/1/2) of the valid values in each emitted row's frame:
    the ``n`` rows before it in its partition and itself, or (``n`` < 0) every row of the
    partition so far, carried in ``st_cnt``/``st_acc`` per partition; ``peers``: rows of equal
    time take the value of the last of them (RANGE)."""
    m = len(kid)
    if n >= 0:
        for i in range(m):
            if not emit[i]:
                continue
            c = 0
            a = st_acc[0]
            for j in range(i - min(n, before[i]), i + 1):
                if valid[j]:
                    a = fold_value(a, vals[j], c == 0, code)
                    c += 1
            out_cnt[i] = c
            out_acc[i] = a
        return
    for i in range(m):
        if not emit[i]:
            continue
        k = kid[i]
        if valid[i]:
            st_acc[k] = fold_value(st_acc[k], vals[i], st_cnt[k] == 0, code)
            st_cnt[k] += 1
        out_cnt[i] = st_cnt[k]
        out_acc[i] = st_acc[k]
    if peers:
        for i in range(m - 2, -1, -1):
            if emit[i] and emit[i + 1] and kid[i] == kid[i + 1] and ts[i] == ts[i + 1]:
                out_cnt[i] = out_cnt[i + 1]
                out_acc[i] = out_acc[i + 1]


def _acc_dtype(t: pa.DataType):
    return np.float64 if pa.types.is_floating(t) else np.int64


class OverOperator:
    """LAG/LEAD and OVER aggregates in event-time order, append-only; see the module docstring."""

    incremental = False  # checkpoints take the whole state (no snapshot_delta)

    def __init__(self, node: Over) -> None:
        self.node = node
        self.in_schema: pa.Schema = node.child.schema
        self.width = len(self.in_schema) - node.hidden
        self.schema: pa.Schema = node.schema
        self.state_schema = pa.schema(list(self.in_schema) + [  # of ``pending``
            pa.field(_KID, pa.int64()), pa.field(_TS, pa.int64()), pa.field(_SEQ, pa.int64())])
        self.interner = Interner([self.in_schema.field(i).type for i in node.partition]) if node.partition else None
        self.lags = max([0] + [f.offset for f in node.funcs if f.kind != "lead"])  # LAG k, ROWS k PRECEDING
        self.leads = max([f.offset for f in node.funcs if f.kind == "lead"], default=0)
        self.pending = _Pending(self.state_schema)  # rows the watermark has not reached yet
        self.store = _Store(self.in_schema, self.lags + self.leads)  # each partition's tail
        self.seq = 0
        self.late_dropped = 0
        # per unbounded aggregate: (count, accumulator) per partition
        self.acc: dict[int, tuple[np.ndarray, np.ndarray]] = {
            j: (np.zeros(1024, np.int64), np.zeros(1024, self._dtype(f)))
            for j, f in enumerate(node.funcs) if f.kind not in ("lag", "lead") and f.offset < 0}

    def _dtype(self, f):
        return np.int64 if f.arg < 0 else _acc_dtype(self.in_schema.field(f.arg).type)

    def _kids(self, cols: list[pa.Array], n: int) -> np.ndarray:
        if self.interner is None:
            return np.zeros(n, np.int64)
        kid = self.interner.intern(cols)
        if self.acc and len(self.interner) > len(next(iter(self.acc.values()))[0]):
            cap = max(2 * len(next(iter(self.acc.values()))[0]), len(self.interner))
            for j, (cnt, acc) in self.acc.items():
                c2, a2 = np.zeros(cap, cnt.dtype), np.zeros(cap, acc.dtype)
                c2[: len(cnt)], a2[: len(acc)] = cnt, acc
                self.acc[j] = (c2, a2)
        return kid

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
        # a RANGE frame takes a row once the watermark is past it: no row of equal time can follow
        now = self.pending.take_ready(END_OF_TIME if final else wm - 1 if self.node.strict else wm)
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
        out = [self._rows(cols, emit, before, after, kid, ts)] if emit.any() else []
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

    def _rows(self, cols: list[pa.Array], emit: np.ndarray, before: np.ndarray, after: np.ndarray,
              kid: np.ndarray, ts: np.ndarray) -> pa.RecordBatch:
        at = np.flatnonzero(emit)
        sel = pa.array(at)
        out = [cols[i].take(sel) for i in range(self.width)]
        for j, f in enumerate(self.node.funcs):
            if f.kind not in ("lag", "lead"):
                out.append(self._aggregate(j, f, cols, emit, before, kid, ts).take(sel))
                continue
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

    def _aggregate(self, j, f, cols, emit, before, kid, ts) -> pa.Array:
        m = len(kid)
        if f.arg < 0:  # COUNT(*)
            vals, valid = np.zeros(m, np.int64), np.ones(m, np.bool_)
        else:
            col = cols[f.arg]
            vals = numeric_view(col) if len(col) else np.zeros(0, self._dtype(f))
            vals = vals.astype(self._dtype(f), copy=False)
            valid = col.is_valid().to_numpy(zero_copy_only=False) if col.null_count else np.ones(m, np.bool_)
        st_cnt, st_acc = self.acc.get(j, (np.zeros(1, np.int64), np.zeros(1, vals.dtype)))
        out_cnt, out_acc = np.zeros(m, np.int64), np.zeros(m, vals.dtype)
        _frame_agg(_AGG_CODE[f.kind], kid, ts, vals, valid, emit, before, f.offset, f.peers, st_cnt, st_acc,
                   out_cnt, out_acc)
        if f.kind in ("count", "count_star"):
            return pa.array(out_cnt)
        empty = out_cnt == 0
        if f.kind == "avg":
            return pa.array(out_acc / np.maximum(out_cnt, 1), pa.float64(), mask=empty)
        res = pa.array(out_acc, mask=empty)
        return res if res.type == f.out_type else pc.cast(res, f.out_type)

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
                "order": n.order_col, "funcs": [[f.kind, f.arg, f.offset, f.default, f.peers] for f in n.funcs]}

    def snapshot(self) -> StateImage:
        """``pending`` (immutable Arrow chunks, only ever replaced) and the tails (stored chunks
        are immutable; the per-row arrays are copied here), gathered and encoded later."""
        part = list(self.node.partition)
        st = self.store
        ids, pos = st.held()
        tail = partial(_tail_rows, list(st.chunks), list(st.starts), st.schema, ids, st.ts[ids], st.seq[ids],
                       st.done[ids], pos, part)
        tables = {"pending": partial(_with_vnode, self.pending.table().drop_columns([_KID]), part), "tail": tail}
        if self.acc:  # unbounded aggregates: (count, accumulator) per partition key
            n = self._n_keys()
            keys = self.interner.take(np.arange(n)) if self.interner is not None and n else []
            cols = {f"k{i}": k for i, k in enumerate(keys)}
            for j, (cnt, acc) in self.acc.items():
                cols[f"c{j}"], cols[f"a{j}"] = pa.array(cnt[:n].copy()), pa.array(acc[:n].copy())
            tables["acc"] = partial(_with_vnode, pa.table(cols), list(range(len(keys))))
        return StateImage("over", meta={"plan": self.fingerprint}, counters={"late_dropped": self.late_dropped},
                          tables=tables)

    def restore(self, blob: bytes, *, vnodes=None) -> None:
        """Load a snapshot of the same plan; blobs of disjoint vnode subsets add up."""
        snap = checked_snapshot(blob, "over", self.fingerprint, vnodes)
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
        acc = snap.tables.get("acc")
        if acc is not None and acc.num_rows:
            if self.interner is None:
                kid = np.zeros(acc.num_rows, np.int64)
            else:
                kid = self._kids([acc.column(f"k{i}").combine_chunks() for i in range(len(self.node.partition))],
                                 acc.num_rows)
            for j, (cnt, arr) in self.acc.items():
                cnt[kid] = acc.column(f"c{j}").to_numpy()
                arr[kid] = acc.column(f"a{j}").to_numpy()
        if snap.counters is not None:
            self.late_dropped += int(snap.counters["late_dropped"])


def _tail_rows(chunks, starts, schema: pa.Schema, ids, ts, seq, done, pos, key_cols: list[int]) -> pa.Table:
    t = pa.Table.from_arrays(gather(chunks, starts, schema, ids), schema=schema)
    t = t.append_column(_TS, pa.array(ts, pa.int64())).append_column(_SEQ, pa.array(seq, pa.int64()))
    t = t.append_column(_DONE, pa.array(done, pa.bool_())).append_column("__pos", pa.array(pos, pa.int64()))
    return _with_vnode(t, key_cols)
