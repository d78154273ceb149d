"""Compiled kernels of the search's row bookkeeping (numba; ``learners/tabular/rows.py``).

An answer against a remote model is its waits plus what is computed between them, and for one agent (a
request) that compute is mostly the fixed cost of many small numpy calls. Each kernel here is one call
where ``rows.py`` made a dozen, with the same rows (``tests/test_rows.py`` holds each to a loop over its
definition and to the numpy steps it replaced):

- ``fresh_kernel``: ``rows.fresh``'s hashing, sorting and packing (the numpy steps remain as its fallback on a
  hash collision, ``rows._fresh_numpy``);
- ``nearest_first_kernel``: ``rows.nearest_first``'s ranking once the distances are known;
- ``compact_kernel``: ``rows.compact`` (``rows.packed_rows`` of the rows without NaN).
"""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True, inline="always")
def _real(row):
    """The row holds no NaN (a NaN row is padding or dropped)."""
    for d in range(row.shape[0]):
        if np.isnan(row[d]):
            return False
    return True


@nb.njit(cache=True)
def fresh_kernel(M, Mw, asked, mix0, mix1):
    """(out, ok): per agent, the rows of ``M`` (N, Q, D) that repeat none of its earlier rows or of its rows
    ``asked`` (N, A, D, their 64-bit words) and hold no NaN, packed to the front in order (NaN after); ``Mw``
    is ``M``'s words. Rows are equal when their words are (bit for bit: -0.0 is not 0.0). Rows are found
    alike by a 64-bit hash (``rows.word_hashes``' with the multipliers ``mix0``, ``mix1``) in an open-addressing
    table, in order (a row is a repeat where an earlier one has its hash and its words), and ``ok`` False where two
    unequal rows' hashes met (odds about 2^-64 a pair): the caller then sorts the bytes themselves. (It sorted the
    hashes before: 31 us for 300 rows, the size of most of a request's calls.)"""
    N, Q, D = M.shape
    A = asked.shape[1]
    out = np.full((N, Q, D), np.nan)
    size = 16
    while size < 2 * (A + Q):  # an open-addressing table at most half full
        size *= 2
    mask = np.uint64(size - 1)
    slot_hash = np.empty(size, np.uint64)
    slot_row = np.empty(size, np.int64)  # the first row of that hash (index into asked, then M); -1: empty
    shift, fold = np.uint64(29), np.uint64(32)
    for n in range(N):
        slot_row[:] = -1
        k = 0
        for i in range(A + Q):
            w = asked[n, i] if i < A else Mw[n, i - A]
            acc = np.uint64(0)
            for d in range(D):
                v = w[d] * mix0[d]
                v ^= v >> shift
                acc += v * mix1[d]
            s = (acc ^ (acc >> fold)) & mask
            seen = False
            while slot_row[s] >= 0:  # the rows met so far with this hash: the first one holds their words
                if slot_hash[s] == acc:
                    r = slot_row[s]
                    wr = asked[n, r] if r < A else Mw[n, r - A]
                    for d in range(D):
                        if wr[d] != w[d]:
                            return out, False  # two unequal rows, one hash
                    seen = True
                    break
                s = (s + np.uint64(1)) & mask
            if not seen:
                slot_hash[s] = acc
                slot_row[s] = i
            if i >= A and not seen and _real(M[n, i - A]):
                out[n, k] = M[n, i - A]
                k += 1
    return out, True


@nb.njit(cache=True)
def nearest_first_kernel(C, d, rows, k):
    """(N, rows, D) ``rows.nearest_first`` after its distances: per agent the rows of ``C`` (N, Q, D) of finite
    ``d`` (N, Q), nearest first (stable), a row equal (as floats) to the one before it at the same distance
    dropped; where an agent has more than its ``k`` (N,) rows, ``rows`` positions spread evenly over its
    nearness ranks, and then (as the numpy steps do for the whole batch) every agent's positions are read
    that way; positions past ``k`` and rows of no finite distance NaN."""
    N, Q, D = C.shape
    first = np.empty((N, Q), np.int64)
    ds = np.empty((N, Q))
    order = np.empty((N, Q), np.int64)
    n_fin = np.zeros(N, np.int64)
    spread = False
    for n in range(N):
        f = np.argsort(d[n], kind="mergesort")
        first[n] = f
        for j in range(Q):
            ds[n, j] = d[n, f[j]]
        tie = np.zeros(Q, np.bool_)  # read off the sorted distances before any is dropped
        for j in range(1, Q):
            if ds[n, j] == ds[n, j - 1] and np.isfinite(ds[n, j]):
                same = True
                for c in range(D):
                    if not C[n, f[j], c] == C[n, f[j - 1], c]:
                        same = False
                        break
                tie[j] = same
        for j in range(1, Q):
            if tie[j]:
                ds[n, j] = np.inf
        order[n] = np.argsort(ds[n], kind="mergesort")
        for j in range(Q):
            n_fin[n] += np.isfinite(ds[n, j])
        spread |= n_fin[n] > k[n]
    out = np.full((N, rows, D), np.nan)
    m = rows if spread else min(Q, rows)
    for n in range(N):
        for p in range(m):
            if spread:
                pick = p
                if n_fin[n] > k[n]:
                    pick = min(int(np.floor(p / max(k[n] - 1, 1) * max(n_fin[n] - 1, 0))), max(n_fin[n] - 1, 0))
                at = order[n, min(pick, Q - 1)]
            else:
                at = order[n, p]
            if p >= k[n] or not np.isfinite(ds[n, at]):
                continue
            out[n, p] = C[n, first[n, at]]
    return out


@nb.njit(cache=True)
def compact_kernel(C, rows):
    """(N, rows, D) ``rows.compact``: each agent's first ``rows`` rows of ``C`` (N, Q, D) that hold no NaN, in
    order, then NaN rows."""
    N, Q, D = C.shape
    out = np.full((N, rows, D), np.nan)
    for n in range(N):
        k = 0
        for q in range(Q):
            if k == rows:
                break
            if _real(C[n, q]):
                out[n, k] = C[n, q]
                k += 1
    return out
