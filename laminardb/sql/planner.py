"""Bind a SELECT to its inputs and produce a ``QueryPlan`` the engine can run.

Entry point: ``plan_query(query, lookup, batch=False)``. A query compiles to a tree (``plan.py``):
its top SELECT block is a ``QueryPlan`` whose ``child`` is a ``Scan`` of one relation (the
common case, run by one ``QueryOperator``) or a subtree — joins (``binder.py``), UNION ALL,
subqueries in FROM and ROW_NUMBER() Top-N / deduplication over one (``over.py``), each inner
SELECT block a ``QueryPlan`` of its own. A SELECT block is: WHERE over the input, an optional
keyed/windowed aggregation (keys and aggregate arguments as compiled expressions over the
input, aggregate specs, window spec), then HAVING and the SELECT list over the aggregate's
group columns (``__ws``, ``__we``, ``__k*``, ``__a*``). Non-aggregating queries project the
input directly.

Event time: a relation has event-time columns, each with the ``WatermarkMap`` that turns its
root source's watermark into that column's (``sql/watermarks.py``). A window reads one of them;
on a source that declares no watermark the window's column becomes the source's event time
(``QueryPlan.implicit_watermark``, zero delay). A windowed stream that emits on window close
passes event time on in ``window_start``/``window_end``, so windows cascade.

Window TVFs: a query may hold several (q5); ``ddl`` tags the ``exp.Table`` each reads, and the
SELECT block whose FROM is that table takes its window — its window aggregate, or, when the block
does not aggregate, the TVF's rows with their window bounds (``_window_tvf.py``, stateless). A
GROUP BY of both bounds of the input's windows is a window aggregate too (``_window_groups.py``),
and ``PROCTIME()`` columns carry processing time (``watermarks.ProcessingTime``): windows over
them follow the clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import pyarrow as pa
from sqlglot import exp

from laminardb.sql._agg_filter import filtered_argument
from laminardb.sql._checks import check_supported
from laminardb.sql._dialect import parse_select
from laminardb.sql._select_items import (
    AGG_KINDS,
    WINDOW_FUNCS,
    WINDOW_REFS,
    aggregates,
    is_agg,
    output_name,
)
from laminardb.sql._window_groups import WindowGroups, window_attribute_grouping
from laminardb.sql._window_tvf import expand_window_tvf, window_spec
from laminardb.sql.ddl import Query
from laminardb.sql.exceptions import (
    GroupingError,
    SqlTypeError,
    UnknownObjectError,
    UnsupportedSqlError,
)
from laminardb.sql.expressions import Expr, Scope, compile_expr
from laminardb.sql.function_registry import processing_clock
from laminardb.sql.intervals import interval_ms
from laminardb.sql.plan import (
    INVERTIBLE,
    AggregatePlan,
    AggSpec,
    QueryPlan,
    RelationInfo,
    Scan,
    UnionAll,
    WindowSpec,
    group_schema,
    result_type,
)
from laminardb.sql.types import ticks_per_ms, type_name
from laminardb.sql.watermarks import (
    IDENTITY,
    ProcessingTime,
    WatermarkMap,
    WindowEdge,
    on_processing_time,
)


def plan_query(query: Query, lookup: Callable[[str], RelationInfo], *, batch: bool = False) -> QueryPlan:
    """Plan one SELECT. ``batch`` plans an ad-hoc query() (ORDER BY/LIMIT allowed, no watermark needed)."""
    # tagged TVFs (ddl._query): each block takes the window of the table it reads; a Query built
    # by hand carries one untagged ``tvf``, taken by the block that reads its table
    ctx = _Context(lookup, batch, [None if query.tvfs else query.tvf], tuple(query.tvfs))
    plan = _plan_select(query.select, query, ctx, top=True)
    if batch:
        _plan_order_limit(query.select, plan)
    return plan


@dataclass
class _Context:
    lookup: Callable[[str], RelationInfo]
    batch: bool
    tvf: list  # [the query's untagged window TVF, until the block reading its table takes it]
    tvfs: tuple = ()  # the query's window TVFs, by the index their exp.Table carries (meta["tvf"])

    # the planner's steps, passed to the OVER planner (over.py) that plans the blocks around a window
    def plan_subquery(self, node: exp.Expression):
        return _plan_subquery(node, self)

    def plan_select(self, sel, query: Query | None, *, top: bool) -> QueryPlan:
        return _plan_select(sel, query, self, top=top)

    def plan_block(self, sel, query: Query, rel: RelationInfo, child) -> QueryPlan:
        return _plan_block(sel, query, rel, child, self.batch)


def _tagged_tvf(sel, ctx: _Context):
    """The window TVF this block reads: its FROM table's (or a joined table's) tagged TVF."""
    frm = sel.args.get("from_") or sel.args.get("from")
    items = ([frm.this] if frm is not None else []) + [j.this for j in sel.args.get("joins") or []]
    for it in items:
        if isinstance(it, exp.Table) and it.meta.get("tvf") is not None:
            return ctx.tvfs[it.meta["tvf"]]
    return None


def _inner_query(sel, ctx: _Context, table: str | None) -> Query:
    """A subquery's block: no EMIT / LATE DATA TO / options of its own; the window TVF if it
    reads the TVF's table."""
    if ctx.tvfs:
        return Query(sel, sel.sql(), tvf=_tagged_tvf(sel, ctx))
    tvf = ctx.tvf[0]
    if tvf is not None and table is not None and tvf.table.strip("`\"").lower() == table.lower():
        ctx.tvf[0] = None
    else:
        tvf = None
    return Query(sel, sel.sql(), tvf=tvf)


def _table_name(table: exp.Table) -> str:
    ident = table.this
    return ident.name if ident.args.get("quoted") else ident.name.lower()


def _plan_item(node: exp.Expression, ctx: _Context, expand: bool = False):
    """One FROM input → (plan node, alias, quoted, visible schema, time_col, time_cols).

    ``expand``: a window TVF read here gives its rows with their windows (``_window_tvf``)."""
    alias_ident = node.args.get("alias")
    alias_ident = alias_ident.this if isinstance(alias_ident, exp.TableAlias) else alias_ident
    if isinstance(node, exp.Table):
        if isinstance(node.this, exp.Anonymous | exp.Func) or node.args.get("db"):
            raise UnsupportedSqlError(f"FROM {node.sql()}: name a source, stream or view")
        rel = ctx.lookup(_table_name(node))
        if rel.lookup is not None and node.args.get("version") is None:
            raise lookup_only(rel)
        scan = Scan(rel.name, rel.schema, rel.changelog, rel.time_col, rel.event_time(), rel.primary_key,
                    lookup=rel.lookup)
        if expand and node.meta.get("tvf") is not None:
            scan, rel = expand_window_tvf(ctx.tvfs[node.meta["tvf"]], rel, scan)
        if alias_ident is None:
            return scan, rel.name, bool(node.this.args.get("quoted")), rel.schema, rel.time_col, rel.event_time()
        return scan, alias_ident.name, bool(alias_ident.args.get("quoted")), rel.schema, rel.time_col, rel.event_time()
    if isinstance(node, exp.Subquery):
        inner = _plan_subquery(node.this, ctx)
        if alias_ident is None:
            raise UnsupportedSqlError("a subquery in FROM needs an alias: FROM (SELECT …) AS q")
        schema = inner.output_schema if hasattr(inner, "output_schema") else inner.schema
        return inner, alias_ident.name, bool(alias_ident.args.get("quoted")), schema, inner.time_col, dict(inner.time_cols)
    raise UnsupportedSqlError(f"FROM {node.sql()[:60]}: name a source, stream or view, or a subquery (SELECT …) AS q")


def _proctime_of(node: exp.Expression, ctx: _Context) -> str | None:
    """The ``AS PROCTIME()`` column of a FROM table (Flink DDL), unless it is read as it is
    stored (the inside of ``_with_proctime``), versioned (``FOR SYSTEM_TIME``) or a window TVF's."""
    if not isinstance(node, exp.Table) or node.meta.get("physical") or node.meta.get("tvf") is not None:
        return None
    if node.args.get("version") is not None or node.args.get("db") or isinstance(node.this, exp.Anonymous | exp.Func):
        return None
    return ctx.lookup(_table_name(node)).proctime


def _with_proctime(sel, ctx: _Context):
    """``FROM orders [AS o]`` → ``FROM (SELECT *, PROCTIME() AS proc_time FROM orders) AS o`` for a
    table declaring ``proc_time AS PROCTIME()``: the column is the batch's processing time."""
    sel = sel.copy()
    frm = sel.args.get("from_") or sel.args.get("from")
    for holder in [frm, *(sel.args.get("joins") or [])]:
        table = holder.this
        col = _proctime_of(table, ctx)
        if col is None:
            continue
        inner = parse_select("SELECT *, PROCTIME() AS c FROM t")
        inner.expressions[1].set("alias", exp.to_identifier(col, quoted=True))
        inner_table = exp.Table(this=table.this.copy())
        inner_table.meta["physical"] = True
        (inner.args.get("from_") or inner.args.get("from")).set("this", inner_table)
        alias = table.args.get("alias")
        name = alias.this.copy() if isinstance(alias, exp.TableAlias) else (alias.copy() if alias else table.this.copy())
        holder.set("this", exp.Subquery(this=inner, alias=exp.TableAlias(this=name)))
    return sel


def lookup_only(rel: RelationInfo) -> Exception:
    """A jdbc / postgres table read as a stream: it is only looked up, key by key."""
    from laminardb.errors import LookupOnlyTableError

    return LookupOnlyTableError(
        f"{rel.name!r} is a lookup table ({rel.lookup.where()}): it is read on demand, key by key, so it can "
        f"only be the right side of a lookup join: … FROM s AS o JOIN {rel.name} FOR SYSTEM_TIME AS OF o.proc_time "
        f"AS c ON o.k = c.k, where proc_time is a PROCTIME() column of the left input (SELECT *, PROCTIME() AS "
        "proc_time FROM s). To read the whole table, query PostgreSQL itself")


def _plan_subquery(node: exp.Expression, ctx: _Context):
    """A subquery's plan: a SELECT block, or UNION ALL of blocks."""
    if isinstance(node, exp.Union):
        if node.args.get("distinct"):
            raise UnsupportedSqlError("UNION (distinct) is not supported; UNION ALL is")
        parts = [_plan_subquery(node.this, ctx), _plan_subquery(node.expression, ctx)]
        flat = []
        for p in parts:
            flat += p.inputs if isinstance(p, UnionAll) else [p]
        return _union(flat)
    if isinstance(node, exp.Subquery):
        return _plan_subquery(node.this, ctx)
    if not isinstance(node, exp.Select):
        raise UnsupportedSqlError(f"{node.key.upper()} in FROM is not supported; UNION ALL of SELECTs is")
    if node.args.get("order") or node.args.get("limit"):
        raise UnsupportedSqlError("ORDER BY / LIMIT inside a subquery is not supported")
    return _plan_select(node, None, ctx, top=False)


def _union(parts: list) -> UnionAll:
    first = parts[0].output_schema if hasattr(parts[0], "output_schema") else parts[0].schema
    for p in parts[1:]:
        sch = p.output_schema if hasattr(p, "output_schema") else p.schema
        if len(sch) != len(first):
            raise SqlTypeError(f"UNION ALL inputs have {len(first)} and {len(sch)} columns; give each the same columns")
        for a, b in zip(first, sch, strict=True):
            if a.type != b.type:
                raise SqlTypeError(f"UNION ALL column {a.name!r} is {type_name(a.type)} in the first input and "
                                   f"{type_name(b.type)} in another; CAST one of them")
    # an event-time column stays one only where every input has it in the same place
    times: dict[str, WatermarkMap] = {}
    first_times = parts[0].time_cols
    for i, f in enumerate(first):
        maps = []
        for p in parts:
            sch = p.output_schema if hasattr(p, "output_schema") else p.schema
            maps.append(p.time_cols.get(sch.field(i).name))
        if all(m is not None and m == maps[0] for m in maps) and f.name in first_times:
            times[f.name] = maps[0]
    return UnionAll(parts, first, _primary(times, parts[0].time_col), times)


def _plan_select(sel, query: Query | None, ctx: _Context, *, top: bool) -> QueryPlan:
    """Plan one SELECT block over its FROM (a relation, a subquery, or joins)."""
    if any(isinstance(n, exp.Window) for e in sel.expressions for n in e.walk()):
        # LAG/LEAD/aggregates OVER (…): an Over node below the SELECT list
        from laminardb.sql.over import plan_window_functions

        planned = plan_window_functions(sel, query, ctx, top=top)
        if planned is not None:
            return planned
    check_supported(sel)
    batch = ctx.batch
    frm = sel.args.get("from_") or sel.args.get("from")
    if frm is None:
        raise UnsupportedSqlError("a query needs FROM <source, stream or view>")
    joins = sel.args.get("joins") or []
    if any(_proctime_of(t, ctx) for t in [frm.this, *(j.this for j in joins)]):
        sel = _with_proctime(sel, ctx)
        frm = sel.args.get("from_") or sel.args.get("from")
        joins = sel.args.get("joins") or []
    source = frm.this
    if not joins and isinstance(source, exp.Table):
        name = _table_name(source)
        if query is None:
            query = _inner_query(sel, ctx, name)
        elif ctx.tvfs:
            query = replace(query, tvf=_tagged_tvf(sel, ctx))
        elif ctx.tvf[0] is not None:
            ctx.tvf[0] = None  # the top block reads the TVF's table (the common case)
        rel = ctx.lookup(name)
        if rel.lookup is not None:
            raise lookup_only(rel)
        child = Scan(rel.name, rel.schema, rel.changelog, rel.time_col, rel.event_time())
        return _plan_block(sel, query, rel, child, batch)
    if query is None:
        query = _inner_query(sel, ctx, None)
    if not joins and isinstance(source, exp.Subquery):
        # ROW_NUMBER() OVER (…) bounded in this query: Top-N
        from laminardb.sql.over import plan_over

        over = plan_over(sel, source, ctx, batch)
        if over is not None:
            if top:
                query = replace(query, tvf=_tagged_tvf(sel, ctx) if ctx.tvfs else ctx.tvf[0])
            outer, rel, node = over
            return _plan_block(outer, query, rel, node, batch)
    expand = bool(joins and ctx.tvfs) and not aggregates(sel)  # window TVFs joined as rows
    planned = [_plan_item(source, ctx, expand)] + [_plan_item(j.this, ctx, expand) for j in joins]
    if top:  # an inner block that reads the window TVF's table has taken it
        query = replace(query, tvf=_tagged_tvf(sel, ctx) if ctx.tvfs else ctx.tvf[0])
    if expand:
        query = replace(query, tvf=None)
    if not joins:
        node, alias, _, schema, time_col, time_cols = planned[0]
        rel = RelationInfo(alias, schema, time_col, node.changelog, time_cols, kind="subquery")
        return _plan_block(sel, query, rel, node, batch)
    from laminardb.sql._join_inputs import FromItem
    from laminardb.sql.binder import bind_joins

    items = [FromItem(a, q, n, s, tc, tcs) for n, a, q, s, tc, tcs in planned]

    def relation(name, schema, time_col, changelog, time_cols):
        return RelationInfo(name, schema, time_col, changelog, time_cols, kind="join")

    sel, rel, node = bind_joins(sel, items, joins, query.options if top else {}, relation)
    return _plan_block(sel, query, rel, node, batch)


def _plan_block(sel, query: Query, rel: RelationInfo, child, batch: bool) -> QueryPlan:
    if query.tvf is not None and isinstance(child, Scan) and not aggregates(sel):
        # a window TVF with no aggregate: its rows with their windows, read like a subquery
        child, rel = expand_window_tvf(query.tvf, rel, child)
        query = replace(query, tvf=None)
    scope = Scope(rel.schema)
    where = compile_expr(sel.args["where"].this, scope) if sel.args.get("where") else None
    if where is not None and not pa.types.is_boolean(where.type):
        raise SqlTypeError(f"WHERE {where.sql} is {type_name(where.type)}, not BOOLEAN")

    if not batch and (sel.args.get("order") or sel.args.get("limit")):
        raise UnsupportedSqlError("ORDER BY and LIMIT are only supported in query(); a stream has no end to sort")

    win = _find_window(sel, query, rel, scope, batch)
    has_aggs = any(is_agg(n) for e in sel.expressions for n in e.walk())
    distinct = bool(sel.args.get("distinct"))
    if win.group_items or win.spec is not None or has_aggs or sel.args.get("having") is not None or distinct:
        plan = _plan_aggregate(sel, query, rel, scope, where, win, distinct)
    else:
        plan = _plan_project(sel, query, rel, scope, where)
    if query.allowed_lateness_ms is not None:
        if batch:
            raise UnsupportedSqlError("allowed_lateness belongs to CREATE STREAM; an ad-hoc query reads a snapshot")
        if win.spec is None:
            raise UnsupportedSqlError(
                "allowed_lateness applies to windowed aggregations (GROUP BY tumble/hop/session); this query has "
                "no window, so no row of it is ever late")
    plan.child = child
    if not isinstance(child, Scan):
        if plan.late_data_to:
            raise UnsupportedSqlError("LATE DATA TO applies to queries over one source, stream or view; "
                                      "this one reads a join, union or subquery")
        if plan.implicit_watermark is not None:
            raise SqlTypeError(f"a window over a join, union or subquery needs an event-time column; declare "
                               f"WATERMARK FOR {plan.implicit_watermark} AS … on its source")
        plan.input = plan.inputs[0]
    return plan


@dataclass
class _Window:
    """The window a query groups by (``spec`` None: none) and how its event time is read."""

    spec: WindowSpec | None
    time_index: int | None
    time_type: pa.DataType
    group_items: list[exp.Expression]
    kind: str = ""
    call_sql: str | None = None  # the GROUP BY window call, which SELECT may repeat (LaminarDB)
    input_watermark: WatermarkMap = IDENTITY
    implicit: str | None = None
    lateness: int = 0
    # GROUP BY the bounds of the input's windows (sql/_window_groups.py): a hidden one-tick window
    hidden: WindowGroups | None = None


def _find_window(sel, query: Query, rel: RelationInfo, scope: Scope, batch: bool) -> _Window:
    group = sel.args.get("group")
    items = list(group.expressions) if group else []
    found: list[tuple[str, list[exp.Expression], str | None]] = []
    rest = []
    for it in items:
        if isinstance(it, exp.Anonymous) and it.name.upper() in WINDOW_FUNCS:
            found.append((it.name.upper(), list(it.expressions), it.sql()))
        elif isinstance(it, exp.Column) and it.name.upper() in ("WINDOW_START", "WINDOW_END", "WINDOW_TIME") and query.tvf:
            continue
        else:
            rest.append(it)
    if query.tvf is not None:
        tvf = query.tvf
        args = [exp.column(tvf.time_col)] + [parse_select(f"SELECT {a}").expressions[0] for a in tvf.args]
        if tvf.kind == "CUMULATE":
            raise UnsupportedSqlError("CUMULATE windows are not supported yet; use HOP")
        found.append((tvf.kind, args, None))
    if not found:
        groups = None
        if not batch and query.emit is None and query.allowed_lateness_ms is None and not rel.changelog:
            groups = window_attribute_grouping(rest, rel, scope)
        if groups is not None:
            spec = WindowSpec("tumble", size=1)
            return _Window(spec, groups.time_index, groups.time_type, rest, "TUMBLE", None,
                           groups.input_watermark, hidden=groups)
        return _Window(None, None, pa.int64(), rest)
    if len(found) > 1:
        raise UnsupportedSqlError("a query may group by one window only")
    kind, args, call_sql = found[0]
    kind = {"SLIDE": "HOP", "HOPPING": "HOP"}.get(kind, kind)
    if not args or not isinstance(args[0], exp.Column):
        raise SqlTypeError(f"{kind.lower()}() takes the event-time column first, e.g. tumble(ts, INTERVAL '1' SECOND)")
    idx = scope.resolve(args[0].name, args[0].this.args.get("quoted", False))
    col = rel.schema.field(idx)
    if rel.changelog:
        raise UnsupportedSqlError(f"windows over {rel.name!r} are not supported: it is a changelog (EMIT CHANGES); window its input instead")
    in_map, implicit = IDENTITY, None
    if not batch:
        in_map, implicit = _event_time(kind, col, rel)
    tpm = ticks_per_ms(col.type)
    w = window_spec(kind, [interval_ms(a) * tpm for a in args[1:]])
    lateness = (query.allowed_lateness_ms or 0) * tpm
    return _Window(w, idx, col.type, rest, kind, call_sql, in_map, implicit, lateness)


def _event_time(kind: str, col: pa.Field, rel: RelationInfo) -> tuple[WatermarkMap, str | None]:
    """The watermark map of the window's time column, or the implicit watermark to place."""
    times = rel.event_time()
    if col.name in times:
        return times[col.name], None
    call = f"{kind.lower()}({col.name}, …)"
    clause = f"WATERMARK FOR {col.name} AS {col.name} - INTERVAL '1' SECOND"
    if rel.kind == "source" and not times:
        if rel.connector is not None:
            raise SqlTypeError(
                f"{call}: source {rel.name!r} reads {rel.connector.upper()} and declares no watermark; declare its "
                f"event time where it is created (its connector keeps per-partition watermarks from the start): "
                f"add `{clause}` to the column list of CREATE SOURCE {rel.name}")
        if not (pa.types.is_timestamp(col.type) or col.type == pa.int64()):
            raise SqlTypeError(
                f"{call}: {col.name!r} is {type_name(col.type)}; a window's event-time column is TIMESTAMP(3), "
                "TIMESTAMP(6) or BIGINT epoch milliseconds")
        return IDENTITY, col.name
    if rel.kind == "source":
        raise SqlTypeError(
            f"{call}: the event time of source {rel.name!r} is {rel.time_col!r} (its watermark); window over "
            f"{rel.time_col}, or declare the watermark on {col.name} instead: `{clause}` in CREATE SOURCE {rel.name} (…)")
    has = (f"its event-time columns are {', '.join(times)}" if times else
           "it has no event-time column (it does not pass one on: a projection of a column with a watermark, "
           "or window_start/window_end of a windowed stream that emits on window close)")
    raise SqlTypeError(f"{call} needs an event-time column, but in {rel.name!r} {col.name!r} is none: {has}")


def _primary(time_cols: dict[str, WatermarkMap], prefer: str | None) -> str | None:
    """The output's main event-time column: ``prefer`` if it is one, else the first."""
    if prefer is not None and prefer in time_cols:
        return prefer
    return next(iter(time_cols), None)


def _plan_project(sel, query: Query, rel: RelationInfo, scope: Scope, where) -> QueryPlan:
    projections, names = [], []
    times = rel.event_time()
    time_cols: dict[str, WatermarkMap] = {}
    carried = None  # the output name of the input's main event-time column
    for i, e in enumerate(sel.expressions):
        if isinstance(e, exp.Star):
            for f in rel.schema:
                projections.append(compile_expr(exp.column(f.name, quoted=True), scope))
                names.append(f.name)
                if f.name in times:
                    time_cols.setdefault(f.name, times[f.name])
                    carried = carried or (f.name if f.name == rel.time_col else None)
            continue
        inner = e.this if isinstance(e, exp.Alias) else e
        if isinstance(inner, exp.Column) and inner.name.upper() in WINDOW_REFS and inner.name.lower() not in [f.name.lower() for f in rel.schema]:
            raise UnsupportedSqlError(f"{inner.name} needs a window in GROUP BY")
        ex = compile_expr(inner, scope)
        name = output_name(e, i)
        if isinstance(inner, exp.Column):
            src = rel.schema.field(scope.resolve(inner.name, inner.this.args.get("quoted", False))).name
            if src in times:
                time_cols.setdefault(name, times[src])
                carried = carried or (name if src == rel.time_col else None)
        elif isinstance(inner, exp.Anonymous) and inner.name.upper() == "PROCTIME":
            # a processing-time attribute: windows over it follow the connection's clock (q12)
            time_cols.setdefault(name, WatermarkMap((ProcessingTime(processing_clock()),)))
        projections.append(ex)
        names.append(name)
    _check_unique(names)
    schema = pa.schema([pa.field(n, p.type) for n, p in zip(names, projections, strict=True)])
    if query.late_data_to:
        raise UnsupportedSqlError("LATE DATA TO applies to windowed queries only")
    return QueryPlan(rel.name, rel.schema, where, None, projections, names, None, schema,
                     "append", rel.changelog, _primary(time_cols, carried), None, time_cols=time_cols)


def _check_unique(names: list[str]) -> None:
    seen = set()
    for n in names:
        if n in seen:
            raise UnsupportedSqlError(f"output column {n!r} appears twice; give one of them an alias (AS …)")
        seen.add(n)


def _plan_aggregate(sel, query, rel, scope, where, win: _Window, distinct) -> QueryPlan:
    window, time_index, time_type, group_items = win.spec, win.time_index, win.time_type, win.group_items
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
        if group_items or any(is_agg(n) for e in sel.expressions for n in e.walk()):
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
        cond = None
        if isinstance(node, exp.Filter):  # agg(…) FILTER (WHERE cond): see sql/_agg_filter.py
            node, cond = node.this, node.expression.this
        if isinstance(node, exp.Count):
            inner = node.this
            if isinstance(inner, exp.Star) or inner is None:
                kind, arg = "count_star", None
            elif isinstance(inner, exp.Distinct):
                kind, arg = "count_distinct", inner.expressions[0]
            else:
                kind, arg = "count", inner
        else:
            kind, arg = AGG_KINDS[type(node)], node.this
            if isinstance(arg, exp.Distinct):
                if kind in ("min", "max"):
                    arg = arg.expressions[0]
                else:
                    raise UnsupportedSqlError(f"{kind.upper()}(DISTINCT …) is not supported; only COUNT(DISTINCT …)")
        if any(is_agg(n) for n in (arg.walk() if arg is not None else [])):
            raise UnsupportedSqlError(f"nested aggregate in {text}")
        arg_expr = compile_expr(arg, scope) if arg is not None else None
        at = arg_expr.type if arg_expr is not None else None
        if kind in ("sum", "avg") and at is not None and not (pa.types.is_integer(at) or pa.types.is_floating(at)):
            raise SqlTypeError(f"{kind.upper()} needs a numeric argument, got {type_name(at)} in {text}")
        if kind in ("first_value", "last_value") and time_index is None and rel.time_col is None:
            raise UnsupportedSqlError(
                f"{kind.upper()} orders rows by event time, and {rel.name!r} has no event-time column: group by a "
                "window, or declare one with WATERMARK FOR ts AS ts - INTERVAL '1' SECOND in its CREATE SOURCE")
        if rel.changelog and kind not in INVERTIBLE:
            raise UnsupportedSqlError(
                f"{kind.upper()} over the changelog {rel.name!r} is not supported (rows may be retracted); "
                "COUNT, SUM and AVG are"
            )
        if cond is not None:
            kind, arg_expr = filtered_argument(kind, arg_expr, cond, scope, text)
            at = arg_expr.type
        specs.append(AggSpec(kind, at, result_type(kind, at)))
        args.append(arg_expr)
        agg_index[text] = len(specs) - 1
        return len(specs) - 1

    def rewrite(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Identifier | exp.Star):
            return node
        if is_agg(node) or (isinstance(node, exp.Filter) and is_agg(node.this)):
            return exp.column(f"__a{register(node)}", quoted=True)
        if isinstance(node, exp.Anonymous | exp.Column) and node.name.upper() in WINDOW_REFS:
            # with a window, window_start/window_end are its bounds, also over an input that has
            # such columns (a cascade: tumble(window_start, …) over bars); without, a plain column
            bare = window is None or win.hidden is not None  # a hidden window has no visible bounds
            if bare and isinstance(node, exp.Column) and node.name.lower() in [f.name.lower() for f in rel.schema]:
                pass
            else:
                if bare:
                    raise UnsupportedSqlError(f"{node.name} needs a window in GROUP BY")
                return exp.column(WINDOW_REFS[node.name.upper()], quoted=True)
        if isinstance(node, exp.Anonymous) and node.name.upper() in WINDOW_FUNCS:
            # LaminarDB writes the GROUP BY window call in SELECT for the window's start
            if window is None or win.hidden is not None or (win.call_sql is not None and node.sql() != win.call_sql):
                group = f"the GROUP BY window {win.call_sql}" if win.call_sql else "a window in GROUP BY"
                raise UnsupportedSqlError(f"{node.sql()} in SELECT stands for the window's start and must repeat "
                                          f"{group}; or select window_start / window_end")
            return exp.column("__ws", quoted=True)
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
    names = [output_name(e, i) for i, e in enumerate(sel.expressions)]
    _check_unique(names)
    having = compile_expr(having_node, gscope) if having_node is not None else None
    if emit == "close" and rel.changelog:
        raise UnsupportedSqlError(f"EMIT ON WINDOW CLOSE over the changelog {rel.name!r} is not supported")
    if window is not None and window.kind != "session" and emit not in ("close", "changes"):
        emit = "close"
    time_cols: dict[str, WatermarkMap] = {}
    if win.hidden is not None and emit == "close":
        # grouped by the input's window bounds: they stay event time (each group closes with them)
        for n, node in zip(names, rewritten, strict=True):
            if isinstance(node, exp.Column) and node.name.startswith("__k") and n not in time_cols:
                k = key_nodes[int(node.name[3:])]
                if isinstance(k, exp.Column):
                    src = rel.schema.field(scope.resolve(k.name, k.this.args.get("quoted", False))).name
                    if src in win.hidden.carried:
                        time_cols[n] = win.hidden.carried[src]
    elif window is not None and emit == "close" and not win.lateness:
        # a closed window's bounds are event time: windows cascade (1-minute bars → hourly bars)
        edges: dict[str, Literal["start", "end", "time"]] = (
            {"__we": "end", "__wt": "time"} if window.kind == "session" else
            {"__ws": "start", "__we": "end", "__wt": "time"})
        for n, node in zip(names, rewritten, strict=True):
            if isinstance(node, exp.Column) and node.name in edges and n not in time_cols:
                step = WindowEdge(edges[node.name], size=window.size, slide=window.slide or window.size,
                                  offset=window.offset, session=window.kind == "session")
                time_cols[n] = win.input_watermark.then(step)
    if query.late_data_to and window is None:
        raise UnsupportedSqlError("LATE DATA TO applies to windowed queries only")
    agg = AggregatePlan(keys, specs, args, window, time_index if time_index is not None else _time_index(rel),
                        ts_type, gschema, win.lateness)
    if win.hidden is not None:
        agg.closes_with = rel.schema.field(win.hidden.time_index).name
    schema = pa.schema([pa.field(n, p.type) for n, p in zip(names, projections, strict=True)])
    return QueryPlan(rel.name, rel.schema, where, agg, projections, names, having, schema, emit,
                     rel.changelog, _primary(time_cols, None), query.late_data_to, time_cols=time_cols,
                     input_watermark=win.input_watermark, implicit_watermark=win.implicit)


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


def follows_processing_time(node) -> bool:
    """Whether some node of a plan reads a processing-time column's watermark (a window over
    ``PROCTIME()``): the reactor advances such a query as the clock moves, without events."""
    maps = [getattr(node, "input_watermark", None), getattr(node, "time_map", None)]
    iv = getattr(node, "interval", None)
    if iv is not None:
        maps += [iv.left_map, iv.right_map]
    if any(m is not None and on_processing_time(m) for m in maps):
        return True
    kids = [node.child] if isinstance(node, QueryPlan) and node.tree else (
        [] if isinstance(node, QueryPlan) else list(node.children))
    return any(follows_processing_time(k) for k in kids)


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
