"""Flink's ``datagen`` connector: a polled source that generates rows (``sql/flink_ddl.py``).

Entry points: ``DatagenSource`` (built by ``flink_tables.source_connectors``, the reactor's
source-connector factory, polled by ``Connection.start()``) and ``DatagenSource.from_spec``; its
options are checked at CREATE TABLE (``sql/table_specs.py``: ``datagen_spec``). The subset of
Flink's options it takes:

* ``'rows-per-second'`` (default 10000): the pace; rows are generated as they fall due;
* ``'number-of-rows'``: the source ends after that many rows (default: unbounded, unless a
  sequence field ends it — the fewest rows of the two);
* per column ``'fields.<col>.kind'`` = ``'random'`` (default) or ``'sequence'``;
  random: ``min``/``max`` (numbers; Flink's defaults: the type's range, DOUBLE/FLOAT 0 … max),
  ``length`` (VARCHAR, default 100, hex characters), ``max-past`` (TIMESTAMP: now minus up to
  that long, default 0 = now), ``null-rate`` (0 … 1); sequence: ``start``/``end`` (integers,
  VARCHAR as the number's text), each row the next value.

Types: TINYINT … BIGINT, FLOAT, DOUBLE, BOOLEAN, VARCHAR, TIMESTAMP(3|6). Random values are
drawn per block of ``_BLOCK`` rows from a generator seeded by (table name, block number), so
the values of row i are the same on every run and after recovery (timestamps aside: they
follow the clock). When a bounded source has generated its last row, its watermark moves to
the end of time, as a bounded Flink source's does: every window over it closes.
"""

from __future__ import annotations

import time
import zlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laminardb.connectors.polled import FROM_DATA
from laminardb.sql.table_specs import DatagenField, DatagenSpec, datagen_spec

__all__ = ["DatagenSource"]

_BLOCK = 8192  # rows drawn per generator seed: large enough to amortize, small enough to slice cheaply
_MAX_BATCH = 65_536  # rows per poll at most, so a fast pace still yields bounded batches
_STATE_VERSION = 1
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def _hex_strings(rng: np.random.Generator, n: int, length: int) -> pa.Array:
    data = _HEX[rng.integers(0, 16, size=n * length, dtype=np.uint8)]
    offsets = np.arange(0, n * length + 1, length, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data.tobytes()))


class DatagenSource:
    """A polled source of generated rows; ``poll(timeout_ms) -> (batch | None, watermark)``."""

    @classmethod
    def from_spec(cls, spec: DatagenSpec, restore_state: dict[str, Any] | None = None) -> DatagenSource:
        """The source of a checked spec (``sql/table_specs.py``)."""
        src = cls.__new__(cls)
        src._start(spec, restore_state)
        return src

    def __init__(self, *, name: str, schema: pa.Schema, options: dict[str, str],
                 restore_state: dict[str, Any] | None = None) -> None:
        self._start(datagen_spec(name, schema, options), restore_state)

    def _start(self, spec: DatagenSpec, restore_state: dict[str, Any] | None) -> None:
        self.name = spec.name
        self.schema = spec.schema
        self.fields, self.rows_per_second, self.total = list(spec.fields), spec.rows_per_second, spec.total
        self._seed = zlib.crc32(spec.name.encode())
        self.emitted = int(restore_state["rows"]) if restore_state else 0
        self._base = self.emitted  # rows already generated when the pace clock started
        self._t0: float | None = None
        self._ended = False
        self._closed = False
        self._cache: tuple[int, list[np.ndarray | pa.Array]] | None = None
        self._from_data = FROM_DATA

    # -- the pace --------------------------------------------------------------------------

    def _due(self, now: float) -> int:
        if self._t0 is None:
            self._t0 = now
        due = self._base + int((now - self._t0) * self.rows_per_second)
        return due if self.total is None else min(due, self.total)

    def poll(self, timeout_ms: int = 100) -> tuple[pa.RecordBatch | None, Any]:
        """The rows due since the last poll (at most ``_MAX_BATCH``); the watermark follows them
        (FROM_DATA), and jumps to the end of time once a bounded source is done."""
        if self._closed:
            return None, self._from_data
        if self.total is not None and self.emitted >= self.total:
            if not self._ended:
                from laminardb.operators.group_aggregate import END_OF_TIME

                self._ended = True
                return None, END_OF_TIME
            time.sleep(timeout_ms / 1000)
            return None, self._from_data
        now = time.monotonic()
        due = self._due(now)
        if due <= self.emitted:  # wait for the next row, at most timeout_ms
            wait = (self.emitted + 1 - self._base) / self.rows_per_second - (now - (self._t0 or now))
            time.sleep(max(0.0, min(wait, timeout_ms / 1000)))
            due = self._due(time.monotonic())
            if due <= self.emitted:
                return None, self._from_data
        n = min(due - self.emitted, _MAX_BATCH)
        batch = self.rows(self.emitted, n)
        self.emitted += n
        return batch, self._from_data

    def lag(self) -> int:
        """Rows due now and not generated yet."""
        if self.total is not None and self.emitted >= self.total:
            return 0
        return max(0, self._due(time.monotonic()) - self.emitted) if self._t0 is not None else 0

    def checkpoint_state(self) -> dict[str, Any]:
        return {"v": _STATE_VERSION, "rows": self.emitted}

    def fetch_failure(self) -> tuple[float, str] | None:
        """Never set: a failing read raises from ``poll`` (``engine.contracts.Source``)."""
        return None

    def close(self) -> None:
        self._closed = True

    # -- the rows --------------------------------------------------------------------------

    def rows(self, start: int, n: int) -> pa.RecordBatch:
        """Rows ``start`` … ``start + n - 1`` (the same values for the same rows, every time)."""
        now_ms = time.time_ns() // 1_000_000
        parts: list[list[pa.Array]] = []
        row = start
        while row < start + n:
            k, off = divmod(row, _BLOCK)
            take = min(_BLOCK - off, start + n - row)
            block = self._block(k)
            parts.append([self._column(f, block[i], k * _BLOCK + off, off, take, now_ms)
                          for i, f in enumerate(self.fields)])
            row += take
        cols = [pa.concat_arrays([p[i] for p in parts]) if len(parts) > 1 else parts[0][i]
                for i in range(len(self.fields))]
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)

    def _block(self, k: int) -> list[Any]:
        if self._cache is not None and self._cache[0] == k:
            return self._cache[1]
        rng = np.random.default_rng([self._seed, k])
        out: list[Any] = []
        for f in self.fields:
            nulls = rng.random(_BLOCK) < f.null_rate if f.null_rate > 0 else None
            t = f.type
            if f.kind == "sequence":
                values: Any = None
            elif pa.types.is_integer(t):
                values = rng.integers(int(f.lo), int(f.hi), size=_BLOCK, endpoint=True, dtype=np.int64)
            elif pa.types.is_floating(t):
                values = rng.uniform(float(f.lo), float(f.hi), size=_BLOCK)
            elif pa.types.is_boolean(t):
                values = rng.random(_BLOCK) < 0.5
            elif pa.types.is_string(t):
                values = _hex_strings(rng, _BLOCK, f.length)
            else:  # TIMESTAMP: how far before now, in ms
                values = rng.integers(0, f.max_past_ms, size=_BLOCK, endpoint=True, dtype=np.int64)
            out.append((values, nulls))
        self._cache = (k, out)
        return out

    @staticmethod
    def _column(f: DatagenField, drawn: Any, first: int, off: int, n: int, now_ms: int) -> pa.Array:
        values, nulls = drawn
        mask = None if nulls is None else nulls[off : off + n]
        t = f.type
        if f.kind == "sequence":
            seq = np.arange(int(f.lo) + first, int(f.lo) + first + n, dtype=np.int64)
            arr = pa.array(seq, type=pa.int64())
            return arr.cast(pa.string()) if pa.types.is_string(t) else arr.cast(t)
        if pa.types.is_string(t):
            arr = values.slice(off, n)
            return arr if mask is None else pc.if_else(pa.array(mask), pa.scalar(None, t), arr)
        if pa.types.is_timestamp(t):
            ticks = {"s": 0.001, "ms": 1, "us": 1000, "ns": 1_000_000}[t.unit]
            ms = now_ms - values[off : off + n]
            return pa.array((ms * ticks).astype(np.int64), type=t, mask=mask)
        return pa.array(values[off : off + n], mask=mask).cast(t)
