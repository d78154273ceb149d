"""Variant rows (a few columns of base rows changed): every white box scores them as it scores the
built rows (a forest bit for bit, LR / MLP up to rounding), the counting wrapper counts them as one
query, and the nearest accepted variants are those of the built rows."""

import functools
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.models import LinearModel, MLPModel, TreeEnsemble, WhiteBoxModel, split_limits, variant_rows
from evaluation.counterfactual_metrics import Counted
from learners.tabular.geometry import (
    Variants,
    WorldGeometry,
    accepts,
    accepts_variants,
    nearest_accepted,
    nearest_accepted_variants,
)


@functools.cache
def _models(D: int, seed: int) -> tuple[list[WhiteBoxModel], np.ndarray]:
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier

    rng = np.random.default_rng(seed)
    X = rng.normal(0, 1, (300, D)) * np.geomspace(1e-2, 1e3, D)
    y = (X[:, 0] / X[:, 0].std() + X[:, -1] / X[:, -1].std() + rng.normal(0, 0.5, 300) > 0).astype(int)
    forest = RandomForestClassifier(n_estimators=5, max_depth=5, random_state=seed).fit(X, y)
    mu, sd = X.mean(0), X.std(0)
    Xs = (X - mu) / sd
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a few iterations make a fine test network
        mlp = MLPClassifier(hidden_layer_sizes=(7, 5), max_iter=60, random_state=seed).fit(Xs, y)
    lr = LogisticRegression().fit(Xs, y)
    net = MLPModel.from_sklearn(mlp, mu, sd)
    return [TreeEnsemble.from_sklearn(forest), net, LinearModel.from_sklearn(lr, mu, sd),
            MLPModel([np.ones((D, 1))], [np.zeros(1)]), MLPModel(net.weights, net.biases, blocks=True)], X


def _variants(X: np.ndarray, rng: np.random.Generator, T: int, k: int) -> Variants:
    D = X.shape[1]
    base = X[rng.integers(0, len(X), 12)]
    cols = np.full((T, k), -1)
    cols[:, :min(k, D)] = np.argsort(rng.random((T, D)), 1)[:, :k]  # distinct columns per row
    cols[rng.random((T, k)) < 0.2] = -1
    vals = X[rng.integers(0, len(X), (T, k)), np.maximum(cols, 0)]  # values the data takes: split edges too
    return Variants(base, rng.integers(0, len(base), T), cols, vals)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 3), D=st.integers(2, 7))
def test_every_white_box_scores_variants_as_their_rows(seed, k, D):
    models, X = _models(D, seed % 7)
    V = _variants(X, np.random.default_rng(seed), 200, k)
    rows = V.rows()
    for model in models:
        got, want = model.score_variants(V.base, V.index, V.cols, V.vals), model.score(rows)
        if isinstance(model, TreeEnsemble):
            np.testing.assert_array_equal(got, want)  # the decision must be bit-exact
        else:
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_variant_rows_change_only_the_named_columns():
    base = np.arange(12.0).reshape(3, 4)
    R = variant_rows(base, np.array([2, 0, 0]), np.array([[1, -1], [-1, -1], [3, 0]]), np.array([[9.0, 7.0], [5, 5], [-1, -2]]))
    np.testing.assert_array_equal(R, [[8, 9, 10, 11], [0, 1, 2, 3], [-2, 1, 2, -1]])


def test_a_forest_scores_variants_bit_exact_on_its_thresholds():
    """Values on, just below and just above every split (float32 edges) as variants of one base."""
    models, X = _models(5, 1)
    forest = models[0]
    t = np.concatenate([tr.threshold[tr.left >= 0] for tr in forest.trees])
    f = np.concatenate([tr.feature[tr.left >= 0] for tr in forest.trees])
    vals = np.stack([t, np.nextafter(np.float32(t), -np.inf).astype(float), np.nextafter(np.float32(t), np.inf).astype(float)], 1)
    V = Variants(X[:3], np.repeat(np.arange(3), 3 * len(t)) % 3, np.repeat(f, 3)[None].repeat(3, 0).reshape(-1, 1),
                 np.tile(vals.reshape(-1), 3)[:, None])
    np.testing.assert_array_equal(forest.score_variants(V.base, V.index, V.cols, V.vals), forest.score(V.rows()))


def _world(model: WhiteBoxModel, D: int):
    from envs.schema import Feature, FeatureSchema
    from envs.tabular import TabularWorld

    schema = FeatureSchema([Feature(f"x{j}", "numeric", -1e4, 1e4) for j in range(D)])
    return TabularWorld("v", schema, model)


def test_variants_are_one_counted_query_and_accepted_as_rows():
    models, X = _models(4, 2)
    V = _variants(np.clip(X, -1e4, 1e4), np.random.default_rng(0), 300, 2)
    for model in models[:3]:
        counted = Counted(model)
        world = _world(counted, 4)
        ok = accepts_variants(world, V)
        assert (counted.calls, counted.rows) == (1, 300)
        np.testing.assert_array_equal(ok, accepts(_world(model, 4), V.rows()))


class _BlackBox:
    """A model with ``predict`` and ``score`` only: variants are built and scored as rows."""

    def __init__(self, model):
        self.m, self.n_features = model, model.n_features

    def score(self, X):
        return self.m.score(X)

    def predict(self, X):
        return self.m.predict(X)


def test_a_black_box_gets_the_built_rows():
    models, X = _models(3, 4)
    V = _variants(np.clip(X, -1e4, 1e4), np.random.default_rng(1), 100, 3)
    counted = Counted(_BlackBox(models[1]))
    ok = accepts_variants(_world(counted, 3), V)
    assert counted.calls == 1 and counted.rows == 100
    np.testing.assert_array_equal(ok, accepts(_world(models[1], 3), V.rows()))


@pytest.mark.parametrize("which", [0, 1])
def test_nearest_accepted_variants_are_those_of_the_rows(which):
    models, X = _models(4, 5)
    X = np.clip(X, -1e4, 1e4)
    world = _world(models[which], 4)
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(2)
    V = Variants.concat([_variants(X, rng, 400, 2), Variants.of_rows(X[:50])])
    own = rng.integers(0, 6, len(V))
    agents = X[50:56]
    d, idx, rows = nearest_accepted_variants(world, geo, agents, V, own, k=3)
    d0, idx0 = nearest_accepted(world, geo, agents, V.rows(), own, k=3)
    np.testing.assert_allclose(d, d0)
    live = idx >= 0
    np.testing.assert_array_equal(rows[live], V.rows()[idx[live]])
    assert np.isnan(rows[~live]).all()


def _mlp_row_by_row(Z0, base, index, cols, vals, W0, dims, weights, biases):
    """The kernel's arithmetic one row at a time in plain Python (the order of every sum kept)."""
    out = np.empty(len(index))
    for i in range(len(index)):
        b = index[i]
        h = [float(z) for z in Z0[b]]
        for j in range(cols.shape[1]):
            c = cols[i, j]
            if c >= 0:
                delta = vals[i, j] - base[b, c]
                h = [h[u] + delta * W0[c, u] for u in range(len(h))]
        w_off, b_off = 0, 0
        for n_out in dims:
            h = [max(v, 0.0) for v in h]
            g = []
            for v in range(n_out):
                s = biases[b_off + v]
                for u in range(len(h)):
                    s += h[u] * weights[w_off + u * n_out + v]
                g.append(s)
            w_off += len(h) * n_out
            b_off += n_out
            h = g
        out[i] = h[0]
    return out


@pytest.mark.parametrize("T", [1, 7, 8, 9, 203])
def test_mlp_kernel_blocks_give_the_row_by_row_bits(T):
    """The MLP kernel runs 8 rows at a time across vector lanes: each row's scores are the same bits
    as a row-by-row loop, for a short last block too."""
    from envs.tree_kernels import mlp_scores_variants

    models, X = _models(5, 3)
    mlp = models[1]
    V = _variants(X, np.random.default_rng(T), T, 3)
    base = mlp._check(V.base)
    Z0 = np.ascontiguousarray(base @ mlp.weights[0] + mlp.biases[0])
    dims = np.array([W.shape[1] for W in mlp.weights[1:]], np.int64)
    weights = np.concatenate([W.reshape(-1) for W in mlp.weights[1:]])
    biases = np.concatenate(mlp.biases[1:])
    args = (Z0, base, V.index.astype(np.int64), V.cols.astype(np.int64), V.vals.astype(float), mlp.weights[0], dims,
            weights, biases)
    diag = np.ones(len(dims), np.int64)  # every later layer dense (a block-diagonal one: test_block_diagonal.py)
    np.testing.assert_array_equal(mlp_scores_variants(*args[:7], diag, *args[7:]), _mlp_row_by_row(*args))


def _box_rows(base: np.ndarray, cols: np.ndarray, lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator,
              extra: list[np.ndarray]) -> np.ndarray:
    """Rows of each box: its corners, random points, and any of the ``extra`` values (per column) inside."""
    rows = []
    for i in range(len(base)):
        k = len(cols[i])
        pts = [np.where(rng.random(k) < 0.5, lo[i], hi[i]) for _ in range(6)]
        pts += [lo[i] + rng.random(k) * (hi[i] - lo[i]) for _ in range(20)]
        for _ in range(20):  # split thresholds: where a tree's leaf changes
            p = lo[i] + rng.random(k) * (hi[i] - lo[i])
            for j, c in enumerate(cols[i]):
                inside = extra[c][(extra[c] >= lo[i, j]) & (extra[c] <= hi[i, j])]
                if len(inside):
                    p[j] = inside[rng.integers(len(inside))]
            pts.append(p)
        for p in pts:
            r = base[i].copy()
            r[cols[i]] = p
            rows.append(r)
    return np.array(rows)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 3), D=st.integers(3, 7))
def test_score_bounds_hold_every_row_of_the_box(seed, k, D):
    """Each white box's score bound over a box of k columns is at least the score of every row in it
    (corners, random points, split thresholds); a forest's is reached where one tree decides."""
    models, X = _models(D, seed % 7)
    rng = np.random.default_rng(seed)
    n = 8
    base = X[rng.integers(0, len(X), n)]
    cols = np.argsort(rng.random((n, D)), 1)[:, :k]
    a, b = X[rng.integers(0, len(X), (n, k)), cols], X[rng.integers(0, len(X), (n, k)), cols]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    thresholds = [np.unique(np.concatenate([t.threshold[(t.left >= 0) & (t.feature == c)] for t in models[0].trees]))
                  for c in range(D)]
    extra = [np.concatenate(split_limits(th)) if len(th) else th for th in thresholds]
    rows = _box_rows(base, cols, lo, hi, rng, extra)
    for model in models:
        bound = model.score_bounds(base, cols, lo, hi)
        scores = model.score(rows).reshape(n, -1)
        assert (scores.max(1) <= bound + 1e-9).all(), type(model).__name__


def test_a_forest_bound_is_the_best_leaf_one_tree_reaches():
    """One tree, one free column: the bound is the largest score over the column's split crossings."""
    models, X = _models(4, 1)
    forest = models[0]
    one = TreeEnsemble([forest.trees[0]], forest.n_features)
    t = forest.trees[0]
    th = np.unique(t.threshold[(t.left >= 0) & (t.feature == 0)])
    rng = np.random.default_rng(0)
    for _ in range(20):
        base = X[rng.integers(0, len(X))][None]
        lo, hi = np.sort(X[rng.integers(0, len(X), 2), 0])
        u, left = split_limits(th)  # each split's last value to its left and first to its right
        edges = np.concatenate([u, left])
        vals = np.concatenate([[lo, hi], edges[(edges >= lo) & (edges <= hi)]])
        rows = np.repeat(base, len(vals), 0)
        rows[:, 0] = vals
        bound = one.score_bounds(base, np.array([[0]]), np.array([[lo]]), np.array([[hi]]))[0]
        assert bound == pytest.approx(one.score(rows).max(), abs=1e-12)


@pytest.mark.parametrize("T", [1, 63, 64, 65, 203])
@pytest.mark.parametrize("widths", [(7, 5), (64, 64), (128, 96)])
def test_mlp_blas_blocks_give_a_row_the_same_bits_in_any_batch(T, widths):
    """``MLPModel(blocks=True)`` scores variant rows by BLAS products of fixed-size blocks: each row's score is
    the same bits alone, in any batch, at any place in it (slices, a permutation), and the loop's up to
    rounding; widths of 64 and more take BLAS's threaded path."""
    rng = np.random.default_rng(T)
    D = 11
    dims = (D, *widths, 1)
    W = [rng.normal(0, 0.4, (a, b)) for a, b in zip(dims[:-1], dims[1:], strict=True)]
    b = [rng.normal(0, 0.1, n) for n in dims[1:]]
    blocks, loop = MLPModel(W, b, blocks=True), MLPModel(W, b)
    V = _variants(rng.normal(0, 1, (40, D)), rng, T, 3)
    got = blocks.score_variants(V.base, V.index, V.cols, V.vals)
    np.testing.assert_allclose(got, loop.score_variants(V.base, V.index, V.cols, V.vals), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got, loop.score(V.rows()), rtol=1e-9, atol=1e-9)
    for sl in (slice(0, 1), slice(T // 2, T // 2 + 1), slice(T - 1, T), slice(1, T), slice(T // 3, T)):
        part = blocks.score_variants(V.base, V.index[sl], V.cols[sl], V.vals[sl])
        np.testing.assert_array_equal(part, got[sl])
    perm = rng.permutation(T)
    np.testing.assert_array_equal(blocks.score_variants(V.base, V.index[perm], V.cols[perm], V.vals[perm]), got[perm])
