"""The actors' side of a plan tree in the Delta mode: every actor runs the whole tree over the
rows it holds, and a stateful node's rows go straight to the owner of their key's vnode.

Entry point: ``ActorExchange(tree, me, owner, n_actors, kept)``, built by the actor for one
call (``ReactorActorImpl.plan_input`` / ``plan_deliver`` / ``plan_watermark``). Stateless
nodes (filters, projections, UNION ALL) run at once, where the rows are. At a stateful node
(join, keyed aggregate, Top-N, OVER) the rows are split by the owner of each row's vnode under
*that node's* key (``split_by_owner``, as ``_keys_of`` says): the parts for other actors go
into Ray's object store from here and only their references go back to the head, which hands
them to the owners in its next step (``distributed_plan.py``) — the head never decodes, splits
or copies a row out of the store (a part of at most ``INLINE_BYTES`` rides inside the answer
as opaque IPC bytes instead: cheaper than a reference for a handful of rows).

Why this actor's own part waits for the next step too (``kept``): the owner then takes every
sender's part of a node's input in sender order, the order the rows had when the head
concatenated them, so order-sensitive nodes (Top-N ties, LAG/LEAD, FIRST_VALUE) see the rows
as before. On one actor nothing is split or kept: the whole tree runs in one call.
"""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa

from laminardb.cluster.routing import split_by_owner
from laminardb.cluster.wire import from_ipc, to_ipc_array
from laminardb.operators.plan_operator import PlanOperator, _Join, _Node, _Stage, _TopN


def _keys_of(node: _Node):
    """``(port, batch) -> key arrays`` of a stateful node and whether it has a key at all (a
    node without one runs on the owner of vnode 0), or None for a stateless node."""
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


def stateful_nodes(tree: PlanOperator) -> list[tuple[int, bool]]:
    """(index, keyed) of the tree's stateful nodes, children before parents."""
    return [(i, keys[1]) for i, node in enumerate(tree.nodes) if (keys := _keys_of(node)) is not None]


def watermark_inert(node: _Node) -> bool:
    """Whether no watermark can make ``node`` emit a row or drop state: a join with neither a
    time interval nor a TTL (``JoinOperator.on_watermark`` returns at once). The head sends
    such a node no watermark round: on Kafka → Nexmark q20 or q3 that was one call per actor
    per poll, for nothing."""
    from laminardb.operators.join import JoinOperator

    if isinstance(node, _Join) and type(node.op) is JoinOperator:
        return node.op.join.interval is None and node.op.join.ttl is None
    return False


#: a message between steps: (target actor, node index, port, sender, payload) — the payload
#: Arrow IPC (an ObjectRef, or inline when small: ``INLINE_BYTES``), or (its own part) an int
#: naming a batch in the target's ``kept``
Message = tuple[int, int, int, int, Any]

_kept_ids = itertools.count()  # names of the parts an actor keeps for itself

#: a part up to this size travels inside the answer and the next call (Ray inlines such small
#: values anyway) instead of as an object reference the head would borrow: for selective
#: filters before a join, most parts are a few rows and the reference protocol costs more
INLINE_BYTES = 64 * 1024


class ActorExchange:
    """One call's run of an actor's copy of a tree (see the module docstring)."""

    def __init__(self, tree: PlanOperator, me: int, owner, n_actors: int, kept: dict[int, pa.RecordBatch]) -> None:
        self.tree = tree
        self.me = me
        self.owner = owner
        self.n = n_actors
        self.kept = kept  # this actor's own parts, by id, until its next step takes them
        self.index = {id(node): i for i, node in enumerate(tree.nodes)}
        self.sent: list[Message] = []
        self.out: list[pa.RecordBatch] = []  # what the root emitted
        self.late_before = tree.late_dropped

    # ------------------------------------------------------------------ what a call runs
    def enter(self, name: str, batch: pa.RecordBatch, wm: int) -> None:
        """Rows of input ``name`` this actor holds: into every scan of it."""
        for node, port in self.tree.scan_targets(name):
            self._route(node, port, batch, wm)

    def deliver(self, messages: list[tuple[int, int, Any]], wm: int) -> int:
        """Rows routed to this actor, as (node, port, payload) in the order to run them; the
        parts for one (node, port) run as one batch. Returns how many rows came in."""
        import ray

        groups: list[tuple[int, int, list]] = []
        for index, port, payload in messages:
            if not groups or groups[-1][:2] != (index, port):
                groups.append((index, port, []))
            groups[-1][2].append(payload)
        refs = [p for _, _, ps in groups for p in ps if isinstance(p, ray.ObjectRef)]
        fetched = dict(zip(map(id, refs), ray.get(refs), strict=True)) if refs else {}
        rows = 0
        for index, port, payloads in groups:
            batches = [self.kept.pop(p) if isinstance(p, int) else from_ipc(fetched.get(id(p), p)) for p in payloads]
            batch = batches[0] if len(batches) == 1 else _concat(batches)
            rows += batch.num_rows
            if batch.num_rows:
                self._run(self.tree.nodes[index], port, batch, wm)
        return rows

    def watermark(self, index: int, wm: int, before: int) -> None:
        """Node ``index`` advances to ``wm``; what it closes goes on up at ``before`` (the
        tree's watermark before this one, as ``PlanOperator.on_watermark`` pushes it)."""
        node = self.tree.nodes[index]
        self._emit(node, node.on_watermark(wm), before)

    def result(self) -> tuple[list[Message], list[pa.RecordBatch], int]:
        """(messages for the next step, the rows the root emitted, rows dropped late)."""
        return self.sent, [b for b in self.out if b.num_rows], self.tree.late_dropped - self.late_before

    # ------------------------------------------------------------------ moving rows
    def _route(self, node: _Node, port: int, batch: pa.RecordBatch, wm: int) -> None:
        """Rows reaching ``node``: a stateless node runs them here; a stateful one on the
        owners of their key's vnodes (this actor's own part waits for the next step)."""
        if batch.num_rows == 0:
            return
        keys = _keys_of(node)
        if keys is None or self.n == 1:
            self._run(node, port, batch, wm)
            return
        key_fn, keyed = keys
        if keyed:
            parts = split_by_owner(batch, key_fn(port, batch), self.owner, self.n)
        else:
            parts = [batch if a == int(self.owner[0]) else None for a in range(self.n)]
        index = self.index[id(node)]
        for target, part in enumerate(parts):
            if part is None or part.num_rows == 0:
                continue
            if target == self.me:
                payload: Any = next(_kept_ids)
                self.kept[payload] = part
            else:
                payload = payload_of(part)
            self.sent.append((target, index, port, self.me, payload))

    def _run(self, node: _Node, port: int, batch: pa.RecordBatch, wm: int) -> None:
        self._emit(node, node.push(batch, port, wm), wm)

    def _emit(self, node: _Node, produced: list[pa.RecordBatch], wm: int) -> None:
        for b in produced:
            if not b.num_rows:
                continue
            if node.parent is None:
                self.out.append(b)
            else:
                self._route(node.parent, node.port, b, wm)


def payload_of(part: pa.RecordBatch) -> Any:
    """Rows for another actor: IPC bytes inside the answer up to ``INLINE_BYTES``, else an
    object reference to them in Ray's object store (the head passes it on unread)."""
    import ray

    payload = to_ipc_array(part)
    return payload if payload.nbytes <= INLINE_BYTES else ray.put(payload)


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    combined = pa.Table.from_batches(batches).combine_chunks().to_batches()
    return combined[0] if combined else batches[0]


__all__ = ["ActorExchange", "Message", "payload_of", "stateful_nodes", "watermark_inert"]
