"""The compiled donor kernels (``learners/tabular/donor_kernels.py``: nearest training agents and
the candidates they lend) against the numpy code they replaced."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learners.tabular.donor_kernels import smallest_k
from learners.tabular.geometry import WorldGeometry
from tests.tabular_worlds import german_forest_sample


@pytest.fixture(scope="module")
def forest():
    return german_forest_sample()


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
