"""The inputs of a join and the conditions over them: what the join binder (``binder.py``) and
the binder of time-picking joins (``_temporal.py``) share.

Entry points: ``FromItem`` (one FROM input, planned), ``conjuncts``/``and_all`` (split a condition
at AND, join conjuncts again), ``side_schema``/``side_times`` (the joined schema and event-time
columns of some inputs, under their internal ``alias.column`` names), ``key_type``/``cast_to``
(the common type two equi-join keys are compared in, and a key cast to it).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from laminardb.sql.exceptions import SqlTypeError
from laminardb.sql.expressions import Expr
from laminardb.sql.types import type_name
from laminardb.sql.watermarks import WatermarkMap

__all__ = ["FromItem", "and_all", "cast_to", "conjuncts", "key_type", "side_schema", "side_times"]


@dataclass
class FromItem:
    """One input of a FROM: its plan, the name it is referred to by, and its visible columns."""

    alias: str
    quoted: bool
    node: object  # a plan node (plan.py) or a QueryPlan
    schema: pa.Schema  # visible columns (no __weight)
    time_col: str | None
    time_cols: dict[str, WatermarkMap]
    offset: int = 0

    def internal(self, j: int) -> str:
        return f"{self.alias}.{self.schema.field(j).name}"


def conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def and_all(parts: list[exp.Expression]) -> exp.Expression | None:
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = exp.and_(out, p)
    return out


def side_schema(items: list[FromItem]) -> pa.Schema:
    return pa.schema([pa.field(it.internal(j), f.type) for it in items for j, f in enumerate(it.schema)])


def side_times(items: list[FromItem]) -> tuple[dict[str, WatermarkMap], str | None]:
    times: dict[str, WatermarkMap] = {}
    primary = None
    for it in items:
        for c, m in it.time_cols.items():
            j = it.schema.get_field_index(c)
            if j >= 0:
                times[it.internal(j)] = m
                if c == it.time_col and primary is None:
                    primary = it.internal(j)
    return times, primary


def cast_to(e: Expr, t: pa.DataType) -> Expr:
    if e.type == t:
        return e
    return Expr(lambda b, e=e: pc.cast(e.evaluate(b), t), t, e.sql)


def key_type(a: pa.DataType, b: pa.DataType, text: str) -> pa.DataType:
    if a == b:
        return a
    num = pa.types.is_integer
    if num(a) and num(b):
        return pa.int64()
    if (num(a) or pa.types.is_floating(a)) and (num(b) or pa.types.is_floating(b)):
        return pa.float64()
    if pa.types.is_string(a) and pa.types.is_large_string(b) or pa.types.is_large_string(a) and pa.types.is_string(b):
        return pa.large_string()
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b) and a.unit == b.unit:
        return a
    raise SqlTypeError(f"join condition {text}: cannot compare {type_name(a)} with {type_name(b)}")
