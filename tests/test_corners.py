"""``learners.tabular.corners.nearest_corners`` against brute force: with every value of every numeric
column in the vocabulary, the corners are every row an agent can reach, and the k nearest must be the
k nearest of all of them, in order, with their distances."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learners.tabular import WorldGeometry
from learners.tabular.corners import distinct_values, nearest_corners
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


@settings(max_examples=80, deadline=None)
@given(shape=st.lists(st.integers(0, 4), min_size=1, max_size=4), width=st.integers(1, 40),
       seed=st.integers(0, 10**6))
def test_best_first_lists_corners_in_order_of_distance_then_option_vector(shape, width, seed):
    """``corner_kernels.best_first`` against every option vector of a few features (options with many ties):
    the first ``width`` of them by (distance summed in feature order, the vector), the agent itself first."""
    import itertools

    from learners.tabular.corner_kernels import best_first

    rng = np.random.default_rng(seed)
    n = max(shape)
    dist = np.full((len(shape), max(n, 1)), np.inf)
    for f, c in enumerate(shape):
        dist[f, :c] = np.sort(rng.integers(1, 4, c) / 8.0)  # few distinct values: ties across features
    every = []
    for vec in itertools.product(*[range(c + 1) for c in shape]):
        s = 0.0
        for f, v in enumerate(vec):
            if v:
                s += dist[f, v - 1]
        every.append((s, vec))
    every.sort()
    sums, choice = best_first(dist, np.asarray(shape, np.int64), width)
    m = min(width, len(every))
    np.testing.assert_array_equal(sums[:m], [s for s, _ in every[:m]])
    np.testing.assert_array_equal(choice[:m], np.asarray([v for _, v in every[:m]]) - 1)
    assert np.isinf(sums[m:]).all() and (choice[m:] == -1).all()  # fewer corners than width: padded


@pytest.mark.parametrize("cuts", [False, True])
def test_a_shorter_list_is_the_head_of_a_longer_one(cuts):
    """The student looks for its picks among an agent's nearest corners in stages (``student.STAGE_FIRST``), which
    is its picks among the whole pool only if the k nearest corners are the first k of any longer list, ties included
    (a step up and a step down of an integer column cost alike: 160 ties an agent here)."""
    world = toy_world("forest")
    geo = WorldGeometry.of(world)
    rows = toy_data()
    vocab = [np.arange(geo.lower[c], geo.upper[c] + 1) if geo.numeric[c] else np.zeros(0) for c in range(rows.shape[1])]
    X = rows[np.random.default_rng(1).choice(len(rows), 40, replace=False)]
    at = [np.array([2.5, 6.5]) if geo.numeric[c] else np.zeros(0) for c in range(rows.shape[1])] if cuts else None
    R, d = nearest_corners(geo, X, vocab, 300, cuts=at)
    for k in (1, 2, 7, 40, 299):
        r, e = nearest_corners(geo, X, vocab, k, cuts=at)
        np.testing.assert_array_equal(r, R[:, :k])
        np.testing.assert_array_equal(e, d[:, :k])


def _distinct_by_loop(v, x, ok, cuts):
    """``distinct_values`` by its definition, one agent and one value at a time."""
    out = np.zeros_like(ok)
    side = lambda a: int(np.sum(cuts < a))  # noqa: E731 - the cuts a value lies above (left at or below a cut)
    for i in range(len(x)):
        for a in range(len(v)):
            if not ok[i, a] or side(v[a]) == side(x[i]):
                continue
            same = [b for b in range(len(v)) if ok[i, b] and side(v[b]) == side(v[a]) and (v[b] > x[i]) == (v[a] > x[i])]
            out[i, a] = abs(v[a] - x[i]) <= min(abs(v[b] - x[i]) for b in same)
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=12, unique=True), st.lists(st.integers(0, 30), max_size=5),
       st.lists(st.integers(0, 30), min_size=1, max_size=4), st.integers(0, 2 ** 16))
def test_distinct_values_keep_one_value_between_two_cuts(values, cuts, agents, seed):
    v = np.sort(np.asarray(values, float)) / 3.0
    c = np.unique(np.asarray(cuts, float) / 3.0 + 0.1)
    x = np.asarray(agents, float) / 3.0
    ok = np.random.default_rng(seed).random((len(x), len(v))) < 0.8
    ok &= np.abs(v[None, :] - x[:, None]) > 1e-12
    np.testing.assert_array_equal(distinct_values(v, x, ok, c), _distinct_by_loop(v, x, ok, c))


def test_values_on_a_cut_go_left_with_the_values_below_it():
    v = np.array([1.0, 2.0, 3.0, 4.0])
    kept = distinct_values(v, np.array([0.0]), np.ones((1, 4), bool), np.array([2.0]))
    np.testing.assert_array_equal(kept, [[False, False, True, False]])  # 1 and 2 sit left of the cut, as the agent


@pytest.mark.parametrize("k", [5, 40])
def test_nearest_corners_with_cuts_are_the_nearest_distinct_reachable_rows(k):
    world = toy_world("forest")
    geo = WorldGeometry.of(world)
    rows = toy_data()
    vocab = [np.arange(geo.lower[c], geo.upper[c] + 1) if geo.numeric[c] else np.zeros(0) for c in range(rows.shape[1])]
    cuts = [np.array([1.5, 3.5]) if geo.numeric[c] else np.zeros(0) for c in range(rows.shape[1])]
    X = rows[np.random.default_rng(1).choice(len(rows), 12, replace=False)]
    R, d = nearest_corners(geo, X, vocab, k, cuts=cuts)
    lo, hi = geo.box(X)
    for i in range(len(X)):
        reach = rows[((rows >= lo[i] - 1e-9) & (rows <= hi[i] + 1e-9)).all(1) & (np.abs(rows - X[i]).max(1) > 0)]
        keep = np.ones(len(reach), bool)
        for c in np.nonzero(geo.numeric)[0]:
            v = np.unique(reach[:, c])
            ok = ((v != X[i, c]) & (v >= lo[i, c] - 1e-9) & (v <= hi[i, c] + 1e-9))[None, :]
            kept = v[_distinct_by_loop(v, X[i, c:c + 1], ok, cuts[c])[0]]
            keep &= (reach[:, c] == X[i, c]) | np.isin(reach[:, c], kept)
        want = np.sort(geo.distance(X[i][None], reach[keep]))[:k]
        live = np.isfinite(d[i])
        assert live.sum() == min(k, keep.sum())
        np.testing.assert_allclose(d[i][live], want, atol=1e-12)
        np.testing.assert_allclose(geo.distance(X[i][None], R[i][live]), d[i][live], atol=1e-12)


def test_options_built_once_give_the_same_corners():
    """``corner_options`` of a batch, taken for some of its agents, lists the corners ``nearest_corners`` lists
    from nothing (a search in stages builds them once)."""
    from learners.tabular.corners import corner_options

    world = toy_world("forest")
    geo = WorldGeometry.of(world)
    rows = toy_data()
    vocab = [np.arange(geo.lower[c], geo.upper[c] + 1) if geo.numeric[c] else np.zeros(0) for c in range(rows.shape[1])]
    X = rows[np.random.default_rng(2).choice(len(rows), 9, replace=False)]
    options = corner_options(geo, X, vocab)
    a = np.array([7, 1, 4])
    for k in (1, 13, 60):
        got = nearest_corners(geo, X[a], vocab, k, options=options.take(a))
        want = nearest_corners(geo, X[a], vocab, k)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("world_name", ["toy", "german", "adult"])
@pytest.mark.parametrize("norm", ["one", "zero", "infty"])
def test_compiled_options_are_the_numpy_options(world_name, norm):
    """``corner_options``' compiled route (``options_kernel``) against the numpy route feature by feature
    (``_numpy_options``): the same distances bit for bit, the same order of options and counts, the same
    values; so the same corners. German and Adult have codes and one-hot groups, and agents with options cut by
    their boxes."""
    from learners.tabular.corners import _compiled_options, _numpy_options, corner_options

    if world_name == "toy":
        world, rows = toy_world("forest"), toy_data()
    else:
        from data_gen.classifiers import build

        b = build(world_name, "forest")
        world, rows = b.world, b.data.X_test[:400]
    geo = WorldGeometry.of(world, norm)
    rng = np.random.default_rng(4)
    vocab = [np.unique(rng.choice(rows[:, c], 12)) if geo.numeric[c] else np.zeros(0) for c in range(rows.shape[1])]
    X = rows[rng.choice(len(rows), 40, replace=False)]
    lo, hi = geo.box(X)
    features = [j for j in range(geo.n_raw) if not geo.fixed[geo.raw_columns()[j][0]]]
    got = _compiled_options(geo, X, vocab, features, lo, hi)
    want = _numpy_options(geo, X, vocab, features, lo, hi, None)
    np.testing.assert_array_equal(got.counts, want.counts)
    assert (got.counts > 0).any() and (got.counts < got.dist.shape[2]).any()
    for f in range(len(features)):
        n = int(got.counts[:, f].max(initial=0))
        np.testing.assert_array_equal(got.dist[:, f, :n], want.dist[:, f, :n])
        live = np.arange(n)[None, :] < got.counts[:, f:f + 1]
        np.testing.assert_array_equal(got.values[f][:, :n][live], want.values[f][:, :n][live])
    assert corner_options(geo, X, vocab).counts.sum() == got.counts.sum()  # the route the search takes
    for k in (5, 200):
        want_rows = nearest_corners(geo, X, vocab, k, options=want)
        got_rows = nearest_corners(geo, X, vocab, k, options=got)
        np.testing.assert_array_equal(got_rows[0], want_rows[0])
        np.testing.assert_array_equal(got_rows[1], want_rows[1])
