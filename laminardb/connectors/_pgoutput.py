"""A decoder of PostgreSQL's ``pgoutput`` logical replication messages (protocol version 1).

Why our own: psycopg2 hands over the raw bytes of each message; the format is small and
documented (https://www.postgresql.org/docs/15/protocol-logicalrep-message-formats.html).
The row changes (Insert, Update, Delete) are not decoded one by one: ``_pgoutput_rows`` reads
their raw bytes in bulk (numba). This module decodes the rest.

Entry point: ``decode(payload) -> message`` (one of the dataclasses below, or None for a
message a change stream does not need: Type, Origin, logical decoding messages).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["Begin", "Commit", "Relation", "RelationColumn", "Truncate", "decode", "format_lsn", "parse_lsn"]

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


def decode(buf: bytes):
    """One pgoutput message → its dataclass (None: not needed by a change stream)."""
    tag = buf[0]
    if tag == 0x42:  # 'B'
        final_lsn, _ts, xid = _BEGIN.unpack_from(buf, 1)
        return Begin(final_lsn, xid)
    if tag == 0x43:  # 'C'
        _flags, commit_lsn, end_lsn, _ts = _COMMIT.unpack_from(buf, 1)
        return Commit(commit_lsn, end_lsn)
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
    return None  # 'Y' type, 'O' origin, 'M' message (and I/U/D: read by _pgoutput_rows)
