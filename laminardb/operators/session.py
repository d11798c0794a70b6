"""Session windows: per key, activity separated by less than ``gap`` forms one session.

Entry point: ``SessionAggregate`` (same surface as ``GroupAggregate``). A session spans
[first ts, last ts + gap); a row whose [ts, ts + gap) touches or overlaps open sessions of
its key joins them, merging them into one (Flink's merging semantics). A row is late only
when no open session takes it and its own window [ts, ts + gap) has already closed.

Sessions live in accumulator slots; each key's open sessions form a linked list
(``key_head``/``slot_next``) walked by the numba kernel ``_assign_sessions``.

Allowed lateness ``L``: a session fires when the watermark reaches its end and stays (open to
rows that touch it) until the watermark reaches end + L. ``fired`` marks the sessions already
emitted; a change to one (a late row, a merge) is emitted at once as an old/new pair, and a
late row that opens a session already behind the watermark fires it at once (Flink). The
flags ride in the snapshot's ``__fired`` column.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

from laminardb.operators import _agg_state
from laminardb.operators._interner import Interner
from laminardb.operators._kernels import take_slot
from laminardb.operators.aggregates import CountAcc, fold, make_accumulator
from laminardb.operators.group_aggregate import END_OF_TIME, NO_WATERMARK, EmitMode, GroupRows
from laminardb.operators.snapshot import Snapshot, StateImage
from laminardb.sql.plan import AggSpec, WindowSpec, group_schema

_INITIAL = 1024


@njit(cache=True, nogil=True)
def _assign_sessions(order, key_ids, ts, gap, wm_before, key_head, slot_next, slot_key, slot_start,
                     slot_end, live, redirect, free, counters, out_slot, out_late, merge_dst, merge_src):
    """Assign rows (visited in (key, ts) order) to sessions; returns the number of merges."""
    n_merge = 0
    for r in range(len(order)):
        i = order[r]
        k = key_ids[i]
        lo = ts[i]
        hi = lo + gap
        target = -1
        prev = -1
        p = key_head[k]
        while p != -1:
            nxt = slot_next[p]
            if slot_start[p] <= hi and lo <= slot_end[p]:
                if target == -1:
                    target = p
                    prev = p
                else:
                    merge_dst[n_merge] = target
                    merge_src[n_merge] = p
                    n_merge += 1
                    slot_start[target] = min(slot_start[target], slot_start[p])
                    slot_end[target] = max(slot_end[target], slot_end[p])
                    live[p] = False
                    redirect[p] = target
                    if prev == -1:
                        key_head[k] = nxt
                    else:
                        slot_next[prev] = nxt
            else:
                prev = p
            p = nxt
        if target == -1:
            if hi <= wm_before:
                out_late[i] = True
                out_slot[i] = -1
                continue
            target = take_slot(free, counters)
            slot_key[target] = k
            slot_start[target] = lo
            slot_end[target] = hi
            live[target] = True
            redirect[target] = -1
            slot_next[target] = key_head[k]
            key_head[k] = target
        else:
            slot_start[target] = min(slot_start[target], lo)
            slot_end[target] = max(slot_end[target], hi)
        out_slot[i] = target
    for i in range(len(out_slot)):
        s = out_slot[i]
        if s < 0:
            continue
        while redirect[s] != -1:
            s = redirect[s]
        out_slot[i] = s
    return n_merge


@njit(cache=True, nogil=True)
def _relink(key_head, slot_next, slot_key, live, n_slots):
    for k in range(len(key_head)):
        key_head[k] = -1
    for s in range(n_slots):
        if live[s]:
            k = slot_key[s]
            slot_next[s] = key_head[k]
            key_head[k] = s


class SessionAggregate:
    """Keyed session-window aggregation; see the module docstring."""

    def __init__(self, *, key_types: list[pa.DataType], specs: list[AggSpec], gap: int,
                 emit: EmitMode, time_type: pa.DataType, lateness: int = 0) -> None:
        self.gap = gap
        self.emit = emit
        self.time_type = time_type
        self.schema = group_schema(key_types, specs, True, time_type)
        self.keys = Interner(key_types) if key_types else None
        self.rows = CountAcc(AggSpec("count_star", None, pa.int64()), _INITIAL)
        self.accs = [make_accumulator(s, _INITIAL) for s in specs]
        self.slot_key = np.zeros(_INITIAL, np.int64)
        self.slot_start = np.zeros(_INITIAL, np.int64)
        self.slot_end = np.zeros(_INITIAL, np.int64)
        self.slot_next = np.full(_INITIAL, -1, np.int64)
        self.redirect = np.full(_INITIAL, -1, np.int64)
        self.live = np.zeros(_INITIAL, np.bool_)
        self.free = np.zeros(_INITIAL, np.int64)
        self.counters = np.zeros(2, np.int64)  # [high-water mark, free-stack size]
        self.key_head = np.full(_INITIAL, -1, np.int64)
        self._seq = 0
        self._min_end = END_OF_TIME  # lowest end (+ L once fired) a watermark can act on
        self.lateness = lateness
        self.fired = np.zeros(_INITIAL, np.bool_)  # emitted already (allowed lateness only)
        self._fired_wm = NO_WATERMARK
        self.fingerprint = _agg_state.fingerprint(key_types, specs, WindowSpec("session", gap=gap), emit)
        if lateness:
            self.fingerprint["lateness"] = lateness

    def _reserve(self, n_rows: int, n_keys: int) -> None:
        need = int(self.counters[0]) + n_rows
        if need > len(self.slot_key):
            cap = max(2 * len(self.slot_key), 2 * need)
            for name, fill in (("slot_key", 0), ("slot_start", 0), ("slot_end", 0), ("slot_next", -1),
                               ("redirect", -1), ("live", False), ("free", 0), ("fired", False)):
                old = getattr(self, name)
                new = np.full(cap, fill, dtype=old.dtype)
                new[: len(old)] = old
                setattr(self, name, new)
            self.rows.grow(cap)
            for a in self.accs:
                a.grow(cap)
        if n_keys > len(self.key_head):
            new = np.full(max(2 * len(self.key_head), n_keys), -1, np.int64)
            new[: len(self.key_head)] = self.key_head
            self.key_head = new

    def process(self, n, keys, args, ts, weights, wm_before):
        if n == 0:
            return None, None
        key_ids = self.keys.intern(keys) if self.keys is not None else np.zeros(n, np.int64)
        self._reserve(n, (len(self.keys) if self.keys is not None else 1))
        order = np.lexsort((ts, key_ids))
        slots = np.empty(n, np.int64)
        late = np.zeros(n, np.bool_)
        merge_dst = np.empty(n, np.int64)
        merge_src = np.empty(n, np.int64)
        hw_before = int(self.counters[0])
        track = self.emit == "changes" or self.lateness  # old values of the sessions a batch changes
        if track:
            old_start, old_end = self.slot_start.copy(), self.slot_end.copy()
        if self.lateness and wm_before != NO_WATERMARK:
            wm_before -= self.lateness  # a new session is late only when its end + L ≤ watermark
        n_merge = _assign_sessions(order, key_ids, ts, self.gap, wm_before, self.key_head, self.slot_next,
                                   self.slot_key, self.slot_start, self.slot_end, self.live, self.redirect,
                                   self.free, self.counters, slots, late, merge_dst, merge_src)
        old = old_valid = touched = None
        if track:
            touched = np.unique(np.concatenate([slots[slots >= 0], merge_src[:n_merge], merge_dst[:n_merge]]))
            existed = (self.rows.counts[touched] > 0) & (touched < hw_before)  # open before this batch
            # In (key, start) order, not slot order: slots differ after a restore, keys do not. A
            # session open before the batch sorts by its start before it (merges move the surviving
            # slot's start, and which slot survives a merge follows the key's list order, which a
            # restore does not keep); a new one by its start now. Per key these are distinct among
            # the valid old rows and among the valid new rows, so both come out in a canonical order.
            start = np.where(existed, old_start[touched], self.slot_start[touched])
            order = np.lexsort((~self.live[touched], start, self.slot_key[touched]))
            touched, existed = touched[order], existed[order]
            old_valid = existed
            if self.emit != "changes":
                old_valid &= self.fired[touched]  # only what was emitted is retracted
            if self.emit == "changes" or old_valid.any():
                old = self._materialize(touched, old_start, old_end)
        for d, s in zip(merge_dst[:n_merge], merge_src[:n_merge], strict=True):
            self.rows.merge(int(d), int(s))
            for a in self.accs:
                a.merge(int(d), int(s))
            self.fired[d] |= self.fired[s]  # a session merged with an emitted one stays emitted
        ok = ~late
        idx = None
        if late.any():
            idx = np.flatnonzero(ok)
            slots, ts_ok = slots[idx], ts[idx]
            w = np.ones(len(idx), np.int64)
        else:
            ts_ok = ts
            w = np.ones(n, np.int64)
        seqs = self._seq + (idx if idx is not None else np.arange(n, dtype=np.int64))
        fold(self.rows, self.accs, slots, args, idx, w, ts_ok, seqs)
        self._seq += n
        if n_merge:
            gone = merge_src[:n_merge]
            self._release(gone, relink=False)
            self.redirect[gone] = -1
        if len(slots):
            self._min_end = min(self._min_end, int(self.slot_end[slots].min()))
        late_mask = late if late.any() else None
        if self.emit != "changes":
            if touched is None:
                return None, late_mask
            # EMIT ON WINDOW CLOSE with lateness: emitted sessions that changed fire again, and a
            # session a late row opened behind the watermark fires now
            alive = self.live[touched]
            fired = alive & (self.fired[touched] | (self.slot_end[touched] <= self._fired_wm))
            self.fired[touched[alive]] = fired[alive]
            new_valid = fired & (self.rows.counts[touched] > 0)
            if not (old_valid.any() or new_valid.any()):
                return None, late_mask
            new = self._materialize(touched, self.slot_start, self.slot_end)
            return GroupRows(new=new, new_valid=new_valid, old=old, old_valid=old_valid), late_mask
        new_valid = self.live[touched] & (self.rows.counts[touched] > 0)
        new = self._materialize(touched, self.slot_start, self.slot_end)
        return GroupRows(new=new, new_valid=new_valid, old=old, old_valid=old_valid), late_mask

    def on_watermark(self, wm: int) -> GroupRows | None:
        if self.lateness:
            return self._on_watermark_late(wm)
        if wm < self._min_end:
            return None
        hw = int(self.counters[0])
        live = np.flatnonzero(self.live[:hw])
        ends = self.slot_end[live]
        closing = live[ends <= wm]
        rest = ends[ends > wm]
        self._min_end = int(rest.min()) if len(rest) else END_OF_TIME
        if len(closing) == 0:
            return None
        out = None
        if self.emit == "close":
            order = np.lexsort((self.slot_key[closing], self.slot_start[closing]))
            closing = closing[order]
            out = GroupRows(new=self._materialize(closing, self.slot_start, self.slot_end),
                            new_valid=self.rows.counts[closing] > 0)
        self._release(closing, relink=True)
        return out

    def _on_watermark_late(self, wm: int) -> GroupRows | None:
        """With allowed lateness: fire sessions whose end the watermark reached, purge at end + L."""
        self._fired_wm = max(self._fired_wm, wm)
        if wm < self._min_end:
            return None
        live = np.flatnonzero(self.live[: int(self.counters[0])])
        ends = self.slot_end[live]
        fire = live[(ends <= wm) & ~self.fired[live]]
        self.fired[fire] = True
        purge = ends + self.lateness <= wm
        nxt = np.where(self.fired[live], ends + self.lateness, ends)[~purge]
        self._min_end = int(nxt.min()) if len(nxt) else END_OF_TIME
        out = None
        if self.emit == "close" and len(fire):
            fire = fire[np.lexsort((self.slot_key[fire], self.slot_start[fire]))]
            out = GroupRows(new=self._materialize(fire, self.slot_start, self.slot_end),
                            new_valid=self.rows.counts[fire] > 0)
        if purge.any():
            self._release(live[purge], relink=True)
        return out

    def _release(self, slots: np.ndarray, relink: bool) -> None:
        self.live[slots] = False
        self.fired[slots] = False
        self.rows.reset(slots)
        for a in self.accs:
            a.reset(slots)
        nf = int(self.counters[1])
        self.free[nf : nf + len(slots)] = slots
        self.counters[1] = nf + len(slots)
        if relink:
            _relink(self.key_head, self.slot_next, self.slot_key, self.live, int(self.counters[0]))

    def current(self) -> pa.RecordBatch:
        live = np.flatnonzero(self.live[: int(self.counters[0])])
        order = np.lexsort((self.slot_key[live], self.slot_start[live]))
        return self._materialize(live[order], self.slot_start, self.slot_end)

    def _materialize(self, slots, starts, ends) -> pa.RecordBatch:
        cols = [pa.array(starts[slots], pa.int64()).cast(self.time_type),
                pa.array(ends[slots], pa.int64()).cast(self.time_type)]
        if self.keys is not None:
            cols += self.keys.take(self.slot_key[slots])
        cols += [a.output(slots) for a in self.accs]
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)

    # ------------------------------------------------------------------ snapshot
    def snapshot(self) -> StateImage:
        """A consistent copy of the open sessions (under the engine lock); ``encode()`` it anywhere."""
        return _agg_state.image("session_aggregate", self, {"plan": self.fingerprint})

    def restore(self, blob: bytes | Snapshot, *, vnodes=None) -> None:
        """Load a snapshot (only ``vnodes``' sessions, if given) into this fresh operator."""
        _agg_state.restore("session_aggregate", self, blob, self.fingerprint, vnodes)

    def capture(self) -> tuple[dict, dict]:
        """The snapshot tables of every open session, and the operator's scalars."""
        live = np.flatnonzero(self.live[: int(self.counters[0])])
        bounds: dict[str, np.ndarray] = {"__ws": self.slot_start[live], "__we": self.slot_end[live]}
        meta = {"seq": self._seq}
        if self.lateness:
            bounds["__fired"] = self.fired[live]
            meta["fired_wm"] = int(self._fired_wm)
        return _agg_state.capture(self.keys, self.slot_key[live], bounds, self.rows, self.accs, live), meta

    def load(self, snap: Snapshot, meta: dict) -> None:
        """Open the snapshot's sessions in new slots and link them into their keys' lists."""
        key_ids = _agg_state.load_keys(self.keys, snap)
        g = snap.tables["groups"]
        n = len(key_ids)
        self._reserve(n, len(self.keys) if self.keys is not None else 1)
        nf, hw = int(self.counters[1]), int(self.counters[0])
        k = min(nf, n)  # freed slots first (last freed first, as take_slot does), then new ones
        slots = np.concatenate([self.free[nf - k : nf][::-1], np.arange(hw, hw + n - k, dtype=np.int64)])
        self.counters[:] = (hw + n - k, nf - k)
        ends = g.column("__we").to_numpy()
        self.slot_key[slots] = key_ids
        self.slot_start[slots] = g.column("__ws").to_numpy()
        self.slot_end[slots] = ends
        self.live[slots] = True
        self.redirect[slots] = -1
        if "__fired" in g.column_names:
            self.fired[slots] = g.column("__fired").to_numpy(zero_copy_only=False)
        self._fired_wm = max(self._fired_wm, int(meta.get("fired_wm", NO_WATERMARK)))
        _relink(self.key_head, self.slot_next, self.slot_key, self.live, int(self.counters[0]))
        _agg_state.load_accumulators(snap, slots, self.rows, self.accs)
        self._seq = max(self._seq, int(meta["seq"]))
        if n:
            self._min_end = min(self._min_end, int(ends.min()))
