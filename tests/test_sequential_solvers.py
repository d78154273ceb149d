"""The BRKGA sequencer and the exact grid search (solvers.sequential): decoding, the Pareto front,
exactness against brute force, the sequencer against the exact search, edge cases and errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.models import LinearModel
from solvers.sequential import BRKGASequencer, ExactSequenceSearch
from solvers.sequential.brkga import decode, encode
from solvers.sequential.polish import neighbours
from tests.seq_worlds import (
    adult_agent,
    adult_world,
    brute_force,
    german_agent,
    german_world,
    toy_agents,
    toy_world,
)

SMALL = {"pop_size": 100, "n_offspring": 80, "n_mutants": 20, "n_generations": 25}


def test_decode_like_cscf_figure_3():
    world = toy_world(0)  # addA (4 values), setB (5), toY (assign), addC (3)
    keys = np.array([[0.70, 0.45, 0.02, 0.90, 0.3, 0.5, 0.1, 1.0]])
    actions, index = decode(world, keys)
    assert actions.tolist() == [[2, 1, -1, -1]]  # argsort of the keys; keys > 0.5 inactive
    assert index.tolist() == [[0, 2, -1, -1]]  # setB: floor(0.5 * 5) = 2 -> value 4
    assert world.grid("setB")[2] == 4
    _, index = decode(world, np.array([[0.1, 0.2, 0.3, 0.4, 1.0, 1.0, 1.0, 1.0]]))
    assert index.tolist() == [[3, 4, 0, 2]]  # key 1.0 is the last grid point
    with pytest.raises(ValueError, match="expected 2 x 4 = 8 random keys"):
        decode(world, np.zeros((1, 7)))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_encode_inverts_decode(seed):
    world = toy_world(1)
    actions, index = decode(world, np.random.default_rng(seed).random((20, 8)))
    a2, i2 = decode(world, encode(world, actions, index))
    assert np.array_equal(actions, a2) and np.array_equal(index, i2)


@pytest.mark.parametrize("seed", range(4))
def test_exact_search_matches_brute_force(seed):
    world = toy_world(seed, discounts=seed % 2 == 0)
    for x in toy_agents(world, 4, seed):
        expected = brute_force(world, x)
        got = ExactSequenceSearch().solve(world, x)[0]
        banded = ExactSequenceSearch(max_frontier=3, batch_size=2).solve(world, x)[0]  # cost bands, tiny batches
        if np.isfinite(expected):
            assert got.optimal and got.valid and got.cost == pytest.approx(expected)
            assert banded.cost == pytest.approx(expected)
            assert len(got.steps) <= 3
        else:
            assert got.status == banded.status == "no_recourse"


def test_sequencer_front_is_valid_non_dominated_and_cheapest_first():
    world = toy_world(2)
    x = toy_agents(world, 1, 3)[0]
    front = BRKGASequencer(**SMALL, polish=0).solve(world, x)
    assert front and all(r.valid and r.method == "brkga" and r.optimal is None for r in front)
    costs = [r.cost for r in front]
    assert costs == sorted(costs)
    F = np.array([r.extra["objectives"] for r in front])
    for i in range(len(F)):
        for j in range(len(F)):
            assert i == j or not (np.all(F[i] <= F[j]) and np.any(F[i] < F[j])), "a front member is dominated"
    assert len({r.steps for r in front}) == len(front)  # no duplicates
    assert front[0].extra["front_size"] == len(front) and "step_costs" in front[0].extra


@pytest.mark.parametrize("seed", range(3))
def test_sequencer_reaches_the_exact_optimum_on_small_worlds(seed):
    world = toy_world(seed)
    for x in toy_agents(world, 3, 10 + seed):
        exact = ExactSequenceSearch().solve(world, x)[0]
        best = BRKGASequencer(**SMALL, seed=seed).solve(world, x)[0]
        if exact.found:
            assert best.valid and best.cost <= exact.cost * 1.01  # may be cheaper with 4 actions


def test_sequencer_and_exact_agree_on_the_cscf_worlds():
    for world, x in ((adult_world(), adult_agent()), (german_world(), german_agent())):
        exact = ExactSequenceSearch().solve(world, x)[0]
        best = BRKGASequencer(**SMALL).solve(world, x)[0]
        assert exact.valid and best.valid and best.cost <= exact.cost * 1.01


def test_max_length_is_respected():
    world = toy_world(0)
    x = toy_agents(world, 1, 5)[0]
    front = BRKGASequencer(**SMALL, max_length=1).solve(world, x)
    assert all(len(r.steps) <= 1 for r in front if r.found)
    _, acts, _ = neighbours(world, np.array([[0, -1, -1, -1]]), np.array([[1, -1, -1, -1]]),
                            np.repeat(x[None, None], 5, axis=1), max_length=1)
    assert ((acts >= 0).sum(axis=1) <= 1).all()


def test_no_recourse_already_accepted_and_budgets():
    world = toy_world(0)
    x = toy_agents(world, 1, 0)[0]
    never = world.with_model(LinearModel(np.zeros(world.n_features), -1.0))
    assert ExactSequenceSearch().solve(never, x)[0].status == "no_recourse"
    r = BRKGASequencer(**SMALL).solve(never, x)[0]
    assert r.status == "unknown" and not r.found and "no feasible sequence" in r.extra["reason"]
    always = world.with_model(LinearModel(np.zeros(world.n_features), 1.0))
    for solver in (ExactSequenceSearch(), BRKGASequencer(**SMALL)):
        r = solver.solve(always, x)[0]
        assert r.valid and r.steps == () and r.cost == 0 and r.extra["already_accepted"]
    assert ExactSequenceSearch(max_evaluations=1).solve(never, x)[0].status == "unknown"


def test_bad_input_and_parameters():
    world = toy_world(0)
    x = toy_agents(world, 2, 0)
    with pytest.raises(ValueError, match="one agent"):
        BRKGASequencer(**SMALL).solve(world, x)
    with pytest.raises(ValueError, match="expected 5 features"):
        ExactSequenceSearch().solve(world, x[0, :4])
    with pytest.raises(ValueError, match="pop_size: must be >= 1"):
        BRKGASequencer(pop_size=0).solve(world, x[0])
    with pytest.raises(ValueError, match=r"bias: must be in \[0, 1\]"):
        BRKGASequencer(bias=1.5).solve(world, x[0])
    with pytest.raises(ValueError, match="max_length: must be >= 1"):
        ExactSequenceSearch(max_length=0).solve(world, x[0])
    assert "pop_size=500" in repr(BRKGASequencer())  # CSCF's settings are the defaults
    p = BRKGASequencer().get_params()
    assert (p["pop_size"], p["n_offspring"], p["n_mutants"], p["bias"], p["n_generations"]) == (500, 400, 100, 0.7, 150)


def test_sequencer_is_deterministic_given_a_seed():
    world = toy_world(3)
    x = toy_agents(world, 1, 7)[0]
    a = BRKGASequencer(**SMALL, seed=5).solve(world, x)
    b = BRKGASequencer(**SMALL, seed=5).solve(world, x)
    assert [r.steps for r in a] == [r.steps for r in b]
