"""Date and time functions with Flink's semantics: EXTRACT, DATE_TRUNC, TIMESTAMPDIFF,
TO_TIMESTAMP, and the processing-time clock read as CURRENT_TIMESTAMP / NOW() / CURRENT_DATE.

Entry point: ``compile_datetime(node, compile_arg) -> Fn | None`` (None: not one of these),
asked by ``expressions._compile``. Why apart from ``functions.py``: these need calendar
arithmetic (whole months between two instants, ISO weeks, Flink's Sunday-first day of week)
that Arrow's temporal kernels only give in pieces. Every evaluator is a few kernel calls per
batch, times in UTC. A time argument is TIMESTAMP(3|6), DATE, or BIGINT epoch milliseconds
(laminardb's event-time convention).

CURRENT_TIMESTAMP and NOW() read the same clock as ``PROCTIME()`` (``config["clock"]``): one
instant per batch, so tests drive it and every row of a batch sees the same time, as Flink
evaluates them per record in streaming mode.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from laminardb.sql import function_registry
from laminardb.sql._casts import MAX_MS, MIN_MS, TIMESTAMP_TEXT, floor_div, text_to_time
from laminardb.sql.exceptions import SqlTypeError, UnsupportedSqlError
from laminardb.sql.function_registry import processing_clock
from laminardb.sql.functions import _broadcast, java_pattern
from laminardb.sql.types import type_name

Value = pa.Array | pa.ChunkedArray | pa.Scalar
Fn = Callable[[pa.RecordBatch], Value]
CompileArg = Callable[[exp.Expression], Fn]

FUNCTIONS = ("CURRENT_DATE", "CURRENT_TIMESTAMP", "DATE_TRUNC", "EXTRACT", "NOW", "TIMESTAMPDIFF", "TO_TIMESTAMP")
function_registry.register_builtins("datetime", FUNCTIONS)

EXTRACT_UNITS = ("YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "DOY", "DOW", "ISODOW", "HOUR", "MINUTE",
                 "SECOND", "MILLISECOND", "MICROSECOND", "EPOCH")
TRUNC_UNITS = ("MILLISECOND", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR")
DIFF_UNITS = {"MICROSECOND": 1, "MILLISECOND": 1000, "SECOND": 1_000_000, "MINUTE": 60_000_000,
              "HOUR": 3_600_000_000, "DAY": 86_400_000_000, "WEEK": 7 * 86_400_000_000,
              "MONTH": 0, "QUARTER": 0, "YEAR": 0}
_ALIASES = {"DAYOFWEEK": "DOW", "DAYOFYEAR": "DOY", "DAYOFMONTH": "DAY", "MS": "MILLISECOND", "US": "MICROSECOND",
            "SQL_TSI_SECOND": "SECOND", "SQL_TSI_MINUTE": "MINUTE", "SQL_TSI_HOUR": "HOUR", "SQL_TSI_DAY": "DAY",
            "SQL_TSI_WEEK": "WEEK", "SQL_TSI_MONTH": "MONTH", "SQL_TSI_QUARTER": "QUARTER", "SQL_TSI_YEAR": "YEAR"}


def compile_datetime(node: exp.Expression, compile_arg: CompileArg) -> Fn | None:
    if isinstance(node, exp.Extract):
        unit = _unit(node.this, EXTRACT_UNITS, "EXTRACT", node)
        return _extract(node.sql(), unit, compile_arg(node.expression))
    if isinstance(node, exp.DateTrunc | exp.TimestampTrunc):
        unit = _unit(node.args.get("unit"), TRUNC_UNITS, "DATE_TRUNC", node)
        return _date_trunc(node.sql(), unit, compile_arg(node.this))
    if isinstance(node, exp.TimestampDiff):  # the dialect builds it as (unit, this=end, expression=start)
        unit = _unit(node.args.get("unit"), tuple(DIFF_UNITS), "TIMESTAMPDIFF", node)
        return _timestampdiff(node.sql(), unit, compile_arg(node.expression), compile_arg(node.this))
    if isinstance(node, exp.CurrentTimestamp) or (isinstance(node, exp.Anonymous) and node.name.upper() == "NOW"):
        if node.expressions if isinstance(node, exp.Anonymous) else node.this is not None:
            raise SqlTypeError(f"{node.sql()}: takes no arguments")
        return _now(processing_clock(), date=False)
    if isinstance(node, exp.CurrentDate):
        return _now(processing_clock(), date=True)
    if isinstance(node, exp.Anonymous) and node.name.upper() == "TO_TIMESTAMP" or isinstance(node, exp.StrToTime):
        args = list(node.expressions) if isinstance(node, exp.Anonymous) else [node.this, node.args.get("format")]
        args = [a for a in args if a is not None]
        if not 1 <= len(args) <= 2:
            raise SqlTypeError(f"{node.sql()}: TO_TIMESTAMP takes (string[, 'format'])")
        return _to_timestamp(node.sql(), compile_arg(args[0]), args[1] if len(args) == 2 else None)
    return None


def _unit(node: exp.Expression | None, allowed: tuple[str, ...], fn: str, whole: exp.Expression) -> str:
    name = None
    if isinstance(node, exp.Literal | exp.Var | exp.Column | exp.Identifier):
        name = node.name.upper()
    name = _ALIASES.get(name, name) if name else None
    if name not in allowed:
        raise UnsupportedSqlError(f"{whole.sql()}: {fn} unit must be one of {', '.join(allowed)}")
    return name


def as_time(v: Value, sql: str) -> Value:
    """TIMESTAMP and DATE as they are; BIGINT as epoch milliseconds (TIMESTAMP(3))."""
    t = v.type
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return v
    if pa.types.is_integer(t):
        ms = pc.cast(v, pa.int64())
        ok = pc.and_(pc.greater_equal(ms, MIN_MS), pc.less_equal(ms, MAX_MS))
        return pc.cast(pc.if_else(ok, ms, pa.scalar(None, pa.int64())), pa.timestamp("ms"))
    if pa.types.is_null(t):
        return pa.scalar(None, pa.timestamp("ms")) if isinstance(v, pa.Scalar) else pa.nulls(len(v), pa.timestamp("ms"))
    raise SqlTypeError(f"{sql}: expected TIMESTAMP, DATE or BIGINT epoch milliseconds, got {type_name(t)}")


def _micros(v: Value) -> Value:
    """Epoch microseconds of a TIMESTAMP or DATE."""
    if pa.types.is_date(v.type):
        v = pc.cast(v, pa.timestamp("us"))
    return pc.cast(pc.cast(v, pa.timestamp("us")), pa.int64())


# --------------------------------------------------------------------------- EXTRACT


def _extract(sql: str, unit: str, arg: Fn) -> Fn:
    """EXTRACT(unit FROM t) → BIGINT. DOW is 1 (Sunday) … 7 (Flink, Calcite; DuckDB counts 0 …
    6), ISODOW 1 (Monday) … 7, WEEK the ISO week, SECOND whole seconds, MILLISECOND and
    MICROSECOND include the seconds (2.5 s → 2500), EPOCH whole seconds since 1970 (floored)."""

    def fn(b):
        t = as_time(_broadcast(arg(b), b.num_rows), sql)
        if pa.types.is_date(t.type):
            t = pc.cast(t, pa.timestamp("ms"))
        if unit == "EPOCH":
            r = floor_div(_micros(t), 1_000_000)
        elif unit == "DOW":
            r = pc.day_of_week(t, count_from_zero=False, week_start=7)
        elif unit == "ISODOW":
            r = pc.day_of_week(t, count_from_zero=False, week_start=1)
        elif unit == "WEEK":
            r = pc.iso_week(t)
        elif unit == "DOY":
            r = pc.day_of_year(t)
        elif unit == "MILLISECOND":
            r = pc.add(pc.multiply(pc.cast(pc.second(t), pa.int64()), 1000), pc.millisecond(t))
        elif unit == "MICROSECOND":
            r = pc.add(pc.multiply(pc.cast(pc.second(t), pa.int64()), 1_000_000),
                       pc.add(pc.multiply(pc.cast(pc.millisecond(t), pa.int64()), 1000), pc.microsecond(t)))
        else:
            r = getattr(pc, unit.lower())(t)
        return pc.cast(r, pa.int64())

    return fn


# --------------------------------------------------------------------------- DATE_TRUNC


def _date_trunc(sql: str, unit: str, arg: Fn) -> Fn:
    """DATE_TRUNC('unit', t): ``t`` rounded down to the unit (WEEK: to Monday, as ISO). A
    TIMESTAMP keeps its precision; a DATE or BIGINT gives TIMESTAMP(3), as DuckDB."""

    def fn(b):
        t = as_time(_broadcast(arg(b), b.num_rows), sql)
        if pa.types.is_date(t.type):
            t = pc.cast(t, pa.timestamp("ms"))
        return pc.floor_temporal(t, unit=unit.lower(), week_starts_monday=True)

    return fn


# --------------------------------------------------------------------------- TIMESTAMPDIFF


def _timestampdiff(sql: str, unit: str, start: Fn, end: Fn) -> Fn:
    """TIMESTAMPDIFF(unit, start, end) → BIGINT: whole units from ``start`` to ``end``,
    truncated toward zero (negative when ``end`` is earlier). MONTH/QUARTER/YEAR count whole
    calendar months: Jan 31 → Feb 29 is one month (a day past the end of a shorter month is
    its last day), as Calcite/Flink and DuckDB's ``date_sub``. Flink's result is INT; laminardb's
    BIGINT, so microseconds over centuries fit."""
    per = DIFF_UNITS[unit]

    def fn(b):
        n = b.num_rows
        s = as_time(_broadcast(start(b), n), sql)
        e = as_time(_broadcast(end(b), n), sql)
        if per:
            d = pc.subtract(_micros(e), _micros(s))
            return pc.divide(d, per)  # integer division truncates toward zero
        months = _whole_months(s, e)
        return pc.divide(months, {"MONTH": 1, "QUARTER": 3, "YEAR": 12}[unit])

    return fn


def _days_in_month(year: Value, month: Value) -> Value:
    leap = pc.or_(pc.and_(pc.equal(pc.bit_wise_and(year, 3), 0), pc.not_equal(pc.subtract(year, pc.multiply(pc.divide(year, 100), 100)), 0)),
                  pc.equal(pc.subtract(year, pc.multiply(pc.divide(year, 400), 400)), 0))
    table = pa.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], pa.int64())
    base = pc.take(table, month)
    return pc.add(base, pc.cast(pc.and_(leap, pc.equal(month, 2)), pa.int64()))


def _whole_months(s: Value, e: Value) -> Value:
    def parts(t):
        t = pc.cast(t, pa.timestamp("us")) if not pa.types.is_timestamp(t.type) else t
        us = _micros(t)
        tod = pc.subtract(us, pc.multiply(floor_div(us, 86_400_000_000), 86_400_000_000))
        return (pc.cast(pc.year(t), pa.int64()), pc.cast(pc.month(t), pa.int64()),
                pc.cast(pc.day(t), pa.int64()), tod)

    ys, ms, ds, ts = parts(s)
    ye, me, de, te = parts(e)

    def forward(y1, m1, d1, t1, y2, m2, d2, t2):  # whole months from 1 to 2, when 1 <= 2
        m = pc.add(pc.multiply(pc.subtract(y2, y1), 12), pc.subtract(m2, m1))
        day = pc.min_element_wise(d1, _days_in_month(y2, m2))
        past = pc.or_(pc.greater(day, d2), pc.and_(pc.equal(day, d2), pc.greater(t1, t2)))
        return pc.subtract(m, pc.cast(past, pa.int64()))

    ahead = pc.less_equal(_micros(s), _micros(e))
    fwd = forward(ys, ms, ds, ts, ye, me, de, te)
    back = pc.negate(forward(ye, me, de, te, ys, ms, ds, ts))
    return pc.if_else(ahead, fwd, back)


# --------------------------------------------------------------------------- TO_TIMESTAMP


_PARSE_CODES = {"%Y", "%m", "%d", "%H", "%M", "%S", "%y", "%b", "%B", "%I", "%p", "%j"}


def _to_timestamp(sql: str, arg: Fn, fmt_node: exp.Expression | None) -> Fn:
    """TO_TIMESTAMP(s[, 'pattern']) → TIMESTAMP(3). Without a pattern ``s`` is read as
    CAST(s AS TIMESTAMP) does ('yyyy-MM-dd[ HH:mm[:ss[.fff]]]'); with one, as Java's
    ``DateTimeFormatter`` with that pattern (fields zero-padded to their width). Text that
    does not match, or names a day that does not exist, is NULL (Flink)."""
    if fmt_node is None:
        def fn(b):
            s = _text(_broadcast(arg(b), b.num_rows), sql)
            t = pc.utf8_trim_whitespace(s)
            return text_to_time(t, pc.match_substring_regex(t, TIMESTAMP_TEXT), pa.timestamp("ms"))
        return fn
    if not (isinstance(fmt_node, exp.Literal) and fmt_node.is_string):
        raise UnsupportedSqlError(f"{sql}: TO_TIMESTAMP's format must be a string literal such as 'yyyy-MM-dd HH:mm:ss'")
    pieces = java_pattern(fmt_node.this)
    if any(kind != "fmt" for kind, _ in pieces):
        raise UnsupportedSqlError(f"{sql}: TO_TIMESTAMP reads zero-padded fields only (yyyy, yy, MM, dd, HH, hh, "
                                  "mm, ss, MMM, a, DDD and quoted text); SSS and one-letter fields are not supported")
    fmt = "".join(code for _, code in pieces)
    if "%a" in fmt or "%A" in fmt:
        raise UnsupportedSqlError(f"{sql}: TO_TIMESTAMP cannot read day names (EEE)")

    def fn(b):
        s = _text(_broadcast(arg(b), b.num_rows), sql)
        parsed = pc.strptime(s, format=fmt, unit="ms", error_is_null=True)
        # strptime rolls impossible days over (Feb 30 → Mar 1): valid only if it writes back the same
        same = pc.equal(pc.strftime(pc.cast(parsed, pa.timestamp("s")), format=fmt), s)
        return pc.if_else(pc.fill_null(same, False), parsed, pa.scalar(None, pa.timestamp("ms")))

    return fn


def _text(v: Value, sql: str) -> Value:
    if pa.types.is_string(v.type):
        return v
    if pa.types.is_null(v.type):
        return pa.nulls(len(v), pa.string())
    raise SqlTypeError(f"{sql}: TO_TIMESTAMP reads VARCHAR, got {type_name(v.type)}; a BIGINT is already epoch "
                       "milliseconds: CAST(x AS TIMESTAMP(3))")


# --------------------------------------------------------------------------- now


def _now(clock, *, date: bool) -> Fn:
    def run(b: pa.RecordBatch) -> pa.Scalar:
        t = pa.date32() if date else pa.timestamp("ms")
        if b.num_rows == 0:  # the planner's type probe: the clock is not read
            return pa.scalar(None, t)
        ms = pa.scalar(clock.current(), pa.timestamp("ms"))
        return ms.cast(pa.date32()) if date else ms

    return run
