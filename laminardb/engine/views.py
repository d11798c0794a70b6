"""Materialized-view storage: the rows a view has emitted, consolidated for queries.

Entry point: ``ViewStore``. An append-only view keeps its batches; a changelog view
(``__weight``) keeps its changes and consolidates them — rows summed by weight, each row
present as many times as its net weight — compacting in place once the log has grown
well past its consolidated size, so memory tracks the view's size, not its history.
``snapshot()``/``restore(blob)`` checkpoint it (whole: views live on the database head, so
their state is not split by vnode).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa

from laminardb.operators.snapshot import StateImage, decode, mismatch
from laminardb.sql.plan import WEIGHT

_COMPACT_FACTOR = 2  # compact when the log is this many times its last consolidated size
_COMPACT_MIN_ROWS = 65_536  # …and at least this long, so small views never pay for it


def consolidate(table: pa.Table) -> pa.Table:
    """Net a Z-set changelog: drop ``__weight``, repeat each row by its positive net weight."""
    if WEIGHT not in table.column_names:
        return table
    cols = [c for c in table.column_names if c != WEIGHT]
    if table.num_rows == 0:
        return table.drop_columns([WEIGHT])
    if not cols:
        total = int(np.asarray(table.column(WEIGHT)).sum())
        return pa.table({}).slice(0, 0) if total <= 0 else pa.table({})
    grouped = table.group_by(cols, use_threads=False).aggregate([(WEIGHT, "sum")])
    w = np.asarray(grouped.column(f"{WEIGHT}_sum").to_numpy(zero_copy_only=False))
    idx = np.repeat(np.arange(len(w)), np.clip(w, 0, None))
    out = grouped.select(cols).take(pa.array(idx, type=pa.int64()))
    return out.cast(table.schema.remove(table.schema.get_field_index(WEIGHT)))


class ViewStore:
    """Rows of one materialized view; ``table()`` is its current content."""

    def __init__(self, schema: pa.Schema, *, changelog: bool) -> None:
        self.schema = schema
        self.changelog = changelog
        self._batches: list[pa.RecordBatch] = []
        self._rows = 0
        self._compacted_rows = 0

    def append(self, batch: pa.RecordBatch) -> None:
        self._batches.append(batch)
        self._rows += batch.num_rows
        if self.changelog and self._rows > max(_COMPACT_MIN_ROWS, _COMPACT_FACTOR * self._compacted_rows):
            self._compact()

    def _compact(self) -> None:
        current = consolidate(pa.Table.from_batches(self._batches, schema=self.schema))
        ones = pa.array(np.ones(current.num_rows, dtype=np.int64))
        current = current.append_column(pa.field(WEIGHT, pa.int64()), ones)
        self._batches = current.combine_chunks().to_batches() or []
        self._rows = self._compacted_rows = current.num_rows

    def snapshot(self) -> StateImage:
        """The stored batches as of now (Arrow batches are immutable: only the list is copied)."""
        batches = list(self._batches)
        meta = {"changelog": self.changelog, "rows": self._rows, "compacted_rows": self._compacted_rows}
        return StateImage("view", meta=meta, split=False,
                          tables={"rows": partial(pa.Table.from_batches, batches, schema=self.schema)})

    def restore(self, blob: bytes) -> None:
        """Replace the content with a snapshot of a view of the same schema."""
        snap = decode(blob, kind="view")
        rows = snap.tables["rows"]
        if rows.schema != self.schema or snap.meta["changelog"] != self.changelog:
            raise mismatch("view", rows.schema.names, self.schema.names)
        self._batches = rows.to_batches()
        self._rows = int(snap.meta["rows"])
        self._compacted_rows = int(snap.meta["compacted_rows"])

    def table(self) -> pa.Table:
        t = pa.Table.from_batches(self._batches, schema=self.schema)
        return consolidate(t) if self.changelog else t
