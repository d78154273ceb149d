"""A forest's compiled descent (``envs/tree_kernels.py``) against each tree, the linked layout and
sklearn itself, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from envs.models import TreeEnsemble
from tests.tabular_worlds import german_rejected


@pytest.fixture(scope="module")
def german():
    return german_rejected()


def test_forest_descends_all_trees_like_each_tree(german):
    world, neg = german
    X = np.concatenate([neg[:50], neg[:50] + np.random.default_rng(1).normal(0, 3, (50, neg.shape[1]))])
    stacked = world.model.leaves(X)
    for j, tree in enumerate(world.model.trees):
        assert np.array_equal(stacked[:, j], tree.leaves(X))


def test_forest_probabilities_are_sklearns_bit_for_bit():
    """The compiled descent (envs/tree_kernels.py) against sklearn itself, on rows that sit on the
    thresholds' float32 edges, where a cast or a comparison in the wrong precision flips a branch."""
    from sklearn.ensemble import RandomForestClassifier

    rng = np.random.default_rng(3)
    X = rng.normal(0, 1, (400, 5)) * [1, 10, 100, 1e4, 1e-3]
    y = (X[:, 0] + X[:, 1] / 10 + rng.normal(0, 0.5, 400) > 0).astype(int)
    est = RandomForestClassifier(n_estimators=7, max_depth=6, random_state=0).fit(X, y)
    model = TreeEnsemble.from_sklearn(est)
    t = np.concatenate([tr.threshold[tr.left >= 0] for tr in model.trees])
    f = np.concatenate([tr.feature[tr.left >= 0] for tr in model.trees])
    Z = np.repeat(X[:len(t)], 3, axis=0)
    for k, (ti, fi) in enumerate(zip(t, f, strict=True)):  # on, just below and just above each threshold
        Z[3 * k:3 * k + 3, fi] = [ti, np.nextafter(np.float32(ti), -np.inf), np.nextafter(np.float32(ti), np.inf)]
    np.testing.assert_array_equal(model.predict_proba(Z), est.predict_proba(Z)[:, 1])
    np.testing.assert_array_equal(model.predict(Z), est.predict(Z) == 1)
    np.testing.assert_array_equal(model.leaves(Z), np.stack([e.apply(Z.astype(np.float32)) for e in est.estimators_], 1))


@pytest.mark.parametrize("trees", [6, 19])
@pytest.mark.parametrize("max_depth", [3, 7, None])
def test_complete_tree_sums_are_the_linked_ones_and_sklearns(max_depth, trees):
    """A forest descended as complete trees (padded leaves, implied children) sums the same leaves
    as the linked layout, bit for bit, on rows and on variants, and agrees with sklearn; a forest
    deeper than ``COMPLETE_DEPTH`` keeps the linked layout. 19 trees and 750 rows: blocks of rows through chunks of
    trees (``TREES_BLOCK``, ``ROWS_BLOCK``) that do not divide them."""
    from sklearn.ensemble import RandomForestClassifier

    from envs.models import COMPLETE_DEPTH, COMPLETE_NODES, Tree, TreeEnsemble
    from envs.tree_kernels import complete_sums, complete_sums_variants, forest_sums, forest_sums_variants

    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 5))
    X[:, 3] = np.round(X[:, 3])  # ties at the thresholds too
    y = (X[:, 0] + X[:, 1] * X[:, 2] + rng.normal(0, 0.5, 400) > 0).astype(int)
    sk = RandomForestClassifier(n_estimators=trees, max_depth=max_depth, random_state=0).fit(X, y)
    model = TreeEnsemble([Tree.from_sklearn(t) for t in sk.estimators_], 5)
    linked = model._stacked()
    assert (model._complete() is None) == (int(linked[5]) > COMPLETE_DEPTH or trees << int(linked[5]) > COMPLETE_NODES)
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
