"""The reactor: runs the DAG of sources → streams/views → subscriptions, views and sinks.

Entry point: ``Reactor``. It is single-threaded by construction: every entry (insert,
finish, DDL, query) takes one lock, so operators never see concurrent calls. Per source
batch it (1) pushes the batch through every dependent query, judging lateness against the
watermark as it stood *before* the batch, (2) advances the source's watermark to
max event time − delay, and (3) propagates the new watermark, which closes windows.
Emitted batches flow to subscribers, materialized-view stores, sinks and downstream queries.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pyarrow as pa

from laminardb.errors import EngineError, NotQueryableError
from laminardb.ingest import to_batch
from laminardb.operators._buffers import numeric_view
from laminardb.operators.group_aggregate import END_OF_TIME, NO_WATERMARK
from laminardb.operators.query_operator import QueryOperator
from laminardb.sql import ddl
from laminardb.sql.exceptions import (
    DependentObjectsError,
    DuplicateObjectError,
    UnknownObjectError,
    UnsupportedSqlError,
)
from laminardb.sql.planner import WEIGHT, QueryPlan, RelationInfo, lookup_from, plan_query
from laminardb.sql.types import ticks_per_ms
from laminardb.subscription import Subscription
from laminardb.views import ViewStore, consolidate


def make_source_connector(kind: str, node: Node, options: dict[str, str],
                          restore_state: dict | None = None):
    """The polled connector behind ``CREATE SOURCE … FROM <KIND> (…)``; ``restore_state``
    (from a checkpoint) resumes it where the checkpoint's data ended."""
    if kind != "kafka":
        raise UnsupportedSqlError(f"FROM {kind.upper()} is not a known source connector; use FROM KAFKA (…)")
    from laminardb.connectors.kafka import KafkaSource

    extra = {} if restore_state is None else {"restore_state": restore_state}
    return KafkaSource(name=node.name, schema=node.schema, options=options, time_col=node.time_col,
                       delay_ticks=node.delay_ticks, **extra)


FROM_DATA = object()  # ingest(): the watermark follows the batch's max event time


@dataclass
class Node:
    """A named relation: a source, a stream, a materialized view, a late-data stream or a sink."""

    name: str
    kind: str  # "source" | "stream" | "view" | "late" | "sink"
    schema: pa.Schema  # what subscribers see (with __weight for changelogs)
    sql: str = ""
    time_col: str | None = None
    changelog: bool = False
    input: str | None = None
    plan: QueryPlan | None = None
    op: QueryOperator | None = None
    wm: int = NO_WATERMARK
    downstream: list[str] = field(default_factory=list)
    subscribers: list[Subscription] = field(default_factory=list)
    sinks: list = field(default_factory=list)
    view: ViewStore | None = None
    late_target: str | None = None
    rows_out: int = 0
    # sources only
    not_null: frozenset[str] = frozenset()
    delay_ticks: int = 0
    max_ts: int = NO_WATERMARK
    options: dict = field(default_factory=dict)
    connector: object | None = None  # a polled source connector (Kafka), driven by Connection.start()
    accepted: int = 0  # rows insert() accepted (durable: WAL-logged), across restarts
    connector_state: dict | None = None  # the connector's position as of the last ingested poll

    @property
    def visible_schema(self) -> pa.Schema:
        idx = self.schema.get_field_index(WEIGHT)
        return self.schema.remove(idx) if idx >= 0 else self.schema


class Reactor:
    """Owns the catalog and runs every batch through it; see the module docstring."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.nodes: dict[str, Node] = {}
        self.finished = False
        self.events_ingested = 0
        self.events_emitted = 0
        self.late_routed = 0
        # how a query's operator is built: in-process here, a DistributedOperator in a cluster
        self.make_operator = lambda name, plan: QueryOperator(plan)
        self.connectors_enabled = True  # actors install sources without polling them
        self.make_source_connector = make_source_connector  # the cluster reads Kafka on actors
        self.catalog: dict[str, str] = {}  # live object -> its creating DDL, in order (catalog.py)
        self.journal = None  # a durable database's LocalCoordinator: insert() logs to its WAL
        self.last_lsn = -1  # the WAL record of the last insert (fsynced outside the lock)
        self.connector_restore: dict[str, dict] = {}  # recovery: checkpointed connector state

    # ------------------------------------------------------------------ catalog
    def relation(self, name: str) -> RelationInfo:
        node = self._node(name)
        if node.kind == "sink":
            raise UnknownObjectError(f"{name!r} is a sink; queries read sources, streams and views")
        return RelationInfo(node.name, node.visible_schema, node.time_col, node.changelog)

    def _node(self, name: str) -> Node:
        if name in self.nodes:
            return self.nodes[name]
        for k, v in self.nodes.items():
            if k.lower() == name.lower():
                return v
        known = ", ".join(sorted(self.nodes)) or "none yet"
        raise UnknownObjectError(f"unknown object {name!r}; known: {known}")

    def _check_new(self, name: str) -> None:
        if name in self.nodes:
            raise DuplicateObjectError(f"{name!r} already exists (a {self.nodes[name].kind}); DROP it first")

    def create_source(self, stmt: ddl.CreateSource) -> bool:
        if stmt.name in self.nodes and stmt.if_not_exists:
            return False
        self._check_new(stmt.name)
        schema = pa.schema([pa.field(c.name, c.type, nullable=not c.not_null) for c in stmt.columns])
        not_null = {c.name for c in stmt.columns if c.not_null}
        delay = 0
        if stmt.watermark_col is not None:
            t = schema.field(stmt.watermark_col).type
            delay = stmt.watermark_delay_ms * ticks_per_ms(t)
            not_null.add(stmt.watermark_col)  # rows without event time cannot be placed in time
        node = Node(stmt.name, "source", schema, time_col=stmt.watermark_col,
                    not_null=frozenset(not_null), delay_ticks=delay, options=stmt.options)
        if stmt.connector is not None and self.connectors_enabled:
            restore = self.connector_restore.get(stmt.name)
            args = () if restore is None else (restore,)
            node.connector = self.make_source_connector(stmt.connector, node, stmt.connector_options, *args)
            node.connector_state = restore
        self.nodes[stmt.name] = node
        return True

    def create_stream(self, stmt: ddl.CreateStream, *, kind: str | None = None, sql: str = "") -> bool:
        if stmt.name in self.nodes:
            if stmt.if_not_exists:
                return False
            if stmt.or_replace:
                self.drop(ddl.Drop(self.nodes[stmt.name].kind.upper(), stmt.name))
        self._check_new(stmt.name)
        plan = plan_query(stmt.query, self.relation)
        op = self.make_operator(stmt.name, plan)
        kind = kind or ("view" if stmt.materialized else "stream")
        node = Node(stmt.name, kind, op.schema, sql=sql or stmt.query.text, time_col=plan.time_col,
                    changelog=plan.changelog, input=plan.input, plan=plan, op=op)
        upstream = self._node(plan.input)
        node.wm = upstream.wm
        if kind == "view":
            node.view = ViewStore(op.schema, changelog=plan.changelog)
        if plan.late_data_to:
            self._attach_late(node, plan)
        self.nodes[stmt.name] = node
        upstream.downstream.append(stmt.name)
        return True

    def _attach_late(self, node: Node, plan: QueryPlan) -> None:
        name = plan.late_data_to
        if name in self.nodes:
            target = self.nodes[name]
            if target.kind != "late" or target.schema != plan.input_schema:
                raise DuplicateObjectError(f"LATE DATA TO {name!r}: that name is taken by a {target.kind}")
        else:
            src = self._node(plan.input)
            self.nodes[name] = Node(name, "late", plan.input_schema, sql=f"late rows of {node.name}",
                                    time_col=src.time_col, input=node.name)
        node.late_target = name

    def add_sink(self, name: str, stream: str, sink) -> None:
        self._check_new(name)
        target = self._node(stream)
        if target.kind == "source":
            raise NotQueryableError(f"sink {name!r} reads {stream!r}, a source; sink a stream instead")
        target.sinks.append(sink)
        self.nodes[name] = Node(name, "sink", target.schema, sql=f"FROM {stream}", input=target.name,
                                sinks=[sink])

    def drop(self, stmt: ddl.Drop) -> bool:
        if stmt.name not in self.nodes:
            if stmt.if_exists:
                return False
            self._node(stmt.name)  # raises UnknownObjectError
        node = self.nodes[stmt.name]
        want = {"SOURCE": ("source",), "STREAM": ("stream", "late"), "MATERIALIZED VIEW": ("view",),
                "SINK": ("sink",)}[stmt.kind]
        if node.kind not in want:
            raise UnknownObjectError(f"{stmt.name!r} is a {node.kind}, not a {stmt.kind.lower()}; use DROP {node.kind.upper()}")
        users = [d for d in node.downstream if d in self.nodes]
        users += [n.name for n in self.nodes.values() if n.kind == "late" and n.input == node.name and n.downstream]
        if users:
            raise DependentObjectsError(f"cannot drop {stmt.name!r}: {', '.join(users)} read from it; drop those first")
        if node.connector is not None:
            node.connector.close()
        if node.kind == "sink":
            upstream = self.nodes.get(node.input)
            for s in node.sinks:
                if upstream is not None and s in upstream.sinks:
                    upstream.sinks.remove(s)
                s.close()
        for sub in list(node.subscribers):
            sub._end()
        if node.input and node.input in self.nodes and node.kind != "late":
            ups = self.nodes[node.input]
            if stmt.name in ups.downstream:
                ups.downstream.remove(stmt.name)
        if node.late_target and node.late_target in self.nodes and not self.nodes[node.late_target].downstream:
            self.nodes.pop(node.late_target)
        del self.nodes[stmt.name]
        return True

    # ------------------------------------------------------------------ data path
    def insert(self, source: str, data) -> int:
        node = self._node(source)
        if node.kind != "source":
            raise NotQueryableError(f"{source!r} is a {node.kind}; insert() writes to sources only")
        if self.finished:
            raise EngineError("the connection has finished (end of input); open a new connection to continue",
                              code="LDB-3004")
        batch = to_batch(data, node.schema, node.not_null, source=node.name)
        if self.journal is not None and batch.num_rows:
            self.last_lsn = self.journal.log_insert(node.name, batch)  # durable before it counts
        node.accepted += batch.num_rows
        return self.ingest(node, batch)

    def ingest(self, node: Node, batch: pa.RecordBatch | None, *,
               watermark: int | None | object = FROM_DATA) -> int:
        """Run one batch of ``node`` (a source) through the DAG, then advance its watermark.

        ``watermark`` replaces "max event time − delay" for sources that track it
        themselves (Kafka: the minimum over partitions) or are driven by a coordinator;
        ``None`` from them means "not placed yet" (a partition has not delivered): hold it.
        """
        n = 0 if batch is None else batch.num_rows
        if n == 0:
            if isinstance(watermark, int) and watermark > node.wm:
                errors: list[Exception] = []
                self._advance(node, watermark, errors)
                if errors:
                    raise errors[0]
            return 0
        self.events_ingested += n
        errors: list[Exception] = []
        wm = None
        remote = hasattr(batch, "materialize")  # rows left on the actors that read them (Delta)
        if node.time_col is not None:
            # the watermark after this batch is known up front: a distributed operator
            # applies it in the same round trip as the batch (the order of outputs is kept)
            top = batch.max_event_time if remote else int(numeric_view(batch.column(node.time_col)).max())
            max_ts = max(node.max_ts, top)
            if watermark is FROM_DATA:
                wm = max_ts - node.delay_ticks
            else:
                wm = node.wm if watermark is None else max(node.wm, watermark)  # type: ignore[call-overload]
        wm_next = wm if wm is not None and wm > node.wm else None
        for d in list(node.downstream):
            self._guard(errors, self._push, d, batch, node.wm, wm_next)
        if node.subscribers:
            rows = batch.materialize() if remote else batch
            for sub in node.subscribers:
                sub._deliver(rows)
        if node.time_col is not None:
            node.max_ts = max_ts
            if wm_next is not None:
                self._advance(node, wm, errors)
        if errors:
            raise errors[0]
        return n

    @staticmethod
    def _guard(errors: list[Exception], fn, *args) -> None:
        """One failing query must not stop the others: collect its error, raise after."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - re-raised by the caller after all queries ran
            errors.append(e)

    def _push(self, name: str, batch: pa.RecordBatch, wm_before: int, wm_next: int | None = None) -> None:
        node = self.nodes[name]
        if node.op is None:  # a late-data stream
            self._emit(node, [batch])
            return
        if wm_next is not None and getattr(node.op, "accepts_next_watermark", False):
            outs, late = node.op.process(batch, wm_before, wm_next=wm_next)
        else:
            outs, late = node.op.process(batch, wm_before)
        self.deliver(name, outs, late)

    def deliver(self, name: str, outs: list[pa.RecordBatch], late: pa.RecordBatch | None = None) -> None:
        """Route a query's output (and its late rows) on — also for operators that deliver later."""
        node = self.nodes[name]
        if late is not None and late.num_rows and node.late_target:
            self.late_routed += late.num_rows
            node.op.late_dropped -= late.num_rows
            self._emit(self.nodes[node.late_target], [late])
        self._emit(node, outs)

    def feeds_no_query(self, name: str) -> bool:
        """True when no query reads ``name``'s output (or its late rows): only subscribers,
        views and sinks do, so delivering it later cannot change any other query's result."""
        node = self.nodes.get(name)
        if node is None or node.downstream:
            return False
        late = self.nodes.get(node.late_target) if node.late_target else None
        return late is None or not late.downstream

    def _emit(self, node: Node, batches: list[pa.RecordBatch]) -> None:
        for b in batches:
            if b.num_rows == 0:
                continue
            node.rows_out += b.num_rows
            self.events_emitted += b.num_rows
            for sub in node.subscribers:
                sub._deliver(b)
            if node.view is not None:
                node.view.append(b)
            for s in node.sinks:
                s.write(b)
            for d in node.downstream:
                self._push(d, b, node.wm)

    def _advance(self, node: Node, wm: int, errors: list[Exception]) -> None:
        if node.op is not None:
            self._emit(node, node.op.on_watermark(wm))
        node.wm = max(node.wm, wm)
        for d in list(node.downstream):
            self._guard(errors, self._advance, self.nodes[d], wm, errors)

    def finish(self) -> None:
        """End of input: raise every watermark to +∞ so every window closes and is emitted."""
        errors: list[Exception] = []
        for node in list(self.nodes.values()):
            if node.kind == "source":
                self._advance(node, END_OF_TIME, errors)
        for node in list(self.nodes.values()):
            if node.kind == "late" and node.wm < END_OF_TIME:
                self._advance(node, END_OF_TIME, errors)
        for node in self.nodes.values():
            for s in node.sinks:
                s.flush()
            for sub in node.subscribers:
                sub._end()
        self.finished = True
        if errors:
            raise errors[0]

    # ------------------------------------------------------------------ reading
    def subscribe(self, name: str, **options) -> Subscription:
        node = self._node(name)
        if node.kind == "sink":
            raise NotQueryableError(f"{name!r} is a sink; subscribe to the stream it reads ({node.input})")

        def on_cancel(sub: Subscription) -> None:
            with self.lock:
                if sub in node.subscribers:
                    node.subscribers.remove(sub)

        sub = Subscription(node.name, node.schema, on_cancel, **options)
        node.subscribers.append(sub)
        if self.finished:
            sub._end()
        return sub

    def view_table(self, name: str) -> pa.Table:
        node = self._node(name)
        if node.kind != "view":
            raise NotQueryableError(
                f"{name!r} is a {node.kind} and keeps no rows to query; "
                f"CREATE MATERIALIZED VIEW … AS SELECT … FROM {name} and query that"
            )
        if node.plan is not None and node.plan.aggregate is not None and node.plan.aggregate.window is None \
                and node.plan.emit == "changes" and not node.plan.input_changelog:
            return pa.Table.from_batches([node.op.current_rows()])
        return node.view.table()

    def views(self) -> dict[str, RelationInfo]:
        return {n.name: RelationInfo(n.name, n.visible_schema) for n in self.nodes.values() if n.kind == "view"}

    def run_batch_query(self, query: ddl.Query) -> pa.Table:
        """An ad-hoc SELECT over materialized views, computed to completion on a snapshot."""
        rels = self.views()

        def lookup(name: str) -> RelationInfo:
            if name not in rels and name.lower() not in {k.lower() for k in rels}:
                node = self.nodes.get(name)
                if node is not None:
                    self.view_table(name)  # raises NotQueryableError with the hint
            return lookup_from(rels)(name)

        plan = plan_query(query, lookup, batch=True)
        data = self.view_table(plan.input)
        op = QueryOperator(plan)
        batch = data.combine_chunks().to_batches()
        batch = batch[0] if batch else pa.RecordBatch.from_pylist([], schema=data.schema)
        outs, _ = op.process(batch, NO_WATERMARK)
        outs += op.on_watermark(END_OF_TIME)
        if plan.aggregate is not None and plan.aggregate.window is None and plan.emit == "changes":
            table = pa.Table.from_batches([op.current_rows()])
        else:
            table = pa.Table.from_batches(outs, schema=op.schema) if outs else op.schema.empty_table()
            if plan.changelog:
                table = consolidate(table)
        if plan.order_by:
            keys = [(plan.names[i], "descending" if desc else "ascending") for i, desc in plan.order_by]
            table = table.sort_by(keys)
        if plan.limit is not None:
            table = table.slice(0, plan.limit)
        return table

    def watermarks(self) -> dict[str, int | None]:
        out = {}
        for n in self.nodes.values():
            if n.kind == "source":
                wm = n.wm
                if wm == END_OF_TIME:  # after finish(): report the last watermark the data gave
                    wm = n.max_ts - n.delay_ticks if n.max_ts != NO_WATERMARK else NO_WATERMARK
                out[n.name] = None if wm == NO_WATERMARK else wm
        return out

    def late_dropped(self) -> int:
        return sum(n.op.late_dropped for n in self.nodes.values() if n.op is not None)

