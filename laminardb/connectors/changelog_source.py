"""What every changelog (CDC) source shares: the connector registry, the upstream → Arrow type
rules and the builder of ``__weight``-carrying batches.

A CDC source is a changelog keyed by its primary key: an insert is a row of weight +1, a delete
one of −1, an update −old then +new (``laminardb/sql/plan.py`` ``WEIGHT``), so aggregates, joins,
views and subscribers over it retract what changed. The SQL layer knows the kinds and their
options (``laminardb/sql/changelog_kinds.py``); this module builds their connectors.

Entry points: ``build_changelog_source(kind, node, options, restore_state)`` (the reactor's
dispatch for those kinds), ``column_family(dialect, type_name)`` / ``check_declared_type`` (the
type rules at start), ``text_columns_batch`` (text values → typed Arrow columns, column-wise
with ``pyarrow.compute``) and ``weighted_batch``.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laminardb._extras import require
from laminardb.connectors.exceptions import CdcDataError, CdcSchemaError
from laminardb.sql.changelog_kinds import CHANGELOG_KINDS, native_kind
from laminardb.sql.plan import WEIGHT
from laminardb.sql.types import type_name

__all__ = ["CONNECTOR_CLASSES", "build_changelog_source", "column_family", "check_declared_type",
           "text_columns_batch", "weighted_batch", "declared_schema"]

# kind → (module, class, the Python module it needs, the laminardb extra that installs it).
# The class is built as cls(name=, schema=, primary_key=, options=, restore_state=).
CONNECTOR_CLASSES: dict[str, tuple[str, str, str, str]] = {
    "postgres_cdc": ("laminardb.connectors.postgres_cdc", "PostgresCdcSource", "psycopg2", "postgres"),
    "mysql_cdc": ("laminardb.connectors.mysql_cdc", "MySqlCdcSource", "pymysqlreplication", "mysql"),
}


def declared_schema(node_schema: pa.Schema) -> pa.Schema:
    """The columns a CDC source declares (its node's schema without ``__weight``)."""
    idx = node_schema.get_field_index(WEIGHT)
    return node_schema.remove(idx) if idx >= 0 else node_schema


def build_changelog_source(kind: str, node: Any, options: dict[str, str], restore_state: dict | None = None):
    """The polled connector of a CDC source (``node`` is the reactor's ``Node``)."""
    native = native_kind(kind)
    assert native is not None and native in CONNECTOR_CLASSES  # the reactor asks is_changelog_kind first
    module, cls_name, needs, extra = CONNECTOR_CLASSES[native]
    require(needs, extra=extra, for_what=f"{CHANGELOG_KINDS[native].flink_name} source {node.name!r}")
    cls = getattr(importlib.import_module(module), cls_name)
    return cls(name=node.name, schema=declared_schema(node.schema), primary_key=tuple(node.primary_key),
               options=options, restore_state=restore_state)


# ---------------------------------------------------------------- types

# upstream type name (per dialect, lower case) → the family that decides the declared types it fits
_DIALECT_TYPES: dict[str, dict[str, str]] = {
    "postgres": {
        "int2": "smallint", "smallint": "smallint", "int4": "integer", "integer": "integer", "int": "integer",
        "int8": "bigint", "bigint": "bigint", "numeric": "numeric", "decimal": "numeric",
        "float4": "real", "real": "real", "float8": "double", "double precision": "double",
        "text": "text", "varchar": "text", "character varying": "text", "bpchar": "text", "character": "text",
        "bool": "boolean", "boolean": "boolean", "timestamp": "timestamp",
        "timestamp without time zone": "timestamp", "timestamptz": "timestamptz",
        "timestamp with time zone": "timestamptz", "date": "date", "json": "json", "jsonb": "json",
    },
    "mysql": {
        "tinyint": "tinyint", "smallint": "smallint", "mediumint": "integer", "int": "integer",
        "integer": "integer", "bigint": "bigint", "decimal": "numeric", "numeric": "numeric",
        "float": "real", "double": "double", "char": "text", "varchar": "text", "text": "text",
        "tinytext": "text", "mediumtext": "text", "longtext": "text", "enum": "text",
        "datetime": "timestamp", "timestamp": "timestamptz", "date": "date", "json": "json",
        "bool": "boolean", "boolean": "boolean",
    },
}
_TS = (pa.timestamp("ms"), pa.timestamp("us"))
# family → the declared Arrow types that hold every value of it (widening only, never narrowing);
# numeric is DOUBLE: the engine has no DECIMAL (sql/types.py)
FAMILY_FITS: dict[str, tuple[pa.DataType, ...]] = {
    "tinyint": (pa.int8(), pa.int16(), pa.int32(), pa.int64()),
    "smallint": (pa.int16(), pa.int32(), pa.int64()),
    "integer": (pa.int32(), pa.int64()),
    "bigint": (pa.int64(),),
    "numeric": (pa.float64(),),
    "real": (pa.float32(), pa.float64()),
    "double": (pa.float64(),),
    "text": (pa.string(),),
    "json": (pa.string(),),
    "boolean": (pa.bool_(),),
    "timestamp": _TS,
    "timestamptz": _TS,
    "date": (pa.date32(),),
}


def column_family(dialect: str, upstream_type: str) -> str | None:
    """The family of an upstream column type (None: a type CDC sources do not read)."""
    return _DIALECT_TYPES[dialect].get(upstream_type.lower().strip())


def check_declared_type(source: str, column: str, upstream_type: str, family: str | None,
                        declared: pa.DataType, *, error=CdcSchemaError) -> None:
    """Refuse a declared column whose upstream type is unsupported or does not fit it."""
    if family is None:
        supported = ", ".join(sorted({f for f in FAMILY_FITS}))
        raise error(f"source {source!r}: column {column!r} has upstream type {upstream_type!r}, which CDC "
                    f"sources do not read (supported: {supported}); leave the column out of the source")
    fits = FAMILY_FITS[family]
    if declared not in fits:
        names = " or ".join(type_name(t) for t in fits)
        raise error(f"source {source!r}: column {column!r} is {upstream_type} upstream but declared "
                    f"{type_name(declared)}; declare it {names}")


def _from_text(values: pa.Array, family: str, target: pa.DataType, *, source: str, column: str) -> pa.Array:
    """One column of server text (PostgreSQL's output format, session TimeZone UTC) → ``target``."""
    try:
        if family in ("text", "json"):
            return values
        if family == "boolean":  # 't' / 'f' from pgoutput, 'true' / 'false' from boolean::text
            return pc.if_else(values.is_null(), pa.scalar(None, pa.bool_()),
                              pc.is_in(values, pa.array(["t", "true"])))
        if family == "timestamptz":  # text with its offset → UTC instant → naive UTC (the engine's)
            utc = pc.cast(values, pa.timestamp("us", tz="UTC"))
            return pc.cast(pc.cast(utc, pa.timestamp("us")), target, safe=False)
        if family == "timestamp":
            return pc.cast(pc.cast(values, pa.timestamp("us")), target, safe=False)
        return pc.cast(values, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise CdcDataError(f"source {source!r}: a value of column {column!r} does not fit its declared type "
                           f"{type_name(target)} ({exc}); the source stopped rather than write a wrong value. "
                           "Fix or filter the upstream value (e.g. 'infinity' timestamps), then restart") from None


def weighted_batch(schema: pa.Schema, columns: Sequence[pa.Array], weights: pa.Array | np.ndarray) -> pa.RecordBatch:
    """A changelog batch: the declared columns plus ``__weight`` (int64, +1 / −1 per row)."""
    w = weights if isinstance(weights, pa.Array) else pa.array(np.asarray(weights, dtype=np.int64))
    return pa.RecordBatch.from_arrays([*columns, w], schema=schema.append(pa.field(WEIGHT, pa.int64())))


def text_columns_batch(schema: pa.Schema, families: Sequence[str], columns: Sequence[Sequence[str | None]],
                       weights: pa.Array | np.ndarray, *, source: str) -> pa.RecordBatch:
    """Rows decoded as text (one list per declared column) → a typed changelog batch, one
    ``pyarrow.compute`` cast per column (no per-value Python)."""
    arrays = [_from_text(pa.array(col, pa.string()), fam, f.type, source=source, column=f.name)
              for col, fam, f in zip(columns, families, schema, strict=True)]
    return weighted_batch(schema, arrays, weights)
