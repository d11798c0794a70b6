"""Numba kernels for keys: the stable 64-bit hash, key interning and the group table.

Everything here works on numpy views of Arrow buffers and plain numpy state arrays; the
Python classes in ``_interner.py`` and ``_groups.py`` own the arrays, grow them before a
kernel runs (kernels never allocate state), and keep the invariants documented there.

The hash is an xxHash64-style mix written out here so that it is identical in every
process and on every machine (Python's ``hash()`` is salted per process). It is the hash
DESIGN.md names for ``vnode = hash(key) % V``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
_EMPTY = -1


@njit(inline="always")
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(inline="always")
def _fmix(h):
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


@njit(cache=True, nogil=True)
def hash_bytes(data, start, end):
    """Stable 64-bit hash of ``data[start:end]`` (uint8)."""
    n = end - start
    h = _P5 + np.uint64(n)
    i = start
    while i + 8 <= end:
        k = np.uint64(0)
        for b in range(8):
            k |= np.uint64(data[i + b]) << np.uint64(8 * b)
        k *= _P2
        k = _rotl(k, 31)
        k *= _P1
        h ^= k
        h = _rotl(h, 27) * _P1 + _P4
        i += 8
    while i < end:
        h ^= np.uint64(data[i]) * _P5
        h = _rotl(h, 11) * _P1
        i += 1
    return _fmix(h)


@njit(inline="always")
def hash_pair(a, b):
    """Stable hash of two int64 values (group key id, window start)."""
    h = np.uint64(a) * _P1
    h ^= _rotl(np.uint64(b) * _P2, 31)
    return _fmix(h)


@njit(cache=True, nogil=True)
def hash_rows(offsets, data, out):
    """Hash each encoded row ``data[offsets[i]:offsets[i+1]]`` into ``out[i]``."""
    for i in range(len(out)):
        out[i] = hash_bytes(data, offsets[i], offsets[i + 1])


@njit(cache=True, nogil=True)
def owner_order(offsets, data, vnode_owner, n_owners, order, counts):
    """Route each encoded row to ``vnode_owner[hash % V]``: ``order`` lists the rows grouped
    by owner (stable, a counting sort), ``counts[o]`` how many each owner gets."""
    n = len(offsets) - 1
    v = np.uint64(len(vnode_owner))
    owner = np.empty(n, np.int64)
    for o in range(n_owners):
        counts[o] = 0
    for i in range(n):
        o = vnode_owner[hash_bytes(data, offsets[i], offsets[i + 1]) % v]
        owner[i] = o
        counts[o] += 1
    start = np.zeros(n_owners, np.int64)
    for o in range(1, n_owners):
        start[o] = start[o - 1] + counts[o - 1]
    for i in range(n):
        o = owner[i]
        order[start[o]] = i
        start[o] += 1


@njit(cache=True, nogil=True)
def gather_strings(offsets, data, order, out_offsets):
    """Rows ``order`` of a string array: fills ``out_offsets`` and returns the new data."""
    total = 0
    out_offsets[0] = 0
    for j in range(len(order)):
        i = order[j]
        total += offsets[i + 1] - offsets[i]
        out_offsets[j + 1] = total
    out = np.empty(total, np.uint8)
    p = 0
    for j in range(len(order)):
        i = order[j]
        for b in range(offsets[i], offsets[i + 1]):
            out[p] = data[b]
            p += 1
    return out


# --------------------------------------------------------------------------- encoding


@njit(cache=True, nogil=True)
def encode_fixed(out, pos, values, valid, has_valid):
    """Append a 9-byte field (validity tag + little-endian int64) to every row."""
    for i in range(len(values)):
        p = pos[i]
        if has_valid and not valid[i]:
            out[p] = 0
            for b in range(8):
                out[p + 1 + b] = 0
        else:
            out[p] = 1
            v = np.uint64(values[i])
            for b in range(8):
                out[p + 1 + b] = np.uint8((v >> np.uint64(8 * b)) & np.uint64(0xFF))
        pos[i] = p + 9


@njit(cache=True, nogil=True)
def encode_string(out, pos, offsets, data, valid, has_valid):
    """Append a field (validity tag, 4-byte length, bytes) to every row."""
    for i in range(len(pos)):
        p = pos[i]
        if has_valid and not valid[i]:
            for b in range(5):
                out[p + b] = 0
            pos[i] = p + 5
            continue
        s = offsets[i]
        e = offsets[i + 1]
        n = e - s
        out[p] = 1
        for b in range(4):
            out[p + 1 + b] = np.uint8((n >> (8 * b)) & 0xFF)
        for j in range(n):
            out[p + 5 + j] = data[s + j]
        pos[i] = p + 5 + n


@njit(cache=True, nogil=True)
def encode_single_string_nulls(offsets, data, valid, out_offsets, out):
    """Single VARCHAR key with NULLs: raw bytes, NULL as 0xFF (never valid UTF-8)."""
    p = 0
    out_offsets[0] = 0
    for i in range(len(valid)):
        if valid[i]:
            s = offsets[i]
            e = offsets[i + 1]
            for j in range(s, e):
                out[p] = data[j]
                p += 1
        else:
            out[p] = 0xFF
            p += 1
        out_offsets[i + 1] = p


# --------------------------------------------------------------------------- interning


@njit(inline="always")
def _bytes_equal(a, a_start, a_end, b, b_start, b_end):
    if a_end - a_start != b_end - b_start:
        return False
    for j in range(a_end - a_start):
        if a[a_start + j] != b[b_start + j]:
            return False
    return True


@njit(inline="always")
def _word(data, s, e):
    """``data[s:e]`` (at most 8 bytes) as one little-endian word."""
    w = np.uint64(0)
    for b in range(e - s):
        w = (w << np.uint64(8)) | np.uint64(data[e - 1 - b])
    return w


_LONG = np.uint64(1) << np.uint64(63)


@njit(inline="always")
def _short_tag(words, data, s, e):
    """``_intern_tag`` of a key of at most 7 bytes: one unaligned 8-byte load from ``words``
    (``data`` seen as a uint64 at every byte offset) when the buffer has 8 bytes from ``s``."""
    n = e - s
    if s < len(words):
        return (words[s] & ((np.uint64(1) << np.uint64(8 * n)) - np.uint64(1))) | (np.uint64(1) << np.uint64(8 * n))
    return _word(data, s, e) | (np.uint64(1) << np.uint64(8 * n))


@njit(inline="always")
def _intern_tag(data, s, e):
    """What the interner's table stores for ``data[s:e]`` (process-local, never stored or
    sent; ``hash_bytes`` is the stable hash). A key of at most 7 bytes is its own tag: the
    bytes as one little-endian word with a 0x01 byte after them (so lengths differ), top bit
    clear, and equal tags mean equal keys with no look at the arena. A longer key's tag is
    its hash with the top bit set, and a tag match is confirmed on the bytes. Inlined, with
    no call in the row loop (a call there costs more than the hash)."""
    n = e - s
    if n <= 7:
        return _word(data, s, e) | (np.uint64(1) << np.uint64(8 * n))
    h = _P5 + np.uint64(n)
    i = s
    while i < e:
        k = min(i + 8, e)
        h ^= _rotl(_word(data, i, k) * _P2, 31) * _P1
        h = _rotl(h, 27) * _P1 + _P4
        i = k
    return _fmix(h) | _LONG


@njit(inline="always")
def _tag_position(tag, mask):
    """Table position of a tag: short-key tags are mixed first, long ones are hashes already."""
    h = tag if tag & _LONG else _fmix(tag)
    return np.int64(h & np.uint64(mask))


@njit(cache=True, nogil=True)
def intern_rows(offsets, data, words, start, tab_ids, tab_hash, arena, arena_off, n_keys, out_ids, new_rows,
                n_new):
    """Map each encoded row from ``start`` on to a dense id, appending unseen rows to the arena.

    Stops before a new key would fill the table past 1/4 and returns (next row, new ids so
    far): the caller doubles the table and calls again, so the table stays as small as the key
    set (1,000 keys: 64 KB, in cache) instead of sized for every row of the batch being new.
    ``new_rows[:n_new]`` are the first rows holding the new ids; the arena can hold the batch.
    ``tab_hash`` holds each entry's tag (``_intern_tag``); ``words``: see ``_short_tag``.
    """
    mask = len(tab_ids) - 1
    max_keys = len(tab_ids) // 4
    nk = n_keys[0]
    for i in range(start, len(out_ids)):
        s = np.int64(offsets[i])
        e = np.int64(offsets[i + 1])
        tag = _short_tag(words, data, s, e) if e - s <= 7 else _intern_tag(data, s, e)
        j = _tag_position(tag, mask)
        while True:
            kid = tab_ids[j]
            if kid == _EMPTY:
                if nk >= max_keys:
                    n_keys[0] = nk
                    return i, n_new
                tab_ids[j] = nk
                tab_hash[j] = tag
                a = arena_off[nk]
                for b in range(e - s):
                    arena[a + b] = data[s + b]
                arena_off[nk + 1] = a + (e - s)
                out_ids[i] = nk
                new_rows[n_new] = i
                n_new += 1
                nk += 1
                break
            if tab_hash[j] == tag and (
                not tag & _LONG or _bytes_equal(arena, arena_off[kid], arena_off[kid + 1], data, s, e)
            ):
                out_ids[i] = kid
                break
            j = (j + 1) & mask
    n_keys[0] = nk
    return len(out_ids), n_new


@njit(cache=True, nogil=True)
def rehash_interned(tab_ids, tab_hash, old_ids, old_hash):
    """Move every entry of an old intern table into a larger empty one."""
    mask = len(tab_ids) - 1
    for j in range(len(old_ids)):
        kid = old_ids[j]
        if kid == _EMPTY:
            continue
        tag = old_hash[j]
        k = _tag_position(tag, mask)
        while tab_ids[k] != _EMPTY:
            k = (k + 1) & mask
        tab_ids[k] = kid
        tab_hash[k] = tag


@njit(cache=True, nogil=True)
def compare_interned(arena, arena_off, a, b):
    """Bytewise comparison of interned values a and b: -1, 0 or 1 (UTF-8 order = code points)."""
    sa = arena_off[a]
    ea = arena_off[a + 1]
    sb = arena_off[b]
    eb = arena_off[b + 1]
    n = min(ea - sa, eb - sb)
    for j in range(n):
        x = arena[sa + j]
        y = arena[sb + j]
        if x != y:
            return -1 if x < y else 1
    la = ea - sa
    lb = eb - sb
    if la == lb:
        return 0
    return -1 if la < lb else 1


# --------------------------------------------------------------------------- group table


@njit(inline="always")
def take_slot(free, counters):
    """A slot for a new group: the last one freed, else the next never used.
    ``counters[0]`` = slots used (high-water mark), ``counters[1]`` = free-stack size."""
    if counters[1] > 0:
        counters[1] -= 1
        return free[counters[1]]
    s = counters[0]
    counters[0] += 1
    return s


@njit(cache=True, nogil=True)
def upsert_groups(key_ids, wins, start, tab, slot_key, slot_win, live, free, counters, key_slot, key_win,
                  out_slots):
    """Find or create the slot of each (key id, window start) pair from row ``start`` on.

    ``counters`` = [slots used (high-water mark), free-stack size, live groups].
    ``key_slot[key id]``/``key_win[key id]``: the group a key last used (-1: none, or freed;
    ``GroupTable.remove`` clears it), so a window's rows mostly find their group without
    hashing; key ids past the hint arrays' end are not cached.
    Stops before a new group would fill the table past 1/4 and returns the next row: the
    caller doubles the table and calls again, so it stays as small as the live groups (in
    cache). Slot capacity for every row being a new group is guaranteed by the caller.
    """
    mask = len(tab) - 1
    max_live = len(tab) // 4
    n_cached = len(key_slot)
    for i in range(start, len(key_ids)):
        kid = key_ids[i]
        w = wins[i]
        if kid < n_cached and key_win[kid] == w and key_slot[kid] >= 0:
            out_slots[i] = key_slot[kid]
            continue
        j = np.int64(hash_pair(kid, w) & np.uint64(mask))
        while True:
            s = tab[j]
            if s == _EMPTY:
                if counters[2] >= max_live:
                    return i
                s = take_slot(free, counters)
                tab[j] = s
                slot_key[s] = kid
                slot_win[s] = w
                live[s] = True
                counters[2] += 1
                out_slots[i] = s
                break
            if slot_key[s] == kid and slot_win[s] == w:
                out_slots[i] = s
                break
            j = (j + 1) & mask
        if kid < n_cached:
            key_slot[kid] = s
            key_win[kid] = w
    return len(key_ids)


@njit(cache=True, nogil=True)
def rebuild_group_table(tab, slot_key, slot_win, live, n_slots):
    """Re-insert every live slot into an empty table (after removals or growth)."""
    mask = len(tab) - 1
    for j in range(len(tab)):
        tab[j] = _EMPTY
    for s in range(n_slots):
        if not live[s]:
            continue
        j = np.int64(hash_pair(slot_key[s], slot_win[s]) & np.uint64(mask))
        while tab[j] != _EMPTY:
            j = (j + 1) & mask
        tab[j] = s


# --------------------------------------------------------------------------- windows


@njit(cache=True, nogil=True)
def assign_tumble(ts, size, offset, closed_before, out_win, out_keep):
    """Tumbling window start per row; ``out_keep[i]`` is False when its window has closed.
    Returns (rows kept, lowest window start kept). Rows of a batch mostly fall in the window
    of the row before, so a division is done only when a row leaves it."""
    n_keep = 0
    lo = np.iinfo(np.int64).max
    start = np.int64(0)
    end = np.int64(0)  # [start, end) is the window of the row before (empty at first)
    for i in range(len(ts)):
        t = ts[i]
        if t < start or t >= end:
            start = ((t - offset) // size) * size + offset
            end = start + size
        out_win[i] = start
        keep = end > closed_before
        out_keep[i] = keep
        if keep:
            n_keep += 1
            if start < lo:
                lo = start
    return n_keep, lo


@njit(cache=True, nogil=True)
def assign_hop(ts, size, slide, offset, closed_before, out_rows, out_win, out_late):
    """Expand rows into (row, window start) pairs for every open hopping window.

    A row is late (``out_late``) only when every window it belongs to has closed.
    Returns the number of pairs written.
    """
    k = 0
    for i in range(len(ts)):
        t = ts[i] - offset
        last = (t // slide) * slide
        any_open = False
        start = last
        while start + size > t:
            if start + offset + size > closed_before:
                out_rows[k] = i
                out_win[k] = start + offset
                k += 1
                any_open = True
            start -= slide
        out_late[i] = not any_open
    return k


@njit(cache=True, nogil=True)
def first_touch(slots, stamp, mark, out):
    """Distinct slots of a batch in order of first appearance (O(n), no sort)."""
    k = 0
    for i in range(len(slots)):
        s = slots[i]
        if mark[s] != stamp:
            mark[s] = stamp
            out[k] = s
            k += 1
    return k
