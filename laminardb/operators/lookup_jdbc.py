"""The lookup join against a PostgreSQL table (``plan.ExternalLookupJoin``): Flink's
``JOIN customers FOR SYSTEM_TIME AS OF o.proc_time AS c ON o.cid = c.id`` over a ``jdbc`` /
``postgres`` table.

Entry point: ``ExternalLookupJoinOperator(node)``; ``process(side, batch, wm_before)`` (only
side 0, the left input, exists), ``on_watermark(wm)``, ``snapshot()`` / ``restore(blob)``,
``lookup_metrics()``.

Per left batch: the distinct keys are answered from the cache where it holds them unexpired;
ALL the misses are fetched in ONE query (``connectors/postgres_lookup.py``), then the batch is
joined with the rows found column-wise (``pyarrow.Table.join``; ``table_filter`` on the table's
rows first, ``residual`` on the pairs after; a LEFT join pads rows with no surviving pair). The
per-key work is one dict lookup per *distinct* key, never per row.

Cache (Flink's): ``lookup.cache.max-rows`` keys at most, least recently used evicted first,
each for ``lookup.cache.ttl`` after it was fetched; keys PostgreSQL does not have are cached
too (``lookup.cache.caching-missing-key``). It is not state: a restart starts cold.

PostgreSQL unreachable: the fetch raises ``LookupTableUnavailableError`` and the batch's rows
are kept (``pending``); the next batch (or watermark) retries them first, in one query with its
own, so no input row is lost or reordered. While rows are held ``on_watermark`` retries and
raises too: the watermark stops here (the tree's nodes above, and the reactor's downstream
queries, do not see it), so no event-time window after the join closes without them. The
snapshot holds those pending rows only (empty while the server answers), so a checkpoint taken
during an outage keeps them too.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laminardb.operators._buffers import hash_rows
from laminardb.operators.snapshot import DEFAULT_VNODES, StateImage, checked_snapshot
from laminardb.sql.expressions import evaluate_mask
from laminardb.sql.plan import ExternalLookupJoin
from laminardb.sql.watermarks import NO_WATERMARK

_ROW = "__lookup_row"  # a left row's position in its batch, through the join
_COMPACT_MIN = 4096  # compact the cached rows once this many are dead and they outnumber the live ones


class ExternalLookupJoinOperator:
    """Stateless but for the cache and rows held during an outage; see the module docstring."""

    incremental = False
    changelog = False

    def __init__(self, node: ExternalLookupJoin, *, source=None) -> None:
        self.node = node
        self.spec = node.table
        self.schema = node.schema
        self.late_dropped = 0
        nl = len(node.schema) - len(node.right_schema)
        self.left_schema = pa.schema(list(node.schema)[:nl])
        self.source = source if source is not None else self.spec.open()  # connectors/postgres_lookup.py
        self.key_names = [f"__k{i}" for i in range(len(node.left_keys))]
        self.keys = (node.left_keys, [])  # per port (the Delta mode partitions a join's input by them)
        self.pending: list[pa.RecordBatch] = []
        # the cache: key tuple → (expires at, ms of time.monotonic; rows of it in ``_rows``)
        self._index: OrderedDict[tuple, tuple[float, tuple[int, ...]]] = OrderedDict()
        self._rows = self.spec.schema.empty_table()
        self._live_rows = 0
        self.hits = self.misses = 0

    # ------------------------------------------------------------------ contract
    def process(self, side: int, batch: pa.RecordBatch, wm_before: int = NO_WATERMARK) -> list[pa.RecordBatch]:
        if batch.num_rows:
            self.pending.append(batch)
        return self._drain()

    def on_watermark(self, wm: int) -> list[pa.RecordBatch]:
        return self._drain()  # an outage's rows are retried on every chance, watermarks too

    def _drain(self) -> list[pa.RecordBatch]:
        if not self.pending:
            return []
        rows = self.pending[0] if len(self.pending) == 1 else pa.Table.from_batches(
            self.pending).combine_chunks().to_batches()[0]
        out = self._join(rows)  # raises LookupTableUnavailableError: the rows stay pending
        self.pending.clear()
        return out

    def state_rows(self) -> tuple[int, int]:
        """(rows held during an outage, 0): the cache is no state (``lookup_metrics``: cached_keys)."""
        return sum(b.num_rows for b in self.pending), 0

    def state_bytes(self) -> int:
        """Memory held: the held rows and the cached table rows."""
        return sum(b.nbytes for b in self.pending) + self._rows.nbytes

    def lookup_metrics(self) -> dict[str, int]:
        s = self.source
        return {"cache_hits": self.hits, "cache_misses": self.misses, "rows_fetched": s.rows_fetched,
                "queries": s.queries, "errors": s.errors, "cached_keys": len(self._index),
                "pending_rows": sum(b.num_rows for b in self.pending)}

    def close(self) -> None:
        self.source.close()

    # ------------------------------------------------------------------ the join
    def _join(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        node = self.node
        keys = [k.evaluate(batch) for k in node.left_keys]
        valid = None
        for k in keys:
            if k.null_count:
                v = k.is_valid()
                valid = v if valid is None else pc.and_(valid, v)
        right = self._right_rows(keys if valid is None else [k.filter(valid) for k in keys])
        left = pa.table([*keys, *batch.columns, pa.array(np.arange(batch.num_rows))],
                        names=[*self.key_names, *self.left_schema.names, _ROW])
        joined = left.join(right, self.key_names, join_type="inner", use_threads=False)
        joined = joined.sort_by(_ROW).drop_columns(self.key_names)
        if node.residual is not None and joined.num_rows:
            pairs = pa.RecordBatch.from_arrays([joined.column(n).combine_chunks() for n in node.schema.names],
                                               schema=node.schema)
            joined = joined.filter(pa.array(evaluate_mask(node.residual, pairs)))
        if node.kind == "left":
            matched = np.zeros(batch.num_rows, np.bool_)
            matched[joined.column(_ROW).to_numpy()] = True
            if not matched.all():
                rows = np.flatnonzero(~matched)
                pad = left.drop_columns(self.key_names).take(pa.array(rows))
                for f in node.right_schema:
                    pad = pad.append_column(f, pa.nulls(len(rows), f.type))
                joined = pa.concat_tables([joined.select(pad.column_names), pad]).sort_by(_ROW)
        if joined.num_rows == 0:
            return []
        cols = [joined.column(n).combine_chunks().cast(f.type) for n, f in zip(node.schema.names, node.schema,
                                                                                  strict=True)]
        return [pa.RecordBatch.from_arrays(cols, schema=node.schema)]

    def _right_rows(self, keys: list[pa.Array]) -> pa.Table:
        """The table's rows for the distinct ``keys`` (no NULLs): cache hits and one fetch for the
        rest; under the joined names, with the key columns (cast to the key types) as ``__k…``."""
        names = self.key_names
        distinct = pa.table(keys, names=names).group_by(names, use_threads=False).aggregate([])
        tuples = list(zip(*(distinct.column(n).to_pylist() for n in names), strict=True))
        cache = self.spec.cache_max_rows > 0
        if cache:
            self._maybe_compact()  # before row positions are read from the cache
        now = time.monotonic() * 1000.0
        hit_rows: list[int] = []
        missing: list[int] = []
        for i, key in enumerate(tuples):
            entry = self._index.get(key) if cache else None
            if entry is not None and entry[0] > now:
                self._index.move_to_end(key)
                hit_rows.extend(entry[1])
            else:
                missing.append(i)
        self.hits += len(tuples) - len(missing)
        self.misses += len(missing)
        fetched = self.spec.schema.empty_table()
        if missing:
            ask = distinct.take(pa.array(missing, pa.int64()))
            fetched = self.source.fetch(self.node.right_cols, [ask.column(n).combine_chunks() for n in names])
        if cache:
            rows = self._remember(fetched, [tuples[i] for i in missing], now)
            right = self._rows.take(pa.array(hit_rows + rows, pa.int64()))
        else:
            right = fetched
        return self._as_joined(right)

    def _fetched_keys(self, rows: pa.Table) -> list[tuple]:
        cols = [rows.column(c).cast(t) for c, t in zip(self.node.right_cols, self.node.key_types, strict=True)]
        return list(zip(*(c.to_pylist() for c in cols), strict=True))

    def _remember(self, fetched: pa.Table, asked: list[tuple], now: float) -> list[int]:
        """Cache the fetched rows under their keys (and the asked keys none came for); returns
        their positions in ``_rows``."""
        base = self._rows.num_rows
        self._rows = pa.concat_tables([self._rows, fetched]) if fetched.num_rows else self._rows
        by_key: dict[tuple, list[int]] = {}
        for j, key in enumerate(self._fetched_keys(fetched)):
            by_key.setdefault(key, []).append(base + j)
        expires = now + self.spec.cache_ttl_ms
        for key in asked:
            rows = tuple(by_key.get(key, ()))
            old = self._index.pop(key, None)
            if old is not None:
                self._live_rows -= len(old[1])
            if rows or self.spec.cache_missing:
                self._index[key] = (expires, rows)
                self._live_rows += len(rows)
        while len(self._index) > self.spec.cache_max_rows:
            _, (_, rows) = self._index.popitem(last=False)
            self._live_rows -= len(rows)
        return [r for rows in by_key.values() for r in rows]

    def _maybe_compact(self) -> None:
        """Drop the rows no cached key points at (replaced, expired and refetched, evicted)."""
        dead = self._rows.num_rows - self._live_rows
        if dead < _COMPACT_MIN or dead <= self._live_rows:
            return
        live = sorted(r for _, rows in self._index.values() for r in rows)
        moved = np.full(self._rows.num_rows, -1, np.int64)
        moved[live] = np.arange(len(live))
        self._rows = self._rows.take(pa.array(live, pa.int64())).combine_chunks()
        for key, (exp_at, rows) in self._index.items():
            self._index[key] = (exp_at, tuple(int(moved[r]) for r in rows))

    def _as_joined(self, rows: pa.Table) -> pa.Table:
        """Table rows → the join's right input: filtered, key columns first, joined names."""
        node = self.node
        rows = pa.table(rows.columns, schema=node.right_schema) if rows.num_rows else node.right_schema.empty_table()
        if node.table_filter is not None and rows.num_rows:
            batch = pa.RecordBatch.from_arrays([c.combine_chunks() for c in rows.columns], schema=node.right_schema)
            rows = rows.filter(pa.array(evaluate_mask(node.table_filter, batch)))
        internal = dict(zip([f.name for f in self.spec.schema], node.right_schema.names, strict=True))
        keys = [rows.column(internal[c]).cast(t) for c, t in zip(node.right_cols, node.key_types, strict=True)]
        return pa.table([*keys, *rows.columns], names=[*self.key_names, *node.right_schema.names])

    # ------------------------------------------------------------------ snapshot
    @property
    def fingerprint(self) -> dict:
        return {"lookup_table": self.spec.name, "keys": [str(t) for t in self.node.key_types],
                "left": [str(f.type) for f in self.left_schema]}

    def snapshot(self) -> StateImage:
        """The rows held during an outage (the cache is not state)."""
        rows = pa.Table.from_batches(self.pending, schema=self.left_schema) if self.pending else (
            self.left_schema.empty_table())
        # each row under its key's vnode, as a join's stored rows: blobs of disjoint vnode subsets add up
        vnode = np.zeros(0, np.int32)
        if rows.num_rows:
            batch = rows.combine_chunks().to_batches()[0]
            keys = [k.evaluate(batch) for k in self.node.left_keys]
            vnode = (hash_rows(keys) % np.uint64(DEFAULT_VNODES)).astype(np.int32)
        rows = rows.append_column("__vnode", pa.array(vnode, pa.int32()))
        return StateImage("lookup_jdbc", meta={"plan": self.fingerprint}, tables={"pending": rows})

    def restore(self, blob: bytes, *, vnodes=None) -> None:
        snap = checked_snapshot(blob, "lookup_jdbc", self.fingerprint, vnodes)
        rows = snap.tables["pending"].drop_columns(["__vnode"])
        if rows.num_rows:
            self.pending.append(pa.RecordBatch.from_arrays([c.combine_chunks() for c in rows.columns],
                                                           schema=self.left_schema))
