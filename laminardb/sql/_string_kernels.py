"""Numba kernels over a string array's offsets and bytes: SPLIT_INDEX's piece, and a literal's
presence (REGEXP_EXTRACT's prefilter).

Entry points: ``split_index(strings, delim, index)`` and ``contains_literal(strings, literal)``.
Why: Arrow's ``split_pattern`` builds every piece of every row as a list (~100 ns a row) when
SPLIT_INDEX wants one; a scan that stops at the wanted piece and copies only its bytes is a
few times cheaper. Both work on UTF-8 bytes: a delimiter or literal that is valid UTF-8 can
only match at a character boundary of valid UTF-8 text, so a byte search is a character search.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

_ONE_BYTE = np.zeros(1, np.uint8)


@njit(inline="always")
def _matches_at(data, p, lit):
    for k in range(1, len(lit)):
        if data[p + k] != lit[k]:
            return False
    return True


@njit(cache=True, nogil=True)
def _piece_bounds(offsets, data, valid, has_valid, delim, index, starts, ends):
    """Row i's piece ``index[i]`` (0-based) of the split by ``delim``: [starts[i], ends[i]), or
    ends[i] = -1 when there is none (NULL row, index < 0 or past the last piece, empty string).
    Returns the bytes of all pieces."""
    first = delim[0]
    m = len(delim)
    total = 0
    for i in range(len(starts)):
        ends[i] = -1
        s = np.int64(offsets[i])
        e = np.int64(offsets[i + 1])
        want = index[i]
        if (has_valid and not valid[i]) or want < 0 or s == e:
            continue
        piece = 0
        start = s
        p = s
        found = False
        while p + m <= e:
            if data[p] == first and _matches_at(data, p, delim):
                if piece == want:
                    found = True
                    break
                piece += 1
                p += m
                start = p
            else:
                p += 1
        if found:
            starts[i] = start
            ends[i] = p
        elif piece == want:  # the last piece runs to the end
            starts[i] = start
            ends[i] = e
        if ends[i] >= 0:
            total += ends[i] - starts[i]
    return total


@njit(cache=True, nogil=True)
def _gather_ranges(data, starts, ends, out_offsets, out):
    p = 0
    out_offsets[0] = 0
    for i in range(len(starts)):
        if ends[i] >= 0:
            for b in range(starts[i], ends[i]):
                out[p] = data[b]
                p += 1
        out_offsets[i + 1] = p


@njit(cache=True, nogil=True)
def _contains(offsets, data, valid, has_valid, lit, out):
    first = lit[0]
    m = len(lit)
    for i in range(len(out)):
        out[i] = False
        if has_valid and not valid[i]:
            continue
        e = np.int64(offsets[i + 1])
        for p in range(np.int64(offsets[i]), e - m + 1):
            if data[p] == first and _matches_at(data, p, lit):
                out[i] = True
                break


def string_view(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of a string or large_string array, zero copy; offsets index ``data``."""
    odt = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=odt)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size else _ONE_BYTE
    return offsets, data


def _validity(arr: pa.Array) -> tuple[np.ndarray, bool]:
    if arr.null_count == 0:
        return np.zeros(0, np.bool_), False
    return arr.is_valid().to_numpy(zero_copy_only=False), True


def _utf8(text: str) -> np.ndarray:
    return np.frombuffer(text.encode(), dtype=np.uint8)


def split_index(strings: pa.Array, delim: str, index: np.ndarray) -> pa.Array:
    """Flink's SPLIT_INDEX over a string array: piece ``index[i]`` of row i split by the whole
    ``delim`` (non-empty), NULL when there is no such piece; '' has no pieces at all."""
    offsets, data = string_view(strings)
    valid, has_valid = _validity(strings)
    n = len(strings)
    starts = np.empty(n, np.int64)
    ends = np.empty(n, np.int64)
    total = _piece_bounds(offsets, data, valid, has_valid, _utf8(delim), index, starts, ends)
    out_offsets = np.empty(n + 1, offsets.dtype)  # pieces are no longer than the input
    out = np.empty(max(total, 1), np.uint8)
    _gather_ranges(data, starts, ends, out_offsets, out)
    present = ends >= 0
    mask = None if present.all() else pa.py_buffer(np.packbits(present, bitorder="little"))
    return pa.Array.from_buffers(strings.type, n, [mask, pa.py_buffer(out_offsets), pa.py_buffer(out)],
                                 null_count=-1 if mask is not None else 0)


def contains_literal(strings: pa.Array, literal: str) -> np.ndarray:
    """Whether each row contains ``literal`` (non-empty) as bytes; False for NULL rows."""
    offsets, data = string_view(strings)
    valid, has_valid = _validity(strings)
    out = np.empty(len(strings), np.bool_)
    _contains(offsets, data, valid, has_valid, _utf8(literal), out)
    return out


def warm() -> None:
    """Compile (or load from numba's cache) both kernels for string and large_string arrays,
    with and without NULLs (called by ``operators.warmup.warm_kernels``)."""
    for kind in (pa.string(), pa.large_string()):
        for arr in (pa.array(["a/b", "c"], kind), pa.array(["a/b", None], kind)):
            split_index(arr, "/", np.zeros(2, np.int64))
            contains_literal(arr, "b")
