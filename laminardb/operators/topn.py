"""Streaming Top-N and deduplication: ``ROW_NUMBER() OVER (PARTITION BY … ORDER BY …) <= N``
(and ``RANK()`` / ``DENSE_RANK()`` bounded alike).

Entry point: ``TopNOperator(node)`` for a ``plan.TopN``; ``process(batch, wm_before)`` (the
query's root watermark before the batch), ``on_watermark(wm)``, ``snapshot() -> StateImage``,
``restore(blob, *, vnodes=None)`` and ``late_dropped``. The input is the inner SELECT's rows,
append-only (the planner refuses a changelog), with the row number as a placeholder column and
the PARTITION BY / ORDER BY values as hidden trailing columns.

Top-N (``mode="topn"``, Flink's AppendOnlyTopNFunction): each partition keeps its current top
``n`` rows — nothing else, since an append-only input never retracts a row that could bring a
lower one back (``_Store``: its slots find the held rows of a batch's partitions without
scanning the others). A batch is ranked once: the held rows of the partitions it touches plus
its own rows are sorted (partition, ORDER BY keys, arrival), numbered per partition, cut at
``n``, and the output is the difference — ``__weight`` −1 for a held row that left the top (or, when the
row number is read downstream, whose number changed) and +1 for a row that entered (or got a
new number). So a batch emits one consolidated change per row, not one per arriving row; the
changelog folds to the same rows. Equal sort keys rank the earlier arrival first, as in Flink,
or the later one (``ties_last``) for its keep-last-row deduplication.

``RANK()`` / ``DENSE_RANK()`` (``node.kind``): rows whose ORDER BY values are equal (peers,
NULLs equal to NULLs) share a rank — RANK's next rank skips the tied ones (1, 2, 2, 4), DENSE_RANK's
does not (1, 2, 2, 3) — and every row ranked ``n`` or better is kept, so a partition may hold more
than ``n`` rows. A rank only grows as rows arrive (the input is append-only), so a row that left
never comes back, and all peers of a held row are held. The slots table then grows wider than
``n`` to fit the most rows any partition holds (ties at the bound cost memory in every partition).

Deduplication keeping the first row (``mode="first"``, ``ORDER BY <event time> ASC``, ``n=1``):
a partition's candidate (its earliest row so far, the earlier arrival on equal times) is
emitted once the watermark of that column has reached its time — no row that could precede it
can come after that — and the partition is then closed for good: the output is append-only, at
the price of the watermark's delay. Rows behind the watermark are late: dropped and counted.
Per partition the candidate's (time, arrival) sit in numpy arrays, so a batch costs O(its rows);
candidates wait in ``_Pending`` chunks by event-time range until the watermark reaches them.

Snapshot (kind ``"topn"``): the held rows (``rows``: Top-N / the pending candidates, with their
emitted number ``__rank`` and their place ``__pos`` in the partition's slots) and the closed
partitions (``done``), each row with ``__vnode`` = the stable hash of its partition key.
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
from laminardb.operators.snapshot import DEFAULT_VNODES, StateImage, checked_snapshot
from laminardb.sql.arrays import numeric_view
from laminardb.sql.plan import TopN
from laminardb.sql.watermarks import END_OF_TIME, NO_WATERMARK

WEIGHT = "__weight"
_KID, _SEQ, _RANK, _POS, _TS = "__kid", "__seq", "__rank", "__pos", "__ts"
_I64_MAX = int(np.iinfo(np.int64).max)
_ROW_ARRAYS = ("kid", "seq", "rank", "ts", "done", "alive")
_INITIAL_KEYS = 1024  # partitions; the slot table doubles as keys are interned
# compact the store once it holds this many dead rows and more dead than live ones: the copy
# is then paid for by the rows that died, never more than once per row (as a join's sides)
_COMPACT_MIN_DEAD = 4096
# merge the newest stored chunks while the newest is at least half the size of the one before:
# O(log n) chunks, every row copied O(log n) times
_MERGE_RATIO = 2


@njit(cache=True, nogil=True)
def _segment_ranks(kid_sorted: np.ndarray) -> np.ndarray:
    """1, 2, 3, … within each run of equal partition ids (the rows sorted by partition first)."""
    n = len(kid_sorted)
    out = np.empty(n, np.int64)
    r = 0
    for i in range(n):
        if i == 0 or kid_sorted[i] != kid_sorted[i - 1]:
            r = 1
        else:
            r += 1
        out[i] = r
    return out


@njit(cache=True, nogil=True)
def _peer_ranks(kid_sorted: np.ndarray, new_value: np.ndarray, dense: bool) -> np.ndarray:
    """RANK (or DENSE_RANK) within each run of equal partition ids; ``new_value[i]``: row i's
    ORDER BY values differ from row i - 1's (the rows sorted by partition, then those values)."""
    n = len(kid_sorted)
    out = np.empty(n, np.int64)
    rn = 0
    r = 0
    for i in range(n):
        if i == 0 or kid_sorted[i] != kid_sorted[i - 1]:
            rn = 1
            r = 1
        else:
            rn += 1
            if new_value[i]:
                r = r + 1 if dense else rn
        out[i] = r
    return out


def _new_values(cols: list[pa.Array], order: np.ndarray) -> np.ndarray:
    """Per sorted row: its ORDER BY values differ from the previous sorted row's (NULL = NULL)."""
    n = len(order)
    out = np.zeros(n, np.bool_)
    if n < 2:
        return out
    idx = pa.array(order, pa.int64())
    for col in cols:
        a = col.take(idx)
        x, y = a.slice(1), a.slice(0, n - 1)
        xn, yn = pc.is_null(x), pc.is_null(y)
        differ = pc.if_else(pc.or_(xn, yn), pc.xor(xn, yn), pc.not_equal(x, y))
        out[1:] |= differ.to_numpy(zero_copy_only=False)
    return out


def _column(t: pa.Table, name: str) -> np.ndarray:
    return t.column(name).to_numpy()


class _Store:
    """The rows a Top-N holds: Arrow chunks of the inner block's columns, per-row arrays (partition
    id, arrival, the number it was emitted with, alive; event time and "emitted" for the OVER
    operator's tails) and ``slots[kid, r - 1]`` = the row now numbered ``r`` in partition ``kid``
    (-1: none), so a batch finds its partitions' rows in O(N) each. Rows that leave the top die
    in place; the store is compacted once dead rows outnumber live ones."""

    def __init__(self, schema: pa.Schema, n: int) -> None:
        self.schema = schema
        self.chunks: list[pa.RecordBatch] = []
        self.starts: list[int] = []
        self.n = 0
        self.n_dead = 0
        self.kid = np.zeros(1024, np.int64)
        self.seq = np.zeros(1024, np.int64)
        self.rank = np.zeros(1024, np.int64)
        self.ts = np.zeros(1024, np.int64)
        self.done = np.zeros(1024, np.bool_)
        self.alive = np.zeros(1024, np.bool_)
        self.slots = np.full((_INITIAL_KEYS, n), -1, np.int64)

    @property
    def n_live(self) -> int:
        return self.n - self.n_dead

    def reserve_keys(self, n_keys: int) -> None:
        if n_keys > len(self.slots):
            grown = np.full((max(2 * len(self.slots), n_keys), self.slots.shape[1]), -1, np.int64)
            grown[: len(self.slots)] = self.slots
            self.slots = grown

    def reserve_width(self, width: int) -> None:
        """Room for ``width`` held rows per partition (RANK / DENSE_RANK ties past ``n``)."""
        if width > self.slots.shape[1]:
            grown = np.full((len(self.slots), max(2 * self.slots.shape[1], width)), -1, np.int64)
            grown[:, : self.slots.shape[1]] = self.slots
            self.slots = grown

    def append(self, rows: pa.RecordBatch, kid: np.ndarray, seq: np.ndarray, rank: np.ndarray,
               ts: np.ndarray | int = 0, done: np.ndarray | bool = False) -> np.ndarray:
        m = rows.num_rows
        need = self.n + m
        if need > len(self.kid):
            cap = max(2 * len(self.kid), need)
            for name in _ROW_ARRAYS:
                old = getattr(self, name)
                new = np.zeros(cap, old.dtype)
                new[: self.n] = old[: self.n]
                setattr(self, name, new)
        ids = np.arange(self.n, need, dtype=np.int64)
        self.kid[ids], self.seq[ids], self.rank[ids], self.alive[ids] = kid, seq, rank, True
        self.ts[ids], self.done[ids] = ts, done
        if not rows.schema.equals(self.schema):
            rows = pa.RecordBatch.from_arrays(rows.columns, schema=self.schema)
        self.chunks.append(rows)
        self.starts.append(self.n)
        self.n = need
        while len(self.chunks) > 1 and _MERGE_RATIO * self.chunks[-1].num_rows >= self.chunks[-2].num_rows:
            b, a = self.chunks.pop(), self.chunks.pop()
            self.starts.pop()
            self.chunks.append(pa.concat_batches([a, b]))
        return ids

    def gather(self, idx: np.ndarray, cols: list[int] | None = None) -> list[pa.Array]:
        chunks = self.chunks
        if cols is not None:
            schema = pa.schema([self.schema.field(i) for i in cols])
            chunks = [pa.RecordBatch.from_arrays([c.column(i) for i in cols], schema=schema) for c in chunks]
        else:
            schema = self.schema
        return gather(chunks, self.starts, schema, idx)

    def held(self) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, their numbers) of every row in a top."""
        k, j = np.nonzero(self.slots >= 0)
        return self.slots[k, j], j.astype(np.int64) + 1

    def compact(self) -> None:
        if self.n_dead < _COMPACT_MIN_DEAD or self.n_dead <= self.n_live:
            return
        live = np.flatnonzero(self.alive[: self.n])
        rows = pa.RecordBatch.from_arrays(self.gather(live), schema=self.schema)
        remap = np.full(self.n, -1, np.int64)
        remap[live] = np.arange(len(live))
        kid, seq, rank, ts, done = (getattr(self, a)[live] for a in ("kid", "seq", "rank", "ts", "done"))
        slots = self.slots
        self.__init__(self.schema, slots.shape[1])  # type: ignore[misc]
        self.slots = np.where(slots >= 0, remap[np.maximum(slots, 0)], -1)
        if len(live):
            self.append(rows, kid, seq, rank, ts, done)


class _Pending:
    """Rows the watermark has not reached yet, as chunks with their event-time range: a
    watermark below every row costs O(1), a chunk wholly behind it moves without a filter."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.chunks: list[tuple[pa.Table, int, int]] = []
        self.lo = END_OF_TIME

    @property
    def num_rows(self) -> int:
        return sum(c.num_rows for c, _, _ in self.chunks)

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c, _, _ in self.chunks)

    def add(self, t: pa.Table) -> None:
        if t.num_rows:
            ts = t.column(_TS).to_numpy()
            lo = int(ts.min())
            self.chunks.append((t, lo, int(ts.max())))
            self.lo = min(self.lo, lo)

    def table(self) -> pa.Table:
        return pa.concat_tables([c for c, _, _ in self.chunks]) if self.chunks else self.schema.empty_table()

    def take_ready(self, wm: int) -> pa.Table:
        """Remove and return the rows with event time ≤ ``wm``."""
        if wm < self.lo:
            return self.schema.empty_table()
        ready, keep = [], []
        for c, lo, hi in self.chunks:
            if hi <= wm:
                ready.append(c)
            elif lo > wm:
                keep.append((c, lo, hi))
            else:
                ts = c.column(_TS).to_numpy()
                mask = ts <= wm
                ready.append(c.filter(pa.array(mask)))
                keep.append((c.filter(pa.array(~mask)), int(ts[~mask].min()), hi))
        self.chunks = keep
        self.lo = min((lo for _, lo, _ in keep), default=END_OF_TIME)
        return pa.concat_tables(ready).combine_chunks() if ready else self.schema.empty_table()


class TopNOperator:
    """Top-N (a changelog) or first-row deduplication (append-only); see the module docstring."""

    incremental = False  # checkpoints take the whole state (no snapshot_delta)

    def __init__(self, node: TopN) -> None:
        self.node = node
        self.in_schema: pa.Schema = node.child.schema
        self.width = len(self.in_schema) - node.hidden
        visible = pa.schema(list(self.in_schema)[: self.width])
        self.schema = visible.append(pa.field(WEIGHT, pa.int64())) if node.changelog else visible
        self.interner = Interner([self.in_schema.field(i).type for i in node.partition]) if node.partition else None
        self.state_schema = self._state_schema()
        self.pending = _Pending(self.state_schema)  # "first": candidates the watermark has not reached
        self.cand_ts = np.full(1024, _I64_MAX, np.int64)  # "first": each partition's candidate (time, arrival)
        self.cand_seq = np.full(1024, -1, np.int64)
        self.store = _Store(self.in_schema, node.n)  # "topn": the tops
        self.done = np.zeros(1024, np.bool_)  # "first": partitions whose row was emitted
        self.seq = 0  # arrival order, the tie-break of equal sort keys
        self.late_dropped = 0

    def _state_schema(self) -> pa.Schema:
        extra = [pa.field(_KID, pa.int64()), pa.field(_SEQ, pa.int64()), pa.field(_TS, pa.int64())]
        return pa.schema(list(self.in_schema) + extra)

    @property
    def n_keys(self) -> int:
        return 1 if self.interner is None else len(self.interner)

    # ------------------------------------------------------------------ rows in
    def _kids(self, cols: list[pa.Array], n: int) -> np.ndarray:
        if self.interner is None:
            return np.zeros(n, np.int64)
        kid = self.interner.intern(cols)
        if len(self.interner) > len(self.done):
            cap = max(2 * len(self.done), len(self.interner))
            for name, fill in (("done", False), ("cand_ts", _I64_MAX), ("cand_seq", -1)):
                old = getattr(self, name)
                grown = np.full(cap, fill, old.dtype)
                grown[: len(old)] = old
                setattr(self, name, grown)
        return kid

    def _seqs(self, m: int) -> np.ndarray:
        seq = np.arange(self.seq, self.seq + m, dtype=np.int64)
        self.seq += m
        return seq

    def process(self, batch: pa.RecordBatch, wm_before: int = NO_WATERMARK) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        if batch.num_columns > len(self.in_schema):
            batch = pa.RecordBatch.from_arrays(batch.columns[: len(self.in_schema)], schema=self.in_schema)
        kid = self._kids([batch.column(i) for i in self.node.partition], batch.num_rows)
        if self.node.mode == "first":
            return self._first(batch, kid, self.node.time_map(wm_before))
        return self._topn(batch, kid)

    def on_watermark(self, wm: int) -> list[pa.RecordBatch]:
        if self.node.mode != "first":
            return []
        return self._release(self.node.time_map(wm))

    # ------------------------------------------------------------------ Top-N
    def _sort(self, kid: np.ndarray, cols: list[pa.Array], seq: np.ndarray, ties_last: bool) -> np.ndarray:
        """Row order by (partition, ORDER BY keys with their NULL placement, arrival)."""
        table: dict[str, pa.Array] = {_KID: pa.array(kid)}
        keys = [(_KID, "ascending")]
        for j, ((_, desc, nulls_first), col) in enumerate(zip(self.node.order, cols, strict=True)):
            if col.null_count:
                table[f"n{j}"] = pc.is_null(col)  # NULLs as the lowest or highest values
                keys.append((f"n{j}", "descending" if nulls_first else "ascending"))
            table[f"o{j}"] = col
            keys.append((f"o{j}", "descending" if desc else "ascending"))
        table[_SEQ] = pa.array(seq)
        keys.append((_SEQ, "descending" if ties_last else "ascending"))
        return pc.sort_indices(pa.table(table), sort_keys=keys).to_numpy()

    def _topn(self, batch: pa.RecordBatch, kid: np.ndarray) -> list[pa.RecordBatch]:
        node, st = self.node, self.store
        m = batch.num_rows
        st.reserve_keys(self.n_keys)
        touched = np.unique(kid)
        old = st.slots[touched].ravel()
        old = old[old >= 0]
        k = len(old)
        order_cols = [i for i, _, _ in node.order]
        held_vals = st.gather(old, order_cols)
        cols = [pa.concat_arrays([h, batch.column(i)]) if k else batch.column(i)
                for h, i in zip(held_vals, order_cols, strict=True)]
        kids = np.concatenate([st.kid[old], kid])
        seqs = np.concatenate([st.seq[old], self._seqs(m)])
        order = self._sort(kids, cols, seqs, node.ties_last)
        pos_sorted = _segment_ranks(kids[order])  # the place in the partition: 1, 2, 3, …
        if node.kind == "row_number":
            ranks = pos_sorted
        else:
            ranks = _peer_ranks(kids[order], _new_values(cols, order), node.kind == "dense_rank")
        keep = ranks <= node.n
        rank = np.zeros(k + m, np.int64)
        rank[order[keep]] = ranks[keep]
        pos = np.zeros(k + m, np.int64)
        pos[order[keep]] = pos_sorted[keep]
        was = np.concatenate([st.rank[old], np.zeros(m, np.int64)])  # 0: a new row
        is_old = np.arange(k + m) < k
        emitted = rank.copy()
        if node.rank_used:
            gone, came = is_old & (rank != was), (rank > 0) & (rank != was)
        else:  # nobody reads the number: only entering and leaving rows count, numbers stay as emitted
            gone, came = is_old & (rank == 0), ~is_old & (rank > 0)
            emitted = np.where(is_old & (rank > 0), was, rank)
        out = []
        if gone.any():
            out.append(self._emit(st.gather(old[gone[:k]]), was[gone], -1))
        if came.any():
            c_old, c_new = np.flatnonzero(came[:k]), np.flatnonzero(came[k:])
            parts = st.gather(old[c_old])
            if len(c_new):
                taken = batch.take(pa.array(c_new, pa.int64())).columns
                parts = [pa.concat_arrays([a, b]) for a, b in zip(parts, taken, strict=True)] if len(c_old) else taken
            out.append(self._emit(parts, np.concatenate([rank[c_old], rank[k + c_new]]), 1))
        # the store: old rows out of the top die, new rows in it are appended, slots renumbered
        dead = old[rank[:k] == 0]
        st.alive[dead] = False
        st.n_dead += len(dead)
        st.rank[old] = emitted[:k]
        ids = np.concatenate([old, np.full(m, -1, np.int64)])
        fresh = np.flatnonzero(rank[k:] > 0)
        if len(fresh):
            rows = batch.take(pa.array(fresh, pa.int64()))
            ids[k + fresh] = st.append(rows, kid[fresh], seqs[k + fresh], emitted[k + fresh])
        st.slots[touched] = -1
        inside = np.flatnonzero(rank > 0)
        if len(inside):
            st.reserve_width(int(pos[inside].max()))
        st.slots[kids[inside], pos[inside] - 1] = ids[inside]
        st.compact()
        return out

    def _emit(self, cols: list[pa.Array], rank: np.ndarray, weight: int) -> pa.RecordBatch:
        cols = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in cols[: self.width]]
        cols[self.node.rank_index] = pa.array(rank, pa.int64())
        if self.node.changelog:
            cols.append(pa.array(np.full(len(rank), weight, np.int64)))
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)

    # ------------------------------------------------------------------ first row
    def _first(self, batch: pa.RecordBatch, kid: np.ndarray, wm: int) -> list[pa.RecordBatch]:
        col = batch.column(self.node.order[0][0])
        ts = numeric_view(col).astype(np.int64, copy=False)
        late = ts < wm if wm != NO_WATERMARK else np.zeros(len(ts), np.bool_)
        if col.null_count:
            late |= col.is_null().to_numpy(zero_copy_only=False)
        self.late_dropped += int(late.sum())
        idx = np.flatnonzero(~late & ~self.done[kid])
        if len(idx):
            k, t, seq = kid[idx], ts[idx], self._seqs(len(idx))
            order = np.lexsort((seq, t, k))
            ks = k[order]
            first = order[np.r_[True, ks[1:] != ks[:-1]]]  # each partition's earliest row of the batch
            win = first[t[first] < self.cand_ts[k[first]]]  # earlier than its candidate (ties: the older wins)
            if len(win):
                self.cand_ts[k[win]], self.cand_seq[k[win]] = t[win], seq[win]
                rows = batch.take(pa.array(idx[win]))
                # a replaced candidate stays in ``pending``: it is told apart by its arrival (cand_seq)
                self.pending.add(pa.Table.from_arrays(
                    list(rows.columns[: len(self.in_schema)]) + [pa.array(k[win]), pa.array(seq[win]),
                                                                 pa.array(t[win])], schema=self.state_schema))
        return self._release(wm)

    def _current(self, t: pa.Table) -> np.ndarray:
        return self.cand_seq[_column(t, _KID)] == _column(t, _SEQ)

    def _release(self, wm: int) -> list[pa.RecordBatch]:
        if wm == NO_WATERMARK:
            return []
        now = self.pending.take_ready(wm)
        if not now.num_rows:
            return []
        rows = now.filter(pa.array(self._current(now)))
        if not rows.num_rows:
            return []
        k = _column(rows, _KID)
        self.done[k] = True
        self.cand_ts[k] = _I64_MAX
        return [self._emit(rows.columns, np.ones(rows.num_rows, np.int64), 1)]

    # ------------------------------------------------------------------ state
    def state_rows(self) -> int:
        """Rows held (the tops, or the pending first rows) plus closed partitions."""
        return self.pending.num_rows + self.store.n_live + int(self.done.sum())

    def state_bytes(self) -> int:
        keys = 0 if self.interner is None else self.interner.arena.nbytes + self.interner.tab_ids.nbytes * 2
        st = self.store
        rows = sum(c.nbytes for c in st.chunks) + st.slots.nbytes + sum(getattr(st, a).nbytes for a in _ROW_ARRAYS)
        return self.pending.nbytes + self.done.nbytes * 17 + keys + rows

    @property
    def fingerprint(self) -> dict:
        n = self.node
        out: dict[str, object] = {"mode": n.mode, "n": n.n, "types": [str(f.type) for f in self.in_schema],
                                  "partition": list(n.partition), "order": [list(o) for o in n.order],
                                  "ties_last": n.ties_last}
        if n.kind != "row_number":  # absent for ROW_NUMBER: its snapshots stay as they were
            out["kind"] = n.kind
        return out

    def snapshot(self) -> StateImage:
        """The tops (or the pending first rows) and the closed partitions. Stored chunks and the
        pending table are immutable Arrow data, only ever replaced; the per-row arrays are copied
        here, so the image may gather and encode later, off the engine lock."""
        part = list(self.node.partition)
        if self.node.mode == "first":
            pending = self.pending.table()
            pending = pending.filter(pa.array(self._current(pending)))  # without replaced candidates
            rows = partial(_with_vnode, pending.drop_columns([_KID]), part)
        else:
            st = self.store
            ids, pos = st.held()
            rows = partial(_store_rows, list(st.chunks), list(st.starts), st.schema, ids, st.seq[ids], st.rank[ids],
                           pos, part)
        tables = {"rows": rows}
        if self.interner is None:
            tables["done"] = pa.table({"__vnode": pa.array(np.zeros(int(self.done[0]), np.int32))})
        else:
            ids = np.flatnonzero(self.done[: len(self.interner)])
            keys = self.interner.take(ids) if len(ids) else [pa.array([], f.type) for f in self._key_fields()]
            tables["done"] = partial(_with_vnode, pa.Table.from_arrays(keys, names=[f"k{i}" for i in range(len(keys))]),
                                     list(range(len(keys))))
        return StateImage("topn", meta={"plan": self.fingerprint},
                          counters={"late_dropped": self.late_dropped}, tables=tables)

    def _key_fields(self) -> list[pa.Field]:
        return [self.in_schema.field(i) for i in self.node.partition]

    def restore(self, blob: bytes, *, vnodes=None) -> None:
        """Load a snapshot of a Top-N of the same plan; blobs of disjoint vnode subsets add up."""
        snap = checked_snapshot(blob, "topn", self.fingerprint, vnodes)
        rows = snap.tables["rows"]
        if rows.num_rows:
            cols = [rows.column(f.name).combine_chunks() for f in self.in_schema]
            kid = self._kids([cols[i] for i in self.node.partition], rows.num_rows)
            seq = rows.column(_SEQ).to_numpy()
            self.seq = max(self.seq, int(seq.max()) + 1)
            if self.node.mode == "first":
                t = pa.Table.from_arrays(cols + [pa.array(kid), pa.array(seq), rows.column(_TS).combine_chunks()],
                                         schema=self.state_schema)
                self.pending.add(t)
                self.cand_ts[kid], self.cand_seq[kid] = _column(t, _TS), seq
            else:
                st = self.store
                st.reserve_keys(self.n_keys)
                batch = pa.RecordBatch.from_arrays(cols, schema=self.in_schema)
                ids = st.append(batch, kid, seq, rows.column(_RANK).to_numpy())
                pos = rows.column(_POS).to_numpy()
                st.reserve_width(int(pos.max()))
                st.slots[kid, pos - 1] = ids
        done = snap.tables["done"]
        if done.num_rows:
            if self.interner is None:
                self.done[0] = True
            else:
                cols = [done.column(f"k{i}").combine_chunks() for i in range(len(self.node.partition))]
                self.done[self._kids(cols, done.num_rows)] = True
        if snap.counters is not None:
            self.late_dropped += int(snap.counters["late_dropped"])


def _store_rows(chunks, starts, schema: pa.Schema, ids, seq, rank, pos, key_cols: list[int]) -> pa.Table:
    cols = gather(chunks, starts, schema, ids)
    t = pa.Table.from_arrays(cols, schema=schema)
    t = t.append_column(_SEQ, pa.array(seq, pa.int64())).append_column(_RANK, pa.array(rank, pa.int64()))
    return _with_vnode(t.append_column(_POS, pa.array(pos, pa.int64())), key_cols)


def _with_vnode(t: pa.Table, key_cols: list[int]) -> pa.Table:
    """``t`` with ``__vnode`` = stable hash of its partition key columns % V (0 with no key)."""
    if key_cols and t.num_rows:
        cols = [t.column(i).combine_chunks() for i in key_cols]
        vnode = (hash_rows(cols) % np.uint64(DEFAULT_VNODES)).astype(np.int32)
    else:
        vnode = np.zeros(t.num_rows, np.int32)
    return t.append_column("__vnode", pa.array(vnode))
