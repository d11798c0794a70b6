"""One row of plain Python values → a one-row RecordBatch, without Arrow's row converter.

Entry points: ``one_row_batch(row, schema)`` (``insert_batch``'s fast path, for ``insert(dict)``) and
``one_value_array`` (``QueryOperator`` packing a SELECT item computed on one row).
Why: ``RecordBatch.from_pylist`` costs ~10 µs for a row of three columns — the largest single
cost of delivering one row. Packing each value into its own buffer (``struct``) and wrapping
those with ``Array.from_buffers`` costs ~1 µs a column. Every buffer is fresh (no ring to
overwrite), so batches held by subscribers stay valid. Returns None for anything this does
not cover (a type without a packer, a value that does not fit, an int into a DOUBLE column):
the caller then takes ``from_pylist``, which gives the same batch or the error.
"""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa

_FORMATS = {pa.int8(): "<b", pa.int16(): "<h", pa.int32(): "<i", pa.int64(): "<q",
            pa.uint8(): "<B", pa.uint16(): "<H", pa.uint32(): "<I", pa.uint64(): "<Q",
            pa.timestamp("ms"): "<q"}
_PYTHON_TYPE = {"str": str, "f64": float, "bool": bool}  # else int
_NULL_BITMAP = pa.py_buffer(b"\x00")
_ZERO_OFFSETS = pa.py_buffer(b"\x00" * 8)
_EMPTY = pa.py_buffer(b"")

Packer = tuple[str, pa.DataType, Any]  # name, type, how: a struct format | "str" | "bool" | "f64"
_PLANS: dict[int, tuple[pa.Schema, list[Packer] | None]] = {}


def packer(t: pa.DataType) -> str | None:
    """How a value of type ``t`` is packed: a struct format, ``f64``, ``str``, ``bool``; or None."""
    if t in _FORMATS:
        return _FORMATS[t]
    return {pa.float64(): "f64", pa.string(): "str", pa.bool_(): "bool"}.get(t)


def _packers(schema: pa.Schema) -> list[Packer] | None:
    """Per column how its value is packed; None when a column type has no packer. Cached by
    the schema object (a source keeps its schema): hashing a schema costs more than packing."""
    hit = _PLANS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    plan: list[Packer] | None = []
    for f in schema:
        how = packer(f.type)
        if how is None:
            plan = None
            break
        plan.append((f.name, f.type, how))
    if len(_PLANS) < 1024:
        _PLANS[id(schema)] = (schema, plan)
    return plan


def one_value_array(value: Any, t: pa.DataType, how: str) -> pa.Array | None:
    """``value`` (plain Python) as a one-element array of ``t``; None when it is not of the
    column's Python type (``how``: from ``packer``) or does not fit."""
    if value is None:
        if how == "str":
            return pa.Array.from_buffers(t, 1, [_NULL_BITMAP, _ZERO_OFFSETS, _EMPTY], null_count=1)
        width = 1 if how == "bool" else t.bit_width // 8
        return pa.Array.from_buffers(t, 1, [_NULL_BITMAP, pa.py_buffer(bytes(width))], null_count=1)
    if type(value) is not _PYTHON_TYPE.get(how, int):  # a value of another kind: the batch path's job
        return None
    if how == "str":
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: Arrow's converter says what is wrong
            return None
        return pa.Array.from_buffers(t, 1, [None, pa.py_buffer(struct.pack("<ii", 0, len(data))),
                                            pa.py_buffer(data)], null_count=0)
    if how == "f64":  # (not an int: Arrow refuses inexact ones into DOUBLE, struct would round)
        data = struct.pack("<d", value)
    elif how == "bool":
        data = b"\x01" if value else b"\x00"
    else:
        try:
            data = struct.pack(how, value)
        except struct.error:  # out of the column's range: Arrow's converter raises the error
            return None
    return pa.Array.from_buffers(t, 1, [None, pa.py_buffer(data)], null_count=0)


def one_row_batch(row: dict, schema: pa.Schema) -> pa.RecordBatch | None:
    """``row`` (its values already checked to be of their columns' Python types) as a batch."""
    plan = _packers(schema)
    if plan is None:
        return None
    cols = []
    for name, t, how in plan:
        arr = one_value_array(row[name], t, how)
        if arr is None:
            return None
        cols.append(arr)
    return pa.RecordBatch.from_arrays(cols, schema=schema)
