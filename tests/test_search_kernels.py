"""The compiled search kernels (``learners/tabular/search_kernels.py``) against the numpy code they
replaced, kept here as references: the same rows, values and order, on random inputs and on a real
forest's split edges."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_gen.classifiers import build
from learners.tabular.geometry import WorldGeometry
from learners.tabular.search_kernels import (
    _farthest,
    _split_back,
    block_boxes,
    combinations_kernel,
    edge_crossings_kernel,
    even_levels_kernel,
    scan_rows_kernel,
    smallest_k,
    trade_moves_kernel,
)


@pytest.fixture(scope="module")
def forest():
    b = build("german", "forest")
    X = np.concatenate([b.data.X_train, b.data.X_test])
    return b.world, X[~b.world.accepts(X)][:40]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=60), st.integers(1, 70))
def test_farthest_is_the_stable_sort_prefix(values, k):
    d = np.asarray(values, float) / 3.0  # many ties
    want = np.argsort(-d, kind="mergesort")[: min(k, len(d))]
    assert np.array_equal(_farthest(d, min(k, len(d))), want)


def _combinations_reference(step, best, a, b, g, cap, partial_cap):
    """The numpy enumeration ``combinations_within`` used before the kernel, one agent at a time
    (the kernel's per-agent cap)."""
    N, F, E = step.shape
    whos, picks = [], []
    for i in range(N):
        parts = [((), 0.0, 0.0, 0.0)]
        for f in range(F):
            new = []
            for pick, tot, nnz, top in parts:
                for o in range(E + 1):
                    add = 0.0 if o == 0 else step[i, f, o - 1]
                    if not np.isfinite(add):
                        continue
                    t2, n2, m2 = tot + add, nnz + (o > 0), max(top, add)
                    if a * n2 + b * t2 + g * m2 < best[i] - 1e-12:
                        new.append((pick + (o - 1,), t2, n2, m2))
            parts = new
            if len(parts) > partial_cap:
                d = np.array([a * n + b * t + g * m for _, t, n, m in parts])
                parts = [parts[j] for j in np.argsort(-d, kind="mergesort")[:partial_cap]]
        full = [p for p in parts if p[2] >= 2 and len(p[0]) == F]
        d = np.array([a * n + b * t + g * m for _, t, n, m in full])
        for j in np.argsort(-d, kind="mergesort")[:cap]:
            whos.append(i)
            picks.append(full[j][0])
    return np.array(whos, np.int64), np.array(picks, np.int64).reshape(-1, F)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 4), st.integers(1, 3), st.integers(1, 12), st.integers(1, 40))
def test_combinations_kernel_matches_the_enumeration(seed, F, E, cap, partial_cap):
    rng = np.random.default_rng(seed)
    N = 3
    step = np.round(rng.random((N, F, E)) * 0.2, 2)  # rounded: ties
    step[rng.random(step.shape) < 0.3] = np.nan
    best = rng.choice([0.05, 0.15, 0.3, np.inf], N)
    a, b, g = 0.0, 0.5, 0.5
    who, pick = combinations_kernel(step, best, a, b, g, cap, partial_cap)
    w2, p2 = _combinations_reference(step, best, a, b, g, cap, partial_cap)
    assert np.array_equal(who, w2) and np.array_equal(pick, p2)


def _crossings(edges, x):
    t, u, lft = edges
    return np.where(t[None, :] >= x[:, None], lft[None, :], u[None, :])


def _trade_moves_reference(edges, x, c, num, a_i, ci, freed, lo, hi, geo, trees):
    """``polish.trade_sweep``'s partner moves as numpy computed them before the kernel: (e, b, m, value)."""
    from learners.tabular.polish import TRADE_SHARES

    a_w, b_w, g_w = geo.weights
    gj = c[a_i][:, num] - x[a_i][:, num]
    room = (freed[:, :, None] - a_w * (np.abs(gj) <= 1e-12)[:, None, :]) / (b_w + g_w)
    signs = np.array([1.0, -1.0])
    live = ((ci[:, None] != num[None, :])[:, None, :, None] & (room > 1e-12)[..., None]
            & (gj[:, None, :, None] * signs >= 0))
    e, b, m, sg = np.nonzero(live)
    cj = num[m]
    steps = room[e, b, m][:, None] * TRADE_SHARES[None, :] * geo.span[cj][:, None]
    steps = np.where(geo.rounded[cj][:, None], np.ceil(steps - 1e-9), steps)
    own = a_i[e]
    V = np.clip(c[own, cj][:, None] + signs[sg][:, None] * steps, lo[own, cj][:, None], hi[own, cj][:, None])
    if trees:  # the first L crossings within the widest room of the agent, partner and direction, then its own
        sign, cv = signs[sg], c[own, cj]
        reach = sign * (V[:, -1] - cv)
        key = (own * len(num) + m) * 2 + sg
        widest = np.full(key.max() + 1, -np.inf)
        np.maximum.at(widest, key, reach)
        W = np.full(V.shape, np.nan)
        for q in range(len(e)):
            col = int(cj[q])
            if col not in edges:
                continue
            v = _crossings(edges[col], x[own[q], col][None])[0]
            if geo.rounded[col]:
                v = np.where(v > x[own[q], col], np.ceil(v - 1e-9), np.floor(v + 1e-9))
            ahead = sign[q] * (v - cv[q])
            ok = (ahead > 1e-12) & (ahead <= widest[key[q]] + 1e-12)
            first = v[ok][np.argsort(ahead[ok], kind="stable")][: V.shape[1]]
            W[q, : len(first)] = np.where(sign[q] * (first - cv[q]) <= reach[q] + 1e-12, first, np.nan)
        V = W
    q_of, l_of = np.nonzero(~np.isnan(V))
    return e[q_of], b[q_of], m[q_of], V[q_of, l_of]


def _splits_back_reference(edges, x, c, cols, k, default):
    out = default.copy()
    for col in np.unique(cols):
        if int(col) not in edges:
            continue
        e = np.flatnonzero(cols == col)
        xv, cv = x[e, col], c[e, col]
        v = _crossings(edges[int(col)], xv)
        gx, gc = v - xv[:, None], (cv - xv)[:, None]
        inside = (np.sign(gx) == np.sign(gc)) & (np.abs(gx) < np.abs(gc) - 1e-12)
        key = np.where(inside, -np.abs(gx) if k > 0 else np.abs(gx), np.inf)
        pick = np.argsort(key, axis=1, kind="stable")[:, min(abs(k), v.shape[1]) - 1]
        hit = np.isfinite(key[np.arange(len(e)), pick])
        out[e] = np.where(hit, v[np.arange(len(e)), pick], xv)
    return out


def _closer_crossings_reference(edges, x, c, cols, rounded, width):
    """The crossings ``polish._edge_sweep`` tried per column before the kernel (numpy, per column)."""
    out = np.full((len(cols), width), np.nan)
    for col in np.unique(cols):
        if int(col) not in edges:
            continue
        e = np.flatnonzero(cols == col)
        xv, cv = x[e, col][:, None], c[e, col][:, None]
        v = _crossings(edges[int(col)], x[e, col])
        if rounded[col]:
            v = xv + np.sign(v - xv) * np.ceil(np.abs(v - xv) - 1e-9)
        closer = (np.abs(v - xv) < np.abs(cv - xv) - 1e-12) & (np.sign(v - xv) == np.sign(cv - xv))
        out[e, : v.shape[1]] = np.where(closer, v, np.nan)
    return out


@pytest.mark.parametrize("trees", [True, False])
def test_trade_moves_are_the_numpy_ones(forest, trees):
    """The partner moves of a trade sweep: the share ladder (any model) or the split crossings within
    the room (a forest), for random answers and give-backs, the same entries, order and bits."""
    from learners.tabular.polish import TRADE_SHARES, all_padded_edges, split_edges

    world, X = forest
    geo = WorldGeometry.of(world)
    edges = split_edges(world)
    rng = np.random.default_rng(1)
    num = np.flatnonzero(geo.numeric & ~geo.fixed)
    x = X[rng.integers(len(X), size=60)]
    c = x.copy()
    lo, hi = geo.box(x)
    for i in range(len(x)):  # each answer moves one to three mutable numeric columns anywhere in its box
        cols = rng.choice(num, rng.integers(1, 4), replace=False)
        c[i, cols] = lo[i, cols] + rng.random(len(cols)) * (hi[i, cols] - lo[i, cols])
        c[i, cols[geo.rounded[cols]]] = np.round(c[i, cols[geo.rounded[cols]]])
    a_i, p_i = np.nonzero(np.abs(c[:, num] - x[:, num]) > 1e-12)
    ci = num[p_i]
    freed = rng.random((len(a_i), 5)) * 0.2 - 0.02  # some give-backs free nothing
    a_w, b_w, g_w = geo.weights
    got = trade_moves_kernel(a_i, ci, freed, x[:, num], c[:, num], lo[:, num], hi[:, num], num, geo.span, geo.rounded,
                             TRADE_SHARES, float(a_w), float(b_w + g_w), trees, *all_padded_edges(world, X.shape[1]))
    want = _trade_moves_reference(edges, x, c, num, a_i, ci, freed, lo, hi, geo, trees)
    assert len(got[0]) > 100
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def _splits_back_each(t, u, lft, n_splits, xv, cv, cols, k, default):
    """``_split_back`` (the trade sweep's split give-back, compiled inside ``trade_round_kernel``) per entry."""
    return np.array([_split_back(t, u, lft, n_splits[c], c, x, v, k, d)
                     for x, v, c, d in zip(xv, cv, cols, default, strict=True)])


def _moved_accepted(world, geo, X, seed):
    """The agents of ``X`` with answers that move each mutable numeric column (with chance 0.6)
    anywhere in its reachable box, projected, and only those the model accepts: (x, c)."""
    from learners.tabular.geometry import accepts

    rng = np.random.default_rng(seed)
    lo, hi = geo.box(X)
    num = geo.numeric & ~geo.fixed
    C = np.where(num & (rng.random(X.shape) < 0.6), lo + rng.random(X.shape) * (hi - lo), X)
    C = geo.project(X, C[:, None, :])[:, 0]
    ok = accepts(world, C)
    return X[ok], C[ok]


def _trade_sweep_reference(world, geo, x, c, rounds=2):
    """The numpy trade sweep of earlier releases (``polish.trade_sweep`` before its rounds were compiled)."""
    from learners.tabular.geometry import Variants, accepts_variants, first_within
    from learners.tabular.polish import (
        TRADE_BACK_INT_SHARES,
        TRADE_BACK_SHARES,
        TRADE_BACK_SPLITS,
        TRADE_BACK_STEPS,
        TRADE_SHARES,
        all_padded_edges,
        split_edges,
    )

    steps_, int_, real_ = (np.array(v)[None, :] for v in (TRADE_BACK_STEPS, TRADE_BACK_INT_SHARES, TRADE_BACK_SHARES))
    X_all, C_all = x, c.copy()
    num = np.flatnonzero(geo.numeric & ~geo.fixed)
    lo_all, hi_all = geo.box(x)
    a_w, b_w, g_w = geo.weights
    edges = split_edges(world)
    splits = all_padded_edges(world, x.shape[1]) if edges else (np.zeros((0, 0)),) * 3 + (np.zeros(0, np.int64),)
    act = np.arange(len(X_all))
    for _ in range(rounds):
        x, c, lo, hi = X_all[act], C_all[act], lo_all[act], hi_all[act]
        d_now = geo.distance(x, c)
        gap = c[:, num] - x[:, num]
        a_i, p_i = np.nonzero(np.abs(gap) > 1e-12)
        if not len(a_i):
            break
        ci, g = num[p_i], gap[a_i, p_i]
        E = len(a_i)
        ag, rnd = np.abs(g)[:, None], geo.rounded[ci][:, None]
        step = np.where(rnd, np.where(ag > 2 * TRADE_BACK_STEPS[-1], np.ceil(int_ * ag), steps_), real_ * ag)
        backs = np.where(ag > step + 1e-12, c[a_i, ci][:, None] - np.sign(g)[:, None] * step, x[a_i, ci][:, None])
        if edges:
            for b, k_split in enumerate(TRADE_BACK_SPLITS):
                if k_split != 0:
                    t, u, lft, n = splits
                    back = _splits_back_each(t, u, lft, n, x[a_i, ci], c[a_i, ci], ci.astype(np.int64), k_split,
                                              backs[:, b].copy())
                    backs[:, b] = np.where(rnd[:, 0], backs[:, b], back)
        B = backs.shape[1]
        given = np.repeat(c[a_i][:, None, :], B, axis=1)
        given[np.arange(E)[:, None], np.arange(B)[None, :], ci[:, None]] = backs
        freed = d_now[a_i, None] - geo.distance(np.repeat(x[a_i], B, axis=0), given.reshape(E * B, -1)).reshape(E, B)
        e, b, m, v = trade_moves_kernel(a_i, ci, np.ascontiguousarray(freed), x[:, num], c[:, num], lo[:, num],
                                        hi[:, num], num, geo.span, geo.rounded, TRADE_SHARES, float(a_w),
                                        float(b_w + g_w), bool(edges), *splits)
        if not len(e):
            break
        own = a_i[e]
        trades = Variants(c, own, np.stack([ci[e], num[m]], 1), np.stack([backs[e, b], v], 1))
        ok = accepts_variants(world, trades)
        if not ok.any():
            break
        T, own = trades.rows(np.flatnonzero(ok)), own[ok]
        d = geo.distance(x[own], T)
        better = d < d_now[own] - 1e-12
        if not better.any():
            break
        T, own, d = T[better], own[better], d[better]
        pick = first_within(d, own)
        C_all[act[own[pick]]] = T[pick]
        act = act[own[pick]]
    return C_all


@pytest.mark.parametrize("data,model", [("german", "forest"), ("german", "mlp"), ("credit", "forest")])
def test_trade_sweep_is_the_numpy_sweep(data, model):
    """``polish.trade_sweep`` (each round compiled before and after its model call) against the numpy
    sweep it replaced: the same answers, bit for bit, from accepted answers that moved several
    numeric columns, on forests (split give-backs and crossings) and an MLP (the share ladders), with
    integer columns (German) and real ones (Credit)."""
    from learners.tabular.polish import polish, trade_sweep

    b = build(data, model)
    X = np.concatenate([b.data.X_train, b.data.X_test])
    world = b.world
    X = X[~world.accepts(X)][:80]
    geo = WorldGeometry.of(world)
    x, c = _moved_accepted(world, geo, X, 5)
    c = polish(world, geo, x, c)  # polished first: trades win only from near a boundary
    assert len(x) >= 5
    got = trade_sweep(world, geo, x, c)
    want = _trade_sweep_reference(world, geo, x, c)
    assert (want != c).any()  # some trade won
    np.testing.assert_array_equal(got, want)


def test_split_walks_match_the_sorted_crossings(forest):
    from learners.tabular.polish import all_padded_edges, split_edges

    world, X = forest
    geo = WorldGeometry.of(world)
    edges = split_edges(world)
    t, u, lft, n = all_padded_edges(world, X.shape[1])
    rng = np.random.default_rng(0)
    num = np.flatnonzero(geo.numeric)
    Q = 400
    rows = rng.integers(len(X), size=Q)
    x = X[rows]
    c = x.copy()
    cols = num[rng.integers(len(num), size=Q)]
    lo, hi = geo.lower[cols], geo.upper[cols]
    c[np.arange(Q), cols] = lo + rng.random(Q) * (hi - lo)  # the answer moved this column anywhere in bounds
    # one entry per agent, its changed column at rank 0
    q_of, col_of, v = edge_crossings_kernel(cols[:, None], 0, np.arange(Q), x, c, t, u, lft, n, geo.rounded)
    want = _closer_crossings_reference(edges, x, c, cols, geo.rounded, int(n[cols].max()))
    wq, wj = np.nonzero(~np.isnan(want))  # by entry, then split
    assert np.array_equal(q_of, wq) and np.array_equal(col_of, cols[wq]) and np.array_equal(v, want[wq, wj])
    assert len(v)
    default = rng.random(Q)
    for k in (-1, 1, 2, 3):
        got = _splits_back_each(t, u, lft, n, x[np.arange(Q), cols], c[np.arange(Q), cols], cols, k, default)
        assert np.array_equal(got, _splits_back_reference(edges, x, c, cols, k, default))


def test_edge_sweep_is_the_numpy_sweep(forest):
    """``polish._edge_sweep`` (its crossings and their application compiled) against the numpy sweep
    it replaced, from accepted answers that moved several numeric columns far."""
    from learners.tabular.geometry import Variants, accepts_variants, first_within
    from learners.tabular.polish import _edge_sweep, all_padded_edges, split_edges

    world, X = forest
    geo = WorldGeometry.of(world)
    x, c0 = _moved_accepted(world, geo, X, 4)
    assert len(x) >= 5
    got = _edge_sweep(world, geo, x, c0)
    # the reference: the numpy sweep of earlier releases
    t, u, lft, n_splits = all_padded_edges(world, x.shape[1])
    cols_all = np.flatnonzero(geo.numeric & (n_splits > 0))
    c, act = c0.copy(), np.arange(len(c0))
    for _ in range(2):
        moved = np.zeros(len(c), bool)
        changed = np.abs(c[act][:, cols_all] - x[act][:, cols_all]) > 1e-12
        rank = np.cumsum(changed, 1) - 1
        for r in range(int(changed.sum(1).max(initial=0))):
            own, m_idx = np.nonzero(changed & (rank == r))
            if not len(own):
                continue
            own, col_of = act[own], cols_all[m_idx]
            ref = _closer_crossings_reference(split_edges(world), x[own], c[own], col_of, geo.rounded, int(n_splits.max()))
            q_of, j_of = np.nonzero(~np.isnan(ref))
            v = ref[q_of, j_of]
            if not len(q_of):
                continue
            ok = accepts_variants(world, Variants(c, own[q_of], col_of[q_of][:, None], v[:, None]))
            q_of, v = q_of[ok], v[ok]
            if not len(q_of):
                continue
            pick = first_within(np.abs(v - x[own[q_of], col_of[q_of]]), q_of)
            hit = q_of[pick]
            c[own[hit], col_of[hit]] = v[pick]
            moved[own[hit]] = True
        act = np.flatnonzero(moved)
        if not len(act):
            break
    assert (c != c0).any()
    np.testing.assert_array_equal(got, c)


@pytest.mark.parametrize("block", [3, 4])
def test_scan_rows_kernel_matches_the_numpy_rows(block):
    """The rows nearer than the budget in live blocks, and the blocks' boxes; a first axis's NaN
    after a NaN (padding after the agent's own value) makes no row: it would repeat one."""
    rng = np.random.default_rng(1)
    N, S, D, k = 5, 3, 6, 2
    X = rng.random((N, D))
    span = np.full(D, 1.0)
    raw = np.arange(D)
    bdel = rng.random((N, S, D)) * 0.1 * (rng.random((N, S, D)) < 0.4)
    b_sum, b_nnz = bdel.sum(-1), (bdel > 1e-12).sum(-1)
    ii, ss = np.nonzero(rng.random((N, S)) < 0.7)
    cols = np.stack([rng.choice(D, 2, replace=False) for _ in ii])
    axes = rng.random((len(ii), k, 4)) * 0.5
    axes[rng.random(axes.shape) < 0.3] = np.nan
    axes[:2, 0, 2:] = np.nan  # two levels, then padding: the layout ``_scan`` builds
    sizes = [4, 4]
    combos = np.stack(np.meshgrid(*[np.arange(m) for m in sizes], indexing="ij"), -1).reshape(-1, k)
    best = rng.random(N) * 0.6
    a, b, g = 0.0, 0.5, 0.5
    # 3: blocks that cut across the first axis' values too; 4: a block per first-axis value (one run of the
    # last axis: block_boxes bounds the last axis once per item)
    alive = rng.random((len(ii), -(-len(combos) // block))) < 0.7
    idx, vc, vv = scan_rows_kernel(axes, combos, cols, X, ii, ss, S, b_sum, b_nnz, bdel, raw, span, best, a, b, g,
                                   alive, block)
    # the numpy rows
    first = axes[:, 0][:, combos[:, 0]]
    before = axes[:, 0][:, np.maximum(combos[:, 0] - 1, 0)]
    again = np.isnan(first) & np.isnan(before) & (combos[:, 0] > 0)[None, :]
    live = ~np.isnan(axes[:, -1][:, combos[:, -1]]) & ~again
    assert again[live | again].any()
    n_of, m_of = np.nonzero(live)
    wc, wv = np.full((len(n_of), 3), -1), np.zeros((len(n_of), 3))
    for pos in range(k):
        v = axes[n_of, pos, combos[m_of, pos]]
        cc = cols[n_of, pos]
        wc[:, pos], wv[:, pos] = cc, np.where(np.isnan(v), X[ii[n_of], cc], v)
    bi, bs = ii[n_of], ss[n_of]
    lb_sum, lb_nnz, lb_max = b_sum[bi, bs], b_nnz[bi, bs].astype(float), np.zeros(len(bi))
    for pos in range(k):
        cc = wc[:, pos]
        old = bdel[bi, bs, raw[cc]]
        new = np.abs(wv[:, pos] - X[bi, cc]) / span[cc]
        lb_sum = lb_sum + (new - old)
        lb_nnz = lb_nnz + ((new > 1e-12).astype(float) - (old > 1e-12))
        lb_max = np.maximum(lb_max, new)
    keep = (a * lb_nnz + b * lb_sum + g * lb_max < best[bi] - 1e-12) & alive[n_of, m_of // block]
    assert 0 < keep.sum() < len(keep)
    # the blocks' boxes: each axis' range over the block's combinations (NaN: the agent's own value), the
    # agent's own values alone for a block without rows; their union is the range over all combinations
    lo, hi, rows = block_boxes(axes, combos, cols, X, ii, block)
    empty = 0
    for p in range(len(ii)):
        own = X[ii[p], cols[p]]
        for bl in range(alive.shape[1]):
            q = combos[bl * block: (bl + 1) * block]
            v = axes[p, np.arange(k)[None, :], q]
            v = np.where(np.isnan(v), own[None, :], v)
            v = np.concatenate([v, own[None, :]])
            assert rows[p, bl] == live[p, bl * block: (bl + 1) * block].sum()
            if rows[p, bl]:
                assert np.array_equal(lo[p, bl], v.min(0)) and np.array_equal(hi[p, bl], v.max(0))
            else:
                empty += 1
                assert np.array_equal(lo[p, bl], own) and np.array_equal(hi[p, bl], own)
        if rows[p].any():
            v = np.where(np.isnan(axes[p, np.arange(k)[None, :], combos]), own[None, :], axes[p, np.arange(k)[None, :], combos])
            used = v[live[p]]
            assert (lo[p].min(0) <= used.min(0)).all() and (hi[p].max(0) >= used.max(0)).all()
    assert empty
    assert np.array_equal(idx, (bi * S + bs)[keep]) and np.array_equal(vc, wc[keep]) and np.array_equal(vv, wv[keep])
    rows = np.concatenate([idx[:, None], vv], 1)
    assert len(np.unique(rows[np.isin(idx, (ii * S + ss)[:2])], axis=0)) == np.isin(idx, (ii * S + ss)[:2]).sum()


def test_donors_are_the_nearest_with_the_same_subset():
    from learners.tabular.change_value import ChangeValueGenerator

    rng = np.random.default_rng(2)
    gen = ChangeValueGenerator()
    gen.train_sets_ = rng.integers(0, 6, 300)
    d = rng.random((20, 300))
    keys = rng.integers(0, 8, (20, 4))  # keys 6 and 7: no training agent has them
    for q in (1, 3):
        got = gen._donors(d, keys, q).reshape(20, 4, q)
        for s in range(4):
            ds = np.where(gen.train_sets_[None, :] == keys[:, s:s + 1], d, np.inf)
            want = np.full((20, q), -1)
            for i in range(20):
                near = np.argsort(ds[i], kind="stable")[:q]
                near = near[np.isfinite(ds[i, near])]
                want[i, : len(near)] = near
            assert np.array_equal(got[:, s], want)


def test_lent_candidates_are_the_numpy_ones(forest):
    """``TabularGenerator._lend`` (a kernel) against the numpy code it replaced, on a real schema
    (numeric, integer, binary and one-hot columns), with missing donors lending the agent."""
    from learners.tabular.change_value import ChangeValueGenerator

    world, X = forest
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(5)
    train = X[rng.integers(0, len(X), 60)]
    CF = geo.project(train, train[:, None, :] + rng.normal(0, 1, (60, 1, X.shape[1])) * (rng.random((60, 1, X.shape[1])) < 0.3))[:, 0]
    gen = ChangeValueGenerator()
    gen.X_, gen.CF_ = train, CF
    gen.changed_ = geo.deltas(train, CF) > 1e-12
    donors = rng.integers(-1, 60, (len(X), 7))
    got = gen._lend(geo, X, donors)
    # the reference: the numpy code of earlier releases
    d = np.maximum(donors, 0)
    col_changed = gen.changed_[d][..., geo.raw_of_column]
    xb = np.broadcast_to(X[:, None, :], col_changed.shape)
    absolute = np.where(col_changed, CF[d], xb)
    relative = np.where(col_changed & geo.numeric, xb + (CF[d] - train[d]), absolute)
    lo, hi = geo.box(X)
    step = CF[d] - train[d]
    pushed = np.where(step > 0, hi[:, None, :], np.where(step < 0, lo[:, None, :], xb))
    want = np.concatenate([absolute, relative, np.where(col_changed & geo.numeric, pushed, absolute)], axis=1)
    missing = np.tile(donors < 0, 3)
    want[missing] = X[np.nonzero(missing)[0]]
    assert missing.any() and (~missing).any() and ((step > 0) & col_changed).any() and ((step < 0) & col_changed).any()
    np.testing.assert_array_equal(got, want)


def test_cell_points_are_the_numpy_ones(forest):
    """``cell_points_kernel`` (the cell clip's point) against the numpy code it replaced: the agent
    clipped into each row's leaf boxes and reachable box, integers rounded inward, a broken one-hot
    group the row's own, and whether the point stays in the box."""
    from learners.tabular.polish import _stacked_leaf_boxes
    from learners.tabular.search_kernels import cell_points_kernel

    world, X = forest
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(3)
    x = X[rng.integers(0, len(X), 200)]
    c = geo.project(x, X[rng.integers(0, len(X), 200)][:, None, :])[:, 0]  # other agents' rows: many cells
    leaves = world.model.leaves(c)
    offsets, node_lo, node_hi = _stacked_leaf_boxes(world.model)
    lo, hi = geo.box(x)
    g_cols, g_ends = geo.group_arrays()
    P, inside = cell_points_kernel(leaves, offsets, node_lo, node_hi, lo, hi, x, c, geo.rounded, g_cols, g_ends)
    # the reference
    for j in range(leaves.shape[1]):
        k = offsets[j] + leaves[:, j]
        lo, hi = np.maximum(lo, node_lo[k]), np.minimum(hi, node_hi[k])
    W = np.clip(x, lo, hi)
    r = geo.rounded
    W[:, r] = np.where(W[:, r] > x[:, r], np.ceil(W[:, r] - 1e-9), np.where(W[:, r] < x[:, r], np.floor(W[:, r] + 1e-9), W[:, r]))
    broken_any = False
    for cols in geo.group_columns:
        broken = np.abs(W[:, cols].sum(1) - 1) > 1e-9
        broken_any |= broken.any()
        W[np.ix_(broken, cols)] = c[np.ix_(broken, cols)]
    want_inside = ((W >= lo - 1e-12) & (W <= hi + 1e-12)).all(1)
    assert broken_any and (W != c).any() and (W != x).any()
    np.testing.assert_array_equal(P, W)
    np.testing.assert_array_equal(inside, want_inside)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), probes=st.sampled_from([1, 3, 15]))
def test_line_search_probes_and_updates_are_the_numpy_ones(seed, probes):
    """The polish's line search steps (``probe_values_kernel``, ``probe_update_kernel``) against the
    numpy code they replaced: integer and real items, probes at ``far``, none or several accepted."""
    from learners.tabular.search_kernels import probe_update_kernel, probe_values_kernel

    rng = np.random.default_rng(seed)
    n = 30
    near = np.round(rng.normal(0, 3, n), 1)
    far = near + rng.choice([0.0, 0.5, 1.0, 2.0, -3.0, 17.3], n)
    integral = rng.random(n) < 0.5
    near[integral], far[integral] = np.round(near[integral]), np.round(far[integral])
    t = np.arange(1, probes + 1) / (probes + 1)
    V, live = probe_values_kernel(near, far, t, integral)
    W = near[:, None] + (far - near)[:, None] * t[None, :]
    W = np.where(integral[:, None], near[:, None] + np.sign(far - near)[:, None] * np.ceil(np.abs(W - near[:, None]) - 1e-9), W)
    np.testing.assert_array_equal(V, W)
    np.testing.assert_array_equal(live, W != far[:, None])
    accepted = rng.random((n, probes)) < 0.3
    new_near, new_far = probe_update_kernel(V, accepted, live, near, far)
    ok, every = accepted & live, np.arange(n)
    has, j = ok.any(1), ok.argmax(1)
    last_live = np.where(live.any(1), probes - 1 - live[:, ::-1].argmax(1), 0)
    want_near = np.where(has, np.where(j > 0, V[every, np.maximum(j - 1, 0)], near),
                         np.where(live.any(1), V[every, last_live], near))
    np.testing.assert_array_equal(new_near, want_near)
    np.testing.assert_array_equal(new_far, np.where(has, V[every, j], far))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.sampled_from([0.0, 1.0, 2.0, np.inf, np.nan])), max_size=40))
def test_first_within_is_the_lexsort_first(entries):
    """Each group's entry with the smallest key, ties to the lower index, NaN after every number: what
    the lexsort it replaced gives."""
    from learners.tabular.geometry import first_within

    group = np.array([g for g, _ in entries], np.int64)
    key = np.array([k for _, k in entries], float)
    order = np.lexsort((key, group))
    g = group[order]
    want = order[np.r_[True, g[1:] != g[:-1]]] if len(order) else order
    assert np.array_equal(first_within(key, group), want)


def _even_levels_reference(xc, loc, hic, reach, rounded, e):
    """The numpy code ``even_levels_kernel`` replaced: all 2e candidates per (agent, column) built,
    the kept ones moved first by a stable sort, then all or e spread over them."""
    xc, loc, hic, reach = xc[..., None], loc[..., None], hic[..., None], reach[..., None]
    rnd = rounded[None, :, None]
    steps = reach * (np.arange(1, e + 1) / e)
    steps = np.where(rnd & (np.floor(reach + 1e-9) <= e), np.arange(1, e + 1), steps)
    cand = np.concatenate([xc - steps[..., ::-1], xc + steps], -1)
    gap = cand - xc
    cand = np.where(rnd, xc + np.sign(gap) * np.ceil(np.abs(gap) - 1e-9), cand)
    ok = (cand >= loc) & (cand <= hic) & (cand != xc) & (np.abs(cand - xc) <= reach + 1e-12)
    order, n_ok, ar = np.argsort(~ok, axis=-1, kind="stable"), ok.sum(-1), np.arange(e)
    spread = np.floor(ar * np.maximum(n_ok, 1)[..., None] / e).astype(np.int64)
    pick = np.minimum(np.where((n_ok <= e)[..., None], ar, spread), cand.shape[-1] - 1)
    vals = np.take_along_axis(cand, np.take_along_axis(order, pick, -1), -1)
    return np.where(ar < np.minimum(n_ok, e)[..., None], vals, np.nan)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), e=st.sampled_from([1, 2, 5, 16, 32]), scale=st.sampled_from([0.5, 5.0, 60.0]))
def test_even_levels_kernel_matches_the_numpy_levels(seed, e, scale):
    """Real and integer columns, reaches below and above e steps, agents at and off the box's edges."""
    rng = np.random.default_rng(seed)
    N, C = 7, 4
    rounded = np.array([False, True, True, False])
    lo = np.where(rng.random((N, C)) < 0.3, 0.0, -rng.integers(0, 50, (N, C)).astype(float))
    hi = np.where(rng.random((N, C)) < 0.3, 0.0, rng.integers(0, 50, (N, C)).astype(float))
    x = np.where(rounded, rng.integers(-3, 4, (N, C)), rng.uniform(-3, 3, (N, C)))
    x = np.clip(x, lo, hi)
    reach = rng.uniform(0, scale, (N, C))
    reach[0, 0] = 0.0
    got = even_levels_kernel(x, lo, hi, reach, rounded, e)
    want = _even_levels_reference(x, lo, hi, reach, rounded, e)
    np.testing.assert_array_equal(got, want)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), M=st.integers(1, 40), k=st.integers(1, 8), ties=st.booleans())
def test_smallest_k_is_the_stable_sort_prefix(seed, M, k, ties):
    """Ties in index order, infinities as numbers, NaN last: ``np.argsort(kind="stable")[:, :k]``."""
    rng = np.random.default_rng(seed)
    d = rng.integers(0, 4, (6, M)).astype(np.float32) if ties else rng.random((6, M)).astype(np.float32)
    d[rng.random(d.shape) < 0.1] = np.inf
    d[rng.random(d.shape) < 0.05] = np.nan
    want = np.argsort(d, axis=1, kind="stable")[:, : min(k, M)]
    np.testing.assert_array_equal(smallest_k(d, k), want)


@pytest.mark.parametrize("max_depth", [3, 7, None])
def test_complete_tree_sums_are_the_linked_ones_and_sklearns(max_depth):
    """A forest descended as complete trees (padded leaves, implied children) sums the same leaves
    as the linked layout, bit for bit, on rows and on variants, and agrees with sklearn; a forest
    deeper than ``COMPLETE_DEPTH`` keeps the linked layout."""
    from sklearn.ensemble import RandomForestClassifier

    from envs.models import COMPLETE_DEPTH, COMPLETE_NODES, Tree, TreeEnsemble
    from envs.tree_kernels import complete_sums, complete_sums_variants, forest_sums, forest_sums_variants

    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 5))
    X[:, 3] = np.round(X[:, 3])  # ties at the thresholds too
    y = (X[:, 0] + X[:, 1] * X[:, 2] + rng.normal(0, 0.5, 400) > 0).astype(int)
    sk = RandomForestClassifier(n_estimators=6, max_depth=max_depth, random_state=0).fit(X, y)
    model = TreeEnsemble([Tree.from_sklearn(t) for t in sk.estimators_], 5)
    linked = model._stacked()
    assert (model._complete() is None) == (int(linked[5]) > COMPLETE_DEPTH or 6 << int(linked[5]) > COMPLETE_NODES)
    from envs.tree_kernels import complete_layout

    complete = complete_layout(*linked)
    R = np.concatenate([X, rng.normal(size=(300, 5)) * 3, X[:50] + 1e-7]).astype(np.float32)
    for got, want in zip(complete_sums(R, *complete), forest_sums(R, *linked), strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(model.predict(R.astype(float)), sk.predict(R.astype(float)))
    index = np.sort(rng.integers(0, len(R), 500))
    cols = rng.integers(-1, 5, (500, 2))
    vals = rng.normal(size=(500, 2)).astype(np.float32)
    for got, want in zip(complete_sums_variants(R, index, cols, vals, *complete),
                         forest_sums_variants(R, index, cols, vals, *linked), strict=True):
        np.testing.assert_array_equal(got, want)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), P=st.integers(1, 16))
def test_scaled_rows_are_the_numpy_rows(seed, P):
    """The polish's scaled answers (``scaled_rows_kernel``) against the numpy steps they replaced:
    numeric columns scaled toward the agent, integer ones rounded away from it, clipped; the rest kept."""
    from learners.tabular.search_kernels import scaled_rows_kernel

    rng = np.random.default_rng(seed)
    n, D = 7, 9
    num = rng.random(D) < 0.6
    rounded = num & (rng.random(D) < 0.5)
    x = np.where(rounded, np.round(rng.normal(0, 20, (n, D))), rng.normal(size=(n, D)))
    c = x + np.where(rng.random((n, D)) < 0.7, rng.normal(0, 10, (n, D)), 0.0)
    lo, hi = np.minimum(x, c) - rng.random((n, D)), np.maximum(x, c) + rng.random((n, D))
    lo[rng.random((n, D)) < 0.2] = x[rng.random((n, D)) < 0.2].mean()  # a box that cuts some scaled values
    S = rng.random((n, P))
    S[:, 0] = 0.0
    xn, cn, lon, hin, rnd = x[:, None, num], c[:, None, num], lo[:, None, num], hi[:, None, num], rounded[num]
    V = xn + S[..., None] * (cn - xn)
    gap = V[..., rnd] - xn[..., rnd]
    V[..., rnd] = xn[..., rnd] + np.sign(gap) * np.ceil(np.abs(gap) - 1e-9)
    want = np.repeat(c[:, None, :], P, axis=1)
    want[..., num] = np.clip(V, lon, hin)
    got = scaled_rows_kernel(x, c, S, np.flatnonzero(num), rounded, lo, hi)
    np.testing.assert_array_equal(got, want.reshape(-1, D))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 4))
def test_nearest_accepted_kernel_is_the_numpy_ranking(seed, k):
    """Per agent the k nearest accepted variant rows that move it (``nearest_accepted_kernel``)
    against the numpy steps it replaced (rows built, the agent itself dropped, a stable lexsort by
    agent then distance): the same distances, positions and rows, ties (repeated rows) in row order."""
    from learners.tabular.geometry import Variants
    from learners.tabular.search_kernels import nearest_accepted_kernel

    rng = np.random.default_rng(seed)
    N, D, T = 6, 5, 120
    X = np.round(rng.normal(size=(N, D)), 1)
    owner = np.sort(rng.integers(0, N, T))
    base = X[owner] if seed % 2 else np.round(rng.normal(size=(T, D)), 1)
    cols = np.where(rng.random((T, 2)) < 0.3, -1, np.stack([rng.choice(D, 2, replace=False) for _ in range(T)]))
    vals = np.round(rng.normal(size=(T, 2)), 1)  # coarse values: many rows repeat (ties), some are the agent
    V = Variants(base, np.arange(T), cols, vals)
    ok = rng.random(T) < 0.6
    numeric, span, raw = rng.random(D) < 0.6, rng.random(D) + 0.5, np.arange(D)
    a, b, g = 0.2, 0.5, 0.3
    got = nearest_accepted_kernel(X, base, np.arange(T), cols, vals, ok, owner, k, numeric, span, raw, D, a, b, g)
    # the numpy reference
    from learners.tabular.search_kernels import distance_kernel

    best, index, rows = np.full((N, k), np.inf), np.full((N, k), -1), np.full((N, k, D), np.nan)
    at = np.flatnonzero(ok)
    R = V.rows(at)
    moved = (np.abs(R - X[owner[at]]) > 1e-12).any(1)
    at, R = at[moved], R[moved]
    d, own = distance_kernel(X[owner[at]], R, numeric, span, raw, D, a, b, g), owner[at]
    order = np.lexsort((d, own))
    g_sorted = own[order]
    start = np.r_[0, np.flatnonzero(g_sorted[1:] != g_sorted[:-1]) + 1] if len(order) else np.zeros(0, int)
    rank = np.arange(len(order)) - np.repeat(start, np.diff(np.r_[start, len(order)]))
    keep = rank < k
    best[g_sorted[keep], rank[keep]] = d[order][keep]
    index[g_sorted[keep], rank[keep]] = at[order][keep]
    rows[g_sorted[keep], rank[keep]] = R[order][keep]
    for x, y in zip(got, (best, index, rows), strict=True):
        np.testing.assert_array_equal(x, y)


def test_accepted_distances_kernel_is_the_numpy_one():
    """``accepted_distances_kernel`` against the numpy steps it replaced: the distance of each accepted
    candidate, inf where rejected or where the candidate is the agent itself."""
    from learners.tabular.search_kernels import accepted_distances_kernel, distance_kernel

    rng = np.random.default_rng(2)
    N, K, D = 9, 14, 6
    X = rng.normal(size=(N, D))
    C = np.where(rng.random((N, K, D)) < 0.4, rng.normal(size=(N, K, D)), X[:, None, :])
    C[:, :3] = X[:, None, :]  # the agent itself
    ok = rng.random((N, K)) < 0.7
    numeric, span, raw = rng.random(D) < 0.6, rng.random(D) + 0.5, np.arange(D)
    got = accepted_distances_kernel(X, C, ok, numeric, span, raw, D, 0.1, 0.6, 0.3)
    want = np.full((N, K), np.inf)
    i, k = np.nonzero(ok)
    rows = C[i, k]
    moved = (np.abs(rows - X[i]) > 1e-12).any(-1)
    want[i[moved], k[moved]] = distance_kernel(X[i[moved]], rows[moved], numeric, span, raw, D, 0.1, 0.6, 0.3)
    assert np.isfinite(want).any() and np.isinf(want[ok]).any()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("model", ["forest", "mlp"])
def test_polish_drops_a_feature_as_the_numpy_step(model):
    """The polish's last step, each changed raw feature back at the agent's value (trials as variants,
    the pick compiled: ``trade_pick_kernel``), against the numpy step it replaced: with no polish
    rounds, the polish is the cell clip (a forest) and this step alone."""
    from learners.tabular.geometry import accepts, first_within
    from learners.tabular.polish import cell_clip, polish

    b = build("german", model)
    world = b.world
    X = np.concatenate([b.data.X_train, b.data.X_test])
    X = X[~world.accepts(X)][:120]
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(6)
    lo, hi = geo.box(X)
    C = np.where(rng.random(X.shape) < 0.5, lo + rng.random(X.shape) * (hi - lo), X)
    C = geo.project(X, C[:, None, :])[:, 0]
    ok = accepts(world, C)
    x, c0 = X[ok], C[ok]
    got = polish(world, geo, x, c0, rounds=0)
    c = cell_clip(world, geo, x, c0)
    changed = geo.deltas(x, c) > 1e-12
    a_idx, j_idx = np.nonzero(changed)
    trials = c[a_idx].copy()
    cols = geo.raw_of_column[None, :] == j_idx[:, None]
    trials[cols] = x[a_idx][cols]
    hit = np.flatnonzero(accepts(world, trials))
    d = geo.distance(x[a_idx[hit]], trials[hit])
    best = first_within(d, a_idx[hit])
    t = hit[best]
    t = t[d[best] < geo.distance(x[a_idx[t]], c[a_idx[t]]) - 1e-12]
    want = c.copy()
    want[a_idx[t]] = trials[t]
    assert len(t) >= 3
    np.testing.assert_array_equal(got, want)
