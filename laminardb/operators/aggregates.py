"""Aggregate functions: per-slot accumulator state in numpy arrays, updated by numba kernels.

Entry points: ``make_accumulators(specs, capacity)`` (one operator's accumulators) and
``fold`` (one batch into them). An accumulator owns the state of one aggregate call for every
group slot: ``update`` folds a batch in, ``output`` turns slots into an Arrow column, ``reset``
clears freed slots, ``merge`` combines two slots (session merges), ``capture``/``load`` move
the state of slots through snapshot columns. ``FILTER (WHERE …)`` never reaches them: the
planner folds it into the argument as NULLs (``sql/_agg_filter.py``).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laminardb.operators import _accumulate as A
from laminardb.operators._buffers import is_string_type, validity
from laminardb.operators._interner import Interner
from laminardb.operators.snapshot import Column
from laminardb.sql.arrays import is_flat_type, numeric_view
from laminardb.sql.plan import AggSpec

_DISTINCT_INITIAL = 1024
_NO_VALID = np.zeros(0, np.bool_)
_NO_WEIGHTS = np.zeros(0, np.int64)


def _grow(arr: np.ndarray, cap: int, fill=0) -> np.ndarray:
    new = np.full(cap, fill, dtype=arr.dtype)
    new[: len(arr)] = arr
    return new


def _weights(weights: np.ndarray | None) -> tuple[np.ndarray, bool]:
    """The kernels' (weights, has_weights): None means every row +1, nothing to read."""
    return (_NO_WEIGHTS, False) if weights is None else (weights, True)


def _numpy(col: pa.ChunkedArray, dtype) -> np.ndarray:
    return np.asarray(col.to_numpy(), dtype=dtype)


class Accumulator:
    """Base: named numpy state arrays of one length (the slot capacity)."""

    _arrays: tuple[str, ...] = ()
    has_pairs = False  # state per (group, value) pair too: capture_pairs/load_pairs
    uses_order = False  # reads ``ts``/``seqs`` in update (FIRST/LAST_VALUE); else they may be None

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

    # -- snapshot: per-group state as columns (see operators/snapshot.py) -------------
    def capture(self, slots: np.ndarray) -> dict[str, Column]:
        """Copies of the state of ``slots``, one column per state array (under the lock)."""
        return {name: getattr(self, name)[slots] for name in self._arrays}

    def load(self, slots: np.ndarray, cols: dict[str, pa.ChunkedArray]) -> None:
        """Write captured state into ``slots`` (fresh slots of a restored operator)."""
        for name in self._arrays:
            arr = getattr(self, name)
            arr[slots] = _numpy(cols[name], arr.dtype)

    def capture_pairs(self, row_of_slot: np.ndarray) -> dict[str, Column]:
        """With ``has_pairs``: the (``__group``, ``value``) pairs of the captured groups."""
        raise NotImplementedError

    def load_pairs(self, slots: np.ndarray, values: pa.ChunkedArray) -> None:
        """With ``has_pairs``: re-insert captured pairs, ``slots[i]`` holding ``values[i]``."""
        raise NotImplementedError


class CountAcc(Accumulator):
    _arrays = ("counts",)

    def _init_arrays(self, capacity):
        self.counts = np.zeros(capacity, dtype=np.int64)

    def update(self, slots, arr, weights, ts, seqs):
        valid, has_valid = (_NO_VALID, False) if arr is None else validity(arr)
        A.acc_count(slots, valid, has_valid, *_weights(weights), self.counts)

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
        A.acc_sum(slots, vals, valid, has_valid, *_weights(weights), self.sums, self.counts)

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

    def capture(self, slots):
        out = super().capture(slots)
        it = self.domain.interner
        if it is not None:  # interned ids mean nothing elsewhere: snapshot the strings
            out["best"] = partial(it.freeze().column, 0, out["best"], ~out["has"])
        return out

    def load(self, slots, cols):
        it = self.domain.interner
        if it is None:
            super().load(slots, cols)
            return
        for name in self._arrays:
            if name != "best":
                arr = getattr(self, name)
                arr[slots] = _numpy(cols[name], arr.dtype)
        has = _numpy(cols["has"], np.bool_)
        ids = np.zeros(len(slots), dtype=np.int64)
        if has.any():
            ids[has] = it.intern([cols["best"].combine_chunks().filter(pa.array(has))])
        self.best[slots] = ids

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
    uses_order = True

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
    """COUNT(DISTINCT x): interned values and an open-addressing set of (slot, value id).

    ``interner`` may be shared by the COUNT(DISTINCT) accumulators of one operator whose
    arguments have one type (``make_accumulators``): a value id is only a name for a value, so
    sharing changes no result, and ``fold`` then interns each batch's values once for all of
    them (Nexmark q15 counts distinct bidders four times: in total and per price band)."""

    _arrays = ("counts",)
    has_pairs = True

    def __init__(self, spec: AggSpec, capacity: int, interner: Interner | None = None) -> None:
        self.interner = interner if interner is not None else Interner([spec.arg_type])
        super().__init__(spec, capacity)

    def _init_arrays(self, capacity):
        self.counts = np.zeros(capacity, dtype=np.int64)
        self.set_slot = np.full(_DISTINCT_INITIAL, -1, dtype=np.int64)
        self.set_val = np.zeros(_DISTINCT_INITIAL, dtype=np.int64)
        self.set_n = np.zeros(1, dtype=np.int64)

    def update(self, slots, arr, weights, ts, seqs):
        self.update_ids(slots, arr, self.interner.intern([arr]))

    def update_ids(self, slots: np.ndarray, arr: pa.Array, ids: np.ndarray) -> None:
        """Fold in ``arr`` whose values ``self.interner`` gave ``ids`` (NULL rows' ids unread)."""
        valid, has_valid = validity(arr)
        # room for every new pair at most: the rows a FILTER or NULL leaves out add none
        most = int(self.set_n[0]) + (int(np.count_nonzero(valid)) if has_valid else len(slots))
        if 2 * most > len(self.set_slot):
            self._rebuild(None, 4 * most)
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

    def capture(self, slots):
        return {}  # the counts are rebuilt from the pairs

    def load(self, slots, cols):
        pass

    def capture_pairs(self, row_of_slot: np.ndarray) -> dict[str, Column]:
        """(group row, value) of every pair of a captured slot (``row_of_slot[slot]`` ≥ 0)."""
        used = np.flatnonzero(self.set_slot >= 0)  # -1 empty, -2 tombstone
        group = row_of_slot[self.set_slot[used]]
        keep = group >= 0
        ids = self.set_val[used[keep]]
        return {"__group": group[keep], "value": partial(self.interner.freeze().column, 0, ids)}

    def load_pairs(self, slots: np.ndarray, values: pa.ChunkedArray) -> None:
        """Re-insert pairs (``slots[i]``, ``values[i]``); the slots' counts follow."""
        if len(slots) == 0:
            return
        ids = self.interner.intern([values.combine_chunks()])
        if 2 * (int(self.set_n[0]) + len(slots)) > len(self.set_slot):
            self._rebuild(None, 4 * (int(self.set_n[0]) + len(slots)))
        A.acc_distinct(slots, ids, np.zeros(0, np.bool_), False, self.set_slot, self.set_val,
                       self.set_n, self.counts)


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
         take: np.ndarray | None, weights: np.ndarray | None, ts: np.ndarray | None,
         seqs: np.ndarray | None) -> None:
    """Fold one batch into the hidden row count and every aggregate. ``take`` picks the
    argument rows behind ``slots`` (window expansion, late rows dropped); None: all, in order.
    ``weights`` None: every row +1; ``ts``/``seqs`` are read only by ``uses_order`` accumulators."""
    idx = None if take is None else pa.array(take)
    rows.update(slots, None, weights, ts, seqs)
    interned: dict[tuple, tuple[pa.Array, np.ndarray]] = {}  # this batch's value ids (``_value_ids``)
    for acc, arr in zip(accs, args, strict=True):
        if arr is not None and idx is not None:
            arr = arr.take(idx)
        if isinstance(acc, DistinctCountAcc):
            acc.update_ids(slots, arr, _value_ids(acc.interner, arr, interned))
        else:
            acc.update(slots, arr, weights, ts, seqs)


def _value_ids(interner: Interner, arr: pa.Array, interned: dict[tuple, tuple[pa.Array, np.ndarray]]) -> np.ndarray:
    """``interner``'s ids of ``arr``'s values, NULLs ignored; arrays of one batch that share value
    buffers and differ only in their validity (an argument and the same argument under FILTER
    conditions) are interned once. The ids of NULL rows are those of whatever value the buffer
    holds there: unread (the accumulators skip NULLs), and the ids never leave the operator."""
    if not is_flat_type(arr.type):
        return interner.intern([arr])
    bufs = arr.buffers()[1:]
    key = (id(interner), arr.offset, len(arr), *(0 if b is None else b.address for b in bufs))
    hit = interned.get(key)
    if hit is not None:
        return hit[1]
    values = pa.Array.from_buffers(arr.type, len(arr), [None, *bufs], offset=arr.offset)
    ids = interner.intern([values])
    # the entry keeps ``arr`` alive: no later array of this call can reuse its buffers' addresses
    interned[key] = (arr, ids)
    return ids


def make_accumulator(spec: AggSpec, capacity: int) -> Accumulator:
    return _ACCUMULATORS[spec.kind](spec, capacity)


def make_accumulators(specs: list[AggSpec], capacity: int) -> list[Accumulator]:
    """The accumulators of one operator; its COUNT(DISTINCT)s of one argument type share one
    interner (see ``DistinctCountAcc``)."""
    shared: dict[str, Interner] = {}
    out: list[Accumulator] = []
    for spec in specs:
        if spec.kind == "count_distinct":
            interner = shared.setdefault(str(spec.arg_type), Interner([spec.arg_type]))
            out.append(DistinctCountAcc(spec, capacity, interner))
        else:
            out.append(make_accumulator(spec, capacity))
    return out
