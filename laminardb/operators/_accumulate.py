"""Numba kernels that fold rows into per-group accumulator arrays, and merge groups.

Every kernel takes ``slots`` (the group slot of each row), the argument values as a numpy
view, the argument's validity (``has_valid`` False means "no NULLs", so the mask is not
read) and the state arrays it updates in place. ``weights`` carries the Z-set weight of
each row (+1 for plain inserts, ±1 from a changelog input), used by the invertible
aggregates COUNT and SUM (``has_weights`` False: all +1, nothing to read); the others are
only planned over append-only inputs.
"""

from __future__ import annotations

from numba import njit

from laminardb.operators._kernels import compare_interned


@njit(cache=True, nogil=True)
def acc_count(slots, valid, has_valid, weights, has_weights, counts):
    """``has_weights`` False: every weight is +1 (an append-only batch), ``weights`` unread."""
    for i in range(len(slots)):
        if has_valid and not valid[i]:
            continue
        counts[slots[i]] += weights[i] if has_weights else 1


@njit(cache=True, nogil=True)
def acc_sum(slots, values, valid, has_valid, weights, has_weights, sums, counts):
    for i in range(len(slots)):
        if has_valid and not valid[i]:
            continue
        s = slots[i]
        if has_weights:
            sums[s] += values[i] * weights[i]
            counts[s] += weights[i]
        else:
            sums[s] += values[i]
            counts[s] += 1


@njit(cache=True, nogil=True)
def acc_minmax(slots, values, valid, has_valid, best, has, is_max):
    for i in range(len(slots)):
        if has_valid and not valid[i]:
            continue
        s = slots[i]
        v = values[i]
        if not has[s]:
            best[s] = v
            has[s] = True
        elif is_max:
            if v > best[s]:
                best[s] = v
        elif v < best[s]:
            best[s] = v


@njit(cache=True, nogil=True)
def acc_minmax_interned(slots, ids, valid, has_valid, arena, arena_off, best, has, is_max):
    for i in range(len(slots)):
        if has_valid and not valid[i]:
            continue
        s = slots[i]
        v = ids[i]
        if not has[s]:
            best[s] = v
            has[s] = True
            continue
        c = compare_interned(arena, arena_off, v, best[s])
        if (is_max and c > 0) or (not is_max and c < 0):
            best[s] = v


@njit(cache=True, nogil=True)
def acc_first_last(slots, values, valid, has_valid, ts, seqs, best_val, best_ts, best_seq, has, is_last):
    """FIRST_VALUE/LAST_VALUE by event time, ties broken by arrival order; NULLs skipped."""
    for i in range(len(slots)):
        if has_valid and not valid[i]:
            continue
        s = slots[i]
        t = ts[i]
        q = seqs[i]
        if not has[s]:
            take = True
        elif is_last:
            take = t > best_ts[s] or (t == best_ts[s] and q > best_seq[s])
        else:
            take = t < best_ts[s] or (t == best_ts[s] and q < best_seq[s])
        if take:
            best_val[s] = values[i]
            best_ts[s] = t
            best_seq[s] = q
            has[s] = True


@njit(cache=True, nogil=True)
def acc_distinct(slots, ids, valid, has_valid, set_slot, set_val, set_counter, counts):
    """COUNT(DISTINCT x): a set of (slot, value id) pairs; counts rises on first sight."""
    mask = len(set_slot) - 1
    for i in range(len(slots)):
        if has_valid and not valid[i]:
            continue
        s = slots[i]
        v = ids[i]
        h = (s * 0x9E3779B1 + v * 0x85EBCA77) ^ (v >> 17)
        j = h & mask
        while True:
            if set_slot[j] == -1:
                set_slot[j] = s
                set_val[j] = v
                set_counter[0] += 1
                counts[s] += 1
                break
            if set_slot[j] == s and set_val[j] == v:
                break
            j = (j + 1) & mask


@njit(cache=True, nogil=True)
def rebuild_distinct(set_slot, set_val, old_slot, old_val, keep_slot, set_counter):
    """Re-insert the pairs of live slots (``keep_slot[slot]``) into an empty set."""
    mask = len(set_slot) - 1
    n = 0
    for j in range(len(old_slot)):
        s = old_slot[j]
        if s < 0 or not keep_slot[s]:  # empty (-1) or tombstone (-2)
            continue
        v = old_val[j]
        h = (s * 0x9E3779B1 + v * 0x85EBCA77) ^ (v >> 17)
        k = h & mask
        while set_slot[k] != -1:
            k = (k + 1) & mask
        set_slot[k] = s
        set_val[k] = v
        n += 1
    set_counter[0] = n


@njit(cache=True, nogil=True)
def move_distinct(set_slot, set_val, src, dst, counts):
    """Re-key the pairs of slot ``src`` to ``dst`` (session merge), counting new pairs."""
    mask = len(set_slot) - 1
    moved_vals = []
    for j in range(len(set_slot)):
        if set_slot[j] == src:
            moved_vals.append(set_val[j])
    if len(moved_vals) == 0:
        return
    # drop src entries by rebuilding in place is costly; mark them as dst duplicates instead
    for j in range(len(set_slot)):
        if set_slot[j] == src:
            set_slot[j] = -2  # tombstone: skipped by probes, removed on the next rebuild
    for v in moved_vals:
        h = (dst * 0x9E3779B1 + v * 0x85EBCA77) ^ (v >> 17)
        k = h & mask
        while True:
            if set_slot[k] == -1:
                set_slot[k] = dst
                set_val[k] = v
                counts[dst] += 1
                break
            if set_slot[k] == dst and set_val[k] == v:
                break
            k = (k + 1) & mask
