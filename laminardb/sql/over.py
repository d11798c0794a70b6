"""Plan OVER windows: ``ROW_NUMBER() … AS rn`` (``RANK()``, ``DENSE_RANK()``) bounded by ``rn``
above it, LAG/LEAD, aggregates.

Entry points: ``plan_over(sel, subquery, ctx, batch)`` and ``plan_window_functions(sel, query,
ctx, top=…)``, both called by the planner's ``_plan_select``, which passes its steps in ``ctx`` (``plan_subquery``,
``plan_select``, ``plan_block``). ``plan_over`` takes a SELECT
whose FROM is one subquery: ``None`` when that subquery selects no OVER window, else the outer
SELECT (its ``rn`` bound taken out of WHERE), the relation it reads and the ``plan.TopN`` node.

Flink runs a row number only in this shape — an outer ``WHERE rn <= N`` (``rn < N``, ``rn = 1``)
over an inner ``SELECT …, ROW_NUMBER() OVER (…) AS rn`` — and plans it as Top-N, or as a
deduplication when it orders by event time with ``N = 1``; so does laminardb. The inner block
is planned as any SELECT, with the row number as a BIGINT placeholder column (the operator
writes the numbers in) and the PARTITION BY / ORDER BY expressions as hidden trailing columns,
so that they may use anything the inner block can compute (a join's qualified columns, its
aggregates) and the operator reads plain columns. ``RANK()`` and ``DENSE_RANK()`` bounded the
same way are Top-N whose ties share a rank (``TopN.kind``); they are never a deduplication.

``plan_window_functions`` plans LAG, LEAD and aggregates OVER (… ORDER BY <event time>
[ROWS|RANGE frame ending at the current row]) in a SELECT list as a ``plan.Over`` node. Over a
changelog input (a Top-N, an outer join) it plans aggregates OVER (… ORDER BY <event time or a
number> ROWS BETWEEN n PRECEDING AND CURRENT ROW) only, whose output is a changelog too
(``operators/over_changelog.py``; Nexmark q6). Everything else with
OVER is refused with LDB-1002: other window functions, other frames, a row number or rank
with no bound.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from sqlglot import exp

from laminardb.sql._join_inputs import and_all, conjuncts
from laminardb.sql._select_items import is_agg, output_name
from laminardb.sql.ddl import Query
from laminardb.sql.exceptions import UnsupportedSqlError
from laminardb.sql.plan import Over, OverFunc, RelationInfo, TopN

_BOUND_OPS = (exp.LTE, exp.LT, exp.EQ, exp.GTE, exp.GT)
_RANKINGS: dict[type, Literal["row_number", "rank", "dense_rank"]] = {
    exp.RowNumber: "row_number", exp.Rank: "rank", exp.DenseRank: "dense_rank"}
_HIDDEN = "__over_"


def _window_items(sel: exp.Select) -> list[tuple[int, exp.Expression]]:
    return [(i, e) for i, e in enumerate(sel.expressions)
            if isinstance(e.this if isinstance(e, exp.Alias) else e, exp.Window)]


def _is_rn(node: exp.Expression, rn: str) -> bool:
    return isinstance(node, exp.Column) and (node.name == rn or node.name.lower() == rn.lower())


def _int_literal(node: exp.Expression) -> int | None:
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return int(node.this)
        except ValueError:
            return None
    return None


def _bound(c: exp.Expression, rn: str) -> int | None:
    """N of a conjunct ``rn <= N`` (``rn < N``, ``rn = 1``, or written the other way round)."""
    if not isinstance(c, _BOUND_OPS):
        return None
    left, right, op = c.this, c.expression, type(c)
    if _is_rn(right, rn) and not _is_rn(left, rn):
        left, right = right, left
        op = {exp.LTE: exp.GTE, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.GT: exp.LT}.get(op, op)
    value = _int_literal(right)
    if not _is_rn(left, rn) or value is None:
        return None
    if op is exp.LTE:
        return value
    if op is exp.LT:
        return value - 1
    if op is exp.EQ:
        if value != 1:
            raise UnsupportedSqlError(f"{c.sql()}: a row number equal to {value} is not supported yet; "
                                      f"bound it from above (WHERE {rn} <= N, or {rn} = 1)")
        return 1
    return None  # rn > k / rn >= k: a filter over the Top-N rows, kept in WHERE


def _uses(nodes: list[exp.Expression], rn: str) -> bool:
    for node in nodes:
        if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star)):
            return True
        if any(_is_rn(c, rn) for c in node.find_all(exp.Column)):
            return True
    return False


def plan_over(sel: exp.Select, subquery: exp.Subquery, ctx, batch: bool):
    """(outer SELECT, RelationInfo, TopN) for ``SELECT … FROM (SELECT …, ROW_NUMBER() OVER (…)
    AS rn …) WHERE rn <= N``; None when the subquery selects no OVER window."""
    inner = subquery.this
    if not isinstance(inner, exp.Select):
        return None
    items = _window_items(inner)
    if not items:
        return None
    if len(items) > 1:
        raise UnsupportedSqlError("one OVER window per SELECT is supported yet (ROW_NUMBER() OVER (…) AS rn, "
                                  "bounded by WHERE rn <= N in the query around it)")
    pos, item = items[0]
    win = item.this if isinstance(item, exp.Alias) else item
    func = win.this
    text = win.sql()
    if type(func) not in _RANKINGS:
        raise UnsupportedSqlError(
            f"{func.sql()} OVER (…) is not supported yet in a subquery: laminardb runs ROW_NUMBER(), RANK() and "
            "DENSE_RANK() there (Top-N and deduplication: ROW_NUMBER() OVER (PARTITION BY k ORDER BY x) AS rn, then "
            "WHERE rn <= N around it); LAG, LEAD and running aggregates go in the SELECT list of a query")
    kind = _RANKINGS[type(func)]
    fname = f"{func.sql_name()}()"
    if func.expressions or func.this is not None:
        raise UnsupportedSqlError(f"{text}: {fname} takes no arguments (order the rows with OVER (ORDER BY …))")
    if batch:
        raise UnsupportedSqlError(f"{text}: OVER windows run in streams (CREATE STREAM … AS), not in ad-hoc "
                                  "queries; an ad-hoc query takes ORDER BY … LIMIT n")
    if not isinstance(item, exp.Alias):
        raise UnsupportedSqlError(f"{text}: name the row number (… AS rn) and bound it in the query around it: "
                                  "WHERE rn <= N")
    if win.args.get("spec") is not None:
        raise UnsupportedSqlError(f"{text}: {fname} takes no frame (ROWS/RANGE BETWEEN …)")
    order = win.args.get("order")
    if order is None or not order.expressions:
        raise UnsupportedSqlError(f"{text}: {fname} needs ORDER BY inside OVER (…), e.g. "
                                  "OVER (PARTITION BY k ORDER BY price DESC)")
    rn = item.alias

    # the outer WHERE: rn <= N is the Top-N's bound; every other conjunct stays a filter
    where = sel.args.get("where")
    rest: list[exp.Expression] = []
    n = None
    for c in conjuncts(where.this if where else None):
        b = _bound(c, rn)
        if b is None:
            rest.append(c)
        else:
            n = b if n is None else min(n, b)
    own = inner.args.get("where")
    if n is None and own is not None and any(_bound(c, rn) is not None for c in conjuncts(own.this)):
        raise UnsupportedSqlError(
            f"{text} AS {rn}: WHERE {own.this.sql()} filters the row number in the SELECT that defines it, where "
            f"{rn} does not exist yet (WHERE runs before the SELECT list; Flink refuses it too); bound it in a "
            f"SELECT around it: SELECT * FROM (SELECT …, {fname} OVER (…) AS {rn} FROM …) WHERE {rn} <= N")
    if n is None:
        raise UnsupportedSqlError(
            f"{text} AS {rn}: an unbounded row number is not supported yet (every row's number could change "
            f"with each new row); bound it in the query around it: WHERE {rn} <= N")
    if n < 1:
        raise UnsupportedSqlError(f"WHERE {rn} <= {n} keeps no row; bound the row number by 1 or more")

    parts = list(win.args.get("partition_by") or [])
    orders = list(order.expressions)
    body = inner.copy()
    exprs = list(body.expressions)
    exprs[pos] = exp.alias_(exp.cast(exp.Literal.number(0), "BIGINT"), item.args["alias"].copy())
    exprs += [exp.alias_(p.copy(), f"{_HIDDEN}p{i}", quoted=True) for i, p in enumerate(parts)]
    exprs += [exp.alias_(o.this.copy(), f"{_HIDDEN}o{i}", quoted=True) for i, o in enumerate(orders)]
    body.set("expressions", exprs)
    child = ctx.plan_subquery(body)
    if child.changelog:
        raise UnsupportedSqlError(f"{text} over a changelog (an input that retracts rows: EMIT CHANGES, an outer "
                                  "join) is not supported yet; apply it to an append-only input")
    hidden = len(parts) + len(orders)
    width = len(child.output_schema) - hidden
    names = list(child.names)
    node = TopN(child, [width + i for i in range(len(parts))],
                [(width + len(parts) + j, bool(o.args.get("desc")), bool(o.args.get("nulls_first")))
                 for j, o in enumerate(orders)],
                n, names.index(rn), hidden, sql=f"{text} AS {rn}, {rn} <= {n}", kind=kind)
    outer = sel.copy()
    outer.set("where", exp.Where(this=and_all(rest)) if rest else None)
    node.rank_used = _uses(list(outer.expressions) + rest + [outer.args[k] for k in ("group", "having")
                                                            if outer.args.get(k) is not None], rn)
    time_of_order = child.time_cols.get(f"{_HIDDEN}o0") if len(orders) == 1 else None
    if n == 1 and time_of_order is not None and kind == "row_number":  # ties of RANK are all kept
        if orders[0].args.get("desc"):
            node.ties_last = True  # Flink's keep-last-row deduplication: the later of equal times wins
        else:
            node.mode, node.time_map = "first", time_of_order
    alias = subquery.args.get("alias")
    name = alias.this.name if isinstance(alias, exp.TableAlias) and alias.this is not None else "__over"
    rel = RelationInfo(name, node.schema, node.time_col, node.changelog, node.time_cols, kind="subquery")
    return outer, rel, node


# --------------------------------------------------------------------------- LAG / LEAD / aggregates
_AGGS = {exp.Sum: "sum", exp.Count: "count", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}


def _over_funcs_only(sel: exp.Select) -> list[exp.Window] | None:
    wins = [w for e in sel.expressions for w in e.find_all(exp.Window)]
    if not wins or not all(isinstance(w.this, exp.Lag | exp.Lead) or type(w.this) in _AGGS for w in wins):
        return None
    return wins


def _frame(w: exp.Window) -> tuple[int, bool]:
    """(rows before the current one, -1: all; RANGE peers) of an aggregate's frame."""
    spec = w.args.get("spec")
    if spec is None:
        return -1, True  # with ORDER BY: RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    kind = (spec.args.get("kind") or "").upper()
    start, side, end = spec.args.get("start"), (spec.args.get("start_side") or "").upper(), spec.args.get("end")
    end_text = end.upper() if isinstance(end, str) else (end.sql().upper() if end is not None else "CURRENT ROW")
    if end_text == "CURRENT ROW" and side == "PRECEDING":
        if isinstance(start, str) and start.upper() == "UNBOUNDED":
            return -1, kind == "RANGE"
        n = _int_literal(start) if isinstance(start, exp.Expression) else None
        if kind == "ROWS" and n is not None and n >= 0:
            return n, False
    raise UnsupportedSqlError(f"{w.sql()}: the frames supported are ROWS BETWEEN n PRECEDING AND CURRENT ROW and "
                              "ROWS|RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW (RANGE with an INTERVAL and "
                              "frames reaching past the current row are not yet)")


def plan_window_functions(sel: exp.Select, query, ctx, *, top: bool):
    """``SELECT …, LAG(x[, k[, default]]) OVER (PARTITION BY p ORDER BY ts) …`` (also LEAD and
    aggregates over a frame) as an ``Over`` node between the block that reads FROM (``lower``: its
    columns plus the hidden PARTITION BY / ORDER BY / argument / default columns) and the SELECT
    list (``upper``); None when the SELECT has no OVER window or one that is neither."""
    wins = _over_funcs_only(sel)
    if wins is None or (sel.args.get("from_") or sel.args.get("from")) is None:
        return None
    first = wins[0].sql()
    if ctx.batch:
        raise UnsupportedSqlError(f"{first}: OVER windows run in streams (CREATE STREAM … AS), not in ad-hoc queries")
    if sel.args.get("joins"):
        raise UnsupportedSqlError(f"{first} over a join is not supported yet: create a stream for the join and "
                                  "apply the OVER window to it")
    if (sel.args.get("group") or sel.args.get("having") or sel.args.get("distinct")
            or any(is_agg(n) and not isinstance(n.parent, exp.Window) for e in sel.expressions for n in e.walk())):
        raise UnsupportedSqlError(f"{first} with GROUP BY or aggregates is not supported yet: aggregate in a stream "
                                  "and apply the OVER window to it")
    frm = sel.args.get("from_") or sel.args.get("from")
    if query is not None and query.tvf is not None and isinstance(frm.this, exp.Table):
        raise UnsupportedSqlError(f"{first} over a window TVF is not supported yet; GROUP BY the window in a stream "
                                  "and apply the OVER window to it")
    shapes = {(tuple(p.sql() for p in w.args.get("partition_by") or []),
               w.args["order"].sql() if w.args.get("order") else "") for w in wins}
    if len(shapes) > 1:
        raise UnsupportedSqlError("the OVER windows of one SELECT must be the same window (PARTITION BY and "
                                  "ORDER BY), as in Flink; compute the others in another stream")
    w0 = wins[0]
    order = w0.args.get("order")
    if any(w.args.get("spec") is not None for w in wins if isinstance(w.this, exp.Lag | exp.Lead)):
        raise UnsupportedSqlError(f"{first}: LAG and LEAD take no frame (ROWS/RANGE BETWEEN …)")
    if order is None or len(order.expressions) != 1 or order.expressions[0].args.get("desc"):
        raise UnsupportedSqlError(f"{first}: a streaming OVER window orders by one event-time column, ascending "
                                  "(OVER (PARTITION BY k ORDER BY ts)), as in Flink")
    parts = list(w0.args.get("partition_by") or [])
    hidden = [exp.alias_(p.copy(), f"{_HIDDEN}p{i}", quoted=True) for i, p in enumerate(parts)]
    hidden.append(exp.alias_(order.expressions[0].this.copy(), f"{_HIDDEN}o", quoted=True))
    unique: dict[str, int] = {}
    specs = []
    for w in wins:
        if w.sql() in unique:
            continue
        f = w.this
        j = len(unique)
        if type(f) in _AGGS:
            unique[w.sql()] = j
            n, peers = _frame(w)
            arg = f.this
            if isinstance(arg, exp.Distinct):
                raise UnsupportedSqlError(f"{w.sql()}: DISTINCT in an OVER aggregate is not supported yet")
            kind = _AGGS[type(f)]
            if kind == "count" and (arg is None or isinstance(arg, exp.Star)):
                kind = "count_star"
            else:
                hidden.append(exp.alias_(arg.copy(), f"{_HIDDEN}a{j}", quoted=True))
            specs.append((kind, j, n, peers, w.sql()))
            continue
        off = f.args.get("offset")
        k = 1 if off is None else _int_literal(off)
        if k is None or k < 0:
            raise UnsupportedSqlError(f"{w.sql()}: the offset of {f.sql_name()} is a whole number literal ≥ 0")
        unique[w.sql()] = j
        hidden.append(exp.alias_(f.this.copy(), f"{_HIDDEN}a{j}", quoted=True))
        default = f.args.get("default")
        if default is not None:
            hidden.append(exp.alias_(default.copy(), f"{_HIDDEN}d{j}", quoted=True))
        specs.append(("lag" if isinstance(f, exp.Lag) else "lead", j, k, default is not None, w.sql()))

    lower = sel.copy()
    lower.set("expressions", [exp.Star()] + hidden)
    child = ctx.plan_select(lower, query, top=top)
    if child.changelog:
        _check_changelog_over(wins, first)
    names = list(child.names)
    width = len(names) - len(hidden)
    time_map = child.time_cols.get(f"{_HIDDEN}o")
    if time_map is None and child.changelog:
        import pyarrow as pa

        t = child.output_schema.field(names.index(f"{_HIDDEN}o")).type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_timestamp(t)
                or pa.types.is_date64(t)):
            raise UnsupportedSqlError(f"{first}: over a changelog, ORDER BY a numeric or timestamp column")
    elif time_map is None:
        col = order.expressions[0].this.sql()
        raise UnsupportedSqlError(f"{first}: ORDER BY {col} must name an event-time column (a column with a "
                                  "watermark), as in Flink: rows are taken in event-time order as the watermark "
                                  "passes them")
    funcs = []
    for kind, j, k, has_default, text in specs:
        if kind not in ("lag", "lead"):
            funcs.append(_agg_func(kind, j, k, has_default, text, names, child.output_schema))
            continue
        arg = names.index(f"{_HIDDEN}a{j}")
        dflt = names.index(f"{_HIDDEN}d{j}") if has_default else None
        if dflt is not None:
            _check_default(child.output_schema.field(arg).type, child.output_schema.field(dflt).type, text)
        funcs.append(OverFunc(kind, arg, k, dflt, f"{_HIDDEN}w{j}"))  # type: ignore[arg-type]
    strict = any(f.peers for f in funcs)
    if strict and any(f.kind == "lead" for f in funcs):
        raise UnsupportedSqlError(f"{first}: LEAD beside a RANGE frame (an aggregate OVER (… ORDER BY ts) without "
                                  "ROWS) is not supported yet; write ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW")
    node = Over(child, [width + i for i in range(len(parts))], names.index(f"{_HIDDEN}o"), funcs, len(hidden),
                time_map, sql=", ".join(dict.fromkeys(w.sql() for w in wins)), strict=strict)

    def swap(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Window):
            return exp.column(f"{_HIDDEN}w{unique[n.sql()]}", quoted=True)
        return n

    upper_items: list[exp.Expression] = []
    for i, e in enumerate(sel.expressions):
        if isinstance(e, exp.Star):
            upper_items += [exp.column(n, quoted=True) for n in names[:width]]
        elif isinstance(e, exp.Alias):
            upper_items.append(e.copy().transform(swap))
        else:
            upper_items.append(exp.alias_(e.copy().transform(swap), output_name(e, i), quoted=True))
    upper = sel.copy()
    upper.set("expressions", upper_items)
    upper.set("where", None)
    alias = frm.this.args.get("alias")
    name = (alias.this.name if isinstance(alias, exp.TableAlias) and alias.this is not None else
            frm.this.name if isinstance(frm.this, exp.Table) else "__over")
    rel = RelationInfo(name, node.schema, node.time_col, node.changelog, node.time_cols, kind="subquery")
    upper_query = replace(query, tvf=None) if query is not None else None
    if upper_query is None:
        upper_query = Query(upper, upper.sql())
    return ctx.plan_block(upper, upper_query, rel, node)


def _check_changelog_over(wins: list[exp.Window], first: str) -> None:
    """Over a changelog (an input that retracts rows) run only aggregates over ROWS BETWEEN n
    PRECEDING AND CURRENT ROW: a retraction changes the frames of the n rows after it, so the
    operator retracts and re-emits those; LAG/LEAD, unbounded and RANGE frames are refused."""
    for w in wins:
        if isinstance(w.this, exp.Lag | exp.Lead):
            raise UnsupportedSqlError(f"{w.sql()} over a changelog (an input that retracts rows) is not supported "
                                      "yet; aggregates over ROWS BETWEEN n PRECEDING AND CURRENT ROW are")
        n, peers = _frame(w)
        if n < 0 or peers:
            raise UnsupportedSqlError(f"{w.sql()} over a changelog (an input that retracts rows): only frames of "
                                      "ROWS BETWEEN n PRECEDING AND CURRENT ROW are supported (each retraction "
                                      "re-emits the n rows after it); an unbounded or RANGE frame is not yet")


def _check_default(arg, default, text: str) -> None:
    import pyarrow as pa

    from laminardb.sql.exceptions import SqlTypeError
    from laminardb.sql.types import type_name

    def num(t):
        return pa.types.is_integer(t) or pa.types.is_floating(t)

    if arg == default or pa.types.is_null(default) or (num(arg) and num(default)) or (
            pa.types.is_string(arg) or pa.types.is_large_string(arg)) and (
            pa.types.is_string(default) or pa.types.is_large_string(default)):
        return
    raise SqlTypeError(f"{text}: the default is {type_name(default)}, the value {type_name(arg)}; CAST the default")


def _agg_func(kind: str, j: int, n: int, peers: bool, text: str, names: list[str], schema):
    import pyarrow as pa

    from laminardb.sql.exceptions import SqlTypeError
    from laminardb.sql.plan import OverFunc
    from laminardb.sql.types import type_name

    if kind == "count_star":
        return OverFunc("count_star", -1, n, None, f"{_HIDDEN}w{j}", pa.int64(), peers)
    arg = names.index(f"{_HIDDEN}a{j}")
    t = schema.field(arg).type
    if kind != "count" and not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        raise SqlTypeError(f"{text}: {kind.upper()} OVER (…) needs a numeric argument, got {type_name(t)}")
    out = {"count": pa.int64(), "avg": pa.float64(),
           "sum": pa.float64() if pa.types.is_floating(t) else pa.int64()}.get(kind, t)
    return OverFunc(kind, arg, n, None, f"{_HIDDEN}w{j}", out, peers)  # type: ignore[arg-type]
