"""Compiled kernels of the change-and-value search's scan (numba): the values a scan tries per
column (``change_search.room_levels_compact``), the combinations of several features within an
answer's room (``change_search.combinations_within``), every move of a discrete feature
(``change_search.discrete_variants``) and the rows of a one- to three-feature scan with their
blocks' score-bound boxes (``ChangeValueGenerator._scan``). Enumerations whose work per row is a few
additions, where numpy's per-call overhead and temporaries cost more than the arithmetic.

Each kernel is one loop over agents, so an agent's result never depends on the other agents of its
batch. Each replaced a numpy step, kept in the tests as the reference it must equal bit for bit
(rows, values and order):

- ``_farthest``: ``np.argsort(-d, kind="mergesort")[:k]``;
  ``tests/test_scan_kernels.py::test_farthest_is_the_stable_sort_prefix``.
- ``combinations_kernel``: the numpy enumeration of ``combinations_within`` (feature by feature, a
  stable sort keeping the farthest partials); ``test_combinations_kernel_matches_the_enumeration``.
- ``combination_columns_kernel``: those combinations as variant columns;
  ``tests/test_change_value_search.py::test_combinations_within_are_every_winning_product_of_the_options``.
- ``block_boxes``, ``scan_rows_kernel``: the numpy rows of ``_scan`` (every combination of the axes,
  the padding, the distance bound, the live blocks) and the blocks' boxes;
  ``tests/test_scan_kernels.py::test_scan_rows_kernel_matches_the_numpy_rows``.
- ``even_levels_kernel``: the (N, C, 2e) candidates and stable sort of ``room_levels_compact`` for a
  model without splits; ``test_even_levels_kernel_matches_the_numpy_levels``.
- ``split_levels_kernel``: the numpy crossings and sorts of ``room_levels_compact`` for a tree
  ensemble; ``test_compiled_split_levels_are_the_numpy_ones_bit_for_bit``.
- ``discrete_moves_kernel``: the (N, moves, D) rows of ``discrete_variants``;
  ``tests/test_change_value_search.py::test_discrete_variants_are_every_reachable_value_once``.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from learners.tabular.kernel_helpers import _away, drop_stale_caches


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


drop_stale_caches(globals())  # the helpers' code changed: compile these kernels again
