"""Compiled kernels of the tabular geometry (numba; ``learners/tabular/geometry.py``): the projection
of candidates before a model call, MACE's distance, and the ranking of the accepted rows after it.

Each kernel is one loop over agents or rows, so an agent's result never depends on the other agents
of its batch. Each replaced numpy steps, kept in ``tests/test_geometry_kernels.py`` as the reference
it must equal bit for bit:

- ``project_kernel``: ``WorldGeometry.project``'s numpy steps (NaN and infinities, the clip, one-hot
  groups, integers rounded away from the agent); ``test_compiled_projection_is_the_numpy_one_bit_for_bit``.
- ``deltas_kernel``, ``distance_kernel``, ``weighted_distance_kernel``: the numpy formula of
  ``WorldGeometry.deltas`` and ``.distance`` (MACE's Eq. 3, numpy's summation order; under the rules' cost
  weights too); ``test_compiled_distance_is_the_numpy_formula_bit_for_bit``,
  ``test_compiled_weighted_distance_is_the_numpy_formula_bit_for_bit``.
- ``accepted_distances_kernel``: ``geometry.accepted_distances`` after its model call;
  ``test_accepted_distances_kernel_is_the_numpy_one``.
- ``nearest_accepted_kernel``: ``geometry.nearest_accepted_variants`` after its model call (the rows
  built, the agent itself dropped, a stable lexsort by agent and distance);
  ``test_nearest_accepted_kernel_is_the_numpy_ranking``.
- ``first_within_kernel``: ``geometry.first_within``'s ``np.lexsort((key, group))`` firsts;
  ``test_first_within_is_the_lexsort_first``.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from learners.tabular.kernel_helpers import (
    _away,
    _pairwise_sum,
    _row_deltas,
    _row_distance,
    _row_distance_rules,
    _variant_into,
    drop_stale_caches,
)


@nb.njit(cache=True)
def project_kernel(X, C, lo, hi, group_cols, group_ends, rounded):
    """``WorldGeometry.project`` per candidate row, the same operations in the same order (so the
    same bits): NaN to 0 and infinities to the largest floats, clipped into the agent's box; each
    one-hot group set to its largest entry (the first of ties); integer columns rounded away from
    the agent, then clipped again. ``group_cols`` lists the groups' columns back to back, group g
    ending at ``group_ends[g]``."""
    N, K, D = C.shape
    out = np.empty_like(C)
    big = np.finfo(np.float64).max
    any_rounded = rounded.any()
    for n in range(N):
        for k in range(K):
            row = out[n, k]
            for d in range(D):
                v = C[n, k, d]
                if np.isnan(v):
                    v = 0.0
                elif v == np.inf:
                    v = big
                elif v == -np.inf:
                    v = -big
                row[d] = min(max(v, lo[n, d]), hi[n, d])
            start = 0
            for g in range(group_ends.shape[0]):
                end = group_ends[g]
                best = start
                for q in range(start + 1, end):
                    if row[group_cols[q]] > row[group_cols[best]]:
                        best = q
                for q in range(start, end):
                    row[group_cols[q]] = 1.0 if q == best else 0.0
                start = end
            if any_rounded:
                for d in range(D):
                    if rounded[d]:
                        row[d] = _away(row[d], X[n, d])
                    row[d] = min(max(row[d], lo[n, d]), hi[n, d])
    return out


@nb.njit(cache=True)
def deltas_kernel(X, C, numeric, span, raw_of_column, n_raw):
    """(R, J) ``WorldGeometry.deltas`` of rows ``C`` (R, D) from ``X`` (R, D)."""
    out = np.empty((X.shape[0], n_raw))
    for r in range(X.shape[0]):
        _row_deltas(X[r], C[r], numeric, span, raw_of_column, out[r])
    return out


@nb.njit(cache=True)
def distance_kernel(X, C, numeric, span, raw_of_column, n_raw, a, b, g):
    """(R,) MACE's Eq. 3 distance of rows ``C`` (R, D) from ``X`` (R, D): ``a`` * changed raw features
    + ``b`` * their summed normalized deltas (numpy's summation order) + ``g`` * the largest."""
    out = np.empty(X.shape[0])
    buf = np.empty(n_raw)
    for r in range(X.shape[0]):
        out[r] = _row_distance(X[r], C[r], numeric, span, raw_of_column, buf, a, b, g)
    return out


@nb.njit(cache=True)
def weighted_distance_kernel(X, C, numeric, span, raw_of_column, n_raw, a, b, g, cost, dir_col):
    """(R,) ``WorldGeometry._weighted``'s numpy formula (Eq. 3 under the rules' cost weights) row by row, the
    same bits: each raw feature's delta and change count times the weight of the direction it moved (``cost``
    (n_raw, 2): up, down; ``dir_col``: the column that tells the direction, -1 for a category: up), the
    counts and the deltas each added in numpy's pairwise order, the largest weighted delta."""
    out = np.empty(X.shape[0])
    buf = np.empty(n_raw)
    cnt = np.empty(n_raw)
    wd = np.empty(n_raw)
    for r in range(X.shape[0]):
        _row_deltas(X[r], C[r], numeric, span, raw_of_column, buf)
        top = -np.inf
        for j in range(n_raw):
            k = dir_col[j]
            w = cost[j, 1] if k >= 0 and C[r, k] < X[r, k] else cost[j, 0]
            cnt[j] = (1.0 if buf[j] > 1e-12 else 0.0) * w
            wd[j] = buf[j] * w
            if not wd[j] <= top:  # numpy's max: a NaN wins
                top = wd[j]
        out[r] = a * _pairwise_sum(cnt) + b * _pairwise_sum(wd) + g * (top if n_raw else 0.0)
    return out


@nb.njit(cache=True)
def accepted_distances_kernel(X, C, ok, numeric, span, raw_of_column, n_raw, a, b, g):
    """(N, K) ``geometry.accepted_distances`` after its model call: the distance of each candidate
    ``C[n, k]`` the model accepts (``ok``) from its agent ``X[n]``, inf where not accepted or where
    it is the agent itself."""
    N, K, D = C.shape
    out = np.full((N, K), np.inf)
    buf = np.empty(n_raw)
    for n in range(N):
        for k in range(K):
            if not ok[n, k]:
                continue
            for d in range(D):
                if np.abs(C[n, k, d] - X[n, d]) > 1e-12:
                    out[n, k] = _row_distance(X[n], C[n, k], numeric, span, raw_of_column, buf, a, b, g)
                    break
    return out


@nb.njit(cache=True)
def nearest_accepted_kernel(X, base, index, cols, vals, ok, owner, k, numeric, span, raw_of_column, n_raw, a, b, g,
                            cost, dir_col):
    """``geometry.nearest_accepted_variants`` after its model call: per agent of ``X`` (N, D) the ``k``
    nearest accepted variant rows (``ok``; row t is ``base[index[t]]`` with ``cols[t]`` set to
    ``vals[t]``, proposed for agent ``owner[t]``) that move it, nearest first, ties in row order (NaN
    last): their distances (N, k; inf where fewer), positions (N, k; -1) and rows (N, k, D; NaN).
    Only the kept rows are stored. ``cost`` (n_raw, 2; 0 rows: none) and ``dir_col``: the rules' cost
    weights (``_row_distance_weighted``), by which the rows are then ranked."""
    N, D = X.shape
    best = np.full((N, k), np.inf)
    pos = np.full((N, k), -1, np.int64)
    filled = np.zeros(N, np.int64)
    row = np.empty(D)
    buf = np.empty(n_raw)
    for t in range(index.shape[0]):
        if not ok[t]:
            continue
        i = owner[t]
        _variant_into(row, base[index[t]], cols, vals, t)
        moved = False
        for d in range(D):
            if np.abs(row[d] - X[i, d]) > 1e-12:
                moved = True
                break
        if not moved:  # the agent itself is no answer
            continue
        v = _row_distance_rules(X[i], row, numeric, span, raw_of_column, buf, a, b, g, cost, dir_col)
        m = filled[i]
        if m == k:  # full: only a strictly nearer row (a number before a NaN) gets in
            w = best[i, k - 1]
            if not (v < w or (w != w and v == v)):
                continue
            at = k - 1
        else:
            at = m
            filled[i] = m + 1
        while at > 0:  # after the equal ones: ties stay in row order
            w = best[i, at - 1]
            if not (v < w or (w != w and v == v)):
                break
            best[i, at] = w
            pos[i, at] = pos[i, at - 1]
            at -= 1
        best[i, at] = v
        pos[i, at] = t
    rows = np.full((N, k, D), np.nan)
    for i in range(N):
        for r in range(filled[i]):
            _variant_into(rows[i, r], base[index[pos[i, r]]], cols, vals, pos[i, r])
    return best, pos, rows


@nb.njit(cache=True)
def first_within_kernel(key, group):
    """Per group (ascending; ``group`` >= 0), the index of its entry with the smallest ``key``, ties
    and NaN as ``np.lexsort((key, group))`` orders them: the lower index, NaN after every number."""
    G = 0
    for i in range(group.shape[0]):
        G = max(G, group[i] + 1)
    best = np.full(G, -1, np.int64)
    for i in range(group.shape[0]):
        g = group[i]
        b = best[g]
        if b < 0 or key[i] < key[b] or (np.isnan(key[b]) and not np.isnan(key[i])):
            best[g] = i
    n = 0
    for g in range(G):
        if best[g] >= 0:
            n += 1
    out = np.empty(n, np.int64)
    n = 0
    for g in range(G):
        if best[g] >= 0:
            out[n] = best[g]
            n += 1
    return out


drop_stale_caches(globals())  # the helpers' code changed: compile these kernels again
