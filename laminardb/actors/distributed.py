"""``DistributedOperator``: the client-side stand-in for a query whose state lives on actors.

Entry point: ``DistributedOperator(name, plan, cluster)``. It has the operator contract of
``QueryOperator`` (``process``, ``on_watermark``, ``current_rows``), so the client runs
the very same ``Reactor`` as the embedded mode — catalog, watermarks, subscriptions,
views, sinks — and only the operators' work moves to the actors. Each input batch is
written once as Arrow IPC into Ray's object store and read by every actor, which keeps
the rows it owns (by vnode of the query's GROUP BY key, or a contiguous row range for
stateless queries); outputs come back as IPC and are concatenated in actor order.
"""

from __future__ import annotations

import pyarrow as pa

from laminardb.actors._wire import from_ipc, to_ipc_array
from laminardb.actors.routing import partition_mode
from laminardb.operators.query_operator import output_schema
from laminardb.sql.planner import QueryPlan


class DistributedOperator:
    def __init__(self, name: str, plan: QueryPlan, cluster) -> None:
        self.name = name
        self.plan = plan
        self.cluster = cluster
        self.schema = output_schema(plan)
        self.mode = partition_mode(plan)
        self.late_dropped = 0
        self._closed_at: tuple[int, list[pa.RecordBatch]] | None = None
        self.merger = None
        if self.mode == "partial":
            from laminardb.actors.partial import PartialMerger
            from laminardb.operators.query_operator import QueryOperator

            self.merger = PartialMerger(plan, QueryOperator(plan))

    def _targets(self) -> list[int]:
        if self.mode == "single":
            return [self.cluster.single_owner()]
        return list(range(self.cluster.n_actors))

    #: the reactor may pass the watermark that follows this batch (one round trip for both)
    accepts_next_watermark = True

    def process(self, batch: pa.RecordBatch, wm_before: int, *, skip_where: bool = False,
                wm_next: int | None = None):
        if batch.num_rows == 0:
            return [], None
        import ray

        ref = ray.put(to_ipc_array(batch))  # written once, read zero-copy by every actor
        if self.merger is not None:
            return self._process_partial(ref, wm_before, wm_next)
        mode = "all" if self.mode == "single" else self.mode
        if wm_next is not None and self.plan.aggregate is None:
            wm_next = None
        results = self.cluster.call_each(self._targets(), "process", self.name, ref, wm_before, mode, wm_next)
        outs: list[pa.RecordBatch] = []
        lates: list[pa.RecordBatch] = []
        closed: list[pa.RecordBatch] = []
        for out_ipc, late_ipc, closed_ipc in results:
            outs += [from_ipc(b) for b in out_ipc]
            closed += [from_ipc(b) for b in closed_ipc]
            if late_ipc is not None:
                lates.append(from_ipc(late_ipc))
        if wm_next is not None:
            self._closed_at = (wm_next, _merge(closed, self.schema))
        late = None
        if lates:
            late = pa.Table.from_batches(lates).combine_chunks().to_batches()[0]
            self.late_dropped += late.num_rows
        return _merge(outs, self.schema), late

    def _process_partial(self, ref, wm_before: int, wm_next: int | None):
        targets = self._targets()
        if self.plan.aggregate.window is None:
            wm_next = None
        results = self.cluster.call_each(targets, "process_partial", self.name, ref, wm_before, wm_next)
        lates = [from_ipc(r[0]) for r in results if r[0] is not None]
        touched = {a: from_ipc(r[1]) for a, r in zip(targets, results, strict=True)}
        changes = self.plan.emit == "changes"
        outs = self.merger.changed(touched) if changes else []
        if wm_next is not None:
            closed = {a: from_ipc(r[2]) for a, r in zip(targets, results, strict=True)}
            self._closed_at = (wm_next, self.merger.close(closed, changes=changes))
        late = None
        if lates:
            late = pa.Table.from_batches(lates).combine_chunks().to_batches()[0]
            self.late_dropped += late.num_rows
        return _merge(outs, self.schema), late

    def on_watermark(self, wm: int) -> list[pa.RecordBatch]:
        if self.plan.aggregate is None:
            return []
        done = self._closed_at
        self._closed_at = None
        if done is not None and done[0] == wm:
            return done[1]  # the actors already advanced with the batch
        if self.merger is not None:
            results = self.cluster.call_each(self._targets(), "close_partial", self.name, wm)
            closed = {a: from_ipc(r) for a, r in zip(self._targets(), results, strict=True)}
            return self.merger.close(closed, changes=self.plan.emit == "changes")
        results = self.cluster.call_each(self._targets(), "on_watermark", self.name, wm)
        return _merge([from_ipc(b) for r in results for b in r], self.schema)

    def current_rows(self) -> pa.RecordBatch:
        if self.merger is not None:
            return self.merger.current()
        results = self.cluster.call_each(self._targets(), "current_rows", self.name)
        batches = [from_ipc(b) for b in results]
        return pa.Table.from_batches(batches).combine_chunks().to_batches()[0] if any(
            b.num_rows for b in batches) else batches[0]


def _merge(batches: list[pa.RecordBatch], schema: pa.Schema) -> list[pa.RecordBatch]:
    """One batch per emission, as the embedded engine delivers."""
    batches = [b for b in batches if b.num_rows]
    if len(batches) <= 1:
        return batches
    return pa.Table.from_batches(batches, schema=schema).combine_chunks().to_batches()
