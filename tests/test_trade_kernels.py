"""The compiled trade kernels (``learners/tabular/trade_kernels.py``) against the numpy code they
replaced, kept here as references: the same moves, answers and order, on random inputs and on
real forests' split edges and an MLP."""

from __future__ import annotations

import numpy as np
import pytest

from data_gen.classifiers import build
from learners.tabular.geometry import WorldGeometry
from learners.tabular.trade_kernels import trade_moves_kernel
from tests.tabular_worlds import german_forest_sample, moved_accepted, split_crossings, splits_back_each


@pytest.fixture(scope="module")
def forest():
    return german_forest_sample()


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
            v = split_crossings(edges[col], x[own[q], col][None])[0]
            if geo.rounded[col]:
                v = np.where(v > x[own[q], col], np.ceil(v - 1e-9), np.floor(v + 1e-9))
            ahead = sign[q] * (v - cv[q])
            ok = (ahead > 1e-12) & (ahead <= widest[key[q]] + 1e-12)
            first = v[ok][np.argsort(ahead[ok], kind="stable")][: V.shape[1]]
            W[q, : len(first)] = np.where(sign[q] * (first - cv[q]) <= reach[q] + 1e-12, first, np.nan)
        V = W
    q_of, l_of = np.nonzero(~np.isnan(V))
    return e[q_of], b[q_of], m[q_of], V[q_of, l_of]


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
                             TRADE_SHARES, float(a_w), float(b_w + g_w), trees, *all_padded_edges(world, X.shape[1]),
                             np.ones((len(num), 2)))
    want = _trade_moves_reference(edges, x, c, num, a_i, ci, freed, lo, hi, geo, trees)
    assert len(got[0]) > 100
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


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
                    back = splits_back_each(t, u, lft, n, x[a_i, ci], c[a_i, ci], ci.astype(np.int64), k_split,
                                              backs[:, b].copy())
                    backs[:, b] = np.where(rnd[:, 0], backs[:, b], back)
        B = backs.shape[1]
        given = np.repeat(c[a_i][:, None, :], B, axis=1)
        given[np.arange(E)[:, None], np.arange(B)[None, :], ci[:, None]] = backs
        freed = d_now[a_i, None] - geo.distance(np.repeat(x[a_i], B, axis=0), given.reshape(E * B, -1)).reshape(E, B)
        e, b, m, v = trade_moves_kernel(a_i, ci, np.ascontiguousarray(freed), x[:, num], c[:, num], lo[:, num],
                                        hi[:, num], num, geo.span, geo.rounded, TRADE_SHARES, float(a_w),
                                        float(b_w + g_w), bool(edges), *splits, np.ones((len(num), 2)))
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
    x, c = moved_accepted(world, geo, X, 5)
    c = polish(world, geo, x, c)  # polished first: trades win only from near a boundary
    assert len(x) >= 5
    got = trade_sweep(world, geo, x, c)
    want = _trade_sweep_reference(world, geo, x, c)
    assert (want != c).any()  # some trade won
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
