"""Zero-copy numpy views of Arrow arrays for the numba kernels, and the row encoding of keys.

Entry points: ``string_view`` (offsets, data), ``validity`` and ``encode_rows`` (any key columns
→ one byte string per row, the unit that is hashed and interned). Numeric values as numpy:
``numeric_view`` in ``laminardb/sql/arrays.py``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laminardb.operators import _kernels as K
from laminardb.sql.arrays import numeric_view

_NO_VALID = np.zeros(0, dtype=np.bool_)
_EMPTY_BYTES = np.zeros(1, dtype=np.uint8)


def validity(arr: pa.Array) -> tuple[np.ndarray, bool]:
    """The validity mask as bools and whether it must be read (False when no NULLs)."""
    if arr.null_count == 0:
        return _NO_VALID, False
    return arr.is_valid().to_numpy(zero_copy_only=False), True


def is_float_type(t: pa.DataType) -> bool:
    return pa.types.is_floating(t)


def string_view(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of a string array; offsets are int32 or int64, rebased to 0-based data."""
    if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type):
        odt = np.int64
    elif pa.types.is_string(arr.type) or pa.types.is_binary(arr.type):
        odt = np.int32
    else:
        raise TypeError(f"not a string Arrow type: {arr.type}")
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=odt)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size else _EMPTY_BYTES
    return offsets, data


def is_string_type(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _canonical_floats(values: np.ndarray) -> np.ndarray:
    """-0.0 → 0.0 and one NaN bit pattern, so equal floats encode to equal bytes."""
    v = values + 0.0
    nan = np.isnan(v)
    if nan.any():
        v = np.where(nan, np.nan, v)
    return v.view(np.int64)


def encode_rows(columns: list[pa.Array]) -> tuple[np.ndarray, np.ndarray]:
    """Encode the key columns of each row into bytes: (offsets int64, data uint8).

    A single VARCHAR column is its own encoding (zero copy, NULL as the byte 0xFF, which
    never occurs in UTF-8); anything else is a tagged field per column.
    """
    n = len(columns[0]) if columns else 0
    if len(columns) == 1 and is_string_type(columns[0].type):
        arr = columns[0]
        offsets, data = string_view(arr)
        if arr.null_count == 0:
            if offsets[0] != 0:
                return offsets.astype(np.int64), data
            return offsets, data
        valid, _ = validity(arr)
        lens = np.diff(offsets.astype(np.int64))
        lens[~valid] = 1
        out_off = np.zeros(n + 1, dtype=np.int64)
        out = np.empty(int(lens.sum()) + 1, dtype=np.uint8)
        K.encode_single_string_nulls(offsets, data, valid, out_off, out)
        return out_off, out
    row_len = np.zeros(n, dtype=np.int64)
    for arr in columns:
        if is_string_type(arr.type):
            offsets, _ = string_view(arr)
            row_len += 5 + np.diff(offsets.astype(np.int64))
        else:
            row_len += 9
    out_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(row_len, out=out_off[1:])
    out = np.empty(int(out_off[-1]) + 1, dtype=np.uint8)
    pos = out_off[:-1].copy()
    for arr in columns:
        valid, has_valid = validity(arr)
        if is_string_type(arr.type):
            offsets, data = string_view(arr)
            K.encode_string(out, pos, offsets, data, valid, has_valid)
        elif pa.types.is_null(arr.type):
            K.encode_fixed(out, pos, np.zeros(n, np.int64), np.zeros(n, np.bool_), True)
        else:
            vals = numeric_view(arr)
            if vals.dtype == np.float64:
                vals = _canonical_floats(vals)
            K.encode_fixed(out, pos, vals, valid, has_valid)
    return out_off, out


def hash_rows(columns: list[pa.Array]) -> np.ndarray:
    """The stable 64-bit hash of each row's key (used for vnode = hash % V)."""
    offsets, data = encode_rows(columns)
    out = np.empty(len(offsets) - 1, dtype=np.uint64)
    K.hash_rows(offsets, data, out)
    return out


def as_string_array(arr: pa.Array) -> pa.Array:
    """Strings as plain ``string`` (not large, not dictionary) for the kernels."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    if not pa.types.is_string(arr.type):
        arr = pc.cast(arr, pa.string())
    return arr
