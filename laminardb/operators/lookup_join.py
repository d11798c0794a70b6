"""The processing-time lookup join: each left row joins the right input as it is when the row
arrives (Flink's ``JOIN t FOR SYSTEM_TIME AS OF l.proc_time``; Nexmark q13's side input).

Entry point: ``LookupJoinOperator(node)`` for a ``plan.LookupJoin``; ``process(side, batch,
wm_before)`` (side 0 = left, 1 = right), ``on_watermark(wm)``, ``snapshot() -> StateImage``,
``restore(blob, *, vnodes=None)``.

Only the right side is stored: its rows, chained by key id (``_join_kernels``). A left batch
probes them and is emitted at once (``residual`` filters the pairs; a LEFT join pads a row with
no surviving pair); a right batch only changes the table, never what was emitted. A right input
that is a changelog (a view kept by ``EMIT CHANGES``) is netted as it arrives: a retraction
cancels a stored row of its key with the same row hash (``_asof_kernels.retract``; the hash is
kept in the side's ``match`` array). Output weights follow the left rows (append-only unless the
left input is a changelog).

State: the table itself, however large it is (a file, a view's current rows, or every row of an
append-only stream: unbounded then); watermarks never expire it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from laminardb.operators import _asof_kernels as A
from laminardb.operators import _join_kernels as J
from laminardb.operators._buffers import hash_rows
from laminardb.operators._interner import Interner
from laminardb.operators.join import _Side, _visible, side_tables, snapshot_sides, visible_rows
from laminardb.operators.snapshot import StateImage, checked_snapshot
from laminardb.sql.expressions import evaluate_mask
from laminardb.sql.plan import LookupJoin
from laminardb.sql.watermarks import NO_WATERMARK

WEIGHT = "__weight"
# compact once this many stored rows are retracted and they outnumber the live ones
_COMPACT_MIN_DEAD = 4096


class LookupJoinOperator:
    """Stateful executor of one ``plan.LookupJoin``; see the module docstring."""

    incremental = False  # checkpoints take the whole state (no snapshot_delta)

    def __init__(self, node: LookupJoin) -> None:
        self.node = node
        nl = len(node.schema) - len(_visible(node.right.schema))
        self.side_schema = (pa.schema(list(node.schema)[:nl]), pa.schema(list(node.schema)[nl:]))
        self.keys = (node.left_keys, node.right_keys)
        self.in_changelog = (node.left.changelog, node.right.changelog)
        self.changelog = node.changelog
        self.schema = node.schema.append(pa.field(WEIGHT, pa.int64())) if self.changelog else node.schema
        self.late_dropped = 0
        self._cap = 1024
        self._out_p = np.zeros(self._cap, np.int64)
        self._out_b = np.zeros(self._cap, np.int64)
        self._reset()

    def _reset(self) -> None:
        self.interner = Interner([k.type for k in self.keys[0]])
        self.table = _Side(self.side_schema[1])

    # ------------------------------------------------------------------ contract
    def process(self, side: int, batch: pa.RecordBatch, wm_before: int = NO_WATERMARK) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        batch, w = visible_rows(batch, len(self.side_schema[side]), self.in_changelog[side])
        keys = [k.evaluate(batch) for k in self.keys[side]]
        valid = np.ones(batch.num_rows, np.bool_)
        for k in keys:
            if k.null_count:
                valid &= k.is_valid().to_numpy(zero_copy_only=False)
        ids = self.interner.intern(keys)
        self.table.reserve_keys(len(self.interner))
        if side == 1:
            self._store(batch, ids, valid, w)
            return []
        return self._probe(batch, ids, valid, w)

    def on_watermark(self, wm: int) -> list[pa.RecordBatch]:
        return []  # processing time: watermarks change nothing here

    def state_rows(self) -> tuple[int, int]:
        """Live rows held (left, right): the left side is never stored."""
        return 0, self.table.n_live

    def state_bytes(self) -> int:
        s = self.table
        total = sum(c.nbytes for c in s.chunks)
        total += sum(getattr(s, a).nbytes for a in ("key", "ts", "w", "match", "alive", "nxt", "mark", "head"))
        return total + self.interner.arena.nbytes + self.interner.tab_ids.nbytes * 2

    # ------------------------------------------------------------------ helpers
    def _store(self, batch: pa.RecordBatch, ids: np.ndarray, valid: np.ndarray, w: np.ndarray) -> None:
        s = self.table
        row_hash = hash_rows(list(batch.columns)).view(np.int64) if self.in_changelog[1] else np.zeros(
            batch.num_rows, np.int64)
        keep = valid & (w > 0)
        if keep.all():
            s.append(batch, ids, np.zeros(len(ids), np.int64), w, row_hash)
        elif keep.any():
            s.append(batch.filter(pa.array(keep)), ids[keep], np.zeros(int(keep.sum()), np.int64), w[keep],
                     row_hash[keep])
        neg = valid & (w < 0)
        if neg.any():  # after the insertions: a batch may insert a row and retract it
            s.n_dead += A.retract(ids[neg], row_hash[neg], w[neg], s.head, s.nxt, s.alive, s.match, s.w)
        self._maybe_compact()

    def _probe(self, batch: pa.RecordBatch, ids, valid, w) -> list[pa.RecordBatch]:
        s = self.table
        z = np.zeros(batch.num_rows, np.int64)
        while True:
            n = J.probe(ids, valid, s.head, s.nxt, s.alive, z, s.ts, 0, 0, 1, False, self._out_p, self._out_b)
            if n <= self._cap:
                break
            self._cap = max(2 * self._cap, n)
            self._out_p = np.zeros(self._cap, np.int64)
            self._out_b = np.zeros(self._cap, np.int64)
        p_idx, b_idx = self._out_p[:n].copy(), self._out_b[:n].copy()
        t = pa.array(p_idx, pa.int64())
        cols = [c.take(t) for c in batch.columns] + s.gather(b_idx)
        if self.node.residual is not None and n:
            mask = evaluate_mask(self.node.residual, pa.RecordBatch.from_arrays(cols, schema=self.node.schema))
            if not mask.all():
                keep = pa.array(mask)
                cols = [c.filter(keep) for c in cols]
                p_idx, b_idx = p_idx[mask], b_idx[mask]
        parts = [(cols, w[p_idx] * s.w[b_idx])]
        if self.node.kind == "left":
            matched = np.zeros(batch.num_rows, np.bool_)
            matched[p_idx] = True
            if not matched.all():
                rows = np.flatnonzero(~matched)
                t = pa.array(rows, pa.int64())
                pad = [pa.nulls(len(rows), f.type) for f in self.side_schema[1]]
                parts.append(([c.take(t) for c in batch.columns] + pad, w[rows]))
        return self._output(parts)

    def _output(self, parts) -> list[pa.RecordBatch]:
        parts = [p for p in parts if len(p[1])]
        if not parts:
            return []
        ncol = len(self.node.schema)
        cols = [pa.concat_arrays([p[0][i] for p in parts]) if len(parts) > 1 else parts[0][0][i] for i in range(ncol)]
        w = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
        if self.changelog:
            return [pa.RecordBatch.from_arrays([*cols, pa.array(w, pa.int64())], schema=self.schema)]
        if (w != 1).any():  # append-only output: a row of weight n is n rows
            idx = pa.array(np.repeat(np.arange(len(w)), np.clip(w, 0, None)), pa.int64())
            cols = [c.take(idx) for c in cols]
        return [pa.RecordBatch.from_arrays(cols, schema=self.schema)]

    def _maybe_compact(self) -> None:
        s = self.table
        if s.n_dead < _COMPACT_MIN_DEAD or s.n_dead <= s.n_live:
            return
        idx = s.live()
        rows = pa.RecordBatch.from_arrays(s.gather(idx), schema=self.side_schema[1])
        w, h = s.w[idx], s.match[idx]
        self._reset()
        self._load(rows, w, h)

    def _load(self, rows: pa.RecordBatch, w, row_hash) -> None:
        if rows.num_rows == 0:
            return
        ids = self.interner.intern([k.evaluate(rows) for k in self.keys[1]])
        self.table.reserve_keys(len(self.interner))
        self.table.append(rows, ids, np.zeros(rows.num_rows, np.int64), np.asarray(w, np.int64),
                          np.asarray(row_hash, np.int64))

    # ------------------------------------------------------------------ snapshot
    @property
    def fingerprint(self) -> dict:
        n = self.node
        return {"lookup": n.kind, "keys": [str(k.type) for k in n.left_keys],
                "left": [str(f.type) for f in self.side_schema[0]],
                "right": [str(f.type) for f in self.side_schema[1]]}

    def snapshot(self) -> StateImage:
        """The stored table (copied now, gathered and hashed to vnodes in ``encode``)."""
        return StateImage("lookup_join", meta={"plan": self.fingerprint}, counters={"late_dropped": 0},
                          tables=side_tables({1: self.table}, self.keys, which=(1,)))

    def restore(self, blob: bytes, *, vnodes=None) -> None:
        """Load a snapshot of a join of the same plan; blobs of disjoint vnode subsets add up."""
        snap = checked_snapshot(blob, "lookup_join", self.fingerprint, vnodes)
        for _, rows, t in snapshot_sides(snap, self.side_schema, sides=(1,)):
            self._load(rows, t.column("__w").to_numpy(), t.column("__match").to_numpy())
