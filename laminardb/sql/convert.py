"""Value conversion shared by ``insert()`` and the file reader of ``laminardb run``.

Entry points: ``convert(values, target)`` (one Arrow column → the target type, with a mask of
values that do not fit) and ``conform(table, schema)`` (every column, NOT NULL checks and an
optional event-time check; the rows that fit, and for the rest their positions, a reason and
an ``LDB-`` code). ``undated`` finds TIMESTAMP values no date can show (epoch µs/ns given as
ms), which ``conform`` refuses in every TIMESTAMP column (LDB-2004) so no reader of the stream
ever meets one. ``json_lines`` renders rows as JSON text (for dead letters and JSONL sinks).

One conversion for every way rows come in, so the same text means the same value whether it
arrives through ``insert()``, ``insert_json()``/``insert_csv()`` or a file:

* TIMESTAMP columns take ISO-8601 text (optional ``Z`` / ``+05:00`` offset, converted to UTC),
  Arrow/pandas/``datetime`` timestamps (aware ones converted to UTC), and numbers as epoch
  **milliseconds** (floats must be whole ticks of the column: whole ms for TIMESTAMP(3)).
* Integer and floating columns take numbers and numeric text; a value that would lose
  information (1.5 into BIGINT, an overflow) does not fit.
* BOOLEAN takes booleans and ``true/false/t/f/1/0/yes/no/y/n`` text.

Vectorized: Arrow compute kernels over whole columns. Python loops over values only on error
paths (a column Arrow cannot cast as a whole is cast value by value to find the bad ones).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laminardb.sql.types import type_name

# LDB codes of per-row rejections (the thousands digit is the data subsystem)
CODE_SCHEMA = 2001  # a key that is not a column of the source (rows given as dicts)
CODE_NULL = 2002  # NULL in a NOT NULL column
CODE_CONVERSION = 2003  # a value that does not convert to the column's type
CODE_RANGE = 2004  # an event time outside the source's plausible range (a wrong unit)
CODE_FUTURE = 2005  # an event time too far ahead of the source's max event time (max_future)

_INT_RE = r"^[+-]?\d{1,18}$"  # 18 digits always fit int64, so the cast after it cannot overflow
_FLOAT_RE = r"(?i)^[+-]?((\d+\.?\d*|\.\d+)(e[+-]?\d+)?|inf|infinity|nan)$"
_DATE = r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
_TIME = r"([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d{1,9})?)?"
_ISO_RE = rf"^{_DATE}([T ]{_TIME})?$"
_ISO_TZ_RE = rf"^{_DATE}[T ]{_TIME}(Z|[+-]\d{{2}}(:?\d{{2}})?)$"
_TRUE = pa.array(["true", "t", "1", "yes", "y"])
_FALSE = pa.array(["false", "f", "0", "no", "n"])
_INT64_MAX = 2**63 - 1

# The plausible event-time range when a source sets no ``event_time_range``: epoch values in
# the wrong unit land far outside it (µs taken as ms is year ~55,000; s taken as ms is 1970).
DEFAULT_RANGE_MS = (-2_208_988_800_000, 32_503_680_000_000)  # 1900-01-01 .. 3000-01-01 UTC
DATE_RANGE_MS = (-62_135_596_800_000, 253_402_300_800_000)  # years 1 … 9999: what has an ISO-8601 form
_DATE_MS = DATE_RANGE_MS


def _none(values: pa.Array) -> pa.Array:
    return pa.array(np.zeros(len(values), bool))


def _where(mask: pa.Array, values: pa.Array) -> pa.Array:
    """``values`` where ``mask`` is true, else NULL."""
    return pc.if_else(mask, values, pa.scalar(None, values.type))


def _matches(text: pa.Array, pattern: str) -> pa.Array:
    return pc.fill_null(pc.match_substring_regex(text, pattern), False)


def _cast_each(values: pa.Array, target: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """Error path only: cast value by value, NULL (and flagged) where a value does not fit."""
    out, bad = [], []
    for v in values.to_pylist():
        try:
            out.append(pc.cast(pa.array([v], values.type), target)[0].as_py())
            bad.append(False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            out.append(None)
            bad.append(v is not None)
    return pa.array(out, target), pa.array(bad, pa.bool_())


def _cast(values: pa.Array, target: pa.DataType) -> tuple[pa.Array, pa.Array]:
    try:
        return pc.cast(values, target), _none(values)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _cast_each(values, target)


def _from_text(text: pa.Array, target: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """Parse a string column; returns (values, ok) where ok is False for unparsable text."""
    text = pc.utf8_trim_whitespace(text)
    if pa.types.is_boolean(target):
        low = pc.utf8_lower(text)
        truthy = pc.is_in(low, value_set=_TRUE)
        ok = pc.or_(truthy, pc.is_in(low, value_set=_FALSE))
        return _where(ok, truthy), ok
    if pa.types.is_integer(target) or pa.types.is_timestamp(target):
        is_int = _matches(text, _INT_RE)
        ints = pc.cast(_where(is_int, pc.replace_substring_regex(text, r"^\+", "")), pa.int64())
        if pa.types.is_integer(target):
            values, bad = convert(ints, target)
            return values, pc.and_(is_int, pc.invert(bad))
        naive, zoned = _matches(text, _ISO_RE), _matches(text, _ISO_TZ_RE)
        unit = target.unit
        digits = {"s": 0, "ms": 3, "us": 6, "ns": 9}[unit]
        if digits < 9:  # finer fractions than the unit holds are truncated, as for timestamps
            cut = r"\1" if digits else ""
            text = pc.replace_substring_regex(text, rf"(\.\d{{{digits}}})\d+" if digits else r"\.\d+", cut)
        from_int, bad_i = convert(ints, target)
        from_naive, bad_n = _cast(_where(naive, text), pa.timestamp(unit))
        from_zoned, bad_z = _cast(_where(zoned, text), pa.timestamp(unit, "UTC"))
        from_zoned = pc.cast(from_zoned, pa.timestamp(unit))
        ok = pc.or_(pc.and_not(is_int, bad_i), pc.or_(pc.and_not(naive, bad_n), pc.and_not(zoned, bad_z)))
        return pc.coalesce(from_int, from_naive, from_zoned), ok
    if pa.types.is_floating(target):
        ok = _matches(text, _FLOAT_RE)
        values, bad = _cast(_where(ok, text), target)
        return values, pc.and_not(ok, bad)
    values, bad = _cast(text, target)
    return values, pc.invert(bad)


def _epoch_to_timestamp(values: pa.Array, target: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """Numbers as epoch milliseconds → ``target`` ticks; bad where not a whole tick or out of int64."""
    tpm = {"s": 0, "ms": 1, "us": 1000, "ns": 1_000_000}[target.unit]
    if tpm == 0:  # second-precision timestamps (only ever an intermediate type)
        ticks, bad = convert(pc.divide(pc.cast(values, pa.float64()), 1000.0), pa.int64())
    elif pa.types.is_integer(values.type):
        ms, bad = convert(values, pa.int64())
        over = pc.fill_null(pc.greater(pc.abs(ms), _INT64_MAX // tpm), False)
        if pc.any(over).as_py():
            bad, ms = pc.or_(bad, over), _where(pc.invert(over), ms)
        ticks = ms if tpm == 1 else pc.multiply(ms, tpm)
    else:
        ticks, bad = convert(pc.multiply(pc.cast(values, pa.float64()), float(tpm)), pa.int64())
    return pc.cast(ticks, pa.timestamp(target.unit, target.tz)), bad


def convert(values: pa.Array, target: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """Convert one column to ``target``; returns (values, bad) where ``bad`` marks non-NULL
    inputs that could not be converted (their output is NULL)."""
    src = values.type
    if pa.types.is_dictionary(src):
        values = values.dictionary_decode()
        src = values.type
    if src == target:
        return values, _none(values)
    if pa.types.is_null(src):
        return pa.nulls(len(values), target), _none(values)
    if pa.types.is_string(src) or pa.types.is_large_string(src):
        if pa.types.is_string(target) or pa.types.is_large_string(target):
            return pc.cast(values, target), _none(values)
        converted, ok = _from_text(values, target)
        return converted, pc.and_not(pc.is_valid(values), ok)
    if pa.types.is_timestamp(target):
        if pa.types.is_timestamp(src):
            # sub-unit precision is truncated, a zone is converted to UTC and dropped
            return pc.cast(values, target, safe=False), _none(values)
        if pa.types.is_integer(src) or pa.types.is_floating(src):  # epoch milliseconds
            return _epoch_to_timestamp(values, target)
    try:
        return pc.cast(values, target), _none(values)
    except pa.ArrowNotImplementedError:
        try:
            return convert(pc.cast(values, pa.string()), target)
        except pa.ArrowNotImplementedError:  # nested JSON value and the like: nothing fits
            return pa.nulls(len(values), target), pc.is_valid(values)
    except pa.ArrowInvalid:  # overflow or truncation: keep what round-trips exactly
        unsafe = pc.cast(values, target, safe=False)
        bad = pc.fill_null(pc.not_equal(pc.cast(unsafe, src, safe=False), values), True)
        bad = pc.and_(pc.is_valid(values), bad)
        return _where(pc.invert(bad), unsafe), bad


_convert = convert  # the name the Kafka decoder imports


# -- wrong-unit hints -------------------------------------------------------------------------

_HINTS = (  # (factor applied to the value taken as ms, what it then looks like); the first that fits wins
    (1e-3, "looks like epoch microseconds: divide by 1000 (numbers are epoch milliseconds)"),
    (1e-6, "looks like epoch nanoseconds: divide by 1,000,000 (numbers are epoch milliseconds)"),
    (1e3, "looks like epoch seconds: multiply by 1000 (numbers are epoch milliseconds)"),
)


# Where a rescaled value counts as a good guess first: a wrong unit rescaled right lands near
# the present, while other rescalings of it land decades or millennia away.
_LIKELY_MS = (315_532_800_000, 4_102_444_800_000)  # 1980-01-01 .. 2100-01-01 UTC


def unit_hints(ms: np.ndarray, lo_ms: int, hi_ms: int) -> pa.Array:
    """Per value (epoch ms as float64): which unit would put it in ``[lo_ms, hi_ms)`` — the
    one landing in 1980 … 2100 first — as text (``"; looks like epoch microseconds: …"``),
    NULL where no unit does."""
    out = pa.nulls(len(ms), pa.string())
    windows = ((max(lo_ms, _LIKELY_MS[0]), min(hi_ms, _LIKELY_MS[1])), (lo_ms, hi_ms))
    with np.errstate(invalid="ignore"):
        for w_lo, w_hi in reversed(windows):  # the likely window wins over the wider one
            for factor, text in reversed(_HINTS):  # then the first unit that fits
                scaled = ms * factor
                fits = pa.array((scaled >= w_lo) & (scaled < w_hi))
                out = pc.if_else(fits, pa.scalar(f"; {text}"), out)
    return out


_UNDATED = " is not a date (a TIMESTAMP column takes years 1 … 9999)"


def undated(values: pa.Array, consider: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """TIMESTAMP ``values`` outside years 1 … 9999 — epoch µs or ns given as milliseconds, nearly
    always — as (mask, the values as float64 epoch ms); None when every value is a date.

    Why: Arrow stores such a value, but nothing can read it back as a date (``to_pylist()`` raises
    ``OverflowError: date value out of range``), so one bad cell breaks every reader of the
    stream. The event-time column has its own, narrower rules (:mod:`laminardb.engine.event_time`);
    other TIMESTAMP columns refuse only what no date can show, so sentinels such as 9999-12-31
    and historical dates stay valid."""
    if not len(values) or values.null_count == len(values):
        return None
    tpm = {"s": 0.001, "ms": 1, "us": 1000, "ns": 1_000_000}[values.type.unit]
    ticks = pc.fill_null(pc.cast(values, pa.int64()), 0).to_numpy(zero_copy_only=False)
    ms = ticks / tpm
    out = (ms < _DATE_MS[0]) | (ms >= _DATE_MS[1])
    if consider is not None:
        out &= consider
    if not out.any():
        return None
    return out, ms


def dateless_text(values: pa.Array, ms: np.ndarray) -> pa.Array:
    """Timestamps as text where they have a date, else as ``"<n> ms after the epoch"``."""
    printable = pa.array((ms >= _DATE_MS[0]) & (ms < _DATE_MS[1]))
    tpm = {"s": 1, "ms": 1, "us": 1000, "ns": 1_000_000}[values.type.unit]
    ticks = pc.fill_null(pc.cast(values, pa.int64()), 0).to_numpy(zero_copy_only=False)
    whole_ms = ticks * 1000 if values.type.unit == "s" else ticks // tpm  # exact, unlike ``ms``
    as_ms = pc.binary_join_element_wise(pc.cast(pa.array(whole_ms), pa.string()), " ms after the epoch", "")
    safe = pc.if_else(printable, values, pa.scalar(0, values.type))
    return pc.if_else(printable, pc.cast(safe, pa.string()), as_ms)


def _epoch_ms(src: pa.Array) -> np.ndarray | None:
    """Numbers (or numeric text) as float64 epoch ms, NaN elsewhere; None for other columns."""
    if pa.types.is_integer(src.type) or pa.types.is_floating(src.type):
        num = pc.cast(src, pa.float64())
    elif pa.types.is_string(src.type) or pa.types.is_large_string(src.type):
        text = pc.utf8_trim_whitespace(src)
        num = pc.cast(_where(_matches(text, _FLOAT_RE), text), pa.float64())
    else:
        return None
    return pc.fill_null(num, float("nan")).to_numpy(zero_copy_only=False)


def _mask(arr: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(arr, False).to_numpy(zero_copy_only=False), bool)


def _as_text(src: pa.Array) -> pa.Array:
    """Values as text for messages (nested values as JSON; error path for those)."""
    if pa.types.is_string(src.type) or pa.types.is_large_string(src.type):
        return pc.cast(src, pa.string())
    try:
        return pc.cast(src, pa.string())
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return pa.array([None if v is None else json.dumps(v, default=str) for v in src.to_pylist()],
                        pa.string())


# -- conform: a table → the schema's rows that fit, and why the others do not ---------------------


@dataclass
class Conformed:
    table: pa.Table  # the rows that fit, in the schema's types
    rejected: pa.Table  # the input rows that did not fit, as they came
    positions: np.ndarray  # row positions of ``rejected`` within the input
    reasons: pa.Array  # one message per rejected row
    codes: np.ndarray | None = None  # one LDB code (2001…2005) per rejected row


#: ``check(values, rejected_so_far) -> (bad, reasons, codes)`` for the event-time column:
#: ``values`` converted, ``rejected_so_far`` a bool mask of rows already refused; it returns a
#: bool mask of further rows to refuse with one reason (NULL elsewhere) and code per row.
EventTimeCheck = Callable[[pa.Array, np.ndarray], tuple[np.ndarray, pa.Array, np.ndarray]]


def conform(table: pa.Table, schema: pa.Schema, *, bad_cells: dict[str, np.ndarray] | None = None,
            bad_rows: tuple[np.ndarray, pa.Array, int] | None = None,
            time_col: str | None = None, check: EventTimeCheck | None = None) -> Conformed:
    """Convert ``table`` to ``schema`` (columns by name; missing ones NULL) and split off the
    rows that do not fit: a value that does not convert, NULL in a non-nullable field, a cell
    flagged in ``bad_cells`` (column → mask: refused before conversion), a row flagged in
    ``bad_rows`` (mask, reasons, code), or a row ``check`` refuses (run last, on ``time_col``,
    over the rows nothing else refused)."""
    n = table.num_rows
    columns, reason = [], pa.nulls(n, pa.string())
    codes = np.zeros(n, np.int16)
    if bad_rows is not None and bad_rows[0].any():
        reason = pc.if_else(pa.array(bad_rows[0]), bad_rows[1], reason)
        codes[bad_rows[0]] = bad_rows[2]
    for field in schema:
        if field.name in table.column_names:
            src = table.column(field.name)
            src = src.combine_chunks() if isinstance(src, pa.ChunkedArray) else src
        else:
            src = pa.nulls(n, pa.null())
        values, bad = convert(src, field.type)
        flagged = (bad_cells or {}).get(field.name)
        if flagged is not None and flagged.any():
            bad = pc.or_(bad, pa.array(flagged))
            values = _where(pc.invert(pa.array(flagged)), values)
        if pc.any(bad).as_py():
            why = pc.binary_join_element_wise(
                f"column {field.name!r}: ", pc.fill_null(_as_text(src), "?"),
                f" is not a valid {type_name(field.type)}", "")
            ms = _epoch_ms(src) if pa.types.is_timestamp(field.type) or field.name == time_col else None
            if ms is not None:  # numbers that are no valid time: which unit they look like
                why = pc.binary_join_element_wise(why, pc.fill_null(unit_hints(ms, *DEFAULT_RANGE_MS), ""), "")
            fresh = pc.and_(bad, pc.is_null(reason))
            reason = pc.if_else(fresh, why, reason)
            codes[_mask(fresh)] = CODE_CONVERSION
        if pa.types.is_timestamp(field.type) and field.name != time_col:
            out = undated(values, codes == 0)
            if out is not None:  # epoch µs/ns as ms: a time no date can show (the event time: ``check``)
                why = pc.binary_join_element_wise(f"column {field.name!r}: ", dateless_text(values, out[1]),
                                                  _UNDATED, pc.fill_null(unit_hints(out[1], *DEFAULT_RANGE_MS), ""), "")
                reason = pc.if_else(pa.array(out[0]), why, reason)
                codes[out[0]] = CODE_RANGE
                values = _where(pc.invert(pa.array(out[0])), values)
        if not field.nullable and values.null_count:
            missing = pc.and_(pc.is_null(values), pc.is_null(reason))
            why = pa.scalar(f"column {field.name!r} is NOT NULL but the value is missing")
            reason = pc.if_else(missing, why, reason)
            codes[_mask(missing)] = CODE_NULL
        columns.append(values)
    if check is not None and time_col is not None:
        refused = codes != 0
        more, why, more_codes = check(columns[schema.get_field_index(time_col)], refused)
        if more.any():
            reason = pc.if_else(pa.array(more), why, reason)
            codes[more] = more_codes[more]
    out = pa.Table.from_arrays(columns, schema=schema)
    if not codes.any():
        return Conformed(out, table.slice(0, 0), np.empty(0, np.int64), reason.slice(0, 0),
                         np.empty(0, np.int16))
    positions = np.flatnonzero(codes)
    keep = pa.array(codes == 0)
    return Conformed(out.filter(keep), table.take(positions), positions, reason.take(positions),
                     codes[positions])


_conform = conform  # the name the Kafka decoder imports


# -- JSON lines, vectorized: one string per row, built with Arrow string kernels ---------------


def _quote(text: pa.Array) -> pa.Array:
    for raw, escaped in (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")):
        text = pc.replace_substring(text, raw, escaped)
    if pc.any(_matches(text, r"[\x00-\x1f]")).as_py():  # rare: other control characters
        for code in range(32):
            text = pc.replace_substring(text, chr(code), f"\\u{code:04x}")
    return pc.binary_join_element_wise('"', text, '"', "")


def _json_values(col: pa.Array) -> pa.Array:
    t = col.type
    if pa.types.is_dictionary(t):
        col, t = col.dictionary_decode(), t.value_type
    if pa.types.is_boolean(t) or pa.types.is_integer(t):
        text = pc.cast(col, pa.string())
    elif pa.types.is_floating(t):  # NaN and infinities are not JSON: they become null
        text = _where(pc.fill_null(pc.is_finite(col), False), pc.cast(col, pa.string()))
    elif pa.types.is_timestamp(t):
        zone = "Z" if t.tz else ""
        if t.tz:
            col = pc.cast(col, pa.timestamp(t.unit, "UTC"))
        ticks = pc.cast(col, pa.int64())
        per_ms = {"s": 0.001, "ms": 1, "us": 1000, "ns": 1_000_000}[t.unit]
        printable = pc.fill_null(pc.and_(pc.greater_equal(ticks, int(_DATE_MS[0] * per_ms)),
                                         pc.less(ticks, int(_DATE_MS[1] * per_ms))), True)
        if not pc.all(printable).as_py():  # years past 9999 have no ISO form: the number itself
            col = pc.if_else(printable, col, pa.scalar(0, col.type))
        iso = pc.strftime(col, format="%Y-%m-%dT%H:%M:%S")
        text = _quote(pc.binary_join_element_wise(iso, zone, ""))
        if not pc.all(printable).as_py():
            text = pc.if_else(printable, text, pc.cast(ticks, pa.string()))
    elif pa.types.is_null(t):
        text = pa.nulls(len(col), pa.string())
    else:
        try:
            text = _quote(pc.cast(col, pa.string()))
        except pa.ArrowNotImplementedError:  # nested values: rare, off the hot path
            text = pa.array([None if v is None else json.dumps(v, default=str)
                             for v in col.to_pylist()], pa.string())
    return pc.fill_null(text, "null")


def json_lines(table: pa.Table | pa.RecordBatch) -> pa.Array:
    """One JSON object (as text) per row of ``table``."""
    if table.num_columns == 0:
        return pa.array(["{}"] * table.num_rows, pa.string())
    parts: list[Any] = []
    for i, name in enumerate(table.column_names):
        col = table.column(i)
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        parts += [("{" if i == 0 else ",") + json.dumps(name) + ":", _json_values(col)]
    return pc.binary_join_element_wise(*parts, "}", "")


def _join_lines(lines: pa.Array) -> bytes:
    if len(lines) == 0:
        return b""
    lines = pc.binary_join_element_wise(lines, "\n", "")
    offsets = pa.array([0, len(lines)], pa.int32())
    return pc.binary_join(pa.ListArray.from_arrays(offsets, lines), "")[0].as_buffer().to_pybytes()


# -- rejected rows: one schema for the ``.rejected`` files and the ``<source>__rejected`` streams --

#: ``index``: the row's 0-based position in its input (the rows of one ``insert()`` call, the
#: records of a file); ``raw``: the row as it came, as text (a JSON object, or the unparsable
#: line); ``error``: why it was refused.
REJECTED_SCHEMA = pa.schema([pa.field("index", pa.int64(), nullable=False),
                             pa.field("raw", pa.string()), pa.field("error", pa.string())])


def rejected_batch(index: np.ndarray, raw: pa.Array, error: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(np.asarray(index, np.int64)), raw.cast(pa.string()), error.cast(pa.string())],
        schema=REJECTED_SCHEMA)


def rejected_json_lines(batch: pa.RecordBatch | pa.Table) -> bytes:
    """``{"index": …, "raw": "…", "error": "…"}`` per rejected row, newline-terminated."""
    if batch.num_rows == 0:
        return b""
    lines = pc.binary_join_element_wise(
        '{"index":', pc.cast(batch.column("index"), pa.string()),
        ',"raw":', pc.fill_null(_quote(batch.column("raw")), "null"),
        ',"error":', pc.fill_null(_quote(batch.column("error")), "null"), "}", "")
    return _join_lines(lines)
