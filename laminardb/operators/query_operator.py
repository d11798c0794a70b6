"""Run one planned query over its input: filter → (aggregate) → HAVING → project.

Entry point: ``QueryOperator(plan)``; the operator contract of DESIGN.md:
``process(batch, wm_before) -> (outputs, late_rows)``, ``on_watermark(wm) -> outputs``,
``snapshot() -> StateImage`` (its ``encode(vnodes)`` gives the bytes) and
``restore(blob, *, vnodes=None)``; see ``operators/snapshot.py`` for the format.
For EMIT CHANGES it turns old/new group values into a Z-set changelog (``__weight``):
a group whose visible row did not change emits nothing; an update is −1 old, +1 new.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laminardb.operators import _agg_state
from laminardb.operators.group_aggregate import NO_WATERMARK, GroupAggregate, GroupRows
from laminardb.operators.session import SessionAggregate
from laminardb.operators.snapshot import StateImage
from laminardb.sql.arrays import numeric_view
from laminardb.sql.expressions import evaluate_mask
from laminardb.sql.one_row import one_value_array, packer
from laminardb.sql.plan import WEIGHT, QueryPlan


def output_schema(plan: QueryPlan) -> pa.Schema:
    """The schema subscribers see: the SELECT list, plus ``__weight`` for changelogs."""
    if plan.changelog:
        return plan.output_schema.append(pa.field(WEIGHT, pa.int64()))
    return plan.output_schema


class QueryOperator:
    """Stateful executor of one ``QueryPlan`` (an ``engine.contracts.Operator``)."""

    incremental = False  # checkpoints take the whole state (no snapshot_delta)

    accepts_next_watermark = False  # process() takes the watermark before the batch only

    @property
    def changelog(self) -> bool:
        """Whether the output is a changelog (a ``__weight`` column: +1 insert / -1 retract)."""
        return self.plan.changelog

    def __init__(self, plan: QueryPlan) -> None:
        self.plan = plan
        self.schema = output_schema(plan)
        self.late_dropped = 0
        self._row_projections = _row_projections(plan)
        agg = plan.aggregate
        self.agg: GroupAggregate | SessionAggregate | None = None
        # with COUNT(*) over an append-only input a group that got rows always changed,
        # so the old/new comparison can be skipped (it dominates one-row updates)
        counted = [f'"__a{j}"' for j, s in enumerate(agg.specs) if s.kind == "count_star"] if agg else []
        self._always_changes = bool(
            counted and not plan.input_changelog and plan.having is None
            and any(c in p.sql for p in plan.projections for c in counted)
        )
        if agg is not None:
            key_types = [k.type for k in agg.keys]
            if agg.window is not None and agg.window.kind == "session":
                self.agg = SessionAggregate(key_types=key_types, specs=agg.specs, gap=agg.window.gap,
                                            emit=plan.emit, time_type=agg.time_type, lateness=agg.lateness)
            else:
                self.agg = GroupAggregate(key_types=key_types, specs=agg.specs, window=agg.window,
                                          emit=plan.emit, time_type=agg.time_type, lateness=agg.lateness)

    # ------------------------------------------------------------------ contract
    def process(self, batch: pa.RecordBatch, wm_before: int = NO_WATERMARK, *,
                skip_where: bool = False) -> tuple[list[pa.RecordBatch], pa.RecordBatch | None]:
        """Run one input batch; ``skip_where`` when the caller already applied WHERE (routing)."""
        plan = self.plan
        if plan.where is not None and batch.num_rows and not skip_where:
            if batch.num_rows == 1 and plan.where.row is not None:  # one row: on its Python values
                if plan.where.row.fn(batch) is not True:
                    return [], None
            else:
                mask = evaluate_mask(plan.where, batch)
                if not mask.all():
                    batch = batch.filter(pa.array(mask))
        if batch.num_rows == 0:
            return [], None
        weights = None
        if plan.input_changelog:
            weights = numeric_view(batch.column(WEIGHT))
        if self.agg is None:
            out = self._project(batch)
            if plan.input_changelog:
                out = pa.RecordBatch.from_arrays(list(out.columns) + [batch.column(WEIGHT)], schema=self.schema)
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

    def snapshot(self) -> StateImage:
        """A consistent copy of the state, taken under the engine lock; ``encode(vnodes)`` it
        later on any thread. ``late_dropped`` rides as a counter: only in a blob holding vnode 0."""
        meta: dict = {"plan": None if self.agg is None else self.agg.fingerprint}
        tables: dict = {}
        if self.agg is not None:
            tables, meta["agg"] = self.agg.capture()
        return StateImage("query", meta=meta, counters={"late_dropped": self.late_dropped}, tables=tables)

    def restore(self, blob: bytes, *, vnodes=None) -> None:
        """Load a snapshot of an operator of the same plan into this fresh one. Restoring
        several blobs of disjoint vnode subsets adds them up (counters included: they come
        with the blob holding vnode 0); ``vnodes`` restores only those of ``blob``."""
        expected = None if self.agg is None else self.agg.fingerprint
        snap = _agg_state.restore("query", self.agg, blob, expected, vnodes)
        if snap.counters is not None:
            self.late_dropped += int(snap.counters["late_dropped"])

    def current_rows(self) -> pa.RecordBatch:
        """The SELECT rows of every group now in state (a view's current value)."""
        assert self.agg is not None
        return self.rows_of(self.agg.current())

    def rows_of(self, g: pa.RecordBatch) -> pa.RecordBatch:
        """HAVING and the SELECT list over group rows (``__ws``/``__we``/``__k*``/``__a*``)."""
        gb = self._with_wt(g)
        if self.plan.having is not None and gb.num_rows:
            gb = gb.filter(pa.array(evaluate_mask(self.plan.having, gb)))
        return self._project(gb)

    # ------------------------------------------------------------------ helpers
    def _project(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if batch.num_rows == 1 and self._row_projections is not None:
            one = self._project_row(batch)
            if one is not None:
                return one
        cols = [p.evaluate(batch) for p in self.plan.projections]
        try:  # types match the plan on every batch but odd ones (an all-NULL literal column)
            return pa.RecordBatch.from_arrays(cols, schema=self.plan.output_schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            cols = [c.cast(f.type) if c.type != f.type else c
                    for c, f in zip(cols, self.plan.output_schema, strict=True)]
            return pa.RecordBatch.from_arrays(cols, schema=self.plan.output_schema)

    def _project_row(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        """The SELECT list over a one-row batch (see ``_row_projections``); None when a value is
        not of its column's kind: the batch path then runs."""
        cols = []
        for step in self._row_projections:
            if step[0] == "column":
                cols.append(batch.column(step[1]))
            elif step[0] == "pack":
                arr = one_value_array(step[1](batch), step[2], step[3])
                if arr is None:
                    return None
                cols.append(arr)
            else:
                cols.append(step[1].evaluate(batch))
        try:
            return pa.RecordBatch.from_arrays(cols, schema=self.plan.output_schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            return None

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
        if rows is None or rows.n_rows == 0:
            return []
        if rows.old is None and rows.pair is None:
            new, new_ok = self._visible(rows.new, rows.new_valid)
            out = new.filter(pa.array(new_ok)) if not new_ok.all() else new
            if self.plan.changelog:
                out = self._with_weight(out, np.ones(out.num_rows, dtype=np.int64))
            return [out] if out.num_rows else []
        # old and new values of the same groups: one HAVING + projection over both halves
        n = len(rows.old_valid)
        both = rows.pair if rows.pair is not None else pa.concat_batches([rows.old, rows.new])
        proj, ok = self._visible(both, np.concatenate([rows.old_valid, rows.new_valid]))
        if n == 1 and self._always_changes:
            return self._one_group_change(proj, bool(ok[0]), bool(ok[1]))
        old_ok, new_ok = ok[:n], ok[n:]
        if self._always_changes:
            same = np.zeros(n, dtype=np.bool_)
        else:
            # keys are identical by construction; equal aggregates (and bounds) mean equal rows
            changing = [i for i, f in enumerate(both.schema) if not f.name.startswith("__k")]
            part = both.select(changing)
            same = old_ok & new_ok & _rows_equal(part.slice(0, n), part.slice(n))
        retract = np.flatnonzero(old_ok & ~same)
        insert = np.flatnonzero(new_ok & ~same)
        if len(retract) == 0 and len(insert) == 0:
            return []
        idx = np.concatenate([retract, insert + n])
        weights = np.concatenate([np.full(len(retract), -1, np.int64), np.ones(len(insert), np.int64)])
        out = proj if (len(idx) == proj.num_rows and (idx == np.arange(len(idx))).all()) else proj.take(pa.array(idx))
        return [self._with_weight(out, weights)]

    def _one_group_change(self, pair: pa.RecordBatch, old_ok: bool, new_ok: bool) -> list[pa.RecordBatch]:
        """One group that surely changed (``_always_changes``): −old +new, as the general case
        below gives it, without its index arithmetic (most of a one-row update's output cost)."""
        if old_ok and new_ok:
            return [self._with_weight(pair, _RETRACT_INSERT)]
        if new_ok:
            return [self._with_weight(pair.slice(1, 1), _INSERT)]
        if old_ok:
            return [self._with_weight(pair.slice(0, 1), _RETRACT)]
        return []

    def _with_weight(self, batch: pa.RecordBatch, weights: np.ndarray) -> pa.RecordBatch:
        cols = [batch.column(i) for i in range(batch.num_columns)]
        return pa.RecordBatch.from_arrays(cols + [_weight_array(weights)], schema=self.schema)


_RETRACT_INSERT, _INSERT, _RETRACT = np.array([-1, 1], np.int64), np.array([1], np.int64), np.array([-1], np.int64)
_SMALL_WEIGHTS: dict[bytes, pa.Array] = {}  # the few weight columns of one-group changes: −1 +1, +1


def _weight_array(weights: np.ndarray) -> pa.Array:
    """``weights`` as an Arrow int64 array; the short ones of one-row updates are shared
    (Arrow arrays are immutable), which saves a conversion per emitted change."""
    if len(weights) > 4:
        return pa.array(weights, type=pa.int64())
    key = weights.tobytes()
    hit = _SMALL_WEIGHTS.get(key)
    if hit is None:
        hit = _SMALL_WEIGHTS.setdefault(key, pa.array(weights, type=pa.int64()))
    return hit


def _row_projections(plan: QueryPlan) -> list[tuple] | None:
    """How each SELECT item is made over a one-row batch: ("column", index) — taken as is;
    ("pack", row fn, type, packer) — computed on the row's Python values; ("batch", expr) —
    evaluated with Arrow. None when every item is "batch" (nothing to gain)."""
    out = []
    for p, field in zip(plan.projections, plan.output_schema, strict=True):
        row, how = p.row, packer(field.type)
        if row is not None and row.column is not None and field.type == p.type:
            out.append(("column", row.column))
        elif row is not None and row.column is None and how is not None and _ROW_KIND_TYPES.get(row.kind) == field.type:
            out.append(("pack", row.fn, field.type, how))
        else:
            out.append(("batch", p))
    return None if all(step[0] == "batch" for step in out) else out


_ROW_KIND_TYPES = {"i64": pa.int64(), "f64": pa.float64(), "str": pa.string(), "bool": pa.bool_()}


def _rows_equal(a: pa.RecordBatch, b: pa.RecordBatch) -> np.ndarray:
    """Row-wise equality of two aligned batches, NULL equal to NULL."""
    eq = np.ones(a.num_rows, dtype=np.bool_)
    for x, y in zip(a.columns, b.columns, strict=True):
        if x.null_count == 0 and y.null_count == 0 and (pa.types.is_integer(x.type) or pa.types.is_floating(x.type)):
            eq &= x.to_numpy() == y.to_numpy()
            continue
        e = pc.fill_null(pc.equal(x, y), False)
        both_null = pc.and_(pc.is_null(x), pc.is_null(y))
        eq &= pc.or_(e, both_null).to_numpy(zero_copy_only=False)
    return eq
