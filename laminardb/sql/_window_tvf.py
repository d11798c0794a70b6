"""A window TVF read without aggregating: each input row with the bounds of its windows.

Entry points: ``expand_window_tvf(tvf, rel, scan) -> (node, RelationInfo)`` and
``window_spec(kind, sizes)`` (the window a TUMBLE / HOP / SESSION call names, shared with the
window aggregates of ``planner``).

Flink's ``SELECT * FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size))`` returns every row of
``t`` with ``window_start``, ``window_end`` and ``window_time`` (``window_end`` − 1 tick)
appended; HOP returns a row once per window it belongs to. It keeps no state, so rows come out
as they arrive: none is late, and a row whose time is NULL has no window and is dropped (as in
Flink). A tumble is one projection over the input; a hop is a UNION ALL of ⌈size / slide⌉
projections, the i-th giving each row its i-th latest window, all vectorized. The SELECT block
then reads that relation as it reads a subquery.

The bounds carry event time when the time column does: a row at or after watermark ``w`` lies
in no window that ended by ``w``, so the bounds' watermarks are those of a window operator's
output (``WindowEdge``), and a window aggregate or window join over them closes with them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from sqlglot import exp

from laminardb.sql._dialect import parse_select
from laminardb.sql.arrays import numeric_view
from laminardb.sql.exceptions import SqlTypeError, UnsupportedSqlError
from laminardb.sql.expressions import Expr, Scope
from laminardb.sql.intervals import interval_ms
from laminardb.sql.plan import QueryPlan, RelationInfo, Scan, UnionAll, WindowSpec
from laminardb.sql.types import ticks_per_ms, type_name
from laminardb.sql.watermarks import WindowEdge

BOUNDS = ("window_start", "window_end", "window_time")
# a hop is a UNION ALL of size/slide projections; past this many, windowing each row by
# itself costs more than the query is worth (60 s sliding every 100 ms would be 600 copies)
_MAX_HOP_COPIES = 64


def window_spec(kind: str, sizes: list[int]) -> WindowSpec:
    """The window of ``kind`` (TUMBLE, HOP, SESSION) from its interval arguments in ticks."""
    if any(s <= 0 for s in sizes[: 2 if kind == "HOP" else 1]):
        raise SqlTypeError(f"{kind.lower()}() sizes must be positive")
    if kind == "TUMBLE":
        if len(sizes) not in (1, 2):
            raise SqlTypeError("tumble(ts, size [, offset])")
        return WindowSpec("tumble", size=sizes[0], offset=sizes[1] if len(sizes) > 1 else 0)
    if kind == "HOP":
        if len(sizes) not in (2, 3):
            raise SqlTypeError("hop(ts, size, slide [, offset])")
        # the larger interval is the size: hop(ts, size, slide) as written by laminardb and LaminarDB's
        # README, HOP(ts, slide, size) as in Flink's legacy group window and LaminarDB's SQL reference
        return WindowSpec("hop", size=max(sizes[:2]), slide=min(sizes[:2]), offset=sizes[2] if len(sizes) > 2 else 0)
    if len(sizes) != 1:
        raise SqlTypeError("session(ts, gap)")
    return WindowSpec("session", gap=sizes[0])


def expand_window_tvf(tvf, rel, scan: Scan):
    """The TVF's rows over ``rel`` (read by ``scan``): a plan node and the relation it gives."""
    if tvf.kind == "CUMULATE":
        raise UnsupportedSqlError("CUMULATE windows are not supported yet; use HOP")
    if tvf.kind not in ("TUMBLE", "HOP"):
        raise UnsupportedSqlError(
            f"{tvf.kind} without GROUP BY is not supported: a {tvf.kind.lower()} window's bounds are known only "
            f"once it closes; GROUP BY window_start, window_end (and your keys) to aggregate its rows")
    idx = Scope(rel.schema).resolve(tvf.time_col, False)
    col = rel.schema.field(idx)
    if not (pa.types.is_timestamp(col.type) or col.type == pa.int64()):
        raise SqlTypeError(f"{tvf.kind}(…, DESCRIPTOR({col.name}), …): {col.name!r} is {type_name(col.type)}; a "
                           "window's time column is TIMESTAMP(3), TIMESTAMP(6) or BIGINT epoch milliseconds")
    tpm = ticks_per_ms(col.type)
    spec = window_spec(tvf.kind, [interval_ms(parse_select(f"SELECT {a}").expressions[0]) * tpm for a in tvf.args])
    clash = [f.name for f in rel.schema if f.name.lower() in BOUNDS]
    if clash:
        raise UnsupportedSqlError(f"{tvf.kind}(TABLE {rel.name}, …) adds {', '.join(BOUNDS)}, and {rel.name!r} "
                                  f"has {', '.join(clash)} already: rename it in a stream over {rel.name} first")
    step = spec.slide or spec.size
    copies = -(-spec.size // step)
    if copies > _MAX_HOP_COPIES:
        raise UnsupportedSqlError(
            f"HOP without GROUP BY puts each row in {copies} windows (size / slide); at most {_MAX_HOP_COPIES} are "
            "supported: use a larger slide, or GROUP BY window_start, window_end to aggregate the windows")
    in_map = rel.event_time().get(col.name)
    times = rel.event_time()
    if in_map is not None:
        for edge, name in zip(("start", "end", "time"), BOUNDS, strict=True):
            times[name] = in_map.then(WindowEdge(edge, size=spec.size, slide=step, offset=spec.offset))  # type: ignore[arg-type]
    time_col = rel.time_col if rel.time_col in times else next(iter(times), None)
    schema = pa.schema(list(rel.schema) + [pa.field(n, col.type) for n in BOUNDS])
    names = schema.names
    parts = []
    for i in range(copies):
        projections = [_column(j, f) for j, f in enumerate(rel.schema)] + [
            _bound(idx, col.type, spec, step, i, shift, f"{name}({col.name}{f', #{i}' if copies > 1 else ''})")
            for shift, name in zip((0, spec.size, spec.size - 1), BOUNDS, strict=True)]
        where = _where(idx, col, spec, step, i)
        part = QueryPlan(rel.name, rel.schema, where, None, projections, names, None, schema, "append",
                         rel.changelog, time_col, None, time_cols=dict(times))
        part.child = scan
        parts.append(part)
    node = parts[0] if copies == 1 else UnionAll(parts, schema, time_col, dict(times))
    return node, RelationInfo(rel.name, schema, time_col, rel.changelog, times, kind="subquery")


def _column(j: int, f: pa.Field) -> Expr:
    return Expr(lambda b: b.column(j), f.type, exp.column(f.name, quoted=True).sql())


def _starts(ticks: np.ndarray, spec: WindowSpec, step: int, copy: int) -> np.ndarray:
    """The start of each row's ``copy``-th latest window (0: the last one to start)."""
    return (ticks - spec.offset) // step * step + spec.offset - copy * step


def _bound(idx: int, t: pa.DataType, spec: WindowSpec, step: int, copy: int, shift: int, name: str) -> Expr:
    """One window bound (start + ``shift``) of each row, as the time column's type."""

    def fn(b: pa.RecordBatch) -> pa.Array:
        out = _starts(numeric_view(b.column(idx)), spec, step, copy) + shift
        return pa.array(out, pa.int64()).cast(t)

    return Expr(fn, t, name)


def _where(idx: int, col: pa.Field, spec: WindowSpec, step: int, copy: int) -> Expr | None:
    """Rows with a time, in their ``copy``-th latest window (when size is no multiple of slide,
    some rows are in one window fewer): None when that is every row."""
    covers = (copy + 1) * step <= spec.size
    if covers and not col.nullable:
        return None

    def fn(b: pa.RecordBatch) -> pa.Array:
        c = b.column(idx)
        ok = np.ones(len(c), np.bool_) if c.null_count == 0 else c.is_valid().to_numpy(zero_copy_only=False)
        if not covers:
            ticks = numeric_view(c)
            ok &= _starts(ticks, spec, step, copy) + spec.size > ticks
        return pa.array(ok)

    return Expr(fn, pa.bool_(), f"{col.name} IS NOT NULL AND {col.name} IN window {copy}")
