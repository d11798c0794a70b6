"""``DistributedPlanOperator``: a plan tree (joins, OVER, Top-N, subqueries) whose stateful
operators run on the actors, each partitioned by its own key.

Entry point: ``DistributedPlanOperator(name, plan, cluster)``, the Delta mode's stand-in for
``PlanOperator`` (same contract: ``process_input``, ``on_watermark``, ``snapshot``/``restore``,
``current_rows``). The head keeps the tree's shape and runs its stateless nodes (filters,
projections, UNION ALL); every stateful node — a join, a keyed aggregate, Top-N, OVER — is a
``_RemoteNode`` whose rows are split by the owner of each row's vnode under *that node's* key
(a join: the left keys for its left input, the right keys for its right one) and run on the
owning actor's copy of the same tree. What a node emits comes back and moves on to its parent,
which routes it again by its own key: rows move actor → actor, through the head, wherever
consecutive keys differ. Nodes without a key (a global aggregate, an unpartitioned OVER) run
on the owner of vnode 0.

Why a node and not a whole tree per actor: each node's state then sits exactly on the actor
that owns its key's vnode, so the actors' snapshots split by vnode (every operator hashes its
own key) and a rescale moves each node's state with its vnodes, with no per-tree key analysis.
The cost is a round trip per stateful node per batch; fusing nodes whose keys agree (q4's
join and its MAX grouped by the join key) is the next step.

Watermarks keep the embedded order: on each one, the nodes advance children first (post-order),
so a window a child closes reaches its parent before the parent sees the watermark.
"""

from __future__ import annotations

import pyarrow as pa

from laminardb.cluster.distributed_operator import CLUSTER_FORMAT, ClusterImage, ship
from laminardb.cluster.routing import split_by_owner
from laminardb.cluster.wire import from_ipc, to_ipc
from laminardb.operators.plan_operator import PlanOperator, _Join, _Node, _Stage, _TopN
from laminardb.sql.plan import QueryPlan
from laminardb.sql.watermarks import NO_WATERMARK


def _keys_of(node: _Node):
    """``(port, batch) -> key arrays`` of a stateful node and whether it has a key at all (a
    node without one runs on one actor), or None for a node the head runs itself (stateless)."""
    if isinstance(node, _Stage):
        agg = node.plan.aggregate
        if agg is None:
            return None
        exprs = list(agg.keys)
        return (lambda port, batch: [e.evaluate(batch) for e in exprs]), bool(exprs)
    if isinstance(node, _Join):
        keys = node.op.keys
        return (lambda port, batch: [k.evaluate(batch) for k in keys[port]]), bool(keys[0])
    if isinstance(node, _TopN):  # Top-N and OVER: their PARTITION BY columns
        cols = list(node.op.node.partition)
        return (lambda port, batch: [batch.column(i) for i in cols]), bool(cols)
    return None


class _RemoteNode(_Node):
    """A stateful node of the tree, run on the actors (see the module docstring)."""

    def __init__(self, owner: DistributedPlanOperator, index: int, local: _Node, keys, keyed: bool) -> None:
        self.owner = owner
        self.index = index
        self.op = local.op  # schema and counters; the state lives on the actors
        self.keys = keys
        self.keyed = keyed

    def _targets(self) -> list[int]:
        """The actors holding this node's state: all, or the owner of vnode 0 (no key)."""
        cluster = self.owner.cluster
        return list(range(cluster.n_actors)) if self.keyed else [cluster.single_owner()]

    def push(self, batch: pa.RecordBatch, port: int, wm: int) -> list[pa.RecordBatch]:
        cluster = self.owner.cluster
        n = cluster.n_actors
        if not self.keyed or n == 1:
            parts = {self._targets()[0]: batch}
        else:
            split = split_by_owner(batch, self.keys(port, batch), cluster.routing.owner, n)
            parts = {a: p for a, p in enumerate(split) if p.num_rows}
        targets = sorted(parts)
        futures, slots = [], []
        try:
            for a in targets:
                data, used = ship(self.owner.ring, parts[a], [a])  # shared memory on this machine
                slots += used
                futures.append(cluster.actors[a].plan_push.remote(self.owner.name, self.index, port, wm, data))
            return self._outputs(cluster.gather(targets, futures, "plan_push"))
        finally:
            for slot in slots:
                self.owner.ring.release(slot)

    def on_watermark(self, wm: int) -> list[pa.RecordBatch]:
        cluster = self.owner.cluster
        return self._outputs(cluster.call_each(self._targets(), "plan_watermark", self.owner.name, self.index, wm))

    def _outputs(self, results: list[tuple[list[bytes], int]]) -> list[pa.RecordBatch]:
        """Each actor's (emitted batches, rows it dropped as late); the drops are counted here."""
        self.owner.late_dropped += sum(late for _, late in results)
        out = [from_ipc(b) for outs, _ in results for b in outs]
        return [b for b in out if b.num_rows]


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


class DistributedPlanOperator:
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
        self.tree = PlanOperator(plan, place=self._place)
        self.schema = self.tree.schema
        self.late_dropped = 0  # rows the nodes dropped as late, as the actors report them
        self.agg = _ActorsState(self)  # what metrics() reads: state rows and bytes on the actors
        #: the actor count of the last snapshot (None: none since the state was loaded); a
        #: delta is taken only against the same actors
        self._snapshot_actors: int | None = None

    def _place(self, index: int, node: _Node) -> _Node | None:
        keys = _keys_of(node)
        return None if keys is None else _RemoteNode(self, index, node, *keys)

    # ------------------------------------------------------------------ the operator contract
    def process(self, batch, wm_before: int = NO_WATERMARK, **_ignored):
        return self.process_input(self.plan.inputs[0], batch, wm_before)

    def process_input(self, name: str, batch, wm_before: int = NO_WATERMARK):
        return self.tree.process_input(name, batch, wm_before)  # RemoteRows: fetched first

    def on_watermark(self, wm: int) -> list[pa.RecordBatch]:
        return self.tree.on_watermark(wm)

    def current_rows(self) -> pa.RecordBatch:
        root = self.tree.root
        if not isinstance(root, _RemoteNode):
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
            pieces.append(doc["actors"])
        owner = self.cluster.routing.owner
        targets = list(range(self.cluster.n_actors))
        futures = [self.cluster.actors[a].restore_chain.remote(self.name, pieces,
                                                               [int(v) for v in (owner == a).nonzero()[0]])
                   for a in targets]
        self.cluster.gather(targets, futures, "restore_chain")
        self.late_dropped = int(doc.get("late_dropped", 0))
        self._snapshot_actors = None


def node_outputs(tree: PlanOperator, index: int, port: int, wm: int,
                 batch: pa.RecordBatch) -> tuple[list[bytes], int]:
    """An actor's side of ``_RemoteNode.push``: node ``index`` of its own copy of the tree
    takes the rows it owns; what it emits goes back to the head (never up this tree), with
    the rows it dropped as late."""
    node = tree.nodes[index]
    before = node.op.late_dropped
    outs = [to_ipc(b) for b in node.push(batch, port, wm) if b.num_rows]
    return outs, node.op.late_dropped - before


def node_watermark(tree: PlanOperator, index: int, wm: int) -> tuple[list[bytes], int]:
    return [to_ipc(b) for b in tree.nodes[index].on_watermark(wm) if b.num_rows], 0


def tree_state(tree: PlanOperator) -> tuple[int, int]:
    """An actor's copy of a tree: its state rows and bytes (``_ActorsState``)."""
    return int(tree.agg.state_groups), int(tree.agg.nbytes)


__all__ = ["DistributedPlanOperator", "node_outputs", "node_watermark", "tree_state"]
