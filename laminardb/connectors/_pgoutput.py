"""A decoder of PostgreSQL's ``pgoutput`` logical replication messages (protocol version 1).

Why our own: psycopg2 hands over the raw bytes of each message; the format is small and
documented (https://www.postgresql.org/docs/15/protocol-logicalrep-message-formats.html).
Values arrive in PostgreSQL's text output format; they stay text here and are converted
column-wise into Arrow later (``changelog_source.text_columns_batch``).

Entry point: ``decode(payload) -> message`` (one of the dataclasses below, or None for a
message a change stream does not need: Type, Origin, logical decoding messages).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["Begin", "Commit", "Relation", "RelationColumn", "Insert", "Update", "Delete", "Truncate",
           "UNCHANGED_TOAST", "decode", "format_lsn", "parse_lsn"]

UNCHANGED_TOAST = object()  # a 'u' value: a TOASTed column the change did not touch


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int  # the LSN just after the commit record: a restart from it skips this transaction


@dataclass(frozen=True)
class RelationColumn:
    name: str
    type_oid: int
    is_key: bool


@dataclass(frozen=True)
class Relation:
    relid: int
    namespace: str
    name: str
    replica_identity: str  # 'd' default, 'n' nothing, 'f' full, 'i' index
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True)
class Insert:
    relid: int
    new: tuple


@dataclass(frozen=True)
class Update:
    relid: int
    old: tuple | None  # None: no old image (replica identity not FULL, key unchanged)
    old_is_key_only: bool
    new: tuple


@dataclass(frozen=True)
class Delete:
    relid: int
    old: tuple
    old_is_key_only: bool


@dataclass(frozen=True)
class Truncate:
    relids: tuple[int, ...]


def parse_lsn(text: str) -> int:
    """``'16/B374D848'`` → the 64-bit LSN."""
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_BEGIN = struct.Struct(">QqI")
_COMMIT = struct.Struct(">bQQq")
_COLUMN = struct.Struct(">Ii")


def _cstring(buf: bytes, pos: int) -> tuple[str, int]:
    end = buf.index(0, pos)
    return buf[pos:end].decode(), end + 1


def _tuple(buf: bytes, pos: int) -> tuple[tuple, int]:
    """TupleData: each column 'n' (NULL), 'u' (unchanged TOAST) or 't' + length + text."""
    (n,) = _U16.unpack_from(buf, pos)
    pos += 2
    values: list = []
    append = values.append
    for _ in range(n):
        kind = buf[pos]
        pos += 1
        if kind == 0x74:  # 't'
            (size,) = _U32.unpack_from(buf, pos)
            pos += 4
            append(buf[pos : pos + size].decode())
            pos += size
        elif kind == 0x6E:  # 'n'
            append(None)
        elif kind == 0x75:  # 'u'
            append(UNCHANGED_TOAST)
        else:  # 'b' (binary) is only sent when asked for
            raise ValueError(f"pgoutput: unexpected tuple value kind {chr(kind)!r}")
    return tuple(values), pos


def decode(buf: bytes):
    """One pgoutput message → its dataclass (None: not needed by a change stream)."""
    tag = buf[0]
    if tag == 0x42:  # 'B'
        final_lsn, _ts, xid = _BEGIN.unpack_from(buf, 1)
        return Begin(final_lsn, xid)
    if tag == 0x43:  # 'C'
        _flags, commit_lsn, end_lsn, _ts = _COMMIT.unpack_from(buf, 1)
        return Commit(commit_lsn, end_lsn)
    if tag == 0x49:  # 'I'
        (relid,) = _U32.unpack_from(buf, 1)
        new, _ = _tuple(buf, 6)  # after relid: 'N'
        return Insert(relid, new)
    if tag == 0x55:  # 'U'
        (relid,) = _U32.unpack_from(buf, 1)
        pos, old, key_only = 5, None, False
        if buf[pos] in (0x4B, 0x4F):  # 'K' (key columns) / 'O' (old tuple)
            key_only = buf[pos] == 0x4B
            old, pos = _tuple(buf, pos + 1)
        new, _ = _tuple(buf, pos + 1)  # 'N'
        return Update(relid, old, key_only, new)
    if tag == 0x44:  # 'D'
        (relid,) = _U32.unpack_from(buf, 1)
        key_only = buf[5] == 0x4B
        old, _ = _tuple(buf, 6)
        return Delete(relid, old, key_only)
    if tag == 0x52:  # 'R'
        (relid,) = _U32.unpack_from(buf, 1)
        namespace, pos = _cstring(buf, 5)
        name, pos = _cstring(buf, pos)
        ident = chr(buf[pos])
        (ncols,) = _U16.unpack_from(buf, pos + 1)
        pos += 3
        cols = []
        for _ in range(ncols):
            flags = buf[pos]
            col, pos = _cstring(buf, pos + 1)
            type_oid, _typmod = _COLUMN.unpack_from(buf, pos)
            pos += 8
            cols.append(RelationColumn(col, type_oid, bool(flags & 1)))
        return Relation(relid, namespace, name, ident, tuple(cols))
    if tag == 0x54:  # 'T'
        (n,) = _U32.unpack_from(buf, 1)
        return Truncate(tuple(struct.unpack_from(f">{n}I", buf, 6)))
    return None  # 'Y' type, 'O' origin, 'M' message
