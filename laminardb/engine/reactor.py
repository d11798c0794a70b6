"""The reactor: runs the DAG of sources → streams/views → subscriptions, views and sinks.

Entry point: ``Reactor``. It is single-threaded by construction: every entry (insert,
finish, DDL, query) takes one lock, so operators never see concurrent calls. Per source
batch it (1) pushes the batch through every dependent query, judging lateness against the
watermark as it stood *before* the batch, (2) advances the source's watermark to
max event time − delay, and (3) propagates the new watermark, which closes windows.
Emitted batches flow to subscribers, materialized-view stores, sinks and downstream queries.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from dataclasses import dataclass, field

import pyarrow as pa

from laminardb.connectors.exceptions import ChangelogSourceInsertError
from laminardb.connectors.polled import FROM_DATA
from laminardb.connectors.postgres_lookup import PostgresLookup
from laminardb.engine.event_time import OPTION_KEYS as EVENT_TIME_OPTIONS
from laminardb.engine.event_time import EventTimeRules
from laminardb.engine.insert_batch import InsertResult, combine_rejected, prepare, raise_rejected
from laminardb.engine.subscriptions import Subscription
from laminardb.engine.views import ViewStore, consolidate
from laminardb.errors import ConversionError, DataError, EngineError, NotQueryableError
from laminardb.operators.group_aggregate import END_OF_TIME, NO_WATERMARK
from laminardb.operators.plan_operator import PlanOperator
from laminardb.operators.query_operator import QueryOperator
from laminardb.sql import ddl
from laminardb.sql.arrays import numeric_view
from laminardb.sql.changelog_kinds import CHANGELOG_KINDS, is_changelog_kind
from laminardb.sql.convert import REJECTED_SCHEMA
from laminardb.sql.exceptions import (
    DependentObjectsError,
    DuplicateObjectError,
    UnknownObjectError,
    UnsupportedSqlError,
)
from laminardb.sql.lookup_tables import LOOKUP_KIND, LookupTableSpec, lookup_spec
from laminardb.sql.plan import WEIGHT, QueryPlan, RelationInfo, looked_up
from laminardb.sql.planner import follows_processing_time, lookup_from, plan_query
from laminardb.sql.types import ticks_per_ms

_sink_log = logging.getLogger("laminardb.sink")


def make_source_connector(kind: str, node: Node, options: dict[str, str],
                          restore_state: dict | None = None):
    """The polled connector behind ``CREATE SOURCE … FROM <KIND> (…)``; ``restore_state``
    (from a checkpoint) resumes it where the checkpoint's data ended."""
    if is_changelog_kind(kind):  # postgres_cdc, mysql_cdc: connectors/changelog_source.py
        from laminardb.connectors.changelog_source import build_changelog_source

        return build_changelog_source(kind, node, options, restore_state)
    if kind != "kafka":
        kinds = ", ".join(["KAFKA", *(k.upper() for k in CHANGELOG_KINDS)])
        raise UnsupportedSqlError(f"FROM {kind.upper()} is not a known source connector; use FROM {kinds} (…)")
    from laminardb._extras import require

    require("kafka", extra="kafka", for_what=f"Kafka source {node.name!r}")
    from laminardb.connectors.kafka import KafkaSource

    extra = {} if restore_state is None else {"restore_state": restore_state}
    return KafkaSource(name=node.name, schema=node.schema, options=options, time_col=node.time_col,
                       delay_ticks=node.delay_ticks, **extra)


REJECTED_SUFFIX = "__rejected"  # <source>__rejected: the rows insert(on_error='dead_letter') refused


@dataclass
class Node:
    """A named relation: a source, a stream, a materialized view, a late-data stream or a sink."""

    name: str
    kind: str  # "source" | "stream" | "view" | "late" | "sink" | "rejected" (a source's dead letters)
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
    # per-batch counters read by laminardb.metrics (never per row): rows (and, for sources,
    # Arrow bytes) that came in, seconds spent in the operator's process()/on_watermark(),
    # rows an insert() refused (sources)
    rows_in: int = 0
    bytes_in: int = 0
    busy_s: float = 0.0
    rejected: int = 0
    late_routed: int = 0  # queries: late rows sent to LATE DATA TO (late_dropped counts the rest)
    # sources only
    not_null: frozenset[str] = frozenset()
    delay_ticks: int = 0
    max_ts: int = NO_WATERMARK
    options: dict = field(default_factory=dict)
    connector: object | None = None  # a polled source connector (Kafka), driven by Connection.start()
    accepted: int = 0  # rows insert() accepted (durable: WAL-logged), across restarts
    connector_state: dict | None = None  # the connector's position as of the last ingested poll
    rules: EventTimeRules | None = None  # plausible event times (WITH event_time_range, max_future)
    source_connector: str | None = None  # "kafka" for FROM KAFKA (…) / WITH ('connector' = 'kafka')
    primary_key: tuple[str, ...] = ()  # PRIMARY KEY (…) NOT ENFORCED: a versioned source (temporal joins)
    lookup: LookupTableSpec | None = None  # a jdbc / postgres table: read by lookup joins only, never fed
    proctime_col: str | None = None  # Flink's ``proc_time AS PROCTIME()``: added by the queries reading it
    # event time: every event-time column of a stream → its watermark from the root source's
    # (sources: just time_col); how the watermark came about, for DESCRIBE
    time_cols: dict = field(default_factory=dict)
    watermark_note: str = ""
    # a query with several inputs (a join): every relation it reads, and each one's last
    # watermark; its own watermark is their minimum
    inputs: list[str] = field(default_factory=list)
    input_wms: dict[str, int] = field(default_factory=dict)

    @property
    def visible_schema(self) -> pa.Schema:
        idx = self.schema.get_field_index(WEIGHT)
        return self.schema.remove(idx) if idx >= 0 else self.schema


def arrow_bytes(batch: pa.RecordBatch) -> int:
    """The batch's Arrow bytes for ``bytes_in``. ``nbytes`` (exact for slices) costs ~8 µs, the
    largest cost of a one-row insert after conversion; a small batch counts its buffers
    (~0.1 µs), unless they are far larger than its rows (a slice of a big batch)."""
    if batch.num_rows <= _SMALL_ROWS:
        total = batch.get_total_buffer_size()
        if total <= _SMALL_BYTES:
            return total
    return batch.nbytes


_SMALL_ROWS, _SMALL_BYTES = 64, 64 * 1024


def _max_ticks(col: pa.Array, n: int) -> int:
    """The batch's largest event time (ticks); one 64-bit value is read straight from its buffer."""
    if n == 1 and col.type.bit_width == 64 and not pa.types.is_floating(col.type):
        return _INT64.unpack_from(col.buffers()[1], col.offset * 8)[0]
    return int(numeric_view(col).max())


_INT64 = struct.Struct("<q")


class Reactor:
    """Owns the catalog and runs every batch through it; see the module docstring."""

    def __init__(self, make_operator, make_plan_operator, make_source_connector) -> None:
        """The three factories come from the engine's ``ExecutionBackend`` (``contracts.py``):
        how a query, a plan tree and a polled source are built (in process, or on actors)."""
        self.lock = threading.RLock()
        self.nodes: dict[str, Node] = {}
        self.finished = False
        self.events_ingested = 0
        self.events_emitted = 0
        self.late_routed = 0
        self.make_operator = make_operator
        self.make_plan_operator = make_plan_operator
        self.make_source_connector = make_source_connector
        self.connectors_enabled = True  # actors install sources without polling them
        self.catalog: dict[str, str] = {}  # live object -> its creating DDL, in order (catalog.py)
        self.journal = None  # a durable database's LocalCoordinator: insert() logs to its WAL
        self.last_lsn = -1  # the WAL record of the last insert (fsynced outside the lock)
        self.connector_restore: dict[str, dict] = {}  # recovery: checkpointed connector state
        self.sink_errors: dict[int, tuple[int, str]] = {}  # id(sink) -> (failed writes, last error)
        # processing time (laminardb/sql/clock.py): the connection's clock, stamped once per ingested
        # batch; the queries whose windows follow it, advanced after every batch of any source
        self.clock = None
        self.proc_nodes: list[str] = []

    # ------------------------------------------------------------------ catalog
    def relation(self, name: str) -> RelationInfo:
        node = self._node(name)
        if node.kind == "sink":
            raise UnknownObjectError(f"{name!r} is a sink; queries read sources, streams and views")
        times = node.time_cols if node.kind in ("stream", "view", "late") else None
        return RelationInfo(node.name, node.visible_schema, node.time_col, node.changelog, times,
                            kind=node.kind, connector=node.source_connector, primary_key=node.primary_key,
                            lookup=node.lookup, proctime=node.proctime_col)

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
        # a CDC source is a changelog keyed by its primary key: its rows carry __weight (+1 / −1)
        changelog = is_changelog_kind(stmt.connector)
        if changelog:
            schema = schema.append(pa.field(WEIGHT, pa.int64()))
        not_null = {c.name for c in stmt.columns if c.not_null}
        delay = 0
        if stmt.watermark_col is not None:
            t = schema.field(stmt.watermark_col).type
            delay = stmt.watermark_delay_ms * ticks_per_ms(t)
            not_null.add(stmt.watermark_col)  # rows without event time cannot be placed in time
        node = Node(stmt.name, "source", schema, time_col=stmt.watermark_col,
                    not_null=frozenset(not_null), delay_ticks=delay, options=stmt.options, changelog=changelog)
        node.rules = self._event_time_rules(stmt, schema)
        node.source_connector = stmt.connector
        node.primary_key = stmt.primary_key
        node.proctime_col = stmt.proctime_col
        if stmt.connector == LOOKUP_KIND:
            node.lookup = lookup_spec(stmt.name, schema, stmt.primary_key, stmt.connector_options,
                                      fetcher=PostgresLookup)
        if stmt.watermark_col is not None:
            node.watermark_note = f"max event time - {stmt.watermark_delay_ms} ms (declared)"
        dead = stmt.name + REJECTED_SUFFIX
        if dead in self.nodes:
            raise DuplicateObjectError(f"{dead!r} is taken by a {self.nodes[dead].kind}; the name holds the "
                                       f"rows refused by inserts into source {stmt.name!r}: rename that one")
        if stmt.connector is not None and self.connectors_enabled:
            restore = self.connector_restore.get(stmt.name)
            args = () if restore is None else (restore,)
            node.connector = self.make_source_connector(stmt.connector, node, stmt.connector_options, *args)
            node.connector_state = restore
        self.nodes[stmt.name] = node
        self.nodes[dead] = Node(dead, "rejected", REJECTED_SCHEMA, sql=f"rows refused by inserts into {stmt.name}",
                                input=stmt.name)
        return True

    @staticmethod
    def _event_time_rules(stmt: ddl.CreateSource, schema: pa.Schema) -> EventTimeRules | None:
        options = {k: v for k, v in stmt.options.items() if k in EVENT_TIME_OPTIONS}
        if stmt.watermark_col is None:  # checked now; applied once a window places the event time
            EventTimeRules.from_options(options, source=stmt.name, column="", time_type=pa.int64())
            return None
        return EventTimeRules.from_options(options, source=stmt.name, column=stmt.watermark_col,
                                           time_type=schema.field(stmt.watermark_col).type)

    def create_stream(self, stmt: ddl.CreateStream, *, kind: str | None = None, sql: str = "") -> bool:
        if stmt.name in self.nodes:
            if stmt.if_not_exists:
                return False
            if stmt.or_replace:
                self.drop(ddl.Drop(self.nodes[stmt.name].kind.upper(), stmt.name))
        self._check_new(stmt.name)
        plan = plan_query(stmt.query, self.relation)
        # a plan tree (joins, unions, subqueries) is one operator: in-process here, its stateful
        # nodes on the actors in the Delta mode (``make_plan_operator``)
        op = self.make_plan_operator(stmt.name, plan) if plan.tree else self.make_operator(stmt.name, plan)
        kind = kind or ("view" if stmt.materialized else "stream")
        node = Node(stmt.name, kind, op.schema, sql=sql or stmt.query.text, time_col=plan.time_col,
                    changelog=plan.changelog, input=plan.input, plan=plan, op=op, time_cols=dict(plan.time_cols))
        upstreams = [self._node(n) for n in plan.inputs]
        upstream = upstreams[0]
        node.inputs = [u.name for u in upstreams]
        node.wm = min(u.wm for u in upstreams)
        if len(upstreams) > 1:
            node.input_wms = {u.name: u.wm for u in upstreams}
        if kind == "view":
            node.view = ViewStore(op.schema, changelog=plan.changelog)
        if plan.late_data_to:
            self._attach_late(node, plan)
        if plan.implicit_watermark is not None:  # last: nothing below fails
            self._place_watermark(upstream, plan.implicit_watermark, stmt.name)
        self.nodes[stmt.name] = node
        for u in upstreams:
            u.downstream.append(stmt.name)
        if follows_processing_time(plan):
            self.proc_nodes.append(stmt.name)
        return True

    @staticmethod
    def _place_watermark(source: Node, col: str, by: str) -> None:
        """A window over a source that declares no watermark: its column becomes the source's
        event time, watermark = max event time (zero delay), for the rest of the source's life."""
        source.time_col = col
        source.not_null = source.not_null | {col}  # rows without event time cannot be placed in time
        source.delay_ticks = 0
        source.watermark_note = f"max event time (implicit, zero delay: placed by the window of {by!r})"
        if source.rules is None:  # the same plausibility checks as a declared watermark (defaults)
            options = {k: v for k, v in source.options.items() if k in EVENT_TIME_OPTIONS}
            source.rules = EventTimeRules.from_options(options, source=source.name, column=col,
                                                       time_type=source.schema.field(col).type)

    def event_time_notes(self, name: str) -> dict[str, str]:
        """Each event-time column of ``name`` → how its watermark is made (for DESCRIBE)."""
        node = self._node(name)
        if node.kind == "source":
            return {node.time_col: node.watermark_note} if node.time_col else {}
        return {c: "derived: " + m.describe() for c, m in node.time_cols.items()}

    def _attach_late(self, node: Node, plan: QueryPlan) -> None:
        name = plan.late_data_to
        if name in self.nodes:
            target = self.nodes[name]
            if target.kind != "late" or target.schema != plan.input_schema:
                raise DuplicateObjectError(f"LATE DATA TO {name!r}: that name is taken by a {target.kind}")
        else:
            src = self._node(plan.input)
            times = self.relation(plan.input).event_time()
            if plan.implicit_watermark is not None:
                times = {plan.implicit_watermark: plan.input_watermark}
            self.nodes[name] = Node(name, "late", plan.input_schema, sql=f"late rows of {node.name}",
                                    time_col=src.time_col or plan.implicit_watermark, input=node.name,
                                    time_cols=times)
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
        if node.kind == "rejected":
            raise DependentObjectsError(f"{stmt.name!r} holds the rows refused by inserts into {node.input!r} "
                                        "and goes away with that source (DROP SOURCE)")
        want = {"SOURCE": ("source",), "STREAM": ("stream", "late"), "MATERIALIZED VIEW": ("view",),
                "SINK": ("sink",)}[stmt.kind]
        if node.kind not in want:
            raise UnknownObjectError(f"{stmt.name!r} is a {node.kind}, not a {stmt.kind.lower()}; use DROP {node.kind.upper()}")
        users = [d for d in node.downstream if d in self.nodes]
        users += [n.name for n in self.nodes.values() if n.kind == "late" and n.input == node.name and n.downstream]
        dead = self.nodes.get(stmt.name + REJECTED_SUFFIX) if node.kind == "source" else None
        if dead is not None and dead.kind == "rejected":
            users += [d for d in dead.downstream if d in self.nodes]
        if node.lookup is not None:  # a lookup table is no input of the queries that look it up
            users += [n.name for n in self.nodes.values() if n.plan is not None and node.name in looked_up(n.plan)]
        if users:
            raise DependentObjectsError(f"cannot drop {stmt.name!r}: {', '.join(users)} read from it; drop those first")
        if node.connector is not None:
            node.connector.close()
        release = getattr(node.op, "release_connections", None)  # a lookup join's PostgreSQL connection
        if release is not None:
            release()
        if node.kind == "sink":
            upstream = self.nodes.get(node.input)
            for s in node.sinks:
                if upstream is not None and s in upstream.sinks:
                    upstream.sinks.remove(s)
                s.close()
        for sub in list(node.subscribers):
            sub._end()
        for name in (node.inputs or [node.input]) if node.kind != "late" else []:
            ups = self.nodes.get(name) if name else None
            if ups is not None and stmt.name in ups.downstream:
                ups.downstream.remove(stmt.name)
        if node.late_target and node.late_target in self.nodes and not self.nodes[node.late_target].downstream:
            self.nodes.pop(node.late_target)
        if dead is not None and dead.kind == "rejected":
            for sub in list(dead.subscribers):
                sub._end()
            self.nodes.pop(dead.name)
        del self.nodes[stmt.name]
        if stmt.name in self.proc_nodes:
            self.proc_nodes.remove(stmt.name)
        return True

    # ------------------------------------------------------------------ data path
    def insert(self, source: str, data, *, on_error: str = "raise", index=None,
               rejected: pa.RecordBatch | None = None, strict_text: bool = True) -> int:
        """Convert and ingest one insert. Rows that do not fit (``insert_batch.prepare``) refuse the
        whole call (``on_error='raise'``) or are left out (``'skip'``; ``'dead_letter'`` also
        emits them on ``<source>__rejected``); then an ``InsertResult`` is returned. ``index``
        maps rows of ``data`` to their index in the caller's input; ``rejected``: rows of that
        input refused before (text that did not parse); ``strict_text``: see ``insert_batch.prepare``."""
        node = self._insertable(source)
        p = prepare(data, node.schema, node.not_null, source=node.name, rules=node.rules, max_ts=node.max_ts,
                    strict_text=strict_text)
        bad, codes = combine_rejected(p, index=index, earlier=rejected)
        if bad is not None:
            node.rejected += bad.num_rows
        if bad is not None and on_error == "raise":
            total = p.rows + (0 if rejected is None else rejected.num_rows)
            raise_rejected(bad, codes, source=node.name, rows=total)
        batch = p.batch
        # only the accepted rows are logged and counted: refused ones never reach the WAL
        if self.journal is not None and batch.num_rows:
            self.last_lsn = self.journal.log_insert(node.name, batch)  # durable before it counts
        known = p.max_event[1] if p.max_event is not None and p.max_event[0] == node.time_col else None
        n, late = self._ingest_counted(node, batch, known)
        if bad is not None and on_error == "dead_letter":
            dead = self.nodes.get(node.name + REJECTED_SUFFIX)
            if dead is not None:
                self._emit(dead, [bad])
        rejected_rows = None if bad is None or on_error == "raise" else pa.Table.from_batches([bad])
        return InsertResult(n, rejected_rows, late_by_query=late)

    def insert_staged(self, source: str, rows, ref: dict) -> InsertResult:
        """Ingest an insert a reactor actor converted, logged and kept already (the Delta mode's
        direct inserts, ``cluster/direct_insert.py``): ``rows`` is its ``RemoteRows``, ``ref``
        where the actor logged them ({"w": member, "l": lsn}), which the WAL records instead
        of the rows."""
        node = self._insertable(source)
        if self.journal is not None:
            self.last_lsn = self.journal.log_insert_ref(node.name, ref, rows.num_rows)
        n, late = self._ingest_counted(node, rows, rows.max_event_time)
        return InsertResult(n, None, late_by_query=late)

    def _ingest_counted(self, node: Node, batch, max_event_time: int | None) -> tuple[int, dict[str, int]]:
        """``ingest`` an accepted insert: (rows, the late rows per query it caused)."""
        node.accepted += batch.num_rows
        late_before = self._late_counts(node)
        n = self.ingest(node, batch, max_event_time=max_event_time)
        late = {q: c - late_before[q] for q, c in self._late_counts(node).items()
                if q in late_before and c > late_before[q]}
        return n, late

    def _insertable(self, source: str) -> Node:
        """The source ``insert()`` may write to, or the error that says why not."""
        node = self._node(source)
        if node.kind != "source":
            raise NotQueryableError(f"{source!r} is a {node.kind}; insert() writes to sources only")
        if node.changelog:
            raise ChangelogSourceInsertError(
                f"{node.name!r} is a {node.source_connector} source: its rows come from the database's "
                "change stream only; write to the upstream table (or insert into a source of your own)")
        if node.lookup is not None:
            raise NotQueryableError(f"{source!r} is a lookup table ({node.lookup.where()}): write to it in "
                                    "PostgreSQL; lookup joins read it there")
        if self.finished:
            raise EngineError("the connection has finished (end of input); open a new connection to continue",
                              code="LDB-3004")
        return node

    def _late_counts(self, source: Node) -> dict[str, int]:
        """Per query reading ``source`` in this process: rows it has dropped or routed as late
        so far. The difference over one insert is that insert's ``InsertResult.late_by_query``;
        operators on actors (the Delta mode) count theirs later, in ``metrics()``, so they are left
        out rather than credited with an earlier batch's rows."""
        out = {}
        for d in source.downstream:
            q = self.nodes.get(d)
            if q is not None and isinstance(q.op, QueryOperator | PlanOperator):
                out[d] = q.op.late_dropped + q.late_routed
        return out

    def advance_watermark(self, source: str, wm) -> int | None:
        """Raise ``source`` 's watermark to ``wm`` (never back): the explicit watermark of
        ``Writer.watermark``. ``wm`` is in the time column's ticks, or text/datetime for
        TIMESTAMP columns. Returns the watermark now in force (None: none yet)."""
        from laminardb.sql.convert import convert

        node = self._node(source)
        if node.kind != "source":
            raise NotQueryableError(f"{source!r} is a {node.kind}; watermarks belong to sources")
        if node.time_col is None:
            raise EngineError(f"source {node.name!r} has no event-time column, so no watermark: declare "
                              "WATERMARK FOR <column> AS <column> - INTERVAL '…'", code="LDB-3011")
        if self.finished:
            raise EngineError("the connection has finished (end of input); open a new connection to continue",
                              code="LDB-3004")
        values, bad = convert(pa.array([wm]), node.schema.field(node.time_col).type)
        if bad[0].as_py() or not values[0].is_valid:
            raise ConversionError(f"watermark {wm!r} of source {node.name!r} is not a valid "
                                  f"{node.schema.field(node.time_col).type}: give epoch milliseconds, "
                                  "a datetime or ISO-8601 text")
        ticks = int(numeric_view(values)[0])
        refused = node.rules.check_watermark(ticks) if node.rules is not None else None
        if refused is not None:
            code, why = refused
            raise (ConversionError if code == "LDB-2004" else DataError)(why, code=code)
        if ticks > node.wm:
            if self.journal is not None and self.journal.journaling:
                self.last_lsn = self.journal.wal.append("watermark", {"s": node.name, "wm": ticks})
            self.ingest(node, None, watermark=ticks)
        return None if node.wm == NO_WATERMARK else node.wm

    def ingest(self, node: Node, batch: pa.RecordBatch | None, *,
               watermark: int | None | object = FROM_DATA, max_event_time: int | None = None) -> int:
        """Run one batch of ``node`` (a source) through the DAG, then advance its watermark.
        ``max_event_time``: the batch's largest event time when the caller knows it already.

        ``watermark`` replaces "max event time − delay" for sources that track it
        themselves (Kafka: the minimum over partitions) or are driven by a coordinator;
        ``None`` from them means "not placed yet" (a partition has not delivered): hold it.
        """
        n = 0 if batch is None else batch.num_rows
        if self.clock is not None:
            self.clock.tick()  # this batch's processing time: every PROCTIME() of it reads this instant
        if n == 0:
            if isinstance(watermark, int) and watermark > node.wm:
                errors: list[Exception] = []
                self._advance(node, watermark, errors)
                self._advance_processing_time(errors)
                if errors:
                    raise errors[0]
            return 0
        self.events_ingested += n
        node.rows_in += n
        # rows left on the actors that read them (Delta; contracts.DeferredRows) report the bytes
        # their readers decoded
        remote = not isinstance(batch, pa.RecordBatch)
        node.bytes_in += int(getattr(batch, "nbytes", 0)) if remote else arrow_bytes(batch)
        errors: list[Exception] = []
        wm = None
        if node.time_col is not None:
            # the watermark after this batch is known up front: a distributed operator
            # applies it in the same round trip as the batch (the order of outputs is kept)
            if max_event_time is not None:
                top = max_event_time
            else:
                top = batch.max_event_time if remote else _max_ticks(batch.column(node.time_col), n)
            max_ts = max(node.max_ts, top)
            if watermark is FROM_DATA:
                wm = max_ts - node.delay_ticks
            else:
                wm = node.wm if watermark is None else max(node.wm, watermark)  # type: ignore[call-overload]
        wm_next = wm if wm is not None and wm > node.wm else None
        for d in list(node.downstream):
            self._guard(errors, self._push, d, batch, node.wm, wm_next, node.name)
        if node.subscribers:
            rows = batch.materialize() if remote else batch
            for sub in node.subscribers:
                sub._deliver(rows)
        if node.time_col is not None:
            node.max_ts = max_ts
            if wm_next is not None:
                self._advance(node, wm, errors)
        self._advance_processing_time(errors)
        if errors:
            raise errors[0]
        return n

    def _advance_processing_time(self, errors: list[Exception]) -> None:
        """Close the processing-time windows the clock has passed (their queries' event-time
        watermark may not have moved)."""
        for name in self.proc_nodes:
            node = self.nodes.get(name)
            if node is not None and node.wm != NO_WATERMARK:
                self._guard(errors, self._advance, node, node.wm, errors)

    @staticmethod
    def _guard(errors: list[Exception], fn, *args) -> None:
        """One failing query must not stop the others: collect its error, raise after."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - re-raised by the caller after all queries ran
            errors.append(e)

    def _push(self, name: str, batch: pa.RecordBatch, wm_before: int, wm_next: int | None = None,
              upstream: str | None = None) -> None:
        node = self.nodes[name]
        if node.op is None:  # a late-data stream
            self._emit(node, [batch])
            return
        assert node.plan is not None  # every node with an operator has its plan
        to_input = node.plan.input_watermark  # the root source's watermark → the window column's
        node.rows_in += batch.num_rows
        t0 = time.perf_counter()
        if node.plan.tree:  # a plan tree: it maps watermarks itself (contracts.Operator)
            wm = min(wm_before, node.wm)  # several inputs: the query's own (the minimum)
            outs, late = node.op.process_input(upstream or node.inputs[0], batch, wm)
        elif wm_next is not None and node.op.accepts_next_watermark:
            outs, late = node.op.process(batch, to_input(wm_before), wm_next=to_input(wm_next))
        else:
            outs, late = node.op.process(batch, to_input(wm_before))
        node.busy_s += time.perf_counter() - t0
        self.deliver(name, outs, late)

    def deliver(self, name: str, outs: list[pa.RecordBatch], late: pa.RecordBatch | None = None) -> None:
        """Route a query's output (and its late rows) on — also for operators that deliver later."""
        node = self.nodes[name]
        if late is not None and late.num_rows and node.late_target:
            self.late_routed += late.num_rows
            node.late_routed += late.num_rows
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

    def emitted_to_subscribers(self, name: str, batches: list[pa.RecordBatch]) -> None:
        """Hand ``batches`` of query ``name`` to its subscribers, not to its only sink, which
        has them already (the Delta mode's actors staged them), counted as ``_emit`` counts.
        The batches need only ``num_rows`` and ``slice``: the Delta mode's are references to
        rows its actors hold, which the subscribers' clients fetch."""
        self._emit(self.nodes[name], batches, to_sinks=False)

    def _emit(self, node: Node, batches: list[pa.RecordBatch], *, to_sinks: bool = True) -> None:
        for b in batches:
            if b.num_rows == 0:
                continue
            node.rows_out += b.num_rows
            self.events_emitted += b.num_rows
            for sub in node.subscribers:
                sub._deliver(b)
            if node.view is not None:
                node.view.append(b)
            for s in node.sinks if to_sinks else ():
                try:
                    s.write(b)
                except Exception as exc:  # counted for metrics(), then raised to the caller
                    self._sink_failed(s, exc)
                    raise
            for d in node.downstream:
                self._push(d, b, node.wm, None, node.name)

    def emitted_elsewhere(self, name: str, rows: int) -> None:
        """Count ``rows`` query ``name`` emitted straight into its only sink somewhere else
        (the Delta mode's actors staging them), as ``_emit`` counts rows it hands on."""
        self.nodes[name].rows_out += rows
        self.events_emitted += rows

    def _sink_failed(self, sink, exc: Exception) -> None:
        count, _ = self.sink_errors.get(id(sink), (0, None))
        name = next((n.name for n in self.nodes.values() if n.kind == "sink" and sink in n.sinks), "?")
        self.sink_errors[id(sink)] = (count + 1, f"{type(exc).__name__}: {exc}")
        _sink_log.warning("sink %s: write failed (%d so far): %s", name, count + 1, exc)

    def _advance(self, node: Node, wm: int, errors: list[Exception], upstream: str | None = None) -> None:
        if len(node.inputs) > 1 and upstream is not None:  # several inputs: the minimum of theirs
            node.input_wms[upstream] = max(node.input_wms.get(upstream, node.wm), wm)
            wm = min(node.input_wms.get(i, node.wm) for i in node.inputs)
            if wm <= node.wm:
                return
        if node.op is not None and node.plan is not None:
            t0 = time.perf_counter()
            outs = node.op.on_watermark(wm if node.plan.tree else node.plan.input_watermark(wm))
            node.busy_s += time.perf_counter() - t0
            self._emit(node, outs)
        node.wm = max(node.wm, wm)
        for d in list(node.downstream):
            self._guard(errors, self._advance, self.nodes[d], wm, errors, node.name)

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
        if node.lookup is not None:  # a jdbc / postgres table: only ever looked up
            from laminardb.sql.planner import lookup_only

            raise lookup_only(self.relation(name))
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

