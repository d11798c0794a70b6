"""``DistributedPlanOperator``: a plan tree (joins, OVER, Top-N, subqueries) whose nodes run
on the actors, each stateful one partitioned by its own key; rows move actor → actor.

Entry point: ``DistributedPlanOperator(name, plan, cluster)``, the Delta mode's stand-in for
``PlanOperator`` (same contract: ``process_input``, ``on_watermark``, ``snapshot``/``restore``,
``current_rows``). Every actor holds a copy of the whole tree and runs it over the rows it
holds (``exchange.ActorExchange``): stateless nodes where the rows are; each stateful node — a
join, a keyed aggregate, Top-N, OVER — on the owner of each row's vnode under *that node's* key
(a join: the left keys for its left input, the right keys for its right one); a node without a
key on the owner of vnode 0. Where an actor's rows belong to another actor, it puts them in
Ray's object store itself and answers with their references.

The head is only the scheduler of those messages: a step is one call per actor with work,
carrying the (node, port, references) addressed to it; the answers name the next step's
messages, until none is left. It never decodes, splits or ships a row between nodes — only
the root's output comes back (for subscribers, views and sinks), and not even that when the
tree's only consumer is an exactly-once sink: then each actor stages its root rows for it. Rows the client inserts go
to the actors once (each runs a contiguous share), Kafka rows (``RemoteRows``) start on the
actors that read them. Why the head still schedules rather than the actors calling each
other: the head then knows when a batch or a watermark has fully propagated, which the
watermark order and the checkpoint barrier (``snapshot_take`` after every call sent) rely on,
and two single-threaded actors never wait on each other.

Why each node's state stays partitioned by its own key: the actors' snapshots split by vnode
(every operator hashes its own key), so a rescale moves each node's state with its vnodes with
no per-tree key analysis — exactly as when the head routed the rows.

Watermarks keep the embedded order: the stateful nodes advance children first (post-order),
and what a node closes has reached its parent before the parent sees the watermark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from laminardb.checkpoint.actor_stages import actor_stage_dir
from laminardb.cluster.distributed_operator import (
    CLUSTER_FORMAT,
    ClusterImage,
    RowsByReference,
    SnapshotParts,
    actor_parts,
    ship,
    start_calls,
)
from laminardb.cluster.exchange import stateful_nodes, watermark_inert
from laminardb.cluster.remote_rows import RemoteBatch
from laminardb.cluster.routing import range_slice
from laminardb.cluster.wire import from_ipc
from laminardb.operators.plan_operator import PlanOperator
from laminardb.sql.plan import QueryPlan
from laminardb.sql.watermarks import NO_WATERMARK


@dataclass
class ExchangeCounts:
    """What the head did for a tree (tests read it: rows never pass through the head)."""

    steps: int = 0  # rounds of calls
    calls: int = 0  # actor calls
    messages: int = 0  # (node, port, references) handed from one actor to another
    root_rows: int = 0  # rows the head decoded: the root's output only
    root_bytes: int = 0  # their Arrow IPC bytes
    root_rows_staged: int = 0  # root rows the actors staged for the only sink themselves
    root_rows_by_ref: int = 0  # root rows handed to subscribers by reference, not decoded here


class _ActorsState:
    """What ``metrics()`` reads of a tree's state (``state_groups``, ``nbytes``): the sums over
    the actors' copies, asked once per metrics read (cached briefly; None if an actor does not
    answer in time — metrics never wait on a paused actor, nor mark a busy one slow)."""

    __slots__ = ("_op", "_at", "_sums")

    def __init__(self, op: DistributedPlanOperator) -> None:
        self._op, self._at, self._sums = op, -1.0, (None, None)

    def _read(self) -> tuple[int | None, int | None]:
        import time

        if time.monotonic() - self._at > 0.5:
            got = self._op.cluster.probe("plan_state", self._op.name, record=False)
            known = None not in got
            self._sums = (sum(r for r, _ in got), sum(b for _, b in got)) if known else (None, None)
            self._at = time.monotonic()
        return self._sums

    @property
    def state_groups(self) -> int | None:
        return self._read()[0]

    @property
    def nbytes(self) -> int | None:
        return self._read()[1]


class DistributedPlanOperator(SnapshotParts, RowsByReference):
    """See the module docstring (an ``engine.contracts.Operator`` over a plan tree)."""

    accepts_next_watermark = False  # a tree takes the query's root watermark (``QueryPlan.tree``)
    #: each actor checkpoints only its joins' changes since the last checkpoint (``state_chains``)
    incremental = True

    mode = "keyed"  # checkpoints split by vnode (``ClusterImage``)
    merger = None

    def __init__(self, name: str, plan: QueryPlan, cluster, *, ring=None) -> None:
        self.name = name
        self.plan = plan
        self.cluster = cluster
        self.ring = ring  # the connection's shared-memory ring (None: Ray's object store)
        self.tree = PlanOperator(plan)  # the shape and schemas; the rows and state are on the actors
        self.stateful = stateful_nodes(self.tree)  # (node index, keyed), children first
        #: the stateful nodes a watermark can change (the others get no watermark round)
        self.advancing = [(i, keyed) for i, keyed in self.stateful if not watermark_inert(self.tree.nodes[i])]
        self.schema = self.tree.schema
        self.wm = NO_WATERMARK
        self.late_dropped = 0  # rows the nodes dropped as late, as the actors report them
        self.counts = ExchangeCounts()
        self.agg = _ActorsState(self)  # what metrics() reads: state rows and bytes on the actors
        #: the actor count of the last snapshot (None: none since the state was loaded); a
        #: delta is taken only against the same actors
        self._snapshot_actors: int | None = None
        #: set by the backend: the query's only consumer when that is an exactly-once sink the
        #: actors may stage for (``staged_sink.stage_route``), and how to count rows they staged
        self.stage_route: Callable[[], Any] | None = None
        self.emitted_elsewhere: Callable[[int], None] = lambda rows: None

    # ------------------------------------------------------------------ the operator contract
    def process(self, batch, wm_before: int = NO_WATERMARK, **_ignored):
        return self.process_input(self.plan.inputs[0], batch, wm_before)

    def process_input(self, name: str, batch, wm_before: int = NO_WATERMARK):
        """Rows of input ``name``: Kafka rows (``RemoteRows``) start on the actors that read
        them; rows from the client go to every actor once, each running a contiguous share."""
        if hasattr(batch, "refs_read_by"):
            readers = sorted({a for a, _ in batch.wholes})
            first = [(a, "plan_input", (self.name, name, wm_before, "refs", batch.refs_read_by(a)))
                     for a in readers]
            return self._steps(first, wm_before), None
        n = self.cluster.n_actors
        shares = [range_slice(batch.num_rows, a, n) for a in range(n)]
        targets = [a for a, (start, end) in enumerate(shares) if end > start]
        if not targets:
            return [], None
        data, slots = ship(self.ring, batch, targets)  # shared memory on this machine
        try:
            first = [(a, "plan_input", (self.name, name, wm_before, "range", data)) for a in targets]
            return self._steps(first, wm_before), None
        finally:
            for slot in slots:
                self.ring.release(slot)

    def on_watermark(self, wm: int) -> list[pa.RecordBatch]:
        """The stateful nodes advance children first; what each closes moves on up (at the
        previous watermark, as embedded) before the next node advances. On one actor the
        whole tree advances in one call. Nodes no watermark can change (``watermark_inert``)
        are skipped, and a tree of only those gets no call at all."""
        before, out = self.wm, []
        if not self.advancing:
            pass  # no node a watermark can change: nothing to send
        elif self.cluster.n_actors == 1:
            out = self._steps([(0, "plan_watermark", (self.name, None, wm, before))], before)
        else:
            everyone, single = list(range(self.cluster.n_actors)), [self.cluster.single_owner()]
            for index, keyed in self.advancing:
                calls = [(a, "plan_watermark", (self.name, index, wm, before)) for a in (everyone if keyed else single)]
                out += self._steps(calls, before)
        self.wm = max(self.wm, wm)
        return out

    def _steps(self, calls: list[tuple[int, str, tuple]], wm: int) -> list[pa.RecordBatch]:
        """Run ``calls`` (actor, method, args), then hand each answer's messages to their
        target actors, step after step, until no rows are left between nodes. Each target
        takes its messages by node, port and sender (``exchange`` says why). Returns the
        root's output — none when the actors stage it for the query's only sink themselves
        (``checkpoint/actor_stages.py``): each step's root rows go to the stage file of the
        actor that made them, and the head learns their count. With subscribers beside that
        sink, or subscribers alone, the actors also return the rows as a value of their own,
        which the head hands to the subscribers, by reference (``RemoteBatch``): it never
        decodes them."""
        out: list[Any] = []
        sink = self.stage_route() if self.stage_route is not None else None
        back = self.rows_back(sink)
        while calls:
            targets = [a for a, _, _ in calls]
            # (metadata, rows) per call with ``back``: only the metadata is fetched here
            futures, refs = start_calls(self.cluster.actors, [(a, m, (*args, self._stage_of(sink, a)))
                                                              for a, m, args in calls], back)
            rows_refs = refs or [None] * len(futures)
            results = self.cluster.gather(targets, futures, calls[0][1])
            self.counts.steps += 1
            self.counts.calls += len(calls)
            inbox: dict[int, list] = {}
            staged = 0
            for (sent, data, late, rows_staged), rows_ref in zip(results, rows_refs, strict=True):
                self.late_dropped += late
                staged += rows_staged
                if rows_ref is not None:  # data: the root's row count; the rows stay in rows_ref
                    if data:
                        self.counts.root_rows_by_ref += data
                        out.append(RemoteBatch(rows_ref, data))
                elif data is not None:
                    batch = from_ipc(data)
                    self.counts.root_rows += batch.num_rows
                    self.counts.root_bytes += len(data)
                    if batch.num_rows:
                        out.append(batch)
                for target, index, port, sender, payload in sent:
                    inbox.setdefault(target, []).append((index, port, sender, payload))
                self.counts.messages += len(sent)
            if staged:
                self.counts.root_rows_staged += staged
                sink.written_by_actors(staged)
                if not back:  # else counted as the subscribers get them
                    self.emitted_elsewhere(staged)
            calls = [(a, "plan_deliver", (self.name, wm, [(i, p, load) for i, p, _, load in
                                                          sorted(msgs, key=lambda m: m[:3])]))
                     for a, msgs in sorted(inbox.items())]
        if back:
            self.emit_to_subscribers(out)
            return []
        return out

    def _stage_of(self, sink, actor: int) -> tuple[str, bytes] | None:
        """Where ``actor`` stages the root's rows for ``sink`` (None: it sends them here)."""
        if sink is None:
            return None
        return actor_stage_dir(sink.stage.dir, self.cluster.members[actor]), sink.schema_ipc

    def current_rows(self) -> pa.RecordBatch:
        if (len(self.tree.nodes) - 1) not in {i for i, _ in self.stateful}:  # the root holds no rows
            return self.tree.current_rows()
        results = self.cluster.call_each(list(range(self.cluster.n_actors)), "current_rows", self.name)
        batches = [from_ipc(b) for b in results]
        nonempty = [b for b in batches if b.num_rows]
        if not nonempty:
            return batches[0]
        return pa.Table.from_batches(nonempty).combine_chunks().to_batches()[0]

    def rows_of(self, g: pa.RecordBatch) -> pa.RecordBatch:
        return self.tree.rows_of(g)

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self) -> ClusterImage:
        """Each actor copies its tree's state (the barrier: Ray runs it after every call the
        head sent that actor before); ``ClusterImage.encode`` collects the parts later."""
        everyone = list(range(self.cluster.n_actors))
        self.cluster.call_each(everyone, "snapshot_take", [self.name], False)
        self._snapshot_actors = self.cluster.n_actors
        return ClusterImage(self, everyone, None)

    def snapshot_delta(self) -> ClusterImage | None:
        """Each actor's changes since the last snapshot (its joins' deltas, whole state for
        the other nodes); None after a restore or a rescale: a whole snapshot comes first."""
        if self._snapshot_actors != self.cluster.n_actors:
            return None
        everyone = list(range(self.cluster.n_actors))
        self.cluster.call_each(everyone, "snapshot_take", [self.name], False, True)
        return ClusterImage(self, everyone, None)

    def restore(self, blob: bytes, *, vnodes=None) -> None:
        self.restore_chain([blob])

    def restore_chain(self, blobs: list[bytes], *, vnodes=None) -> None:
        """Every actor loads, from every part of every checkpoint of the chain, the state of
        the vnodes it owns now: each node keeps the rows whose own key hashes to them — where
        its rows are routed from now on."""
        import msgpack

        from laminardb.checkpoint.exceptions import SnapshotFormatError

        pieces, doc = [], {}
        for blob in blobs:
            doc = msgpack.unpackb(blob, raw=False, strict_map_key=False)
            if doc.get("format") != CLUSTER_FORMAT or doc.get("version") != 1:
                raise SnapshotFormatError(f"query {self.name!r}: not a cluster state snapshot (format "
                                          f"{doc.get('format')!r} v{doc.get('version')!r})")
            pieces.append(actor_parts(self, doc))
        owner = self.cluster.routing.owner
        targets = list(range(self.cluster.n_actors))
        futures = [self.cluster.actors[a].restore_chain.remote(self.name, pieces,
                                                               [int(v) for v in (owner == a).nonzero()[0]])
                   for a in targets]
        self.cluster.gather(targets, futures, "restore_chain")
        self.late_dropped = int(doc.get("late_dropped", 0))
        self._snapshot_actors = None


def tree_state(tree: PlanOperator) -> tuple[int, int]:
    """An actor's copy of a tree: its state rows and bytes (``_ActorsState``)."""
    return int(tree.agg.state_groups), int(tree.agg.nbytes)


__all__ = ["DistributedPlanOperator", "ExchangeCounts", "tree_state"]
