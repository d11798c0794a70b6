"""What a query may use: refuse every construct the planner does not run, saying what is
supported instead (LDB-1002 and its typed subclasses), before anything is compiled.

Entry point: ``check_supported(select)``.
"""

from __future__ import annotations

from sqlglot import exp

from laminardb.sql.exceptions import (
    UnsupportedAggregateError,
    UnsupportedJoinError,
    UnsupportedSqlError,
)

#: aggregates the engine computes (sqlglot classes); FIRST/LAST are LaminarDB's spellings
SUPPORTED_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.FirstValue, exp.LastValue,
                        exp.First, exp.Last)
SUPPORTED_AGGREGATE_NAMES = "COUNT, SUM, AVG, MIN, MAX, FIRST_VALUE, LAST_VALUE, COUNT(DISTINCT)"

_NOT_YET = ("laminardb runs single-input queries: SELECT … FROM <one source, stream or view> "
            "with WHERE, GROUP BY (windows) and HAVING")


def check_supported(sel: exp.Expression) -> None:
    """Raise for joins, OVER, subqueries, CTEs, FILTER and aggregates laminardb does not compute."""
    if sel.args.get("joins"):
        raise UnsupportedJoinError(f"FROM with several inputs (a join) is not supported yet; {_NOT_YET}")
    if sel.args.get("laterals"):
        raise UnsupportedSqlError(f"LATERAL / UNNEST is not supported yet; {_NOT_YET}")
    if sel.args.get("with_") or sel.args.get("with"):
        raise UnsupportedSqlError("WITH (common table expressions) is not supported; create a stream per step")
    if sel.args.get("windows") or sel.args.get("qualify"):
        clause = "WINDOW" if sel.args.get("windows") else "QUALIFY"
        raise UnsupportedSqlError(f"{clause} is not supported yet (OVER windows are not); {_NOT_YET}")
    frm = sel.args.get("from_") or sel.args.get("from")
    if frm is not None and not isinstance(frm.this, exp.Table):
        raise UnsupportedSqlError("FROM must name a source, stream or view (subqueries are not supported yet)")
    for node in sel.walk():
        if node is sel:
            continue
        if isinstance(node, exp.Window):
            raise UnsupportedSqlError(
                f"{node.this.sql()} OVER (…) is not supported yet: OVER windows (LAG, LEAD, ROW_NUMBER, "
                "RANK, running totals) are not; use GROUP BY with tumble/hop/session windows")
        if isinstance(node, exp.Select | exp.Subquery | exp.Exists):
            raise UnsupportedSqlError(f"subqueries are not supported yet: create a stream for the inner query and "
                                      f"read it; {_NOT_YET}")
        if isinstance(node, exp.Filter):
            raise UnsupportedSqlError(
                f"{node.sql()}: FILTER (WHERE …) on aggregates is not supported; write "
                "SUM(CASE WHEN cond THEN x END) or COUNT(CASE WHEN cond THEN 1 END)")
        if isinstance(node, exp.WithinGroup):
            name = node.this.sql_name() if isinstance(node.this, exp.Func) else node.this.sql()
            raise UnsupportedAggregateError(f"unsupported aggregate {name}; supported: {SUPPORTED_AGGREGATE_NAMES}")
        if isinstance(node, exp.AggFunc) and not isinstance(node, SUPPORTED_AGGREGATES):
            raise UnsupportedAggregateError(
                f"unsupported aggregate {node.sql_name()}; supported: {SUPPORTED_AGGREGATE_NAMES}")
