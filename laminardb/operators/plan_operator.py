"""Run a query's whole plan tree (joins, UNION ALL, subqueries) as one operator of the reactor.

Entry point: ``PlanOperator(plan)`` for a ``QueryPlan`` whose ``child`` is a tree. It keeps the
contract of ``QueryOperator`` — ``process(batch, wm_before) -> (outputs, late)``,
``on_watermark(wm)``, ``snapshot()``/``restore(blob, *, vnodes=None)``, ``current_rows()`` — and
adds ``process_input(name, batch, wm_before)`` for a query with several inputs: the reactor
says which relation a batch comes from, and the batch enters the tree at every scan of it
(a self-join reads one relation twice). Watermarks are the query's root watermark (the
minimum over its inputs, kept by the reactor): each node maps it to what it needs, so the
reactor applies no map itself (it knows a tree by ``QueryPlan.tree``).

Physical nodes: a ``QueryOperator`` per SELECT block, a ``JoinOperator`` per join, a filter
per pushed-down conjunct, a pass-through per UNION ALL. Output moves up the tree at once, in
the call that produced it. On a watermark, children go before their parent (post-order), so a
window closed below reaches the operator above before that operator sees the watermark.

Snapshot: one blob (kind ``"plan"``) whose ``children`` table holds, in tree order, the blob of
every stateful node — each encoded with the same vnode subset, so the split by vnode holds.
"""

from __future__ import annotations

import msgpack
import numpy as np
import pyarrow as pa

from laminardb.operators.asof_join import AsofJoinOperator
from laminardb.operators.join import JoinOperator
from laminardb.operators.lookup_jdbc import ExternalLookupJoinOperator
from laminardb.operators.lookup_join import LookupJoinOperator
from laminardb.operators.over import OverOperator
from laminardb.operators.over_changelog import OverChangelogOperator
from laminardb.operators.query_operator import QueryOperator
from laminardb.operators.snapshot import (
    DEFAULT_VNODES,
    FORMAT,
    SNAPSHOT_VERSION,
    _ipc,
    decode,
    mismatch,
)
from laminardb.operators.topn import TopNOperator
from laminardb.sql.expressions import evaluate_mask
from laminardb.sql.plan import (
    WEIGHT,
    AsofJoin,
    ExternalLookupJoin,
    Filter,
    Join,
    LookupJoin,
    Over,
    QueryPlan,
    Scan,
    TopN,
    UnionAll,
)
from laminardb.sql.watermarks import NO_WATERMARK


class _Node:
    parent: _Node | None = None
    port: int = 0
    children: list

    def push(self, batch: pa.RecordBatch, port: int, wm: int) -> list[pa.RecordBatch]:
        raise NotImplementedError

    def on_watermark(self, wm: int) -> list[pa.RecordBatch]:
        return []


class _Stage(_Node):
    def __init__(self, plan: QueryPlan) -> None:
        self.plan = plan
        self.op = QueryOperator(plan)

    def push(self, batch, port, wm):
        outs, _late = self.op.process(batch, self.plan.input_watermark(wm))  # late rows: counted by op
        return outs

    def on_watermark(self, wm):
        return self.op.on_watermark(self.plan.input_watermark(wm))


class _Filter(_Node):
    def __init__(self, node: Filter) -> None:
        self.pred = node.predicate

    def push(self, batch, port, wm):
        mask = evaluate_mask(self.pred, batch)
        if mask.all():
            return [batch]
        return [batch.filter(pa.array(mask))] if mask.any() else []


class _Join(_Node):
    """A two-input join: ``JoinOperator``, ``AsofJoinOperator`` (ASOF, temporal) or
    ``LookupJoinOperator``; all take (port, batch, root watermark)."""

    def __init__(self, node: Join | AsofJoin | LookupJoin | ExternalLookupJoin) -> None:
        if isinstance(node, ExternalLookupJoin):
            self.op = ExternalLookupJoinOperator(node)
        elif isinstance(node, AsofJoin):
            self.op = AsofJoinOperator(node)
        elif isinstance(node, LookupJoin):
            self.op = LookupJoinOperator(node)
        else:
            self.op = JoinOperator(node)

    def push(self, batch, port, wm):
        return self.op.process(port, batch, wm)

    def on_watermark(self, wm):
        return self.op.on_watermark(wm)


class _TopN(_Node):
    """A Top-N / deduplication (``TopNOperator``) or LAG/LEAD (``OverOperator``) node."""

    def __init__(self, node: TopN | Over) -> None:
        if isinstance(node, TopN):
            self.op = TopNOperator(node)
        else:
            self.op = OverChangelogOperator(node) if node.changelog else OverOperator(node)

    def push(self, batch, port, wm):
        return self.op.process(batch, wm)

    def on_watermark(self, wm):
        return self.op.on_watermark(wm)


class _Union(_Node):
    def __init__(self, node: UnionAll) -> None:
        self.changelog = node.changelog
        self.in_changelog = [c.changelog for c in node.inputs]
        self.schema = node.schema.append(pa.field(WEIGHT, pa.int64())) if self.changelog else node.schema

    def push(self, batch, port, wm):
        cols = list(batch.columns)
        if self.changelog and not self.in_changelog[port]:
            cols.append(pa.array(np.ones(batch.num_rows, np.int64)))
        return [pa.RecordBatch.from_arrays(cols, schema=self.schema)]


class PlanOperator:
    """Stateful executor of a query whose input is a plan tree; see the module docstring."""

    accepts_next_watermark = False  # the reactor hands over the query's root watermark, unmapped

    def __init__(self, plan: QueryPlan, *, place=None) -> None:
        """``place(index, node) -> node | None``: a stand-in for a node (the Delta mode runs
        stateful nodes on actors: ``cluster/distributed_plan.py``); None keeps it here."""
        self.plan = plan
        self.scans: dict[str, list[tuple[_Node, int]]] = {}
        self.nodes: list[_Node] = []  # post-order: children before parents
        self.root = self._build(plan)
        if place is not None:
            for i, node in enumerate(list(self.nodes)):
                stand_in = place(i, node)
                if stand_in is not None:
                    self._replace(node, stand_in)
        self.schema = self.root.op.schema
        self.wm = NO_WATERMARK
        self.agg = _TreeState(self)  # what metrics() reads of a query's state (rows, bytes)

    def _build(self, node) -> _Node:
        if isinstance(node, QueryPlan):
            phys: _Node = _Stage(node)
        elif isinstance(node, Filter):
            phys = _Filter(node)
        elif isinstance(node, Join | AsofJoin | LookupJoin | ExternalLookupJoin):
            phys = _Join(node)
        elif isinstance(node, UnionAll):
            phys = _Union(node)
        elif isinstance(node, TopN | Over):
            phys = _TopN(node)
        else:  # pragma: no cover - the planner builds only these
            raise TypeError(f"no operator for plan node {type(node).__name__}")
        phys.children = []
        for port, child in enumerate(node.children):
            if isinstance(child, Scan):
                self.scans.setdefault(child.name, []).append((phys, port))
                continue
            c = self._build(child)
            c.parent, c.port = phys, port
            phys.children.append(c)
        self.nodes.append(phys)
        return phys

    def _replace(self, node: _Node, new: _Node) -> None:
        """Put ``new`` where ``node`` is: same children, parent, port, scans and index."""
        new.children, new.parent, new.port = node.children, node.parent, node.port
        for c in node.children:
            c.parent = new
        if node.parent is not None:
            siblings = node.parent.children
            siblings[next(i for i, c in enumerate(siblings) if c is node)] = new
        for targets in self.scans.values():
            targets[:] = [(new if n is node else n, port) for n, port in targets]
        self.nodes[next(i for i, n in enumerate(self.nodes) if n is node)] = new
        if self.root is node:
            self.root = new

    # ------------------------------------------------------------------ contract
    @property
    def late_dropped(self) -> int:
        return sum(n.op.late_dropped for n in self.nodes if hasattr(n, "op"))

    def process(self, batch: pa.RecordBatch, wm_before: int = NO_WATERMARK, **_ignored):
        """A batch of the query's only input."""
        return self.process_input(self.plan.inputs[0], batch, wm_before)

    def process_input(self, name: str, batch, wm_before: int = NO_WATERMARK):
        """A batch of input ``name``: into every scan of it. Returns (outputs, None): late rows
        are counted where they are dropped (``late_dropped``), never routed (no LATE DATA TO)."""
        if hasattr(batch, "materialize"):  # rows left on the actors that read them (Delta)
            batch = batch.materialize()
        out: list[pa.RecordBatch] = []
        for node, port in self.scan_targets(name):
            self._up(node, port, [batch], wm_before, out)
        return out, None

    def scan_targets(self, name: str) -> list[tuple[_Node, int]]:
        """The (node, port) pairs that read input ``name`` (matched case-insensitively)."""
        targets = self.scans.get(name)
        if targets is None:
            lowered = {k.lower(): v for k, v in self.scans.items()}
            targets = lowered.get(name.lower(), [])
        return targets

    def on_watermark(self, wm: int) -> list[pa.RecordBatch]:
        out: list[pa.RecordBatch] = []
        before = self.wm
        for node in self.nodes:
            produced = node.on_watermark(wm)
            if produced:
                if node.parent is None:
                    out += [b for b in produced if b.num_rows]
                else:
                    self._up(node.parent, node.port, produced, before, out)
        self.wm = max(self.wm, wm)
        return out

    def _up(self, node: _Node, port: int, batches: list[pa.RecordBatch], wm: int, out: list) -> None:
        for b in batches:
            if b.num_rows == 0:
                continue
            produced = node.push(b, port, wm)
            if node.parent is None:
                out += [p for p in produced if p.num_rows]
            elif produced:
                self._up(node.parent, node.port, produced, wm, out)

    def current_rows(self) -> pa.RecordBatch:
        return self.root.op.current_rows()

    def rows_of(self, g: pa.RecordBatch) -> pa.RecordBatch:
        return self.root.op.rows_of(g)

    def lookup_metrics(self) -> dict[str, int] | None:
        """The counters of the tree's PostgreSQL lookup joins, summed (None: it has none)."""
        ops = [n.op for n in self.nodes if isinstance(getattr(n, "op", None), ExternalLookupJoinOperator)]
        if not ops:
            return None
        out: dict[str, int] = {}
        for op in ops:
            for k, v in op.lookup_metrics().items():
                out[k] = out.get(k, 0) + v
        return out

    def release_connections(self) -> None:
        """Close the database connections of the tree's lookup joins (the connection closes)."""
        for n in self.nodes:
            if isinstance(getattr(n, "op", None), ExternalLookupJoinOperator):
                n.op.close()

    def joins(self) -> list:
        """The join operators of the tree (tests read their state sizes: ``state_rows()``)."""
        return [n.op for n in self.nodes if isinstance(n, _Join)]

    # ------------------------------------------------------------------ snapshot
    def _stateful(self) -> list:
        return [n.op for n in self.nodes if hasattr(n, "op")]

    def snapshot(self) -> _PlanImage:
        return _PlanImage([op.snapshot() for op in self._stateful()], [type(op).__name__ for op in self._stateful()])

    @property
    def incremental(self) -> bool:
        """A join in the tree can checkpoint only its changes (``snapshot_delta``)."""
        return any(op.incremental for op in self._stateful())

    def snapshot_delta(self) -> _PlanImage:
        """Each node's changes since the last snapshot where it can give them, else its
        whole state (kind ``plan.delta``; ``restore_chain`` takes the last whole one)."""
        ops = self._stateful()
        images = []
        for op in ops:
            delta = op.snapshot_delta() if op.incremental else None
            images.append(delta if delta is not None else op.snapshot())
        return _PlanImage(images, [type(op).__name__ for op in ops], kind="plan.delta")

    def restore(self, blob: bytes, *, vnodes=None) -> None:
        self.restore_chain([blob], vnodes=vnodes)

    def restore_chain(self, blobs: list[bytes], *, vnodes=None) -> None:
        """Load a whole tree snapshot followed by those taken after it (``plan.delta``, or whole
        ones: a tree whose nodes cannot give their changes snapshots whole every time)."""
        ops = self._stateful()
        kinds = [type(op).__name__ for op in ops]
        pieces: list[list[bytes]] = [[] for _ in ops]  # per node: its blob in each snapshot
        piece_kinds: list[list[str]] = [[] for _ in ops]
        snaps = [decode(blob) for blob in blobs]
        if snaps[0].kind != "plan" or any(s.kind not in ("plan", "plan.delta") for s in snaps):
            raise mismatch("plan", [s.kind for s in snaps], "a 'plan' snapshot, then 'plan' or 'plan.delta' ones")
        last_whole = max(i for i, s in enumerate(snaps) if s.kind == "plan")
        for snap in snaps[last_whole:]:  # a whole tree snapshot replaces everything before it
            if snap.meta.get("operators") != kinds:
                raise mismatch("plan", snap.meta.get("operators"), kinds)
            children = snap.tables["children"].column("blob").to_pylist()
            child_kinds = snap.meta.get("pieces") or [None] * len(children)
            for n, (child, kind) in enumerate(zip(children, child_kinds, strict=True)):
                pieces[n].append(child)
                piece_kinds[n].append(kind)
        for op, blobs_of, kinds_of in zip(ops, pieces, piece_kinds, strict=True):
            last_whole = max(i for i, k in enumerate(kinds_of) if not str(k).endswith(".delta"))
            if last_whole == len(blobs_of) - 1:
                op.restore(blobs_of[-1], vnodes=vnodes)
            else:
                op.restore_chain(blobs_of[last_whole:], vnodes=vnodes)


class _TreeState:
    """A tree's state as ``metrics()`` reads an aggregate's: ``state_groups`` (join rows held +
    live groups) and ``nbytes`` (join rows and arrays + aggregate state)."""

    __slots__ = ("_op",)

    def __init__(self, op: PlanOperator) -> None:
        self._op = op

    @property
    def state_groups(self) -> int:
        n = sum(sum(j.state_rows()) for j in self._op.joins())
        n += sum(t.op.state_rows() for t in self._op.nodes if isinstance(t, _TopN))
        for node in self._op.nodes:
            agg = getattr(getattr(node, "op", None), "agg", None)
            n += int(getattr(agg, "state_groups", 0) or 0)
        return n

    @property
    def nbytes(self) -> int:
        from laminardb.metrics.registry import state_size

        total = 0
        for j in self._op.joins():
            if not isinstance(j, JoinOperator):
                total += j.state_bytes()
                continue
            for s in j.sides:
                total += sum(c.nbytes for c in s.chunks)
                total += sum(getattr(s, a).nbytes for a in ("key", "ts", "w", "match", "alive", "nxt", "mark", "head"))
            total += j.interner.arena.nbytes + j.interner.tab_ids.nbytes * 2
        total += sum(t.op.state_bytes() for t in self._op.nodes if isinstance(t, _TopN))
        for node in self._op.nodes:
            agg = getattr(getattr(node, "op", None), "agg", None)
            if agg is not None:
                total += state_size(agg)
        return total


class _PlanImage:
    """The images of a tree's stateful operators; ``encode(vnodes)`` encodes each with the same
    subset into one blob of the ``laminardb.state`` format (kind ``"plan"``)."""

    def __init__(self, images: list, kinds: list[str], *, kind: str = "plan") -> None:
        self.images = images
        self.kinds = kinds
        self.kind = kind
        self.split = True

    def encode(self, vnodes=None) -> bytes:
        blobs = [im.encode(vnodes) for im in self.images]
        subset = None if vnodes is None else sorted({int(v) for v in vnodes})
        table = pa.table({"blob": pa.array(blobs, pa.binary())})
        meta = {"operators": self.kinds, "pieces": [im.kind for im in self.images]}
        doc = {"format": FORMAT, "version": SNAPSHOT_VERSION, "kind": self.kind, "vnodes": DEFAULT_VNODES,
               "subset": subset, "meta": meta, "counters": None,
               "tables": {"children": _ipc(table)}}
        return msgpack.packb(doc, use_bin_type=True)
