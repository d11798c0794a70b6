"""GROUP BY aggregation, unwindowed or over tumbling/hopping windows.

Entry point: ``GroupAggregate``. Rows arrive with their key columns, aggregate arguments
and event times already evaluated; the operator interns keys, assigns windows, finds each
(key, window) group's slot and folds the rows into the accumulators — all in numba kernels.

It emits ``GroupRows``: the group columns (``__ws``/``__we`` window bounds, ``__k*`` keys,
``__a*`` aggregates) of groups that changed (EMIT CHANGES: old and new values side by
side) or closed (EMIT ON WINDOW CLOSE). HAVING and the SELECT projection are applied by
the caller, which is also what turns old/new pairs into a Z-set changelog.

Allowed lateness ``L`` (Flink's): a window fires when the watermark reaches its end and keeps
its state until the watermark reaches end + L; a row for a window that fired but is kept
updates it, and (EMIT ON WINDOW CLOSE) re-fires it at once as an old/new pair; only rows
whose every window has end + L ≤ watermark are late. Windows with end ≤ ``_fired_wm`` (the
highest watermark seen) have fired — that scalar is part of the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa

from laminardb.operators import _agg_state
from laminardb.operators import _kernels as K
from laminardb.operators._interner import GroupTable, Interner
from laminardb.operators._one_row_agg import one_row_update
from laminardb.operators.aggregates import CountAcc, fold, make_accumulators
from laminardb.operators.snapshot import Snapshot, StateImage
from laminardb.sql.plan import AggSpec, WindowSpec, group_schema

EmitMode = Literal["changes", "close"]
#: (row, window) pairs a hop expands at once (``_process_in_parts``): 4M pairs, ~200 MB of arrays
_MAX_PAIRS = 1 << 22
NO_WATERMARK = np.iinfo(np.int64).min
_INT64 = pa.int64()
END_OF_TIME = np.iinfo(np.int64).max


@dataclass
class GroupRows:
    """Groups leaving an aggregate. ``old``/``old_valid`` are set only for EMIT CHANGES."""

    new: pa.RecordBatch | None
    new_valid: np.ndarray
    old: pa.RecordBatch | None = None
    old_valid: np.ndarray | None = None
    pair: pa.RecordBatch | None = None  # old rows then new rows in one batch (EMIT CHANGES)

    @property
    def n_rows(self) -> int:
        return len(self.new_valid)


class GroupAggregate:
    """Keyed aggregation state over (key, window) groups; see the module docstring."""

    def __init__(
        self,
        *,
        key_types: list[pa.DataType],
        specs: list[AggSpec],
        window: WindowSpec | None,
        emit: EmitMode,
        time_type: pa.DataType = _INT64,
        lateness: int = 0,
    ) -> None:
        if window is not None and window.kind == "session":
            raise ValueError("session windows are handled by SessionAggregate")
        self.window = window
        self.emit = emit
        self.time_type = time_type
        self.specs = specs
        self.schema = group_schema(key_types, specs, window is not None, time_type)
        self.keys = Interner(key_types) if key_types else None
        self.groups = GroupTable()
        cap = self.groups.capacity
        self.rows = CountAcc(AggSpec("count_star", None, pa.int64()), cap)
        self.accs = make_accumulators(specs, cap)
        self._uses_order = any(a.uses_order for a in self.accs)
        self.groups.on_grow.append(self._grow)
        self._mark = np.full(cap, -1, dtype=np.int64)
        self._stamp = 0
        self._seq = 0
        # the lowest window end (+ L once fired) that a watermark can act on: on_watermark skips below it
        self._min_open_end = END_OF_TIME
        self.lateness = lateness if window is not None else 0
        self._fired_wm = NO_WATERMARK  # windows with end ≤ this have fired (allowed lateness only)
        self.fingerprint = _agg_state.fingerprint(key_types, specs, window, emit)
        if self.lateness:  # absent otherwise: snapshots without lateness keep their fingerprint
            self.fingerprint["lateness"] = self.lateness
        self._one_row = one_row_update(self, GroupRows)  # None: one-row batches take the batch path

    def _grow(self, cap: int) -> None:
        self.rows.grow(cap)
        for a in self.accs:
            a.grow(cap)
        mark = np.full(cap, -1, dtype=np.int64)
        mark[: len(self._mark)] = self._mark
        self._mark = mark

    # ------------------------------------------------------------------ input
    def process(
        self,
        n: int,
        keys: list[pa.Array],
        args: list[pa.Array | None],
        ts: np.ndarray | None,
        weights: np.ndarray | None,
        wm_before: int,
    ) -> tuple[GroupRows | None, np.ndarray | None]:
        """Fold one batch in. Returns (changed groups for EMIT CHANGES, late-row mask)."""
        if n == 0:
            return None, None
        if n == 1 and self._one_row is not None:
            done = self._one_row.process(keys, args, ts, weights, wm_before)
            if done is not None:
                return done
        if self.window is not None and self.window.kind == "hop" and self.emit != "changes" and not self.lateness:
            step = max(1, _MAX_PAIRS // -(-self.window.size // self.window.slide))
            if n > step:
                return self._process_in_parts(n, keys, args, ts, weights, wm_before, step)
        key_ids = self.keys.intern(keys) if self.keys is not None else np.zeros(n, np.int64)
        late = None
        rows = None  # row index per (row, window) pair when windows expand rows
        if self.lateness and wm_before != NO_WATERMARK:
            wm_before -= self.lateness  # a window takes rows until the watermark reaches end + L
        if self.window is None:
            wins = np.zeros(n, dtype=np.int64)
        elif self.window.kind == "tumble":
            wins = np.empty(n, dtype=np.int64)
            keep = np.empty(n, dtype=np.bool_)
            n_keep, lowest = K.assign_tumble(ts, self.window.size, self.window.offset, wm_before, wins, keep)
            if n_keep < n:
                late = ~keep
                rows = np.flatnonzero(keep)
                wins = wins[rows]
        else:
            per_row = -(-self.window.size // self.window.slide)
            rows = np.empty(n * per_row, dtype=np.int64)
            wins = np.empty(n * per_row, dtype=np.int64)
            late = np.empty(n, dtype=np.bool_)
            k = K.assign_hop(
                ts, self.window.size, self.window.slide, self.window.offset, wm_before, rows, wins, late
            )
            rows, wins = rows[:k], wins[:k]
            if not late.any():
                late = None
            lowest = int(wins.min()) if k else 0
        if rows is not None:
            key_ids = key_ids[rows]
        if len(key_ids) == 0:
            return None, late
        slots = self.groups.upsert(key_ids, wins, len(self.keys) if self.keys is not None else 1)
        self.last_slots = slots  # read by the partial aggregation of the Delta mode
        if self.window is not None:
            self._min_open_end = min(self._min_open_end, int(lowest) + self.window.size)

        touched = old_raw = old_valid = None
        if self.emit == "changes":
            touched = self._touched(slots)
            old_valid = self.rows.counts[touched] > 0
            old_raw = [a.raw(touched) for a in self.accs]
        elif self.lateness:  # EMIT ON WINDOW CLOSE: windows that already fired fire again
            assert self.window is not None  # lateness is set for windows only
            touched = self._touched(slots)
            touched = touched[self.groups.slot_win[touched] + self.window.size <= self._fired_wm]
            if len(touched):
                old_valid = self.rows.counts[touched] > 0
                old_raw = [a.raw(touched) for a in self.accs]

        w = None if weights is None else (weights if rows is None else weights[rows])
        ts_rows = seqs = None
        if self._uses_order:  # FIRST/LAST_VALUE: event time and arrival order of each row
            ts_rows = None if ts is None else (ts if rows is None else ts[rows])
            if ts_rows is None:
                ts_rows = np.zeros(len(slots), dtype=np.int64)
            # arrival order of the original rows (hop expands a row into several windows)
            seqs = self._seq + (rows if rows is not None else np.arange(len(slots), dtype=np.int64))
        fold(self.rows, self.accs, slots, args, rows, w, ts_rows, seqs)
        self._seq += n

        if self.emit != "changes":
            if old_raw is not None and touched is not None:  # late firings: old and new values
                pair = self._materialize_pair(touched, old_raw)
                return GroupRows(new=None, new_valid=self.rows.counts[touched] > 0, old_valid=old_valid,
                                 pair=pair), late
            return None, late
        new_valid = self.rows.counts[touched] > 0
        pair = self._materialize_pair(touched, old_raw)
        gone = touched[~new_valid]
        if len(gone) and self.window is None:
            self._free(gone)
        return GroupRows(new=None, new_valid=new_valid, old_valid=old_valid, pair=pair), late

    def _process_in_parts(self, n, keys, args, ts, weights, wm_before, step):
        """A hop expands each row into size/slide windows: a big batch goes in parts of
        ``step`` rows, so memory stays bounded (300k rows of a 60 s window sliding every
        100 ms would be 180M (row, window) pairs at once). Windows emit on close, so the
        parts give the same state and output as the whole."""
        lates, slots = [], []
        for i in range(0, n, step):
            m = min(step, n - i)
            _, late = self.process(m, [k.slice(i, m) for k in keys],
                                   [None if a is None else a.slice(i, m) for a in args],
                                   None if ts is None else ts[i:i + m],
                                   None if weights is None else weights[i:i + m], wm_before)
            lates.append(np.zeros(m, np.bool_) if late is None else late)
            slots.append(self.last_slots)
        self.last_slots = np.concatenate(slots)
        late = np.concatenate(lates)
        return None, (late if late.any() else None)

    def _touched(self, slots: np.ndarray) -> np.ndarray:
        self._stamp += 1
        out = np.empty(len(slots), dtype=np.int64)
        k = K.first_touch(slots, self._stamp, self._mark, out)
        return out[:k]

    # ------------------------------------------------------------------ output
    def on_watermark(self, wm: int) -> GroupRows | None:
        """Close every window whose end ≤ wm; EMIT ON WINDOW CLOSE emits them now."""
        if self.window is None:
            if wm == END_OF_TIME and self.emit == "close":
                return self._close(self.groups.live_slots())
            return None
        if self.lateness:
            return self._on_watermark_late(wm)
        if wm < self._min_open_end:
            return None
        live = self.groups.live_slots()
        ends = self.groups.slot_win[live] + self.window.size
        closing = live[ends <= wm]
        open_ends = ends[ends > wm]
        self._min_open_end = int(open_ends.min()) if len(open_ends) else END_OF_TIME
        return self._close(closing)

    def _on_watermark_late(self, wm: int) -> GroupRows | None:
        """With allowed lateness: fire windows whose end the watermark reached, purge at end + L."""
        fired_before = self._fired_wm
        self._fired_wm = max(self._fired_wm, wm)
        if wm < self._min_open_end or self.window is None:
            return None
        live = self.groups.live_slots()
        ends = self.groups.slot_win[live] + self.window.size
        fire = live[(ends <= wm) & (ends > fired_before)]
        purge = ends + self.lateness <= wm
        nxt = np.where(ends > wm, ends, ends + self.lateness)[~purge]
        self._min_open_end = int(nxt.min()) if len(nxt) else END_OF_TIME
        out = None
        if self.emit == "close" and len(fire):
            fire = fire[np.lexsort((self.groups.slot_key[fire], self.groups.slot_win[fire]))]
            out = GroupRows(new=self._materialize(fire), new_valid=self.rows.counts[fire] > 0)
        if purge.any():
            self._free(live[purge])
        return out

    def _close(self, closing: np.ndarray) -> GroupRows | None:
        if len(closing) == 0:
            return None
        out = None
        if self.emit == "close":
            order = np.lexsort((self.groups.slot_key[closing], self.groups.slot_win[closing]))
            closing = closing[order]
            out = GroupRows(new=self._materialize(closing), new_valid=self.rows.counts[closing] > 0)
        self._free(closing)
        return out

    def _free(self, slots: np.ndarray) -> None:
        self.rows.reset(slots)
        for a in self.accs:
            a.reset(slots)
        self.groups.remove(slots)

    def current(self) -> pa.RecordBatch:
        """Every live group (for queries over an aggregating view's state)."""
        live = self.groups.live_slots()
        live = live[self.rows.counts[live] > 0]
        order = np.lexsort((self.groups.slot_key[live], self.groups.slot_win[live]))
        return self._materialize(live[order])

    def _key_columns(self, slots: np.ndarray) -> list[pa.Array]:
        cols: list[pa.Array] = []
        if self.window is not None:
            ws = self.groups.slot_win[slots]
            cols.append(pa.array(ws, type=pa.int64()).cast(self.time_type))
            cols.append(pa.array(ws + self.window.size, type=pa.int64()).cast(self.time_type))
        if self.keys is not None:
            cols += self.keys.take(self.groups.slot_key[slots])
        return cols

    def _materialize_pair(self, slots: np.ndarray, old_raw: list) -> pa.RecordBatch:
        """Old values (captured before the update) then new values of ``slots``, one batch."""
        keys = self._key_columns(slots)
        cols = [pa.concat_arrays([c, c]) for c in keys]
        for acc, (ov, om) in zip(self.accs, old_raw, strict=True):
            nv, nm = acc.raw(slots)
            mask = None if om is None and nm is None else np.concatenate([
                om if om is not None else np.zeros(len(ov), np.bool_),
                nm if nm is not None else np.zeros(len(nv), np.bool_)])
            cols.append(acc.to_arrow(np.concatenate([ov, nv]), mask))
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)

    def _materialize(self, slots: np.ndarray, key_cols: list[pa.Array] | None = None) -> pa.RecordBatch:
        cols = list(key_cols) if key_cols is not None else self._key_columns(slots)
        cols += [a.output(slots) for a in self.accs]
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)

    @property
    def state_groups(self) -> int:
        return self.groups.n_live

    # ------------------------------------------------------------------ snapshot
    def snapshot(self) -> StateImage:
        """A consistent copy of the state (under the engine lock); ``encode()`` it anywhere."""
        return _agg_state.image("group_aggregate", self, {"plan": self.fingerprint})

    def restore(self, blob: bytes | Snapshot, *, vnodes=None, add: bool = False) -> None:
        """Load a snapshot (only ``vnodes``' groups, if given) into this fresh operator;
        ``add``: fold it into the groups loaded already (partials of several actors)."""
        _agg_state.restore("group_aggregate", self, blob, self.fingerprint, vnodes, add=add)

    def capture(self) -> tuple[dict, dict]:
        """The snapshot tables of every live group, and the operator's scalars."""
        live = self.groups.live_slots()
        tables = _agg_state.capture(self.keys, self.groups.slot_key[live], {"__ws": self.groups.slot_win[live]},
                                    self.rows, self.accs, live)
        meta = {"seq": self._seq}
        if self.lateness:
            meta["fired_wm"] = int(self._fired_wm)
        return tables, meta

    def load(self, snap: Snapshot, meta: dict, *, add: bool = False) -> None:
        """Upsert the snapshot's groups (keys re-interned in their original order)."""
        key_ids = _agg_state.load_keys(self.keys, snap)
        ws = snap.tables["groups"].column("__ws").to_numpy()
        slots = self.groups.upsert(key_ids, ws)
        _agg_state.load_accumulators(snap, slots, self.rows, self.accs, add=add)
        self._seq = max(self._seq, int(meta["seq"]))
        self._fired_wm = max(self._fired_wm, int(meta.get("fired_wm", NO_WATERMARK)))
        if self.window is not None and len(ws):
            self._min_open_end = min(self._min_open_end, int(ws.min()) + self.window.size)
