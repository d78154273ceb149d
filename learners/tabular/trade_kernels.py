"""Compiled kernels of the polish's trades (numba; ``polish.trade_sweep``): a changed numeric column
gives some of its change back and a partner column moves on by the distance that frees. A round up
to its model call is ``trade_round_kernel`` (the give-backs, the distance each frees, the partner
moves of ``trade_moves_kernel``), the step after it ``trade_pick_kernel``, which also picks the
polish's drop of a feature (``polish.polish``).

Each kernel is one loop over agents, so an agent's result never depends on the other agents of its
batch. Each replaced numpy steps, kept in the tests as the reference it must equal bit for bit:

- ``trade_moves_kernel`` (with ``_walk_crossings``, ``_trade_room``, ``_trade_move``): the numpy
  partner moves (share ladders, a forest's split crossings within the room);
  ``tests/test_trade_kernels.py::test_trade_moves_are_the_numpy_ones``.
- ``trade_round_kernel`` (with ``_split_back``, a give-back to a split): a numpy round of the sweep
  up to its model call; ``test_trade_sweep_is_the_numpy_sweep`` (the whole sweep against the numpy
  sweep) and, per entry, ``tests/test_polish_kernels.py::test_split_walks_match_the_sorted_crossings``.
- ``trade_pick_kernel``: the rows built, their distances and ``first_within`` after the model call;
  ``test_trade_sweep_is_the_numpy_sweep`` and ``test_polish_drops_a_feature_as_the_numpy_step``.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from learners.tabular.kernel_helpers import _crossing, _row_distance_rules, _variant_into, drop_stale_caches


@nb.njit(cache=True, inline="always")
def _walk_crossings(t, u, lft, n, col, s, x, c, r, rounded_col, out_row):
    """The first ``len(out_row)`` split crossings of column ``col`` beyond ``c`` in direction ``s`` and at
    most ``r`` past it, nearest first, written into ``out_row`` (left as it is past the last)."""
    width = out_row.shape[0]
    k = 0
    # start a little behind c: a split's crossing is within a float32 step of it, an integer column's
    # within one more unit, so no crossing before the start is ahead of c
    tol = (1.0 if rounded_col else 0.0) + 1e-6 * (1.0 + np.abs(c))
    if s > 0:
        j, step, end = max(np.searchsorted(t[col, :n], c - tol) - 1, 0), 1, n
    else:
        j, step, end = min(np.searchsorted(t[col, :n], c + tol, side="right"), n - 1), -1, -1
    while j != end and k < width:
        v = _crossing(t, u, lft, col, j, x)
        if rounded_col:
            v = np.ceil(v - 1e-9) if v > x else np.floor(v + 1e-9)
        ahead = s * (v - c)
        if ahead > r + 1e-12:
            break  # sorted: every later crossing is farther still
        if ahead > 1e-12:
            out_row[k] = v
            k += 1
        j += step


@nb.njit(cache=True, inline="always")
def _trade_room(given, freed, cj, xj, cv, sg, a_w, bg, w):
    """The normalized room a give-back freeing ``freed`` leaves partner column ``cj`` (agent's value
    ``xj``, answer's ``cv``) in direction ``sg`` (0 up, 1 down) at cost weight ``w`` that way; 0 where
    it may not move that way (it is the column given back, or it changed the other way)."""
    gj = cv - xj
    room = (freed - a_w * w * (np.abs(gj) <= 1e-12)) / (bg * w)
    if given == cj or not room > 1e-12 or not gj * (1.0 - 2.0 * sg) >= 0:
        return 0.0
    return room


@nb.njit(cache=True, inline="always")
def _trade_move(room, share, cj, cv, lo, hi, sg, span, rounded):
    """Partner column ``cj`` moved on from ``cv`` by ``share`` of ``room`` (an integer column's step
    rounded up), clipped into [lo, hi]."""
    step = room * share * span[cj]
    if rounded[cj]:
        step = np.ceil(step - 1e-9)
    return min(max(cv + (1.0 - 2.0 * sg) * step, lo), hi)


@nb.njit(cache=True)
def trade_moves_kernel(agent, given, freed, xm, cm, lom, him, num, span, rounded, shares, a_w, bg, trees, t, u, lft,
                       n_splits, wdir):
    """The moves of ``polish.trade_sweep``'s partner columns, per give-back: entry e (agent ``agent[e]``,
    column ``given[e]`` given back) frees ``freed[e, b]`` of distance with its b-th give-back; every
    other mutable numeric column (position m in ``num``; ``xm``, ``cm``, ``lom``, ``him`` (n, M): the
    agent's value, the answer's, its reachable box) may then move on, either way if unchanged, by
    ``shares`` of the normalized room ``(freed - a_w w [m unchanged]) / (bg w)`` (``w = wdir[m, direction]``:
    the rules' cost weight of that move, 1 without; an integer column rounded up), clipped into the box.
    A tree ensemble (``trees``) moves only to the split crossings within that room, the first ``len(shares)`` of them (walked once per agent, partner and direction, as far
    as its widest room). Entries come grouped by agent. Returns (e, b, m, value) per move, in the
    order e, b, m, direction (up first), share or crossing."""
    E, B = freed.shape
    M, L = num.shape[0], shares.shape[0]
    cap = max(16, E * B * M * 2 * L)
    out_e, out_b, out_m = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64)
    out_v = np.empty(cap)
    n_out = 0
    widest = np.empty((M, 2))
    W = np.full((M, 2, L), np.nan)
    start = 0
    while start < E:
        a = agent[start]
        stop = start
        while stop < E and agent[stop] == a:
            stop += 1
        if trees:  # each partner's crossings either way, as far as the widest room of the agent's entries
            widest[:] = -np.inf
            for e in range(start, stop):
                for b in range(B):
                    for m in range(M):
                        for sg in range(2):
                            room = _trade_room(given[e], freed[e, b], num[m], xm[a, m], cm[a, m], sg, a_w, bg,
                                               wdir[m, sg])
                            if room > 0:  # the ladder is monotone: its last move is the farthest
                                far = _trade_move(room, shares[L - 1], num[m], cm[a, m], lom[a, m], him[a, m], sg,
                                                  span, rounded)
                                widest[m, sg] = max(widest[m, sg], (1.0 - 2.0 * sg) * (far - cm[a, m]))
            for m in range(M):
                for sg in range(2):
                    W[m, sg, :] = np.nan
                    if np.isfinite(widest[m, sg]):
                        cj = num[m]
                        _walk_crossings(t, u, lft, n_splits[cj], cj, 1.0 - 2.0 * sg, xm[a, m], cm[a, m], widest[m, sg],
                                        rounded[cj], W[m, sg])
        for e in range(start, stop):
            for b in range(B):
                for m in range(M):
                    for sg in range(2):
                        room = _trade_room(given[e], freed[e, b], num[m], xm[a, m], cm[a, m], sg, a_w, bg, wdir[m, sg])
                        if not room > 0:
                            continue
                        if not trees:
                            for k in range(L):
                                out_e[n_out], out_b[n_out], out_m[n_out] = e, b, m
                                out_v[n_out] = _trade_move(room, shares[k], num[m], cm[a, m], lom[a, m], him[a, m], sg,
                                                           span, rounded)
                                n_out += 1
                            continue
                        s = 1.0 - 2.0 * sg
                        reach = s * (_trade_move(room, shares[L - 1], num[m], cm[a, m], lom[a, m], him[a, m], sg, span,
                                                 rounded) - cm[a, m])
                        for k in range(L):  # the crossings within this entry's own room (a prefix: nearest first)
                            w = W[m, sg, k]
                            if w == w and s * (w - cm[a, m]) <= reach + 1e-12:
                                out_e[n_out], out_b[n_out], out_m[n_out], out_v[n_out] = e, b, m, w
                                n_out += 1
        start = stop
    return out_e[:n_out], out_b[:n_out], out_m[:n_out], out_v[:n_out]


@nb.njit(cache=True, inline="always")
def _split_back(t, u, lft, n, col, x, c, k, default):
    """Column ``col`` moved back from ``c`` toward the agent's ``x`` across the splits it crossed: to
    the k-th split back from ``c`` (k > 0) or the split nearest the agent (k = -1), ``x`` when there
    are too few; ``default`` where the column has no splits (``n`` = 0)."""
    if n == 0:
        return default
    gc = c - x
    idx = np.empty(n, np.int64)
    key = np.empty(n)
    m = 0
    for j in range(n):
        v = _crossing(t, u, lft, col, j, x)
        gx = v - x
        if np.sign(gx) == np.sign(gc) and abs(gx) < abs(gc) - 1e-12:  # crossed, before c's own
            idx[m] = j
            key[m] = -abs(gx) if k > 0 else abs(gx)
            m += 1
    pick = min(abs(k), n) - 1
    if pick < m:
        return _crossing(t, u, lft, col, idx[np.argsort(key[:m], kind="mergesort")[pick]], x)
    return x


@nb.njit(cache=True)
def trade_round_kernel(x, c, lo, hi, num, numeric, span, raw_of_column, n_raw, rounded, a_w, b_w, g_w, steps,
                       int_shares, real_shares, back_splits, shares, trees, t, u, lft, n_splits, cost, dir_col):
    """One round of ``polish.trade_sweep`` up to its model call, for answers ``c`` of agents ``x``
    (n, D): each changed numeric column (position p in ``num``) gives back, B ways (``steps``, or
    ``int_shares`` of a change over twice the largest step, for an integer column; ``real_shares``
    of a real one's change, or on a tree ensemble the split ``back_splits[b]`` where it is not 0), the
    distance each give-back frees, and the partner moves (``trade_moves_kernel``). Returns the
    answers' distances (n,) and the trades as variants of ``c``: agent (T,), columns and values
    (T, 2) (the column given back, then the partner), in the order of the numpy steps it replaced.
    ``cost`` (n_raw, 2; 0 rows: none) and ``dir_col``: the rules' cost weights, in every distance."""
    n, D = x.shape
    M, B = num.shape[0], steps.shape[0]
    buf = np.empty(n_raw)
    d_now = np.empty(n)
    E = 0
    for i in range(n):
        d_now[i] = _row_distance_rules(x[i], c[i], numeric, span, raw_of_column, buf, a_w, b_w, g_w, cost, dir_col)
        for p in range(M):
            E += np.abs(c[i, num[p]] - x[i, num[p]]) > 1e-12
    a_i, ci = np.empty(E, np.int64), np.empty(E, np.int64)
    e = 0
    for i in range(n):  # agent by agent, columns in order: np.nonzero's order
        for p in range(M):
            if np.abs(c[i, num[p]] - x[i, num[p]]) > 1e-12:
                a_i[e], ci[e] = i, num[p]
                e += 1
    backs = np.empty((E, B))
    freed = np.empty((E, B))
    row = np.empty(D)
    for e in range(E):
        a, col = a_i[e], ci[e]
        g = c[a, col] - x[a, col]
        ag = np.abs(g)
        for b in range(B):
            if rounded[col]:
                step = np.ceil(int_shares[b] * ag) if ag > 2 * steps[B - 1] else steps[b]
            else:
                step = real_shares[b] * ag
            backs[e, b] = c[a, col] - np.sign(g) * step if ag > step + 1e-12 else x[a, col]
            if trees and back_splits[b] != 0 and not rounded[col]:
                backs[e, b] = _split_back(t, u, lft, n_splits[col], col, x[a, col], c[a, col], back_splits[b],
                                          backs[e, b])
        for d in range(D):
            row[d] = c[a, d]
        for b in range(B):
            row[col] = backs[e, b]
            freed[e, b] = d_now[a] - _row_distance_rules(x[a], row, numeric, span, raw_of_column, buf, a_w, b_w, g_w,
                                                         cost, dir_col)
    xm, cm, lom, him = np.empty((n, M)), np.empty((n, M)), np.empty((n, M)), np.empty((n, M))
    for i in range(n):
        for p in range(M):
            xm[i, p], cm[i, p], lom[i, p], him[i, p] = x[i, num[p]], c[i, num[p]], lo[i, num[p]], hi[i, num[p]]
    wdir = np.ones((M, 2))  # each partner's cost weight up and down
    if cost.shape[0]:
        for p in range(M):
            wdir[p, 0], wdir[p, 1] = cost[raw_of_column[num[p]], 0], cost[raw_of_column[num[p]], 1]
    me, mb, mm, mv = trade_moves_kernel(a_i, ci, freed, xm, cm, lom, him, num, span, rounded, shares, a_w, b_w + g_w,
                                        trees, t, u, lft, n_splits, wdir)
    T = me.shape[0]
    own = np.empty(T, np.int64)
    cols, vals = np.empty((T, 2), np.int64), np.empty((T, 2))
    for q in range(T):
        own[q] = a_i[me[q]]
        cols[q, 0], cols[q, 1] = ci[me[q]], num[mm[q]]
        vals[q, 0], vals[q, 1] = backs[me[q], mb[q]], mv[q]
    return d_now, own, cols, vals


@nb.njit(cache=True)
def trade_pick_kernel(x, c, own, cols, vals, ok, d_now, numeric, span, raw_of_column, n_raw, a_w, b_w, g_w, cost,
                      dir_col):
    """After a model call on variants of the answers ``c`` (row q: ``c[own[q]]`` with ``cols[q]``
    (-1: none) set to ``vals[q]``): per agent its nearest accepted variant (``ok``; ties: the first)
    where nearer than its answer (``d_now``) by more than 1e-12. Returns the agents (ascending) and
    their new rows (k, D). A trade round's last step, and the polish's drop of a feature. ``cost`` and
    ``dir_col``: the rules' cost weights (0 rows: none)."""
    n, D = c.shape
    best = np.full(n, np.inf)
    pick = np.full(n, -1, np.int64)
    buf = np.empty(n_raw)
    row = np.empty(D)
    for q in range(own.shape[0]):
        if not ok[q]:
            continue
        a = own[q]
        _variant_into(row, c[a], cols, vals, q)
        dq = _row_distance_rules(x[a], row, numeric, span, raw_of_column, buf, a_w, b_w, g_w, cost, dir_col)
        if dq < d_now[a] - 1e-12 and dq < best[a]:
            best[a], pick[a] = dq, q
    k = 0
    for a in range(n):
        k += pick[a] >= 0
    agents, rows = np.empty(k, np.int64), np.empty((k, D))
    k = 0
    for a in range(n):
        q = pick[a]
        if q >= 0:
            agents[k] = a
            _variant_into(rows[k], c[a], cols, vals, q)
            k += 1
    return agents, rows


drop_stale_caches(globals())  # the helpers' code changed: compile these kernels again
