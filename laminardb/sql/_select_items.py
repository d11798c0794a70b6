"""What the planner reads off a SELECT list: aggregate calls, window calls and references to a
window's bounds, and the name each output column gets.

Entry points: ``is_agg(node)``, ``aggregates(sel)`` and ``output_name(item, i)``, shared by the
planner (``planner.py``) and the OVER planner (``over.py``); ``AGG_KINDS`` (sqlglot's aggregate
classes → ``plan.AggSpec`` kinds), ``WINDOW_FUNCS`` (the group-window calls of GROUP BY) and
``WINDOW_REFS`` (a window bound's name → its group column).
"""

from __future__ import annotations

from sqlglot import exp

__all__ = ["AGG_KINDS", "WINDOW_FUNCS", "WINDOW_REFS", "aggregates", "is_agg", "output_name"]

AGG_KINDS: dict[type, str] = {
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Min: "min",
    exp.Max: "max",
    exp.FirstValue: "first_value",
    exp.LastValue: "last_value",
    exp.First: "first_value",
    exp.Last: "last_value",
}
WINDOW_FUNCS = {"TUMBLE", "HOP", "SLIDE", "HOPPING", "SESSION"}
WINDOW_REFS = {
    "WINDOW_START": "__ws", "WINDOW_END": "__we", "WINDOW_TIME": "__wt",
    "TUMBLE_START": "__ws", "TUMBLE_END": "__we", "HOP_START": "__ws", "HOP_END": "__we",
    "SESSION_START": "__ws", "SESSION_END": "__we", "TUMBLE_ROWTIME": "__wt",
    "HOP_ROWTIME": "__wt", "SESSION_ROWTIME": "__wt",
}


def is_agg(node: exp.Expression) -> bool:
    return isinstance(node, exp.Count) or type(node) in AGG_KINDS


def aggregates(sel) -> bool:
    """Whether a SELECT block groups (GROUP BY, aggregates, HAVING, DISTINCT): a window TVF it
    reads is then its window aggregate, else the TVF's rows (``_window_tvf``)."""
    return bool(sel.args.get("group") or sel.args.get("having") or sel.args.get("distinct")
                or any(is_agg(n) for e in sel.expressions for n in e.walk()))


def output_name(e: exp.Expression, i: int) -> str:
    if isinstance(e, exp.Alias):
        return e.alias
    if isinstance(e, exp.Column):
        return e.name
    if isinstance(e, exp.Anonymous) and e.name.upper() in WINDOW_REFS:
        return WINDOW_REFS[e.name.upper()].replace("__ws", "window_start").replace("__we", "window_end").replace("__wt", "window_time")
    if isinstance(e, exp.Anonymous) and e.name.upper() in WINDOW_FUNCS:
        return "window_start"  # LaminarDB: tumble(ts, …) in SELECT is the window's start
    return e.sql().lower() if len(e.sql()) < 64 else f"expr{i}"
