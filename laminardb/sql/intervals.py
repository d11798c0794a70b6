"""INTERVAL literals → milliseconds (an INTERVAL against a BIGINT time column is in ms)."""

from __future__ import annotations

import re

from sqlglot import exp

from laminardb.sql.exceptions import SqlTypeError

_UNIT_MS = {
    "MILLISECOND": 1,
    "MS": 1,
    "SECOND": 1000,
    "S": 1000,
    "MINUTE": 60_000,
    "MIN": 60_000,
    "HOUR": 3_600_000,
    "H": 3_600_000,
    "DAY": 86_400_000,
    "D": 86_400_000,
    "WEEK": 7 * 86_400_000,
}


def unit_ms(unit: str) -> int:
    u = unit.upper()
    if u.endswith("S") and u[:-1] in _UNIT_MS:
        u = u[:-1]
    if u not in _UNIT_MS:
        raise SqlTypeError(f"unknown interval unit {unit!r}; use MILLISECOND, SECOND, MINUTE, HOUR or DAY")
    return _UNIT_MS[u]


def interval_ms(node: exp.Expression) -> int:
    """``INTERVAL '5' SECOND``, ``INTERVAL '1 minute'``, or a bare integer (already ms)."""
    if isinstance(node, exp.Paren):
        return interval_ms(node.this)
    if isinstance(node, exp.Literal) and not node.is_string:
        return int(float(node.this))
    if isinstance(node, exp.Interval):
        value = node.this.name if node.this is not None else ""
        unit = node.unit.name if node.unit is not None else ""
        if not unit:
            m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]+)\s*", value)
            if not m:
                raise SqlTypeError(f"cannot read interval {node.sql()!r}; write INTERVAL '5' SECOND")
            value, unit = m.group(1), m.group(2)
        try:
            amount = float(value)
        except ValueError:
            raise SqlTypeError(f"cannot read interval {node.sql()!r}; write INTERVAL '5' SECOND") from None
        ms = amount * unit_ms(unit)
        if ms != int(ms):
            raise SqlTypeError(f"interval {node.sql()!r} is not a whole number of milliseconds")
        return int(ms)
    raise SqlTypeError(f"expected an INTERVAL such as INTERVAL '1' SECOND, got {node.sql()!r}")
