"""Compile SQL scalar expressions (sqlglot trees) into vectorized evaluators over Arrow.

Entry point: ``compile_expr(node, scope) -> Expr``. An ``Expr`` is a closure over a
``RecordBatch`` that returns an Arrow array, built from ``pyarrow.compute`` kernels — one
C++ kernel call per operator per batch, never a Python loop over rows. SQL NULL semantics
follow Flink's, each difference from DuckDB (the test oracle) written in docs/sql.md:
three-valued AND/OR, NULL-propagating arithmetic, integer overflow wrapping around (Java),
``/`` is DOUBLE division (``x / 0`` is ±inf), ``//`` integer division truncating toward zero,
``IN`` with a NULL in the list is NULL when nothing matches. Where Flink or DuckDB raise
mid-query (``%`` or ``//`` by zero, a CAST that does not fit) a stream cannot stop, so
those give NULL. CAST lives in ``_casts.py``, string functions in ``_string_functions.py``,
date and time functions in ``_datetime_functions.py`` and ``functions.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from laminardb.sql import function_registry
from laminardb.sql._casts import compile_cast
from laminardb.sql._datetime_functions import compile_datetime
from laminardb.sql._numeric import (
    _broadcast,
    _common_type,
    _float,
    _fmod,
    _greatest,
    _if_else,
    _round,
    _unary,
    _untyped_null,
    to_common,
)
from laminardb.sql._string_functions import compile_string
from laminardb.sql.exceptions import SqlTypeError, UnknownColumnError, UnsupportedSqlError
from laminardb.sql.functions import compile_function
from laminardb.sql.intervals import interval_ms
from laminardb.sql.row_eval import RowExpr, compile_row
from laminardb.sql.types import type_name

Value = pa.Array | pa.ChunkedArray | pa.Scalar
Fn = Callable[[pa.RecordBatch], Value]


@dataclass(frozen=True)
class Expr:
    """A compiled expression: ``evaluate(batch)`` gives an array of ``type``. ``row``: the same
    expression over a one-row batch's Python values (``row_eval``), None where it has none."""

    fn: Fn
    type: pa.DataType
    sql: str
    row: RowExpr | None = None

    def evaluate(self, batch: pa.RecordBatch) -> pa.Array:
        v = self.fn(batch)
        if isinstance(v, pa.Scalar):
            return pa.repeat(v, batch.num_rows) if v.is_valid else pa.nulls(batch.num_rows, self.type)
        if isinstance(v, pa.ChunkedArray):
            return v.combine_chunks()
        return v


class Scope:
    """Column names an expression may reference: unquoted names match case-insensitively."""

    def __init__(self, schema: pa.Schema, *, hidden: dict[str, str] | None = None) -> None:
        self.schema = schema
        self.exact = {f.name: i for i, f in enumerate(schema)}
        self.folded: dict[str, int] = {}
        for i, f in enumerate(schema):
            self.folded.setdefault(f.name.lower(), i)
        self.hidden = hidden or {}

    def resolve(self, name: str, quoted: bool) -> int:
        if quoted and name in self.exact:
            return self.exact[name]
        if not quoted:
            if name in self.exact:
                return self.exact[name]
            if name.lower() in self.folded:
                return self.folded[name.lower()]
        visible = [f.name for f in self.schema if not f.name.startswith("__")]
        raise UnknownColumnError(f"unknown column {name!r}; available columns: {', '.join(visible)}")


def compile_expr(node: exp.Expression, scope: Scope) -> Expr:
    fn = _compile(node, scope)
    empty = pa.RecordBatch.from_arrays(
        [pa.array([], type=f.type) for f in scope.schema], schema=scope.schema
    )
    try:
        probe = fn(empty)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid) as e:
        raise SqlTypeError(f"cannot evaluate {node.sql()!r}: {_arrow_msg(e)}") from None
    t = probe.type
    if pa.types.is_null(t):
        t = pa.int32()
    return Expr(fn, t, node.sql(), compile_row(node, scope))


def _arrow_msg(e: Exception) -> str:
    return str(e).split("\n")[0]


def _lit(value, t: pa.DataType | None = None) -> Fn:
    s = pa.scalar(value, type=t)
    return lambda b: s


_BINARY_CMP = {
    exp.EQ: "equal",
    exp.NEQ: "not_equal",
    exp.GT: "greater",
    exp.GTE: "greater_equal",
    exp.LT: "less",
    exp.LTE: "less_equal",
}
_UNARY_FUNCS = {
    exp.Upper: "utf8_upper",
    exp.Lower: "utf8_lower",
    exp.Abs: "abs",
    exp.Floor: "floor",
    exp.Ceil: "ceil",
    exp.Sqrt: "sqrt",
    exp.Ln: "ln",
    exp.Exp: "exp",
    exp.Sign: "sign",
}
_NAMED_UNARY = {"LOG10": "log10", "LOG2": "log2", "SIN": "sin", "COS": "cos", "TAN": "tan", "TRUNC": "trunc"}
_FLOAT_FUNCS = {exp.Sin: "sin", exp.Cos: "cos", exp.Tan: "tan", exp.Trunc: "trunc"}  # sqlglot ≥ 30 has classes
_TIME_UNITS = ("MILLISECOND", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR")


def _compile(node: exp.Expression, scope: Scope) -> Fn:  # noqa: C901 - one dispatch table
    if isinstance(node, exp.Paren):
        return _compile(node.this, scope)
    if isinstance(node, exp.Column):
        if node.table:
            pass  # single-input queries: a qualifier names the only relation
        idx = scope.resolve(node.name, node.this.args.get("quoted", False))
        return lambda b: b.column(idx)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return _lit(node.this, pa.string())
        text = node.this
        if any(c in text for c in ".eE"):
            return _lit(float(text), pa.float64())
        return _lit(int(text), pa.int64())
    if isinstance(node, exp.Null):
        return lambda b: pa.scalar(None)
    if isinstance(node, exp.Boolean):
        return _lit(bool(node.this), pa.bool_())
    if isinstance(node, exp.Interval):
        ms = interval_ms(node)
        return _lit(ms, pa.int64())
    if isinstance(node, exp.Neg):
        a = _compile(node.this, scope)
        return lambda b: pc.negate(a(b))
    if isinstance(node, exp.Add | exp.Sub) and _is_interval(node.expression):
        return _time_shift(node, scope)
    if isinstance(node, exp.Add):
        return _binary(node, scope, "add")
    if isinstance(node, exp.Sub):
        return _binary(node, scope, "subtract")
    if isinstance(node, exp.Mul):
        return _binary(node, scope, "multiply")
    if isinstance(node, exp.Div):
        return _divide(node, scope)
    if isinstance(node, exp.IntDiv):
        return _int_divide(node, scope)
    if isinstance(node, exp.Mod):
        return _mod(_compile(node.this, scope), _compile(node.expression, scope))
    for cls, name in _BINARY_CMP.items():
        if isinstance(node, cls):
            return _compare(node, scope, name)
    if isinstance(node, exp.And):
        a, c = _compile(node.this, scope), _compile(node.expression, scope)
        return lambda b: pc.and_kleene(_bool(a(b)), _bool(c(b)))
    if isinstance(node, exp.Or):
        a, c = _compile(node.this, scope), _compile(node.expression, scope)
        return lambda b: pc.or_kleene(_bool(a(b)), _bool(c(b)))
    if isinstance(node, exp.Not):
        a = _compile(node.this, scope)
        return lambda b: pc.invert(_bool(a(b)))
    if isinstance(node, exp.NullSafeEQ | exp.NullSafeNEQ):  # IS [NOT] DISTINCT FROM
        a, c = _compile(node.this, scope), _compile(node.expression, scope)
        same = isinstance(node, exp.NullSafeEQ)
        return lambda b: _not_distinct(a(b), c(b), same)
    if isinstance(node, exp.Is):
        a = _compile(node.this, scope)
        if isinstance(node.expression, exp.Null):
            return lambda b: _is_null(a(b))
        if isinstance(node.expression, exp.Boolean):
            want = bool(node.expression.this)
            return lambda b: pc.fill_null(pc.equal(_bool(a(b)), pa.scalar(want)), False)
        raise UnsupportedSqlError(f"unsupported IS test: {node.sql()}")
    if isinstance(node, exp.In):
        return _in(node, scope)
    if isinstance(node, exp.Between):
        x, lo, hi = (_compile(node.this, scope), _compile(node.args["low"], scope), _compile(node.args["high"], scope))
        return lambda b: pc.and_kleene(_cmp("greater_equal", x(b), lo(b)), _cmp("less_equal", x(b), hi(b)))
    if isinstance(node, exp.Case):
        return _case(node, scope)
    if isinstance(node, exp.If):
        cond, t, f = (_compile(node.this, scope), _compile(node.args["true"], scope),
                      _compile(node.args["false"], scope) if node.args.get("false") else (lambda b: pa.scalar(None)))
        return lambda b: _if_else(pc.fill_null(_bool(cond(b)), False), t(b), f(b))
    if isinstance(node, exp.Cast | exp.TryCast):
        return compile_cast(node, _compile(node.this, scope))
    if isinstance(node, exp.Coalesce):
        parts = [_compile(node.this, scope)] + [_compile(e, scope) for e in node.expressions]
        return lambda b: _coalesce([p(b) for p in parts])
    if isinstance(node, exp.Nullif):
        a, c = _compile(node.this, scope), _compile(node.expression, scope)
        return lambda b: _nullif(a(b), c(b))
    if isinstance(node, exp.Length):
        a = _compile(node.this, scope)
        return lambda b: pc.cast(pc.utf8_length(a(b)), pa.int64())
    if isinstance(node, exp.Trim):
        a = _compile(node.this, scope)
        pos = (node.args.get("position") or "BOTH").upper()
        chars = node.args.get("expression")
        if chars is not None and not isinstance(chars, exp.Literal):
            raise UnsupportedSqlError("TRIM(… FROM x) needs literal characters")
        fn_name = {"LEADING": "utf8_ltrim", "TRAILING": "utf8_rtrim"}.get(pos, "utf8_trim")
        if chars is None:
            fn_name += "_whitespace"
            return lambda b: getattr(pc, fn_name)(a(b))
        return lambda b: getattr(pc, fn_name)(a(b), characters=chars.this)
    if isinstance(node, exp.Replace):
        a, old, new = (_compile(node.this, scope), node.expression, node.args.get("replacement"))
        if not isinstance(old, exp.Literal) or not isinstance(new, exp.Literal):
            raise UnsupportedSqlError("REPLACE needs literal search and replacement strings")
        return lambda b: pc.replace_substring(a(b), pattern=old.this, replacement=new.this)
    if isinstance(node, exp.Round):
        a = _compile(node.this, scope)
        nd = _int_literal(node.args["decimals"]) if node.args.get("decimals") is not None else 0
        if nd is None or not -18 <= nd <= 18:
            raise UnsupportedSqlError(f"{node.sql()}: ROUND's digits must be an integer literal from -18 to 18")
        return lambda b: _round(a(b), nd)
    if isinstance(node, exp.Pow):
        a, c = _compile(node.this, scope), _compile(node.expression, scope)
        return lambda b: pc.power(_float(a(b)), _float(c(b)))
    if isinstance(node, exp.Greatest | exp.Least):
        parts = [_compile(node.this, scope)] + [_compile(e, scope) for e in node.expressions]
        name = "max_element_wise" if isinstance(node, exp.Greatest) else "min_element_wise"
        return lambda b: _greatest(name, [p(b) for p in parts])
    if isinstance(node, exp.Floor | exp.Ceil) and node.args.get("to") is not None:
        return _floor_to(node, scope)
    for cls, name in _FLOAT_FUNCS.items():
        if isinstance(node, cls):
            a = _compile(node.this, scope)
            if node.args.get("decimals") is not None:
                raise UnsupportedSqlError(f"{node.sql()}: TRUNC takes one argument")
            return lambda b, name=name: getattr(pc, name)(_float(a(b)))
    for cls, name in _UNARY_FUNCS.items():
        if isinstance(node, cls):
            a = _compile(node.this, scope)
            return lambda b, name=name: _unary(name, a(b))
    if isinstance(node, exp.Log):
        return _log(node, scope)
    if isinstance(node, exp.Anonymous) and node.name.upper() in _NAMED_UNARY:
        a = _compile(node.expressions[0], scope)
        name = _NAMED_UNARY[node.name.upper()]
        return lambda b: getattr(pc, name)(_float(a(b)))
    if isinstance(node, exp.Anonymous) and node.name.upper() == "MOD":
        return _mod(_compile(node.expressions[0], scope), _compile(node.expressions[1], scope))
    fn = compile_string(node, lambda e: _compile(e, scope))
    if fn is None:
        fn = compile_datetime(node, lambda e: _compile(e, scope))
    if fn is None:
        fn = compile_function(node, scope, lambda e: _compile(e, scope))  # Flink's functions, Python UDFs
    if fn is not None:
        return fn
    if isinstance(node, exp.AggFunc):
        raise UnsupportedSqlError(f"aggregate {node.sql()} is not allowed here (WHERE, GROUP BY or a non-aggregating query)")
    if isinstance(node, exp.Func):
        name = node.name.upper() if isinstance(node, exp.Anonymous) else node.sql_name()
        known = ", ".join(sorted(function_registry.builtin_names()))
        raise UnsupportedSqlError(f"function {name} is not supported; supported functions: {known}; or register "
                                  f"a Python UDF: conn.register_udf('{name.lower()}', fn, 'VARCHAR')")
    raise UnsupportedSqlError(f"unsupported expression: {node.sql()}")


#: the scalar functions ``compile_expr`` evaluates (operators, CASE, CAST, IN, LIKE … aside)
FUNCTIONS = ("ABS", "CAST", "CEIL", "COALESCE", "CONCAT", "COS", "EXP", "FLOOR", "GREATEST", "IF", "LEAST",
             "LENGTH", "LN", "LOG", "LOG10", "LOG2", "LOWER", "MOD", "NULLIF", "POWER", "REPLACE",
             "ROUND", "SIGN", "SIN", "SQRT", "SUBSTRING", "TAN", "TRIM", "TRUNC", "TRY_CAST", "UPPER")
function_registry.register_builtins("expressions", FUNCTIONS)


# --------------------------------------------------------------------------- helpers


def _is_interval(node: exp.Expression) -> bool:
    return isinstance(node, exp.Interval)


def _time_shift(node: exp.Expression, scope: Scope) -> Fn:
    a = _compile(node.this, scope)
    ms = interval_ms(node.expression)
    sign = 1 if isinstance(node, exp.Add) else -1

    def fn(b):
        v = a(b)
        if pa.types.is_timestamp(v.type):
            return pc.add(v, pa.scalar(sign * ms * 1000, pa.duration("us")).cast(pa.duration(v.type.unit)))
        return pc.add(v, pa.scalar(sign * ms, pa.int64()))

    return fn


def _null_safe_type(v: Value) -> pa.DataType:
    return v.type


def _binary(node: exp.Binary, scope: Scope, name: str) -> Fn:
    a, c = _compile(node.this, scope), _compile(node.expression, scope)

    def fn(b):
        x, y = a(b), c(b)
        if pa.types.is_string(x.type) or pa.types.is_string(y.type):
            raise SqlTypeError(f"{node.sql()!r}: arithmetic on VARCHAR; CAST it to a number first")
        x, y = _untyped_null(x, y), _untyped_null(y, x)
        if pa.types.is_floating(x.type) != pa.types.is_floating(y.type):
            x, y = _float(x), _float(y)
        return getattr(pc, name)(*_align_scalar(x, y))

    return fn


def _align_scalar(x: Value, y: Value) -> tuple[Value, Value]:
    """Give a numeric literal the type of the column it meets (saves Arrow an implicit
    cast per batch, which dominates one-row batches)."""
    if isinstance(y, pa.Scalar) and not isinstance(x, pa.Scalar) and y.type != x.type:
        if pa.types.is_floating(x.type) and (pa.types.is_integer(y.type) or pa.types.is_floating(y.type)):
            return x, _scalar_as(y, x.type)
        if pa.types.is_integer(x.type) and pa.types.is_integer(y.type) and x.type == pa.int64():
            return x, _scalar_as(y, x.type)
    elif isinstance(x, pa.Scalar) and not isinstance(y, pa.Scalar):
        b, a = _align_scalar(y, x)
        return a, b
    return x, y


_SCALAR_CACHE: dict[tuple, pa.Scalar] = {}


def _scalar_as(s: pa.Scalar, t: pa.DataType) -> pa.Scalar:
    key = (s.as_py(), str(s.type), str(t))
    hit = _SCALAR_CACHE.get(key)
    if hit is None:
        hit = s.cast(t, safe=False)
        if len(_SCALAR_CACHE) < 4096:
            _SCALAR_CACHE[key] = hit
    return hit


def _divide(node: exp.Div, scope: Scope) -> Fn:
    a, c = _compile(node.this, scope), _compile(node.expression, scope)

    def fn(b):  # DOUBLE division with IEEE results, as DuckDB: x/0 = ±inf, 0/0 = NaN
        return pc.divide(_float(a(b)), _float(c(b)))

    return fn


def _int_divide(node: exp.IntDiv, scope: Scope) -> Fn:
    a, c = _compile(node.this, scope), _compile(node.expression, scope)

    def fn(b):  # Flink's (Java's) integer division: truncated toward zero; by zero NULL
        x, y = _untyped_null(a(b), pa.scalar(None, pa.int64())), _untyped_null(c(b), pa.scalar(None, pa.int64()))
        if not (pa.types.is_integer(x.type) and pa.types.is_integer(y.type)):
            raise SqlTypeError(f"{node.sql()!r}: // divides integers (truncating toward zero), got "
                               f"{type_name(x.type)} and {type_name(y.type)}; for numbers use FLOOR(x / y) or TRUNC(x / y)")
        x, y = _align_scalar(x, y)
        safe_y = _if_else(pc.equal(y, 0), pa.scalar(None, y.type), y)
        # Arrow's integer divide truncates; MIN // -1 wraps to MIN as in Java (Arrow gives 0)
        return _if_else(pc.equal(y, -1), pc.negate(x), pc.divide(x, safe_y))

    return fn


def _mod(a: Fn, c: Fn) -> Fn:
    def fn(b):
        x, y = a(b), c(b)
        x, y = _untyped_null(x, y), _untyped_null(y, x)
        if pa.types.is_floating(x.type) or pa.types.is_floating(y.type):
            return _fmod(_float(x), _float(y), b.num_rows)
        safe = _if_else(pc.equal(y, 0), pa.scalar(None, y.type), y)
        rem = pc.subtract(x, pc.multiply(pc.divide(x, safe), safe))  # integer divide truncates
        return _if_else(pc.equal(y, -1), pc.multiply(x, pa.scalar(0, x.type)), rem)  # MIN % -1 is 0 (Arrow's MIN / -1 is 0); NULL stays

    return fn


def _cmp(name: str, x: Value, y: Value) -> Value:
    x, y = _coerce_time_literal(x, y), _coerce_time_literal(y, x)
    if (pa.types.is_floating(x.type) and pa.types.is_integer(y.type)) or (
            pa.types.is_integer(x.type) and pa.types.is_floating(y.type)):
        x, y = _float(x), _float(y)  # BIGINT beyond 2^53 against a DOUBLE: Arrow's implicit cast refuses it
    try:
        return getattr(pc, name)(*_align_scalar(_untyped_null(x, y), _untyped_null(y, x)))
    except pa.ArrowNotImplementedError:
        raise SqlTypeError(f"cannot compare {type_name(x.type)} with {type_name(y.type)}") from None


def _coerce_time_literal(v: Value, other: Value) -> Value:
    if pa.types.is_date(v.type) and pa.types.is_timestamp(other.type):
        return pc.cast(v, other.type)  # a DATE meets a TIMESTAMP at midnight
    if isinstance(v, pa.Scalar) and pa.types.is_string(v.type) and pa.types.is_date(other.type):
        return compile_cast_text(v, other.type)
    if isinstance(v, pa.Scalar) and pa.types.is_string(v.type) and pa.types.is_timestamp(other.type):
        return pc.cast(pc.strptime(v, format="%Y-%m-%d %H:%M:%S", unit="ms", error_is_null=False)
                       if " " in v.as_py() else pc.strptime(v, format="%Y-%m-%d", unit="ms"), other.type)
    return v


def compile_cast_text(v: pa.Scalar, t: pa.DataType) -> pa.Scalar:
    from laminardb.sql._casts import cast_value

    return cast_value(v, t, ("str", "date"))


def _compare(node: exp.Binary, scope: Scope, name: str) -> Fn:
    a, c = _compile(node.this, scope), _compile(node.expression, scope)
    return lambda b: _cmp(name, a(b), c(b))


def _bool(v: Value) -> Value:
    if pa.types.is_null(v.type):
        return pa.scalar(None, pa.bool_()) if isinstance(v, pa.Scalar) else pa.nulls(len(v), pa.bool_())
    if not pa.types.is_boolean(v.type):
        raise SqlTypeError(f"expected a BOOLEAN condition, got {type_name(v.type)}")
    return v


def _is_null(v: Value) -> Value:
    if isinstance(v, pa.Scalar):
        return pa.scalar(not v.is_valid)
    return pc.is_null(v)


def _in(node: exp.In, scope: Scope) -> Fn:
    if node.args.get("query") is not None:
        raise UnsupportedSqlError("IN (subquery) is not supported; list the values")
    x = _compile(node.this, scope)
    values = node.expressions
    if not all(isinstance(v, exp.Literal | exp.Null | exp.Neg) for v in values):
        items = [_compile(v, scope) for v in values]
        return lambda b: _any_equal(x(b), [i(b) for i in items])
    has_null = any(isinstance(v, exp.Null) for v in values)
    lits = [v for v in values if not isinstance(v, exp.Null)]
    consts = [_compile(v, scope)(None) for v in lits]

    def fn(b):
        xv = x(b)
        if isinstance(xv, pa.Scalar):
            xv = pa.repeat(xv, b.num_rows)
        target = xv.type
        vals = pa.array([pc.cast(c, target).as_py() if c.type != target else c.as_py() for c in consts], type=target)
        r = pc.is_in(xv, value_set=vals)
        r = _if_else(pc.is_null(xv), pa.scalar(None, pa.bool_()), r)
        if has_null:
            r = _if_else(r, pa.scalar(True), pa.scalar(None, pa.bool_()))
        return r

    return fn


def _any_equal(x: Value, items: list[Value]) -> Value:
    out = None
    for it in items:
        eq = _cmp("equal", x, it)
        out = eq if out is None else pc.or_kleene(out, eq)
    return out


def _case(node: exp.Case, scope: Scope) -> Fn:
    subject = _compile(node.this, scope) if node.this is not None else None
    ifs = [(_compile(i.this, scope), _compile(i.args["true"], scope)) for i in node.args["ifs"]]
    default = _compile(node.args["default"], scope) if node.args.get("default") is not None else None

    def fn(b):
        n = b.num_rows
        conds, vals = [], []
        for c, v in ifs:
            cv = c(b)
            if subject is not None:
                cv = _cmp("equal", subject(b), cv)
            cv = _bool(cv)
            if isinstance(cv, pa.Scalar):
                cv = pa.repeat(cv, n) if cv.is_valid else pa.nulls(n, pa.bool_())
            conds.append(pc.fill_null(cv, False))
            vals.append(v(b))
        dv = default(b) if default is not None else pa.scalar(None)
        types = [v.type for v in vals] + [dv.type]
        common = types[0]
        for t in types[1:]:
            common = _common_type(common, t)
        if pa.types.is_null(common):
            common = pa.int32()
        arrays = [_broadcast(to_common(v, common) if not pa.types.is_null(v.type) else pa.scalar(None, common), n) for v in vals]
        arrays.append(_broadcast(to_common(dv, common) if not pa.types.is_null(dv.type) else pa.scalar(None, common), n))
        struct = pa.StructArray.from_arrays(conds, names=[f"c{i}" for i in range(len(conds))])
        return pc.case_when(struct, *arrays)

    return fn


def _coalesce(vals: list[Value]) -> Value:
    types = [v.type for v in vals if not pa.types.is_null(v.type)]
    if not types:
        return vals[0]
    common = types[0]
    for t in types[1:]:
        common = _common_type(common, t)
    cast = [to_common(v, common) if not pa.types.is_null(v.type) else pa.scalar(None, common) for v in vals]
    return pc.coalesce(*cast)


def _nullif(a: Value, c: Value) -> Value:
    eq = pc.fill_null(_cmp("equal", a, c), False)
    return _if_else(eq, pa.scalar(None, a.type), a)


def _int_literal(node: exp.Expression | None) -> int | None:
    if isinstance(node, exp.Paren):
        return _int_literal(node.this)
    if isinstance(node, exp.Neg):
        v = _int_literal(node.this)
        return None if v is None else -v
    if isinstance(node, exp.Literal) and not node.is_string and node.this.lstrip("-").isdigit():
        return int(node.this)
    return None


def _floor_to(node: exp.Floor | exp.Ceil, scope: Scope) -> Fn:
    """Flink's FLOOR(t TO unit) / CEIL(t TO unit): a TIMESTAMP rounded to the unit (WEEK: Monday)."""
    unit = node.args["to"].name.upper()
    if unit not in _TIME_UNITS:
        raise UnsupportedSqlError(f"{node.sql()}: the unit must be one of {', '.join(_TIME_UNITS)}")
    a = _compile(node.this, scope)
    kernel = pc.floor_temporal if isinstance(node, exp.Floor) else pc.ceil_temporal

    def fn(b):
        v = a(b)
        if pa.types.is_date(v.type):
            v = pc.cast(v, pa.timestamp("ms"))
        if not pa.types.is_timestamp(v.type):
            raise SqlTypeError(f"{node.sql()}: expected a TIMESTAMP or DATE, got {type_name(v.type)}")
        return kernel(v, unit=unit.lower(), week_starts_monday=True)

    return fn


def _log(node: exp.Log, scope: Scope) -> Fn:
    if node.expression is not None:
        base, x = _compile(node.this, scope), _compile(node.expression, scope)
        exact = {10: pc.log10, 2: pc.log2}.get(_int_literal(node.this))  # LOG10(x), LOG2(x) parse as LOG(b, x)
        if exact is not None:
            return lambda b: exact(_float(x(b)))
        return lambda b: pc.divide(pc.ln(_float(x(b))), pc.ln(_float(base(b))))
    x = _compile(node.this, scope)
    return lambda b: pc.ln(_float(x(b)))  # LOG(x) is the natural logarithm in Flink (DuckDB: base 10)


def _not_distinct(x: Value, y: Value, same: bool) -> Value:
    """``x IS NOT DISTINCT FROM y`` (``same``) or ``IS DISTINCT FROM``: NULL equals NULL, never NULL."""
    eq = _cmp("equal", x, y)
    both = pc.and_(_is_null(x), _is_null(y))
    either = pc.or_(_is_null(x), _is_null(y))
    r = pc.if_else(both, pa.scalar(True), pc.if_else(either, pa.scalar(False), pc.fill_null(eq, False)))
    return r if same else pc.invert(r)


def evaluate_mask(expr: Expr, batch: pa.RecordBatch) -> np.ndarray:
    """A WHERE/HAVING condition as a numpy bool mask (NULL counts as false)."""
    v = expr.evaluate(batch)
    if v.null_count:
        v = pc.fill_null(v, False)
    return v.to_numpy(zero_copy_only=False)
