"""The same scalar expressions as ``expressions.py``, evaluated on the one row of a one-row batch
with Python values instead of Arrow kernels.

Entry point: ``compile_row(node, scope) -> RowExpr | None`` (``compile_expr`` attaches it to the
``Expr`` as ``.row``). Why: a WHERE like ``price > 0`` costs ~20 µs in ``pyarrow.compute`` on a
one-row batch (kernel dispatch and a literal cast) and ~1 µs on the row's Python value; that
difference is most of the one-row latency of a filter (issue 23).

Covered, with the batch path's results (types, values, NULLs): column references of integer,
DOUBLE, VARCHAR and BOOLEAN columns; numeric, string, boolean and NULL literals; comparisons;
three-valued AND / OR / NOT; IS [NOT] NULL; BETWEEN; + − × and unary minus over BIGINT
(wrapping at 64 bits, as Java) or DOUBLE (an integer meeting a DOUBLE becomes a DOUBLE first,
as ``_float`` does). Anything else — other types, functions, CASE, division — returns None and
the batch path runs; so does a kind this module does not know to be exact (FLOAT, whose
literals the batch path rounds to 32 bits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

RowFn = Callable[[pa.RecordBatch], Any]
INT, I64, F64, STR, BOOL, NULL = "int", "i64", "f64", "str", "bool", "null"
_NUMBERS = (INT, I64, F64)


@dataclass(frozen=True)
class RowExpr:
    """``fn(batch)`` → the Python value (None for NULL) of the batch's first row; ``kind`` one of
    ``i64`` (BIGINT), ``int`` (another signed integer type), ``f64``, ``str``, ``bool``, ``null``."""

    fn: RowFn
    kind: str
    column: int | None = None  # a bare column reference: its index


def _kind(t: pa.DataType) -> str | None:
    if t == pa.int64():
        return I64
    if t in (pa.int8(), pa.int16(), pa.int32()):  # unsigned ones: Arrow's common type is its own
        return INT
    if t == pa.float64():
        return F64
    if t == pa.string():
        return STR
    if t == pa.bool_():
        return BOOL
    return None


def compile_row(node: exp.Expression, scope: Any) -> RowExpr | None:  # noqa: C901 - one dispatch table
    if isinstance(node, exp.Paren):
        return compile_row(node.this, scope)
    if isinstance(node, exp.Column):
        idx = scope.resolve(node.name, node.this.args.get("quoted", False))
        kind = _kind(scope.schema.field(idx).type)
        return None if kind is None else RowExpr(lambda b: b.column(idx)[0].as_py(), kind, idx)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return _const(node.this, STR)
        if any(c in node.this for c in ".eE"):
            return _const(float(node.this), F64)
        return _const(int(node.this), I64)
    if isinstance(node, exp.Null):
        return _const(None, NULL)
    if isinstance(node, exp.Boolean):
        return _const(bool(node.this), BOOL)
    if isinstance(node, exp.Neg):
        return _negate(compile_row(node.this, scope))
    if isinstance(node, exp.Add | exp.Sub | exp.Mul):
        if isinstance(node.expression, exp.Interval) or isinstance(node.this, exp.Interval):
            return None
        return _arith(type(node), compile_row(node.this, scope), compile_row(node.expression, scope))
    for cls, op in _COMPARE.items():
        if isinstance(node, cls):
            return _compare(op, compile_row(node.this, scope), compile_row(node.expression, scope))
    if isinstance(node, exp.And | exp.Or):
        a, c = compile_row(node.this, scope), compile_row(node.expression, scope)
        return _logic(isinstance(node, exp.And), a, c)
    if isinstance(node, exp.Not):
        a = compile_row(node.this, scope)
        if a is None or a.kind not in (BOOL, NULL):
            return None
        f = a.fn
        return RowExpr(lambda b: None if (v := f(b)) is None else not v, BOOL)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        a = compile_row(node.this, scope)
        if a is None:
            return None
        f = a.fn
        return RowExpr(lambda b: f(b) is None, BOOL)
    if isinstance(node, exp.Between):
        x, lo, hi = (compile_row(node.this, scope), compile_row(node.args["low"], scope),
                     compile_row(node.args["high"], scope))
        return _logic(True, _compare(_GE, x, lo), _compare(_LE, x, hi))
    return None


def _const(value: Any, kind: str) -> RowExpr:
    return RowExpr(lambda b: value, kind)


def _wrap64(v: int) -> int:
    """BIGINT arithmetic wraps around (Java; Arrow's unchecked kernels)."""
    return ((v + (1 << 63)) & ((1 << 64) - 1)) - (1 << 63)


def _negate(a: RowExpr | None) -> RowExpr | None:
    if a is None or a.kind not in (I64, F64):
        return None
    f = a.fn
    if a.kind == F64:
        return RowExpr(lambda b: None if (v := f(b)) is None else -v, F64)
    return RowExpr(lambda b: None if (v := f(b)) is None else _wrap64(-v), I64)


_OPS = {exp.Add: lambda x, y: x + y, exp.Sub: lambda x, y: x - y, exp.Mul: lambda x, y: x * y}


def _arith(cls: type, a: RowExpr | None, c: RowExpr | None) -> RowExpr | None:
    if a is None or c is None:
        return None
    kinds = {a.kind, c.kind} - {NULL}
    op, fa, fc = _OPS[cls], a.fn, c.fn
    if kinds == {I64}:  # BIGINT with BIGINT (a NULL literal takes the other side's type)
        def int_fn(b):
            x, y = fa(b), fc(b)
            return None if x is None or y is None else _wrap64(op(x, y))
        return RowExpr(int_fn, I64)
    if F64 in kinds and kinds <= {F64, I64, INT}:  # an integer meeting a DOUBLE: both DOUBLE
        def float_fn(b):
            x, y = fa(b), fc(b)
            return None if x is None or y is None else op(float(x), float(y))
        return RowExpr(float_fn, F64)
    return None


_GE, _LE = "ge", "le"
_COMPARE = {exp.EQ: "eq", exp.NEQ: "ne", exp.GT: "gt", exp.GTE: _GE, exp.LT: "lt", exp.LTE: _LE}
_CMP = {"eq": lambda x, y: x == y, "ne": lambda x, y: x != y, "gt": lambda x, y: x > y,
        _GE: lambda x, y: x >= y, "lt": lambda x, y: x < y, _LE: lambda x, y: x <= y}


def _compare(op_name: str, a: RowExpr | None, c: RowExpr | None) -> RowExpr | None:
    if a is None or c is None:
        return None
    op, fa, fc = _CMP[op_name], a.fn, c.fn
    kinds = {a.kind, c.kind} - {NULL}
    if not kinds:
        return _const(None, BOOL)
    numeric = kinds <= set(_NUMBERS)
    if not (numeric or kinds == {STR} or kinds == {BOOL}):
        return None
    if numeric and F64 in kinds and len(kinds) > 1:  # BIGINT beyond 2^53 against a DOUBLE: as DOUBLE
        def float_fn(b):
            x, y = fa(b), fc(b)
            return None if x is None or y is None else op(float(x), float(y))
        return RowExpr(float_fn, BOOL)

    def fn(b):  # text: code-point order is UTF-8 byte order, Arrow's
        x, y = fa(b), fc(b)
        return None if x is None or y is None else op(x, y)
    return RowExpr(fn, BOOL)


def _logic(is_and: bool, a: RowExpr | None, c: RowExpr | None) -> RowExpr | None:
    """Kleene AND / OR over BOOLEAN (or NULL) operands."""
    if a is None or c is None or not {a.kind, c.kind} <= {BOOL, NULL}:
        return None
    fa, fc = a.fn, c.fn
    if is_and:
        def and_fn(b):
            x, y = fa(b), fc(b)
            if x is False or y is False:
                return False
            return None if x is None or y is None else True
        return RowExpr(and_fn, BOOL)

    def or_fn(b):
        x, y = fa(b), fc(b)
        if x is True or y is True:
            return True
        return None if x is None or y is None else False
    return RowExpr(or_fn, BOOL)
