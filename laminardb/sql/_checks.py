"""What a query may use: refuse every construct the planner does not run, saying what is
supported instead (LDB-1002 and its typed subclasses), before anything is compiled.

Entry point: ``check_supported(select)``.
"""

from __future__ import annotations

from sqlglot import exp

from laminardb.sql.exceptions import (
    UnsupportedAggregateError,
    UnsupportedSqlError,
)

#: aggregates the engine computes (sqlglot classes); FIRST/LAST are LaminarDB's spellings
SUPPORTED_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.FirstValue, exp.LastValue,
                        exp.First, exp.Last)
SUPPORTED_AGGREGATE_NAMES = "COUNT, SUM, AVG, MIN, MAX, FIRST_VALUE, LAST_VALUE, COUNT(DISTINCT)"

_NOT_YET = ("laminardb runs SELECT … FROM <sources, streams, views, subqueries and their equi-joins> "
            "with WHERE, GROUP BY (windows) and HAVING")


def check_supported(sel: exp.Expression) -> None:
    """Raise for OVER, subqueries outside FROM, CTEs, FILTER on a non-aggregate and aggregates
    laminardb does not compute. FROM and its joins are the planner's (``planner._plan_item``,
    ``binder``): a subquery there is checked as a SELECT of its own; a join's ON condition is
    checked here. ``agg(…) FILTER (WHERE …)`` is planned in ``sql/_agg_filter.py``."""
    if sel.args.get("laterals"):
        raise UnsupportedSqlError(f"LATERAL / UNNEST is not supported yet; {_NOT_YET}")
    if sel.args.get("with_") or sel.args.get("with"):
        raise UnsupportedSqlError("WITH (common table expressions) is not supported; create a stream per step")
    if sel.args.get("windows") or sel.args.get("qualify"):
        clause = "WINDOW" if sel.args.get("windows") else "QUALIFY"
        raise UnsupportedSqlError(f"{clause} is not supported yet (OVER windows are not); {_NOT_YET}")
    frm = sel.args.get("from_") or sel.args.get("from")
    if frm is not None and not isinstance(frm.this, exp.Table | exp.Subquery):
        raise UnsupportedSqlError("FROM must name a source, stream or view, or a subquery (SELECT …) AS q")
    own = [v for k, v in sel.args.items() if k not in ("from_", "from", "joins") and v is not None]
    own += [j.args["on"] for j in sel.args.get("joins") or [] if j.args.get("on") is not None]
    for node in (n for part in own for item in (part if isinstance(part, list) else [part])
                 if isinstance(item, exp.Expression) for n in item.walk()):
        if isinstance(node, exp.Window):
            raise UnsupportedSqlError(
                f"{node.this.sql()} OVER (…) is not supported yet here: laminardb runs ROW_NUMBER(), RANK() and "
                "DENSE_RANK() only bounded in the query around it — SELECT … FROM (SELECT …, ROW_NUMBER() OVER "
                "(PARTITION BY k ORDER BY x) AS rn FROM t) WHERE rn <= N (Top-N, deduplication) — and LAG, LEAD, "
                "SUM, COUNT, AVG, MIN, MAX OVER (… ORDER BY <event time>) in a SELECT list; elsewhere RANK and other "
                "window functions are not: use GROUP BY with tumble/hop/session windows")
        if isinstance(node, exp.Select | exp.Subquery | exp.Exists):
            raise UnsupportedSqlError(f"subqueries are not supported yet: create a stream for the inner query and "
                                      f"read it; {_NOT_YET}")
        if isinstance(node, exp.Filter) and not isinstance(node.this, exp.AggFunc):
            raise UnsupportedSqlError(
                f"{node.sql()}: FILTER (WHERE …) applies to aggregate functions only ({SUPPORTED_AGGREGATE_NAMES}); "
                "for a scalar use CASE WHEN cond THEN x END")
        if isinstance(node, exp.WithinGroup):
            name = node.this.sql_name() if isinstance(node.this, exp.Func) else node.this.sql()
            raise UnsupportedAggregateError(f"unsupported aggregate {name}; supported: {SUPPORTED_AGGREGATE_NAMES}")
        if isinstance(node, exp.AggFunc) and not isinstance(node, SUPPORTED_AGGREGATES):
            raise UnsupportedAggregateError(
                f"unsupported aggregate {node.sql_name()}; supported: {SUPPORTED_AGGREGATE_NAMES}")
