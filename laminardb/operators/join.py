"""The join operator: a streaming equi-join of two inputs (inner, left, right, full outer).

Entry point: ``JoinOperator(join)`` for a ``plan.Join``; ``process(side, batch, wm_before)``
(side 0 = left, 1 = right; ``wm_before`` the query's root watermark before the batch),
``on_watermark(wm)``, ``snapshot() -> StateImage`` and ``restore(blob, *, vnodes=None)``.

Each side keeps the rows it has seen (``_Side``); a new batch of one side probes the other
side's rows of equal key (numba kernels in ``_join_kernels``) and is then stored. The output
row of a pair is the left columns, then the right ones, weight = product of the two rows'
weights (inputs that are changelogs carry ``__weight``; a retraction is a row of weight −1,
so the join of Z-sets stays bilinear and needs no lookup of the row it cancels).

Outer joins: a row of a preserved side counts the weight of its matches. Without a time
bound it is emitted NULL-padded while that count is 0 — when it arrives unmatched, and again
if its matches are retracted — and the padded row is retracted when its first match arrives:
a changelog. An interval join knows when a row can match no more (the other side's watermark
has passed its time bound): its padded row is emitted then, once, so its output stays
append-only.

State is bounded by the time condition of an interval join (a row expires once the other
side's watermark has passed it, see ``plan.IntervalBounds``), or by ``state_ttl`` (a row
expires once its own side's watermark is ttl past its event time); otherwise it grows with
the inputs. Rows of an interval join that arrive behind their side's watermark are late:
dropped and counted (their matches may have expired).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa

from laminardb.operators import _join_kernels as J
from laminardb.operators import join_changelog
from laminardb.operators._buffers import hash_rows
from laminardb.operators._interner import Interner
from laminardb.operators.snapshot import DEFAULT_VNODES, Snapshot, StateImage, checked_snapshot
from laminardb.sql.arrays import numeric_view
from laminardb.sql.expressions import evaluate_mask
from laminardb.sql.plan import Join
from laminardb.sql.watermarks import END_OF_TIME, NO_WATERMARK

WEIGHT = "__weight"
_I64_MIN, _I64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
# compact a side once it holds this many dead rows and more dead than live ones: the copy is
# then paid for by the rows that died, never more than once per row
_COMPACT_MIN_DEAD = 4096
# merge the newest stored chunks while the newest is at least half the size of the one
# before: a binary-counter layout, O(log n) chunks, every row copied O(log n) times
_MERGE_RATIO = 2


def _clamp(v: int) -> int:
    return max(_I64_MIN + 1, min(_I64_MAX - 1, v))


class _Side:
    """The stored rows of one input: Arrow chunks plus per-row arrays (key id, event time,
    weight, match weight, alive, chain link)."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.chunks: list[pa.RecordBatch] = []
        self.starts: list[int] = []  # first row index of each chunk
        self.n = 0
        self.n_dead = 0
        cap = 1024
        self.key = np.zeros(cap, np.int64)
        self.ts = np.zeros(cap, np.int64)
        self.w = np.zeros(cap, np.int64)
        self.match = np.zeros(cap, np.int64)
        self.alive = np.zeros(cap, np.bool_)
        self.nxt = np.full(cap, -1, np.int64)
        self.mark = np.zeros(cap, np.bool_)
        self.head = np.full(1024, -1, np.int64)

    @property
    def n_live(self) -> int:
        return self.n - self.n_dead

    def reserve_keys(self, n_keys: int) -> None:
        if n_keys > len(self.head):
            grown = np.full(max(2 * len(self.head), n_keys), -1, np.int64)
            grown[: len(self.head)] = self.head
            self.head = grown

    def _reserve_rows(self, extra: int) -> None:
        need = self.n + extra
        if need <= len(self.key):
            return
        cap = max(2 * len(self.key), need)
        for name in ("key", "ts", "w", "match", "alive", "nxt", "mark"):
            old = getattr(self, name)
            new = np.zeros(cap, old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)

    def append(self, rows: pa.RecordBatch, key: np.ndarray, ts: np.ndarray, w: np.ndarray,
               match: np.ndarray) -> None:
        m = rows.num_rows
        if m == 0:
            return
        if rows.schema is not self.schema and not rows.schema.equals(self.schema):
            rows = pa.RecordBatch.from_arrays(rows.columns, schema=self.schema)  # one schema for all chunks
        self._reserve_rows(m)
        s, e = self.n, self.n + m
        self.key[s:e], self.ts[s:e], self.w[s:e], self.match[s:e] = key, ts, w, match
        self.alive[s:e] = True
        J.link_rows(key, s, self.head, self.nxt)
        self.chunks.append(rows)
        self.starts.append(s)
        self.n = e
        while len(self.chunks) > 1 and _MERGE_RATIO * self.chunks[-1].num_rows >= self.chunks[-2].num_rows:
            b = self.chunks.pop()
            a = self.chunks.pop()
            self.starts.pop()
            self.chunks.append(pa.concat_batches([a, b]))

    def gather(self, idx: np.ndarray) -> list[pa.Array]:
        """The columns of stored rows ``idx`` (any order), chunk by chunk."""
        return gather(self.chunks, self.starts, self.schema, idx)

    def live(self) -> np.ndarray:
        return np.flatnonzero(self.alive[: self.n])


def gather(chunks: list[pa.RecordBatch], starts: list[int], schema: pa.Schema, idx: np.ndarray) -> list[pa.Array]:
    if len(idx) == 0 or not chunks:
        return [pa.array([], f.type) for f in schema]
    if len(chunks) == 1:
        t = pa.array(idx, pa.int64())
        return [c.take(t) for c in chunks[0].columns]
    order = np.argsort(idx, kind="stable")
    sidx = idx[order]
    bounds = np.searchsorted(sidx, np.asarray(starts[1:], np.int64), side="left")
    cuts = [0, *bounds.tolist(), len(sidx)]
    parts: list[list[pa.Array]] = [[] for _ in schema]
    for c, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
        if a == b:
            continue
        local = pa.array(sidx[a:b] - starts[c], pa.int64())
        for j, col in enumerate(chunks[c].columns):
            parts[j].append(col.take(local))
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    inv = pa.array(inverse, pa.int64())
    return [pa.concat_arrays(p).take(inv) if len(p) > 1 else p[0].take(inv) for p in parts]


class JoinOperator:
    """Stateful executor of one ``plan.Join``; see the module docstring."""

    def __init__(self, join: Join) -> None:
        self.join = join
        self.kind = join.kind
        self.preserved = (join.kind in ("left", "full"), join.kind in ("right", "full"))
        self.in_changelog = (join.left.changelog, join.right.changelog)
        nl = len(join.schema) - len(_visible(join.right.schema))
        self.side_schema = (pa.schema(list(join.schema)[:nl]), pa.schema(list(join.schema)[nl:]))
        self.keys = (join.left_keys, join.right_keys)
        self.changelog = join.changelog
        self.schema = join.schema.append(pa.field(WEIGHT, pa.int64())) if self.changelog else join.schema
        iv = join.interval
        if iv is not None:
            self.time_col = (iv.left_col, iv.right_col)
        elif join.ttl is not None:
            self.time_col = (join.ttl_cols[0][0], join.ttl_cols[1][0])
        else:
            self.time_col = (None, None)
        self.late_dropped = 0
        self._reset()

    def _reset(self) -> None:
        #: the sides as the last snapshot saw them (``join_changelog``); None: the next
        #: checkpoint must be a full snapshot (first one, or positions renumbered)
        self._marks: tuple[join_changelog.SideMark, ...] | None = None
        self.interner = Interner([k.type for k in self.keys[0]])
        self.sides = (_Side(self.side_schema[0]), _Side(self.side_schema[1]))
        self._cap = 1024
        self._out_p = np.zeros(self._cap, np.int64)
        self._out_b = np.zeros(self._cap, np.int64)

    # ------------------------------------------------------------------ watermarks per side
    def _side_wm(self, side: int, wm: int) -> int:
        """The watermark of ``side``'s time column, given the query's root watermark."""
        j = self.join
        if wm in (NO_WATERMARK, END_OF_TIME):
            return wm
        if j.interval is not None:
            return (j.interval.left_map if side == 0 else j.interval.right_map)(wm)
        if j.ttl is not None:
            return j.ttl_cols[side][1](wm)
        return wm

    # ------------------------------------------------------------------ contract
    def process(self, side: int, batch: pa.RecordBatch, wm_before: int = NO_WATERMARK) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        batch, w = visible_rows(batch, len(self.side_schema[side]), self.in_changelog[side])
        ts = self._times(side, batch)
        if self.join.interval is not None:
            swm = self._side_wm(side, wm_before)
            if swm != NO_WATERMARK:
                ok = ts >= swm
                if not ok.all():
                    self.late_dropped += int((~ok).sum())
                    keep = pa.array(ok)
                    batch, w, ts = batch.filter(keep), w[ok], ts[ok]
                    if batch.num_rows == 0:
                        return []
        keys = [k.evaluate(batch) for k in self.keys[side]]
        valid = np.ones(batch.num_rows, np.bool_)
        for k in keys:
            if k.null_count:
                valid &= k.is_valid().to_numpy(zero_copy_only=False)
        ids = self.interner.intern(keys)
        me, other = self.sides[side], self.sides[1 - side]
        me.reserve_keys(len(self.interner))
        other.reserve_keys(len(self.interner))
        p_idx, b_idx = self._probe(side, ids, valid, ts, other)
        parts: list[tuple[list[pa.Array], np.ndarray]] = []
        pairs = self._pair_cols(side, batch, p_idx, other, b_idx)
        if self.join.residual is not None and len(p_idx):
            cand = pa.RecordBatch.from_arrays(pairs, schema=self.join.schema)
            mask = evaluate_mask(self.join.residual, cand)
            if not mask.all():
                p_idx, b_idx = p_idx[mask], b_idx[mask]
                keep = pa.array(mask)
                pairs = [c.filter(keep) for c in pairs]
        pw = w[p_idx] * other.w[b_idx]
        after: list[tuple[list[pa.Array], np.ndarray]] = []
        if self.preserved[1 - side] and len(b_idx):
            touched, old = self._count(other, b_idx, w[p_idx])
            if self.join.interval is None:
                new = other.match[touched]
                first, gone = touched[(old == 0) & (new != 0)], touched[(old != 0) & (new == 0)]
                if len(first):
                    parts.append((self._padded(1 - side, other.gather(first)), -other.w[first]))
                if len(gone):
                    after.append((self._padded(1 - side, other.gather(gone)), other.w[gone]))
        parts.append((pairs, pw))
        match = np.zeros(batch.num_rows, np.int64)
        if self.preserved[side]:
            J.sum_by_row(p_idx, other.w[b_idx], match)
            lonely = ~valid if self.join.interval is not None else (match == 0)
            if lonely.any():
                rows = np.flatnonzero(lonely)
                t = pa.array(rows, pa.int64())
                after.append((self._padded(side, [c.take(t) for c in batch.columns]), w[rows]))
        if valid.all():
            me.append(batch, ids, ts, w, match)
        elif valid.any():
            me.append(batch.filter(pa.array(valid)), ids[valid], ts[valid], w[valid], match[valid])
        return self._output(parts + after)

    def on_watermark(self, wm: int) -> list[pa.RecordBatch]:
        j = self.join
        if wm == NO_WATERMARK or (j.interval is None and j.ttl is None):
            return []
        parts = []
        for side in (0, 1):
            if j.interval is not None:
                other_wm = self._side_wm(1 - side, wm)
                if other_wm == NO_WATERMARK:
                    continue
                # left rows match right rows ≥ l − hi … ≤ l − lo; right rows ≥ wr are still to come
                before = _I64_MAX if other_wm == END_OF_TIME else _clamp(
                    other_wm + j.interval.lo if side == 0 else other_wm - j.interval.hi)
            else:
                own = self._side_wm(side, wm)
                if own == NO_WATERMARK:
                    continue
                before = _I64_MAX if own == END_OF_TIME else _clamp(own - j.ttl)
            s = self.sides[side]
            live = s.alive[: s.n]
            die = np.flatnonzero(live & (s.ts[: s.n] < before))
            if len(die) == 0:
                continue
            if j.interval is not None and self.preserved[side]:
                lonely = die[s.match[die] == 0]
                if len(lonely):
                    parts.append((self._padded(side, s.gather(lonely)), s.w[lonely]))
            s.alive[die] = False
            s.n_dead += len(die)
        self._maybe_compact()
        return self._output(parts)

    def state_rows(self) -> tuple[int, int]:
        """Live rows held per side (left, right): what the time bound keeps small."""
        return self.sides[0].n_live, self.sides[1].n_live

    # ------------------------------------------------------------------ helpers
    def _times(self, side: int, batch: pa.RecordBatch) -> np.ndarray:
        c = self.time_col[side]
        if c is None:
            return np.zeros(batch.num_rows, np.int64)
        return numeric_view(batch.column(c)).astype(np.int64, copy=False)

    def _probe(self, side: int, ids, valid, ts, other: _Side) -> tuple[np.ndarray, np.ndarray]:
        iv = self.join.interval
        lo, hi, use = (iv.lo, iv.hi, True) if iv is not None else (0, 0, False)
        sign = 1 if side == 0 else -1
        while True:
            n = J.probe(ids, valid, other.head, other.nxt, other.alive, ts, other.ts, lo, hi, sign, use,
                        self._out_p, self._out_b)
            if n <= self._cap:
                return self._out_p[:n].copy(), self._out_b[:n].copy()
            self._cap = max(2 * self._cap, n)
            self._out_p = np.zeros(self._cap, np.int64)
            self._out_b = np.zeros(self._cap, np.int64)

    def _pair_cols(self, side: int, batch: pa.RecordBatch, p_idx: np.ndarray, other: _Side,
                   b_idx: np.ndarray) -> list[pa.Array]:
        t = pa.array(p_idx, pa.int64())
        mine = [c.take(t) for c in batch.columns]
        theirs = other.gather(b_idx)
        return mine + theirs if side == 0 else theirs + mine

    def _count(self, s: _Side, b_idx: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        touched = np.empty(len(b_idx), np.int64)
        old = np.empty(len(b_idx), np.int64)
        n = J.add_matches(b_idx, weights, s.match, s.mark, touched, old)
        return touched[:n], old[:n]

    def _padded(self, side: int, cols: list[pa.Array]) -> list[pa.Array]:
        n = len(cols[0]) if cols else 0
        pad = [pa.nulls(n, f.type) for f in self.side_schema[1 - side]]
        return list(cols) + pad if side == 0 else pad + list(cols)

    def _output(self, parts: list[tuple[list[pa.Array], np.ndarray]]) -> list[pa.RecordBatch]:
        parts = [p for p in parts if len(p[1])]
        if not parts:
            return []
        ncol = len(self.join.schema)
        cols = [pa.concat_arrays([p[0][i] for p in parts]) if len(parts) > 1 else parts[0][0][i]
                for i in range(ncol)]
        w = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
        if self.changelog:
            cols.append(pa.array(w, pa.int64()))
            return [pa.RecordBatch.from_arrays(cols, schema=self.schema)]
        if (w != 1).any():  # append-only output: a row of weight n is n rows
            idx = pa.array(np.repeat(np.arange(len(w)), np.clip(w, 0, None)), pa.int64())
            cols = [c.take(idx) for c in cols]
        return [pa.RecordBatch.from_arrays(cols, schema=self.schema)]

    def _maybe_compact(self) -> None:
        dead = sum(s.n_dead for s in self.sides)
        live = sum(s.n_live for s in self.sides)
        if dead < _COMPACT_MIN_DEAD or dead <= live:
            return
        keep = [(s.gather(s.live()), s.live()) for s in self.sides]
        old = self.sides
        self._reset()
        for side, (cols, idx) in enumerate(keep):
            o = old[side]
            rows = pa.RecordBatch.from_arrays(cols, schema=self.side_schema[side])
            self._load(side, rows, o.ts[idx], o.w[idx], o.match[idx])

    def _load(self, side: int, rows: pa.RecordBatch, ts, w, match) -> None:
        """Store rows as they were (compaction, restore): keys re-interned, no probing."""
        if rows.num_rows == 0:
            return
        ids = self.interner.intern([k.evaluate(rows) for k in self.keys[side]])
        for s in self.sides:
            s.reserve_keys(len(self.interner))
        self.sides[side].append(rows, ids, np.asarray(ts, np.int64), np.asarray(w, np.int64),
                                np.asarray(match, np.int64))

    # ------------------------------------------------------------------ snapshot
    @property
    def fingerprint(self) -> dict:
        j = self.join
        return {"join": j.kind, "keys": [str(k.type) for k in j.left_keys],
                "left": [str(f.type) for f in self.side_schema[0]],
                "right": [str(f.type) for f in self.side_schema[1]],
                "interval": None if j.interval is None else [j.interval.lo, j.interval.hi], "ttl": j.ttl}

    #: ``snapshot_delta`` can give the changes since the last snapshot (``join_changelog``)
    incremental = True

    def snapshot(self) -> StateImage:
        """The live rows of both sides (copied now, gathered and hashed to vnodes in ``encode``)."""
        self._marks = join_changelog.mark(self.sides, any(self.preserved))
        return StateImage("join", meta={"plan": self.fingerprint}, counters={"late_dropped": self.late_dropped},
                          tables=side_tables(self.sides, self.keys))

    def snapshot_delta(self) -> StateImage | None:
        """What changed since the last ``snapshot``/``snapshot_delta`` (kind ``join.delta``),
        or None when only a full snapshot can follow (none taken yet, or rows renumbered)."""
        if self._marks is None:
            return None
        tables: dict = {}
        for side, name in enumerate(join_changelog.SIDES):
            s = self.sides[side]
            new, dead, changed, match = join_changelog.changes(s, self._marks[side])
            tables[name] = partial(_side_table, list(s.chunks), list(s.starts), s.schema, new,
                                   s.ts[new], s.w[new], s.match[new], self.keys[side])
            tables[f"{name}_dead"] = join_changelog.position_table(dead)
            tables[f"{name}_match"] = join_changelog.position_table(changed, match)
        self._marks = join_changelog.mark(self.sides, any(self.preserved))
        return StateImage("join.delta", meta={"plan": self.fingerprint},
                          counters={"late_dropped": self.late_dropped}, tables=tables)

    def restore_chain(self, blobs: list[bytes | Snapshot], *, vnodes=None) -> None:
        """Load a full snapshot followed by the deltas taken after it."""
        full = checked_snapshot(blobs[0], "join", self.fingerprint)
        deltas = [checked_snapshot(b, "join.delta", self.fingerprint) for b in blobs[1:]]
        self.restore(join_changelog.replay(full, deltas), vnodes=vnodes)

    def restore(self, blob: bytes | Snapshot, *, vnodes=None) -> None:
        """Load a snapshot of a join of the same plan; blobs of disjoint vnode subsets add up."""
        snap = checked_snapshot(blob, "join", self.fingerprint, vnodes)
        for side, rows, t in snapshot_sides(snap, self.side_schema):
            self._load(side, rows, t.column("__ts").to_numpy(), t.column("__w").to_numpy(),
                       t.column("__match").to_numpy())
        if snap.counters is not None:
            self.late_dropped += int(snap.counters["late_dropped"])


def visible_rows(batch: pa.RecordBatch, n_visible: int, changelog: bool) -> tuple[pa.RecordBatch, np.ndarray]:
    """A join input's visible columns and each row's weight (its ``__weight`` column when the
    input is a changelog, else 1)."""
    if changelog:
        w = numeric_view(batch.column(batch.num_columns - 1)).astype(np.int64, copy=True)
    else:
        w = np.ones(batch.num_rows, np.int64)
    if batch.num_columns != n_visible:
        batch = batch.select(list(range(n_visible)))
    return batch, w


_SIDE_NAMES = ("left", "right")


def snapshot_sides(snap, side_schema, sides=(0, 1)):
    """(side, its rows as a batch of the side's schema, the raw table) of each non-empty side
    of a join snapshot (tables ``left`` and ``right``; a lookup join stores only ``right``)."""
    for side in sides:
        t = snap.tables[_SIDE_NAMES[side]]
        if t.num_rows == 0:
            continue
        cols = [t.column(f.name).combine_chunks() for f in side_schema[side]]
        yield side, pa.RecordBatch.from_arrays(cols, schema=side_schema[side]), t


def side_tables(sides, keys, which=(0, 1)) -> dict:
    """The snapshot tables ``left`` and ``right`` of a join (``which`` sides: a lookup join
    stores only its right one): each side's live rows, copied now, gathered and hashed to
    vnodes when encoded."""
    tables = {}
    for side in which:
        s = sides[side]
        idx = s.live()
        tables[_SIDE_NAMES[side]] = partial(_side_table, list(s.chunks), list(s.starts), s.schema, idx,
                               s.ts[idx], s.w[idx], s.match[idx], keys[side])
    return tables


def _side_table(chunks, starts, schema: pa.Schema, idx, ts, w, match, keys) -> pa.Table:
    cols = gather(chunks, starts, schema, idx)
    rows = pa.RecordBatch.from_arrays(cols, schema=schema)
    if len(idx):
        vnode = (hash_rows([k.evaluate(rows) for k in keys]) % np.uint64(DEFAULT_VNODES)).astype(np.int32)
    else:
        vnode = np.zeros(0, np.int32)
    return pa.Table.from_batches([rows]).append_column("__vnode", pa.array(vnode)) \
        .append_column("__ts", pa.array(ts, pa.int64())).append_column("__w", pa.array(w, pa.int64())) \
        .append_column("__match", pa.array(match, pa.int64())).append_column("__pos", pa.array(idx, pa.int64()))


def _visible(schema: pa.Schema) -> pa.Schema:
    i = schema.get_field_index(WEIGHT)
    return schema.remove(i) if i >= 0 else schema
