"""CAST and TRY_CAST between laminardb's types, with Flink's rules, as Arrow kernels.

Entry point: ``compile_cast(node, arg) -> Fn``. Why a module of its own: Arrow's ``cast`` is
neither Flink's nor DuckDB's (it raises on one bad value in a batch, accepts ``'1e3'`` as an
integer nowhere and ``'2020-01-01T10:00'`` as a timestamp, writes ``1.23e+11``), and a stream
cannot stop on one bad row. So every pair of types has a written rule (docs/sql.md, *CAST*),
checked against DuckDB by ``tests/sql_functions/test_differential.py``:

* a value that does not fit the target (text that is not a number, a DOUBLE out of the
  integer's range, NaN, a date beyond year 9999) is NULL — for CAST as for TRY_CAST (Flink
  fails the job; a stream here keeps its other rows);
* DOUBLE → integer truncates toward zero (Flink, Java; DuckDB rounds);
* VARCHAR → integer takes trimmed integer text only (``' 12 '``, ``'+7'``; not ``'2.5'``);
* BOOLEAN → VARCHAR is ``'TRUE'``/``'FALSE'`` (Flink; DuckDB writes lower case);
* DOUBLE → VARCHAR is the shortest text that reads back the same, laid out as DuckDB and
  Python do (``123456789012.0``, ``1e+16``, ``1e-05``);
* TIMESTAMP ↔ BIGINT is epoch milliseconds (laminardb's event-time convention);
* pairs with no meaning (DATE ↔ numbers, BOOLEAN ↔ time) are refused when planned.

Everything is a few kernel calls per batch; the DOUBLE → VARCHAR layout loops over the ~20
possible decimal exponents, never over rows.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from laminardb.sql.exceptions import SqlTypeError
from laminardb.sql.types import parse_type, type_name

Value = pa.Array | pa.ChunkedArray | pa.Scalar
Fn = Callable[[pa.RecordBatch], Value]

#: Flink's TIMESTAMP and DATE range: 0001-01-01 … 9999-12-31 (also DuckDB's usual range)
MIN_MS = -62135596800000
MAX_MS = 253402300799999
_TRUE = pa.array(["true", "t", "yes", "y", "1"])
_FALSE = pa.array(["false", "f", "no", "n", "0"])
_INT_TEXT = r"^[+-]?[0-9]+$"
_INT_RANGE = {pa.int8(): (-2**7, 2**7 - 1), pa.int16(): (-2**15, 2**15 - 1), pa.int32(): (-2**31, 2**31 - 1),
              pa.int64(): (-2**63, 2**63 - 1)}
#: what Flink (and laminardb) read as a TIMESTAMP / DATE: 'yyyy-MM-dd[ HH:mm[:ss[.fraction]]]'
TIMESTAMP_TEXT = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}( [0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?)?$"
DATE_TEXT = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"


def _kind(t: pa.DataType) -> str:
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_timestamp(t):
        return "ts"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_null(t):
        return "null"
    return str(t)


_REFUSED = {("bool", "ts"), ("bool", "date"), ("ts", "bool"), ("date", "bool"), ("date", "int"),
            ("date", "float"), ("int", "date"), ("float", "date"), ("float", "ts"), ("ts", "float")}


def compile_cast(node: exp.Cast, arg: Fn) -> Fn:
    target = parse_type(node.to.sql())
    sql = node.sql()

    def fn(b):
        v = arg(b)
        if isinstance(v, pa.ChunkedArray):
            v = v.combine_chunks()
        pair = (_kind(v.type), _kind(target))
        if pair in _REFUSED:
            raise SqlTypeError(f"{sql}: CAST from {type_name(v.type)} to {type_name(target)} is not supported; "
                               "BOOLEAN and DATE convert to and from VARCHAR (DATE also to and from TIMESTAMP)")
        if pair[0] == "null":
            return pa.scalar(None, target) if isinstance(v, pa.Scalar) else pa.nulls(len(v), target)
        if v.type == target:
            return v
        return cast_value(v, target, pair)

    return fn


def _null(t: pa.DataType) -> pa.Scalar:
    return pa.scalar(None, t)


def _where(cond: Value, v: Value, t: pa.DataType) -> Value:
    """``v`` where ``cond`` is true, NULL elsewhere (NULL ``cond`` too)."""
    return pc.if_else(pc.fill_null(cond, False), v, _null(t))


def cast_value(v: Value, target: pa.DataType, pair: tuple[str, str]) -> Value:  # noqa: C901 - one table
    src, dst = pair
    if dst == "str":
        if src == "bool":
            return pc.if_else(v, pa.scalar("TRUE"), pa.scalar("FALSE"))
        if src == "float":
            return double_text(v)
        return pc.cast(v, pa.string())
    if src == "str":
        return _from_text(v, target, dst)
    if dst == "int":
        if src == "float":
            lo, hi = _INT_RANGE[target]
            t = pc.trunc(pc.cast(v, pa.float64()))
            ok = pc.and_(pc.greater_equal(t, float(lo)), pc.less(t, -float(lo)))  # NaN compares false
            return pc.cast(_where(ok, t, pa.float64()), target, safe=False)
        if src == "ts":
            return _int_range(_epoch_ms(v), target)
        if src == "int":
            return _int_range(v, target)
        return pc.cast(v, target)  # BOOLEAN: 1 / 0
    if dst == "ts":
        if src == "int":
            ms = pc.cast(v, pa.int64())
            ok = pc.and_(pc.greater_equal(ms, MIN_MS), pc.less_equal(ms, MAX_MS))
            return pc.cast(pc.cast(_where(ok, ms, pa.int64()), pa.timestamp("ms")), target)
        if src == "date":
            return pc.cast(v, target)
        return pc.cast(pc.floor_temporal(v, unit="millisecond"), target)  # TIMESTAMP(6) → (3): floored
    if dst == "date":
        return pc.cast(pc.floor_temporal(v, unit="day"), target) if src == "ts" else pc.cast(v, target)
    if dst == "float":
        return pc.cast(v, target, safe=False)
    if dst == "bool":
        return pc.not_equal(v, 0) if src in ("int", "float") else pc.cast(v, target)
    return pc.cast(v, target)


def _epoch_ms(v: Value) -> Value:
    """TIMESTAMP → BIGINT epoch milliseconds (floored for TIMESTAMP(6))."""
    raw = pc.cast(v, pa.int64())
    per_ms = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}[v.type.unit]
    if per_ms is None:
        return pc.multiply(raw, 1000)
    if per_ms == 1:
        return raw
    return floor_div(raw, per_ms)


def floor_div(x: Value, k: int) -> Value:
    """Integer division rounded toward −∞ (Arrow's integer ``divide`` truncates)."""
    q = pc.divide(x, k)
    return pc.subtract(q, pc.cast(pc.less(pc.subtract(x, pc.multiply(q, k)), 0), pa.int64()))


def _int_range(v: Value, target: pa.DataType) -> Value:
    lo, hi = _INT_RANGE[target]
    wide = pc.cast(v, pa.int64())
    if target == pa.int64():
        return wide
    ok = pc.and_(pc.greater_equal(wide, lo), pc.less_equal(wide, hi))
    return pc.cast(_where(ok, wide, pa.int64()), target)


def _from_text(v: Value, target: pa.DataType, dst: str) -> Value:
    s = pc.utf8_trim_whitespace(v)
    if dst == "bool":
        low = pc.utf8_lower(s)
        return pc.if_else(pc.is_in(low, value_set=_TRUE), pa.scalar(True),
                          pc.if_else(pc.is_in(low, value_set=_FALSE), pa.scalar(False), _null(pa.bool_())))
    if dst == "int":
        ok = pc.match_substring_regex(s, _INT_TEXT)
        digits = pc.utf8_ltrim(pc.utf8_ltrim(s, characters="+-"), characters="0")
        # at most 19 significant digits parse as int64; the exact range is checked after
        ok = pc.and_(ok, pc.less_equal(pc.utf8_length(digits), 19))
        neg = pc.starts_with(s, "-")
        big = pc.and_(pc.equal(pc.utf8_length(digits), 19),
                      pc.greater(digits, pc.if_else(neg, pa.scalar("9223372036854775808"), pa.scalar("9223372036854775807"))))
        ok = pc.and_(ok, pc.invert(big))
        text = pc.if_else(pc.fill_null(ok, False), s, pa.scalar("0"))
        parsed = pc.cast(pc.utf8_ltrim(text, characters="+"), pa.int64())
        return _int_range(_where(ok, parsed, pa.int64()), target)
    if dst == "float":
        ok = pc.match_substring_regex(s, r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$|^[+-]?(?i:nan|inf|infinity)$")
        text = pc.if_else(pc.fill_null(ok, False), pc.utf8_ltrim(s, characters="+"), pa.scalar("0"))
        return pc.cast(_where(ok, pc.cast(text, pa.float64()), pa.float64()), target, safe=False)
    if dst in ("ts", "date"):
        ok = pc.match_substring_regex(s, TIMESTAMP_TEXT if dst == "ts" else DATE_TEXT)
        return text_to_time(s, ok, target)
    return pc.cast(v, target)


_TIME_PARTS = (r"^(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})(?: (?P<h>[0-9]{2}):(?P<m>[0-9]{2})"
               r"(?::(?P<s>[0-9]{2})(?:\.(?P<f>[0-9]{1,9}))?)?)?$")


def text_to_time(s: Value, ok: Value, target: pa.DataType) -> Value:
    """Text already matched against TIMESTAMP_TEXT/DATE_TEXT (``ok``) → TIMESTAMP/DATE.
    An impossible date (Feb 30), hour, minute or second, or a year outside 0001-9999 is NULL."""
    if isinstance(s, pa.Scalar):
        return text_to_time(pa.array([s.as_py()], pa.string()), pa.array([ok.as_py()], pa.bool_()), target)[0]
    text = pc.if_else(pc.fill_null(ok, False), s, pa.scalar("1970-01-01"))
    parts = pc.extract_regex(text, pattern=_TIME_PARTS)
    date = pc.struct_field(parts, "date")
    day = pc.strptime(date, format="%Y-%m-%d", unit="s", error_is_null=True)
    # strptime rolls impossible days over into the next month: a date is real when it writes back
    good = pc.and_(pc.fill_null(pc.equal(pc.strftime(day, format="%Y-%m-%d"), date), False),
                   pc.not_equal(pc.utf8_slice_codeunits(date, 0, 4), "0000"))

    def num(name: str) -> Value:
        f = pc.struct_field(parts, name)
        return pc.cast(pc.if_else(pc.equal(f, ""), pa.scalar("0"), f), pa.int64())

    h, m, sec = num("h"), num("m"), num("s")
    good = pc.and_(good, pc.and_(pc.less(h, 24), pc.and_(pc.less(m, 60), pc.less(sec, 60))))
    ns = pc.cast(pc.utf8_rpad(pc.struct_field(parts, "f"), width=9, padding="0"), pa.int64())
    secs = pc.add(pc.cast(pc.cast(day, pa.timestamp("s")), pa.int64()),
                  pc.add(pc.multiply(h, 3600), pc.add(pc.multiply(m, 60), sec)))
    us = pc.add(pc.multiply(pc.fill_null(secs, 0), 1_000_000), pc.divide(ns, 1000))
    us = pc.if_else(pc.and_(pc.fill_null(good, False), pc.fill_null(ok, False)), us, _null(pa.int64()))
    out = pc.cast(us, pa.timestamp("us"))
    if pa.types.is_date(target):
        return pc.cast(out, target)
    if target.unit != "us":  # to milliseconds: floored (a cast truncates toward 1970)
        out = pc.floor_temporal(out, unit="millisecond")
    return pc.cast(out, target, safe=False)


# --------------------------------------------------------------------------- DOUBLE → VARCHAR

_NUMBER = r"^(?P<sign>-?)(?P<int>[0-9]+)(?:\.(?P<frac>[0-9]+))?(?:e(?P<exp>[+-][0-9]+))?$"


def double_text(v: Value) -> Value:
    """Shortest round-trip digits (Arrow's) laid out as Python's ``repr`` and DuckDB: fixed
    notation for decimal exponents -5 < X < 16 (``123456789012.0``), else ``1e+16``/``1.5e-07``."""
    if isinstance(v, pa.Scalar):
        return double_text(pa.array([v.as_py()], v.type))[0]
    if v.type != pa.float64():
        v = pc.cast(v, pa.float64())
    arrow = pc.cast(v, pa.string())
    finite = pc.is_finite(v)
    parts = pc.extract_regex(pc.if_else(finite, arrow, pa.scalar("0")), pattern=_NUMBER)
    sign = pc.struct_field(parts, "sign")
    ip = pc.struct_field(parts, "int")
    frac = pc.fill_null(pc.struct_field(parts, "frac"), "")
    exp_text = pc.utf8_ltrim(pc.struct_field(parts, "exp"), characters="+")
    e10 = pc.cast(pc.if_else(pc.equal(exp_text, ""), pa.scalar("0"), exp_text), pa.int64())
    all_digits = pc.binary_join_element_wise(ip, frac, "")
    stripped = pc.utf8_ltrim(all_digits, characters="0")
    lead = pc.subtract(pc.utf8_length(all_digits), pc.utf8_length(stripped))
    digits = pc.utf8_rtrim(stripped, characters="0")
    zero = pc.equal(pc.utf8_length(digits), 0)
    digits = pc.if_else(zero, pa.scalar("0"), digits)
    # scientific exponent X: value = d.ddd × 10^X
    x = pc.if_else(zero, 0, pc.add(pc.subtract(pc.subtract(pc.utf8_length(ip), 1), lead), e10))
    n = pc.utf8_length(digits)
    out = _sci(sign, digits, x)
    for k in range(-4, 16):  # fixed notation, one exponent at a time
        here = pc.equal(x, k)
        if not pc.any(here).as_py():
            continue
        out = pc.if_else(here, _fixed(sign, digits, n, k), out)
    text = pc.if_else(finite, out, pc.if_else(pc.is_nan(v), pa.scalar("nan"),
                                              pc.if_else(pc.greater(v, 0), pa.scalar("inf"), pa.scalar("-inf"))))
    return text


def _fixed(sign, digits, n, k: int):
    if k < 0:
        return pc.binary_join_element_wise(sign, pa.scalar("0." + "0" * (-k - 1)), digits, "")
    head = pc.utf8_slice_codeunits(digits, 0, k + 1)
    pad = pc.binary_repeat(pa.scalar("0"), pc.max_element_wise(pc.subtract(k + 1, n), 0))
    tail = pc.utf8_slice_codeunits(digits, k + 1)
    tail = pc.if_else(pc.equal(pc.utf8_length(tail), 0), pa.scalar("0"), tail)
    return pc.binary_join_element_wise(sign, head, pad, pa.scalar("."), tail, "")


def _sci(sign, digits, x):
    head = pc.utf8_slice_codeunits(digits, 0, 1)
    rest = pc.utf8_slice_codeunits(digits, 1)
    dot = pc.if_else(pc.equal(pc.utf8_length(rest), 0), pa.scalar(""), pa.scalar("."))
    esign = pc.if_else(pc.less(x, 0), pa.scalar("-"), pa.scalar("+"))
    mag = pc.cast(pc.abs(x), pa.string())
    mag = pc.if_else(pc.less(pc.abs(x), 10), pc.binary_join_element_wise(pa.scalar("0"), mag, ""), mag)
    return pc.binary_join_element_wise(sign, head, dot, rest, pa.scalar("e"), esign, mag, "")
