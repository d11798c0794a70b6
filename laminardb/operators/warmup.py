"""Compile (or load from numba's on-disk cache) every kernel before the first real query.

Entry point: ``warm_kernels()``, called once per process by ``laminardb.open()``. With
``cache=True`` a fresh install compiles once (a few seconds) and later processes load
machine code from ``__pycache__`` in milliseconds, so no user query waits on numba.
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa

from laminardb.operators.group_aggregate import NO_WATERMARK, GroupAggregate
from laminardb.operators.session import SessionAggregate
from laminardb.sql._string_kernels import warm as warm_string_kernels
from laminardb.sql.plan import AggSpec, WindowSpec, result_type

_done = False
_lock = threading.Lock()
_KINDS = ("count_star", "count", "count_distinct", "sum", "avg", "min", "max", "first_value", "last_value")


def _specs(arg_type: pa.DataType) -> list[AggSpec]:
    return [AggSpec(k, None if k == "count_star" else arg_type,
                    result_type(k, None if k == "count_star" else arg_type)) for k in _KINDS
            if not (k in ("sum", "avg") and pa.types.is_string(arg_type))]


def warm_kernels() -> None:
    global _done
    with _lock:
        if _done:
            return
        ts = np.array([5, 1, 1200, 30], dtype=np.int64)
        keys = [pa.array(["a", None, "b", "a"]), pa.array([1, 2, None, 1], type=pa.int64())]
        for arg in (pa.array([1.5, None, 2.0, 3.0]), pa.array([1, 2, None, 4], type=pa.int64()),
                    pa.array(["x", "y", None, "z"])):
            specs = _specs(arg.type)
            args = [None if s.kind == "count_star" else arg for s in specs]
            for window in (None, WindowSpec("tumble", size=1000), WindowSpec("hop", size=1000, slide=500)):
                for emit in ("changes", "close"):
                    for k in (keys[:1], keys):
                        g = GroupAggregate(key_types=[a.type for a in k], specs=specs, window=window, emit=emit)
                        g.process(4, k, args, ts, None, NO_WATERMARK)
                        g.on_watermark(2000)
                        g.process(4, k, args, ts, np.ones(4, np.int64), 2000)
            s = SessionAggregate(key_types=[keys[0].type], specs=specs, gap=100, emit="changes", time_type=pa.int64())
            s.process(4, keys[:1], args, ts, None, NO_WATERMARK)
            s.process(4, keys[:1], args, ts + 50, None, NO_WATERMARK)
            s.on_watermark(5000)
        warm_string_kernels()
        _done = True
