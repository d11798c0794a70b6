"""Dense ids for key values and a table of (key id, window start) → group slot.

``Interner`` maps the rows of one or more Arrow columns to dense ids (0, 1, 2, …, in order
of first sight) and keeps the original values so ids can be turned back into Arrow arrays.
``GroupTable`` maps (key id, window start) pairs to reusable accumulator slots.
Both own growable numpy arrays: kernels never allocate. Hash tables grow with the keys
(a kernel stops when its table is 1/4 full, the class doubles it and the kernel resumes), so
they stay small enough for the CPU cache and probes stay short; the other arrays are sized
before a kernel runs for every row of the batch being new.
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laminardb.operators import _kernels as K
from laminardb.operators._buffers import encode_rows

_INITIAL_CAPACITY = 1024  # slots; tables double as they fill, so this only sets the floor
_COMBINE_CHUNKS_AT = 64  # combine stored value chunks so take() stays fast


def _pow2_at_least(n: int) -> int:
    c = _INITIAL_CAPACITY
    while c < n:
        c *= 2
    return c


_NO_WORDS = np.zeros(0, dtype=np.uint64)


def _words(data: np.ndarray) -> np.ndarray:
    """``data`` (uint8) seen as a uint64 starting at every byte, zero copy (unaligned loads):
    a short key is read in one load instead of byte by byte."""
    if len(data) < 8 or sys.byteorder != "little":  # the tags compose words little-endian
        return _NO_WORDS
    return np.ndarray(shape=(len(data) - 7,), dtype=np.uint64, buffer=data, strides=(1,))


def _grow_filled(arr: np.ndarray, cap: int, fill: int) -> np.ndarray:
    out = np.full(cap, fill, dtype=arr.dtype)
    out[: len(arr)] = arr
    return out


class Interner:
    """Rows of key columns → dense int64 ids; ``take(ids)`` gives the values back."""

    def __init__(self, types: list[pa.DataType]) -> None:
        self.types = types
        self.tab_ids = np.full(_INITIAL_CAPACITY, -1, dtype=np.int64)
        self.tab_hash = np.zeros(_INITIAL_CAPACITY, dtype=np.uint64)
        self.arena = np.zeros(4096, dtype=np.uint8)
        self.arena_off = np.zeros(_INITIAL_CAPACITY + 1, dtype=np.int64)
        self.n_keys = np.zeros(1, dtype=np.int64)
        self._chunks: list[list[pa.Array]] = [[] for _ in types]

    def __len__(self) -> int:
        return int(self.n_keys[0])

    def intern(self, columns: list[pa.Array]) -> np.ndarray:
        n = len(columns[0])
        offsets, data = encode_rows(columns)
        self._reserve(n, int(offsets[-1] - offsets[0]))
        ids = np.empty(n, dtype=np.int64)
        new_rows = np.empty(n, dtype=np.int64)
        done, n_new = 0, 0
        words = _words(data)
        while True:
            done, n_new = K.intern_rows(
                offsets, data, words, done, self.tab_ids, self.tab_hash, self.arena, self.arena_off,
                self.n_keys, ids, new_rows, n_new,
            )
            if done == n:
                break
            self._grow_table()
        if n_new:
            idx = pa.array(new_rows[:n_new])
            for chunks, col in zip(self._chunks, columns, strict=True):
                chunks.append(col.take(idx))
                if len(chunks) > _COMBINE_CHUNKS_AT:
                    combined = pa.chunked_array(chunks, type=chunks[0].type).combine_chunks()
                    chunks[:] = [combined]
        return ids

    def take(self, ids: np.ndarray) -> list[pa.Array]:
        """The original column values of the given ids."""
        if len(ids) == 1 and len(self):  # the one-row latency path: a slice, not a gather
            return self._slice_one(int(ids[0]))
        idx = pa.array(ids, type=pa.int64())
        out = []
        for chunks, t in zip(self._chunks, self.types, strict=True):
            if not chunks:
                out.append(pa.array([], type=t).take(idx))
                continue
            if len(chunks) > 1:
                chunks[:] = [pa.chunked_array(chunks, type=chunks[0].type).combine_chunks()]
            out.append(chunks[0].take(idx))
        return out

    def _slice_one(self, key_id: int) -> list[pa.Array]:
        out = []
        for chunks in self._chunks:
            pos = key_id
            for c in chunks:
                if pos < len(c):
                    out.append(c.slice(pos, 1))
                    break
                pos -= len(c)
        return out

    def _grow_table(self) -> None:
        """Double the hash table (``intern_rows`` stops when it is 1/4 full: short probes)."""
        old_ids, old_hash = self.tab_ids, self.tab_hash
        self.tab_ids = np.full(2 * len(old_ids), -1, dtype=np.int64)
        self.tab_hash = np.zeros(2 * len(old_ids), dtype=np.uint64)
        K.rehash_interned(self.tab_ids, self.tab_hash, old_ids, old_hash)

    def _reserve(self, n_rows: int, n_bytes: int) -> None:
        """Room for every row being a new key in the arena and its offsets (written in
        order, so unused room is never touched); the hash table grows as keys arrive."""
        need_keys = len(self) + n_rows
        if need_keys + 1 > len(self.arena_off):
            grown = np.zeros(max(2 * len(self.arena_off), need_keys + 1), dtype=np.int64)
            grown[: len(self.arena_off)] = self.arena_off
            self.arena_off = grown
        used = int(self.arena_off[len(self)])
        if used + n_bytes > len(self.arena):
            grown_a = np.zeros(max(2 * len(self.arena), used + n_bytes), dtype=np.uint8)
            grown_a[:used] = self.arena[:used]
            self.arena = grown_a

    # -- snapshot -----------------------------------------------------------------
    def freeze(self) -> FrozenValues:
        """The values interned so far, safe to read from another thread while interning
        goes on: the stored Arrow chunks are immutable, only the lists holding them change."""
        return FrozenValues(self.types, [list(c) for c in self._chunks], len(self))


class FrozenValues:
    """An ``Interner``'s values as of ``freeze()``; ``column(i, ids)`` gathers them later
    (the expensive part of a snapshot runs in ``StateImage.encode``, off the engine lock)."""

    def __init__(self, types: list[pa.DataType], chunks: list[list[pa.Array]], n: int) -> None:
        self.types = types
        self._chunks = chunks
        self.n = n

    def column(self, i: int, ids: np.ndarray | None = None, null: np.ndarray | None = None) -> pa.Array:
        """Values of column ``i`` for ``ids`` (None: every id in order); NULL where ``null``."""
        t = self.types[i]
        chunks = self._chunks[i]
        whole = (pa.concat_arrays(chunks) if len(chunks) > 1 else chunks[0]) if chunks else pa.array([], t)
        if ids is None:
            return whole.slice(0, self.n)
        if self.n == 0:
            return pa.nulls(len(ids), t)
        if null is not None:
            ids = np.where(null, 0, ids)
        out = whole.take(pa.array(ids, type=pa.int64()))
        if null is not None and null.any():
            out = pc.if_else(pa.array(~null), out, pa.scalar(None, out.type))
        return out


class GroupTable:
    """(key id, window start) → accumulator slot, with slot reuse after groups close."""

    def __init__(self) -> None:
        self.tab = np.full(_INITIAL_CAPACITY, -1, dtype=np.int64)
        self.slot_key = np.zeros(_INITIAL_CAPACITY // 2, dtype=np.int64)
        self.slot_win = np.zeros(_INITIAL_CAPACITY // 2, dtype=np.int64)
        self.live = np.zeros(_INITIAL_CAPACITY // 2, dtype=np.bool_)
        self.free = np.zeros(_INITIAL_CAPACITY // 2, dtype=np.int64)
        # [slots used (high-water mark), free-stack size, live groups]
        self.counters = np.zeros(3, dtype=np.int64)
        self.on_grow: list = []  # callbacks(new_capacity) so accumulators grow with slots
        # key id → the group (slot, window start) it last used: a hint, cleared when the slot is freed
        self.key_slot = np.full(_INITIAL_CAPACITY, -1, dtype=np.int64)
        self.key_win = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)

    @property
    def capacity(self) -> int:
        return len(self.slot_key)

    @property
    def high_water(self) -> int:
        return int(self.counters[0])

    @property
    def n_live(self) -> int:
        return int(self.counters[2])

    def upsert(self, key_ids: np.ndarray, wins: np.ndarray, n_keys: int = 0) -> np.ndarray:
        """The slot of each (key id, window start), created if new. ``n_keys``: key ids are
        below it (the interner's size), so the last-slot-per-key hint covers them all."""
        self.reserve(len(key_ids))
        if n_keys > len(self.key_slot):
            self.key_slot = _grow_filled(self.key_slot, _pow2_at_least(n_keys), -1)
            self.key_win = _grow_filled(self.key_win, len(self.key_slot), 0)
        slots = np.empty(len(key_ids), dtype=np.int64)
        done = 0
        while True:
            done = K.upsert_groups(
                key_ids, wins, done, self.tab, self.slot_key, self.slot_win, self.live, self.free,
                self.counters, self.key_slot, self.key_win, slots,
            )
            if done == len(key_ids):
                return slots
            self.tab = np.full(2 * len(self.tab), -1, dtype=np.int64)
            K.rebuild_group_table(self.tab, self.slot_key, self.slot_win, self.live, self.high_water)

    def reserve(self, n_rows: int) -> None:
        need = self.high_water + n_rows
        if need > self.capacity:
            cap = _pow2_at_least(2 * need)
            for name in ("slot_key", "slot_win", "live", "free"):
                old = getattr(self, name)
                new = np.zeros(cap, dtype=old.dtype)
                new[: len(old)] = old
                setattr(self, name, new)
            for cb in self.on_grow:
                cb(cap)

    def live_slots(self) -> np.ndarray:
        return np.flatnonzero(self.live[: self.high_water])

    def remove(self, slots: np.ndarray) -> None:
        """Free closed groups; their slots are reused by later groups."""
        if len(slots) == 0:
            return
        self.live[slots] = False
        keys = self.slot_key[slots]
        hinted = keys < len(self.key_slot)
        keys, freed = keys[hinted], slots[hinted]
        self.key_slot[keys[self.key_slot[keys] == freed]] = -1  # the hint must not point at a freed slot
        nf = int(self.counters[1])
        self.free[nf : nf + len(slots)] = slots
        self.counters[1] = nf + len(slots)
        self.counters[2] -= len(slots)
        K.rebuild_group_table(self.tab, self.slot_key, self.slot_win, self.live, self.high_water)
