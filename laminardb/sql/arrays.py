"""Arrow arrays as numpy, and which types an array holds flat: array helpers every layer shares.

Entry points: ``numeric_view`` (values as int64 or float64, zero-copy where the buffer allows),
``fixed_buffer`` (the value buffer of a fixed-width array as numpy) and ``is_flat_type``. They
live at the bottom (``sql/``) because the planner's stateless window TVF (``_window_tvf.py``),
the ``FILTER`` clause (``_agg_filter.py``), the operators and the engine all read arrays so.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["fixed_buffer", "is_flat_type", "numeric_view"]


def numeric_view(arr: pa.Array) -> np.ndarray:
    """Values as int64 (ints, bools, timestamps) or float64; NULL slots hold arbitrary values."""
    t = arr.type
    if pa.types.is_boolean(t):
        return arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.int64)
    if pa.types.is_floating(t):
        if t != pa.float64():
            arr = arr.cast(pa.float64())
        return fixed_buffer(arr, np.float64)
    if pa.types.is_timestamp(t) or pa.types.is_date64(t):
        return fixed_buffer(arr, np.int64)
    if pa.types.is_integer(t):
        if t != pa.int64():
            arr = arr.cast(pa.int64())
        return fixed_buffer(arr, np.int64)
    raise TypeError(f"not a numeric Arrow type: {t}")


def fixed_buffer(arr: pa.Array, dtype) -> np.ndarray:
    """The value buffer of a fixed-width array as ``dtype`` (zeros when it has none)."""
    buf = arr.buffers()[1]
    if buf is None:
        return np.zeros(len(arr), dtype=dtype)
    return np.frombuffer(buf, dtype=dtype)[arr.offset : arr.offset + len(arr)]


_FLAT_TYPES = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_timestamp,
               pa.types.is_date, pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
               pa.types.is_large_binary)


def is_flat_type(t: pa.DataType) -> bool:
    """Whether an array of ``t`` is its validity bitmap then buffers holding the values themselves
    (no child arrays, no dictionary): a new bitmap over the same buffers is the same values with
    other NULLs, and arrays with the same value buffers hold the same values wherever valid."""
    return any(is_t(t) for is_t in _FLAT_TYPES)
