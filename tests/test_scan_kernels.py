"""The compiled scan kernels (``learners/tabular/scan_kernels.py``) against the numpy code they
replaced, kept here as references: the same rows, values and order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learners.tabular.geometry import WorldGeometry
from learners.tabular.scan_kernels import (
    _farthest,
    block_boxes,
    combinations_kernel,
    even_levels_kernel,
    scan_rows_kernel,
)
from tests.tabular_worlds import german_rejected, threshold_world


@pytest.fixture(scope="module")
def german():
    return german_rejected()


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


def _room_levels_numpy(world, geo, X, room, requests):
    """The numpy ``room_levels_compact`` of a tree ensemble that ``split_levels_kernel`` replaced (the
    reference the kernel must equal bit for bit)."""
    from learners.tabular.polish import padded_edges, split_edges

    N, D = X.shape
    edges = split_edges(world)
    cols = np.array([c for c in np.flatnonzero(geo.numeric & ~geo.fixed) if int(c) in edges], np.int64)
    out = {r: np.full((N, len(cols) + 1, r[0]), np.nan) for r in requests}
    lo, hi = geo.box(X)
    xc, loc, hic = X[:, cols, None], lo[:, cols, None], hi[:, cols, None]
    reach = (room[:, None] * geo.span[cols][None, :])[..., None]
    rnd = geo.rounded[cols]
    t, u, lft = padded_edges(world, cols)
    cand = np.where(t[None] >= xc, lft[None], u[None])
    gap = cand[:, rnd] - xc[:, rnd]
    cand[:, rnd] = xc[:, rnd] + np.sign(gap) * np.ceil(np.abs(gap) - 1e-9)
    ok = (cand >= loc) & (cand <= hic) & (cand != xc) & (np.abs(cand - xc) <= reach + 1e-12)
    for e, nearest in requests:
        order = np.argsort(np.where(ok, np.abs(cand - xc), np.inf), axis=-1, kind="stable") if nearest \
            else np.argsort(~ok, axis=-1, kind="stable")
        n_ok, ar = ok.sum(-1), np.arange(e)
        pick = np.broadcast_to(ar, (N, len(cols), e)) if nearest else \
            np.where((n_ok <= e)[..., None], ar, np.floor(ar * np.maximum(n_ok, 1)[..., None] / e).astype(np.int64))
        vals = np.take_along_axis(cand, np.take_along_axis(order, np.minimum(pick, cand.shape[-1] - 1), -1), -1)
        out[(e, nearest)][:, : len(cols), :] = np.where(ar < np.minimum(n_ok, e)[..., None], vals, np.nan)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_split_levels_are_the_numpy_ones_bit_for_bit(german, seed):
    """A forest's room levels (split crossings within reach, nearest first or spread by value) from
    the compiled kernel equal the numpy computation it replaced, for every request at once, with
    integer and real columns, rooms from none to past the box."""
    from learners.tabular.change_search import room_levels_compact

    world, neg = german
    rng = np.random.default_rng(seed)
    X = neg[rng.permutation(len(neg))[:60]]
    requests = [(544, True), (16, False), (32, False), (2, True), (5, False), (3, True)]
    toy = threshold_world()  # a real-valued column (German's split columns are all integers)
    toy_x = np.column_stack([rng.uniform(0, 10, 40), rng.integers(0, 10, 40)]).astype(float)
    for w, x in ((world, X), (toy, toy_x)):
        g = WorldGeometry.of(w)
        r_room = rng.choice([0.0, 1e-3, 0.02, 0.1, 0.5, 3.0], len(x))
        got, _ = room_levels_compact(w, g, x, r_room, requests)
        want = _room_levels_numpy(w, g, x, r_room, requests)
        for r in requests:  # the kernel's arrays stop where no agent has more values
            w = got[r].shape[-1]
            assert w <= r[0] and np.isnan(want[r][..., w:]).all()
            np.testing.assert_array_equal(got[r], want[r][..., :w])
            assert np.isfinite(got[r]).any()
