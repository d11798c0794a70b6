"""Aggregate functions: per-slot accumulator state in numpy arrays, updated by numba kernels.

Entry point: ``make_accumulator(spec, capacity)``. An accumulator owns the state of one
aggregate call for every group slot: ``update`` folds a batch in, ``output`` turns slots
into an Arrow column, ``reset`` clears freed slots, ``merge`` combines two slots (session
merges), ``snapshot``/``restore`` move the state through msgpack-able dicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laminardb.operators import _accumulate as A
from laminardb.operators._buffers import is_string_type, numeric_view, validity
from laminardb.operators._interner import Interner

AggKind = Literal[
    "count_star", "count", "count_distinct", "sum", "avg", "min", "max", "first_value", "last_value"
]
#: aggregates that stay correct when input rows are retracted (weight −1)
INVERTIBLE: frozenset[str] = frozenset({"count_star", "count", "sum", "avg"})

_DISTINCT_INITIAL = 1024


@dataclass(frozen=True)
class AggSpec:
    """One aggregate call: its kind, the Arrow type of its argument and of its result."""

    kind: AggKind
    arg_type: pa.DataType | None
    out_type: pa.DataType


def result_type(kind: AggKind, arg_type: pa.DataType | None) -> pa.DataType:
    if kind in ("count_star", "count", "count_distinct"):
        return pa.int64()
    if kind == "avg":
        return pa.float64()
    if kind == "sum":
        assert arg_type is not None
        return pa.float64() if pa.types.is_floating(arg_type) else pa.int64()
    assert arg_type is not None
    return arg_type


def _grow(arr: np.ndarray, cap: int, fill=0) -> np.ndarray:
    new = np.full(cap, fill, dtype=arr.dtype)
    new[: len(arr)] = arr
    return new


class Accumulator:
    """Base: named numpy state arrays of one length (the slot capacity)."""

    _arrays: tuple[str, ...] = ()

    def __init__(self, spec: AggSpec, capacity: int) -> None:
        self.spec = spec
        self._init_arrays(capacity)

    def _init_arrays(self, capacity: int) -> None:
        raise NotImplementedError

    def grow(self, capacity: int) -> None:
        for name in self._arrays:
            setattr(self, name, _grow(getattr(self, name), capacity))

    def reset(self, slots: np.ndarray) -> None:
        for name in self._arrays:
            getattr(self, name)[slots] = 0

    def update(self, slots, arr, weights, ts, seqs) -> None:
        raise NotImplementedError

    def raw(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The result values of ``slots`` as numpy (a copy) and the NULL mask (None: no NULLs)."""
        raise NotImplementedError

    def to_arrow(self, vals: np.ndarray, mask: np.ndarray | None) -> pa.Array:
        return pa.array(vals, type=self.spec.out_type, mask=mask if mask is not None and mask.any() else None)

    def output(self, slots: np.ndarray) -> pa.Array:
        return self.to_arrow(*self.raw(slots))

    def merge(self, dst: int, src: int) -> None:
        raise NotImplementedError

    def snapshot(self, n: int) -> dict:
        return {name: getattr(self, name)[:n].tobytes() for name in self._arrays}

    def restore(self, state: dict, capacity: int) -> None:
        for name in self._arrays:
            cur = getattr(self, name)
            data = np.frombuffer(state[name], dtype=cur.dtype)
            arr = np.zeros(capacity, dtype=cur.dtype)
            arr[: len(data)] = data
            setattr(self, name, arr)


class CountAcc(Accumulator):
    _arrays = ("counts",)

    def _init_arrays(self, capacity):
        self.counts = np.zeros(capacity, dtype=np.int64)

    def update(self, slots, arr, weights, ts, seqs):
        if arr is None:
            A.acc_count(slots, np.zeros(0, np.bool_), False, weights, self.counts)
        else:
            valid, has_valid = validity(arr)
            A.acc_count(slots, valid, has_valid, weights, self.counts)

    def raw(self, slots):
        return self.counts[slots], None

    def partials(self, slots) -> list[np.ndarray]:
        """Mergeable state of ``slots`` (Delta partial aggregation): here, the counts."""
        return [self.counts[slots]]

    def merge(self, dst, src):
        self.counts[dst] += self.counts[src]


class SumAcc(Accumulator):
    """SUM and AVG: a running sum and the count of non-NULL inputs (SUM of none is NULL)."""

    _arrays = ("sums", "counts")

    def _init_arrays(self, capacity):
        is_float = self.spec.kind == "avg" or pa.types.is_floating(self.spec.out_type)
        self.sums = np.zeros(capacity, dtype=np.float64 if is_float else np.int64)
        self.counts = np.zeros(capacity, dtype=np.int64)

    def update(self, slots, arr, weights, ts, seqs):
        valid, has_valid = validity(arr)
        vals = numeric_view(arr)
        if vals.dtype != self.sums.dtype:
            vals = vals.astype(self.sums.dtype)
        A.acc_sum(slots, vals, valid, has_valid, weights, self.sums, self.counts)

    def raw(self, slots):
        cnt = self.counts[slots]
        mask = cnt <= 0
        if self.spec.kind == "avg":
            with np.errstate(divide="ignore", invalid="ignore"):
                return self.sums[slots] / np.where(mask, 1, cnt), mask
        return self.sums[slots], mask

    def partials(self, slots) -> list[np.ndarray]:
        return [self.sums[slots], self.counts[slots]]

    def merge(self, dst, src):
        self.sums[dst] += self.sums[src]
        self.counts[dst] += self.counts[src]


class _ValueDomain:
    """How an argument's values are stored per slot: as int64, float64, or interned ids."""

    def __init__(self, arg_type: pa.DataType) -> None:
        self.arg_type = arg_type
        self.interned = is_string_type(arg_type)
        self.interner = Interner([pa.string()]) if self.interned else None
        self.dtype = np.float64 if pa.types.is_floating(arg_type) else np.int64

    def values(self, arr: pa.Array) -> np.ndarray:
        if self.interner is not None:
            return self.interner.intern([arr])
        vals = numeric_view(arr)
        return vals if vals.dtype == self.dtype else vals.astype(self.dtype)

    def to_arrow(self, vals: np.ndarray, mask: np.ndarray) -> pa.Array:
        if self.interner is not None:
            if len(self.interner) == 0:
                return pa.nulls(len(vals), pa.string())
            out = self.interner.take(np.where(mask, 0, vals))[0]
            if mask.any():
                out = pc.if_else(pa.array(~mask), out, pa.scalar(None, out.type))
            return out
        t = self.arg_type
        if pa.types.is_boolean(t):
            return pa.array(vals.astype(np.bool_), type=t, mask=mask)
        if pa.types.is_floating(t) or pa.types.is_integer(t):
            return pa.array(vals, mask=mask).cast(t)
        return pa.array(vals, type=pa.int64(), mask=mask).cast(t)


class _ValueAcc(Accumulator):
    """Accumulators whose result is one stored value per slot (``best``/``has``)."""

    def raw(self, slots):
        return self.best[slots], ~self.has[slots]

    def to_arrow(self, vals, mask):
        return self.domain.to_arrow(vals, mask if mask is not None else np.zeros(len(vals), np.bool_))


class MinMaxAcc(_ValueAcc):
    _arrays = ("best", "has")

    def _init_arrays(self, capacity):
        self.domain = _ValueDomain(self.spec.arg_type)
        self.best = np.zeros(capacity, dtype=self.domain.dtype)
        self.has = np.zeros(capacity, dtype=np.bool_)
        self.is_max = self.spec.kind == "max"

    def update(self, slots, arr, weights, ts, seqs):
        valid, has_valid = validity(arr)
        vals = self.domain.values(arr)
        it = self.domain.interner
        if it is not None:
            A.acc_minmax_interned(
                slots, vals, valid, has_valid, it.arena, it.arena_off, self.best, self.has, self.is_max
            )
        else:
            A.acc_minmax(slots, vals, valid, has_valid, self.best, self.has, self.is_max)

    def merge(self, dst, src):
        if not self.has[src]:
            return
        if not self.has[dst]:
            self.best[dst], self.has[dst] = self.best[src], True
            return
        it = self.domain.interner
        if it is not None:
            from laminardb.operators._kernels import compare_interned

            c = compare_interned(it.arena, it.arena_off, self.best[src], self.best[dst])
        else:
            c = int(self.best[src] > self.best[dst]) - int(self.best[src] < self.best[dst])
        if (self.is_max and c > 0) or (not self.is_max and c < 0):
            self.best[dst] = self.best[src]


class FirstLastAcc(_ValueAcc):
    _arrays = ("best", "best_ts", "best_seq", "has")

    def _init_arrays(self, capacity):
        self.domain = _ValueDomain(self.spec.arg_type)
        self.best = np.zeros(capacity, dtype=self.domain.dtype)
        self.best_ts = np.zeros(capacity, dtype=np.int64)
        self.best_seq = np.zeros(capacity, dtype=np.int64)
        self.has = np.zeros(capacity, dtype=np.bool_)
        self.is_last = self.spec.kind == "last_value"

    def update(self, slots, arr, weights, ts, seqs):
        valid, has_valid = validity(arr)
        vals = self.domain.values(arr)
        A.acc_first_last(
            slots, vals, valid, has_valid, ts, seqs, self.best, self.best_ts, self.best_seq,
            self.has, self.is_last,
        )

    def merge(self, dst, src):
        if not self.has[src]:
            return
        key_src = (self.best_ts[src], self.best_seq[src])
        key_dst = (self.best_ts[dst], self.best_seq[dst])
        better = key_src > key_dst if self.is_last else key_src < key_dst
        if not self.has[dst] or better:
            for name in self._arrays:
                arr = getattr(self, name)
                arr[dst] = arr[src]


class DistinctCountAcc(Accumulator):
    """COUNT(DISTINCT x): interned values and an open-addressing set of (slot, value id)."""

    _arrays = ("counts",)

    def _init_arrays(self, capacity):
        self.interner = Interner([self.spec.arg_type])
        self.counts = np.zeros(capacity, dtype=np.int64)
        self.set_slot = np.full(_DISTINCT_INITIAL, -1, dtype=np.int64)
        self.set_val = np.zeros(_DISTINCT_INITIAL, dtype=np.int64)
        self.set_n = np.zeros(1, dtype=np.int64)

    def update(self, slots, arr, weights, ts, seqs):
        valid, has_valid = validity(arr)
        ids = self.interner.intern([arr])
        if 2 * (int(self.set_n[0]) + len(slots)) > len(self.set_slot):
            self._rebuild(None, 4 * (int(self.set_n[0]) + len(slots)))
        A.acc_distinct(slots, ids, valid, has_valid, self.set_slot, self.set_val, self.set_n, self.counts)

    def _rebuild(self, keep: np.ndarray | None, need: int) -> None:
        cap = _DISTINCT_INITIAL
        while cap < need:
            cap *= 2
        old_slot, old_val = self.set_slot, self.set_val
        if keep is None:
            keep = np.ones(len(self.counts), dtype=np.bool_)
        self.set_slot = np.full(cap, -1, dtype=np.int64)
        self.set_val = np.zeros(cap, dtype=np.int64)
        A.rebuild_distinct(self.set_slot, self.set_val, old_slot, old_val, keep, self.set_n)

    def reset(self, slots):
        super().reset(slots)
        keep = np.ones(len(self.counts), dtype=np.bool_)
        keep[slots] = False
        self._rebuild(keep, 2 * int(self.set_n[0]) + 2)

    def raw(self, slots):
        return self.counts[slots], None

    def merge(self, dst, src):
        A.move_distinct(self.set_slot, self.set_val, src, dst, self.counts)

    def snapshot(self, n):
        s = super().snapshot(n)
        s.update(set_slot=self.set_slot.tobytes(), set_val=self.set_val.tobytes(), set_n=int(self.set_n[0]))
        return s

    def restore(self, state, capacity):
        super().restore(state, capacity)
        self.set_slot = np.frombuffer(state["set_slot"], dtype=np.int64).copy()
        self.set_val = np.frombuffer(state["set_val"], dtype=np.int64).copy()
        self.set_n = np.array([state["set_n"]], dtype=np.int64)


_ACCUMULATORS: dict[str, type[Accumulator]] = {
    "count_star": CountAcc,
    "count": CountAcc,
    "sum": SumAcc,
    "avg": SumAcc,
    "min": MinMaxAcc,
    "max": MinMaxAcc,
    "first_value": FirstLastAcc,
    "last_value": FirstLastAcc,
    "count_distinct": DistinctCountAcc,
}


def fold(rows: Accumulator, accs: list[Accumulator], slots: np.ndarray, args: list[pa.Array | None],
         take: np.ndarray | None, weights: np.ndarray, ts: np.ndarray, seqs: np.ndarray) -> None:
    """Fold one batch into the hidden row count and every aggregate. ``take`` picks the
    argument rows behind ``slots`` (window expansion, late rows dropped); None: all, in order."""
    idx = None if take is None else pa.array(take)
    rows.update(slots, None, weights, ts, seqs)
    for acc, arr in zip(accs, args, strict=True):
        if arr is not None and idx is not None:
            arr = arr.take(idx)
        acc.update(slots, arr, weights, ts, seqs)


def make_accumulator(spec: AggSpec, capacity: int) -> Accumulator:
    return _ACCUMULATORS[spec.kind](spec, capacity)
