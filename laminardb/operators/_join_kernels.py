"""numba kernels of the join operator: chain the stored rows of each key, probe them, count matches.

Keys are interned to dense ids first (``_interner.Interner``, one for both sides, so equal keys
get one id); each side's stored rows then form one chain per key id: ``head[key]`` is the newest
row, ``nxt[row]`` the one before it (−1 ends a chain). Probing walks the chain of each probe
row's key, skipping dead rows (expired, or compacted away) and — for interval joins — rows
outside the time bounds. Kernels never allocate: callers size the outputs, and ``probe`` says
how many pairs there were so a caller can grow its buffers and run it again.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def link_rows(key_ids, start, head, nxt):
    """Append rows ``start …`` (their key ids) to the chains of their keys."""
    for i in range(len(key_ids)):
        k = key_ids[i]
        r = start + i
        nxt[r] = head[k]
        head[k] = r


@njit(cache=True, nogil=True)
def probe(key_ids, valid, head, nxt, alive, probe_ts, build_ts, lo, hi, sign, use_interval,
          out_probe, out_build):
    """Pairs (probe row, stored row) with equal keys (and, with ``use_interval``,
    ``lo ≤ sign·(probe_ts − build_ts) ≤ hi``: sign +1 when the probe side is the left one).
    Writes at most ``len(out_probe)`` pairs and returns how many there are in all."""
    n_out = 0
    cap = len(out_probe)
    n_keys = len(head)
    for i in range(len(key_ids)):
        if not valid[i]:
            continue
        k = key_ids[i]
        if k >= n_keys:
            continue
        r = head[k]
        while r >= 0:
            if alive[r]:
                ok = True
                if use_interval:
                    d = sign * (probe_ts[i] - build_ts[r])
                    ok = lo <= d <= hi
                if ok:
                    if n_out < cap:
                        out_probe[n_out] = i
                        out_build[n_out] = r
                    n_out += 1
            r = nxt[r]
    return n_out


@njit(cache=True, nogil=True)
def add_matches(build_idx, weights, match, mark, touched, old):
    """``match[row] += weight`` per pair; returns how many distinct rows it touched, with their
    match sums before this call in ``old`` (``mark`` all False on entry, and again on exit)."""
    n = 0
    for i in range(len(build_idx)):
        r = build_idx[i]
        if not mark[r]:
            mark[r] = True
            touched[n] = r
            old[n] = match[r]
            n += 1
        match[r] += weights[i]
    for j in range(n):
        mark[touched[j]] = False
    return n


@njit(cache=True, nogil=True)
def sum_by_row(idx, weights, out):
    """``out[idx[i]] += weights[i]``."""
    for i in range(len(idx)):
        out[idx[i]] += weights[i]


@njit(cache=True, nogil=True)
def expire(ts, alive, n, before):
    """Mark rows ``< n`` with ``ts < before`` dead; returns how many died."""
    died = 0
    for r in range(n):
        if alive[r] and ts[r] < before:
            alive[r] = False
            died += 1
    return died


def warm() -> None:
    """Compile every kernel once (the cache makes later processes start fast)."""
    z = np.zeros(1, np.int64)
    b = np.ones(1, np.bool_)
    link_rows(z, 0, np.full(1, -1, np.int64), np.zeros(1, np.int64))
    probe(z, b, np.full(1, -1, np.int64), z.copy(), b, z, z, 0, 0, 1, False, z.copy(), z.copy())
    add_matches(z, z, z.copy(), np.zeros(1, np.bool_), z.copy(), z.copy())
    sum_by_row(z, z, z.copy())
    expire(z, b.copy(), 1, 0)
