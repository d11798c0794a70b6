"""The snapshot of a MySQL CDC source, delivered in chunks that a checkpoint may fall between.

Entry points: :class:`SnapshotReader` (one consistent snapshot read in primary-key order with a
server-side cursor, a chunk per poll) and :class:`SegmentFilter` (which binlog rows apply after
a restart in the middle of a snapshot).

Why segments: a checkpoint taken after some chunks holds "keys ≤ K were read at position X".
A restart cannot reopen that snapshot, so it takes a new one at Y and reads keys > K there.
Each key range is then correct as of its own position, and the binlog, read from the earliest
of them, applies a change to a row only if the change came after the position of the range
the row's key falls in (each image of an update on its own: a key can move between ranges).
Keys are compared in Python, which orders integers as MySQL does; a primary key with other
columns (strings sort by collation) is read as one chunk, so no checkpoint falls inside it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from laminardb.connectors._mysql_binlog import Position
from laminardb.connectors._mysql_columns import ColumnPlan, column_array

__all__ = ["Segment", "SegmentFilter", "SnapshotReader", "after", "chunkable"]

_FETCH_ROWS = 10_000  # rows per server-side cursor fetch (one column-wise conversion each)
_INTEGER_FAMILIES = ("tinyint", "smallint", "integer", "bigint")


@dataclass(frozen=True)
class Segment:
    """Keys in (the previous segment's ``upto``, ``upto``] were snapshotted at ``at``
    (``upto`` None: no upper bound)."""

    upto: tuple | None
    at: Position

    def state(self) -> dict[str, Any]:
        return {"upto": None if self.upto is None else list(self.upto), "gtid": self.at.gtid,
                "file": self.at.file, "pos": self.at.pos}

    @staticmethod
    def restore(d: dict[str, Any]) -> Segment:
        upto = d.get("upto")
        return Segment(None if upto is None else tuple(upto), Position(d.get("gtid"), d.get("file"), d.get("pos")))


def after(end: Position, at: Position) -> bool:
    """True when the transaction ending at ``end`` committed after binlog position ``at``."""
    return (end.file or "", end.pos or 0) > (at.file or "", at.pos or 0)


def chunkable(plans: Sequence[ColumnPlan], key_idx: Sequence[int]) -> bool:
    """Can the snapshot be split at key boundaries (an all-integer primary key)?"""
    return all(plans[i].family in _INTEGER_FAMILIES for i in key_idx)


def key_of(row: Sequence[Any], plans: Sequence[ColumnPlan], key_idx: Sequence[int]) -> tuple:
    """A row's primary key as MySQL orders it (unsigned values the binlog gave as signed fixed)."""
    out = []
    for i in key_idx:
        v, bits = row[i], plans[i].unsigned_bits
        out.append(v + (1 << bits) if bits and v is not None and v < 0 else v)
    return tuple(out)


class SegmentFilter:
    """Which binlog row images apply after a snapshot made of several segments."""

    def __init__(self, segments: Sequence[Segment], plans: Sequence[ColumnPlan], key_idx: Sequence[int]) -> None:
        self.segments = list(segments)
        self._bounds = [s.upto for s in self.segments[:-1]]  # the last one has no upper bound
        self._plans, self._key_idx = plans, key_idx
        self.last = max((s.at for s in self.segments), key=lambda p: (p.file or "", p.pos or 0))

    def keep(self, rows: Sequence[tuple], end: Position) -> list[bool]:
        """Per row image of a transaction ending at ``end``: does it apply?"""
        out = []
        for row in rows:
            seg = self.segments[bisect.bisect_left(self._bounds, key_of(row, self._plans, self._key_idx))]
            out.append(after(end, seg.at))
        return out


class SnapshotReader:
    """One consistent snapshot, read in primary-key order from ``after_key`` on, ``chunk_rows``
    rows per :meth:`next_chunk` (None: the whole table at once). ``begin(cursor)`` starts the
    snapshot transaction and returns its binlog position."""

    def __init__(self, conn: Any, *, source: str, table: str, plans: Sequence[ColumnPlan],
                 key_cols: Sequence[str], key_idx: Sequence[int], after_key: tuple | None,
                 chunk_rows: int | None, begin: Callable[[Any], Position]) -> None:
        import pymysql

        self._conn, self._source, self._plans = conn, source, plans
        self._key_idx, self._chunk = key_idx, chunk_rows
        self.last_key = after_key
        self.done = False
        self.rows = 0  # delivered so far
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")  # TIMESTAMP values as UTC
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            self.position = begin(cur)
        cols = ", ".join(f"`{p.name}`" for p in plans)
        keys = ", ".join(f"`{k}`" for k in key_cols)
        where, args = "", None
        if after_key is not None:
            where, args = f"WHERE ({keys}) > ({', '.join(['%s'] * len(after_key))})", tuple(after_key)
        self._cur = conn.cursor(pymysql.cursors.SSCursor)
        self._cur.execute(f"SELECT {cols} FROM {table} {where} ORDER BY {keys}", args)

    def next_chunk(self) -> tuple[list[pa.Array], int]:
        """The next rows as one array per declared column, and their count (0: done)."""
        want = self._chunk
        parts: list[list[pa.Array]] = []
        n = 0
        while want is None or n < want:
            rows = self._cur.fetchmany(_FETCH_ROWS if want is None else min(_FETCH_ROWS, want - n))
            if not rows:
                self.done = True
                break
            values = list(zip(*rows, strict=True))
            parts.append([column_array(p, v, source=self._source) for p, v in zip(self._plans, values, strict=True)])
            n += len(rows)
            self.last_key = key_of(rows[-1], self._plans, self._key_idx)
        self.rows += n
        if not n:
            return [], 0
        return [pa.concat_arrays([c[i] for c in parts]) for i in range(len(self._plans))], n

    def close(self) -> None:
        try:
            self._cur.close()
            self._conn.commit()
        finally:
            self._conn.close()
