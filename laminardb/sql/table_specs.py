"""What a Flink ``datagen`` or ``filesystem`` table reads, as plain specs: checked here (at CREATE
TABLE, by ``flink_ddl.py``) and built into polled sources by ``connectors/`` (``flink_tables.py``).

Entry points: ``datagen_spec(name, schema, options) -> DatagenSpec`` (and
``check_datagen_options``, what CREATE TABLE keeps of them), ``file_table_spec(name, schema,
options) -> FileTableSpec`` and ``source_spec(kind, name, schema, options)`` (the spec of a
``datagen`` / ``filesystem`` source, None for another kind). The datagen options are the subset of
Flink's that ``connectors/datagen.py`` documents.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from laminardb.sql.exceptions import UnknownOptionError, UnsupportedSqlError
from laminardb.sql.options import lateness_ms

__all__ = ["DatagenField", "DatagenSpec", "FileTableSpec", "check_datagen_options", "datagen_spec",
           "file_table_spec", "source_spec"]

_FIELD_KEYS = ("kind", "min", "max", "length", "start", "end", "max-past", "null-rate")


@dataclass(frozen=True)
class DatagenField:
    """How one column is generated: ``kind`` random (``lo`` … ``hi``, ``length``, ``max_past_ms``,
    ``null_rate``) or sequence (``lo`` … ``hi``)."""

    name: str
    type: pa.DataType
    kind: str  # "random" | "sequence"
    lo: float = 0
    hi: float = 0
    length: int = 100
    max_past_ms: int = 0
    null_rate: float = 0.0


@dataclass(frozen=True)
class DatagenSpec:
    """A datagen table: its columns' generators, the pace and the number of rows (None: unbounded)."""

    name: str
    schema: pa.Schema
    fields: tuple[DatagenField, ...]
    rows_per_second: float
    total: int | None


def _number(name: str, key: str, value: str, integer: bool) -> float | int:
    try:
        return int(value) if integer else float(value)
    except ValueError:
        raise UnknownOptionError(f"table {name!r}: {key} = {value!r} is not a number") from None


def check_datagen_options(name: str, schema: pa.Schema, opts: dict[str, str]) -> dict[str, str]:
    """Check a datagen table's WITH options (raises on an unknown key or value); returns them."""
    datagen_spec(name, schema, opts)
    return {k: v for k, v in opts.items() if k != "connector"}


def datagen_spec(name: str, schema: pa.Schema, opts: dict[str, str]) -> DatagenSpec:
    """The datagen table ``name`` of ``schema`` that ``opts`` describe (raises on an unknown key or value)."""
    cols = {f.name.lower(): f for f in schema}
    per: dict[str, dict[str, str]] = {}
    rps, total = 10_000.0, None
    for key, value in opts.items():
        if key == "connector":
            continue
        if key == "rows-per-second":
            rps = float(_number(name, key, value, False))
            if rps <= 0:
                raise UnknownOptionError(f"table {name!r}: 'rows-per-second' must be positive")
        elif key == "number-of-rows":
            total = int(_number(name, key, value, True))
        elif key.startswith("fields."):
            col, _, prop = key[len("fields."):].rpartition(".")
            if col.lower() not in cols or prop not in _FIELD_KEYS:
                what = f"no column {col!r}" if col.lower() not in cols else f"no field option {prop!r}"
                raise UnknownOptionError(f"table {name!r}: {key!r}: {what}; datagen takes fields.<column>."
                                         f"{{{', '.join(_FIELD_KEYS)}}}")
            per.setdefault(cols[col.lower()].name, {})[prop] = value
        else:
            raise UnknownOptionError(f"unknown option {key!r} for datagen table {name!r}; known options: "
                                     f"rows-per-second, number-of-rows, fields.<column>.{{{', '.join(_FIELD_KEYS)}}}")
    fields = []
    for f in schema:
        o = per.get(f.name, {})
        kind = o.get("kind", "random").lower()
        t = f.type
        integer = pa.types.is_integer(t)
        if kind == "sequence":
            if not (integer or pa.types.is_string(t)):
                raise UnsupportedSqlError(f"table {name!r}: a sequence field is an integer or VARCHAR; "
                                          f"{f.name!r} is {t}")
            if "start" not in o or "end" not in o:
                raise UnknownOptionError(f"table {name!r}: sequence field {f.name!r} needs "
                                         f"'fields.{f.name}.start' and 'fields.{f.name}.end'")
            lo, hi = _number(name, "start", o["start"], True), _number(name, "end", o["end"], True)
            if hi < lo:
                raise UnknownOptionError(f"table {name!r}: fields.{f.name}: end < start")
            fields.append(DatagenField(f.name, t, kind, lo, hi))
            rows = int(hi) - int(lo) + 1
            total = rows if total is None else min(total, rows)
            continue
        if kind != "random":
            raise UnknownOptionError(f"table {name!r}: fields.{f.name}.kind = {kind!r}; use 'random' or 'sequence'")
        if not (integer or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_string(t)
                or pa.types.is_timestamp(t)):
            raise UnsupportedSqlError(f"table {name!r}: datagen cannot generate {f.name!r} of type {t}")
        if integer:
            info = np.iinfo(t.to_pandas_dtype())
            lo, hi = int(o.get("min", info.min)), int(o.get("max", info.max))
        else:
            lo = float(_number(name, "min", o["min"], False)) if "min" in o else 0.0
            hi = float(_number(name, "max", o["max"], False)) if "max" in o else float(np.finfo(np.float64).max)
        if lo > hi:
            raise UnknownOptionError(f"table {name!r}: fields.{f.name}: min > max")
        rate = float(_number(name, "null-rate", o.get("null-rate", "0"), False))
        if not 0.0 <= rate <= 1.0:
            raise UnknownOptionError(f"table {name!r}: fields.{f.name}.null-rate must be within 0 … 1")
        past = lateness_ms(o["max-past"], f"table {name!r}: fields.{f.name}.max-past") if "max-past" in o else 0
        fields.append(DatagenField(f.name, t, kind, lo, hi, int(o.get("length", 100)), past, rate))
    return DatagenSpec(name, schema, tuple(fields), rps, total)


@dataclass(frozen=True)
class FileTableSpec:
    """A filesystem table read as a source: ``path`` (a file or a directory of files) and its
    ``format`` (csv, jsonl or parquet; None: from the file name)."""

    name: str
    schema: pa.Schema
    path: str
    format: str | None = None


def file_table_spec(name: str, schema: pa.Schema, opts: dict[str, str]) -> FileTableSpec:
    """The filesystem source of ``opts`` (``path`` and ``format``, as ``flink_ddl`` wrote them)."""
    return FileTableSpec(name, schema, opts["path"], opts.get("format"))


def source_spec(kind: str, name: str, schema: pa.Schema, opts: dict[str, str]) -> DatagenSpec | FileTableSpec | None:
    """The spec of a ``datagen`` or ``filesystem`` source; None for another connector kind."""
    if kind == "datagen":
        return datagen_spec(name, schema, opts)
    if kind == "filesystem":
        return file_table_spec(name, schema, opts)
    return None
