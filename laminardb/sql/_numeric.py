"""Value-level numeric rules shared by the expression compiler: implicit DOUBLE conversion,
common types (INT with INT stays INT, as Flink), and the functions whose Arrow kernel is not
Flink's rule as is — ROUND (half away from zero on the shortest decimal text), GREATEST/LEAST
(NULL and NaN win), DOUBLE remainder (fmod), FLOOR/CEIL/SIGN of integers.

Why apart from ``expressions.py``: these act on evaluated values (Arrow arrays and scalars),
not on SQL trees, and the compiler was past the size one reads at once. Each is a few
``pyarrow.compute`` calls (numpy's fmod over the buffers): no Python loop over rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Value = pa.Array | pa.ChunkedArray | pa.Scalar


def to_common(v: Value, t: pa.DataType) -> Value:
    """``v`` as the common type ``t``; an integer beyond 2^53 becomes the nearest DOUBLE (Java's
    widening — Arrow's safe cast raises, mid-stream)."""
    unsafe = pa.types.is_integer(v.type) and pa.types.is_floating(t)
    return pc.cast(v, t, safe=not unsafe)


def _untyped_null(v: Value, other: Value) -> Value:
    if isinstance(v, pa.Scalar) and pa.types.is_null(v.type):
        t = other.type if not pa.types.is_null(other.type) else pa.int64()
        return pa.scalar(None, t)
    return v


def _float(v: Value) -> Value:
    if pa.types.is_null(v.type):
        return pa.scalar(None, pa.float64()) if isinstance(v, pa.Scalar) else pa.nulls(len(v), pa.float64())
    # an integer beyond 2^53 becomes the nearest DOUBLE (Java's widening); Arrow's safe cast refuses it
    return pc.cast(v, pa.float64(), safe=False) if not pa.types.is_floating(v.type) else v


def _if_else(cond: Value, t: Value, f: Value) -> Value:
    t = _untyped_null(t, f)
    f = _untyped_null(f, t)
    if t.type != f.type:
        common = _common_type(t.type, f.type)
        t, f = to_common(t, common), to_common(f, common)
    return pc.if_else(cond, t, f)


def _common_type(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    if a == b:
        return a
    if pa.types.is_floating(a) or pa.types.is_floating(b):
        return pa.float64()
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return a if a.bit_width >= b.bit_width else b  # INT and INT stay INT (Flink)
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        return pa.timestamp("us") if "us" in (a.unit, b.unit) else a
    if pa.types.is_temporal(a) and pa.types.is_temporal(b):  # DATE and TIMESTAMP
        return a if pa.types.is_timestamp(a) else b
    if pa.types.is_string(a) or pa.types.is_string(b):
        return pa.string()
    return a


def _broadcast(v: Value, n: int) -> pa.Array:
    if isinstance(v, pa.Scalar):
        return pa.repeat(v, n) if v.is_valid else pa.nulls(n, v.type)
    return v


def _greatest(name: str, vals: list[Value]) -> Value:
    """GREATEST/LEAST: NULL when any argument is NULL (Flink; DuckDB skips NULLs), NaN when any
    is NaN (Java's Math.max/min)."""
    vals = [_untyped_null(v, next((o for o in vals if not pa.types.is_null(o.type)), v)) for v in vals]
    common = vals[0].type
    for v in vals[1:]:
        common = _common_type(common, v.type)
    vals = [to_common(v, common) if v.type != common else v for v in vals]
    r = getattr(pc, name)(*vals, skip_nulls=False)
    if pa.types.is_floating(common):
        nan = None
        for v in vals:
            n = pc.is_nan(v)
            nan = n if nan is None else pc.or_(nan, n)
        r = pc.if_else(pc.fill_null(nan, False), pa.scalar(float("nan"), common), r)
    return r


def _round(v: Value, nd: int) -> Value:
    """ROUND(x, nd), half away from zero. A DOUBLE is rounded as Flink does, on its shortest
    decimal text (``BigDecimal.valueOf``): ROUND(0.285, 2) = 0.29, ROUND(2.675, 2) = 2.68 —
    DuckDB rounds the binary value (0.28, 2.67). Through DECIMAL(38, 20): below 1e15 (larger
    DOUBLEs have no fraction left to round), elsewhere Arrow's round of the binary value."""
    if pa.types.is_integer(v.type):
        if nd >= 0:
            return v
        if -nd >= len(str(2 ** (v.type.bit_width - 1))):
            return pc.multiply(v, pa.scalar(0, v.type))  # 10^-nd beyond the type: everything rounds to 0
        # in integers, wrapping on overflow as Java (Arrow's round raises mid-stream)
        m = pa.scalar(10 ** -nd, v.type)
        q = pc.divide(v, m)
        r = pc.subtract(v, pc.multiply(q, m))
        up = pc.greater_equal(pc.multiply(pc.abs(r), pa.scalar(2, v.type)), m)
        step = pc.multiply(pc.sign(v).cast(v.type), m)
        return pc.add(pc.multiply(q, m), pc.if_else(up, step, pa.scalar(0, v.type)))
    if not pa.types.is_floating(v.type):
        return pc.round(v, ndigits=nd, round_mode="half_towards_infinity")
    from laminardb.sql._casts import double_text

    if isinstance(v, pa.Scalar):
        return _round(pa.array([v.as_py()], v.type), nd)[0]
    small = pc.fill_null(pc.less(pc.abs(v), 1e15), False)  # NaN compares false
    text = double_text(pc.if_else(small, v, pa.scalar(0.0, v.type)))
    exact = pc.round(pc.cast(text, pa.decimal128(38, 20), safe=False), ndigits=nd, round_mode="half_towards_infinity")
    decimal = pc.cast(pc.cast(exact, pa.string()), pa.float64())  # via text: correctly rounded
    # |x| ≥ 1e15 is a whole number: nothing to round at nd ≥ 0 (Arrow's round would overflow
    # scaling 1e308 by 10^nd); at nd < 0 Arrow divides, which cannot overflow
    big = v if nd >= 0 else pc.round(v, ndigits=nd, round_mode="half_towards_infinity")
    return pc.if_else(small, pc.cast(decimal, v.type), big)


def _unary(name: str, v: Value) -> Value:
    """A one-argument function: FLOOR/CEIL of an integer is itself, SIGN/ABS keep an integer's
    type (Flink); SQRT/LN/EXP read integers as DOUBLE."""
    if pa.types.is_integer(v.type):
        if name in ("floor", "ceil"):
            return v
        if name == "sign":
            return pc.cast(pc.sign(v), v.type)
        if name in ("sqrt", "ln", "exp"):
            v = _float(v)
    elif pa.types.is_null(v.type) and name not in ("utf8_upper", "utf8_lower"):
        v = _float(v)
    return getattr(pc, name)(v)


def _fmod(x: Value, y: Value, n: int) -> Value:
    """Java's (and C's) DOUBLE remainder, sign of the dividend: ``x % 0`` and ``inf % y`` are NaN,
    ``x % inf`` is x. numpy's fmod over the Arrow buffers."""
    xa, ya = _broadcast(x, n), _broadcast(y, n)
    valid = pc.and_(pc.is_valid(xa), pc.is_valid(ya))
    xs = pc.fill_null(xa, 0.0).to_numpy(zero_copy_only=False)
    ys = pc.fill_null(ya, 1.0).to_numpy(zero_copy_only=False)
    with np.errstate(all="ignore"):
        out = np.fmod(xs, ys)
    return pa.array(out, pa.float64(), mask=pc.invert(valid).to_numpy(zero_copy_only=False))
