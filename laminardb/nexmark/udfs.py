"""The Python UDFs Nexmark's queries call: q14's ``count_char``.

Entry point: :data:`UDFS` (name → (function, return type)), the form of
``laminardb.open(config={"udfs": UDFS})``; the runner and ``laminardb nexmark`` open their
database with it. Each function is defined at module level, so a cluster imports it by its
``"module:qualname"`` reference (``laminardb/sql/udf.py``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["UDFS", "count_char"]


def count_char(s: pa.Array, character: pa.Array) -> pa.Array:
    """How often the first character of ``character`` occurs in ``s``; 0 for NULL ``s``, as
    Nexmark's ``CountChar`` (``nexmark-flink/…/udf/CountChar.java``). Vectorized: one Arrow
    kernel per distinct character (a literal: one)."""
    s = s.cast(pa.large_string()) if pa.types.is_large_string(s.type) else s.cast(pa.string())
    chars = character.cast(pa.string())
    distinct = pc.unique(chars).to_pylist()
    out = None
    for ch in distinct:
        if not ch:  # NULL or '': nothing to count (Flink: charAt(0) fails; here 0)
            continue
        counted = pc.count_substring(s, ch[0])
        if len(distinct) == 1:
            out = counted
            break
        hit = pc.fill_null(pc.equal(chars, ch), False)
        base = out if out is not None else pa.nulls(len(s), counted.type)
        out = pc.if_else(hit, counted, base)
    if out is None:
        return pa.array(np.zeros(len(s), np.int64))
    return pc.fill_null(pc.cast(out, pa.int64()), 0)


# name → (function, SQL return type): laminardb.open(config={"udfs": UDFS})
UDFS: dict[str, tuple] = {"count_char": (count_char, "BIGINT")}
