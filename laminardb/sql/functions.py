"""Scalar functions from Flink SQL, and calls of Python UDFs, as vectorized Arrow evaluators.

Entry point: ``compile_function(node, scope, compile_arg) -> Fn | None``, asked by
``expressions._compile`` for every function call it does not know itself (None: not one of
these). Each evaluator is a few ``pyarrow.compute`` kernel calls per batch (numpy for index
arithmetic), never a Python loop over rows:

* ``DATE_FORMAT(ts, 'yyyy-MM-dd HH:mm:ss.SSS')`` — a Java ``SimpleDateFormat`` pattern, turned
  into ``strftime`` pieces once, at planning (``SSS`` and unpadded ``d``/``H``/… are their own
  pieces); TIMESTAMP of any precision or BIGINT epoch milliseconds, formatted as UTC. Times are
  floored to the finest unit the pattern shows and, when a batch repeats them (a stream's
  usually does), each distinct one is formatted once and taken by index: strftime costs ~1 µs
  a value, the hash ~10 ns.
* ``REGEXP_EXTRACT(s, 'pattern'[, group])`` — group 0 (default) is the whole match; NULL when
  nothing matches. The pattern's groups are renamed ``(?P<gN>…)`` for Arrow's RE2 kernel.
* ``SPLIT_INDEX(s, 'delim', i)`` — the i-th (0-based) piece; NULL when i is out of range, i < 0,
  or s is '' (as Flink's ``splitByWholeSeparatorPreserveAllTokens``).
* ``PROCTIME()`` — the processing time of the batch (the connection's clock, ``config["clock"]``;
  the wall clock by default, UTC), TIMESTAMP(3).
* ``YEAR``, ``MONTH``, ``DAYOFMONTH``/``DAY``, ``HOUR``, ``MINUTE``, ``SECOND`` of a time.
* a Python UDF registered on the connection (``laminardb/sql/udf.py``), looked up in
  ``function_registry``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from laminardb.sql import function_registry
from laminardb.sql._string_kernels import contains_literal, split_index
from laminardb.sql.exceptions import SqlTypeError, UnsupportedSqlError
from laminardb.sql.function_registry import processing_clock
from laminardb.sql.types import type_name

Value: TypeAlias = pa.Array | pa.ChunkedArray | pa.Scalar
Fn: TypeAlias = Callable[[pa.RecordBatch], Value]
CompileArg: TypeAlias = Callable[[exp.Expression], Fn]

#: the functions of this module (registered in ``function_registry``; expressions.FUNCTIONS has the rest)
FUNCTIONS = ("DATE_FORMAT", "DAYOFMONTH", "DAY", "HOUR", "MINUTE", "MONTH", "PROCTIME",
             "REGEXP_EXTRACT", "SECOND", "SPLIT_INDEX", "YEAR")
function_registry.register_builtins("functions", FUNCTIONS)

_TIME_PARTS: dict[type, str] = {
    exp.Year: "year", exp.Month: "month", exp.Day: "day", exp.DayOfMonth: "day",
    exp.Hour: "hour", exp.Minute: "minute", exp.Second: "second",
}
_NAMED_PARTS = {"YEAR": "year", "MONTH": "month", "DAY": "day", "DAYOFMONTH": "day", "DAY_OF_MONTH": "day",
                "HOUR": "hour", "MINUTE": "minute", "SECOND": "second"}


def compile_function(node: exp.Expression, scope, compile_arg: CompileArg) -> Fn | None:
    """The evaluator of ``node`` if it is one of this module's functions or a UDF, else None."""
    if isinstance(node, exp.RegexpExtract):
        return _regexp_extract(node, compile_arg)
    for cls, part in _TIME_PARTS.items():
        if type(node) is cls:
            return _time_part(node.sql(), part, compile_arg(node.this))
    if not isinstance(node, exp.Anonymous):
        return None
    name = node.name.upper()
    args = list(node.expressions)
    if name == "DATE_FORMAT":
        _arity(node, args, 2, 2)
        return _date_format(node, compile_arg(args[0]), args[1])
    if name == "SPLIT_INDEX":
        _arity(node, args, 3, 3)
        return _split_index(node, compile_arg(args[0]), args[1], compile_arg(args[2]))
    if name == "PROCTIME":
        _arity(node, args, 0, 0)
        return _proctime(processing_clock())
    if name in _NAMED_PARTS:
        _arity(node, args, 1, 1)
        return _time_part(node.sql(), _NAMED_PARTS[name], compile_arg(args[0]))
    udf = function_registry.lookup(node.name)
    if udf is not None:
        return _udf_call(udf, node.sql(), [compile_arg(a) for a in args])
    return None


def _arity(node: exp.Expression, args: list, lo: int, hi: int) -> None:
    if not lo <= len(args) <= hi:
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        raise SqlTypeError(f"{node.sql()}: {node.name.upper()} takes {want} argument{'s' if hi != 1 else ''}")


def _broadcast(v: Value, n: int) -> pa.Array:
    if isinstance(v, pa.Scalar):
        return pa.repeat(v, n) if v.is_valid else pa.nulls(n, v.type)
    if isinstance(v, pa.ChunkedArray):
        return v.combine_chunks()
    return v


def _string_literal(node: exp.Expression, what: str) -> str:
    if isinstance(node, exp.Literal) and node.is_string:
        return node.this
    raise UnsupportedSqlError(f"{what} must be a string literal such as 'yyyy-MM-dd' (got {node.sql()})")


def _as_string(v: pa.Array, sql: str) -> pa.Array:
    if pa.types.is_string(v.type) or pa.types.is_large_string(v.type):
        return v
    if pa.types.is_null(v.type):
        return pa.nulls(len(v), pa.string())
    raise SqlTypeError(f"{sql}: expected VARCHAR, got {type_name(v.type)}; CAST it to VARCHAR first")


# --------------------------------------------------------------------------- time


def _proctime(clock) -> Fn:
    """The instant the reactor stamped for the batch being processed: one value per batch."""

    def run(b: pa.RecordBatch) -> pa.Scalar:
        if b.num_rows == 0:  # the planner's type probe: no batch, no instant (the clock is not read)
            return pa.scalar(None, pa.timestamp("ms"))
        return pa.scalar(clock.current(), pa.timestamp("ms"))

    return run


_MIN_MS, _MAX_MS = -62135596800000, 253402300799999  # 0001-01-01 … 9999-12-31 23:59:59.999


def _as_timestamp(v: pa.Array, sql: str) -> pa.Array:
    """TIMESTAMP as is; DATE at midnight; BIGINT as epoch milliseconds (NULL outside the
    years 0001-9999, as CAST); anything else is a type error."""
    if pa.types.is_timestamp(v.type):
        return v
    if pa.types.is_date(v.type):
        return pc.cast(v, pa.timestamp("ms"))
    if pa.types.is_integer(v.type):
        ms = pc.cast(v, pa.int64())
        ok = pc.and_(pc.greater_equal(ms, _MIN_MS), pc.less_equal(ms, _MAX_MS))
        return pc.cast(pc.if_else(ok, ms, pa.scalar(None, pa.int64())), pa.timestamp("ms"))
    if pa.types.is_null(v.type):
        return pa.nulls(len(v), pa.timestamp("ms"))
    raise SqlTypeError(f"{sql}: expected TIMESTAMP, DATE or BIGINT epoch milliseconds, got {type_name(v.type)}")


def _time_part(sql: str, part: str, arg: Fn) -> Fn:
    kernel = getattr(pc, part)

    def fn(b):
        ts = _as_timestamp(_broadcast(arg(b), b.num_rows), sql)
        return pc.cast(kernel(ts), pa.int64())

    return fn


# Java SimpleDateFormat letter (and count) → strftime; counts not listed are refused.
_PADDED = {"y": {2: "%y"}, "M": {2: "%m", 3: "%b"}, "d": {2: "%d"}, "H": {2: "%H"}, "h": {2: "%I"},
           "m": {2: "%M"}, "s": {2: "%S"}, "a": {1: "%p"}, "E": {1: "%a", 2: "%a", 3: "%a"}, "D": {3: "%j"}}
_UNPADDED = {"M": "%m", "d": "%d", "H": "%H", "h": "%I", "m": "%M", "s": "%S"}  # count 1: no leading zero
_SUPPORTED = ("yyyy, yy, MM, M, MMM, MMMM, dd, d, HH, H, hh, h, mm, m, ss, s, SSS, a, EEE, EEEE, DDD, "
              "and text in '…'")


def _java_letter(letter: str, count: int, pattern: str) -> tuple[str, str]:
    """One pattern field → ("fmt", strftime text) | ("unpad", strftime code) | ("ms", "")."""
    if letter == "y" and count != 2:
        return "fmt", "%Y"
    if letter == "M" and count >= 4:
        return "fmt", "%B"
    if letter == "E" and count >= 4:
        return "fmt", "%A"
    if letter == "S" and count == 3:
        return "ms", ""
    if count == 1 and letter in _UNPADDED:
        return "unpad", _UNPADDED[letter]
    code = _PADDED.get(letter, {}).get(count)
    if code is None:
        raise UnsupportedSqlError(f"DATE_FORMAT pattern {pattern!r}: {letter * count!r} is not supported; "
                                  f"supported: {_SUPPORTED}")
    return "fmt", code


def java_pattern(pattern: str) -> list[tuple[str, str]]:
    """A SimpleDateFormat pattern → pieces ("fmt", strftime) / ("unpad", code) / ("ms", "")."""
    pieces: list[tuple[str, str]] = []

    def fmt(s: str) -> None:  # strftime text: runs of it become one strftime call
        if pieces and pieces[-1][0] == "fmt":
            pieces[-1] = ("fmt", pieces[-1][1] + s)
        else:
            pieces.append(("fmt", s))

    def text(s: str) -> None:
        fmt(s.replace("%", "%%"))

    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "'":
            if pattern[i + 1 : i + 2] == "'":  # '' is one quote
                text("'")
                i += 2
                continue
            j, buf = i + 1, []
            while True:
                if j >= n:
                    raise UnsupportedSqlError(f"DATE_FORMAT pattern {pattern!r}: unterminated quote")
                if pattern[j] == "'":
                    if pattern[j + 1 : j + 2] == "'":
                        buf.append("'")
                        j += 2
                        continue
                    break
                buf.append(pattern[j])
                j += 1
            text("".join(buf))
            i = j + 1
        elif c.isascii() and c.isalpha():
            j = i
            while j < n and pattern[j] == c:
                j += 1
            kind, code = _java_letter(c, j - i, pattern)
            if kind == "fmt":
                fmt(code)
            else:
                pieces.append((kind, code))
            i = j
        else:
            text(c)
            i += 1
    return pieces or [("fmt", "")]


# the coarsest time unit that still keeps every strftime code exact (finest first)
_UNIT_OF = (("second", "%S"), ("minute", "%M"), ("hour", "%H%I%p"), ("day", "%d%a%A%j"), ("month", "%m%b%B"))
_MS_TEXT = pa.array([f"{i:03d}" for i in range(1000)])  # SSS: 000 … 999, taken by index


def _granularity(pieces: list[tuple[str, str]]) -> str:
    codes = "".join(code for kind, code in pieces if kind != "ms").replace("%%", "")
    for unit, marks in _UNIT_OF:
        if any(f"%{c}" in codes for c in marks.replace("%", "")):
            return unit
    return "year"


def _date_format(node: exp.Expression, arg: Fn, pattern_node: exp.Expression) -> Fn:
    pattern = _string_literal(pattern_node, "DATE_FORMAT's pattern")
    pieces = java_pattern(pattern)
    unit = _granularity(pieces)
    sql = node.sql()

    def fn(b):
        ts = _as_timestamp(_broadcast(arg(b), b.num_rows), sql)
        # floored to what the pattern shows (whole seconds at least: strftime prints %S with the
        # fraction of a finer unit); rows share few such values, so each is formatted once
        floored = pc.cast(pc.floor_temporal(ts, unit=unit), pa.timestamp("s", ts.type.tz))
        values = pc.unique(floored)
        dense = 2 * len(values) < len(floored)
        index = pc.index_in(floored, value_set=values) if dense else None
        base = values if dense else floored
        parts: list[pa.Array] = []
        for kind, code in pieces:
            if kind == "ms":  # SSS: milliseconds of the second, 000-999
                parts.append(pc.take(_MS_TEXT, pc.millisecond(ts)))
                continue
            text = pc.strftime(base, format=code)
            if kind == "unpad":
                text = pc.replace_substring_regex(text, pattern=r"^0(\d)$", replacement=r"\1")
            parts.append(pc.take(text, index) if dense else text)
        return parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, "")

    return fn


# --------------------------------------------------------------------------- strings


def name_groups(pattern: str, only: int | None = None) -> tuple[str, int]:
    """Rename the capturing groups of a (Java/RE2) pattern to ``(?P<g1>…)``, ``(?P<g2>…)`` … in
    order of their opening parenthesis, wrap the whole as ``(?P<g0>…)``; return it with the
    number of groups. Escapes, ``\\Q…\\E`` and character classes are skipped. ``only``: group
    ``only`` alone captures, the others become ``(?:…)`` (RE2 tracks fewer submatches and Arrow
    builds one column: REGEXP_EXTRACT wants one group)."""

    def group(k: int) -> str:
        return f"(?P<g{k}>" if only is None or k == only else "(?:"

    out: list[str] = []
    groups = 0
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if pattern[i + 1 : i + 2] == "Q":
                end = pattern.find("\\E", i + 2)
                end = n if end < 0 else end + 2
                out.append(pattern[i:end])
                i = end
                continue
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            out.append(c)
            i += 1
            if pattern[i : i + 1] == "^":
                out.append("^")
                i += 1
            if pattern[i : i + 1] == "]":  # a leading ] is a literal
                out.append("]")
                i += 1
            continue
        if c == "(":
            rest = pattern[i + 1 : i + 4]
            if rest.startswith("?P<") or (rest.startswith("?<") and pattern[i + 3 : i + 4] not in ("=", "!")):
                groups += 1  # a named group is numbered too (Java, RE2)
                close = pattern.find(">", i)
                out.append(group(groups))
                i = close + 1
                continue
            if rest.startswith("?"):
                out.append(c)
                i += 1
                continue
            groups += 1
            out.append(group(groups))
            i += 1
            continue
        out.append(c)
        i += 1
    return f"{group(0)}{''.join(out)})", groups


_META = set("\\^$.|?*+()[]{}")
_QUANTIFIERS = set("*+?{")


def required_literal(pattern: str) -> str | None:
    """The longest run of plain ASCII characters every match of ``pattern`` contains, or None.

    Conservative: only characters outside any group or class, not under a quantifier, count; a
    top-level ``|`` or an inline flag (``(?i)``) gives None. Rows without the literal cannot
    match, so REGEXP_EXTRACT runs RE2 only on the rows that have it."""
    if "\\Q" in pattern:  # quoted text may hold parentheses: not worth parsing
        return None
    best, run = "", ""
    depth, i, n = 0, 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":  # an escape: skipped, ends the run
            best, run, i = max(best, run, key=len), "", i + 2
            continue
        if c == "(" and pattern[i + 1 : i + 2] == "?" and not (
                pattern[i + 2 : i + 3] in (":", "P") or (pattern[i + 2 : i + 3] == "<"
                                                         and pattern[i + 3 : i + 4] not in ("=", "!"))):
            return None  # a flag such as (?i) changes how the rest matches
        if c == "[":  # a class: skipped to its closing ]
            j = i + 1 + (pattern[i + 1 : i + 2] == "^")
            j += pattern[j : j + 1] == "]"
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            best, run, i = max(best, run, key=len), "", j + 1
            continue
        if c == "{":  # a repetition {m,n}: skipped to its }
            best, run = max(best, run, key=len), ""
            close = pattern.find("}", i)
            i = n if close < 0 else close + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return None
        if depth == 0 and c not in _META and c.isascii() and c.isprintable() and \
                pattern[i + 1 : i + 2] not in _QUANTIFIERS:
            run += c
        else:
            best, run = max(best, run, key=len), ""
        i += 1
    best = max(best, run, key=len)
    return best or None


def _regexp_extract(node: exp.RegexpExtract, compile_arg: CompileArg) -> Fn:
    sql = node.sql()
    pattern = _string_literal(node.expression, "REGEXP_EXTRACT's pattern")
    group_node = node.args.get("group") or node.args.get("position")
    group = 0
    if group_node is not None:
        if not (isinstance(group_node, exp.Literal) and not group_node.is_string and group_node.this.isdigit()):
            raise UnsupportedSqlError(f"{sql}: the group index must be an integer literal (0: the whole match)")
        group = int(group_node.this)
    for extra in ("occurrence", "parameters"):
        if node.args.get(extra) is not None:
            raise UnsupportedSqlError(f"{sql}: REGEXP_EXTRACT takes (string, pattern[, group])")
    named, count = name_groups(pattern, only=group)
    if group > count:
        raise SqlTypeError(f"{sql}: group {group} does not exist; the pattern has {count} group"
                           f"{'s' if count != 1 else ''} (0 is the whole match)")
    try:
        pc.extract_regex(pa.array([], pa.string()), pattern=named)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise UnsupportedSqlError(f"{sql}: the pattern is not valid RE2 syntax ({str(e).splitlines()[0]}); "
                                  "look-around and back-references are not supported") from None
    arg = compile_arg(node.this)

    literal = required_literal(pattern)

    def extract(s: pa.Array) -> pa.Array:
        return pc.struct_field(pc.extract_regex(s, pattern=named), [0])  # the one group captured

    def fn(b):
        s = _as_string(_broadcast(arg(b), b.num_rows), sql)
        if literal is None:
            return extract(s)
        has = contains_literal(s, literal)  # numba; RE2 (~200 ns a row) only where it can match
        if has.all():
            return extract(s)
        if not has.any():
            return pa.nulls(len(s), s.type)
        # the same strings, NULL where the literal is missing (zero copy): RE2 skips NULL rows
        bits = np.concatenate([np.zeros(s.offset, np.bool_), has]) if s.offset else has
        masked = pa.Array.from_buffers(s.type, len(s), [pa.py_buffer(np.packbits(bits, bitorder="little")),
                                                        *s.buffers()[1:]], offset=s.offset)
        return extract(masked)

    return fn


def _split_index(node: exp.Expression, arg: Fn, delim_node: exp.Expression, index: Fn) -> Fn:
    sql = node.sql()
    delim = _string_literal(delim_node, "SPLIT_INDEX's delimiter")
    if not delim:
        raise UnsupportedSqlError(f"{sql}: the delimiter must not be empty")

    def fn(b):
        n = b.num_rows
        s = _as_string(_broadcast(arg(b), n), sql)
        iv = index(b)
        if not (pa.types.is_integer(iv.type) or pa.types.is_null(iv.type)):
            raise SqlTypeError(f"{sql}: the index must be an integer, got {type_name(iv.type)}")
        if isinstance(iv, pa.Scalar):
            idx = np.full(n, iv.as_py() if iv.is_valid else -1, dtype=np.int64)
        else:
            iv = _broadcast(iv, n)
            idx = pc.fill_null(pc.cast(iv, pa.int64()), -1).to_numpy(zero_copy_only=False)
        # one scan per row up to the wanted piece, in numba; Flink splits '' into no pieces at
        # all (commons-lang splitByWholeSeparatorPreserveAllTokens)
        return split_index(s, delim, idx)

    return fn


# --------------------------------------------------------------------------- UDFs


def _udf_call(udf, sql: str, args: list[Fn]) -> Fn:
    """A call of ``udf`` (a ``udf.ScalarUdf``) over each batch."""
    def fn(b):
        n = b.num_rows
        return udf.call([_broadcast(a(b), n) for a in args], n, sql)

    return fn
