"""Partial aggregation for unkeyed aggregates in the Delta mode.

An aggregate with no GROUP BY key (``SELECT count(*) … FROM t [GROUP BY tumble(…)]``) has
one group per window, so keyed routing would put all its rows on one actor. Instead every
actor aggregates its share of the rows (a contiguous row range) into *partial* state —
counts, sums with their non-NULL counts, minima, maxima — and the client merges the
actors' partials into the final group values, which then go through the same HAVING,
projection and changelog logic as the embedded engine (``QueryOperator._finish``).

Keyed tumble/hop aggregates that emit when their window closes use the same scheme
(local-global aggregation): partials carry the group keys, and ``KeyedPartialMerger``
merges the closed windows' partials per (window, key) with Arrow's hash aggregation. No
row is exchanged between actors by key; only one row per (actor, window, key) moves.

Entry points: ``partial_eligible(plan)``, ``local_global_eligible(plan)``, ``PartialState``
(actor side: ``run``/``close``), ``PartialMerger`` and ``KeyedPartialMerger`` (client side).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from laminardb.operators.group_aggregate import END_OF_TIME, GroupAggregate, GroupRows
from laminardb.sql.plan import QueryPlan

_MERGEABLE = frozenset({"count_star", "count", "sum", "avg", "min", "max"})


def _mergeable(plan: QueryPlan) -> bool:
    agg = plan.aggregate
    return bool(
        agg is not None and not plan.input_changelog
        and not getattr(agg, "lateness", 0)  # late firings need the whole window's state in one place
        and (agg.window is None or agg.window.kind in ("tumble", "hop"))
        and all(s.kind in _MERGEABLE for s in agg.specs)
        and all(not (s.kind in ("min", "max") and (pa.types.is_string(s.arg_type) or pa.types.is_boolean(s.arg_type)))
                for s in agg.specs)
    )


def partial_eligible(plan: QueryPlan) -> bool:
    """Unkeyed aggregates that merge from per-actor partials."""
    return _mergeable(plan) and not plan.aggregate.keys


def local_global_eligible(plan: QueryPlan) -> bool:
    """Keyed tumble/hop aggregates emitted when their window closes: every actor aggregates
    the rows it gets (no exchange of rows by key) and only the closed windows' partials are
    merged — Flink's local-global aggregation, Spark's partial aggregation before a shuffle."""
    agg = plan.aggregate
    return _mergeable(plan) and bool(agg.keys) and agg.window is not None and plan.emit == "close"


def _partials(agg: GroupAggregate, slots: np.ndarray) -> pa.RecordBatch:
    """Window start, group keys, hidden row count and each accumulator's mergeable arrays
    (Arrow, so they cross processes as IPC, never pickled)."""
    out = {"ws": agg.groups.slot_win[slots].copy()}
    if agg.keys is not None:
        out.update({f"k{i}": col for i, col in enumerate(agg.keys.take(agg.groups.slot_key[slots]))})
    out["rows"] = agg.rows.counts[slots].copy()
    for j, acc in enumerate(agg.accs):
        if acc.spec.kind in ("min", "max"):
            out[f"a{j}_v"] = acc.best[slots].astype(np.float64) if acc.best.dtype == np.float64 else acc.best[slots].copy()
            out[f"a{j}_h"] = acc.has[slots].copy()
        else:
            for i, arr in enumerate(acc.partials(slots)):
                out[f"a{j}_{i}"] = arr.copy()
    return pa.RecordBatch.from_pydict(out)


class PartialState:
    """Actor side: the node's aggregation over this actor's rows, reported as partials."""

    def __init__(self, plan: QueryPlan) -> None:
        a = plan.aggregate
        self.plan = plan
        self.agg = GroupAggregate(key_types=[k.type for k in a.keys], specs=a.specs, window=a.window,
                                  emit="close", time_type=a.time_type)

    def run(self, batch: pa.RecordBatch, wm_before: int,
            evaluate) -> tuple[pa.RecordBatch | None, pa.RecordBatch | None]:
        """Fold a batch in; returns (late rows, partials of the groups it touched — EMIT
        CHANGES only)."""
        a = self.plan.aggregate
        args = [x.evaluate(batch) if x is not None else None for x in a.args]
        ts = evaluate(batch)
        self.agg.last_slots = np.zeros(0, np.int64)
        keys = [k.evaluate(batch) for k in a.keys]
        _, late = self.agg.process(batch.num_rows, keys, args, ts, None, wm_before)
        late_rows = batch.filter(pa.array(late)) if late is not None else None
        if self.plan.emit != "changes":  # only EMIT CHANGES reports groups before they close
            return late_rows, None
        return late_rows, _partials(self.agg, np.unique(self.agg.last_slots))

    def close(self, wm: int) -> pa.RecordBatch:
        """Partials of the windows the watermark closes (then forgotten here)."""
        agg = self.agg
        live = agg.groups.live_slots()
        if agg.window is None:  # the whole input is the window: it closes at the end (finish)
            closing = live if wm == END_OF_TIME else np.zeros(0, np.int64)
        else:
            closing = live[agg.groups.slot_win[live] + agg.window.size <= wm]
        out = _partials(agg, closing)
        if len(closing):
            agg._free(closing)
        return out


class PartialMerger:
    """Client side: per window, the latest partials of every actor, merged into group rows."""

    def __init__(self, plan: QueryPlan, finisher) -> None:
        self.plan = plan
        self.specs = plan.aggregate.specs
        self.window = plan.aggregate.window
        self.finisher = finisher  # a QueryOperator whose _finish turns group rows into output
        self.state: dict[int, dict[int, tuple]] = {}  # ws → actor → partial tuple
        self.closed: dict[int, list[tuple]] = {}

    @staticmethod
    def _rows(p: pa.RecordBatch) -> list[tuple]:
        """(window start, partial tuple) per group; a handful of groups per call (unkeyed)."""
        cols = p.to_pydict()
        ws = cols.pop("ws")
        rest = list(cols.values())
        return [(int(ws[i]), tuple(c[i] for c in rest)) for i in range(len(ws))]

    def _merge(self, parts: list[tuple]) -> tuple[int, list]:
        """Combine partial tuples (rows, then per-aggregate arrays in `_partials` order) into
        the row count and the final value of each aggregate."""
        t = self._add(parts)
        vals: list = []
        pos = 1
        for s in self.specs:
            if s.kind in ("count_star", "count"):
                vals.append(t[pos])
                pos += 1
            elif s.kind in ("sum", "avg"):
                tot, cnt = t[pos], t[pos + 1]
                vals.append(None if cnt <= 0 else (tot / cnt if s.kind == "avg" else tot))
                pos += 2
            else:
                vals.append(t[pos] if t[pos + 1] else None)
                pos += 2
        return t[0], vals

    def regroup(self, per_actor: dict[int, tuple], n_actors: int) -> dict[int, tuple]:
        """A window's latest partials after a rescale to ``n_actors``: actor a's state now
        holds the parts of a, a + n, a + 2n, … (``DistributedOperator.restore``)."""
        out: dict[int, list[tuple]] = {}
        for actor, tup in per_actor.items():
            out.setdefault(actor % n_actors, []).append(tup)
        return {a: (ts[0] if len(ts) == 1 else self._add(ts)) for a, ts in out.items()}

    def _add(self, parts: list[tuple]) -> tuple:
        """Partial tuples added up into one, in the same layout (`_partials` order)."""
        out: list = [int(sum(t[0] for t in parts))]
        pos = 1
        for s in self.specs:
            if s.kind in ("count_star", "count"):
                out.append(int(sum(t[pos] for t in parts)))
                pos += 1
            elif s.kind in ("sum", "avg"):
                out += [sum(t[pos] for t in parts), int(sum(t[pos + 1] for t in parts))]
                pos += 2
            else:
                have = [t[pos] for t in parts if t[pos + 1]]
                out += [(max(have) if s.kind == "max" else min(have)) if have else parts[0][pos], bool(have)]
                pos += 2
        return tuple(out)

    def _group_batch(self, wss: list[int], merged: list[tuple[int, list]]) -> pa.RecordBatch:
        schema = self.finisher.agg.schema
        cols: list[pa.Array] = []
        if self.window is not None:
            ws = np.array(wss, dtype=np.int64)
            tt = self.plan.aggregate.time_type
            cols += [pa.array(ws).cast(tt), pa.array(ws + self.window.size).cast(tt)]
        for j, s in enumerate(self.specs):
            cols.append(pa.array([m[1][j] for m in merged], type=s.out_type))
        return pa.RecordBatch.from_arrays(cols, schema=schema)

    def changed(self, per_actor: dict[int, pa.RecordBatch]) -> list[pa.RecordBatch]:
        """EMIT CHANGES: new partials of touched windows → −old/+new final rows."""
        touched: list[int] = []
        before: dict[int, tuple[int, list] | None] = {}
        for actor, p in per_actor.items():
            for ws, tup in self._rows(p):
                if ws not in before:
                    before[ws] = self._merge(list(self.state[ws].values())) if ws in self.state else None
                    touched.append(ws)
                self.state.setdefault(ws, {})[actor] = tup
        if not touched:
            return []
        after = [self._merge(list(self.state[ws].values())) for ws in touched]
        old = [before[ws] or (0, [None] * len(self.specs)) for ws in touched]
        pair = pa.concat_batches([self._group_batch(touched, old), self._group_batch(touched, after)])
        rows = GroupRows(new=None, new_valid=np.array([a[0] > 0 for a in after]),
                         old_valid=np.array([b is not None and b[0] > 0 for b in (before[w] for w in touched)]),
                         pair=pair)
        return self.finisher._finish(rows)

    def close(self, per_actor: dict[int, pa.RecordBatch], *, changes: bool) -> list[pa.RecordBatch]:
        """Windows the watermark closed on every actor → final rows (EOWC), state dropped."""
        closing: dict[int, list[tuple]] = {}
        for p in per_actor.values():
            for ws, tup in self._rows(p):
                closing.setdefault(ws, []).append(tup)
        for ws in closing:
            self.state.pop(ws, None)
        if changes or not closing:
            return []
        wss = sorted(closing)
        merged = [self._merge(closing[ws]) for ws in wss]
        batch = self._group_batch(wss, merged)
        return self.finisher._finish(GroupRows(new=batch, new_valid=np.array([m[0] > 0 for m in merged])))

    def current(self) -> pa.RecordBatch:
        wss = sorted(self.state)
        merged = [self._merge(list(self.state[ws].values())) for ws in wss]
        keep = [i for i, m in enumerate(merged) if m[0] > 0]
        batch = self._group_batch([wss[i] for i in keep], [merged[i] for i in keep])
        return self.finisher.rows_of(batch)


class KeyedPartialMerger:
    """Client side of local-global aggregation: the closed windows' partials of every actor,
    merged per (window, key) with Arrow's hash aggregation, then HAVING and projection.

    ``route`` (set by the cluster backend for a coordinated database): called at each close,
    it returns the exactly-once sink that is the query's only consumer when that sink's epoch
    job can merge the partials in Spark (``checkpoint/partial_stage.py``); the partials then
    go to the sink's stage unmerged and this close emits nothing here."""

    def __init__(self, plan: QueryPlan, finisher) -> None:
        self.plan = plan
        self.specs = plan.aggregate.specs
        self.n_keys = len(plan.aggregate.keys)
        self.finisher = finisher
        self.route = None
        #: set by the cluster backend: the sink the key owners stage the final rows for, when
        #: it is the query's only consumer (``checkpoint/actor_stages.stage_route``)
        self.stage_route = None
        self.rows_merged = 0  # partial rows merged here (metrics: the head's share of the merge)
        self.rows_merged_on_actors = 0  # partial rows the key owners merged (owner_merge.py)
        self.rows_staged_on_actors = 0  # final rows the key owners staged for the only sink
        self.rows_routed = 0  # partial rows handed unmerged to a sink whose epoch job merges them

    def changed(self, per_actor: dict[int, pa.RecordBatch]) -> list[pa.RecordBatch]:
        return []  # emitted only when windows close

    def close(self, per_actor: dict[int, pa.RecordBatch], *, changes: bool) -> list[pa.RecordBatch]:
        parts = [p for p in per_actor.values() if p.num_rows]
        if not parts:
            return []
        table = pa.Table.from_batches(parts)
        target = self.route() if self.route is not None else None
        if target is not None and target.take_partials(table, self):
            self.rows_routed += table.num_rows
            return []
        return self.merge(table)

    def merge(self, table: pa.Table) -> list[pa.RecordBatch]:
        """Partial rows (any actors, any closed windows) → final rows, merged here."""
        self.rows_merged += table.num_rows
        return finish_merged(self.plan, self.finisher, merge_partials(table, self.specs, self.n_keys))

    def current(self) -> pa.RecordBatch:
        """Open windows are not queryable state (their rows are emitted when they close)."""
        return self.finisher.rows_of(pa.RecordBatch.from_pylist([], schema=self.finisher.agg.schema))


def merge_columns(specs, n_keys: int) -> tuple[list[str], list[tuple[str, str, str]]]:
    """The merge as (group-by columns, [(partial column, function, merged column)]): what
    Arrow's ``group_by`` here and Spark's ``groupBy`` in the epoch job both compute. Minima and
    maxima take only partials that have a value (``a{j}_h``)."""
    aggs = [("rows", "sum", "rows_sum")]
    for j, spec in enumerate(specs):
        if spec.kind in ("min", "max"):
            aggs.append((f"a{j}_v", spec.kind, f"a{j}_v_{spec.kind}"))
        elif spec.kind in ("count_star", "count"):
            aggs.append((f"a{j}_0", "sum", f"a{j}_0_sum"))
        else:
            aggs += [(f"a{j}_0", "sum", f"a{j}_0_sum"), (f"a{j}_1", "sum", f"a{j}_1_sum")]
    return ["ws"] + [f"k{i}" for i in range(n_keys)], aggs


def merge_partials(table: pa.Table, specs, n_keys: int) -> pa.Table:
    """Arrow's hash aggregation of partial rows per (window, key), sorted by them."""
    import pyarrow.compute as pc

    group_by, aggs = merge_columns(specs, n_keys)
    for j, spec in enumerate(specs):
        if spec.kind in ("min", "max"):  # a partial without a value does not take part
            table = table.set_column(table.schema.get_field_index(f"a{j}_v"), f"a{j}_v",
                                     pc.if_else(table[f"a{j}_h"], table[f"a{j}_v"], None))
    merged = table.group_by(group_by, use_threads=False).aggregate([(c, f) for c, f, _ in aggs])
    return merged.sort_by([(c, "ascending") for c in group_by])


def finish_merged(plan: QueryPlan, finisher, merged: pa.Table) -> list[pa.RecordBatch]:
    """Merged partials (``merge_columns``' names) → the group rows' final values, then HAVING,
    projection and output types by the embedded engine's own ``QueryOperator._finish``."""
    import pyarrow.compute as pc

    if merged.num_rows == 0:
        return []
    agg = plan.aggregate
    schema = finisher.agg.schema
    ws = merged["ws"].combine_chunks().cast(pa.int64()).to_numpy(zero_copy_only=False)
    cols = [pa.array(ws).cast(agg.time_type), pa.array(ws + agg.window.size).cast(agg.time_type)]
    cols += [merged[f"k{i}"].combine_chunks().cast(schema.field(2 + i).type) for i in range(len(agg.keys))]
    for j, spec in enumerate(agg.specs):
        if spec.kind in ("count_star", "count"):
            value = merged[f"a{j}_0_sum"]
        elif spec.kind in ("min", "max"):
            value = merged[f"a{j}_v_{spec.kind}"]
        else:
            total, count = merged[f"a{j}_0_sum"], merged[f"a{j}_1_sum"]
            if spec.kind == "avg":
                total = pc.divide(pc.cast(total, pa.float64()), pc.cast(count, pa.float64()))
            value = pc.if_else(pc.greater(count, 0), total, None)
        cols.append(pc.cast(value.combine_chunks() if isinstance(value, pa.ChunkedArray) else value, spec.out_type))
    batch = pa.RecordBatch.from_arrays(cols, schema=schema)
    rows = merged["rows_sum"].combine_chunks().to_numpy(zero_copy_only=False)
    return finisher._finish(GroupRows(new=batch, new_valid=rows > 0))


def _spark_type(t: pa.DataType) -> bool:
    """Types Spark's Parquet reader and its Arrow hand-over keep exactly."""
    return (pa.types.is_integer(t) and not pa.types.is_unsigned_integer(t)) or pa.types.is_floating(t) \
        or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_boolean(t) or pa.types.is_date32(t)


def spark_mergeable(plan: QueryPlan) -> bool:
    """A local-global aggregate whose partials Spark can merge without changing a value: its
    group keys and aggregate arguments are of types Spark reads back exactly (no unsigned
    integers, nanosecond timestamps or decimals)."""
    agg = plan.aggregate
    return local_global_eligible(plan) and all(_spark_type(k.type) for k in agg.keys) and all(
        s.arg_type is None or _spark_type(s.arg_type) for s in agg.specs)
