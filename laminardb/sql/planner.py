"""Bind a SELECT to its input relation and produce a ``QueryPlan`` the engine can run.

Entry point: ``plan_query(query, lookup, batch=False)``. The plan is a plain dataclass:
WHERE over the input, an optional keyed/windowed aggregation (keys and aggregate
arguments as compiled expressions over the input, aggregate specs, window spec), then
HAVING and the SELECT list over the aggregate's group columns (``__ws``, ``__we``,
``__k*``, ``__a*``). Non-aggregating queries project the input directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
from sqlglot import exp

from laminardb.operators.aggregates import INVERTIBLE, AggSpec, result_type
from laminardb.operators.group_aggregate import WindowSpec, group_schema
from laminardb.sql._dialect import parse_select
from laminardb.sql.ddl import Query
from laminardb.sql.exceptions import (
    GroupingError,
    SqlTypeError,
    UnknownObjectError,
    UnsupportedSqlError,
)
from laminardb.sql.expressions import Expr, Scope, compile_expr
from laminardb.sql.intervals import interval_ms
from laminardb.sql.types import ticks_per_ms, type_name

WEIGHT = "__weight"


@dataclass(frozen=True)
class RelationInfo:
    """What a query needs to know about its input: schema, event time, changelog or not."""

    name: str
    schema: pa.Schema
    time_col: str | None = None
    changelog: bool = False


@dataclass
class AggregatePlan:
    keys: list[Expr]
    specs: list[AggSpec]
    args: list[Expr | None]
    window: WindowSpec | None
    time_index: int | None
    time_type: pa.DataType
    group_schema: pa.Schema


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

    @property
    def changelog(self) -> bool:
        """Whether the output carries ``__weight`` (a Z-set changelog)."""
        return self.emit == "changes" or self.input_changelog

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
            lines.append(f"  Aggregate[emit={self.emit}]: keys=[{', '.join(k.sql for k in a.keys)}] "
                         f"aggs=[{', '.join(s.kind for s in a.specs)}] window={w}")
        if self.where is not None:
            lines.append(f"    Filter: {self.where.sql}")
        lines.append(f"      Scan: {self.input}{' (changelog)' if self.input_changelog else ''}")
        if self.late_data_to:
            lines.append(f"  late rows → {self.late_data_to}")
        return lines


_AGG_KINDS: dict[type, str] = {
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Min: "min",
    exp.Max: "max",
    exp.FirstValue: "first_value",
    exp.LastValue: "last_value",
    exp.First: "first_value",
    exp.Last: "last_value",
}
_WINDOW_FUNCS = {"TUMBLE", "HOP", "SLIDE", "SESSION"}
_WINDOW_REFS = {
    "WINDOW_START": "__ws", "WINDOW_END": "__we", "WINDOW_TIME": "__wt",
    "TUMBLE_START": "__ws", "TUMBLE_END": "__we", "HOP_START": "__ws", "HOP_END": "__we",
    "SESSION_START": "__ws", "SESSION_END": "__we", "TUMBLE_ROWTIME": "__wt",
    "HOP_ROWTIME": "__wt", "SESSION_ROWTIME": "__wt",
}


def plan_query(query: Query, lookup: Callable[[str], RelationInfo], *, batch: bool = False) -> QueryPlan:
    """Plan one SELECT. ``batch`` plans an ad-hoc query() (ORDER BY/LIMIT allowed, no watermark needed)."""
    sel = query.select
    for unsupported in ("joins", "laterals", "windows", "qualify"):
        if sel.args.get(unsupported):
            raise UnsupportedSqlError(f"{unsupported.upper().rstrip('S')} is not supported in this release")
    if sel.args.get("with_") or sel.args.get("with"):
        raise UnsupportedSqlError("WITH (common table expressions) is not supported; create a stream per step")
    frm = sel.args.get("from_") or sel.args.get("from")
    if frm is None:
        raise UnsupportedSqlError("a query needs FROM <source, stream or view>")
    if not isinstance(frm.this, exp.Table):
        raise UnsupportedSqlError("FROM must name a source, stream or view (subqueries are not supported)")
    ident = frm.this.this
    name = ident.name if ident.args.get("quoted") else ident.name.lower()
    rel = lookup(name)
    scope = Scope(rel.schema)
    where = compile_expr(sel.args["where"].this, scope) if sel.args.get("where") else None
    if where is not None and not pa.types.is_boolean(where.type):
        raise SqlTypeError(f"WHERE {where.sql} is {type_name(where.type)}, not BOOLEAN")

    if not batch and (sel.args.get("order") or sel.args.get("limit")):
        raise UnsupportedSqlError("ORDER BY and LIMIT are only supported in query(); a stream has no end to sort")

    window, time_index, time_type, group_items = _find_window(sel, query, rel, scope, batch)
    has_aggs = any(_is_agg(n) for e in sel.expressions for n in e.walk())
    distinct = bool(sel.args.get("distinct"))
    if group_items or window is not None or has_aggs or sel.args.get("having") is not None or distinct:
        plan = _plan_aggregate(sel, query, rel, scope, where, window, time_index, time_type, group_items, distinct)
    else:
        plan = _plan_project(sel, query, rel, scope, where)
    if batch:
        _plan_order_limit(sel, plan)
    return plan


def _find_window(sel, query: Query, rel: RelationInfo, scope: Scope, batch: bool):
    group = sel.args.get("group")
    items = list(group.expressions) if group else []
    found: list[tuple[str, list[exp.Expression]]] = []
    rest = []
    for it in items:
        if isinstance(it, exp.Anonymous) and it.name.upper() in _WINDOW_FUNCS:
            found.append((it.name.upper(), list(it.expressions)))
        elif isinstance(it, exp.Column) and it.name.upper() in ("WINDOW_START", "WINDOW_END", "WINDOW_TIME") and query.tvf:
            continue
        else:
            rest.append(it)
    if query.tvf is not None:
        tvf = query.tvf
        args = [exp.column(tvf.time_col)] + [parse_select(f"SELECT {a}").expressions[0] for a in tvf.args]
        if tvf.kind == "CUMULATE":
            raise UnsupportedSqlError("CUMULATE windows are not supported yet; use HOP")
        if tvf.kind == "HOP":  # Flink's TVF takes the slide before the size
            if len(args) < 3:
                raise SqlTypeError("HOP(TABLE t, DESCRIPTOR(ts), slide, size) needs slide and size")
            args = [args[0], args[2], args[1]] + args[3:]
        found.append((tvf.kind, args))
    if not found:
        return None, None, pa.int64(), rest
    if len(found) > 1:
        raise UnsupportedSqlError("a query may group by one window only")
    kind, args = found[0]
    if not args or not isinstance(args[0], exp.Column):
        raise SqlTypeError(f"{kind.lower()}() takes the event-time column first, e.g. tumble(ts, INTERVAL '1' SECOND)")
    idx = scope.resolve(args[0].name, args[0].this.args.get("quoted", False))
    col = rel.schema.field(idx)
    if rel.changelog:
        raise UnsupportedSqlError(f"windows over {rel.name!r} are not supported: it is a changelog (EMIT CHANGES); window its input instead")
    if not batch and rel.time_col != col.name:
        has = f"its event-time column is {rel.time_col!r}" if rel.time_col else "it declares no WATERMARK"
        raise SqlTypeError(
            f"{kind.lower()}({col.name}, …) needs an event-time column with a watermark, but {rel.name!r}: {has}"
        )
    tpm = ticks_per_ms(col.type)
    sizes = [interval_ms(a) * tpm for a in args[1:]]
    if any(s <= 0 for s in sizes):
        raise SqlTypeError(f"{kind.lower()}() sizes must be positive")
    if kind == "TUMBLE":
        if len(sizes) not in (1, 2):
            raise SqlTypeError("tumble(ts, size [, offset])")
        w = WindowSpec("tumble", size=sizes[0], offset=sizes[1] if len(sizes) > 1 else 0)
    elif kind in ("HOP", "SLIDE"):
        if len(sizes) not in (2, 3):
            raise SqlTypeError("hop(ts, size, slide [, offset])")
        if sizes[0] % sizes[1] != 0 and sizes[0] < sizes[1]:
            raise SqlTypeError("hop(): the slide must not exceed the size")
        w = WindowSpec("hop", size=sizes[0], slide=sizes[1], offset=sizes[2] if len(sizes) > 2 else 0)
    else:
        if len(sizes) != 1:
            raise SqlTypeError("session(ts, gap)")
        w = WindowSpec("session", gap=sizes[0])
    return w, idx, col.type, rest


def _is_agg(node: exp.Expression) -> bool:
    return isinstance(node, exp.Count) or type(node) in _AGG_KINDS


def _output_name(e: exp.Expression, i: int) -> str:
    if isinstance(e, exp.Alias):
        return e.alias
    if isinstance(e, exp.Column):
        return e.name
    if isinstance(e, exp.Anonymous) and e.name.upper() in _WINDOW_REFS:
        return _WINDOW_REFS[e.name.upper()].replace("__ws", "window_start").replace("__we", "window_end").replace("__wt", "window_time")
    return e.sql().lower() if len(e.sql()) < 64 else f"expr{i}"


def _plan_project(sel, query: Query, rel: RelationInfo, scope: Scope, where) -> QueryPlan:
    projections, names = [], []
    time_col = None
    for i, e in enumerate(sel.expressions):
        if isinstance(e, exp.Star):
            for f in rel.schema:
                projections.append(compile_expr(exp.column(f.name, quoted=True), scope))
                names.append(f.name)
                if f.name == rel.time_col:
                    time_col = f.name
            continue
        inner = e.this if isinstance(e, exp.Alias) else e
        if isinstance(inner, exp.Column) and inner.name.upper() in _WINDOW_REFS and inner.name.lower() not in [f.name.lower() for f in rel.schema]:
            raise UnsupportedSqlError(f"{inner.name} needs a window in GROUP BY")
        ex = compile_expr(inner, scope)
        name = _output_name(e, i)
        if isinstance(inner, exp.Column) and rel.schema.field(scope.resolve(inner.name, inner.this.args.get("quoted", False))).name == rel.time_col:
            time_col = name
        projections.append(ex)
        names.append(name)
    _check_unique(names)
    schema = pa.schema([pa.field(n, p.type) for n, p in zip(names, projections, strict=True)])
    if query.late_data_to:
        raise UnsupportedSqlError("LATE DATA TO applies to windowed queries only")
    return QueryPlan(rel.name, rel.schema, where, None, projections, names, None, schema,
                     "append", rel.changelog, time_col, None)


def _check_unique(names: list[str]) -> None:
    seen = set()
    for n in names:
        if n in seen:
            raise UnsupportedSqlError(f"output column {n!r} appears twice; give one of them an alias (AS …)")
        seen.add(n)


def _plan_aggregate(sel, query, rel, scope, where, window, time_index, time_type, group_items, distinct) -> QueryPlan:
    if any(isinstance(e, exp.Star) for e in sel.expressions):
        raise GroupingError("SELECT * cannot be used with GROUP BY or aggregates; list the columns")
    aliases = {e.alias.lower(): e.this for e in sel.expressions if isinstance(e, exp.Alias)}
    key_nodes: list[exp.Expression] = []
    for g in group_items:
        if isinstance(g, exp.Column) and g.name.lower() in aliases:
            try:
                scope.resolve(g.name, g.this.args.get("quoted", False))
            except LookupError:
                g = aliases[g.name.lower()]
        if isinstance(g, exp.Literal) and not g.is_string:
            g = sel.expressions[int(g.this) - 1]
            g = g.this if isinstance(g, exp.Alias) else g
        key_nodes.append(g)
    if distinct:
        if group_items or any(_is_agg(n) for e in sel.expressions for n in e.walk()):
            raise UnsupportedSqlError("SELECT DISTINCT with GROUP BY or aggregates is not supported")
        key_nodes = [e.this if isinstance(e, exp.Alias) else e for e in sel.expressions]
    keys = [compile_expr(k, scope) for k in key_nodes]
    key_cols = {}
    key_texts = {}
    for i, k in enumerate(key_nodes):
        if isinstance(k, exp.Column):
            key_cols[scope.resolve(k.name, k.this.args.get("quoted", False))] = i
        key_texts[k.sql()] = i

    emit = query.emit or ("close" if window is not None else "changes")
    specs: list[AggSpec] = []
    args: list[Expr | None] = []
    agg_index: dict[str, int] = {}

    def register(node: exp.Expression) -> int:
        text = node.sql()
        if text in agg_index:
            return agg_index[text]
        if isinstance(node, exp.Count):
            inner = node.this
            if isinstance(inner, exp.Star) or inner is None:
                kind, arg = "count_star", None
            elif isinstance(inner, exp.Distinct):
                kind, arg = "count_distinct", inner.expressions[0]
            else:
                kind, arg = "count", inner
        else:
            kind, arg = _AGG_KINDS[type(node)], node.this
            if isinstance(arg, exp.Distinct):
                if kind in ("min", "max"):
                    arg = arg.expressions[0]
                else:
                    raise UnsupportedSqlError(f"{kind.upper()}(DISTINCT …) is not supported; only COUNT(DISTINCT …)")
        if any(_is_agg(n) for n in (arg.walk() if arg is not None else [])):
            raise UnsupportedSqlError(f"nested aggregate in {text}")
        arg_expr = compile_expr(arg, scope) if arg is not None else None
        at = arg_expr.type if arg_expr is not None else None
        if kind in ("sum", "avg") and at is not None and not (pa.types.is_integer(at) or pa.types.is_floating(at)):
            raise SqlTypeError(f"{kind.upper()} needs a numeric argument, got {type_name(at)} in {text}")
        if kind in ("first_value", "last_value") and time_index is None and rel.time_col is None:
            raise UnsupportedSqlError(f"{kind.upper()} orders by event time; {rel.name!r} declares no WATERMARK")
        if rel.changelog and kind not in INVERTIBLE:
            raise UnsupportedSqlError(
                f"{kind.upper()} over the changelog {rel.name!r} is not supported (rows may be retracted); "
                "COUNT, SUM and AVG are"
            )
        specs.append(AggSpec(kind, at, result_type(kind, at)))
        args.append(arg_expr)
        agg_index[text] = len(specs) - 1
        return len(specs) - 1

    def rewrite(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Identifier | exp.Star):
            return node
        if _is_agg(node):
            return exp.column(f"__a{register(node)}", quoted=True)
        if isinstance(node, exp.Anonymous | exp.Column) and node.name.upper() in _WINDOW_REFS:
            if isinstance(node, exp.Column) and node.name.lower() in [f.name.lower() for f in rel.schema]:
                pass
            else:
                if window is None:
                    raise UnsupportedSqlError(f"{node.name} needs a window in GROUP BY")
                return exp.column(_WINDOW_REFS[node.name.upper()], quoted=True)
        if node.sql() in key_texts:
            return exp.column(f"__k{key_texts[node.sql()]}", quoted=True)
        if isinstance(node, exp.Column) and not node.name.startswith("__"):
            idx = scope.resolve(node.name, node.this.args.get("quoted", False))
            if idx in key_cols:
                return exp.column(f"__k{key_cols[idx]}", quoted=True)
            raise GroupingError(
                f"column {node.name!r} must appear in GROUP BY or be used in an aggregate function"
            )
        return node

    select_nodes = [(e.this if isinstance(e, exp.Alias) else e) for e in sel.expressions]
    rewritten = [n.copy().transform(rewrite) for n in select_nodes]
    having_node = sel.args["having"].this.copy().transform(rewrite) if sel.args.get("having") else None

    ts_type = time_type if window is not None else pa.int64()
    gschema = group_schema([k.type for k in keys], specs, window is not None, ts_type)
    if window is not None:
        gschema = gschema.append(pa.field("__wt", ts_type))
    gscope = Scope(gschema)
    projections = [compile_expr(n, gscope) for n in rewritten]
    names = [_output_name(e, i) for i, e in enumerate(sel.expressions)]
    _check_unique(names)
    having = compile_expr(having_node, gscope) if having_node is not None else None
    if emit == "close" and rel.changelog:
        raise UnsupportedSqlError(f"EMIT ON WINDOW CLOSE over the changelog {rel.name!r} is not supported")
    if window is not None and window.kind != "session" and emit not in ("close", "changes"):
        emit = "close"
    time_col = None
    if window is not None and emit == "close":
        for n, node in zip(names, rewritten, strict=True):
            if isinstance(node, exp.Column) and node.name in ("__we", "__wt"):
                time_col = n
                break
    if query.late_data_to and window is None:
        raise UnsupportedSqlError("LATE DATA TO applies to windowed queries only")
    agg = AggregatePlan(keys, specs, args, window, time_index if time_index is not None else _time_index(rel),
                        ts_type, gschema)
    schema = pa.schema([pa.field(n, p.type) for n, p in zip(names, projections, strict=True)])
    return QueryPlan(rel.name, rel.schema, where, agg, projections, names, having, schema, emit,
                     rel.changelog, time_col, query.late_data_to)


def _time_index(rel: RelationInfo) -> int | None:
    if rel.time_col is None:
        return None
    return rel.schema.get_field_index(rel.time_col)


def _plan_order_limit(sel, plan: QueryPlan) -> None:
    order = sel.args.get("order")
    if order is not None:
        lowered = [n.lower() for n in plan.names]
        for o in order.expressions:
            node = o.this
            if isinstance(node, exp.Literal) and not node.is_string:
                idx = int(node.this) - 1
            elif isinstance(node, exp.Column) and node.name.lower() in lowered:
                idx = lowered.index(node.name.lower())
            else:
                raise UnsupportedSqlError(f"ORDER BY {node.sql()}: order by an output column name or position")
            plan.order_by.append((idx, bool(o.args.get("desc"))))
    limit = sel.args.get("limit")
    if limit is not None:
        plan.limit = int(limit.expression.this)


def lookup_from(relations: dict[str, RelationInfo]) -> Callable[[str], RelationInfo]:
    def lookup(name: str) -> RelationInfo:
        if name in relations:
            return relations[name]
        lowered = {k.lower(): v for k, v in relations.items()}
        if name.lower() in lowered:
            return lowered[name.lower()]
        known = ", ".join(sorted(relations)) or "none yet"
        raise UnknownObjectError(f"unknown source, stream or view {name!r}; known: {known}")

    return lookup
