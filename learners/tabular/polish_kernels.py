"""Compiled kernels of the polish (numba; ``learners/tabular/polish.py``): its scaled answers, its
line search, a forest's cell clip and its edge sweep. Steps whose work per row is a few operations,
where numpy's per-call overhead and temporaries cost more than the arithmetic.

Each kernel is one loop over rows or agents, so an agent's result never depends on the other agents
of its batch. Each replaced numpy steps, kept in ``tests/test_polish_kernels.py`` as the reference
it must equal bit for bit:

- ``scaled_rows_kernel``: the polish's scaled answers (numeric columns scaled toward the agent,
  integer ones rounded away from it, clipped); ``test_scaled_rows_are_the_numpy_rows``.
- ``probe_values_kernel``, ``probe_update_kernel``: the line search's probes and its segments after
  a model call; ``test_line_search_probes_and_updates_are_the_numpy_ones``.
- ``cell_points_kernel``: ``polish.cell_clip``'s point of a row's cell nearest the agent;
  ``test_cell_points_are_the_numpy_ones``.
- ``edge_crossings_kernel``, ``edge_apply_kernel``: ``polish._edge_sweep``'s crossings per changed
  column and its pick after the model call; ``test_edge_sweep_is_the_numpy_sweep`` and
  ``test_split_walks_match_the_sorted_crossings``.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from learners.tabular.kernel_helpers import _away, _crossing, drop_stale_caches


@nb.njit(cache=True)
def edge_crossings_kernel(table, r, act, x, c, t, u, lft, n_splits, rounded):
    """The crossings an edge sweep tries for the r-th changed column of each agent ``act[i]``
    (``table`` (n, m): each agent's changed columns in order, -1 padded): each split crossing of the
    column from the agent's value (an integer column's first integer at least that far) on the side
    of its answer ``c`` and nearer the agent than it, as (agent, column, value), by agent and then
    split (no (entries, most splits) array, mostly empty)."""
    n = 0
    for i in range(table.shape[0]):
        if table[i, r] >= 0:
            n += n_splits[table[i, r]]
    own, col_of, val = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n)
    k = 0
    for i in range(table.shape[0]):
        col = table[i, r]
        if col < 0:
            continue
        a = act[i]
        xv, cv = x[a, col], c[a, col]
        now, side = np.abs(cv - xv), np.sign(cv - xv)
        for j in range(n_splits[col]):
            v = _crossing(t, u, lft, col, j, xv)
            if rounded[col]:
                v = _away(v, xv)
            if np.abs(v - xv) < now - 1e-12 and np.sign(v - xv) == side:
                own[k], col_of[k], val[k] = a, col, v
                k += 1
    return own[:k], col_of[:k], val[:k]


@nb.njit(cache=True)
def edge_apply_kernel(own, col_of, val, ok, x, c, moved):
    """Each (agent, column)'s accepted crossing nearest the agent (``ok``; ties: the first) written
    into ``c`` in place, its agent marked in ``moved``: the edge sweep's step after its model call
    (entries of one agent and column are consecutive, as ``edge_crossings_kernel`` makes them)."""
    n = own.shape[0]
    q = 0
    while q < n:
        end = q
        while end < n and own[end] == own[q] and col_of[end] == col_of[q]:
            end += 1
        best = -1
        for p in range(q, end):
            if ok[p] and (best < 0 or np.abs(val[p] - x[own[p], col_of[p]]) < np.abs(val[best] - x[own[best], col_of[best]])):
                best = p
        if best >= 0:
            c[own[best], col_of[best]] = val[best]
            moved[own[best]] = True
        q = end


@nb.njit(cache=True)
def scaled_rows_kernel(x, c, S, num_cols, rounded, lo, hi):
    """(n * P, D) the polish's scaled answers: row i * P + p is ``c[i]`` with each numeric column
    (``num_cols``) at ``x + S[i, p] * (c - x)`` (an integer column's rounded away from the agent),
    clipped into [``lo``, ``hi``]: the numpy steps it replaced, in their order (the same bits)."""
    n, P = S.shape
    D = c.shape[1]
    out = np.empty((n * P, D))
    for i in range(n):
        for p in range(P):
            r = i * P + p
            for d in range(D):
                out[r, d] = c[i, d]
            for j in range(num_cols.shape[0]):
                d = num_cols[j]
                v = x[i, d] + S[i, p] * (c[i, d] - x[i, d])
                if rounded[d]:
                    v = _away(v, x[i, d])
                out[r, d] = min(max(v, lo[i, d]), hi[i, d])
    return out


@nb.njit(cache=True)
def probe_values_kernel(near, far, t, integral):
    """(n, P) the line search's probes ``near + (far - near) * t`` per item (an integer item's rounded
    away from ``near``: the first integer step at least as far) and (n, P) whether each differs from
    ``far`` (a probe at ``far`` is known accepted)."""
    n, P = near.shape[0], t.shape[0]
    V = np.empty((n, P))
    live = np.empty((n, P), np.bool_)
    for i in range(n):
        for p in range(P):
            v = near[i] + (far[i] - near[i]) * t[p]
            if integral[i]:
                v = near[i] + np.sign(far[i] - near[i]) * np.ceil(abs(v - near[i]) - 1e-9)
            V[i, p] = v
            live[i, p] = v != far[i]
    return V, live


@nb.njit(cache=True)
def probe_update_kernel(V, ok, live, near, far):
    """The segments after a round of probes ``V`` (n, P): where a live probe was accepted (``ok``),
    [the probe before the first accepted one (or ``near``), that one]; else [the last live probe
    (or ``near``), ``far``]. New arrays."""
    n, P = V.shape
    new_near, new_far = near.copy(), far.copy()
    for i in range(n):
        first, last = -1, -1
        for p in range(P):
            if live[i, p]:
                last = p
                if first < 0 and ok[i, p]:
                    first = p
        if first >= 0:
            new_near[i] = V[i, first - 1] if first > 0 else near[i]
            new_far[i] = V[i, first]
        elif last >= 0:
            new_near[i] = V[i, last]
    return new_near, new_far


@nb.njit(cache=True)
def cell_points_kernel(leaves, offsets, node_lo, node_hi, lo, hi, x, c, rounded, group_cols, group_ends):
    """Per row i, the point of its cell nearest the agent ``x[i]``: the agent clipped into the box of
    the leaves it reaches (``leaves`` (n, trees), ids within each tree; ``offsets``: each tree's first
    row of the stacked (nodes, D) ``node_lo``, ``node_hi``) intersected with its reachable box
    [``lo``, ``hi``] (n, D); integer columns (``rounded``, one-hot entries too) rounded inward, a one-hot group (columns
    ``group_cols``, each group ending at ``group_ends``) the row ``c[i]``'s own where the clip breaks
    it. Returns the points (n, D) and whether each lies in its box (a rounding may leave it)."""
    n, D = x.shape
    P = np.empty((n, D))
    inside = np.ones(n, np.bool_)
    box_lo = np.empty(D)
    box_hi = np.empty(D)
    for i in range(n):
        for d in range(D):
            box_lo[d] = lo[i, d]
            box_hi[d] = hi[i, d]
        for j in range(leaves.shape[1]):
            k = offsets[j] + leaves[i, j]
            for d in range(D):
                box_lo[d] = max(box_lo[d], node_lo[k, d])
                box_hi[d] = min(box_hi[d], node_hi[k, d])
        for d in range(D):
            v = min(max(x[i, d], box_lo[d]), box_hi[d])
            if rounded[d]:
                if v > x[i, d]:
                    v = np.ceil(v - 1e-9)
                elif v < x[i, d]:
                    v = np.floor(v + 1e-9)
            P[i, d] = v
        start = 0
        for g in range(group_ends.shape[0]):
            total = 0.0
            for m in range(start, group_ends[g]):
                total += P[i, group_cols[m]]
            if abs(total - 1) > 1e-9:
                for m in range(start, group_ends[g]):
                    P[i, group_cols[m]] = c[i, group_cols[m]]
            start = group_ends[g]
        for d in range(D):
            if P[i, d] < box_lo[d] - 1e-12 or P[i, d] > box_hi[d] + 1e-12:
                inside[i] = False
                break
    return P, inside


drop_stale_caches(globals())  # the helpers' code changed: compile these kernels again
