"""Turn whatever ``insert()`` receives into one RecordBatch of the source's schema.

Entry point: ``to_batch(data, schema, not_null)``. Accepts a dict (one row, or — when
every value is a list/array — a dict of columns), a list of dicts, a pyarrow RecordBatch
or Table, a pandas or polars DataFrame. Columns are matched by name
(case-insensitively when unambiguous), cast to the declared types, and checked for NULLs
in NOT NULL columns. A failure raises a ``DataError`` naming the column and the first bad
value, and nothing of that call is ingested.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from laminardb.errors import ConversionError, NullViolationError, SchemaMismatchError


def to_batch(data: Any, schema: pa.Schema, not_null: frozenset[str], *, source: str) -> pa.RecordBatch:
    fast = _fast_path(data, schema, not_null)
    if fast is not None:
        return fast
    table = _as_table(data, schema, source)
    cols = []
    names_lower = {n.lower(): n for n in table.column_names}
    for field in schema:
        name = field.name if field.name in table.column_names else names_lower.get(field.name.lower())
        if name is None:
            if field.name in not_null:
                raise SchemaMismatchError(
                    f"insert into {source!r}: column {field.name!r} is missing and declared NOT NULL"
                )
            cols.append(pa.nulls(table.num_rows, field.type))
            continue
        col = table.column(name)
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        cols.append(_convert(col, field, source))
    extra = set(n.lower() for n in table.column_names) - set(f.name.lower() for f in schema)
    if extra:
        raise SchemaMismatchError(
            f"insert into {source!r}: unknown column(s) {sorted(extra)}; the source has "
            f"{[f.name for f in schema]}"
        )
    for field, col in zip(schema, cols, strict=True):
        if field.name in not_null and col.null_count:
            row = pc.index(pc.is_null(col), True).as_py()
            raise NullViolationError(
                f"insert into {source!r}: column {field.name!r} is NOT NULL but row {row} is NULL"
            )
    return pa.RecordBatch.from_arrays(cols, schema=schema)


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


_ROW_PLANS: dict[pa.Schema, list[tuple[str, tuple, bool]] | None] = {}


def _row_plan(schema: pa.Schema) -> list[tuple[str, tuple, bool]] | None:
    """Per column: its name, the Python types taken as they are, whether bools are refused.
    None when a column type has no plain Python form (e.g. TIMESTAMP(6))."""
    if schema in _ROW_PLANS:
        return _ROW_PLANS[schema]
    plan: list[tuple[str, tuple, bool]] | None = []
    for f in schema:
        kind = _kind(f.type)
        if kind is None:
            if not (pa.types.is_timestamp(f.type) and f.type.unit == "ms"):
                plan = None
                break
            plan.append((f.name, (int,), True))  # epoch milliseconds
        else:
            plan.append((f.name, _PLAIN[kind], kind != "bool"))
    if len(_ROW_PLANS) < 1024:
        _ROW_PLANS[schema] = plan
    return plan


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


def _fast_path(data: Any, schema: pa.Schema, not_null: frozenset[str]) -> pa.RecordBatch | None:
    """Rows whose keys are exactly the schema's names and whose values need no conversion:
    one C++ call (the one-row latency path). Anything else takes the checked path."""
    if isinstance(data, dict):
        rows = [data]
    elif isinstance(data, list) and data and isinstance(data[0], dict):
        rows = data
    elif isinstance(data, pa.RecordBatch) and data.schema.equals(schema):
        batch = data
        rows = None
    else:
        return None
    if rows is not None:
        if len(rows[0]) != len(schema) or any(k not in rows[0] for k in schema.names):
            return None
        if len(rows) > _FAST_ROWS or not _plain_values(rows, schema):
            return None
        try:
            batch = pa.RecordBatch.from_pylist(rows, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, KeyError):
            return None
    for name in not_null:
        if batch.column(name).null_count:
            return None  # the checked path names the offending row
    return batch


def _as_table(data: Any, schema: pa.Schema, source: str) -> pa.Table:
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, dict):
        if data and all(_is_column(v) for v in data.values()):
            try:  # a dict of equal-length columns, as pandas/pyarrow users write it
                return pa.table({k: v if isinstance(v, pa.Array | pa.ChunkedArray) else pa.array(v)
                                 for k, v in data.items()})
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
                raise SchemaMismatchError(
                    f"insert into {source!r}: a dict of lists is read as columns, which must have "
                    f"equal lengths and one type each ({str(e).splitlines()[0]}); pass a list of row "
                    "dicts instead"
                ) from None
        data = [data]
    if isinstance(data, list):
        if not all(isinstance(r, dict) for r in data):
            raise SchemaMismatchError(f"insert into {source!r}: rows must be dicts of column → value")
        if not data:
            return schema.empty_table()
        names = list(dict.fromkeys(k for r in data for k in r))
        cols = {}
        for n in names:
            values = [r.get(n) for r in data]
            target = _field_type(schema, n)
            try:
                # infer, then cast checked in _convert (a typed constructor would truncate 1.5 → 1)
                cols[n] = pa.array(values)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
                cols[n] = _array_or_error(values, n, target, source)
            if pa.types.is_null(cols[n].type) and target is not None:
                cols[n] = pa.nulls(len(values), target)
        return pa.table(cols)
    mod = type(data).__module__
    if mod.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if mod.startswith("polars"):
        return data.to_arrow()
    raise SchemaMismatchError(
        f"insert into {source!r}: cannot insert a {type(data).__name__}; pass a dict, a list of dicts, "
        "a pyarrow RecordBatch or Table, or a pandas DataFrame"
    )


def _is_column(v: Any) -> bool:
    if isinstance(v, list | tuple | pa.Array | pa.ChunkedArray):
        return True
    return type(v).__module__ == "numpy" and getattr(v, "ndim", 0) == 1


def _field_type(schema: pa.Schema, name: str) -> pa.DataType | None:
    for f in schema:
        if f.name == name or f.name.lower() == name.lower():
            return f.type
    return None


def _array_or_error(values: list, name: str, target: pa.DataType | None, source: str) -> pa.Array:
    try:
        return pa.array(values)  # let the cast below convert (e.g. ISO strings → timestamps)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    for i, v in enumerate(values):
        try:
            pa.array([v], type=target)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            raise ConversionError(
                f"insert into {source!r}: row {i}, column {name!r}: cannot convert {v!r} to {target}"
            ) from None
    raise ConversionError(f"insert into {source!r}: column {name!r} has values of mixed types")


def _convert(col: pa.Array, field: pa.Field, source: str) -> pa.Array:
    if col.type == field.type:
        return col
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    try:
        if pa.types.is_timestamp(field.type) and pa.types.is_integer(col.type):
            ms = col.cast(pa.int64())  # integers are epoch milliseconds
            ticks = ms if field.type.unit == "ms" else pc.multiply(ms, 1000)
            return ticks.cast(field.type)
        if pa.types.is_timestamp(field.type) and pa.types.is_timestamp(col.type):
            if col.type.tz is not None:
                col = col.cast(pa.timestamp(col.type.unit))
            return col.cast(field.type, safe=False)
        if pa.types.is_string(field.type) and not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            raise ConversionError(
                f"insert into {source!r}: column {field.name!r} is VARCHAR but got {col.type} values"
            )
        return col.cast(field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise ConversionError(
            f"insert into {source!r}: column {field.name!r}: cannot convert {col.type} to "
            f"{field.type}: {str(e).splitlines()[0]}"
        ) from None

