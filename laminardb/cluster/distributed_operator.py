"""``DistributedOperator``: the client-side stand-in for a query whose state lives on actors.

Entry point: ``DistributedOperator(name, plan, cluster)``. It has the operator contract of
``QueryOperator`` (``process``, ``on_watermark``, ``current_rows``), so the client runs
the very same ``Reactor`` as the embedded mode — catalog, watermarks, subscriptions,
views, sinks — and only the operators' work moves to the actors. How a batch reaches them
(``routing.partition_mode``; docs/cluster.md has the table):

- keyed queries on several actors: split here by the owner of each row's vnode
  (``routing.route_rows``), one part per actor;
- everything else: the batch is written once and every actor reads it (``all``) or its
  contiguous row range (``range``: stateless queries, partial and local-global aggregates,
  whose partials ``partial.py`` merges here);
- ``RemoteRows`` (Kafka): the rows stay on the actors that read them (``_process_remote``).

Batches go through the shared-memory ring (``shm_ring.py``) to actors that can map it,
else through Ray's object store, as Arrow IPC. Outputs come back as IPC.

Pipelining: a batch's work on the actors is a *round*. When the query's outputs only go to
subscribers, views and sinks (no query reads them), ``process`` returns at once and up to
``max_in_flight`` rounds run while the client prepares the next batches; while rounds are
in flight, further whole batches are held and go out together (``process_many``, at most
``COALESCE_MAX``). Outputs are delivered in order through ``deliver`` (by the connection's
drainer thread, or by any read, which drains first). A query read by another query waits
for each round before ``process`` returns, exactly like the embedded engine.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from laminardb.checkpoint.actor_stages import actor_stage_dir
from laminardb.cluster.exceptions import ActorTimeoutError
from laminardb.cluster.owner_merge import by_reference, in_window_order
from laminardb.cluster.remote_rows import RemoteBatch, RemoteRows
from laminardb.cluster.routing import partition_mode, route_rows
from laminardb.cluster.shm_ring import ShmRing
from laminardb.cluster.wire import from_ipc, resolved, to_ipc_array
from laminardb.operators.query_operator import output_schema
from laminardb.sql.plan import QueryPlan

DEFAULT_MAX_IN_FLIGHT = 4
#: batches sent in one call per actor while the actors are busy (fewer Ray calls per batch)
COALESCE_MAX = 4
#: the longest an owner's merge waits in the head for a batch call to ride with
MERGE_WAIT_S = 0.5
Deliver = Callable[[list[pa.RecordBatch], "pa.RecordBatch | None"], None]


@dataclass
class _Round:
    """One batch's calls to the actors, not yet collected."""

    method: str
    targets: list[int]
    futures: list[Any]
    wm_next: int | None
    slots: list[int] = field(default_factory=list)  # shared-memory slots its input occupies
    wm_nexts: list[int | None] | None = None  # a coalesced round: one entry per batch
    rows: int = 0  # input rows it carries (``queued_rows``)
    #: the rows' references, one per target (``RowsByReference``; None: the rows are in the answers)
    rows_refs: list[Any] | None = None
    #: a round collected again after its owners' merge timed out: the batches already combined
    #: (their rows may be handed on or staged: never again), and the merge calls then in flight
    #: (waited for again, not sent again: an owner that answered has staged its rows)
    done: list = field(default_factory=list)
    merging: tuple | None = None
    #: the owners' merges folded into its calls, by actor (their answers are (answer, counts))
    merges: dict[int, list] = field(default_factory=dict)
    merges_sink: Any = None  # the sink those merges stage rows for
    merges_counted: bool = False  # once: a round may be collected again


@dataclass
class _Item:
    """A batch waiting to go out with the next ones (``process_many``)."""

    wm_before: int
    mode: str
    wm_next: int | None
    data: Any
    slots: list[int]
    rows: int = 0


class SnapshotParts:
    """Where a distributed query's actors write their own checkpoint parts (set by the
    backend for a durable database: ``ClusterImage.write_parts``)."""

    #: the database's checkpoints directory (None: not durable)
    checkpoint_root: str | None = None
    #: whether every actor can write (and read) that directory now
    parts_writable: Callable[[], bool] = staticmethod(lambda: False)
    #: whether the actors write their parts themselves (config ``actor_snapshots``)
    actors_write_parts = False


class RowsByReference:
    """How a query on the actors hands its output to the database head's subscribers: by
    reference (``RemoteBatch``: the rows stay in Ray's object store, an actor call's second
    return value, which the head owns; each subscriber's client fetches and decodes them).
    The backend sets the three callables."""

    #: whether the query has subscribers
    has_subscribers: Callable[[], bool] = staticmethod(lambda: False)
    #: whether its rows go to subscribers alone, who take them by reference (no view, query
    #: or sink in the head needs them decoded: ``ClusterBackend.subscribers_alone``)
    subscribers_alone: Callable[[], bool] = staticmethod(lambda: False)
    #: hands ``RemoteBatch``es to the subscribers alone, counted as emitted
    emit_to_subscribers: Callable[[list[Any]], None] = staticmethod(lambda batches: None)

    def rows_back(self, sink) -> bool:
        """Whether the actors send the rows back by reference: for the subscribers beside
        ``sink``, the query's only sink, which the actors stage themselves, or for
        subscribers alone."""
        return (sink is not None and self.has_subscribers()) or self.subscribers_alone()


def start_calls(actors: list, calls: list[tuple[int, str, tuple]], back: bool,
                merges: dict[int, list] | None = None) -> tuple[list[Any], list[Any] | None]:
    """Start each (actor, method, args). ``back``: each call returns its rows as a second
    value (``num_returns=2``), not fetched here: (the answers' futures, the rows' references).
    ``merges``: the owners' merges folded into these calls, by actor (``_take_due``)."""
    if not back:
        return [getattr(actors[a], method).remote(*args, **({"merges": merges[a]} if merges and a in merges else {}))
                for a, method, args in calls], None
    pairs = [getattr(actors[a], method).options(num_returns=2).remote(*args, rows_back=True)
             for a, method, args in calls]
    return [meta for meta, _ in pairs], [rows for _, rows in pairs]


class DistributedOperator(SnapshotParts, RowsByReference):
    """One query on the actors (an ``engine.contracts.Operator``); see the module docstring."""

    incremental = False  # checkpoints take the whole state (no snapshot_delta)

    #: the reactor may pass the watermark that follows this batch (one round trip for both)
    accepts_next_watermark = True

    @property
    def changelog(self) -> bool:
        return self.plan.changelog

    def __init__(self, name: str, plan: QueryPlan, cluster, *,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, local_global: bool = True,
                 ring: ShmRing | None = None, scalable: bool = False) -> None:
        self.name = name
        self.plan = plan
        self.cluster = cluster
        self.schema = output_schema(plan)
        # one actor exchanges nothing: local-global aggregation would only add the merge — unless
        # the database may be rescaled, whose checkpointed state must not change form with the count
        self.mode = partition_mode(plan, local_global=local_global and (cluster.n_actors > 1 or scalable))
        self.late_dropped = 0
        self.max_in_flight = max_in_flight
        self.ring = ring
        #: set by the connection: where outputs of deferred rounds go, and whether a round
        #: may be deferred now (its node feeds no other query)
        self.deliver: Deliver | None = None
        self.can_defer: Callable[[], bool] = lambda: False
        #: local-global: the key owners merge the closed windows (config ``owner_merge``; False:
        #: the head merges them, as before issue 20 — kept to measure the two side by side)
        self.owner_merge = True
        #: set by the backend: counts rows the actors staged for a sink as emitted by the query
        self.emitted_elsewhere: Callable[[int], None] = lambda rows: None
        #: set by the backend: wakes the thread that delivers deferred rounds (``_Drainer``),
        #: which sleeps while no round is in flight
        self.wake: Callable[[], None] = lambda: None
        self._rows_now = 0  # rows of the batch ``process`` is queueing (``queued_rows``)
        self._wm_closing: int | None = None  # the last watermark sent to close windows (_no_window_ends)
        self.pending: deque[_Round] = deque()
        self.open: list[_Item] = []  # batches held back while the actors are busy
        self.batches_held = 0  # sent with others in one call (metrics, tests)
        self.fetched_to_client = 0  # actor-read batches that had to come through the client
        self.rows_by_ref = 0  # output rows handed to subscribers by reference, not decoded here
        self._closed_at: tuple[int, list[pa.RecordBatch]] | None = None
        #: local-global: closes' partials not merged yet, by owner, as (stage, payloads) — folded
        #: into the owner's next batch call (``_take_due``), or sent by ``drain`` (config
        #: ``fold_merges``; False: each close's merge is a call of its own, as before)
        self.fold_merges = True
        self._due: dict[int, list[tuple]] = {}
        self._due_since = 0.0  # monotonic time the oldest due merge was kept
        self._flushing: list[tuple] = []  # due merges sent by ``_flush_due``, not yet answered
        self._due_sink: Any = None  # the sink whose stage files the due merges append to
        self.merges_folded = 0  # closes' merge calls saved (metrics, tests)
        self.merger = None
        if self.mode in ("partial", "local_global"):
            from laminardb.cluster.partial import KeyedPartialMerger, PartialMerger
            from laminardb.operators.query_operator import QueryOperator

            merger = PartialMerger if self.mode == "partial" else KeyedPartialMerger
            self.merger = merger(plan, QueryOperator(plan))

    def _targets(self) -> list[int]:
        if self.mode == "single":
            return [self.cluster.single_owner()]
        return list(range(self.cluster.n_actors))

    # ------------------------------------------------------------------ batches
    def process(self, batch: pa.RecordBatch, wm_before: int, *, skip_where: bool = False,
                wm_next: int | None = None):
        if batch.num_rows == 0:
            return [], None
        self._rows_now = batch.num_rows  # the round this call queues carries them
        targets = self._targets()
        whole = not isinstance(batch, RemoteRows) and not (self.mode == "keyed" and len(targets) > 1)
        if whole and self.pending and self.deliver is not None and self.can_defer():
            return self._hold(batch, targets, wm_before, wm_next)
        self._submit_open()  # batches held back go first
        if isinstance(batch, RemoteRows):
            remote = self._process_remote(batch, targets, wm_before, wm_next)
            if remote is not None:
                return remote
            self.fetched_to_client += 1
            batch = batch.materialize()  # a query created after these rows were read
        if self.mode == "keyed" and len(targets) > 1:
            return self._process_routed(batch, wm_before, wm_next)
        data, slots = self._ship(batch, targets)  # written once, read zero-copy by every actor
        wm_next = self._closes(wm_next)
        args = (self.name, wm_before, self._whole_mode, wm_next, data)
        return self._start(self._round([(a, self._method, args) for a in targets], wm_next, slots))

    @property
    def _whole_mode(self) -> str:
        """How actors read a batch sent whole: one keyed actor owns every vnode (``all``);
        partial aggregates and stateless queries take contiguous row ranges."""
        return "all" if self.mode in ("keyed", "single") else "range"

    def _hold(self, batch: pa.RecordBatch, targets: list[int], wm_before: int, wm_next: int | None):
        """The actors are busy: keep the batch for one call with the next ones (group
        commit — the actors process them one by one, as if sent apart)."""
        data, slots = self._ship(batch, targets)
        wm_next = self._closes(wm_next)
        self.open.append(_Item(wm_before, self._whole_mode, wm_next, data, slots, self._rows_now))
        self.batches_held += 1
        if wm_next is not None:
            self._closed_at = (wm_next, [])  # the round delivers the windows it closes
        if len(self.open) >= COALESCE_MAX:
            self._submit_open()
        while len(self.pending) > self.max_in_flight:
            self._deliver_oldest()
        return [], None

    def _submit_open(self) -> None:
        if not self.open:
            return
        items, self.open = self.open, []
        payload = [(it.wm_before, it.mode, it.wm_next, it.data) for it in items]
        rnd = self._round([(a, "process_many", (self._method, self.name, payload)) for a in self._targets()],
                          None, [s for it in items for s in it.slots])
        rnd.wm_nexts, rnd.rows = [it.wm_next for it in items], sum(it.rows for it in items)
        self.pending.append(rnd)
        self.wake()

    def _round(self, calls: list[tuple[int, str, tuple]], wm_next: int | None, slots: list[int] | None = None) -> _Round:
        """Start a round's calls: with the rows back by reference when they go to subscribers
        alone (``process`` only: a partial aggregate's rows are merged here)."""
        back = self._method == "process" and self.subscribers_alone()
        targets = [a for a, _, _ in calls]
        merges = self._take_due(targets) if not back else {}
        futures, refs = start_calls(self.cluster.actors, calls, back, merges)
        return _Round(self._method, targets, futures, wm_next, slots or [], rows_refs=refs, merges=merges,
                      merges_sink=self._due_sink)

    def _take_due(self, targets: list[int]) -> dict[int, list]:
        """The due merges of these actors, to ride with the calls about to go to them."""
        merges = {a: self._due.pop(a) for a in targets if a in self._due}
        self.merges_folded += sum(len(m) for m in merges.values())
        if merges and self._due:
            self._due_since = time.monotonic()  # what is left waits from now (for another owner)
        return merges

    def flush_stale_merges(self) -> bool:
        """Send the due merges kept for ``MERGE_WAIT_S`` or more (no batch call came for
        their owners to carry them: the stream paused), so each owner's stage file is at most
        that far behind; True while merges are still due or unanswered (the drainer looks
        again soon)."""
        if (self._due and time.monotonic() - self._due_since >= MERGE_WAIT_S) or self._flushing:
            self._flush_due(wait=False)  # never waits: a paused owner must not hold the engine's lock
        return bool(self._due or self._flushing)

    def _defer_merges(self, stages: dict[int, Any], by_owner: dict[int, list], sink) -> None:
        """Keep one close's merges for the owners' next calls: its rows go only to the stage
        files of ``sink`` on the owners, which nobody reads before the checkpoint's barrier,
        and ``drain`` (which every barrier and read runs first) sends what is still due."""
        if self._due and self._due_sink is not sink:
            self._flush_due()  # the sink changed: the earlier merges go to the earlier one's files
        if not self._due:
            self._due_since = time.monotonic()
        self._due_sink = sink
        for a, payloads in by_owner.items():
            self._due.setdefault(a, []).append((stages[a], payloads))

    def _flush_due(self, wait: bool = True) -> None:
        """Send every due merge now, one call per owner (``drain``), and count the answers:
        all of them (``wait``), else those already in. Calls that time out are waited for
        again by the next flush, never sent again."""
        if self._due:
            due, self._due = self._due, {}
            owners = sorted(due)
            futures = [self.cluster.actors[a].merge_many.remote(self.name, due[a]) for a in owners]
            self._flushing.append((owners, futures, self._due_sink))
        while self._flushing:
            owners, futures, sink = self._flushing[0]
            if not wait and not self.cluster.ready(futures):
                return
            counts = self.cluster.gather(owners, futures, "merge_closed")
            self._flushing.pop(0)
            self._count_merged(counts, sink)

    def _count_merged(self, counts: list[tuple[int, int]], sink, *, emitted: bool = True) -> None:
        """Count (partial rows merged, rows staged) per owner's answer; staged rows are the
        query's output, written to ``sink`` by the actors."""
        self.merger.rows_merged_on_actors += sum(n for n, _ in counts)
        staged = sum(s for _, s in counts)
        if staged:
            self.merger.rows_staged_on_actors += staged
            sink.written_by_actors(staged)
            if emitted:
                self.emitted_elsewhere(staged)

    def _ship(self, batch: pa.RecordBatch, targets: list[int]) -> tuple[Any, list[int]]:
        return ship(self.ring, batch, targets)

    @property
    def _method(self) -> str:
        return "process_partial" if self.merger is not None else "process"

    def _closes(self, wm_next: int | None) -> int | None:
        """``wm_next`` if advancing the watermark can close anything on the actors."""
        agg = self.plan.aggregate
        if agg is None or (self.merger is not None and agg.window is None):
            return None
        if wm_next is not None and self._no_window_ends(wm_next):
            return None
        return wm_next

    def _no_window_ends(self, wm: int) -> bool:
        """Whether no window of a partial or local-global aggregate ends between the last
        watermark sent to close windows and ``wm``: then the actors need not hear of it, and
        an actor without rows in a batch gets no call at all (``_process_remote``). Else
        ``wm`` becomes that watermark. Tumbling windows end at ``offset + k·size``, hopping
        ones at ``offset + size + k·slide``; a window closes once the watermark reaches its end."""
        window = self.plan.aggregate.window
        if self.merger is None or window is None or window.kind not in ("tumble", "hop"):
            return False
        period, phase = (window.size, window.offset) if window.kind == "tumble" else (
            window.slide, window.offset + window.size)
        last = self._wm_closing
        if last is not None and (wm - phase) // period == (last - phase) // period:
            return True
        self._wm_closing = wm
        return False

    def _process_routed(self, batch: pa.RecordBatch, wm_before: int, wm_next: int | None):
        """Keyed query on several actors: the rows are split here by the owner of their
        key's vnode (one hash per row) and each actor receives only its part."""

        parts = route_rows(self.plan, batch, self.cluster.routing.owner, self.cluster.n_actors)
        calls, slots = [], []
        for a, part in enumerate(parts):
            data: list[Any] = []
            if part.num_rows:
                shipped, used = self._ship(part, [a])
                data, slots = [shipped], slots + used
            calls.append((a, "process", (self.name, wm_before, "routed", wm_next, *data)))
        return self._start(self._round(calls, wm_next, slots))

    def _process_remote(self, rows: RemoteRows, targets: list[int], wm_before: int, wm_next: int | None):
        """Rows still on the actors that read them: keyed queries get the parts the readers
        routed to each owner; the others run where the rows were read."""
        wm_next = self._closes(wm_next)
        if self.mode == "keyed" and len(targets) > 1:
            parts = rows.routed.get(self.name)
            if parts is None:
                return None
            calls = [(a, "process", (self.name, wm_before, "routed", wm_next, *parts[a])) for a in targets]
        elif self.mode in ("keyed", "single"):  # one owner of every key
            refs = [ref for _, ref in rows.wholes]
            calls = [(a, self._method, (self.name, wm_before, "all", wm_next, *refs)) for a in targets]
        else:  # stateless and partial aggregates: no exchange at all; an actor without rows
            # is called only when windows close (an insert's rows are all on one actor)
            calls = [(a, self._method, (self.name, wm_before, "all", wm_next, *refs)) for a in targets
                     if (refs := rows.refs_read_by(a)) or wm_next is not None]
            if not calls:
                return [], None
        return self._start(self._round(calls, wm_next))

    def _start(self, rnd: _Round):
        """Wait for the round now, or (when its outputs may come later) queue it."""
        wm_next = rnd.wm_next
        if self.deliver is None or not self.can_defer():
            self.drain()  # rounds deferred earlier come first
            ((outs, late, closed),) = self._collect(rnd)
            if wm_next is not None:
                self._closed_at = (wm_next, closed)
            return outs, late
        rnd.rows = self._rows_now
        self.pending.append(rnd)
        self.wake()
        if wm_next is not None:
            self._closed_at = (wm_next, [])  # the round delivers the windows it closes
        while len(self.pending) > self.max_in_flight:
            self._deliver_oldest()
        return [], None

    def _collect(self, rnd: _Round) -> list[tuple[list[pa.RecordBatch], pa.RecordBatch | None, list[pa.RecordBatch]]]:
        """Per batch of the round: outputs, late rows and closed windows, merged across actors."""
        results = self.cluster.gather(rnd.targets, rnd.futures, rnd.method)
        if rnd.merges:  # the calls that carried merges answer (answer, counts)
            results = list(results)
            counts = []
            for i, a in enumerate(rnd.targets):
                if a in rnd.merges:
                    results[i], done = results[i]
                    counts.append(done)
            if not rnd.merges_counted:
                rnd.merges_counted = True
                self._count_merged(counts, rnd.merges_sink)
        for slot in rnd.slots:  # every actor has answered: nobody reads these slots any more
            self.ring.release(slot)
        rnd.slots = []  # once: a round collected again (its owners' merge timed out) has none
        if rnd.rows_refs is not None:
            return self._by_reference(rnd, results)
        if rnd.wm_nexts is None:
            per_batch, wms = [results], [rnd.wm_next]
        else:
            per_batch, wms = [[r[i] for r in results] for i in range(len(rnd.wm_nexts))], rnd.wm_nexts
        for i in range(len(rnd.done), len(wms)):
            rnd.done.append(self._combine(rnd.method, rnd.targets, per_batch[i], wms[i], rnd))
        return rnd.done

    def _by_reference(self, rnd: _Round, results: list) -> list[tuple[list, pa.RecordBatch | None, list]]:
        """A round whose rows the actors kept (``process`` with ``rows_back``): each batch's
        output, then its closed windows, go to the subscribers as references — actor by actor,
        as ``_combine`` concatenates them — and only the late rows are decoded here."""
        per_actor = results if rnd.wm_nexts is not None else [[r] for r in results]
        starts = [0] * len(results)
        out = []
        for i in range(len(rnd.wm_nexts or [None])):
            outs, closed, lates = [], [], []
            for a, (metas, ref) in enumerate(zip(per_actor, rnd.rows_refs, strict=True)):
                n_out, late_ipc, n_closed = metas[i]
                for n, into in ((n_out, outs), (n_closed, closed)):
                    if n:
                        into.append(RemoteBatch(ref, n, starts[a]))
                        starts[a] += n
                if late_ipc is not None:
                    lates.append(from_ipc(late_ipc))
            self._hand_on(outs + closed)
            out.append(([], self._late(lates), []))
        return out

    def _hand_on(self, batches: list[RemoteBatch]) -> None:
        """Rows the actors kept, to the subscribers (``RowsByReference``)."""
        if batches:
            self.rows_by_ref += sum(b.num_rows for b in batches)
            self.emit_to_subscribers(batches)

    def _late(self, lates: list[pa.RecordBatch]) -> pa.RecordBatch | None:
        if not lates:
            return None
        late = pa.Table.from_batches(lates).combine_chunks().to_batches()[0]
        self.late_dropped += late.num_rows
        return late

    def _combine(self, method: str, targets: list[int], results: list, wm_next: int | None,
                 rnd: _Round | None = None):
        if method == "process_partial":
            lates = [from_ipc(r[0]) for r in results if r[0] is not None]
            changes = self.plan.emit == "changes"
            outs = []
            if changes:
                outs = self.merger.changed({a: from_ipc(r[1]) for a, r in zip(targets, results, strict=True)})
            closed = []
            if wm_next is not None:
                closed = self._merge_closed(targets, [r[2] for r in results], rnd)
        else:
            outs, lates, closed = [], [], []
            for out_ipc, late_ipc, closed_ipc in results:
                outs += [from_ipc(b) for b in out_ipc]
                closed += [from_ipc(b) for b in closed_ipc]
                if late_ipc is not None:
                    lates.append(from_ipc(late_ipc))
            closed = _merge(closed, self.schema)
        return _merge(outs, self.schema), self._late(lates), closed

    def _merge_closed(self, targets: list[int], answers: list, rnd: _Round | None = None) -> list[pa.RecordBatch]:
        """The final rows of the windows one close ended, from each actor's answer with their
        partials. Unkeyed: merged here (one group per window). Keyed (local-global): the
        actors cut them by key owner, and each owner merges its keys' parts from every actor
        (``owner_merge.py``) — unless an exactly-once sink's epoch job merges them in Spark.
        ``rnd``: the round being collected, which keeps the owners' calls if one times out."""
        merger = self.merger
        if self.mode != "local_global":
            parts = {a: from_ipc(x) for a, x in zip(targets, answers, strict=True)}
            return merger.close(parts, changes=self.plan.emit == "changes")
        by_owner: dict[int, list] = {}
        for answer in answers:
            for owner, payload in answer:
                by_owner.setdefault(owner, []).append(payload)
        if not by_owner:
            return []
        spark = merger.route() if merger.route is not None else None
        if spark is not None or not self.owner_merge:  # unmerged to the sink's stage, or merged here
            payloads = [p for ps in by_owner.values() for p in ps]
            return merger.close(dict(enumerate(from_ipc(resolved(p)) for p in payloads)), changes=False)
        calls = rnd.merging if rnd is not None else None
        if calls is None:
            owners = sorted(by_owner)
            stages: dict[int, tuple[str, bytes] | None] = dict.fromkeys(owners)
            sink = merger.stage_route() if merger.stage_route is not None else None
            if sink is not None:  # the query's only sink: the owners stage its rows themselves
                stages = {a: (actor_stage_dir(sink.stage.dir, self.cluster.members[a]), sink.schema_ipc)
                          for a in owners}
            back = self.rows_back(sink)
            if sink is not None and not back and self.fold_merges:  # nobody here needs the rows
                self._defer_merges(stages, by_owner, sink)
                return []
            futures, refs = start_calls(self.cluster.actors, [(a, "merge_closed", (self.name, stages[a], *by_owner[a]))
                                                              for a in owners], back)
            calls = (owners, futures, refs, sink, back)
        owners, futures, refs, sink, back = calls
        try:
            answers = self.cluster.gather(owners, futures, "merge_closed")
        except ActorTimeoutError:
            if rnd is not None:
                rnd.merging = calls
            raise
        if rnd is not None:
            rnd.merging = None
        # rows sent back are counted as emitted when the subscribers get them
        self._count_merged([(n, s) for n, _, s in answers], sink, emitted=not back)
        if refs is None:
            return in_window_order([windows for _, windows, _ in answers])
        self._hand_on(in_window_order([by_reference(windows, ref) for (_, windows, _), ref in zip(answers, refs, strict=True)]))
        return []

    def _deliver_oldest(self) -> None:
        rnd = self.pending.popleft()
        try:
            per_batch = self._collect(rnd)
        except ActorTimeoutError:
            self.pending.appendleft(rnd)  # a live actor is slow: its outputs come on a later call
            raise
        except Exception:
            self.pending.clear()  # the actors' state is gone (ActorLostError): nothing to wait for
            self.open.clear()
            self._due.clear()
            self._flushing.clear()
            raise
        for outs, late, closed in per_batch:
            self.deliver(outs, late)
            if closed:
                self.deliver(closed, None)

    def drain(self) -> None:
        """Deliver every deferred round, oldest first."""
        self._submit_open()
        while self.pending:
            self._deliver_oldest()
        self._flush_due()

    def collect_ready(self) -> None:
        """Deliver the oldest deferred rounds that have finished (never waits); send the
        batches held back once nothing is in flight."""
        while self.pending and self.cluster.ready(self.pending[0].futures):
            self._deliver_oldest()
        if not self.pending:
            self._submit_open()

    def queued_rows(self) -> int:
        """Input rows handed to this query and not yet run by the actors: its deferred rounds
        and the batches held back. Rows a source read wait here, not in the broker, so the
        autoscaler counts them as lag."""
        return sum(r.rows for r in list(self.pending)) + sum(it.rows for it in list(self.open))

    def oldest_futures(self) -> list[Any]:
        return list(self.pending[0].futures) if self.pending else []

    # ------------------------------------------------------------------ watermarks and state
    def on_watermark(self, wm: int) -> list[pa.RecordBatch]:
        if self.plan.aggregate is None:
            return []
        done = self._closed_at
        self._closed_at = None
        if done is not None and done[0] == wm:
            return done[1]  # the actors already advanced with the batch
        if self._no_window_ends(wm):
            return []  # nothing closes: no call
        self.drain()
        targets = self._targets()
        if self.merger is not None:
            return self._merge_closed(targets, self.cluster.call_each(targets, "close_partial", self.name, wm))
        back = self.subscribers_alone()
        futures, refs = start_calls(self.cluster.actors, [(a, "on_watermark", (self.name, wm)) for a in targets], back)
        results = self.cluster.gather(targets, futures, "on_watermark")
        if refs is not None:  # ((0, None, closed rows), their IPC) per actor
            self._hand_on([RemoteBatch(ref, n) for (_, _, n), ref in zip(results, refs, strict=True) if n])
            return []
        return _merge([from_ipc(b) for r in results for b in r], self.schema)

    def current_rows(self) -> pa.RecordBatch:
        self.drain()
        if self.merger is not None:
            return self.merger.current()
        results = self.cluster.call_each(self._targets(), "current_rows", self.name)
        batches = [from_ipc(b) for b in results]
        return pa.Table.from_batches(batches).combine_chunks().to_batches()[0] if any(
            b.num_rows for b in batches) else batches[0]


    # ------------------------------------------------------------------ checkpoints
    def snapshot(self) -> ClusterImage:
        """The barrier for this query (under the engine lock): every round sent so far is
        delivered, then each actor copies its state — Ray runs that call after every batch
        sent to the actor before it, so the copies are aligned with what was delivered."""
        self.drain()
        everyone = list(range(self.cluster.n_actors))
        if self.plan.aggregate is not None:
            self.cluster.call_each(everyone, "snapshot_take", [self.name], self.merger is not None)
        merger = None
        if self.merger is not None and hasattr(self.merger, "state"):
            merger = {int(ws): {int(a): list(t) for a, t in per.items()} for ws, per in self.merger.state.items()}
        return ClusterImage(self, everyone if self.plan.aggregate is not None else [], merger)

    def restore(self, blob: bytes, *, vnodes=None) -> None:
        """Give every actor its part of a checkpoint (the actors are in the same places: a
        replaced actor takes the index, and so the vnodes, of the one it replaces)."""
        import msgpack

        from laminardb.checkpoint.exceptions import SnapshotFormatError

        doc = msgpack.unpackb(blob, raw=False, strict_map_key=False)
        if doc.get("format") != CLUSTER_FORMAT or doc.get("version") != 1:
            raise SnapshotFormatError(f"query {self.name!r}: not a cluster state snapshot (format "
                                      f"{doc.get('format')!r} v{doc.get('version')!r})")
        parts = actor_parts(self, doc)
        self._due.clear()  # merges of closes before the state now restored
        self._flushing.clear()
        partial = self.merger is not None
        n = self.cluster.n_actors
        targets, futures = [], []
        if self.mode == "keyed":  # by vnode: the owners may have changed (Raft re-planned them)
            owner = self.cluster.routing.owner
            for a in range(self.cluster.n_actors):
                vnodes = [int(v) for v in (owner == a).nonzero()[0]]
                targets.append(a)
                futures.append(self.cluster.actors[a].restore_state.remote(self.name, parts, partial, vnodes))
        elif self.mode == "single":  # one actor holds the whole query: all of it goes there
            a = self.cluster.single_owner()
            targets, futures = [a], [self.cluster.actors[a].restore_state.remote(self.name, parts, partial, None)]
        else:  # partials are per actor, whatever rows it read: each takes its own back, and
            # after a scale-in actor a also takes the parts of the actors a + n, a + 2n, … (added up)
            targets = list(range(min(len(parts), n)))
            futures = [self.cluster.actors[a].restore_state.remote(self.name, parts[a::n], partial, None)
                       for a in targets]
        self.cluster.gather(targets, futures, "restore_state")
        if doc.get("merger") is not None and hasattr(self.merger, "state"):
            self.merger.state = {int(ws): self.merger.regroup({int(a): tuple(t) for a, t in per.items()}, n)
                                 for ws, per in doc["merger"].items()}
        self.late_dropped = int(doc.get("late_dropped", 0))


def ship(ring: ShmRing | None, batch: pa.RecordBatch, targets: list[int]) -> tuple[Any, list[int]]:
    """The batch as the actors will read it, and the ring slots it holds until they have: a
    shared-memory slice when they all run on this machine and a slot is free, else an object
    in Ray's object store."""
    if ring is not None and all(ring.readers[a] for a in targets):
        written = ring.write(batch)
        if written is not None:
            return written[0], [written[1]]
    import ray

    return ray.put(to_ipc_array(batch)), []


#: the envelope of a distributed query's snapshot: one operator snapshot per actor
CLUSTER_FORMAT = "laminardb.cluster_state"


class ClusterImage:
    """A distributed query's checkpoint copy: the actors hold their parts (taken in the
    barrier). Off the engine lock, either each actor writes its own part as a file of the
    checkpoint (``write_parts``: the head handles no state byte) or ``encode`` collects the
    parts into the head's file."""

    def __init__(self, op: DistributedOperator, actors: list[int], merger: dict | None) -> None:
        self.op = op
        self.actors = actors
        self.merger = merger
        self.late_dropped = op.late_dropped

    def _doc(self, **parts) -> bytes:
        import msgpack

        return msgpack.packb({"format": CLUSTER_FORMAT, "version": 1, "mode": self.op.mode, **parts,
                              "merger": self.merger, "late_dropped": self.late_dropped}, use_bin_type=True)

    def encode(self, vnodes=None) -> bytes:
        blobs = self.op.cluster.call_each(self.actors, "snapshot_encode", self.op.name) if self.actors else []
        return self._doc(actors=blobs)

    def write_parts(self, epoch_dir: Path, name: str) -> tuple[bytes, dict[str, dict[str, int]]] | None:
        """Each actor writes its part as ``<name>.part-<actor>`` beside the head's file
        ``name`` in checkpoint directory ``epoch_dir``. Returns the head's file (which names
        the parts, relative to the checkpoints root) and each part's manifest entry, so the
        manifest verifies them and retention keeps them as long as a checkpoint names them;
        None when an actor cannot write the database's directory (``encode`` then)."""
        root = self.op.checkpoint_root
        if root is None or not self.op.actors_write_parts or not self.actors or not self.op.parts_writable():
            return None
        names = {a: f"{name}.part-{a}" for a in self.actors}
        paths = {a: os.path.normpath(epoch_dir / names[a]) for a in self.actors}
        futures = [self.op.cluster.actors[a].snapshot_write.remote(self.op.name, paths[a]) for a in self.actors]
        metas = self.op.cluster.gather(self.actors, futures, "snapshot_write")
        files = {names[a]: m for a, m in zip(self.actors, metas, strict=True) if m is not None}
        rel = [None if m is None else os.path.relpath(paths[a], root) for a, m in zip(self.actors, metas, strict=True)]
        return self._doc(actors=None, actor_files=rel), files


def actor_parts(op, doc: dict) -> list:
    """The actors' parts of a checkpoint envelope, as the actors take them: the bytes, or,
    for parts the actors wrote themselves (``ClusterImage.write_parts``), their paths when
    every actor can read the database's directory now (else the head reads them)."""
    files = doc.get("actor_files")
    if files is None:
        return doc["actors"]
    if op.checkpoint_root is None:
        from laminardb.checkpoint.exceptions import SnapshotFormatError

        raise SnapshotFormatError(f"query {op.name!r}: its checkpoint names files the actors wrote, "
                                  "but this database has no directory to read them from")
    paths = [None if f is None else os.path.join(op.checkpoint_root, f) for f in files]
    if op.parts_writable():
        return paths
    return [None if p is None else Path(p).read_bytes() for p in paths]


def _merge(batches: list[pa.RecordBatch], schema: pa.Schema) -> list[pa.RecordBatch]:
    """One batch per emission, as the embedded engine delivers."""
    batches = [b for b in batches if b.num_rows]
    if len(batches) <= 1:
        return batches
    return pa.Table.from_batches(batches, schema=schema).combine_chunks().to_batches()
