"""The ASOF join and the event-time temporal join: each left row with the one right row of its
key closest in time, emitted once that match is final.

Entry point: ``AsofJoinOperator(node)`` for a ``plan.AsofJoin``; ``process(side, batch, wm_before)``
(side 0 = left, 1 = right), ``on_watermark(wm)``, ``snapshot() -> StateImage``,
``restore(blob, *, vnodes=None)``. The temporal join (``JOIN r FOR SYSTEM_TIME AS OF l.t``
against a source with ``PRIMARY KEY … NOT ENFORCED``) is the same operator with ``>=`` on the
primary key: a right row is the version of its key from its event time on.

When a row is emitted (``W_r`` = the right time column's watermark; right rows arriving later
are never older than it — those that are, are late, dropped and counted):

* ``>=`` / ``>``: once ``W_r`` has passed the left row's time (``W_r > t`` / ``W_r ≥ t``): no
  later right row can be at or before it;
* ``<=`` / ``<``: once ``W_r`` has passed the time of its best match so far (no later right row
  can come between), or at the end of input. A left row whose key gets no right row at or after
  its time waits for one.

Left rows wait in ``pending`` (in arrival order, emitted in that order). Output is append-only;
a LEFT ASOF JOIN emits a left row NULL-padded when it has no match once it is final.

Bounded state: after each watermark every key keeps only the right rows a future left row can
still match. Future left rows of key k are no older than ``B_k`` = min(left watermark, oldest
pending left row of k) (older left rows are late: dropped and counted). For ``>=``/``>`` a key
keeps its latest right row before ``B_k`` plus the newer ones; for ``<=``/``<`` only rows at or
after ``B_k``. So the right side holds one row per key plus the rows within the watermark
delay; pending left rows are those within the delay (``<=``/``<``: until their key's right
side passes them). Dead rows are compacted away once they outnumber the live ones.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from laminardb.operators import _asof_kernels as A
from laminardb.operators._interner import Interner
from laminardb.operators.join import _Side, _visible, side_tables, snapshot_sides
from laminardb.operators.snapshot import StateImage, checked_snapshot
from laminardb.sql.arrays import numeric_view
from laminardb.sql.plan import AsofJoin
from laminardb.sql.watermarks import END_OF_TIME, NO_WATERMARK

_I64_MAX = int(np.iinfo(np.int64).max)
# compact once this many rows are dead and they outnumber the live ones (as join.py does)
_COMPACT_MIN_DEAD = 4096


class AsofJoinOperator:
    """Stateful executor of one ``plan.AsofJoin``; see the module docstring."""

    incremental = False  # checkpoints take the whole state (no snapshot_delta)

    def __init__(self, node: AsofJoin) -> None:
        self.node = node
        self.op = A.OPS[node.op]
        nl = len(node.schema) - len(_visible(node.right.schema))
        self.side_schema = (pa.schema(list(node.schema)[:nl]), pa.schema(list(node.schema)[nl:]))
        self.keys = (node.left_keys, node.right_keys)
        self.time_col = (node.left_col, node.right_col)
        self.schema = node.schema
        self.changelog = False
        self.late_dropped = 0
        self.wm = NO_WATERMARK
        self._reset()

    def _reset(self) -> None:
        self.interner = Interner([k.type for k in self.keys[0]])
        self.sides = (_Side(self.side_schema[0]), _Side(self.side_schema[1]))

    # ------------------------------------------------------------------ contract
    def process(self, side: int, batch: pa.RecordBatch, wm_before: int = NO_WATERMARK) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        nvis = len(self.side_schema[side])
        if batch.num_columns != nvis:
            batch = batch.select(list(range(nvis)))
        tcol = batch.column(self.time_col[side])
        ts = numeric_view(tcol).astype(np.int64, copy=False)
        ok = np.ones(batch.num_rows, np.bool_) if tcol.null_count == 0 else tcol.is_valid().to_numpy(
            zero_copy_only=False)
        out: list[pa.RecordBatch] = []
        if not ok.all() and side == 0 and self.node.kind == "left":  # no time: no match, ever
            out += self._padded(batch.filter(pa.array(~ok)))
        swm = self._side_wm(side, max(self.wm, wm_before))
        if swm != NO_WATERMARK:
            late = ok & (ts < swm)
            if late.any():
                self.late_dropped += int(late.sum())
                ok &= ~late
        keys = [k.evaluate(batch) for k in self.keys[side]]
        if side == 1 or self.node.kind == "inner":  # a NULL key matches nothing
            for k in keys:
                if k.null_count:
                    ok &= k.is_valid().to_numpy(zero_copy_only=False)
        if not ok.all():
            if not ok.any():
                return out
            keep = pa.array(ok)
            batch, ts, keys = batch.filter(keep), ts[ok], [k.filter(keep) for k in keys]
        ids = self.interner.intern(keys)
        for s in self.sides:
            s.reserve_keys(len(self.interner))
        me = self.sides[side]
        start = me.n
        me.append(batch, ids, np.ascontiguousarray(ts), np.ones(batch.num_rows, np.int64),
                  np.zeros(batch.num_rows, np.int64))
        if side == 0 and self.wm != NO_WATERMARK:  # rows already final (a right side ahead of the left)
            out += self._emit(np.arange(start, me.n, dtype=np.int64), self._side_wm(1, self.wm))
        return out

    def on_watermark(self, wm: int) -> list[pa.RecordBatch]:
        if wm == NO_WATERMARK:
            return []
        self.wm = max(self.wm, wm)
        left = self.sides[0]
        out = self._emit(left.live(), self._side_wm(1, self.wm))
        self._prune(self._side_wm(0, self.wm))
        self._maybe_compact()
        return out

    def state_rows(self) -> tuple[int, int]:
        """Live rows held: pending left rows, stored right rows."""
        return self.sides[0].n_live, self.sides[1].n_live

    def state_bytes(self) -> int:
        total = 0
        for s in self.sides:
            total += sum(c.nbytes for c in s.chunks)
            total += sum(getattr(s, a).nbytes for a in ("key", "ts", "w", "match", "alive", "nxt", "mark", "head"))
        return total + self.interner.arena.nbytes + self.interner.tab_ids.nbytes * 2

    # ------------------------------------------------------------------ helpers
    def _side_wm(self, side: int, wm: int) -> int:
        if wm in (NO_WATERMARK, END_OF_TIME):
            return wm
        return (self.node.left_map if side == 0 else self.node.right_map)(wm)

    def _emit(self, idx: np.ndarray, wr: int) -> list[pa.RecordBatch]:
        """Emit the pending left rows among ``idx`` whose match is final under right watermark ``wr``."""
        if len(idx) == 0 or wr == NO_WATERMARK:
            return []
        left, right = self.sides
        lts = left.ts
        if wr == END_OF_TIME:
            ready = idx
            best = self._best(ready)
        elif self.op <= 1:  # >= / >: the right watermark is past the left row's time
            ready = idx[lts[idx] < wr] if self.op == 0 else idx[lts[idx] <= wr]
            best = self._best(ready)
        else:  # <= / <: the right watermark is past the best match's time
            best = self._best(idx)
            final = best >= 0
            final[final] = right.ts[best[final]] < wr
            ready, best = idx[final], best[final]
        if len(ready) == 0:
            return []
        left.alive[ready] = False
        left.n_dead += len(ready)
        hit = best >= 0
        out = []
        if hit.any():
            cols = left.gather(ready[hit]) + right.gather(best[hit])
            out.append(pa.RecordBatch.from_arrays(cols, schema=self.schema))
        if self.node.kind == "left" and not hit.all():
            rows = pa.RecordBatch.from_arrays(left.gather(ready[~hit]), schema=self.side_schema[0])
            out += self._padded(rows)
        return out

    def _best(self, idx: np.ndarray) -> np.ndarray:
        left, right = self.sides
        out = np.empty(len(idx), np.int64)
        A.best_match(left.key, idx, left.ts, right.head, right.nxt, right.alive, right.ts, self.op, out)
        return out

    def _padded(self, rows: pa.RecordBatch) -> list[pa.RecordBatch]:
        if rows.num_rows == 0:
            return []
        pad = [pa.nulls(rows.num_rows, f.type) for f in self.side_schema[1]]
        return [pa.RecordBatch.from_arrays(list(rows.columns) + pad, schema=self.schema)]

    def _prune(self, wl: int) -> None:
        """Drop right rows no future left row can match (see the module docstring)."""
        if wl == NO_WATERMARK:
            return
        left, right = self.sides
        if right.n_live == 0:
            return
        bound = np.full(len(right.head), _I64_MAX if wl == END_OF_TIME else wl, np.int64)
        A.min_per_key(left.key, left.ts, left.alive, left.n, bound)
        right.n_dead += A.prune(right.head, right.nxt, right.alive, right.ts, bound, self.op <= 1)

    def _maybe_compact(self) -> None:
        dead = sum(s.n_dead for s in self.sides)
        live = sum(s.n_live for s in self.sides)
        if dead < _COMPACT_MIN_DEAD or dead <= live:
            return
        keep = [(s.gather(s.live()), s.ts[s.live()]) for s in self.sides]
        self._reset()  # the interner too: keys no row holds any more are forgotten
        for side, (cols, ts) in enumerate(keep):
            self._load(side, pa.RecordBatch.from_arrays(cols, schema=self.side_schema[side]), ts)

    def _load(self, side: int, rows: pa.RecordBatch, ts) -> None:
        """Store rows as they were (compaction, restore): keys re-interned, nothing emitted."""
        if rows.num_rows == 0:
            return
        ids = self.interner.intern([k.evaluate(rows) for k in self.keys[side]])
        for s in self.sides:
            s.reserve_keys(len(self.interner))
        n = rows.num_rows
        self.sides[side].append(rows, ids, np.asarray(ts, np.int64), np.ones(n, np.int64), np.zeros(n, np.int64))

    # ------------------------------------------------------------------ snapshot
    @property
    def fingerprint(self) -> dict:
        n = self.node
        return {"asof": n.kind, "op": n.op, "temporal": n.temporal, "keys": [str(k.type) for k in n.left_keys],
                "left": [str(f.type) for f in self.side_schema[0]],
                "right": [str(f.type) for f in self.side_schema[1]]}

    def snapshot(self) -> StateImage:
        """Pending left rows and stored right rows (copied now, gathered and hashed to vnodes in
        ``encode``), and the watermark the emitted rows were final under."""
        return StateImage("asof_join", meta={"plan": self.fingerprint, "wm": self.wm},
                          counters={"late_dropped": self.late_dropped}, tables=side_tables(self.sides, self.keys))

    def restore(self, blob: bytes, *, vnodes=None) -> None:
        """Load a snapshot of a join of the same plan; blobs of disjoint vnode subsets add up."""
        snap = checked_snapshot(blob, "asof_join", self.fingerprint, vnodes)
        # pending left rows are emitted in arrival order: keep the snapshot's order (it is theirs)
        for side, rows, t in snapshot_sides(snap, self.side_schema):
            self._load(side, rows, t.column("__ts").to_numpy())
        self.wm = max(self.wm, int(snap.meta.get("wm", NO_WATERMARK)))
        if snap.counters is not None:
            self.late_dropped += int(snap.counters["late_dropped"])
