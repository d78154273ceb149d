"""``learners.tabular.corners.nearest_corners`` against brute force: with every value of every numeric
column in the vocabulary, the corners are every row an agent can reach, and the k nearest must be the
k nearest of all of them, in order, with their distances."""

from __future__ import annotations

import numpy as np
import pytest

from learners.tabular import WorldGeometry
from learners.tabular.corners import nearest_corners
from tests.blackbox_worlds import toy_data, toy_world


@pytest.mark.parametrize("k", [1, 7, 40])
def test_nearest_corners_are_the_nearest_reachable_rows(k):
    world = toy_world("forest")
    geo = WorldGeometry.of(world)
    rows = toy_data()
    vocab = [np.arange(geo.lower[c], geo.upper[c] + 1) if geo.numeric[c] else np.zeros(0) for c in range(rows.shape[1])]
    X = rows[np.random.default_rng(0).choice(len(rows), 12, replace=False)]
    R, d = nearest_corners(geo, X, vocab, k)
    assert R.shape == (12, k, rows.shape[1]) and d.shape == (12, k)
    lo, hi = geo.box(X)
    for i in range(len(X)):
        reach = rows[((rows >= lo[i] - 1e-9) & (rows <= hi[i] + 1e-9)).all(1) & (np.abs(rows - X[i]).max(1) > 0)]
        want = np.sort(geo.distance(X[i][None], reach))[:k]
        live = np.isfinite(d[i])
        assert live.sum() == min(k, len(reach))
        np.testing.assert_allclose(d[i][live], want, atol=1e-12)  # the same distances, nearest first
        np.testing.assert_allclose(geo.distance(X[i][None], R[i][live]), d[i][live], atol=1e-12)
        assert ((R[i][live] >= lo[i] - 1e-9) & (R[i][live] <= hi[i] + 1e-9)).all()  # reachable
        assert len(np.unique(R[i][live], axis=0)) == live.sum()  # each corner once, the agent never
        assert (np.abs(R[i][live] - X[i]).max(1) > 0).all()
