"""SQL type names ↔ Arrow types, and event-time units."""

from __future__ import annotations

import re

import pyarrow as pa

from laminardb.sql.exceptions import SqlTypeError, UnsupportedSqlError

_SIMPLE: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(),
    "BOOL": pa.bool_(),
    "INT": pa.int32(),
    "INTEGER": pa.int32(),
    "SMALLINT": pa.int16(),
    "TINYINT": pa.int8(),
    "BIGINT": pa.int64(),
    "FLOAT": pa.float32(),
    "REAL": pa.float32(),
    "DOUBLE": pa.float64(),
    "DOUBLE PRECISION": pa.float64(),
    "VARCHAR": pa.string(),
    "STRING": pa.string(),
    "TEXT": pa.string(),
    "TIMESTAMP": pa.timestamp("ms"),
    "DATE": pa.date32(),
}
_TICKS_PER_MS = {"ms": 1, "us": 1000, "ns": 1_000_000, "s": 0}


def parse_type(text: str) -> pa.DataType:
    """``TIMESTAMP(6)``, ``VARCHAR(20)``, ``BIGINT`` … → Arrow type."""
    t = re.sub(r"\s+", " ", text.strip().upper())
    m = re.fullmatch(r"TIMESTAMP\s*\(\s*(\d)\s*\)", t)
    if m:
        precision = int(m.group(1))
        if precision == 3:
            return pa.timestamp("ms")
        if precision == 6:
            return pa.timestamp("us")
        raise UnsupportedSqlError(f"TIMESTAMP({precision}) is not supported: use TIMESTAMP(3) or TIMESTAMP(6)")
    t = re.sub(r"^(VARCHAR|CHAR|STRING)\s*\(\s*\d+\s*\)$", "VARCHAR", t)
    if t == "CHAR":
        t = "VARCHAR"
    if t not in _SIMPLE:
        raise UnsupportedSqlError(
            f"type {text!r} is not supported; use one of BOOLEAN, INT, BIGINT, FLOAT, DOUBLE, "
            "VARCHAR, TIMESTAMP(3), TIMESTAMP(6), DATE"
        )
    return _SIMPLE[t]


def type_name(t: pa.DataType) -> str:
    """Arrow type → the SQL name shown by DESCRIBE."""
    for name, at in (
        ("BOOLEAN", pa.bool_()), ("TINYINT", pa.int8()), ("SMALLINT", pa.int16()), ("INT", pa.int32()),
        ("BIGINT", pa.int64()), ("FLOAT", pa.float32()), ("DOUBLE", pa.float64()),
        ("VARCHAR", pa.string()), ("TIMESTAMP(3)", pa.timestamp("ms")),
        ("TIMESTAMP(6)", pa.timestamp("us")), ("DATE", pa.date32()),
    ):
        if t == at:
            return name
    return str(t).upper()


def ticks_per_ms(t: pa.DataType) -> int:
    """Event-time ticks per millisecond: BIGINT epoch-ms and TIMESTAMP(3) are 1, TIMESTAMP(6) 1000."""
    if pa.types.is_integer(t):
        return 1
    if pa.types.is_timestamp(t):
        tick = _TICKS_PER_MS.get(t.unit, 0)
        if tick:
            return tick
    raise SqlTypeError(
        f"an event-time column must be TIMESTAMP(3), TIMESTAMP(6) or BIGINT epoch milliseconds, not {type_name(t)}"
    )
