"""Compiled best-first listing of an agent's nearest corners (``corners.nearest_corners``).

A corner picks, per feature, either the agent's own value (option 0) or one of the feature's options sorted
nearest first (1, 2, ...); its distance is the sum of the picked options' distances, added in feature order
(the order ``corners._block``'s merges add them in, so the sums are bit for bit theirs). Corners come out in
increasing (distance, option vector read left to right): a heap of frontier corners, each corner pushed once
by its one parent (its last moved feature one option nearer, or that feature kept), and a parent is never
after its child in that order (one distance less is no more, rounding being monotone; the vector is less).
Listing k corners costs about k x features heap steps, where merging every feature's options into the k best
costs k x options per feature: 10 to 40 times less at 2,000 to 10,000 corners.

``options_kernel``: every changeable feature's options for a batch of agents, nearest first (``corners._options``
without ``cuts``, for MACE's unweighted distance: the same rows measured by the same ``_row_distance``, the same
stable order), in one call: an answer's first corners are listed per request, where numpy's steps on one agent's
few dozen options cost more than the options (Adult forest: 0.8 ms of a pick's 2.3)."""

from __future__ import annotations

import numba as nb
import numpy as np

from learners.tabular.kernel_helpers import _row_distance, drop_stale_caches


@nb.njit(cache=True, inline="always")
def _less(sums, vecs, a, b):
    """Whether heap entry ``a`` comes before ``b``: the smaller distance, then the smaller option vector."""
    if sums[a] != sums[b]:
        return sums[a] < sums[b]
    for f in range(vecs.shape[1]):
        if vecs[a, f] != vecs[b, f]:
            return vecs[a, f] < vecs[b, f]
    return False


@nb.njit(cache=True, inline="always")
def _swap(sums, vecs, last, i, j):
    sums[i], sums[j] = sums[j], sums[i]
    last[i], last[j] = last[j], last[i]
    for f in range(vecs.shape[1]):
        vecs[i, f], vecs[j, f] = vecs[j, f], vecs[i, f]


@nb.njit(cache=True)
def _sum_of(vec, dist):
    s = 0.0
    for f in range(vec.shape[0]):
        if vec[f] > 0:
            s += dist[f, vec[f] - 1]
    return s


@nb.njit(cache=True)
def best_first(dist, counts, width):
    """(sums (width,), choice (width, F)) the first ``width`` corners of one agent in increasing (distance,
    option vector), the agent itself first; ``dist`` (F, n) each feature's finite option distances, nearest first
    (``counts`` of them; the rest ignored). ``choice``: per feature the option's index, -1 where it is kept.
    Where the agent has fewer corners, the rest are inf and all kept."""
    F = dist.shape[0]
    cap = width * (F + 1) + 1  # each corner listed pushes at most F + 1 children
    hs = np.empty(cap)
    hv = np.zeros((cap, F), np.int32)
    hl = np.empty(cap, np.int64)  # the corner's last moved feature (-1: none)
    sums = np.full(width, np.inf)
    choice = np.full((width, F), -1, np.int64)
    hs[0], hl[0], size = 0.0, -1, 1
    vec = np.zeros(F, np.int32)
    for out in range(width):
        if size == 0:
            break
        sums[out] = hs[0]
        for f in range(F):
            vec[f] = hv[0, f]
            choice[out, f] = vec[f] - 1
        p = hl[0]
        size -= 1  # pop: the last entry to the root, sifted down
        if size > 0:
            _swap(hs, hv, hl, 0, size)
            i = 0
            while True:
                c = 2 * i + 1
                if c >= size:
                    break
                if c + 1 < size and _less(hs, hv, c + 1, c):
                    c += 1
                if not _less(hs, hv, c, i):
                    break
                _swap(hs, hv, hl, i, c)
                i = c
        # children: the last moved feature one option farther, or a later feature moved to its nearest option
        for q in range(max(p, 0), F):
            if q == p:
                if vec[q] >= counts[q]:
                    continue
                vec[q] += 1
            else:
                if counts[q] == 0:
                    continue
                vec[q] = 1
            hs[size] = _sum_of(vec, dist)
            hl[size] = q
            for f in range(F):
                hv[size, f] = vec[f]
            i = size
            size += 1
            while i > 0:  # sift up
                up = (i - 1) // 2
                if not _less(hs, hv, i, up):
                    break
                _swap(hs, hv, hl, i, up)
                i = up
            if q == p:
                vec[q] -= 1
            else:
                vec[q] = 0
    return sums, choice


@nb.njit(cache=True, nogil=True)
def best_first_many(dist, counts, width):
    """``best_first`` of each agent: ``dist`` (N, F, n), ``counts`` (N, F); (N, width) sums, (N, width, F) choice."""
    N, F = counts.shape
    sums = np.empty((N, width))
    choice = np.empty((N, width, F), np.int64)
    for a in range(N):
        sums[a], choice[a] = best_first(dist[a], counts[a], width)
    return sums, choice


@nb.njit(cache=True)
def options_kernel(X, lo, hi, kinds, cols, col_start, vals, up, down, val_start, numeric, span, raw_of_column, n_raw,
                   a, b, g):
    """Each feature's options for agents ``X`` (N, D) in their boxes ``lo``, ``hi``: (dist (N, F, n), order (N, F, n),
    counts (N, F)): per agent and feature the distances of the agent with only that feature changed, nearest first
    (inf for an option out of its box, past ``counts``), and the option each place holds (a stable sort: ties in the
    options' order). Feature f (``kinds`` 0: one column, ``cols[col_start[f]]``, to each of ``vals[val_start[f]:
    val_start[f + 1]]`` taken upward where ``up`` and downward where ``down``; 1: a one-hot group ``cols[col_start[f]:
    col_start[f + 1]]`` set to each of its columns)."""
    N, D = X.shape
    F = kinds.shape[0]
    width = 1
    for f in range(F):
        width = max(width, col_start[f + 1] - col_start[f] if kinds[f] == 1 else val_start[f + 1] - val_start[f])
    dist = np.full((N, F, width), np.inf)
    order = np.zeros((N, F, width), np.int64)
    counts = np.zeros((N, F), np.int64)
    row = np.empty(D)
    buf = np.empty(n_raw)
    d = np.empty(width)
    for i in range(N):
        x = X[i]
        for f in range(F):
            c0, c1 = col_start[f], col_start[f + 1]
            if kinds[f] == 1:  # a one-hot group: another of its columns on, where the box lets every one go
                n = c1 - c0
                free = True
                for q in range(c0, c1):
                    free = free and lo[i, cols[q]] <= 0.0
                for k in range(n):
                    ck = cols[c0 + k]
                    d[k] = np.inf
                    if free and not x[ck] > 0.5 and hi[i, ck] >= 1.0:
                        row[:] = x
                        for q in range(c0, c1):
                            row[cols[q]] = 1.0 if q == c0 + k else 0.0
                        d[k] = _row_distance(x, row, numeric, span, raw_of_column, buf, a, b, g)
            else:  # one column: a value of its own, in the box, on the side the value's copy is for
                c = cols[c0]
                v0 = val_start[f]
                n = val_start[f + 1] - v0
                for k in range(n):
                    v = vals[v0 + k]
                    side = up[v0 + k] if v > x[c] else down[v0 + k]
                    d[k] = np.inf
                    if v >= lo[i, c] - 1e-12 and v <= hi[i, c] + 1e-12 and np.abs(v - x[c]) > 1e-12 and side:
                        row[:] = x
                        row[c] = v
                        d[k] = _row_distance(x, row, numeric, span, raw_of_column, buf, a, b, g)
            o = np.argsort(d[:n], kind="mergesort")
            for k in range(n):
                dist[i, f, k] = d[o[k]]
                order[i, f, k] = o[k]
                counts[i, f] += d[o[k]] < np.inf
    return dist, order, counts


@nb.njit(cache=True)
def side_counts(rows, cuts, cut_start, columns):
    """(M, U) per row of ``rows`` (M, D) and column ``columns[u]``, how many of the column's sorted split points
    ``cuts[cut_start[j]:cut_start[j + 1]]`` lie below the value (``np.searchsorted`` left: a value on a cut does
    not count it). Rows that every split sends alike have the same counts."""
    out = np.empty((rows.shape[0], columns.shape[0]), np.int64)
    for r in range(rows.shape[0]):
        for u in range(columns.shape[0]):
            j = columns[u]
            a, b = cut_start[j], cut_start[j + 1]
            v = rows[r, j]
            while a < b:  # the first cut >= v
                m = (a + b) // 2
                if cuts[m] < v:
                    a = m + 1
                else:
                    b = m
            out[r, u] = a - cut_start[j]
    return out


drop_stale_caches(globals())  # the helpers' code changed: compile these kernels again
