"""The MySQL/MariaDB side of a CDC source's columns: what ``information_schema`` says about the
table, which binlog column types each upstream type is logged as, and values → Arrow.

Entry points: :func:`table_columns` (the table's columns, in ordinal order), :func:`plan_columns`
(declared columns → :class:`ColumnPlan` s, refusing missing, unsupported or ill-fitting ones),
:func:`table_map_matches` (does a binlog TableMap event still describe those columns) and
:func:`column_array` (one column's Python values → its declared Arrow type, column-wise).

Why a plan by ordinal: without ``binlog_row_metadata = FULL`` (MariaDB's default is NO_LOG) the
binlog carries column *types* but no names and no signedness, so rows are read by position and
unsigned integers are corrected here (the reader decodes them as signed).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from laminardb.connectors.changelog_source import check_declared_type, column_family
from laminardb.connectors.exceptions import CdcDataError, CdcSchemaError
from laminardb.sql.types import type_name

__all__ = ["ColumnPlan", "UpstreamColumn", "column_array", "plan_columns", "table_columns",
           "table_map_matches"]

# binlog column type codes (pymysqlreplication.constants.FIELD_TYPE) each upstream type is
# logged as; a TableMap whose code differs for a declared column means the column was retyped
_BINLOG_CODES: dict[str, tuple[int, ...]] = {
    "tinyint": (1,), "smallint": (2,), "mediumint": (9,), "int": (3,), "integer": (3,),
    "bigint": (8,), "decimal": (246,), "numeric": (246,), "float": (4,), "double": (5,),
    "char": (254,), "varchar": (15,), "tinytext": (252,), "text": (252,), "mediumtext": (252,),
    "longtext": (252,), "datetime": (18, 12), "timestamp": (17, 7), "date": (10, 14),
    "json": (245, 252),
}
_UNSIGNED_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}
# text the binlog reader decodes as UTF-8 (it does not know other character sets without
# binlog_row_metadata = FULL): other character sets would arrive as wrong text, so they are refused
_UTF8_CHARSETS = ("utf8", "utf8mb3", "utf8mb4", "ascii", None)


@dataclass(frozen=True)
class UpstreamColumn:
    """One row of ``information_schema.COLUMNS``."""

    name: str
    ordinal: int  # 0-based
    data_type: str  # DATA_TYPE, lower case: 'int', 'varchar', …
    column_type: str  # COLUMN_TYPE: 'int(10) unsigned', 'tinyint(1)', …
    charset: str | None


@dataclass(frozen=True)
class ColumnPlan:
    """How one declared column is read: its upstream position and the rule for its values."""

    name: str
    ordinal: int
    family: str  # changelog_source's family: 'integer', 'text', 'timestamptz', …
    upstream: str  # COLUMN_TYPE, for messages
    unsigned_bits: int  # 0 unless an unsigned integer (values the binlog gives as signed)
    declared: pa.DataType


def table_columns(conn: Any, database: str, table: str) -> list[UpstreamColumn]:
    """The table's columns in ordinal order (empty: no such table)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, ORDINAL_POSITION, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION", (database, table))
        rows = cur.fetchall()
    return [UpstreamColumn(str(n), int(p) - 1, str(d).lower(), str(t).lower(), cs)
            for n, p, d, t, cs in rows]


def _family(col: UpstreamColumn, declared: pa.DataType) -> str | None:
    if col.data_type == "enum":  # the binlog logs an ENUM's index, not its text
        return None
    if col.data_type == "tinyint" and col.column_type.startswith("tinyint(1)") and declared == pa.bool_():
        return "boolean"
    if col.data_type not in _BINLOG_CODES:
        return None
    return column_family("mysql", col.data_type)


def plan_columns(source: str, schema: pa.Schema, upstream: Sequence[UpstreamColumn],
                 where: str, *, charsets_logged: bool = False) -> list[ColumnPlan]:
    """The plan of every declared column, or :class:`CdcSchemaError` naming the first that is
    missing upstream, of an unsupported type or declared a type its values do not fit.
    ``charsets_logged``: the binlog names each column's character set (binlog_row_metadata =
    FULL), so text of any character set decodes right."""
    by_name = {c.name.lower(): c for c in upstream}
    plans = []
    for field in schema:
        col = by_name.get(field.name.lower())
        if col is None:
            msg = (f"source {source!r}: declared column {field.name!r} is not a column of {where} "
                   f"(it has {', '.join(c.name for c in upstream)}); it was dropped or renamed "
                   "upstream: recreate the source with the table's columns")
            raise CdcSchemaError(msg)
        family = _family(col, field.type)
        check_declared_type(source, field.name, col.column_type, family, field.type)
        if family in ("text", "json") and col.charset not in _UTF8_CHARSETS and not charsets_logged:
            msg = (f"source {source!r}: column {field.name!r} has character set {col.charset!r}, and "
                   "without binlog_row_metadata = FULL the binlog does not say so: SET GLOBAL "
                   "binlog_row_metadata = 'FULL', or convert the column (ALTER TABLE … CONVERT TO "
                   "CHARACTER SET utf8mb4), or leave it out")
            raise CdcSchemaError(msg)
        bits = _UNSIGNED_BITS.get(col.data_type, 0) if "unsigned" in col.column_type else 0
        plans.append(ColumnPlan(field.name, col.ordinal, family or "", col.column_type, bits, field.type))
    return plans


def table_map_matches(plans: Sequence[ColumnPlan], upstream: Sequence[UpstreamColumn],
                      codes: Sequence[int]) -> bool:
    """True when a TableMap's column type codes agree with ``upstream`` (same column count) and
    with the type each declared column had when it was planned."""
    if len(codes) != len(upstream):
        return False
    for p in plans:
        if p.ordinal >= len(codes) or codes[p.ordinal] not in _BINLOG_CODES[upstream[p.ordinal].data_type]:
            return False
    return True


def column_array(plan: ColumnPlan, values: Sequence[Any], *, source: str) -> pa.Array:
    """One declared column's values (PyMySQL's or the binlog reader's Python objects) as its
    declared Arrow type; :class:`CdcDataError` for a value it cannot hold (never a wrong value)."""
    try:
        return _convert(plan, values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError,
            TypeError, ValueError) as exc:
        msg = (f"source {source!r}: a value of column {plan.name!r} ({plan.upstream} upstream) does "
               f"not fit its declared type {type_name(plan.declared)} ({exc}); the source stopped "
               "rather than write a wrong value: fix the upstream value, then restart")
        raise CdcDataError(msg) from None


def _convert(plan: ColumnPlan, values: Sequence[Any]) -> pa.Array:
    fam, target = plan.family, plan.declared
    if fam in ("tinyint", "smallint", "integer", "bigint", "boolean"):
        arr = pa.array(values, pa.int64())
        if plan.unsigned_bits and plan.unsigned_bits < 64:  # signed as logged → unsigned
            arr = pc.if_else(pc.less(arr, 0), pc.add(arr, 1 << plan.unsigned_bits), arr)
        elif plan.unsigned_bits == 64 and pc.any(pc.less(arr, 0)).as_py():
            raise OverflowError("BIGINT UNSIGNED value above 9223372036854775807")
        return pc.not_equal(arr, 0) if fam == "boolean" else pc.cast(arr, target)
    if fam == "numeric":  # Decimal → DOUBLE (the engine has no DECIMAL)
        return pc.cast(pa.array(values), target)
    if fam in ("real", "double"):
        return pc.cast(pa.array(values, pa.float64()), target)
    if fam in ("text", "json"):
        return pa.array([_text(v) for v in values] if fam == "json" else values, pa.string())
    if fam in ("timestamp", "timestamptz"):  # naive; TIMESTAMP read as UTC (see mysql_cdc)
        return pc.cast(pa.array(values, pa.timestamp("us")), target, safe=False)
    if fam == "date":
        return pa.array(values, pa.date32())
    raise TypeError(f"no rule for {fam!r}")


def _text(value: Any) -> Any:
    """A JSON value: MariaDB's is text already; MySQL's binary JSON arrives decoded."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode()
    return json.dumps(value, default=lambda b: b.decode() if isinstance(b, bytes) else str(b))
