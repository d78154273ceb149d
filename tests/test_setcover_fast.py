import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.setcover_fast import FastSetCover, pack_bits
from solvers.ucs import UniformCostSearch
from tests.brute import brute_force_covers, brute_force_sequence
from tests.worlds import random_world, synthetic_world


def test_pack_bits_round_trip():
    M = np.random.default_rng(0).random((5, 130)) < 0.5
    P = pack_bits(M)
    assert P.shape == (5, 3) and P.dtype == np.uint64
    for r in range(5):
        for j in range(130):
            assert (int(P[r, j // 64]) >> (j % 64)) & 1 == M[r, j]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 8), A=st.integers(1, 9), groups=st.sampled_from([1, 3]))
def test_fast_matches_brute_force(seed, n, A, groups):
    world = random_world(seed, n, A, groups)
    rng = np.random.default_rng(seed + 1)
    X = (rng.random((12, n)) < 0.5).astype(np.uint8)
    g = rng.integers(0, groups, 12) if groups > 1 else None
    labels = FastSetCover().label_batch(world, X, g)
    for i in range(len(X)):
        cost, optimal_sets = brute_force_covers(world, X[i], None if g is None else int(g[i]))
        if not np.isfinite(cost):
            assert not np.isfinite(labels.cost[i]) and labels.n_optimal[i] == 0
            continue
        assert np.isclose(labels.cost[i], cost)
        found = tuple(int(a) for a in labels.actions[i] if a >= 0)
        assert found in optimal_sets
        assert (labels.n_optimal[i] == 1) == (len(optimal_sets) == 1)


def test_dedupe_and_no_dedupe_agree_on_synthetic_world():
    world = synthetic_world(20, seed=3)
    X = (np.random.default_rng(4).random((400, 20)) < 0.68).astype(np.uint8)
    a = FastSetCover(dedupe=True).label_batch(world, X)
    b = FastSetCover(dedupe=False).label_batch(world, X)
    assert np.array_equal(a.cost, b.cost) and np.array_equal(a.actions, b.actions)
    assert np.array_equal(a.n_optimal, b.n_optimal)


def test_node_budget_falls_back_to_exact_ilp():
    world = synthetic_world(30, seed=5)
    X = (np.random.default_rng(6).random((20, 30)) < 0.6).astype(np.uint8)
    exact = FastSetCover().label_batch(world, X)
    starved = FastSetCover(max_nodes=1).label_batch(world, X)
    assert np.allclose(exact.cost, starved.cost)
    assert np.array_equal(exact.n_optimal == 1, starved.n_optimal == 1)


def test_solve_returns_valid_recourse_and_no_recourse():
    world = random_world(0, n=4, A=3)
    world.actions[:, 0] = False  # nobody can obtain capability 0
    res = FastSetCover().solve(world, np.array([0, 1, 1, 1]))[0]
    assert res.status == "no_recourse" and not res.valid and not res.found
    res = FastSetCover().solve(world, np.array([1, 0, 0, 0]))[0]
    if res.found:
        assert res.valid and res.optimal


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 6), A=st.integers(1, 6), discounts=st.integers(0, 4))
def test_ucs_matches_brute_force_sequences(seed, n, A, discounts):
    world = random_world(seed, n, A, discounts=min(discounts, n * (n - 1)))
    x = (np.random.default_rng(seed).random(n) < 0.4).astype(np.uint8)
    cost, seq = brute_force_sequence(world, x)
    res = UniformCostSearch().solve(world, x)[0]
    if seq is None:
        assert res.status == "no_recourse"
    else:
        assert res.valid and np.isclose(res.cost, cost)


def test_ucs_equals_set_cover_without_discounts():
    world = synthetic_world(12, A=15, seed=1)
    X = (np.random.default_rng(2).random((15, 12)) < 0.6).astype(np.uint8)
    labels = FastSetCover().label_batch(world, X)
    ucs = [UniformCostSearch().solve(world, x)[0].cost for x in X]
    assert np.allclose(ucs, labels.cost)
