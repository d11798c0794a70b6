"""pgoutput Insert/Update/Delete messages → the declared columns as Arrow string arrays, in numba.

Why: decoding each value in Python (``_pgoutput._tuple``) and picking the declared columns
was most of a CDC source's CPU. Here Python only collects the raw messages of committed
transactions; :func:`_scan` walks their TupleData (one pass: per output row its weight, per
declared column the value's place in the buffer), :func:`_gather` copies each column's bytes
into a contiguous Arrow buffer. ``changelog_source.text_columns_batch`` then casts the text
column-wise.

Entry point: ``rows_from_messages(messages, relid, positions, ncols)`` → ``(weights, columns,
error)``: ``positions[i]`` is the declared column of the relation's i-th column (−1: not
declared); ``error`` is None or why the messages cannot be read (an update/delete without the
whole old row: REPLICA IDENTITY not FULL).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

__all__ = ["rows_from_messages", "NO_OLD_ROW", "BAD_MESSAGE"]

NO_OLD_ROW = 1  # an update or delete without the whole old row
BAD_MESSAGE = 2  # a value kind or layout this reader does not know

_NULL = -1
_UNCHANGED = -2  # 'u': a TOASTed value the update did not touch (the old row has it)


@njit(inline="always")
def _u32(data, pos):
    return (np.int64(data[pos]) << 24) | (np.int64(data[pos + 1]) << 16) | (np.int64(data[pos + 2]) << 8) \
        | np.int64(data[pos + 3])


@njit(inline="always")
def _tuple(data, pos, row, positions, starts, lengths):
    """One TupleData at ``pos`` into output ``row``; returns the position after it (−1: bad)."""
    n = (np.int64(data[pos]) << 8) | np.int64(data[pos + 1])
    pos += 2
    for c in range(n):
        kind = data[pos]
        pos += 1
        j = positions[c] if c < positions.shape[0] else -1
        if kind == 116:  # 't'
            size = _u32(data, pos)
            pos += 4
            if j >= 0:
                starts[row, j] = pos
                lengths[row, j] = size
            pos += size
        elif kind == 110:  # 'n'
            if j >= 0:
                lengths[row, j] = _NULL
        elif kind == 117:  # 'u'
            if j >= 0:
                lengths[row, j] = _UNCHANGED
        else:
            return -1
    return pos


@njit(cache=True, nogil=True)
def _scan(data, bounds, relid, positions, ncols):
    """Per output row: weight and, per declared column, (start, length) in ``data``
    (length −1: NULL). Updates give −old then +new; an update whose declared values did not
    change gives nothing. Returns (weights, starts, lengths, error)."""
    nmsg = bounds.shape[0] - 1
    starts = np.zeros((2 * nmsg, ncols), dtype=np.int64)
    lengths = np.zeros((2 * nmsg, ncols), dtype=np.int64)
    weights = np.zeros(2 * nmsg, dtype=np.int64)
    row = 0
    for m in range(nmsg):
        s = bounds[m]
        tag = data[s]
        if _u32(data, s + 1) != relid:
            continue  # another table's (a publication widened by hand)
        pos = s + 5
        if tag == 73:  # 'I' then 'N'
            if _tuple(data, pos + 1, row, positions, starts, lengths) < 0:
                return weights[:0], starts[:0], lengths[:0], 2
            weights[row] = 1
            row += 1
        elif tag == 68:  # 'D' then 'O' (whole old row) or 'K' (key only)
            if data[pos] != 79:
                return weights[:0], starts[:0], lengths[:0], 1
            if _tuple(data, pos + 1, row, positions, starts, lengths) < 0:
                return weights[:0], starts[:0], lengths[:0], 2
            weights[row] = -1
            row += 1
        elif tag == 85:  # 'U' then 'O' old, then 'N' new
            if data[pos] != 79:
                return weights[:0], starts[:0], lengths[:0], 1
            pos = _tuple(data, pos + 1, row, positions, starts, lengths)
            if pos < 0 or _tuple(data, pos + 1, row + 1, positions, starts, lengths) < 0:
                return weights[:0], starts[:0], lengths[:0], 2
            same = True
            for j in range(ncols):
                if lengths[row + 1, j] == _UNCHANGED:
                    starts[row + 1, j] = starts[row, j]
                    lengths[row + 1, j] = lengths[row, j]
                a, b = lengths[row, j], lengths[row + 1, j]
                if a == _UNCHANGED:
                    return weights[:0], starts[:0], lengths[:0], 2
                if a != b:
                    same = False
                elif a > 0:
                    sa, sb = starts[row, j], starts[row + 1, j]
                    for k in range(a):
                        if data[sa + k] != data[sb + k]:
                            same = False
                            break
            if not same:  # an update of undeclared columns only changes nothing here
                weights[row] = -1
                weights[row + 1] = 1
                row += 2
        else:
            return weights[:0], starts[:0], lengths[:0], 2
    return weights[:row], starts[:row], lengths[:row], 0


@njit(cache=True, nogil=True)
def _gather(data, starts, lengths, j, offsets, out):
    """Column ``j``'s values, contiguous: ``offsets`` (n + 1, int32) and ``out`` filled."""
    pos = 0
    for r in range(starts.shape[0]):
        offsets[r] = pos
        size = lengths[r, j]
        if size > 0:
            s = starts[r, j]
            out[pos : pos + size] = data[s : s + size]
            pos += size
    offsets[starts.shape[0]] = pos


def rows_from_messages(messages: list[bytes], relid: int, positions: np.ndarray,
                       ncols: int) -> tuple[np.ndarray, list[pa.Array], int]:
    """The rows of ``messages`` (raw I/U/D payloads, in commit order): weights, one ``string``
    array per declared column, and an error code (0: none; ``NO_OLD_ROW``, ``BAD_MESSAGE``)."""
    sizes = np.fromiter(map(len, messages), dtype=np.int64, count=len(messages))
    bounds = np.zeros(len(messages) + 1, dtype=np.int64)
    np.cumsum(sizes, out=bounds[1:])
    data = np.frombuffer(b"".join(messages), dtype=np.uint8)
    weights, starts, lengths, error = _scan(data, bounds, relid, positions, ncols)
    if error:
        return weights, [], int(error)
    n = weights.shape[0]
    columns = []
    for j in range(ncols):
        size = lengths[:, j]
        offsets = np.empty(n + 1, dtype=np.int32)
        out = np.empty(int(size[size > 0].sum()), dtype=np.uint8)
        _gather(data, starts, lengths, j, offsets, out)
        valid = size >= 0
        bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        arr = pa.Array.from_buffers(pa.string(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(out)])
        arr.validate(full=True)  # UTF-8, as the server sends it
        columns.append(arr)
    return weights, columns, 0
