"""Turn whatever ``insert()`` receives into one RecordBatch of the source's schema.

Entry point: ``prepare(data, schema, not_null, source=…, rules=…, max_ts=…)`` → ``Prepared``
(the rows that fit, and for the others their index in ``data``, a reason and an ``LDB-`` code);
``raise_rejected`` turns the first refused row into the error ``insert(on_error='raise')`` raises.

Accepts a dict (one row, or — when every value is a list/array — a dict of columns), a list
of dicts, a pyarrow RecordBatch or Table, a pandas or polars DataFrame (the text of
``insert_json()``/``insert_csv()`` is parsed in :mod:`laminardb.engine.text_rows`). Columns are matched by
name (case-insensitively when unambiguous) and converted with the conversion ``laminardb run``
uses for files (:mod:`laminardb.sql.convert`): ISO-8601 text with ``Z``/offsets and aware
``datetime`` s are UTC, numbers into TIMESTAMP are epoch milliseconds. The source's
event-time rules (:mod:`laminardb.engine.event_time`) refuse implausible event times.

Errors about the whole call raise a ``SchemaMismatchError`` whatever ``on_error`` says: input
that is not rows, a dict of columns of unequal lengths, an unknown column in tabular input, a
NOT NULL column absent from the input. Everything else is about one row and is refused per row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laminardb.errors import (
    ConfigError,
    ConversionError,
    DataError,
    NullViolationError,
    SchemaMismatchError,
)
from laminardb.sql.arrays import numeric_view
from laminardb.sql.convert import (
    CODE_CONVERSION,
    CODE_FUTURE,
    CODE_NULL,
    CODE_RANGE,
    CODE_SCHEMA,
    DATE_RANGE_MS,
    REJECTED_SCHEMA,
    conform,
    json_lines,
    rejected_batch,
    undated,
)
from laminardb.sql.one_row import one_row_batch

OnError = Literal["raise", "skip", "dead_letter"]
ON_ERROR_CHOICES = ("raise", "skip", "dead_letter")
_NO_MAX = np.iinfo(np.int64).min


_NO_REJECTED = REJECTED_SCHEMA.empty_table()  # immutable: shared by every result without refused rows


class InsertResult(int):
    """What ``insert()`` returns: the number of rows accepted into the source (it *is* that int;
    ``offset()`` counts the same rows), with ``rejected`` (how many rows were refused) and
    ``rejected_rows`` (a ``pyarrow.Table`` of ``index``, ``raw``, ``error`` — the schema of
    ``.rejected`` files), and ``late``: how many accepted rows a query over the source dropped
    as late (or sent to ``LATE DATA TO``) — the most any one query did; ``late_by_query`` names
    each such query. Why: an accepted row that every window drops is not in any result, and
    an insert that only said "accepted" hid that."""

    rejected: int
    rejected_rows: pa.Table
    late: int
    late_by_query: dict[str, int]

    def __new__(cls, accepted: int, rejected_rows: pa.Table | None = None, *,
                late_by_query: dict[str, int] | None = None) -> InsertResult:
        self = super().__new__(cls, accepted)
        self.rejected_rows = _NO_REJECTED if rejected_rows is None else rejected_rows
        self.rejected = self.rejected_rows.num_rows
        self.late_by_query = dict(late_by_query or {})
        self.late = max(self.late_by_query.values(), default=0)
        return self

    @property
    def accepted(self) -> int:
        return int(self)

    def __repr__(self) -> str:
        return f"InsertResult(accepted={int(self)}, rejected={self.rejected}, late={self.late})"

    def __str__(self) -> str:  # an int where text is made of it: f"inserted {n} rows"
        return int.__repr__(self)

    __format__ = int.__format__


def check_on_error(on_error: str) -> None:
    if on_error not in ON_ERROR_CHOICES:
        raise ConfigError(f"on_error={on_error!r}: use 'raise' (refuse the whole insert), 'skip' or "
                          "'dead_letter' (refuse only the bad rows)", code="LDB-9003")


@dataclass
class Prepared:
    """The rows of one insert that fit (``batch``) and the ones that did not."""

    batch: pa.RecordBatch
    rows: int  # rows in the input (accepted + refused)
    positions: np.ndarray  # refused rows: their index in the input
    reasons: pa.Array  # … why
    codes: np.ndarray  # … LDB code (2001…2005)
    _raw: Any = None  # positions → the refused rows as text
    max_event: tuple[str, int] | None = None  # (time column, its largest ticks) when already known

    @property
    def rejected(self) -> int:
        return len(self.positions)

    def rejected_rows(self, index: np.ndarray | None = None) -> pa.RecordBatch:
        """The refused rows as ``REJECTED_SCHEMA`` (``index`` maps input rows to indexes)."""
        raw = self._raw(self.positions) if len(self.positions) else pa.array([], pa.string())
        idx = self.positions if index is None else np.asarray(index)[self.positions]
        return rejected_batch(idx, raw, self.reasons)


def prepare(data: Any, schema: pa.Schema, not_null: frozenset[str], *, source: str,
            rules: Any = None, max_ts: int = _NO_MAX, strict_text: bool = True) -> Prepared:
    """Convert ``data`` to ``schema``; see the module docstring. ``strict_text``: a VARCHAR
    column takes text only (Python data: 1.5 for a name is a mistake), not numbers as text
    (which text formats — JSON, CSV — mean)."""
    check = None if rules is None else (lambda values, refused: rules.check(values, refused, max_ts))
    time_col = None if rules is None else rules.column
    fast = _fast_path(data, schema, not_null)
    if fast is not None:
        def raw(positions: np.ndarray) -> pa.Array:  # only ever called for refused rows
            return _raw_text(data, lambda: fast)(positions)

        if check is None or not fast.num_rows:
            return _prepared(fast, fast.num_rows, raw)
        if isinstance(data, dict):
            low = high = data[time_col]
        elif isinstance(data, list):  # ≤ _FAST_ROWS plain ints (see _fast_path)
            low, high = min(r[time_col] for r in data), max(r[time_col] for r in data)
        else:
            ticks = numeric_view(fast.column(time_col))
            low, high = int(ticks.min()), int(ticks.max())
        if rules.surely_fine(low, high, max_ts):
            return _prepared(fast, fast.num_rows, raw, max_event=(time_col, high))
        bad, reasons, codes = check(fast.column(time_col), np.zeros(fast.num_rows, bool))
        if not bad.any():
            return _prepared(fast, fast.num_rows, raw)
        positions = np.flatnonzero(bad)
        return Prepared(fast.filter(pa.array(~bad)), fast.num_rows, positions, reasons.take(positions),
                        codes[positions], raw)
    table, bad_cells, bad_rows = _as_table(data, schema, source, strict_text)
    table = _match_columns(table, schema, not_null, source)
    if strict_text:
        _refuse_non_text(table, schema, bad_cells)
    strict = pa.schema([f.with_nullable(f.nullable and f.name not in not_null) for f in schema])
    c = conform(table, strict, bad_cells=bad_cells, bad_rows=bad_rows, time_col=time_col, check=check)
    batch = pa.RecordBatch.from_arrays([col.combine_chunks() for col in c.table.columns], schema=schema)
    raw = _raw_text(data, lambda: table)
    codes = c.codes if c.codes is not None else np.full(len(c.positions), CODE_CONVERSION, np.int16)
    return Prepared(batch, table.num_rows, c.positions, c.reasons, codes, raw)


_NO_POSITIONS = np.empty(0, np.int64)
_NO_CODES = np.empty(0, np.int16)
_NO_TEXT = pa.array([], pa.string())


def _prepared(batch: pa.RecordBatch, rows: int, raw: Any, max_event: tuple[str, int] | None = None) -> Prepared:
    """All rows fit (the shared empty arrays are never written to)."""
    return Prepared(batch, rows, _NO_POSITIONS, _NO_TEXT, _NO_CODES, raw, max_event)


def to_batch(data: Any, schema: pa.Schema, not_null: frozenset[str], *, source: str) -> pa.RecordBatch:
    """``data`` as one batch of ``schema``; any row that does not fit raises (see ``prepare``)."""
    p = prepare(data, schema, not_null, source=source)
    if p.rejected:
        raise_rejected(p.rejected_rows(), p.codes, source=source, rows=p.rows)
    return p.batch


_ERRORS = {CODE_SCHEMA: SchemaMismatchError, CODE_NULL: NullViolationError,
           CODE_CONVERSION: ConversionError, CODE_RANGE: ConversionError, CODE_FUTURE: DataError}


def raise_rejected(rejected: pa.RecordBatch, codes: np.ndarray, *, source: str, rows: int) -> None:
    """Raise the error of the first refused row (by index), naming it and what to do."""
    i = int(np.argmin(rejected.column("index").to_numpy()))
    index, error = rejected.column("index")[i].as_py(), rejected.column("error")[i].as_py()
    code = int(codes[i])
    n = rejected.num_rows
    others = f"{n} of {rows} {'row' if rows == 1 else 'rows'} refused"
    msg = (f"insert into {source!r}: row {index}: {error}; nothing of this insert was ingested "
           f"({others}; insert(…, on_error='skip') keeps the rows that fit)")
    raise _ERRORS.get(code, DataError)(msg, code=f"LDB-{code}")


# ----------------------------------------------------------------- the fast path


_MISSING = object()
_FAST_ROWS = 64  # small inserts (the latency path) skip the general conversion
_PLAIN = {"int": (int,), "float": (float, int), "str": (str,), "bool": (bool,)}


def _kind(t: pa.DataType) -> str | None:
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t):
        return "str"
    return None


_ROW_PLANS: dict[int, tuple[pa.Schema, list[tuple[str, tuple, bool]] | None, list[tuple[int, str]]]] = {}


def _row_plan(schema: pa.Schema) -> list[tuple[str, tuple, bool]] | None:
    """Per column: its name, the Python types taken as they are, whether bools are refused.
    None when a column type has no plain Python form (e.g. TIMESTAMP(6))."""
    return _schema_facts(schema)[0]


def _timestamps(schema: pa.Schema) -> list[tuple[int, str]]:
    """Index and name of every TIMESTAMP column."""
    return _schema_facts(schema)[1]


def _schema_facts(schema: pa.Schema) -> tuple[list[tuple[str, tuple, bool]] | None, list[tuple[int, str]]]:
    """``_row_plan`` and ``_timestamps``, cached by the schema object (a source keeps its own):
    hashing a schema, or walking its fields, costs more than a one-row insert's checks."""
    hit = _ROW_PLANS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1], hit[2]
    steps: list[tuple[str, tuple, bool]] = []
    plan: list[tuple[str, tuple, bool]] | None = steps
    for f in schema:
        kind = _kind(f.type)
        if kind is None:
            if not (pa.types.is_timestamp(f.type) and f.type.unit == "ms"):
                plan = None
                break
            steps.append((f.name, (int,), True))  # epoch milliseconds
        else:
            steps.append((f.name, _PLAIN[kind], kind != "bool"))
    stamps = [(i, f.name) for i, f in enumerate(schema) if pa.types.is_timestamp(f.type)]
    if len(_ROW_PLANS) < 1024:
        _ROW_PLANS[id(schema)] = (schema, plan, stamps)
    return plan, stamps


def _plain_values(rows: list[dict], schema: pa.Schema) -> bool:
    """Every value already has its column's Python type (Arrow's typed constructor would
    otherwise coerce silently, e.g. truncate 1.5 into a BIGINT)."""
    plan = _row_plan(schema)
    if plan is None:
        return False
    width = len(plan)
    for r in rows:
        if len(r) != width:
            return False
        for name, ok, no_bool in plan:
            v = r.get(name, _MISSING)
            if v is None:
                continue
            t = type(v)
            if t not in ok or (no_bool and t is bool):
                return False
    return True


def _same_columns(have: pa.Schema, want: pa.Schema) -> bool:
    """Same names and types in the same order (nullability and metadata aside)."""
    return have.names == want.names and all(a.type.equals(b.type) for a, b in zip(have, want, strict=True))


def _fast_path(data: Any, schema: pa.Schema, not_null: frozenset[str]) -> pa.RecordBatch | None:
    """Rows whose keys are exactly the schema's names and whose values need no conversion:
    one C++ call (the one-row latency path). Anything else takes the checked path."""
    if isinstance(data, dict):
        rows = [data]
    elif isinstance(data, list) and data and isinstance(data[0], dict):
        rows = data
    elif isinstance(data, pa.RecordBatch) and _same_columns(data.schema, schema):
        # the source's schema exactly (a batch built without NOT NULL flags or with metadata
        # only differs in those: the NOT NULL columns are checked for NULLs below)
        batch = data if data.schema.equals(schema) else pa.RecordBatch.from_arrays(data.columns, schema=schema)
        rows = None
    else:
        return None
    if rows is not None:  # (_plain_values: each row has exactly the schema's names)
        if len(rows) > _FAST_ROWS or not _plain_values(rows, schema):
            return None
        if any(r[name] is None for r in rows for name in not_null):
            return None  # the checked path names the offending row
        batch = one_row_batch(rows[0], schema) if len(rows) == 1 else None
        if batch is None:
            try:
                batch = pa.RecordBatch.from_pylist(rows, schema=schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, KeyError):
                return None
    else:
        for name in not_null:
            if batch.column(name).null_count:
                return None  # the checked path names the offending row
    for i, name in _timestamps(schema):
        if rows is not None:  # plain ints, epoch ms (_row_plan): checked without Arrow calls
            if any(v is not None and not DATE_RANGE_MS[0] <= v < DATE_RANGE_MS[1] for v in (r[name] for r in rows)):
                return None  # epoch µs/ns in a TIMESTAMP column: the checked path refuses the row
        elif undated(batch.column(i)) is not None:
            return None
    return batch


# ----------------------------------------------------------------- the checked path


def _as_table(data: Any, schema: pa.Schema, source: str,
              strict_text: bool = True) -> tuple[pa.Table, dict, tuple | None]:
    """``data`` as a table with Arrow-inferred column types, plus cells and rows already known
    to be bad (values of no single type; keys that are not columns)."""
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data]), {}, None
    if isinstance(data, pa.Table):
        return data, {}, None
    if isinstance(data, dict):
        if data and all(_is_column(v) for v in data.values()):
            return _columns_table(data, schema, source, strict_text)  # a dict of equal-length columns
        data = [data]
    if isinstance(data, list):
        return _rows_table(data, schema, source, strict_text)
    mod = type(data).__module__
    if mod.startswith("pandas"):
        try:
            return pa.Table.from_pandas(data, preserve_index=False), {}, None
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):  # object columns of mixed types
            return _columns_table({str(c): data[c].tolist() for c in data.columns}, schema, source, strict_text)
    if mod.startswith("polars"):
        return data.to_arrow(), {}, None
    raise SchemaMismatchError(
        f"insert into {source!r}: cannot insert a {type(data).__name__}; pass a dict, a list of dicts, "
        "a pyarrow RecordBatch or Table, or a pandas DataFrame"
    )


def _columns_table(data: dict, schema: pa.Schema, source: str,
                   strict_text: bool) -> tuple[pa.Table, dict, None]:
    lengths = {len(v) for v in data.values()}
    if len(lengths) > 1:
        raise SchemaMismatchError(
            f"insert into {source!r}: a dict of lists is read as columns, which must have equal "
            f"lengths (got {sorted(lengths)}); pass a list of row dicts instead")
    cols, bad_cells = {}, {}
    for name, v in data.items():
        target = _field_type(schema, name)
        if isinstance(v, pa.Array | pa.ChunkedArray):
            cols[name] = v
            continue
        cols[name], flagged = _column(list(v) if not isinstance(v, list) else v, target, strict_text)
        if flagged is not None:
            bad_cells[_field_name(schema, name) or name] = flagged
    return pa.table(cols), bad_cells, None


def _rows_table(data: list, schema: pa.Schema, source: str,
               strict_text: bool) -> tuple[pa.Table, dict, tuple | None]:
    if not all(isinstance(r, dict) for r in data):
        raise SchemaMismatchError(f"insert into {source!r}: rows must be dicts of column → value")
    if not data:
        return schema.empty_table(), {}, None
    names = list(dict.fromkeys(k for r in data for k in r))
    unknown = {n for n in names if _field_type(schema, n) is None}
    bad_rows = None
    if unknown:  # error path: which rows carry a key that is not a column
        has = np.fromiter((not unknown.isdisjoint(r) for r in data), bool, len(data))
        why: list[str | None] = [None] * len(data)
        for i in np.flatnonzero(has):
            keys = sorted(unknown.intersection(data[i]))
            why[i] = f"unknown column(s) {keys}; the source has {schema.names}"
        bad_rows = (has, pa.array(why, pa.string()), CODE_SCHEMA)
    cols, bad_cells = {}, {}
    for n in names:
        if n in unknown:
            continue
        target = _field_type(schema, n)
        cols[n], flagged = _column([r.get(n) for r in data], target, strict_text)
        if flagged is not None:
            bad_cells[_field_name(schema, n) or n] = flagged
    if not cols:
        return pa.table({"__rows": pa.nulls(len(data))}).drop(["__rows"]), bad_cells, bad_rows
    return pa.table(cols), bad_cells, bad_rows


def _column(values: list, target: pa.DataType | None,
            strict_text: bool) -> tuple[pa.Array, np.ndarray | None]:
    """Values → an Arrow array of their inferred type (converted after, checked), or — when
    they have no single type — text, with the values no text can stand for flagged."""
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return _mixed(values, strict_text and target is not None and pa.types.is_string(target))
    if pa.types.is_null(arr.type) and target is not None:
        arr = pa.nulls(len(values), target)
    return arr, None


def _mixed(values: list, text_only: bool) -> tuple[pa.Array, np.ndarray | None]:
    """Error path (a column whose values have no single type): each value as the text that
    stands for it (parsed by the text conversion, like a CSV file's); nested values flagged,
    and with ``text_only`` (a VARCHAR column, strict) every value that is not text."""
    texts: list[str | None] = []
    flagged = np.zeros(len(values), bool)
    for i, v in enumerate(values):
        if v is None or isinstance(v, str):
            texts.append(v)
            continue
        if text_only:
            flagged[i] = True
        if isinstance(v, bool):
            texts.append("true" if v else "false")
        elif isinstance(v, float):
            texts.append(str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v))
        elif isinstance(v, datetime | date):
            texts.append(v.isoformat())
        elif isinstance(v, int) or type(v).__module__ in ("numpy", "decimal"):
            texts.append(str(v))
        else:
            texts.append(json.dumps(v, default=str))
            flagged[i] = True
    return pa.array(texts, pa.string()), (flagged if flagged.any() else None)


def _is_column(v: Any) -> bool:
    if isinstance(v, list | tuple | pa.Array | pa.ChunkedArray):
        return True
    return type(v).__module__ == "numpy" and getattr(v, "ndim", 0) == 1


def _field_name(schema: pa.Schema, name: str) -> str | None:
    if name in schema.names:
        return name
    for f in schema:
        if f.name.lower() == name.lower():
            return f.name
    return None


def _field_type(schema: pa.Schema, name: str) -> pa.DataType | None:
    found = _field_name(schema, name)
    return None if found is None else schema.field(found).type


def _match_columns(table: pa.Table, schema: pa.Schema, not_null: frozenset[str], source: str) -> pa.Table:
    """Rename input columns to the schema's names; unknown ones and missing NOT NULL ones raise."""
    names, unknown = [], []
    for n in table.column_names:
        found = _field_name(schema, n)
        names.append(found or n)
        if found is None:
            unknown.append(n)
    if unknown:
        raise SchemaMismatchError(
            f"insert into {source!r}: unknown column(s) {sorted(unknown)}; the source has {schema.names}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        spellings = [c for c, n in zip(table.column_names, names, strict=True) if n == twice[0]]
        raise SchemaMismatchError(
            f"insert into {source!r}: {' and '.join(map(repr, spellings))} both name the column {twice[0]!r} "
            "(names match without regard to case); spell it one way in every row")
    missing = [f.name for f in schema if f.name in not_null and f.name not in names]
    if missing and table.num_rows:
        raise SchemaMismatchError(
            f"insert into {source!r}: column {missing[0]!r} is missing and declared NOT NULL")
    return table.rename_columns(names)


def _refuse_non_text(table: pa.Table, schema: pa.Schema, bad_cells: dict[str, np.ndarray]) -> None:
    """Flag the values of non-text columns bound for VARCHAR columns."""
    for f in schema:
        if not (pa.types.is_string(f.type) and f.name in table.column_names):
            continue
        t = table.schema.field(f.name).type
        t = t.value_type if pa.types.is_dictionary(t) else t
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t):
            continue
        valid = np.asarray(pc.is_valid(table.column(f.name)).to_numpy(), bool)
        bad_cells[f.name] = valid | bad_cells.get(f.name, np.zeros(len(valid), bool))


def _raw_text(data: Any, table_of: Any):
    """positions → the refused rows as text: the dicts as given (JSON), else the input's rows."""
    rows = [data] if isinstance(data, dict) and not all(_is_column(v) for v in data.values()) else data
    if isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows):
        def from_dicts(positions: np.ndarray) -> pa.Array:
            return pa.array([json.dumps(rows[int(i)], default=str) for i in positions], pa.string())
        return from_dicts

    def from_table(positions: np.ndarray) -> pa.Array:
        return json_lines(table_of().take(pa.array(positions)))
    return from_table


def combine_rejected(p: Prepared, *, index: np.ndarray | None = None,
                     earlier: pa.RecordBatch | None = None) -> tuple[pa.RecordBatch | None, np.ndarray]:
    """The refused rows of ``p`` (indexes mapped through ``index``) and ``earlier`` ones (records
    that did not parse: code 2003), sorted by index; with their codes. None when there are none."""
    parts, codes = [], []
    if earlier is not None and earlier.num_rows:
        parts.append(earlier)
        codes.append(np.full(earlier.num_rows, CODE_CONVERSION, np.int16))
    if p.rejected:
        parts.append(p.rejected_rows(index))
        codes.append(p.codes)
    if not parts:
        return None, np.empty(0, np.int16)
    if len(parts) == 1:
        return parts[0], codes[0]
    table = pa.Table.from_batches(parts, schema=REJECTED_SCHEMA)
    all_codes = np.concatenate(codes)
    order = np.argsort(table.column("index").to_numpy(), kind="stable")
    return table.take(pa.array(order)).combine_chunks().to_batches()[0], all_codes[order]


__all__ = ["InsertResult", "OnError", "Prepared", "prepare", "to_batch", "raise_rejected", "combine_rejected",
           "check_on_error"]
