"""The exact set cover ILPs (CVXPY and PuLP backends) against the paper's example and brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.capability import CapabilityWorld
from solvers.setcover_ilp import CvxpySetCover, PulpSetCover, _IlpSetCover
from tests.brute import brute_force_covers, brute_force_sequence
from tests.worlds import random_world

SOLVERS = [CvxpySetCover(), PulpSetCover(), PulpSetCover(solver="HiGHS")]
IDS = ["cvxpy-highs", "pulp-cbc", "pulp-highs"]


def paper_world(**kwargs) -> CapabilityWorld:
    """§2.1's example without its zero-cost all-zero action (our worlds need positive costs)."""
    actions = [[0, 0, 1, 0, 1], [1, 0, 0, 0, 1], [0, 0, 1, 1, 0], [0, 0, 0, 0, 1], [0, 1, 0, 0, 0],
               [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [0, 1, 1, 0, 0]]
    return CapabilityWorld(np.array(actions), np.array([6, 5, 9, 2, 1, 15, 3, 5]), np.ones(5, dtype=int), **kwargs)


PAPER_X = np.array([0, 0, 0, 0, 1])


@pytest.mark.parametrize("solver", [*SOLVERS, CvxpySetCover(solver="SCIPY")], ids=[*IDS, "cvxpy-scipy"])
def test_paper_example(solver):
    world = paper_world()
    labels = solver.label_batch(world, PAPER_X[None])
    assert labels.cost[0] == 13.0
    assert labels.actions[0].tolist() == [2, 4, 6]  # [0,0,1,1,0], [0,1,0,0,0], [1,0,0,0,0]
    assert labels.n_optimal[0] == 1
    assert brute_force_covers(world, PAPER_X) == (13.0, [(2, 4, 6)])
    (rec,) = solver.solve(world, PAPER_X)
    assert rec.found and rec.valid and rec.optimal and rec.extra["unique"]
    assert rec.cost == 13.0 and rec.action_names == ("a2", "a4", "a6")
    assert rec.final_state.tolist() == [1, 1, 1, 1, 1]


@pytest.mark.parametrize("solver", SOLVERS, ids=IDS)
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 100_000), n=st.integers(3, 8), A=st.integers(2, 9), groups=st.sampled_from([1, 3]),
       random_thresholds=st.booleans())
def test_matches_brute_force(solver, seed, n, A, groups, random_thresholds):
    world = random_world(seed, n, A, groups)
    rng = np.random.default_rng(seed + 1)
    if random_thresholds:  # differential validity: each group has its own thresholds
        world = CapabilityWorld(world.actions, world.costs, rng.random((groups, n)) < 0.7, world.access)
    X = (rng.random((8, n)) < 0.5).astype(np.uint8)
    g = rng.integers(0, groups, len(X)) if world.n_groups > 1 else None
    labels = solver.label_batch(world, X, g)
    assert labels.runtime.shape == (len(X),) and (labels.runtime > 0).all()
    for i in range(len(X)):
        cost, optimal_sets = brute_force_covers(world, X[i], None if g is None else int(g[i]))
        found = tuple(int(a) for a in labels.actions[i] if a >= 0)
        if not np.isfinite(cost):
            assert labels.cost[i] == np.inf and found == () and labels.n_optimal[i] == 0
            continue
        assert labels.cost[i] == cost  # integer costs: the exact sum
        assert found in optimal_sets
        assert (labels.n_optimal[i] == 1) == (len(optimal_sets) == 1)
        assert labels.n_optimal[i] == (1 if len(optimal_sets) == 1 else 2)


@pytest.mark.parametrize("solver", SOLVERS, ids=IDS)
def test_ties_and_unchecked_uniqueness(solver):
    # Two disjoint covers of cost 4 ({0}, {1, 2}) and a dearer one ({3}).
    world = CapabilityWorld(np.array([[1, 1], [1, 0], [0, 1], [1, 1]]), np.array([4.0, 2.0, 2.0, 5.0]), np.ones(2))
    assert brute_force_covers(world, np.zeros(2))[1] == [(0,), (1, 2)]
    labels = solver.label_batch(world, np.zeros((1, 2)))
    assert labels.cost[0] == 4.0 and labels.n_optimal[0] == 2
    unchecked = type(solver)(solver=solver.solver, check_unique=False).label_batch(world, np.zeros((1, 2)))
    assert unchecked.cost[0] == 4.0 and unchecked.n_optimal[0] == -1


@pytest.mark.parametrize("solver", SOLVERS, ids=IDS)
def test_single_cover_is_unique(solver):
    # The no-good cut leaves the second ILP infeasible.
    world = CapabilityWorld(np.array([[1, 1, 0], [0, 0, 1]]), np.array([3.0, 1.0]), np.array([1, 1, 0]))
    labels = solver.label_batch(world, np.zeros((1, 3)))
    assert labels.cost[0] == 3.0 and labels.actions[0].tolist() == [0] and labels.n_optimal[0] == 1


@pytest.mark.parametrize("solver", SOLVERS, ids=IDS)
def test_accepted_and_uncoverable_agents_skip_the_solver(solver, monkeypatch):
    # Group 1 may not use actions 4, 5 and 7, the only ones that provide feature 1.
    world = paper_world(access=np.array([[1] * 8, [1, 1, 1, 1, 0, 0, 1, 0]], dtype=bool))
    X = np.array([[1, 1, 1, 1, 1], [0, 0, 0, 0, 1], [1, 0, 1, 1, 1]])
    g = np.array([0, 1, 1])
    monkeypatch.setattr(type(solver), "_prepare", lambda self, world: pytest.fail("solver called"))
    labels = solver.label_batch(world, X, g)
    assert labels.cost.tolist() == [0.0, np.inf, np.inf]
    assert (labels.actions == -1).all() and labels.n_optimal.tolist() == [1, 0, 0]
    assert brute_force_covers(world, X[1], 1) == (np.inf, [])
    recs = solver.solve_batch(world, X, g)
    assert recs[0].found and recs[0].valid and recs[0].cost == 0.0 and recs[0].action_ids == ()
    for rec in recs[1:]:
        assert rec.status == "no_recourse" and not rec.found and not rec.valid and rec.cost == np.inf


@pytest.mark.parametrize("solver", SOLVERS, ids=IDS)
def test_mixed_batch_with_groups(solver):
    world = paper_world(access=np.array([[1] * 8, [1, 1, 1, 1, 0, 1, 1, 0]], dtype=bool))
    X = np.array([PAPER_X, PAPER_X, [1, 1, 1, 1, 1], [1, 1, 0, 1, 1]])
    g = np.array([0, 1, 0, 1])
    labels = solver.label_batch(world, X, g)
    assert labels.cost.tolist() == [13.0, 15.0, 0.0, 6.0]  # group 1 lacks actions 4 and 7: {5} alone
    assert labels.actions.tolist() == [[2, 4, 6], [5, -1, -1], [-1, -1, -1], [0, -1, -1]]
    for i, rec in enumerate(solver.solve_batch(world, X, g)):
        assert rec.valid and rec.cost == labels.cost[i] and rec.action_ids == tuple(labels.actions[i][labels.actions[i] >= 0])


def test_solve_returns_no_recourse_when_no_cover():
    world = CapabilityWorld(np.array([[1, 0, 0], [0, 1, 0]]), np.array([1.0, 2.0]), np.ones(3))
    for solver in SOLVERS:
        (rec,) = solver.solve(world, np.zeros(3))
        assert rec.status == "no_recourse" and rec.cost == np.inf and rec.steps == ()


def test_time_limited_answers_are_flagged(monkeypatch):
    class Unproven(_IlpSetCover):
        """A backend that always stops early with the most expensive cover: every usable action."""

        name = "unproven"

        def __init__(self, check_unique: bool = True, time_limit: float | None = 1.0):
            self.check_unique = check_unique  # re-solve with a no-good cut
            self.time_limit = time_limit  # seconds per solve

        def _prepare(self, world):
            return lambda deficit, usable, exclude: (np.flatnonzero(usable), False)

    world = paper_world()
    with pytest.warns(RuntimeWarning, match="before optimality was proven"):
        labels = Unproven().label_batch(world, PAPER_X[None])
    assert labels.n_optimal[0] == -1 and labels.cost[0] == world.costs[labels.actions[0]].sum()


def test_bad_backend_and_parameters():
    world = paper_world()
    with pytest.raises(ValueError, match="solver"):
        CvxpySetCover(solver="NOPE").label_batch(world, PAPER_X[None])
    with pytest.raises(ValueError, match="solver"):
        PulpSetCover(solver="NOPE").label_batch(world, PAPER_X[None])
    with pytest.raises(ValueError, match="time_limit"):
        PulpSetCover(time_limit=0).label_batch(world, PAPER_X[None])
    grouped = paper_world(access=np.ones((2, 8), dtype=bool))
    with pytest.raises(ValueError, match="group"):
        CvxpySetCover().label_batch(grouped, PAPER_X[None])


def test_brute_force_sequence_equals_cover_cost_without_discounts():
    for seed in range(5):
        world = random_world(seed, n=5, A=6)
        x = np.zeros(5, dtype=np.uint8)
        cost, optimal_sets = brute_force_covers(world, x)
        seq_cost, seq = brute_force_sequence(world, x)
        assert seq_cost == pytest.approx(cost)
        assert (seq is None and not optimal_sets) or tuple(sorted(seq)) in optimal_sets
