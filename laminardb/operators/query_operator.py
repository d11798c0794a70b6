"""Run one planned query over its input: filter → (aggregate) → HAVING → project.

Entry point: ``QueryOperator(plan)``; the operator contract of DESIGN.md:
``process(batch, wm_before) -> (outputs, late_rows)``, ``on_watermark(wm) -> outputs``.
For EMIT CHANGES it turns old/new group values into a Z-set changelog (``__weight``):
a group whose visible row did not change emits nothing; an update is −1 old, +1 new.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laminardb.operators._buffers import numeric_view
from laminardb.operators.group_aggregate import NO_WATERMARK, GroupAggregate, GroupRows
from laminardb.operators.session import SessionAggregate
from laminardb.sql.expressions import evaluate_mask
from laminardb.sql.planner import WEIGHT, QueryPlan


def output_schema(plan: QueryPlan) -> pa.Schema:
    """The schema subscribers see: the SELECT list, plus ``__weight`` for changelogs."""
    if plan.changelog:
        return plan.output_schema.append(pa.field(WEIGHT, pa.int64()))
    return plan.output_schema


class QueryOperator:
    """Stateful executor of one ``QueryPlan``."""

    def __init__(self, plan: QueryPlan) -> None:
        self.plan = plan
        self.schema = output_schema(plan)
        self.late_dropped = 0
        agg = plan.aggregate
        self.agg: GroupAggregate | SessionAggregate | None = None
        if agg is not None:
            key_types = [k.type for k in agg.keys]
            if agg.window is not None and agg.window.kind == "session":
                self.agg = SessionAggregate(key_types=key_types, specs=agg.specs, gap=agg.window.gap,
                                            emit=plan.emit, time_type=agg.time_type)
            else:
                self.agg = GroupAggregate(key_types=key_types, specs=agg.specs, window=agg.window,
                                          emit=plan.emit, time_type=agg.time_type)

    # ------------------------------------------------------------------ contract
    def process(self, batch: pa.RecordBatch, wm_before: int = NO_WATERMARK) -> tuple[list[pa.RecordBatch], pa.RecordBatch | None]:
        plan = self.plan
        if plan.where is not None and batch.num_rows:
            batch = batch.filter(pa.array(evaluate_mask(plan.where, batch)))
        if batch.num_rows == 0:
            return [], None
        weights = None
        if plan.input_changelog:
            weights = numeric_view(batch.column(WEIGHT))
        if self.agg is None:
            out = self._project(batch)
            if plan.input_changelog:
                out = _with_weight(out, batch.column(WEIGHT))
            return [out], None
        agg = plan.aggregate
        keys = [k.evaluate(batch) for k in agg.keys]
        args = [a.evaluate(batch) if a is not None else None for a in agg.args]
        ts = None
        if agg.time_index is not None:
            ts = numeric_view(batch.column(agg.time_index))
        rows, late = self.agg.process(batch.num_rows, keys, args, ts, weights, wm_before)
        late_rows = None
        if late is not None:
            late_rows = batch.filter(pa.array(late))
            self.late_dropped += late_rows.num_rows
        return self._finish(rows), late_rows

    def on_watermark(self, wm: int) -> list[pa.RecordBatch]:
        if self.agg is None:
            return []
        return self._finish(self.agg.on_watermark(wm))

    def current_rows(self) -> pa.RecordBatch:
        """The SELECT rows of every group now in state (a view's current value)."""
        assert self.agg is not None
        g = self.agg.current()
        gb = self._with_wt(g)
        if self.plan.having is not None and gb.num_rows:
            gb = gb.filter(pa.array(evaluate_mask(self.plan.having, gb)))
        return self._project(gb)

    # ------------------------------------------------------------------ helpers
    def _project(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        cols = [p.evaluate(batch) for p in self.plan.projections]
        cols = [c.cast(f.type) if c.type != f.type else c for c, f in zip(cols, self.plan.output_schema, strict=True)]
        return pa.RecordBatch.from_arrays(cols, schema=self.plan.output_schema)

    def _with_wt(self, g: pa.RecordBatch) -> pa.RecordBatch:
        if self.plan.aggregate.window is None:
            return g
        we = g.column(g.schema.get_field_index("__we"))
        wt = pa.array(numeric_view(we) - 1, type=pa.int64()).cast(we.type) if len(we) else we
        return pa.RecordBatch.from_arrays(list(g.columns) + [wt], schema=g.schema.append(pa.field("__wt", we.type)))

    def _visible(self, g: pa.RecordBatch, valid: np.ndarray) -> tuple[pa.RecordBatch, np.ndarray]:
        g = self._with_wt(g)
        ok = valid.copy()
        if self.plan.having is not None and g.num_rows:
            ok &= evaluate_mask(self.plan.having, g)
        return self._project(g), ok

    def _finish(self, rows: GroupRows | None) -> list[pa.RecordBatch]:
        if rows is None or rows.new.num_rows == 0:
            return []
        new, new_ok = self._visible(rows.new, rows.new_valid)
        if rows.old is None:
            out = new.filter(pa.array(new_ok)) if not new_ok.all() else new
            if self.plan.changelog:
                out = _with_weight(out, pa.array(np.ones(out.num_rows, dtype=np.int64)))
            return [out] if out.num_rows else []
        old, old_ok = self._visible(rows.old, rows.old_valid)
        same = old_ok & new_ok & _rows_equal(old, new)
        retract = old_ok & ~same
        insert = new_ok & ~same
        parts = []
        if retract.any():
            r = old.filter(pa.array(retract))
            parts.append(_with_weight(r, pa.array(np.full(r.num_rows, -1, dtype=np.int64))))
        if insert.any():
            i = new.filter(pa.array(insert))
            parts.append(_with_weight(i, pa.array(np.ones(i.num_rows, dtype=np.int64))))
        if not parts:
            return []
        if len(parts) == 1:
            return parts
        return [pa.Table.from_batches(parts).combine_chunks().to_batches()[0]]


def _with_weight(batch: pa.RecordBatch, weight: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        list(batch.columns) + [weight], schema=batch.schema.append(pa.field(WEIGHT, pa.int64()))
    )


def _rows_equal(a: pa.RecordBatch, b: pa.RecordBatch) -> np.ndarray:
    """Row-wise equality of two aligned batches, NULL equal to NULL."""
    eq = np.ones(a.num_rows, dtype=np.bool_)
    for x, y in zip(a.columns, b.columns, strict=True):
        e = pc.fill_null(pc.equal(x, y), False)
        both_null = pc.and_(pc.is_null(x), pc.is_null(y))
        eq &= pc.or_(e, both_null).to_numpy(zero_copy_only=False)
    return eq
