"""Compiled inner loops of the tabular searches (numba): enumerations whose work per row is a few
additions, where numpy's per-call overhead and temporaries cost more than the arithmetic.

Each kernel is one loop over agents, so an agent's result never depends on the other agents of
its batch (a request answered alone gets the answer it gets in a batch)."""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True, inline="always")
def _away(v, x):
    """An integer column's value: the first integer at least as far from the agent's ``x`` as ``v``
    (rounded away from it; ``WorldGeometry.project``'s rounding, the same bits)."""
    g = v - x
    return x + np.sign(g) * np.ceil(np.abs(g) - 1e-9)


@nb.njit(cache=True)
def _grow2(a, n):
    out = np.empty((max(n, 2 * a.shape[0]), a.shape[1]), a.dtype)
    out[: a.shape[0]] = a
    return out


@nb.njit(cache=True)
def _grow1(a, n):
    out = np.empty(max(n, 2 * a.shape[0]), a.dtype)
    out[: a.shape[0]] = a
    return out


@nb.njit(cache=True)
def _farthest(d, k):
    """The indices of the ``k`` largest entries of ``d``, largest first, ties in index order: what
    ``np.argsort(-d, kind="mergesort")[:k]`` gives, by a partition and a sort of the ``k`` only."""
    n = d.shape[0]
    if k >= n:
        return np.argsort(-d, kind="mergesort")
    thr = np.partition(d, n - k)[n - k]  # the k-th largest value
    sel = np.empty(k, np.int64)
    m = 0
    for j in range(n):  # above the threshold: all of them (fewer than k)
        if d[j] > thr:
            sel[m] = j
            m += 1
    for j in range(n):  # at it: the first ones in index order, as a stable sort keeps them
        if m == k:
            break
        if d[j] == thr:
            sel[m] = j
            m += 1
    return sel[np.argsort(-d[sel], kind="mergesort")]  # each value's entries are in index order: stable


@nb.njit(cache=True)
def combinations_kernel(step, best, a, b, g, cap, partial_cap):
    """Per agent i, the combinations of options (``step[i, f, o]``: the normalized change of feature
    f's option o, NaN where none; each feature may also stay unchanged) whose distance
    ``a * changed + b * sum + g * max`` stays below ``best[i]``, enumerated feature by feature: a
    partial combination is dropped as soon as it cannot win, and where more than ``partial_cap``
    remain only the farthest ``partial_cap`` are extended (a stable sort: ties keep their order).
    Of the complete ones changing two features or more, the farthest ``cap`` are returned,
    farthest first, as (who (T,), pick (T, F): the option per feature, -1 unchanged)."""
    N, F, E = step.shape
    out_who = np.empty(max(16, N), np.int64)
    out_pick = np.empty((max(16, N), F), np.int64)
    n_out = 0
    most = 1  # the most partials a step starts from: (E + 1) ** f, or the cap on them
    for _ in range(F - 1):
        most = min(most * (E + 1), max(partial_cap, 1))
    size = most * (E + 1)  # and makes: each extends at most E + 1 ways
    # a partial is its parent among the last step's partials and its option at this step (-1: unchanged);
    # the picks are read back only for the combinations returned (no row of F picks copied per partial)
    par, opt = np.empty((F, size), np.int64), np.empty((F, size), np.int64)
    par2, opt2 = np.empty(size, np.int64), np.empty(size, np.int64)
    tot, nnz, top = np.empty(size), np.empty(size), np.empty(size)
    tot2, nnz2, top2 = np.empty(size), np.empty(size), np.empty(size)
    fin = np.empty(E, np.int64)  # a feature's options that exist (in order), and the smallest step of them
    for i in range(N):
        lim = best[i] - 1e-12
        tot[0], nnz[0], top[0] = 0.0, 0.0, 0.0
        cnt = 1
        last = -1  # the last step with partials
        for f in range(F):
            n_fin, smallest = 0, np.inf
            for o in range(E):
                if np.isfinite(step[i, f, o]):
                    fin[n_fin] = o
                    n_fin += 1
                    smallest = min(smallest, step[i, f, o])
            new = 0
            for p in range(cnt):
                if a * nnz[p] + b * tot[p] + g * top[p] < lim:  # unchanged
                    par2[new], opt2[new] = p, -1
                    tot2[new], nnz2[new], top2[new] = tot[p], nnz[p], top[p]
                    new += 1
                # the distance grows with the step: where the smallest cannot win, none can
                if n_fin == 0 or a * (nnz[p] + 1) + b * (tot[p] + smallest) + g * max(top[p], smallest) >= lim:
                    continue
                for q in range(n_fin):
                    o = fin[q]
                    add = step[i, f, o]
                    t2, n2, m2 = tot[p] + add, nnz[p] + 1, max(top[p], add)
                    if a * n2 + b * t2 + g * m2 < lim:
                        par2[new], opt2[new] = p, o
                        tot2[new], nnz2[new], top2[new] = t2, n2, m2
                        new += 1
            cnt = new
            pruned = cnt > partial_cap
            if pruned:  # keep the farthest: a combination only just inside the room is the likeliest accepted
                keep = _farthest(a * nnz2[:cnt] + b * tot2[:cnt] + g * top2[:cnt], partial_cap)
                cnt = partial_cap
            for r in range(cnt):  # this step's partials, in order
                k = keep[r] if pruned else r
                par[f, r], opt[f, r] = par2[k], opt2[k]
                tot[r], nnz[r], top[r] = tot2[k], nnz2[k], top2[k]
            if cnt == 0:
                break
            last = f
        if last < F - 1:
            continue
        many = np.flatnonzero(nnz[:cnt] >= 2)  # one feature alone the scan has already tried
        if not len(many):
            continue
        d = a * nnz[many] + b * tot[many] + g * top[many]
        order = many[_farthest(d, min(cap, len(many)))]
        m = len(order)
        if n_out + m > out_who.shape[0]:
            out_who = _grow1(out_who, n_out + m)
            out_pick = _grow2(out_pick, n_out + m)
        for r in range(m):
            out_who[n_out + r] = i
            k = order[r]
            for f in range(F - 1, -1, -1):  # read the picks back along the parents
                out_pick[n_out + r, f] = opt[f, k]
                k = par[f, k]
        n_out += m
    return out_who[:n_out], out_pick[:n_out]


@nb.njit(cache=True)
def combination_columns_kernel(who, pick, cols, levels):
    """``combinations_kernel``'s combinations as variant columns: row r changes column ``cols[f]`` to
    ``levels[who[r], f, pick[r, f]]`` for each f with ``pick[r, f] >= 0``, its changed columns first
    (in feature order), as wide as the most any row changes (-1 and 0 padded): the model walks a
    row's changed columns, and a row changes 2 or 3 of the F mostly."""
    T, F = pick.shape
    w = 1
    for r in range(T):
        n = 0
        for f in range(F):
            n += pick[r, f] >= 0
        w = max(w, n)
    vc = np.full((T, w), -1, np.int64)
    vv = np.zeros((T, w))
    for r in range(T):
        k = 0
        for f in range(F):
            if pick[r, f] >= 0:
                vc[r, k] = cols[f]
                vv[r, k] = levels[who[r], f, pick[r, f]]
                k += 1
    return vc, vv


@nb.njit(cache=True, inline="always")
def _crossing(t, u, lft, col, j, xv):
    """The value just across split j of column ``col`` from ``xv`` (``polish.crossings``, one entry)."""
    return lft[col, j] if t[col, j] >= xv else u[col, j]


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
def _trade_room(given, freed, cj, xj, cv, sg, a_w, bg):
    """The normalized room a give-back freeing ``freed`` leaves partner column ``cj`` (agent's value
    ``xj``, answer's ``cv``) in direction ``sg`` (0 up, 1 down); 0 where it may not move that way (it
    is the column given back, or it changed the other way)."""
    gj = cv - xj
    room = (freed - a_w * (np.abs(gj) <= 1e-12)) / bg
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
                       n_splits):
    """The moves of ``polish.trade_sweep``'s partner columns, per give-back: entry e (agent ``agent[e]``,
    column ``given[e]`` given back) frees ``freed[e, b]`` of distance with its b-th give-back; every
    other mutable numeric column (position m in ``num``; ``xm``, ``cm``, ``lom``, ``him`` (n, M): the
    agent's value, the answer's, its reachable box) may then move on, either way if unchanged, by
    ``shares`` of the normalized room ``(freed - a_w [m unchanged]) / bg`` (an integer column rounded
    up), clipped into the box. A tree ensemble (``trees``) moves only to the split crossings within
    that room, the first ``len(shares)`` of them (walked once per agent, partner and direction, as far
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
                            room = _trade_room(given[e], freed[e, b], num[m], xm[a, m], cm[a, m], sg, a_w, bg)
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
                        room = _trade_room(given[e], freed[e, b], num[m], xm[a, m], cm[a, m], sg, a_w, bg)
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
                       int_shares, real_shares, back_splits, shares, trees, t, u, lft, n_splits):
    """One round of ``polish.trade_sweep`` up to its model call, for answers ``c`` of agents ``x``
    (n, D): each changed numeric column (position p in ``num``) gives back, B ways (``steps``, or
    ``int_shares`` of a change over twice the largest step, for an integer column; ``real_shares``
    of a real one's change, or on a tree ensemble the split ``back_splits[b]`` where it is not 0), the
    distance each give-back frees, and the partner moves (``trade_moves_kernel``). Returns the
    answers' distances (n,) and the trades as variants of ``c``: agent (T,), columns and values
    (T, 2) (the column given back, then the partner), in the order of the numpy steps it replaced."""
    n, D = x.shape
    M, B = num.shape[0], steps.shape[0]
    buf = np.empty(n_raw)
    d_now = np.empty(n)
    E = 0
    for i in range(n):
        d_now[i] = _row_distance(x[i], c[i], numeric, span, raw_of_column, buf, a_w, b_w, g_w)
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
            freed[e, b] = d_now[a] - _row_distance(x[a], row, numeric, span, raw_of_column, buf, a_w, b_w, g_w)
    xm, cm, lom, him = np.empty((n, M)), np.empty((n, M)), np.empty((n, M)), np.empty((n, M))
    for i in range(n):
        for p in range(M):
            xm[i, p], cm[i, p], lom[i, p], him[i, p] = x[i, num[p]], c[i, num[p]], lo[i, num[p]], hi[i, num[p]]
    me, mb, mm, mv = trade_moves_kernel(a_i, ci, freed, xm, cm, lom, him, num, span, rounded, shares, a_w, b_w + g_w,
                                        trees, t, u, lft, n_splits)
    T = me.shape[0]
    own = np.empty(T, np.int64)
    cols, vals = np.empty((T, 2), np.int64), np.empty((T, 2))
    for q in range(T):
        own[q] = a_i[me[q]]
        cols[q, 0], cols[q, 1] = ci[me[q]], num[mm[q]]
        vals[q, 0], vals[q, 1] = backs[me[q], mb[q]], mv[q]
    return d_now, own, cols, vals


@nb.njit(cache=True, inline="always")
def _variant_into(row, base_row, cols, vals, t):
    """``row`` := ``base_row`` with variant t's columns ``cols[t]`` (-1: none) set to ``vals[t]``."""
    for d in range(row.shape[0]):
        row[d] = base_row[d]
    for j in range(cols.shape[1]):
        if cols[t, j] >= 0:
            row[cols[t, j]] = vals[t, j]


@nb.njit(cache=True)
def trade_pick_kernel(x, c, own, cols, vals, ok, d_now, numeric, span, raw_of_column, n_raw, a_w, b_w, g_w):
    """After a model call on variants of the answers ``c`` (row q: ``c[own[q]]`` with ``cols[q]``
    (-1: none) set to ``vals[q]``): per agent its nearest accepted variant (``ok``; ties: the first)
    where nearer than its answer (``d_now``) by more than 1e-12. Returns the agents (ascending) and
    their new rows (k, D). A trade round's last step, and the polish's drop of a feature."""
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
        dq = _row_distance(x[a], row, numeric, span, raw_of_column, buf, a_w, b_w, g_w)
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


@nb.njit(cache=True, inline="always")
def _padding(axes, combos, p, q, k):
    """Does combination q of scan item p sit on padding of an axis but the last? An axis's first NaN
    is the agent's own value; a later one repeats that row."""
    for j in range(k - 1):
        at = combos[q, j]
        if at > 0 and np.isnan(axes[p, j, at]) and np.isnan(axes[p, j, at - 1]):
            return True
    return False


@nb.njit(cache=True, inline="always")
def _axis_blocks(axes, combos, cols, X, ii, block, lo, hi, rows):
    """``block_boxes`` where each block is one whole run of the last axis (the other axes fixed):
    the last axis's values are the same in every block, so they are counted and bounded once per
    item, not once per block (the same min/max steps in the same order: the same values)."""
    n, k = cols.shape
    n_blocks = combos.shape[0] // block
    for p in range(n):
        own_last = X[ii[p], cols[p, k - 1]]
        low_last, high_last, count = own_last, own_last, 0
        for q in range(block):
            v = axes[p, k - 1, q]
            if not np.isnan(v):
                low_last = min(low_last, v)
                high_last = max(high_last, v)
                count += 1
        for bl in range(n_blocks):
            q0 = bl * block
            rows[p, bl] = 0 if _padding(axes, combos, p, q0, k) else count
            for j in range(k - 1):
                own = X[ii[p], cols[p, j]]
                low, high = own, own
                v = axes[p, j, combos[q0, j]]
                if rows[p, bl] and not np.isnan(v):
                    low = min(low, v)
                    high = max(high, v)
                lo[p, bl, j] = low
                hi[p, bl, j] = high
            lo[p, bl, k - 1] = low_last if rows[p, bl] else own_last
            hi[p, bl, k - 1] = high_last if rows[p, bl] else own_last


@nb.njit(cache=True)
def block_boxes(axes, combos, cols, X, ii, block):
    """(n, B, k) low and high ends, per scan item p and block of ``block`` consecutive combinations
    (``scan_rows_kernel``'s order), of the values each of the k axes takes in the block (NaN: the
    agent's own value): the box a score bound rules the block's rows in or out by; and (n, B) the
    block's rows (its combinations that ``scan_rows_kernel`` makes rows of: a value on the last axis,
    no padding on the others; a block of padding only has none, and no score bound is spent on it)."""
    n, k = cols.shape
    m = combos.shape[0]
    n_blocks = (m + block - 1) // block
    lo = np.empty((n, n_blocks, k))
    hi = np.empty((n, n_blocks, k))
    rows = np.zeros((n, n_blocks), np.int64)
    if k > 1 and m % block == 0 and m > block and combos[block - 1, k - 1] == block - 1 and combos[block, k - 1] == 0:
        _axis_blocks(axes, combos, cols, X, ii, block, lo, hi, rows)
        return lo, hi, rows
    for p in range(n):
        for bl in range(n_blocks):
            for q in range(bl * block, min(m, (bl + 1) * block)):
                if not np.isnan(axes[p, k - 1, combos[q, k - 1]]) and not _padding(axes, combos, p, q, k):
                    rows[p, bl] += 1
            for j in range(k):
                own = X[ii[p], cols[p, j]]
                low, high = own, own
                # a block without rows keeps the agent's own values: every other block's box holds them,
                # so the union of the boxes is the same
                for q in range(bl * block, min(m, (bl + 1) * block) if rows[p, bl] else bl * block):
                    v = axes[p, j, combos[q, j]]
                    if not np.isnan(v):
                        low = min(low, v)
                        high = max(high, v)
                lo[p, bl, j] = low
                hi[p, bl, j] = high
    return lo, hi, rows


@nb.njit(cache=True)
def scan_rows_kernel(axes, combos, cols, X, ii, ss, S, b_sum, b_nnz, bdel, raw_of_column, span, best, a, b, g,
                     alive, block):
    """The rows of a scan of k features (``ChangeValueGenerator._scan``): for each (agent ``ii[p]``,
    subset ``ss[p]``) and each combination ``combos[q]`` of positions on the k axes ``axes[p]``
    (values, NaN: the agent's own, at an axis's first NaN only: the padding after it would repeat its
    rows; the last axis must have a value), the row of the subset's base
    with column ``cols[p, j]`` at its value, kept only where its distance from the agent (the base's
    deltas ``bdel`` with the k columns replaced: exact but for a max term's base part, so a lower
    bound) is below ``best``, and its block of ``block`` combinations is ``alive`` (n, B). Returns the
    base index (``ii * S + ss``), columns and values (-1 / 0 padded to 3), in the order p, then q."""
    n, k = cols.shape
    m = combos.shape[0]
    idx = np.empty(n * m, np.int64)
    vc = np.empty((n * m, 3), np.int64)  # a bound on the rows; each kept row is written whole
    vv = np.empty((n * m, 3))
    vals = np.empty(k)
    T = 0
    for p in range(n):
        bi, bs = ii[p], ss[p]
        lim = best[bi] - 1e-12
        for q in range(m):
            if not alive[p, q // block] or np.isnan(axes[p, k - 1, combos[q, k - 1]]):
                continue
            if _padding(axes, combos, p, q, k):
                continue
            lb_sum, lb_nnz, lb_max = b_sum[bi, bs], float(b_nnz[bi, bs]), 0.0
            for j in range(k):
                c = cols[p, j]
                v = axes[p, j, combos[q, j]]
                if np.isnan(v):
                    v = X[bi, c]
                vals[j] = v
                old = bdel[bi, bs, raw_of_column[c]]
                new = abs(v - X[bi, c]) / span[c]
                lb_sum += new - old
                lb_nnz += (1.0 if new > 1e-12 else 0.0) - (1.0 if old > 1e-12 else 0.0)
                lb_max = max(lb_max, new)
            if a * lb_nnz + b * lb_sum + g * lb_max < lim:
                idx[T] = bi * S + bs
                for j in range(3):
                    vc[T, j] = cols[p, j] if j < k else -1
                    vv[T, j] = vals[j] if j < k else 0.0
                T += 1
    return idx[:T].copy(), vc[:T].copy(), vv[:T].copy()


@nb.njit(cache=True)
def even_levels_kernel(xc, loc, hic, reach, rounded, e):
    """A model without splits: per agent and column (``xc``, ``loc``, ``hic``, ``reach``: (N, C)),
    the values e evenly spaced steps each way (an integer column's every step where its integer steps
    within reach are at most e; the first integer across each step otherwise), ascending, kept where
    inside the box, off the agent's value and within reach; all kept ones where at most e, else e spread
    evenly over them (index floor(i * n / e)). (N, C, e), NaN padded: ``room_levels_compact``'s values
    for a model without splits, computed per (agent, column) in a buffer of 2e."""
    N, C = xc.shape
    out = np.full((N, C, e), np.nan)
    kept = np.empty(2 * e)
    steps = np.empty(e)
    for n in range(N):
        for c in range(C):
            x, r = xc[n, c], reach[n, c]
            whole = np.floor(r + 1e-9)
            for k in range(e):
                steps[k] = float(k + 1) if (rounded[c] and whole <= e) else r * ((k + 1) / e)
            m = 0
            for s in range(2 * e):  # ascending: x - steps[e-1], ..., x - steps[0], x + steps[0], ...
                v = x - steps[e - 1 - s] if s < e else x + steps[s - e]
                if rounded[c]:  # the first integer at least that far from the agent
                    v = _away(v, x)
                if v >= loc[n, c] and v <= hic[n, c] and v != x and np.abs(v - x) <= r + 1e-12:
                    kept[m] = v
                    m += 1
            if m <= e:
                for i in range(m):
                    out[n, c, i] = kept[i]
            else:
                for i in range(e):
                    out[n, c, i] = kept[int(np.floor(i * m / e))]
    return out


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


@nb.njit(cache=True, inline="always")
def _kept_crossings(t, u, lft, c, n_c, x, lo, hi, room, rounded, kept, gap):
    """Into ``kept`` (ascending) and ``gap`` (distance from the agent): column c's split crossings from
    ``x`` (an integer column's first integer at least that far) inside [lo, hi], off x and within
    ``room``; returns how many. Only the splits within reach are visited (a crossing is within a
    float32 step of its split, and an integer column's rounding moves it away from the agent)."""
    tol = 1e-6 * (1.0 + np.abs(x) + room)
    first = max(np.searchsorted(t[c, :n_c], x - room - tol) - 1, 0)
    last = min(np.searchsorted(t[c, :n_c], x + room + tol, side="right") + 1, n_c)
    m = 0
    for k in range(first, last):  # ascending in k: the thresholds are sorted
        v = lft[c, k] if t[c, k] >= x else u[c, k]
        if rounded:
            v = _away(v, x)
        if v >= lo and v <= hi and v != x and np.abs(v - x) <= room + 1e-12:
            kept[m] = v
            gap[m] = np.abs(v - x)
            m += 1
    return m


@nb.njit(cache=True)
def split_levels_kernel(t, u, lft, xc, loc, hic, reach, rounded, es, nearest):
    """A tree ensemble: per agent and column (``xc``, ``loc``, ``hic``, ``reach``: (N, C)), the value
    just across each split (``t``, ``u``, ``lft``: (C, T), NaN padded: ``crossings``; an integer
    column's first integer at least that far), kept where inside the box, off the agent's value and
    within reach; then per request r (``es[r]`` values, ``nearest[r]``): the es[r] nearest the agent
    (ties in split order), or all kept ones ascending where at most es[r], else es[r] spread evenly over
    them (index floor(i * n / e)). (R, N, C, W), NaN padded, W = the largest e but no more than the
    most values any (agent, column) keeps (a wide request costs no all-NaN tail): ``room_levels_compact``'s
    values for a tree ensemble, one pass counting, one filling all requests."""
    N, C = xc.shape
    T = t.shape[1]
    E = 1
    for r in range(es.shape[0]):
        E = max(E, es[r])
    n_of = np.full(C, T)
    for c in range(C):
        while n_of[c] > 0 and np.isnan(t[c, n_of[c] - 1]):
            n_of[c] -= 1
    kept = np.empty(T)
    gap = np.empty(T)
    most = 1
    for n in range(N):
        for c in range(C):
            most = max(most, _kept_crossings(t, u, lft, c, n_of[c], xc[n, c], loc[n, c], hic[n, c], reach[n, c],
                                             rounded[c], kept, gap))
    W = min(E, most)
    out = np.full((es.shape[0], N, C, W), np.nan)
    for n in range(N):
        for c in range(C):
            m = _kept_crossings(t, u, lft, c, n_of[c], xc[n, c], loc[n, c], hic[n, c], reach[n, c], rounded[c],
                                kept, gap)
            order = np.argsort(gap[:m], kind="mergesort")  # nearest first, ties in split order
            for r in range(es.shape[0]):
                e = es[r]
                if nearest[r]:
                    for i in range(min(m, e)):
                        out[r, n, c, i] = kept[order[i]]
                elif m <= e:
                    for i in range(m):
                        out[r, n, c, i] = kept[i]
                else:
                    for i in range(e):
                        out[r, n, c, i] = kept[int(np.floor(i * m / e))]
    return out


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
    [``lo``, ``hi``] (n, D); integer columns (``rounded``) rounded inward, a one-hot group (columns
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


@nb.njit(cache=True)
def discrete_moves_kernel(X, lo, hi, move_ptr, move_cols, move_vals):
    """Per agent n (N, D) and move k (its columns ``move_cols[move_ptr[k]:move_ptr[k + 1]]`` set to
    ``move_vals`` there), in that order, the moves within the agent's box [``lo``, ``hi``] that change
    it: their agent (T,), and the columns they change (T, w; -1 padded, w the most any changes)
    with their values (T, w)."""
    N = X.shape[0]
    K = move_ptr.shape[0] - 1
    width = 1
    for k in range(K):
        width = max(width, move_ptr[k + 1] - move_ptr[k])
    owner = np.empty(N * K, np.int64)
    cols = np.full((N * K, width), -1, np.int64)
    vals = np.zeros((N * K, width))
    t, used = 0, 1
    for n in range(N):
        for k in range(K):
            inside = True
            for p in range(move_ptr[k], move_ptr[k + 1]):
                c, v = move_cols[p], move_vals[p]
                if v < lo[n, c] or v > hi[n, c]:
                    inside = False
                    break
            if not inside:
                continue
            m = 0
            for p in range(move_ptr[k], move_ptr[k + 1]):
                c, v = move_cols[p], move_vals[p]
                if v != X[n, c]:
                    cols[t, m] = c
                    vals[t, m] = v
                    m += 1
            if m:
                owner[t] = n
                used = max(used, m)
                t += 1
    return owner[:t], cols[:t, :used].copy(), vals[:t, :used].copy()


@nb.njit(cache=True)
def lend_kernel(X, donors, X_train, CF_train, col_changed, numeric, lo, hi):
    """(N, 3k, D) candidates lent by each agent's k donors (``donors`` (N, k), -1: none, which lends
    the agent itself): for donor j, row j takes the donor's new values where its answer changed
    the column's raw feature (``col_changed`` (M, D)), row k + j adds the donor's change to the
    agent's value instead (numeric columns), row 2k + j pushes that change to the agent's bound
    ``lo``/``hi`` (N, D) in its direction; elsewhere the agent's value."""
    N, D = X.shape
    k = donors.shape[1]
    out = np.empty((N, 3 * k, D))
    for i in range(N):
        for j in range(k):
            m = donors[i, j]
            for c in range(D):
                x = X[i, c]
                if m < 0:
                    out[i, j, c] = x
                    out[i, k + j, c] = x
                    out[i, 2 * k + j, c] = x
                    continue
                if col_changed[m, c]:
                    new = CF_train[m, c]
                    if numeric[c]:
                        step = CF_train[m, c] - X_train[m, c]
                        out[i, j, c] = new
                        out[i, k + j, c] = x + step
                        out[i, 2 * k + j, c] = hi[i, c] if step > 0 else (lo[i, c] if step < 0 else x)
                    else:
                        out[i, j, c] = new
                        out[i, k + j, c] = new
                        out[i, 2 * k + j, c] = new
                else:
                    out[i, j, c] = x
                    out[i, k + j, c] = x
                    out[i, 2 * k + j, c] = x
    return out


@nb.njit(cache=True)
def donors_kernel(d, keys, sorted_keys, order, q):
    """(N, S, q) per agent n and subset s, the ``q`` training agents nearest by ``d[n]`` (N, M) among
    those whose key is ``keys[n, s]`` (``order``: the training agents sorted by key, stably, so in
    ascending index within a key; ``sorted_keys``: their keys), nearest first, ties to the lower
    index; -1 where fewer have the key. What ``np.argsort(d[n, members], kind="stable")[:q]`` gives."""
    N, S = keys.shape
    out = np.full((N, S, q), -1, np.int64)
    best = np.empty(q)
    for n in range(N):
        for s in range(S):
            lo = np.searchsorted(sorted_keys, keys[n, s])
            hi = np.searchsorted(sorted_keys, keys[n, s], side="right")
            k = 0
            for p in range(lo, hi):  # insertion into the sorted buffer of the q nearest so far
                member = order[p]
                v = d[n, member]
                if k == q and not v < best[q - 1]:
                    continue
                i = min(k, q - 1)
                while i > 0 and v < best[i - 1]:  # strictly nearer moves ahead: ties keep index order
                    best[i] = best[i - 1]
                    out[n, s, i] = out[n, s, i - 1]
                    i -= 1
                best[i] = v
                out[n, s, i] = member
                k = min(k + 1, q)
    return out


@nb.njit(cache=True)
def smallest_k(d, k):
    """(N, k) per row of ``d`` (N, M) the indices of its k smallest entries, smallest first, ties in
    index order (NaN last): one pass with a sorted insertion buffer of k (numpy's partition of all M
    per row cost 10x more for the few neighbours a generator asks for)."""
    N, M = d.shape
    k = min(k, M)
    out = np.empty((N, k), np.int64)
    vals = np.empty(k, d.dtype)
    for n in range(N):
        m = 0
        for j in range(M):
            v = d[n, j]
            if v != v:  # NaN: after every number
                continue
            if m < k:
                pos = m
                m += 1
            elif v < vals[k - 1]:
                pos = k - 1  # the largest kept one makes room
            else:
                continue
            while pos > 0 and v < vals[pos - 1]:  # after the equal ones: ties stay in index order
                vals[pos] = vals[pos - 1]
                out[n, pos] = out[n, pos - 1]
                pos -= 1
            vals[pos] = v
            out[n, pos] = j
        j = 0
        while m < k:  # fewer numbers than k: the NaN entries, in index order
            if d[n, j] != d[n, j]:
                out[n, m] = j
                m += 1
            j += 1
    return out


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


@nb.njit(cache=True, inline="always")
def _pairwise_sum(a):
    """``a.sum()`` as numpy adds a contiguous row (its pairwise summation: eight running sums from
    eight entries on, for fewer than 128), so the same bits."""
    n = a.shape[0]
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[i]
        return res
    r0, r1, r2, r3, r4, r5, r6, r7 = a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]
    i = 8
    while i < n - n % 8:
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[i]
        i += 1
    return res


@nb.njit(cache=True, inline="always")
def _row_deltas(x, c, numeric, span, raw_of_column, out):
    """One row's per-raw-feature normalized deltas into ``out`` (``WorldGeometry.deltas``)."""
    out[:] = 0.0
    for d in range(x.shape[0]):
        diff = np.abs(c[d] - x[d])
        if numeric[d]:
            v = diff / span[d]
            if v != v:
                v = 0.0
            elif v == np.inf:
                v = 1.7976931348623157e308  # np.nan_to_num's
            out[raw_of_column[d]] = v
        elif diff > 1e-9:  # a discrete raw feature moved where any of its columns moved
            out[raw_of_column[d]] = 1.0


@nb.njit(cache=True)
def deltas_kernel(X, C, numeric, span, raw_of_column, n_raw):
    """(R, J) ``WorldGeometry.deltas`` of rows ``C`` (R, D) from ``X`` (R, D)."""
    out = np.empty((X.shape[0], n_raw))
    for r in range(X.shape[0]):
        _row_deltas(X[r], C[r], numeric, span, raw_of_column, out[r])
    return out


@nb.njit(cache=True, inline="always")
def _row_distance(x, c, numeric, span, raw_of_column, buf, a, b, g):
    """One row's MACE Eq. 3 distance (``distance_kernel``'s, the same bits; ``buf``: (n_raw,) scratch)."""
    _row_deltas(x, c, numeric, span, raw_of_column, buf)
    nnz, top = 0, 0.0
    for j in range(buf.shape[0]):
        nnz += buf[j] > 1e-12
        top = max(top, buf[j])
    return a * nnz + b * _pairwise_sum(buf) + g * top


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
def nearest_accepted_kernel(X, base, index, cols, vals, ok, owner, k, numeric, span, raw_of_column, n_raw, a, b, g):
    """``geometry.nearest_accepted_variants`` after its model call: per agent of ``X`` (N, D) the ``k``
    nearest accepted variant rows (``ok``; row t is ``base[index[t]]`` with ``cols[t]`` set to
    ``vals[t]``, proposed for agent ``owner[t]``) that move it, nearest first, ties in row order (NaN
    last): their distances (N, k; inf where fewer), positions (N, k; -1) and rows (N, k, D; NaN).
    Only the kept rows are stored."""
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
        v = _row_distance(X[i], row, numeric, span, raw_of_column, buf, a, b, g)
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
