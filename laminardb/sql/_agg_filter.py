"""``agg(…) FILTER (WHERE cond)``: an aggregate that sees only the rows where ``cond`` is true.

Entry point: ``filtered_argument(kind, arg, cond, scope, text)``, called by the aggregate planner.

The filter is folded into the aggregate's argument, not into the accumulators: per batch the
condition becomes a boolean mask and the argument's validity bitmap is ANDed with it, so a
row the filter rejects is a NULL argument. Every accumulator already skips NULLs — COUNT,
SUM/AVG (retractions included: a skipped row carries no weight), MIN/MAX, FIRST/LAST_VALUE,
COUNT(DISTINCT) — so the rows the filter rejects never reach any state, and there is no new
state to snapshot. ``COUNT(*) FILTER (WHERE c)`` becomes ``COUNT`` of the mask itself (valid
where ``c`` is true), which also keeps it out of the planner's "COUNT(*) always changes" shortcut.

Cost: one vectorized evaluation of the condition per batch (shared by every aggregate with the
same condition text, as Nexmark q15–q17 repeat each price band three times) and one new
bitmap per argument; the argument's values are never copied.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from laminardb.sql.arrays import is_flat_type
from laminardb.sql.exceptions import SqlTypeError, UnsupportedSqlError
from laminardb.sql.expressions import Expr, Scope, compile_expr
from laminardb.sql.types import type_name


def filtered_argument(kind: str, arg: Expr | None, cond: exp.Expression, scope: Scope,
                      text: str) -> tuple[str, Expr]:
    """The aggregate kind and argument that compute ``text`` (``agg(arg) FILTER (WHERE cond)``).

    Raises ``UnsupportedSqlError`` for an aggregate inside the condition and ``SqlTypeError``
    for a condition that is not BOOLEAN.
    """
    if any(isinstance(n, exp.AggFunc) for n in cond.walk()):
        msg = f"{text}: the FILTER condition may not contain an aggregate; filter on input columns"
        raise UnsupportedSqlError(msg)
    if any(isinstance(n, exp.Window) for n in cond.walk()):
        raise UnsupportedSqlError(f"{text}: the FILTER condition may not contain an OVER window")
    mask_of = _MaskOf(compile_expr(cond, scope))
    if not pa.types.is_boolean(mask_of.cond.type):
        msg = f"{text}: FILTER (WHERE {mask_of.cond.sql}) is {type_name(mask_of.cond.type)}, not BOOLEAN"
        raise SqlTypeError(msg)
    if arg is None:  # COUNT(*): count the rows where the condition holds
        return "count", Expr(mask_of.as_valid_bools, pa.bool_(), f"FILTER({mask_of.cond.sql})")

    def fn(batch: pa.RecordBatch) -> pa.Array:
        return null_where_false(arg.evaluate(batch), mask_of(batch))

    return kind, Expr(fn, arg.type, f"{arg.sql} FILTER({mask_of.cond.sql})")


class _MaskOf:
    """The condition's mask per batch, remembered for the last batch: the aggregates of one
    query are evaluated over the same batch one after another, and several share a condition."""

    def __init__(self, cond: Expr) -> None:
        self.cond = cond
        self._last: tuple[pa.RecordBatch, np.ndarray] | None = None

    def __call__(self, batch: pa.RecordBatch) -> np.ndarray:
        last = self._last  # one read: another thread may replace it, never half of it
        if last is not None and last[0] is batch:
            return last[1]
        v = self.cond.evaluate(batch)
        if v.null_count:  # NULL is not true: the row is filtered out, as in WHERE
            v = pc.fill_null(v, False)
        mask = v.to_numpy(zero_copy_only=False)
        self._last = (batch, mask)
        return mask

    def as_valid_bools(self, batch: pa.RecordBatch) -> pa.Array:
        """True where the condition holds, NULL elsewhere (what COUNT(*) FILTER counts)."""
        mask = self(batch)
        bits = pa.py_buffer(np.packbits(mask, bitorder="little"))  # one bitmap: the values and validity
        return pa.Array.from_buffers(pa.bool_(), len(mask), [bits, bits])


def null_where_false(arr: pa.Array, mask: np.ndarray) -> pa.Array:
    """``arr`` with NULL where ``mask`` is False (and where it was NULL): a new validity bitmap
    over the same value buffers when the type allows, else ``if_else``."""
    if mask.all():
        return arr
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not is_flat_type(arr.type):
        return pc.if_else(pa.array(mask), arr, pa.scalar(None, arr.type))
    keep = mask if arr.null_count == 0 else mask & arr.is_valid().to_numpy(zero_copy_only=False)
    # the bitmap is laid out from bit 0 of the array's own offset: pad the front to match
    bits = np.concatenate([np.zeros(arr.offset, np.bool_), keep]) if arr.offset else keep
    bitmap = pa.py_buffer(np.packbits(bits, bitorder="little"))
    return pa.Array.from_buffers(arr.type, len(arr), [bitmap, *arr.buffers()[1:]], offset=arr.offset)
