"""The compiled polish kernels (``learners/tabular/polish_kernels.py``) against the numpy code they
replaced, kept here as references: the same rows, values and order, on random inputs and on a
real forest's split edges."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learners.tabular.geometry import WorldGeometry
from learners.tabular.polish_kernels import edge_crossings_kernel
from tests.tabular_worlds import german_forest_sample, moved_accepted, split_crossings, splits_back_each


@pytest.fixture(scope="module")
def forest():
    return german_forest_sample()


def _splits_back_reference(edges, x, c, cols, k, default):
    out = default.copy()
    for col in np.unique(cols):
        if int(col) not in edges:
            continue
        e = np.flatnonzero(cols == col)
        xv, cv = x[e, col], c[e, col]
        v = split_crossings(edges[int(col)], xv)
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
        v = split_crossings(edges[int(col)], x[e, col])
        if rounded[col]:
            v = xv + np.sign(v - xv) * np.ceil(np.abs(v - xv) - 1e-9)
        closer = (np.abs(v - xv) < np.abs(cv - xv) - 1e-12) & (np.sign(v - xv) == np.sign(cv - xv))
        out[e, : v.shape[1]] = np.where(closer, v, np.nan)
    return out


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
        got = splits_back_each(t, u, lft, n, x[np.arange(Q), cols], c[np.arange(Q), cols], cols, k, default)
        assert np.array_equal(got, _splits_back_reference(edges, x, c, cols, k, default))


def test_edge_sweep_is_the_numpy_sweep(forest):
    """``polish._edge_sweep`` (its crossings and their application compiled) against the numpy sweep
    it replaced, from accepted answers that moved several numeric columns far."""
    from learners.tabular.geometry import Variants, accepts_variants, first_within
    from learners.tabular.polish import _edge_sweep, all_padded_edges, split_edges

    world, X = forest
    geo = WorldGeometry.of(world)
    x, c0 = moved_accepted(world, geo, X, 4)
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


def test_cell_points_are_the_numpy_ones(forest):
    """``cell_points_kernel`` (the cell clip's point) against the numpy code it replaced: the agent
    clipped into each row's leaf boxes and reachable box, integers rounded inward, a broken one-hot
    group the row's own, and whether the point stays in the box."""
    from learners.tabular.polish import _stacked_leaf_boxes
    from learners.tabular.polish_kernels import cell_points_kernel

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
    from learners.tabular.polish_kernels import probe_update_kernel, probe_values_kernel

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


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), P=st.integers(1, 16))
def test_scaled_rows_are_the_numpy_rows(seed, P):
    """The polish's scaled answers (``scaled_rows_kernel``) against the numpy steps they replaced:
    numeric columns scaled toward the agent, integer ones rounded away from it, clipped; the rest kept."""
    from learners.tabular.polish_kernels import scaled_rows_kernel

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


def test_the_cell_clip_keeps_a_one_hot_group_a_record():
    """A tree that splits both entries of a one-hot group at 0.5 (float64 splits, as an imported boosted model
    does): the agent clipped into the accepted cell would put the group at (0.5, 0.5 + 1 ulp), whose sum is 1
    within any float tolerance; the clip rounds each entry into the cell, so the answer is (0, 1), a record."""
    from envs.models import Tree, TreeEnsemble
    from envs.schema import Feature, FeatureSchema
    from envs.tabular import TabularWorld
    from learners.tabular.polish import cell_clip, polish

    schema = FeatureSchema(tuple(Feature(f"g={c}", "binary", 0, 1, "free", group="g", integer=True) for c in "ab"))
    tree = Tree(np.array([1, 3, -1, -1, -1]), np.array([2, 4, -1, -1, -1]), np.array([0, 1, 0, 0, 0]),
                np.array([0.5, 0.5, 0, 0, 0]), np.array([0.0, 0.0, 0.0, 0.0, 1.0]), np.array([1.0, 1.0, 1.0, 1.0, 0.0]),
                splits="float64")  # accept iff g=a <= 0.5 and g=b > 0.5
    world = TabularWorld("toy/one-hot", schema, TreeEnsemble([tree], 2))
    geo = WorldGeometry.of(world)
    x, c = np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])
    assert world.accepts(c).all() and not world.accepts(x).any()
    for out in (cell_clip(world, geo, x, c), polish(world, geo, x, c)):
        np.testing.assert_array_equal(out, c)
        assert not geo.violations(x, out).any()
