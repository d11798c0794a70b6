"""numba kernels of the ASOF / temporal join and the lookup join: closest match per probe row,
pruning of right rows no future left row can match, retraction of stored lookup rows.

Stored rows form one chain per key id, newest first (``_join_kernels.link_rows``: ``head[key]``,
``nxt[row]``, −1 ends a chain). ``op`` codes the match condition ``left.t OP right.t``:
0 ``>=``, 1 ``>``, 2 ``<=``, 3 ``<``. Walking a chain newest first and replacing the best row only
on a strictly closer time makes the later arrival win a tie (a versioned table's upsert).
Kernels never allocate.
"""

from __future__ import annotations

import numpy as np
from numba import njit

OPS = {">=": 0, ">": 1, "<=": 2, "<": 3}


@njit(cache=True, nogil=True)
def best_match(key_ids, idx, probe_ts, head, nxt, alive, build_ts, op, out):
    """``out[j]`` = the stored row closest in time to probe row ``idx[j]`` that satisfies the
    condition, or −1."""
    n_keys = len(head)
    for j in range(len(idx)):
        i = idx[j]
        k = key_ids[i]
        best = -1
        if k < n_keys:
            t = probe_ts[i]
            r = head[k]
            while r >= 0:
                if alive[r]:
                    b = build_ts[r]
                    if op == 0:
                        ok = b <= t and (best < 0 or b > build_ts[best])
                    elif op == 1:
                        ok = b < t and (best < 0 or b > build_ts[best])
                    elif op == 2:
                        ok = b >= t and (best < 0 or b < build_ts[best])
                    else:
                        ok = b > t and (best < 0 or b < build_ts[best])
                    if ok:
                        best = r
                r = nxt[r]
        out[j] = best


@njit(cache=True, nogil=True)
def min_per_key(key_ids, ts, alive, n, out):
    """``out[key] = min(out[key], ts)`` over the live rows ``< n`` (pending left rows)."""
    for r in range(n):
        if alive[r]:
            k = key_ids[r]
            if ts[r] < out[k]:
                out[k] = ts[r]


@njit(cache=True, nogil=True)
def prune(head, nxt, alive, ts, bound, keep_latest_before):
    """Kill the stored rows of each key older than ``bound[key]``; with ``keep_latest_before``
    (``>=``/``>``) the latest of them survives: it is the match of a left row at the bound.
    Returns how many rows died."""
    died = 0
    for k in range(len(head)):
        b = bound[k]
        keep = -1
        if keep_latest_before:
            r = head[k]
            while r >= 0:
                if alive[r] and ts[r] < b and (keep < 0 or ts[r] > ts[keep]):
                    keep = r
                r = nxt[r]
        r = head[k]
        while r >= 0:
            if alive[r] and ts[r] < b and r != keep:
                alive[r] = False
                died += 1
            r = nxt[r]
    return died


@njit(cache=True, nogil=True)
def retract(key_ids, row_hash, w, head, nxt, alive, stored_hash, stored_w):
    """Net retractions (``w < 0``) of a changelog into the stored rows: each cancels the newest
    live stored row of its key with the same row hash. Returns how many rows died."""
    died = 0
    n_keys = len(head)
    for i in range(len(key_ids)):
        if w[i] >= 0 or key_ids[i] >= n_keys:
            continue
        r = head[key_ids[i]]
        while r >= 0:
            if alive[r] and stored_w[r] > 0 and stored_hash[r] == row_hash[i]:
                stored_w[r] += w[i]
                if stored_w[r] <= 0:
                    alive[r] = False
                    died += 1
                break
            r = nxt[r]
    return died


def warm() -> None:
    """Compile every kernel once (the cache makes later processes start fast)."""
    z = np.zeros(1, np.int64)
    b = np.ones(1, np.bool_)
    best_match(z, z, z, np.full(1, -1, np.int64), z.copy(), b, z, 0, z.copy())
    min_per_key(z, z, b, 1, z.copy())
    prune(np.full(1, -1, np.int64), z.copy(), b.copy(), z, z, True)
    retract(z, z, z, np.full(1, -1, np.int64), z.copy(), b.copy(), z, z.copy())
