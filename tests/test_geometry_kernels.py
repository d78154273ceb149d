"""The tabular geometry (``learners/tabular/geometry.py``) and its compiled kernels
(``learners/tabular/geometry_kernels.py``) against the numpy code they replaced: projection,
distance, and the ranking of accepted rows after a model call."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learners.tabular import accepts
from learners.tabular.geometry import WorldGeometry
from solvers.mace.distance import distance as mace_distance
from tests.tabular_worlds import german_rejected, threshold_world, toy_mlp_world


@pytest.fixture(scope="module")
def german():
    return german_rejected()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.floats(0.1, 50.0))
def test_projection_never_breaks_a_constraint(german, seed, scale):
    world, neg = german
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(seed)
    X = neg[rng.integers(0, len(neg), 6)]
    C = X[:, None, :] + rng.normal(0, scale, (6, 5, X.shape[1]))  # wild proposals, also below/above the bounds
    P = geo.project(X, C)
    for k in range(P.shape[1]):
        assert not geo.violations(X, P[:, k]).any()
        assert not world.schema.mutability_violations(X, P[:, k]).any()


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_compiled_projection_is_the_numpy_one_bit_for_bit(german, seed):
    """The compiled projection against the numpy it replaced, on proposals with NaN, infinities and
    tied one-hot entries (the first of a tie wins in both)."""
    world, neg = german
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(seed)
    X = neg[rng.integers(0, len(neg), 8)]
    C = X[:, None, :] + rng.normal(0, 1, (8, 6, X.shape[1])) * np.where(np.isfinite(geo.span), geo.span, 1.0) * 0.3
    C[rng.random(C.shape) < 0.05] = np.nan
    C[rng.random(C.shape) < 0.02] = np.inf
    C[rng.random(C.shape) < 0.02] = -np.inf
    for cols in geo.group_columns:
        C[:, :2, cols] = 0.5  # ties
    lo, hi = geo.box(X)
    R = np.clip(np.nan_to_num(C, nan=0.0), lo[:, None, :], hi[:, None, :])
    for cols in geo.group_columns:
        R[..., cols] = (np.arange(len(cols)) == R[..., cols].argmax(-1)[..., None]).astype(float)
    ints = geo.rounded
    d = R[..., ints] - X[:, None, ints]
    R[..., ints] = X[:, None, ints] + np.sign(d) * np.ceil(np.abs(d) - 1e-9)
    R = np.clip(R, lo[:, None, :], hi[:, None, :])
    np.testing.assert_array_equal(geo.project(X, C), R)


def test_geometry_distance_is_mace_distance(german):
    world, neg = german
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(0)
    X = neg[:5]
    C = geo.project(X, X[:, None, :] + rng.normal(0, 5, (5, 7, X.shape[1])))
    for norm in ("one", "zero", "infty"):
        geo = WorldGeometry.of(world, norm)
        for i in range(5):
            assert np.allclose(geo.distance(X[i], C[i]), mace_distance(world.schema, X[i], C[i], norm))


def _numpy_distance(geo, X, C):
    """The numpy formula the compiled ``deltas`` and ``distance`` replaced (the reference)."""
    diff = np.abs(C - X)
    d = np.zeros(diff.shape[:-1] + (geo.n_raw,))
    num = np.flatnonzero(geo.numeric)
    d[..., geo.raw_of_column[num]] = np.nan_to_num(diff[..., num] / geo.span[num])
    other = np.flatnonzero(~geo.numeric)
    to_raw = np.zeros((len(other), geo.n_raw))
    to_raw[np.arange(len(other)), geo.raw_of_column[other]] = 1.0
    d += ((diff[..., other] > 1e-9).astype(float) @ to_raw) > 0
    a, b, g = geo.weights
    return d, a * (d > 1e-12).sum(-1) + b * d.sum(-1) + g * d.max(-1, initial=0.0)


@pytest.mark.parametrize("cell", ["german", 5, 19])
def test_compiled_distance_is_the_numpy_formula_bit_for_bit(german, cell):
    """Ties between answers are broken by distance, so the compiled Eq. 3 must add in numpy's order
    (pairwise from 8 raw features on, eight sums from 16: German has 14, the toys 5 and 19),
    broadcast as numpy does."""
    world, neg = german if cell == "german" else (toy_mlp_world(np.random.default_rng(0), D=cell), None)
    rng = np.random.default_rng(0)
    for norm in ("one", "zero", "infty"):
        geo = WorldGeometry.of(world, norm)
        X = neg[:6] if neg is not None else geo.lower + rng.random((6, len(geo.lower))) * (geo.upper - geo.lower)
        C = geo.project(X, X[:, None, :] + rng.normal(0, 3, (6, 9, X.shape[1])) * (rng.random((6, 9, X.shape[1])) < .4))
        for x, c in ((X[:, None, :], C), (X[0], C[0]), (X[:, None, :], C[:, :1])):
            want_d, want = _numpy_distance(geo, x, c)
            np.testing.assert_array_equal(geo.deltas(x, c), want_d)
            np.testing.assert_array_equal(geo.distance(x, c), want)
            assert geo.distance(x, c).shape == np.broadcast_shapes(x.shape, c.shape)[:-1]


def test_nearest_accepted_matches_a_loop():
    from learners.tabular.geometry import nearest_accepted

    world = threshold_world()
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 2, (6, 2))
    T = rng.uniform(0, 10, (300, 2))
    own = rng.integers(0, 6, 300)
    d, idx = nearest_accepted(world, geo, X, T, own, k=3)
    ok = accepts(world, T)
    for i in range(6):
        mine = np.flatnonzero(ok & (own == i))
        want = np.sort(geo.distance(X[i][None], T[mine]))[:3]
        np.testing.assert_allclose(d[i][np.isfinite(d[i])], want)
        assert ((idx[i] >= 0) == np.isfinite(d[i])).all()
        live = idx[i][idx[i] >= 0]
        assert (own[live] == i).all() and ok[live].all()


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


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 4))
def test_nearest_accepted_kernel_is_the_numpy_ranking(seed, k):
    """Per agent the k nearest accepted variant rows that move it (``nearest_accepted_kernel``)
    against the numpy steps it replaced (rows built, the agent itself dropped, a stable lexsort by
    agent then distance): the same distances, positions and rows, ties (repeated rows) in row order."""
    from learners.tabular.geometry import Variants
    from learners.tabular.geometry_kernels import nearest_accepted_kernel

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
    got = nearest_accepted_kernel(X, base, np.arange(T), cols, vals, ok, owner, k, numeric, span, raw, D, a, b, g,
                                  np.zeros((0, 2)), np.zeros(0, np.int64))
    # the numpy reference
    from learners.tabular.geometry_kernels import distance_kernel

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
    from learners.tabular.geometry_kernels import accepted_distances_kernel, distance_kernel

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


from tests.test_mace import _all_states  # noqa: E402  (modules with tests of their own: imported once, here)
from tests.test_mace_rules import KINDS, _schema  # noqa: E402


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 4), norm=st.sampled_from(["one", "infty", "zero"]))
def test_nearest_accepted_kernel_ranks_by_the_cost_weights(seed, k, norm):
    """Under the rules' cost weights the kernel ranks rows by the weighted distance
    (``WorldGeometry.distance``; issue 55): per agent its k nearest accepted rows that move it are
    those of the numpy ranking, at the same distances up to the order of the sums."""
    from envs.rules import RuleSet
    from envs.tabular import TabularWorld
    from learners.tabular.geometry import Variants, WorldGeometry
    from learners.tabular.geometry_kernels import nearest_accepted_kernel

    class Anything:  # the kernel never calls the model
        n_features = len(_schema())

    world = TabularWorld("kernels/weights", _schema(), Anything(), rules=RuleSet.from_dict(KINDS["weights"]))
    geo = WorldGeometry.of(world, norm)
    rng = np.random.default_rng(seed)
    S = _all_states(world.schema)
    N, T = 5, 150
    X = S[rng.choice(len(S), N, replace=False)]
    owner = np.sort(rng.integers(0, N, T))
    R = S[rng.integers(0, len(S), T)]
    same = rng.random(T) < 0.1
    R[same] = X[owner[same]]  # some rows are the agent itself: no answer
    V = Variants(R, np.arange(T), np.full((T, 1), -1), np.zeros((T, 1)))
    ok = rng.random(T) < 0.7
    a, b, g = geo.weights
    d_got, pos, _ = nearest_accepted_kernel(X, R, np.arange(T), V.cols, V.vals, ok, owner, k, geo.numeric, geo.span,
                                            geo.raw_of_column, geo.n_raw, float(a), float(b), float(g),
                                            *geo.cost_kernel_args())
    d_all = geo.distance(X[owner], R)
    for i in range(N):
        mine = np.flatnonzero(ok & (owner == i) & (np.abs(R - X[i]) > 1e-12).any(1))
        want = np.sort(d_all[mine])[:k]
        got = d_got[i][np.isfinite(d_got[i])]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(d_all[pos[i][pos[i] >= 0]], want, rtol=1e-12, atol=1e-15)


def _numpy_weighted(geo, X, C):
    """The numpy formula the compiled weighted distance replaced (the reference): ``_numpy_distance``'s deltas,
    each feature's delta and change count times the weight of the direction it moved."""
    Dl = _numpy_distance(geo, X, C)[0]
    _, col = geo.cost_kernel_args()
    down = (col >= 0) & (C[:, np.maximum(col, 0)] < X[:, np.maximum(col, 0)])
    W = np.where(down, geo.cost[:, 1], geo.cost[:, 0])
    a, b, g = geo.weights
    WD = Dl * W
    return a * ((Dl > 1e-12) * W).sum(axis=1) + b * WD.sum(axis=1) + g * WD.max(axis=1)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), norm=st.sampled_from(["one", "infty", "zero"]), toy=st.booleans())
def test_compiled_weighted_distance_is_the_numpy_formula_bit_for_bit(german, seed, norm, toy):
    """Under the rules' cost weights (German's default rules, 14 raw features: numpy adds them pairwise; a toy
    world's 3, in a row) the compiled distance is numpy's formula to the bit, rows moved up and down."""
    from dataclasses import replace

    from data_gen.default_rules import default_rules
    from envs.rules import RuleSet
    from envs.tabular import TabularWorld

    if toy:
        class Anything:  # the distance never calls the model
            n_features = len(_schema())

        world = TabularWorld("kernels/weights", _schema(), Anything(), rules=RuleSet.from_dict(KINDS["weights"]))
        X = _all_states(world.schema)
    else:
        world, X = german
        world = replace(world, rules=default_rules("german"))
    geo = WorldGeometry.of(world, norm)
    assert geo.cost is not None and (geo.cost[:, 0] != geo.cost[:, 1]).any()  # the direction decides
    rng = np.random.default_rng(seed)
    X = X[rng.integers(0, len(X), 40)]
    C = geo.project(X, (X + rng.normal(0, 2, X.shape) * (rng.random(X.shape) < 0.4))[:, None, :])[:, 0]
    np.testing.assert_array_equal(geo.distance(X, C), _numpy_weighted(geo, X, C))
    np.testing.assert_array_equal(geo.distance(X[:, None, :], C[:, None, :])[:, 0], _numpy_weighted(geo, X, C))
