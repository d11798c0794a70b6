"""Aggregates over ``ROWS BETWEEN n PRECEDING AND CURRENT ROW`` over a changelog input.

Entry point: ``OverChangelogOperator(node)`` for a ``plan.Over`` whose child is a changelog
(``__weight``); ``process(batch, wm_before)``, ``on_watermark(wm)``, ``snapshot() ->
StateImage``, ``restore(blob, *, vnodes=None)`` and ``late_dropped``. Nexmark q6 runs it: the
average of the last 11 winning bids per seller, over the Top-1 bid per auction, which retracts
an auction's previous winner whenever a higher bid arrives.

Semantics. The output is a changelog whose fold is, at every point, the OVER window over the
input rows applied so far: each current input row with the aggregates of its frame — itself and
the ``n`` rows before it in its partition, in the order (ORDER BY value, then the row's
numeric / temporal / boolean columns in column order, NULLs first, then a 64-bit hash of the
whole row). That order is total up to identical rows, so the result does not depend on arrival
order, and an oracle (DuckDB) reproduces it with ``ORDER BY ts, c1, c2, …``. An inserted row
changes the frames of the ``n`` rows after it in its partition, a retracted row those of the
``n`` rows after it: each such row whose aggregates change is retracted with its old values
(``__weight`` −1) and emitted again with the new ones (+1); an inserted row is emitted, a
retracted one retracted. Aggregates are recomputed over the frame (O(n) per changed row), so a
retraction carries exactly the values emitted before.

Event time. When ORDER BY is an event-time column, changes whose time the watermark has not
reached wait (``pending``) and are applied once it has, in one step per batch: an input in
event-time order then mostly appends at the tail of its partitions and emits each row once.
A change whose time is already behind the watermark (a retraction of an old row, a row that
arrived late) is applied at once — nothing is dropped, the affected rows are corrected. With
any other numeric ORDER BY every change is applied at once (NULLs sort first). Rows with a NULL
event time are dropped and counted (``late_dropped``).

State (not bounded by the watermark: any current row may still be retracted): every current
input row (``_Rows``: Arrow chunks of the child's columns, compacted once the dead outnumber the
live) and, sorted by (partition id, order key), per row its key, its row id and the
aggregates' argument values; plus the pending changes. So the state is the live input — for
q6, one row per auction, as the Top-N below it keeps. A step is a numba merge of the sorted
state with the step's consolidated changes (net weight per identical row): O(state) memory
moves at memcpy speed plus O(changes · log state + changed rows · n) work, no per-row Python.

Snapshot (kind ``"over_changelog"``): ``rows`` (the current rows) and ``pending`` (the waiting
changes, with ``__weight``), each row with ``__vnode`` = the stable hash of its partition key;
the order and aggregates are rebuilt on restore.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from laminardb.operators._buffers import hash_rows
from laminardb.operators._interner import Interner
from laminardb.operators.join import gather
from laminardb.operators.over import fold_value
from laminardb.operators.snapshot import StateImage, checked_snapshot
from laminardb.operators.topn import _Pending, _with_vnode
from laminardb.sql.arrays import numeric_view
from laminardb.sql.plan import Over
from laminardb.sql.watermarks import END_OF_TIME, NO_WATERMARK

WEIGHT = "__weight"
_TS = "__ts"
_I64_MIN = np.iinfo(np.int64).min
_FLIP = np.int64(0x7FFFFFFFFFFFFFFF)
_COMPACT_MIN_DEAD = 4096
_AGG_CODE = {"sum": 0, "count": 0, "count_star": 0, "avg": 0, "min": 1, "max": 2}


# --------------------------------------------------------------------------- kernels
@njit(cache=True, nogil=True)
def _cmp(a, i, b, j) -> int:
    for c in range(a.shape[1]):
        x, y = a[i, c], b[j, c]
        if x < y:
            return -1
        if x > y:
            return 1
    return 0


@njit(cache=True, nogil=True)
def _net(keys, order, w, rep, net) -> int:
    """Consolidate: per run of identical keys (``order`` sorts them), its last row and net weight."""
    g = -1
    for t in range(len(order)):
        r = order[t]
        if t == 0 or _cmp(keys, r, keys, order[t - 1]) != 0:
            g += 1
            net[g] = 0
        net[g] += w[r]
        rep[g] = r
    return g + 1


@njit(cache=True, nogil=True)
def _mark_deletes(state, n, dkeys, cnt, dele) -> int:
    """Mark ``cnt[q]`` rows equal to ``dkeys[q]`` deleted in the sorted ``state``; returns how many
    retractions matched no row."""
    unmatched = 0
    for q in range(len(dkeys)):
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if _cmp(state, mid, dkeys, q) < 0:
                lo = mid + 1
            else:
                hi = mid
        c = cnt[q]
        i = lo
        while c > 0 and i < n and _cmp(state, i, dkeys, q) == 0:
            if not dele[i]:
                dele[i] = True
                c -= 1
            i += 1
        unmatched += c
    return unmatched


@njit(cache=True, nogil=True)
def _merge(state, n, dele, ins, reach, perm, del_old, dirty_old, dirty_new, ins_new):
    """Merge the sorted state (``dele``: retracted) with the sorted inserted keys. ``perm``: each
    new row's index in (state ++ ins); the retracted rows, the inserted rows' new places and the
    surviving rows within ``reach`` rows after a change in their partition (old and new places)."""
    m = len(ins)
    i = j = p = nd = ndirty = ni = 0
    since = reach
    cur = 0
    first = True
    while i < n or j < m:
        take_old = j >= m or (i < n and _cmp(state, i, ins, j) <= 0)
        k = state[i, 0] if take_old else ins[j, 0]
        if first or k != cur:
            cur = k
            first = False
            since = reach
        if take_old:
            if dele[i]:
                del_old[nd] = i
                nd += 1
                since = 0
            else:
                if since < reach:
                    dirty_old[ndirty] = i
                    dirty_new[ndirty] = p
                    ndirty += 1
                    since += 1
                perm[p] = i
                p += 1
            i += 1
        else:
            perm[p] = n + j
            ins_new[ni] = p
            ni += 1
            p += 1
            since = 0
            j += 1
    return nd, ndirty, ni


@njit(cache=True, nogil=True)
def _frame_at(code, kid, vals, valid, idx, n, out_cnt, out_acc):
    """Count and sum/min/max (``code`` 0/1/2) over the frame of each row ``idx[t]``: itself and
    the ``n`` rows before it with the same partition id."""
    for t in range(len(idx)):
        i = idx[t]
        c = 0
        a = vals[i] - vals[i]
        lo = i - n
        if lo < 0:
            lo = 0
        j = i
        while j >= lo and kid[j] == kid[i]:
            j -= 1
        for r in range(j + 1, i + 1):
            if valid[r]:
                a = fold_value(a, vals[r], c == 0, code)
                c += 1
        out_cnt[t] = c
        out_acc[t] = a


def _ordered(col: pa.Array) -> np.ndarray:
    """An order-preserving int64 of a numeric/temporal/boolean column; NULL is the smallest."""
    v = numeric_view(col)
    if v.dtype == np.float64:
        bits = v.view(np.int64)
        v = np.where(bits < 0, bits ^ _FLIP, bits)
    else:
        v = v.astype(np.int64, copy=True)
    if col.null_count:
        v[col.is_null().to_numpy(zero_copy_only=False)] = _I64_MIN
    return v


def _orderable(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_timestamp(t) or pa.types.is_date64(t))


class _Rows:
    """The current input rows by id: Arrow chunks, ``alive`` flags; compacted (ids remapped)
    once the dead outnumber the live."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.chunks: list[pa.RecordBatch] = []
        self.starts: list[int] = []
        self.n = 0
        self.n_dead = 0
        self.alive = np.zeros(1024, np.bool_)

    def append(self, rows: pa.RecordBatch) -> np.ndarray:
        need = self.n + rows.num_rows
        if need > len(self.alive):
            grown = np.zeros(max(2 * len(self.alive), need), np.bool_)
            grown[: self.n] = self.alive[: self.n]
            self.alive = grown
        ids = np.arange(self.n, need, dtype=np.int64)
        self.alive[ids] = True
        self.chunks.append(rows)
        self.starts.append(self.n)
        self.n = need
        while len(self.chunks) > 1 and 2 * self.chunks[-1].num_rows >= self.chunks[-2].num_rows:
            b, a = self.chunks.pop(), self.chunks.pop()
            self.starts.pop()
            self.chunks.append(pa.concat_batches([a, b]))
        return ids

    def kill(self, ids: np.ndarray) -> None:
        self.alive[ids] = False
        self.n_dead += len(ids)

    def gather(self, ids: np.ndarray, width: int | None = None) -> list[pa.Array]:
        chunks, schema = self.chunks, self.schema
        if width is not None and width < len(schema):
            schema = pa.schema(list(schema)[:width])
            chunks = [pa.RecordBatch.from_arrays(c.columns[:width], schema=schema) for c in chunks]
        return gather(chunks, self.starts, schema, ids)

    def compact(self) -> np.ndarray | None:
        """Drop the dead rows when due; returns old id → new id (-1: dead), or None."""
        if self.n_dead < _COMPACT_MIN_DEAD or self.n_dead <= self.n - self.n_dead:
            return None
        live = np.flatnonzero(self.alive[: self.n])
        rows = pa.RecordBatch.from_arrays(self.gather(live), schema=self.schema)
        remap = np.full(self.n, -1, np.int64)
        remap[live] = np.arange(len(live))
        self.__init__(self.schema)  # type: ignore[misc]
        if len(live):
            self.append(rows)
        return remap


class OverChangelogOperator:
    """OVER aggregates with ``ROWS n PRECEDING`` frames over a changelog; see the module docstring."""

    incremental = False  # checkpoints take the whole state (no snapshot_delta)

    def __init__(self, node: Over) -> None:
        if any(f.kind in ("lag", "lead") or f.offset < 0 or f.peers for f in node.funcs):  # the planner refuses these
            raise ValueError("over a changelog only aggregates with ROWS BETWEEN n PRECEDING AND CURRENT ROW run")
        self.node = node
        self.in_schema: pa.Schema = node.child.schema
        self.width = len(self.in_schema) - node.hidden
        self.schema: pa.Schema = node.schema.append(pa.field(WEIGHT, pa.int64()))
        self.pending_schema = self.in_schema.append(pa.field(WEIGHT, pa.int64())).append(pa.field(_TS, pa.int64()))
        self.interner = Interner([self.in_schema.field(i).type for i in node.partition]) if node.partition else None
        self.ties = [i for i in range(self.width) if _orderable(self.in_schema.field(i).type)]
        self.hashed = [i for i, f in enumerate(self.in_schema)  # the row's identity among equal keys
                       if _orderable(f.type) or pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
        self.reach = max(f.offset for f in node.funcs)
        self.pending = _Pending(self.pending_schema)
        self.rows = _Rows(self.in_schema)
        w = 3 + len(self.ties)  # partition id, order key, tie columns…, row hash
        self.keys = np.zeros((0, w), np.int64)
        self.rowid = np.zeros(0, np.int64)
        self.vals = [np.zeros(0, self._dtype(f)) for f in node.funcs]
        self.valid = [np.zeros(0, np.bool_) for _ in node.funcs]
        self.late_dropped = 0
        self.unmatched = 0  # retractions of rows never seen (counted, ignored)

    def _dtype(self, f):
        if f.arg < 0:
            return np.int64
        return np.float64 if pa.types.is_floating(self.in_schema.field(f.arg).type) else np.int64

    # ------------------------------------------------------------------ input
    def process(self, batch: pa.RecordBatch, wm_before: int = NO_WATERMARK) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        col = batch.column(self.node.order_col)
        if col.null_count and self.node.time_map is not None:  # no event time: dropped (else NULLs sort first)
            self.late_dropped += col.null_count
            batch = batch.filter(col.is_valid())
            col = batch.column(self.node.order_col)
        ts = _ordered(col)
        cols = list(batch.columns[: len(self.in_schema)])
        weight = batch.column(batch.schema.get_field_index(WEIGHT))
        t = pa.Table.from_arrays(cols + [weight, pa.array(ts)], schema=self.pending_schema)
        if self.node.time_map is None:
            return self._step(t.combine_chunks())
        wm = self.node.time_map(wm_before)
        if wm == NO_WATERMARK:
            self.pending.add(t)
            return []
        now = ts <= wm
        if not now.all():
            self.pending.add(t.filter(pa.array(~now)))
            t = t.filter(pa.array(now))
        ready = self.pending.take_ready(wm)
        return self._step(pa.concat_tables([ready, t]).combine_chunks() if ready.num_rows else t)

    def on_watermark(self, wm: int) -> list[pa.RecordBatch]:
        if self.node.time_map is None:
            return []
        w = END_OF_TIME if wm == END_OF_TIME else self.node.time_map(wm)
        if w == NO_WATERMARK:
            return []
        return self._step(self.pending.take_ready(w))

    # ------------------------------------------------------------------ one step
    def _keys(self, t: pa.Table) -> tuple[np.ndarray, list[pa.Array]]:
        cols = [t.column(i).combine_chunks() for i in range(len(self.in_schema))]
        m = t.num_rows
        kid = self.interner.intern([cols[i] for i in self.node.partition]) if self.interner is not None else \
            np.zeros(m, np.int64)
        parts = [np.asarray(kid, np.int64), t.column(_TS).to_numpy()] + [_ordered(cols[i]) for i in self.ties]
        hashed = [cols[i] for i in self.hashed]
        parts.append(hash_rows(hashed).view(np.int64) if hashed else np.zeros(m, np.int64))
        return np.column_stack(parts) if m else np.zeros((0, self.keys.shape[1]), np.int64), cols

    def _step(self, t: pa.Table, *, emit: bool = True) -> list[pa.RecordBatch]:
        if t.num_rows == 0:
            return []
        keys, cols = self._keys(t)
        w = t.column(WEIGHT).to_numpy().astype(np.int64, copy=False)
        order = np.lexsort(keys.T[::-1])
        rep, net = np.empty(len(order), np.int64), np.empty(len(order), np.int64)
        g = _net(keys, order, w, rep, net)
        rep, net = rep[:g], net[:g]
        plus, minus = net > 0, net < 0
        ins = np.repeat(rep[plus], net[plus])  # in key order
        n = len(self.rowid)
        dele = np.zeros(n, np.bool_)
        if minus.any():
            self.unmatched += int(_mark_deletes(self.keys, n, np.ascontiguousarray(keys[rep[minus]]), -net[minus],
                                                dele))
        d = int(dele.sum())
        if not len(ins) and not d:
            return []
        ikeys = np.ascontiguousarray(keys[ins])
        new_ids = self.rows.append(pa.RecordBatch.from_arrays([c.take(pa.array(ins)) for c in cols],
                                                              schema=self.in_schema)) if len(ins) else \
            np.zeros(0, np.int64)
        m = len(ins)
        perm = np.empty(n - d + m, np.int64)
        del_old = np.empty(d, np.int64)
        cap = min(n, (d + m) * self.reach)
        dirty_old, dirty_new = np.empty(cap, np.int64), np.empty(cap, np.int64)
        ins_new = np.empty(m, np.int64)
        nd, nq, ni = _merge(self.keys, n, dele, ikeys, self.reach, perm, del_old, dirty_old, dirty_new, ins_new)
        dirty_old, dirty_new = dirty_old[:nq], dirty_new[:nq]
        old_kid = self.keys[:, 0]
        keys2 = np.concatenate([self.keys, ikeys])[perm]
        rowid2 = np.concatenate([self.rowid, new_ids])[perm]
        vals2, valid2 = [], []
        for j, f in enumerate(self.node.funcs):
            if f.arg < 0:
                v, ok = np.zeros(m, np.int64), np.ones(m, np.bool_)
            else:
                c = cols[f.arg].take(pa.array(ins)) if m else pa.array([], cols[f.arg].type)
                v = numeric_view(c).astype(self.vals[j].dtype, copy=False) if m else np.zeros(0, self.vals[j].dtype)
                ok = c.is_valid().to_numpy(zero_copy_only=False) if c.null_count else np.ones(m, np.bool_)
            vals2.append(np.concatenate([self.vals[j], v])[perm])
            valid2.append(np.concatenate([self.valid[j], ok])[perm])
        out = []
        if emit:
            old_at = np.concatenate([del_old, dirty_old])
            new_at = np.concatenate([dirty_new, ins_new])
            old_res = [self._agg(f, old_kid, self.vals[j], self.valid[j], old_at) for j, f in enumerate(self.node.funcs)]
            new_res = [self._agg(f, keys2[:, 0], vals2[j], valid2[j], new_at) for j, f in enumerate(self.node.funcs)]
            changed = np.zeros(nq, np.bool_)
            for (oc, oa), (nc, na) in zip(old_res, new_res, strict=True):
                changed |= (oc[nd:] != nc[:nq]) | ((oc[nd:] > 0) & (oa[nd:] != na[:nq]))
            keep_old = np.concatenate([np.ones(nd, np.bool_), changed])
            keep_new = np.concatenate([changed, np.ones(ni, np.bool_)])
            if keep_old.any():
                out.append(self._emit(self.rowid[old_at[keep_old]], [(c[keep_old], a[keep_old]) for c, a in old_res], -1))
            if keep_new.any():
                out.append(self._emit(rowid2[new_at[keep_new]], [(c[keep_new], a[keep_new]) for c, a in new_res], 1))
        if d:
            self.rows.kill(self.rowid[del_old[:nd]])
        self.keys, self.rowid, self.vals, self.valid = keys2, rowid2, vals2, valid2
        remap = self.rows.compact()
        if remap is not None:
            self.rowid = remap[self.rowid]
        return out

    def _agg(self, f, kid, vals, valid, at) -> tuple[np.ndarray, np.ndarray]:
        cnt, acc = np.zeros(len(at), np.int64), np.zeros(len(at), vals.dtype)
        if len(at):
            if f.arg < 0:
                valid = np.ones(len(vals), np.bool_)
            _frame_at(_AGG_CODE[f.kind], kid, vals, valid, at, f.offset, cnt, acc)
        return cnt, acc

    def _emit(self, ids: np.ndarray, res, weight: int) -> pa.RecordBatch:
        out = self.rows.gather(ids, self.width)
        for f, (cnt, acc) in zip(self.node.funcs, res, strict=True):
            if f.kind in ("count", "count_star"):
                out.append(pa.array(cnt))
                continue
            empty = cnt == 0
            if f.kind == "avg":
                out.append(pa.array(acc / np.maximum(cnt, 1), pa.float64(), mask=empty))
                continue
            r = pa.array(acc, mask=empty)
            out.append(r if r.type == f.out_type else pc.cast(r, f.out_type))
        out.append(pa.array(np.full(len(ids), weight, np.int64)))
        return pa.RecordBatch.from_arrays(out, schema=self.schema)

    # ------------------------------------------------------------------ state
    def state_rows(self) -> int:
        return self.pending.num_rows + len(self.rowid)

    def state_bytes(self) -> int:
        return (self.pending.nbytes + sum(c.nbytes for c in self.rows.chunks) + self.keys.nbytes
                + self.rowid.nbytes + sum(v.nbytes for v in self.vals) + sum(v.nbytes for v in self.valid))

    @property
    def fingerprint(self) -> dict:
        n = self.node
        return {"types": [str(f.type) for f in self.in_schema], "partition": list(n.partition), "changelog": True,
                "order": n.order_col, "funcs": [[f.kind, f.arg, f.offset, f.default, f.peers] for f in n.funcs]}

    def snapshot(self) -> StateImage:
        """The current rows (chunks are immutable; the ids are copied here) and the pending
        changes, gathered and encoded later."""
        part = list(self.node.partition)
        rows = partial(_rows_table, list(self.rows.chunks), list(self.rows.starts), self.in_schema,
                       self.rowid.copy(), part)
        tables = {"rows": rows, "pending": partial(_with_vnode, self.pending.table(), part)}
        return StateImage("over_changelog", meta={"plan": self.fingerprint},
                          counters={"late_dropped": self.late_dropped, "unmatched": self.unmatched}, tables=tables)

    def restore(self, blob: bytes, *, vnodes=None) -> None:
        """Load a snapshot of the same plan; blobs of disjoint vnode subsets add up."""
        snap = checked_snapshot(blob, "over_changelog", self.fingerprint, vnodes)
        rows = snap.tables["rows"]
        if rows.num_rows:
            cols = [rows.column(f.name).combine_chunks() for f in self.in_schema]
            ts = _ordered(cols[self.node.order_col])
            t = pa.Table.from_arrays(cols + [pa.array(np.ones(rows.num_rows, np.int64)), pa.array(ts)],
                                     schema=self.pending_schema)
            self._step(t, emit=False)
        pend = snap.tables["pending"]
        if pend.num_rows:
            self.pending.add(pa.Table.from_arrays([pend.column(f.name).combine_chunks() for f in self.pending_schema],
                                                  schema=self.pending_schema))
        if snap.counters is not None:
            self.late_dropped += int(snap.counters["late_dropped"])
            self.unmatched += int(snap.counters.get("unmatched", 0))


def _rows_table(chunks, starts, schema: pa.Schema, ids: np.ndarray, key_cols: list[int]) -> pa.Table:
    return _with_vnode(pa.Table.from_arrays(gather(chunks, starts, schema, ids), schema=schema), key_cols)
