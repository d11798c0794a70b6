"""A one-row update of a keyed EMIT CHANGES aggregate, in plain Python (issue 23).

Entry point: ``one_row_update(agg, GroupRows)`` — a ``OneRowUpdate`` for a ``GroupAggregate`` whose
accumulators and types it covers, else None; ``GroupAggregate.process`` hands it batches of
one row. Why: for one row the batch path's fixed costs dominate (interning through
``encode_rows`` ~5 µs, numpy on one-element arrays, the numba calls, ``_materialize_pair``'s
Arrow gathers and concatenations). Here the key is looked up in a dict of the row's Python
values, the accumulators are updated with scalar arithmetic that gives the numba kernels'
results bit for bit, and the old/new pair is packed straight into Arrow buffers.

The state stays in the operator's own structures (interner, ``GroupTable``, accumulator
arrays, ``_seq``, ``_min_open_end``), so one-row and batch inserts mix exactly and snapshots
do not know which path ran. A dict hit is only a hint: it is checked against the group
table before use, and every miss goes through the interner and ``GroupTable.upsert`` as the
batch path does (so key ids and slots are handed out in the same order).
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from laminardb.operators.aggregates import CountAcc, FirstLastAcc, MinMaxAcc, SumAcc

#: (key values, window start) → (key id, slot, key/bound columns) hints kept; cleared when
#: full. An entry holds a few small Arrow arrays (~1 KB), so this bounds the dict to ~16 MB;
#: a key set larger than this misses now and then and takes the interner (~5 µs more).
_MAX_HINTS = 1 << 14
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_INT_FORMATS = {pa.int8(): "b", pa.int16(): "h", pa.int32(): "i", pa.int64(): "q",
                pa.uint8(): "B", pa.uint16(): "H", pa.uint32(): "I",
                pa.timestamp("ms"): "q", pa.timestamp("us"): "q"}
# validity bitmaps of (old, new) indexed by (old is None) * 2 + (new is None): bit 0 is old, bit 1 new
_NULL_BITS = (b"\x03", b"\x01", b"\x02", b"\x00")


def _packable(t: pa.DataType) -> bool:
    return t in _INT_FORMATS or t in (pa.float64(), pa.string(), pa.bool_())


def _hintable(t: pa.DataType) -> bool:
    """Key types whose Python values are equal exactly when the interner's encodings are."""
    return (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_boolean(t) or pa.types.is_floating(t))  # floats: -0.0 == 0.0 both ways; NaN never hits


def _numeric_arg(t: pa.DataType | None) -> bool:
    """Argument types whose Python value is the number the kernels read (uint64 may not fit)."""
    return t is not None and (pa.types.is_floating(t) or (pa.types.is_integer(t) and t != pa.uint64()))


def _covered(acc) -> bool:
    kind = type(acc)
    if kind is CountAcc:
        return True
    if kind is SumAcc:
        return _numeric_arg(acc.spec.arg_type)
    if kind in (MinMaxAcc, FirstLastAcc):
        return acc.domain.interner is None and _numeric_arg(acc.spec.arg_type) and _packable(acc.spec.out_type)
    return False  # COUNT(DISTINCT), string MIN/MAX/FIRST/LAST: the batch path


def one_row_update(agg, group_rows: type) -> OneRowUpdate | None:
    """The one-row update of ``agg`` (a ``GroupAggregate``, whose ``GroupRows`` class it is
    handed: that module imports this one), or None when the batch path must
    run: EMIT ON WINDOW CLOSE (nothing to emit per row), hopping windows (a row is several
    groups), an accumulator or output column type not covered here."""
    if agg.emit != "changes" or (agg.window is not None and agg.window.kind != "tumble"):
        return None
    if not all(_covered(a) for a in agg.accs):
        return None
    if agg.window is not None and not _packable(agg.time_type):
        return None
    return OneRowUpdate(agg, group_rows)


class OneRowUpdate:
    """Folds one row into a ``GroupAggregate``'s state; see the module docstring."""

    def __init__(self, agg, group_rows: type) -> None:
        self.agg = agg
        self._group_rows = group_rows
        key_types = [f.type for f in agg.schema if f.name.startswith("__k")]
        self._hints: dict | None = {} if all(_hintable(t) for t in key_types) else None
        # keys packed from the row's own values (equal bytes: the stored key); floats and others are
        # taken from the interner, whose stored value may differ (-0.0 first seen, then 0.0)
        self._keys_packed = all((pa.types.is_integer(t) and t in _INT_FORMATS) or t in (pa.string(), pa.bool_())
                                for t in key_types)
        self._key_types = key_types
        self._steps = [(_UPDATES[_kind(a)], _VALUES[_kind(a)], a) for a in agg.accs]
        self._outs = [(a.spec.out_type, _how(a.spec.out_type)) for a in agg.accs]
        self._time = (agg.time_type, _how(agg.time_type)) if agg.window is not None else None

    def process(self, keys: list[pa.Array], args: list[pa.Array | None], ts: np.ndarray | None,
                weights: np.ndarray | None, wm_before: int):
        """``GroupAggregate.process`` for one row: (GroupRows | None, late mask | None), or None
        (nothing changed) when the batch path must run."""
        agg = self.agg
        t = 0 if ts is None else int(ts[0])
        win = 0
        late = False
        if agg.window is not None:
            size, offset = agg.window.size, agg.window.offset
            win = ((t - offset) // size) * size + offset
            if not _INT64_MIN <= win + size <= _INT64_MAX:  # the kernel's int64 would wrap
                return None
            closed_before = wm_before
            if agg.lateness and wm_before != _INT64_MIN:  # NO_WATERMARK
                closed_before = wm_before - agg.lateness
            late = win + size <= closed_before
        values = [k.to_pylist()[0] for k in keys]
        slot, fixed = self._group(keys, values, win, late)
        if late:  # the batch path interned the key, then dropped the row
            return None, _LATE
        # (``last_slots``, which the batch path also sets, is read for EMIT ON WINDOW CLOSE only)
        if agg.window is not None:
            agg._min_open_end = min(agg._min_open_end, win + agg.window.size)

        counts = agg.rows.counts
        old_ok = bool(counts[slot] > 0)
        old = [value(a, slot) for _, value, a in self._steps]
        w = 1 if weights is None else int(weights[0])
        counts[slot] += w
        seq = agg._seq
        for (update, _, a), arr in zip(self._steps, args, strict=True):
            update(a, slot, arr, w, t, seq)
        agg._seq = seq + 1
        new_ok = bool(counts[slot] > 0)
        new = [value(a, slot) for _, value, a in self._steps]

        cols = fixed + [_pair(o, n, ty, how) for o, n, (ty, how) in zip(old, new, self._outs, strict=True)]
        pair = pa.RecordBatch.from_arrays(cols, schema=agg.schema)
        if not new_ok and agg.window is None:  # retracted to nothing: freed as the batch path does
            agg._free(np.full(1, slot, dtype=np.int64))
        return self._group_rows(new=None, new_valid=_VALID[new_ok], old_valid=_VALID[old_ok], pair=pair), None

    # ------------------------------------------------------------------ key → slot
    def _group(self, keys: list[pa.Array], values: list, win: int, late: bool) -> tuple[int, list[pa.Array]]:
        """The slot of the row's group (−1 for a late row: its key is still interned) and its
        window bound and key columns as old/new pairs (immutable: kept with the hint)."""
        agg = self.agg
        hints = self._hints
        hint_key = (*values, win)
        if hints is not None and not late:
            hit = hints.get(hint_key)
            if hit is not None:
                key_id, slot, fixed = hit
                g = agg.groups
                # slots are reused after a group closes: a hint holds only while the slot is this group's
                if g.live[slot] and g.slot_key[slot] == key_id and g.slot_win[slot] == win:
                    return slot, fixed
        key_id = int(agg.keys.intern(keys)[0]) if agg.keys is not None else 0
        if late:
            return -1, []
        n_keys = len(agg.keys) if agg.keys is not None else 1  # as the batch path passes it
        slot = int(agg.groups.upsert(np.full(1, key_id, dtype=np.int64), np.full(1, win, dtype=np.int64), n_keys)[0])
        fixed = []
        if agg.window is not None:
            end = win + agg.window.size
            fixed += [_pair(win, win, *self._time), _pair(end, end, *self._time)]
        if self._keys_packed:
            fixed += [_pair(v, v, t, _how(t)) for v, t in zip(values, self._key_types, strict=True)]
        elif agg.keys is not None:
            fixed += [pa.concat_arrays([c, c]) for c in agg.keys.take(np.full(1, key_id, dtype=np.int64))]
        if hints is not None:
            if len(hints) >= _MAX_HINTS:
                hints.clear()
            hints[hint_key] = (key_id, slot, fixed)
        return slot, fixed


# ---------------------------------------------------------------------- results
# The result of an aggregate for one slot as a Python value (None: NULL), as ``raw`` gives it.

def _count_value(a: CountAcc, slot: int) -> int:
    return int(a.counts[slot])


def _sum_value(a: SumAcc, slot: int):
    return a.sums[slot].item() if a.counts[slot] > 0 else None


def _avg_value(a: SumAcc, slot: int) -> float | None:
    cnt = int(a.counts[slot])
    return float(a.sums[slot]) / cnt if cnt > 0 else None  # numpy's float64 ÷ int64, bit for bit


def _best_value(a: MinMaxAcc | FirstLastAcc, slot: int):
    return a.best[slot].item() if a.has[slot] else None


# ---------------------------------------------------------------------- scalar updates
# Each gives what its numba kernel in ``_accumulate.py`` gives for a batch of one row.

def _update_count(a: CountAcc, slot: int, arr: pa.Array | None, w: int, t: int, seq: int) -> None:
    if arr is None or arr.null_count == 0:
        a.counts[slot] += w


def _update_sum(a: SumAcc, slot: int, arr: pa.Array, w: int, t: int, seq: int) -> None:
    v = arr.to_pylist()[0]
    if v is None:
        return
    if a.sums.dtype == np.float64:
        a.sums[slot] += float(v) * w  # the kernel: float64 value × int64 weight (as float64)
    else:  # int64 arithmetic wraps in the kernel
        s = int(a.sums[slot]) + v * w
        a.sums[slot] = (s - _INT64_MIN) % (1 << 64) + _INT64_MIN
    a.counts[slot] += w


def _update_minmax(a: MinMaxAcc, slot: int, arr: pa.Array, w: int, t: int, seq: int) -> None:
    v = arr.to_pylist()[0]
    if v is None:
        return
    if not a.has[slot]:
        a.best[slot] = v
        a.has[slot] = True
    elif (v > a.best[slot]) if a.is_max else (v < a.best[slot]):  # NaN never wins, as in the kernel
        a.best[slot] = v


def _update_first_last(a: FirstLastAcc, slot: int, arr: pa.Array, w: int, t: int, seq: int) -> None:
    v = arr.to_pylist()[0]
    if v is None:
        return
    if not a.has[slot]:
        take = True
    elif a.is_last:
        take = t > a.best_ts[slot] or (t == a.best_ts[slot] and seq > a.best_seq[slot])
    else:
        take = t < a.best_ts[slot] or (t == a.best_ts[slot] and seq < a.best_seq[slot])
    if take:
        a.best[slot] = v
        a.best_ts[slot] = t
        a.best_seq[slot] = seq
        a.has[slot] = True


_UPDATES = {"count": _update_count, "sum": _update_sum, "avg": _update_sum,
            "minmax": _update_minmax, "first_last": _update_first_last}
_VALUES = {"count": _count_value, "sum": _sum_value, "avg": _avg_value,
           "minmax": _best_value, "first_last": _best_value}


def _kind(acc) -> str:
    if type(acc) is SumAcc:
        return acc.spec.kind  # sum or avg: one state, two results
    return {CountAcc: "count", MinMaxAcc: "minmax", FirstLastAcc: "first_last"}[type(acc)]


def _frozen(values) -> np.ndarray:
    arr = np.array(values, dtype=np.bool_)
    arr.flags.writeable = False  # shared by every one-row update: nobody may write into it
    return arr


_VALID = {False: _frozen([False]), True: _frozen([True])}  # new_valid/old_valid of one group
_LATE = _frozen([True])


# ---------------------------------------------------------------------- output
def _how(t: pa.DataType) -> str:
    """How ``_pair`` packs values of ``t`` (worked out once per column: comparing types per
    row costs more than packing): "str", "bool", or a ``struct`` format for two values."""
    if t == pa.string():
        return "str"
    if t == pa.bool_():
        return "bool"
    return "<2d" if t == pa.float64() else "<2" + _INT_FORMATS[t]


def _pair(old, new, t: pa.DataType, how: str) -> pa.Array:
    """A two-element array (``old``, ``new``; None is NULL) of type ``t``, packed straight into
    buffers (``sql/one_row.py``'s way; ~1 µs against ~3 µs for ``pa.array`` + ``concat``)."""
    nulls = (old is None) + (new is None)
    validity = None if nulls == 0 else pa.py_buffer(_NULL_BITS[(old is None) * 2 + (new is None)])
    if how == "str":
        a = b"" if old is None else old.encode("utf-8")
        b = b"" if new is None else new.encode("utf-8")
        offsets = struct.pack("<3i", 0, len(a), len(a) + len(b))
        return pa.Array.from_buffers(t, 2, [validity, pa.py_buffer(offsets), pa.py_buffer(a + b)],
                                     null_count=nulls)
    if how == "bool":
        data = bytes([(old is True) | ((new is True) << 1)])
    else:
        zero = 0.0 if how == "<2d" else 0
        data = struct.pack(how, zero if old is None else old, zero if new is None else new)
    return pa.Array.from_buffers(t, 2, [validity, pa.py_buffer(data)], null_count=nulls)
