"""The logical plan tree: plain dataclasses a query compiles to, below its top SELECT block.

Entry points: ``Scan``, ``Filter``, ``Join``, ``AsofJoin``, ``LookupJoin``, ``ExternalLookupJoin``, ``UnionAll``, ``TopN`` and ``QueryPlan`` (one SELECT
block: filter → aggregate → HAVING → project, fused because it runs as one operator and the
Delta mode partitions it by its aggregate key), and what a block is planned from and into:
``RelationInfo`` (an input), ``AggSpec`` (an aggregate call and its result type, ``result_type``),
``WindowSpec`` and ``group_schema`` (the columns an aggregate's groups leave with). The operators
(``operators/``) run these; this module imports nothing from them. ``leaves(node)`` lists the relations a tree
reads; ``explain_node(node)`` renders it. Every node knows its output ``schema``, whether that
output is a Z-set changelog (``changelog``: rows carry ``__weight``) or append-only, and its
event-time columns (``time_cols``: column → ``WatermarkMap`` from the root watermark).

Inside a multi-input query the "root watermark" is the query's own: the minimum of its inputs'
watermarks (the reactor keeps it). Every map is monotone, so a column's map applied to that
minimum never runs ahead of the column's true watermark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa

from laminardb.sql.expressions import Expr
from laminardb.sql.watermarks import IDENTITY, WatermarkMap

#: the column of a changelog's rows that carries each row's weight (+1 insert, −1 retraction)
WEIGHT = "__weight"

JoinKind = Literal["inner", "left", "right", "full"]


@dataclass(frozen=True)
class Shift:
    """A watermark step: ``wm + ticks`` (an interval join holds its output's watermark back)."""

    ticks: int

    def __call__(self, wm: int) -> int:
        return wm + self.ticks

    def describe(self) -> str:
        return f"shifted by {self.ticks} ticks (interval join)"


@dataclass
class Scan:
    """Read a named source, stream or view: its batches enter the tree here."""

    name: str
    schema: pa.Schema
    changelog: bool = False
    time_col: str | None = None
    time_cols: dict[str, WatermarkMap] = field(default_factory=dict)
    primary_key: tuple[str, ...] = ()  # a versioned source's (temporal joins)
    lookup: object | None = None  # a jdbc / postgres table's ``LookupTableSpec``: never fed, looked up

    @property
    def children(self) -> list:
        return []


@dataclass
class Filter:
    """Keep the rows where ``predicate`` holds (a WHERE/ON conjunct pushed below a join)."""

    child: PlanNode
    predicate: Expr

    @property
    def schema(self) -> pa.Schema:
        return self.child.schema

    @property
    def changelog(self) -> bool:
        return self.child.changelog

    @property
    def time_col(self) -> str | None:
        return self.child.time_col

    @property
    def time_cols(self) -> dict[str, WatermarkMap]:
        return self.child.time_cols

    @property
    def children(self) -> list:
        return [self.child]


@dataclass
class IntervalBounds:
    """``lo ≤ left.ts − right.ts ≤ hi`` (ticks), the time condition of an interval join.

    ``left_col``/``right_col`` index the event-time column in each side's schema; ``left_map`` /
    ``right_map`` give those columns' watermarks from the query's root watermark.
    """

    left_col: int
    right_col: int
    lo: int
    hi: int
    left_map: WatermarkMap
    right_map: WatermarkMap


@dataclass
class Join:
    """An equi-join of two inputs (inner, left, right or full outer).

    ``left_keys``/``right_keys`` are compiled over each side's schema (same types, pairwise);
    ``residual`` over the joined schema (left columns, then right ones). ``interval``: the time
    condition that bounds state (rows expire once the other side's watermark has passed them);
    ``ttl``: for unbounded joins, drop a stored row once its side's watermark has passed its
    event time + ttl (ticks; ``ttl_maps`` give each side's (time column, map)). The output is a
    changelog when an input is one, or for an outer join without a time bound (a row emitted
    NULL-padded is retracted when its first match arrives); an interval join emits a padded row
    once, when it expires unmatched, so its output stays append-only.
    """

    kind: JoinKind
    left: PlanNode
    right: PlanNode
    left_keys: list[Expr]
    right_keys: list[Expr]
    residual: Expr | None
    schema: pa.Schema
    interval: IntervalBounds | None = None
    ttl: int | None = None
    ttl_cols: tuple[tuple[int, WatermarkMap] | None, tuple[int, WatermarkMap] | None] = (None, None)
    time_col: str | None = None
    time_cols: dict[str, WatermarkMap] = field(default_factory=dict)
    condition_sql: str = ""

    @property
    def changelog(self) -> bool:
        if self.left.changelog or self.right.changelog:
            return True
        return self.kind != "inner" and self.interval is None

    @property
    def children(self) -> list:
        return [self.left, self.right]


AsofOp = Literal[">=", ">", "<=", "<"]


@dataclass
class AsofJoin:
    """``[LEFT] ASOF JOIN r MATCH_CONDITION(l.t OP r.t) ON l.k = r.k``, and the event-time temporal
    join ``JOIN r FOR SYSTEM_TIME AS OF l.t ON l.k = r.pk`` (``temporal``: an ASOF ``>=`` on the
    versioned source's primary key, its event time the version's start).

    Each left row pairs with the one right row of equal key whose time is closest to its own
    while ``left.t OP right.t`` holds (ties: the later arrival). ``left_col``/``right_col`` index
    the two time columns, ``left_map``/``right_map`` give their watermarks from the root one. A
    row is emitted once, when no future right row can change its match (the right watermark has
    passed it: ``operators/asof_join.py``), so the output is append-only.
    """

    kind: Literal["inner", "left"]
    left: PlanNode
    right: PlanNode
    left_keys: list[Expr]
    right_keys: list[Expr]
    op: AsofOp
    left_col: int
    right_col: int
    left_map: WatermarkMap
    right_map: WatermarkMap
    schema: pa.Schema
    time_col: str | None = None
    time_cols: dict[str, WatermarkMap] = field(default_factory=dict)
    condition_sql: str = ""
    temporal: bool = False

    @property
    def changelog(self) -> bool:
        return False

    @property
    def children(self) -> list:
        return [self.left, self.right]


@dataclass
class LookupJoin:
    """``JOIN t FOR SYSTEM_TIME AS OF l.proc_time AS s ON …`` with a processing-time attribute: each
    left row joins the rows ``t`` holds when it arrives (a file-backed table, a view, a stream);
    later changes of ``t`` never revise emitted rows. Only the right side is stored. ``residual``
    over the joined schema; the output is a changelog only when the left input is one."""

    kind: Literal["inner", "left"]
    left: PlanNode
    right: PlanNode
    left_keys: list[Expr]
    right_keys: list[Expr]
    residual: Expr | None
    schema: pa.Schema
    time_col: str | None = None
    time_cols: dict[str, WatermarkMap] = field(default_factory=dict)
    condition_sql: str = ""

    @property
    def changelog(self) -> bool:
        return self.left.changelog

    @property
    def children(self) -> list:
        return [self.left, self.right]


@dataclass
class ExternalLookupJoin:
    """``JOIN t FOR SYSTEM_TIME AS OF l.proc_time AS s ON l.k = s.k`` where ``t`` is a PostgreSQL
    table (``table``: its ``LookupTableSpec``): each left batch's keys are fetched from the
    database (or its cache) when the batch arrives. ``t`` is no input of the query (its only
    child is ``left``); ``table_filter`` (ON conjuncts on ``t`` alone) filters the fetched rows,
    ``right_cols`` are the columns of ``t`` the ``left_keys`` equal, ``key_types`` their common
    types; ``residual`` is over the joined schema."""

    kind: Literal["inner", "left"]
    left: PlanNode
    table: object
    right_schema: pa.Schema  # t's columns under their joined (internal) names
    left_keys: list[Expr]
    right_cols: list[str]
    key_types: list[pa.DataType]
    table_filter: Expr | None
    residual: Expr | None
    schema: pa.Schema
    time_col: str | None = None
    time_cols: dict[str, WatermarkMap] = field(default_factory=dict)
    condition_sql: str = ""

    @property
    def changelog(self) -> bool:
        return self.left.changelog

    @property
    def children(self) -> list:
        return [self.left]


@dataclass
class UnionAll:
    """The rows of every input, in the first input's column names and types."""

    inputs: list[PlanNode]
    schema: pa.Schema
    time_col: str | None = None
    time_cols: dict[str, WatermarkMap] = field(default_factory=dict)

    @property
    def changelog(self) -> bool:
        return any(i.changelog for i in self.inputs)

    @property
    def children(self) -> list:
        return list(self.inputs)


class _OverChild:
    """What TopN and Over share: one child, whose event-time column stays theirs while it
    is still among their time columns."""

    @property
    def time_col(self) -> str | None:
        tc = self.child.time_col
        return tc if tc in self.time_cols else next(iter(self.time_cols), None)

    @property
    def children(self) -> list:
        return [self.child]


@dataclass
class TopN(_OverChild):
    """``ROW_NUMBER() OVER (PARTITION BY … ORDER BY …) AS rn`` bounded by ``WHERE rn <= n`` above
    it, as Flink plans it: the first ``n`` rows of each partition in ``order`` (``RANK()`` /
    ``DENSE_RANK()``, ``kind``: the rows ranked ``n`` or better).

    ``child`` is the inner SELECT block with the row number as a placeholder column
    (``rank_index``) and the PARTITION BY / ORDER BY values as hidden trailing columns
    (``hidden`` of them; ``partition``/``order`` index them, ``order`` as (column, descending,
    nulls first)). ``mode``: ``"topn"`` keeps the top ``n`` and emits a changelog (a row that
    leaves the top is retracted; with ``rank_used``, so is every row whose number changes);
    ``"first"`` (``ORDER BY <event time> ASC`` with ``n = 1``: deduplication keeping the first
    row) emits each partition's first row once, when the watermark of ``time_map`` has passed
    it, so the output stays append-only; ``ties_last``: equal sort keys rank the later arrival
    first (Flink's keep-last-row deduplication, ``ORDER BY <event time> DESC``, ``n = 1``).
    """

    child: object
    partition: list[int]
    order: list[tuple[int, bool, bool]]
    n: int
    rank_index: int
    hidden: int
    mode: Literal["topn", "first"] = "topn"
    rank_used: bool = True
    ties_last: bool = False
    time_map: WatermarkMap | None = None
    sql: str = ""
    # the numbering: ROW_NUMBER (distinct numbers), RANK (ties share one, gaps after them) or
    # DENSE_RANK (ties share one, no gaps); with ties, a partition may keep more than n rows
    kind: Literal["row_number", "rank", "dense_rank"] = "row_number"

    @property
    def schema(self) -> pa.Schema:
        inner = self.child.schema
        return pa.schema(list(inner)[: len(inner) - self.hidden])

    @property
    def changelog(self) -> bool:
        return self.mode == "topn"

    @property
    def time_cols(self) -> dict[str, WatermarkMap]:
        names = set(self.schema.names)
        return {c: m for c, m in self.child.time_cols.items() if c in names}



@dataclass(frozen=True)
class OverFunc:
    """One function of an ``Over`` node, its arguments as column indices in the child:
    ``LAG``/``LEAD(arg, offset, default)``, or an aggregate (``sum``, ``count``, ``count_star``
    (``arg`` -1), ``avg``, ``min``, ``max``) over a frame ending at the current row: the
    ``offset`` rows before it (``ROWS BETWEEN offset PRECEDING``), or all of them (``offset``
    -1, unbounded) with ``peers``: RANGE, rows of equal time share one value."""

    kind: Literal["lag", "lead", "sum", "count", "count_star", "avg", "min", "max"]
    arg: int
    offset: int
    default: int | None
    name: str
    out_type: pa.DataType | None = None  # None: the argument's type (LAG/LEAD)
    peers: bool = False


@dataclass
class Over(_OverChild):
    """``LAG``/``LEAD`` and aggregates ``OVER ([PARTITION BY …] ORDER BY <event time> [frame])``,
    as Flink runs OVER in streams: rows are taken in event-time order once the watermark (``time_map``) has passed
    them, and each row is emitted once with its function values appended (append-only).

    ``child`` is the SELECT block below with the PARTITION BY values, the ORDER BY column and the
    functions' arguments and defaults as hidden trailing columns (``hidden`` of them). A row with
    a ``LEAD`` waits for that many later rows of its partition (or the end of input), so the
    output carries no event time on then (its rows come behind the watermark).
    """

    child: object
    partition: list[int]
    order_col: int
    funcs: list[OverFunc]
    hidden: int
    time_map: WatermarkMap | None  # None: over a changelog ordered by a non-time column (applied at once)
    sql: str = ""
    strict: bool = False  # RANGE frames: take rows only once the watermark is past them (no peer can follow)

    @property
    def schema(self) -> pa.Schema:
        inner = self.child.schema
        fields = list(inner)[: len(inner) - self.hidden]
        return pa.schema(fields + [pa.field(f.name, f.out_type or inner.field(f.arg).type) for f in self.funcs])

    @property
    def changelog(self) -> bool:
        # over a changelog (ROWS n PRECEDING aggregates only): a retraction re-emits the n rows after it
        return bool(self.child.changelog)

    @property
    def time_cols(self) -> dict[str, WatermarkMap]:
        if self.changelog or any(f.kind == "lead" for f in self.funcs):  # corrections come behind the watermark
            return {}
        names = set(self.schema.names)
        return {c: m for c, m in self.child.time_cols.items() if c in names}



PlanNode = "Scan | Filter | Join | AsofJoin | LookupJoin | ExternalLookupJoin | UnionAll | TopN | Over | QueryPlan"


def leaves(node) -> list[str]:
    """The relations a tree reads, each once, in the order of first appearance."""
    out: list[str] = []

    def walk(n) -> None:
        if isinstance(n, Scan):
            if n.name not in out:
                out.append(n.name)
            return
        for c in n.children:
            walk(c)

    walk(node)
    return out


def looked_up(node) -> set[str]:
    """The PostgreSQL lookup tables a plan reads (``ExternalLookupJoin``: no inputs of it)."""
    out: set[str] = set()
    if isinstance(node, ExternalLookupJoin):
        out.add(node.table.name)
    kids = [node.child] if isinstance(node, QueryPlan) else list(getattr(node, "children", []))
    for k in kids:
        if k is not None:
            out |= looked_up(k)
    return out


def explain_node(node, depth: int = 0) -> list[str]:
    """Indented lines, one or more per node, children below their parent."""
    pad = "  " * depth
    if isinstance(node, Scan):
        return [f"{pad}Scan: {node.name}{' (changelog)' if node.changelog else ''}"]
    if isinstance(node, Filter):
        return [f"{pad}Filter: {node.predicate.sql}"] + explain_node(node.child, depth + 1)
    if isinstance(node, Join):
        extra = ""
        if node.interval is not None:
            iv = node.interval
            extra = f" interval=[{iv.lo}, {iv.hi}] ticks (state expires with the watermark)"
        elif node.ttl is not None:
            extra = f" state_ttl={node.ttl} ticks"
        else:
            extra = " (unbounded state: set WITH ('state_ttl' = '…') to bound it)"
        out = "changelog" if node.changelog else "append-only"
        lines = [f"{pad}Join[{node.kind}, {out}]: {node.condition_sql}{extra}"]
        return lines + explain_node(node.left, depth + 1) + explain_node(node.right, depth + 1)
    if isinstance(node, AsofJoin):
        what = "TemporalJoin[event time" if node.temporal else f"AsofJoin[{node.kind}, {node.op}"
        lines = [f"{pad}{what}, append-only]: {node.condition_sql} (right state: the latest row per key "
                 "before the watermark and the newer ones)"]
        return lines + explain_node(node.left, depth + 1) + explain_node(node.right, depth + 1)
    if isinstance(node, LookupJoin):
        out = "changelog" if node.changelog else "append-only"
        lines = [f"{pad}LookupJoin[{node.kind}, {out}, processing time]: {node.condition_sql} "
                 "(the right input is kept whole: its rows as of each left row's arrival)"]
        return lines + explain_node(node.left, depth + 1) + explain_node(node.right, depth + 1)
    if isinstance(node, ExternalLookupJoin):
        out = "changelog" if node.changelog else "append-only"
        cache = (f"cache {node.table.cache_max_rows} rows for {node.table.cache_ttl_ms} ms"
                 if node.table.cache_max_rows else "no cache")
        lines = [f"{pad}LookupJoin[{node.kind}, {out}, processing time]: {node.condition_sql} "
                 f"({node.table.where()}: misses fetched in one query per batch, {cache})"]
        return lines + explain_node(node.left, depth + 1)
    if isinstance(node, TopN):
        what = ("Deduplicate[keep first, append-only]" if node.mode == "first" else
                f"TopN[n={node.n}, changelog{', ties: last arrival first' if node.ties_last else ''}]")
        return [f"{pad}{what}: {node.sql}"] + explain_node(node.child, depth + 1)
    if isinstance(node, Over):
        what = ("Over[changelog: a change re-emits the frames after it]" if node.changelog else
                "Over[append-only, in event-time order]")
        return [f"{pad}{what}: {node.sql}"] + explain_node(node.child, depth + 1)
    if isinstance(node, UnionAll):
        lines = [f"{pad}UnionAll{' (changelog)' if node.changelog else ''}"]
        for c in node.inputs:
            lines += explain_node(c, depth + 1)
        return lines
    return [pad + line for line in node.explain()]  # a SELECT block (QueryPlan)


# --------------------------------------------------------------------------- a SELECT block

AggKind = Literal[
    "count_star", "count", "count_distinct", "sum", "avg", "min", "max", "first_value", "last_value"
]
#: aggregates that stay correct when input rows are retracted (weight −1)
INVERTIBLE: frozenset[str] = frozenset({"count_star", "count", "sum", "avg"})


@dataclass(frozen=True)
class AggSpec:
    """One aggregate call: its kind, the Arrow type of its argument and of its result."""

    kind: AggKind
    arg_type: pa.DataType | None
    out_type: pa.DataType


def result_type(kind: AggKind, arg_type: pa.DataType | None) -> pa.DataType:
    if kind in ("count_star", "count", "count_distinct"):
        return pa.int64()
    if kind == "avg":
        return pa.float64()
    if kind == "sum":
        assert arg_type is not None
        return pa.float64() if pa.types.is_floating(arg_type) else pa.int64()
    assert arg_type is not None
    return arg_type


@dataclass(frozen=True)
class WindowSpec:
    """A window in ticks of the event-time column (ms for TIMESTAMP(3)/BIGINT, µs for (6))."""

    kind: Literal["tumble", "hop", "session"]
    size: int = 0
    slide: int = 0
    gap: int = 0
    offset: int = 0


def group_schema(
    key_types: list[pa.DataType], specs: list[AggSpec], windowed: bool, time_type: pa.DataType
) -> pa.Schema:
    fields = []
    if windowed:
        fields += [pa.field("__ws", time_type), pa.field("__we", time_type)]
    fields += [pa.field(f"__k{i}", t) for i, t in enumerate(key_types)]
    fields += [pa.field(f"__a{j}", s.out_type) for j, s in enumerate(specs)]
    return pa.schema(fields)



@dataclass(frozen=True)
class RelationInfo:
    """What a query needs to know about its input: schema, event time, changelog or not.

    ``time_cols``: every event-time column → how its watermark follows from the root source's
    (None: just ``time_col``, with the source's own watermark). ``kind`` "source" with no
    ``time_col`` lets a window place the implicit watermark; ``connector`` names a source's
    connector (then it cannot).
    """

    name: str
    schema: pa.Schema
    time_col: str | None = None
    changelog: bool = False
    time_cols: dict[str, WatermarkMap] | None = None
    kind: str = "relation"
    connector: str | None = None
    primary_key: tuple[str, ...] = ()  # a source's PRIMARY KEY (…) NOT ENFORCED: a versioned table
    lookup: object | None = None  # a jdbc / postgres table (``lookup_tables.LookupTableSpec``): lookup only
    proctime: str | None = None  # a source's ``name AS PROCTIME()`` column (the planner computes it)

    def event_time(self) -> dict[str, WatermarkMap]:
        if self.time_cols is not None:
            return dict(self.time_cols)
        return {} if self.time_col is None else {self.time_col: IDENTITY}


@dataclass
class AggregatePlan:
    keys: list[Expr]
    specs: list[AggSpec]
    args: list[Expr | None]
    window: WindowSpec | None
    time_index: int | None
    time_type: pa.DataType
    group_schema: pa.Schema
    lateness: int = 0  # allowed lateness in ticks of the window's time column
    closes_with: str = ""  # GROUP BY the input's window bounds: the window-end column groups close with


@dataclass
class QueryPlan:
    input: str
    input_schema: pa.Schema
    where: Expr | None
    aggregate: AggregatePlan | None
    projections: list[Expr]
    names: list[str]
    having: Expr | None
    output_schema: pa.Schema
    emit: str  # "append" | "changes" | "close"
    input_changelog: bool
    time_col: str | None
    late_data_to: str | None
    order_by: list[tuple[int, bool]] = field(default_factory=list)  # (output column, descending)
    limit: int | None = None
    # the output's event-time columns → their watermark from the root source's (time_col among them)
    time_cols: dict[str, WatermarkMap] = field(default_factory=dict)
    # the root source's watermark → the watermark of the column the window reads; the reactor
    # applies it before the operator sees a watermark
    input_watermark: WatermarkMap = IDENTITY
    # a window over a source with no declared watermark: the source column that becomes its event time
    implicit_watermark: str | None = None
    # the input subtree (plan.py): a Scan of ``input``, or joins / UNION ALL / subqueries
    child: object | None = None

    @property
    def schema(self) -> pa.Schema:
        """The visible output columns (a plan-tree node's ``schema``; no ``__weight``)."""
        return self.output_schema

    @property
    def tree(self) -> bool:
        """Whether the input is more than one relation read as is (a join, union or subquery)."""
        return self.child is not None and not isinstance(self.child, Scan)

    @property
    def inputs(self) -> list[str]:
        """The relations this query reads, each once."""
        return leaves(self.child) if self.tree else [self.input]

    @property
    def children(self) -> list:
        return [self.child] if self.child is not None else [Scan(self.input, self.input_schema, self.input_changelog)]

    @property
    def late_updates(self) -> bool:
        """EMIT ON WINDOW CLOSE with allowed lateness: late rows re-fire closed windows."""
        return self.emit == "close" and self.aggregate is not None and self.aggregate.lateness > 0

    @property
    def changelog(self) -> bool:
        """Whether the output carries ``__weight`` (a Z-set changelog)."""
        return self.emit == "changes" or self.input_changelog or self.late_updates

    def explain(self) -> list[str]:
        lines = []
        if self.limit is not None or self.order_by:
            lines.append(f"Sort/Limit: order={self.order_by} limit={self.limit}")
        lines.append(f"Project: {', '.join(f'{e.sql} AS {n}' for e, n in zip(self.projections, self.names, strict=True))}")
        if self.having is not None:
            lines.append(f"  Having: {self.having.sql}")
        if self.aggregate is not None:
            a = self.aggregate
            w = "none" if a.window is None else f"{a.window}"
            if a.closes_with:
                w = f"the input's windows (each group closes when the watermark passes its {a.closes_with})"
            late = f" allowed_lateness={a.lateness}" if a.lateness else ""
            lines.append(f"  Aggregate[emit={self.emit}]: keys=[{', '.join(k.sql for k in a.keys)}] "
                         f"aggs=[{', '.join(s.kind for s in a.specs)}] window={w}{late}")
        if self.where is not None:
            lines.append(f"    Filter: {self.where.sql}")
        if self.tree:
            lines += explain_node(self.child, 3)
        else:
            lines.append(f"      Scan: {self.input}{' (changelog)' if self.input_changelog else ''}")
        if self.implicit_watermark:
            lines.append(f"  implicit watermark on {self.input}.{self.implicit_watermark} (zero delay)")
        for name, wm in self.time_cols.items():
            lines.append(f"  event time {name}: {wm.describe()}")
        if self.late_data_to:
            lines.append(f"  late rows → {self.late_data_to}")
        return lines
