"""The batched exhaustive two-step lookahead (learners.policies.sequential_twostep) gives the same
first steps and totals as the per-agent loop it replaces, on both default worlds."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.sequential import SequentialWorld
from envs.sequential_candidates import Candidates, FlatGrid, candidates
from envs.sequential_env import default_world
from learners.policies.sequential_twostep import default_chunk, two_step_best


@cache
def _world(name: str) -> tuple[SequentialWorld, FlatGrid, np.ndarray]:
    world, X = default_world(name)
    return world, FlatGrid.of(world), X


def reference(world: SequentialWorld, grid: FlatGrid, X: np.ndarray, used: np.ndarray, cand: Candidates,
              best: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The per-agent loop of ``lookahead_choose(depth=2)``, returning the (total, first step) it
    would adopt where strictly cheaper than ``best`` (inf, -1 elsewhere)."""
    B = len(X)
    out_t, out_k = np.full(B, np.inf), np.full(B, -1, dtype=np.int64)
    for i in range(B):
        ks = np.flatnonzero(cand.mask[i] & ~cand.accepted[i] & (cand.cost[i] < best[i]))
        if len(ks) == 0:
            continue
        a1 = grid.action[ks]
        Y = world.apply(np.repeat(X[i:i + 1], len(ks), 0), a1, grid.value[ks]).states
        u = np.repeat(used[i:i + 1], len(ks), 0)
        u[np.arange(len(ks)), a1] = True
        c2 = candidates(world, grid, Y, u)
        total = np.where(c2.accepted, cand.cost[i, ks][:, None] + c2.cost, np.inf)
        j = int(np.argmin(total.min(1)))
        if total[j].min() < best[i]:
            out_t[i], out_k[i] = total[j].min(), ks[j]
    return out_t, out_k


def _one_step_best(cand: Candidates) -> np.ndarray:
    return np.where(cand.accepted, cand.cost, np.inf).min(1)


def _compare(world: SequentialWorld, grid: FlatGrid, X: np.ndarray, used: np.ndarray,
             chunk: int | None = None) -> int:
    """Assert the batched answer equals the reference; the number of agents it improves on."""
    cand = candidates(world, grid, X, used)
    best = _one_step_best(cand)
    ref_t, ref_k = reference(world, grid, X, used, cand, best)
    tot, first = two_step_best(world, grid, X, used, cand, best, chunk=chunk)
    np.testing.assert_array_equal(first, ref_k)
    assert np.array_equal(np.isinf(tot), np.isinf(ref_t))
    assert np.isclose(tot, ref_t, rtol=1e-12, atol=0).all()
    better = first >= 0  # what lookahead_choose adopts
    assert (tot[better] < best[better]).all()
    return int(better.sum())


def _after_one_step(world: SequentialWorld, grid: FlatGrid, X: np.ndarray, rng: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Agents after one random allowed step that leaves them rejected, with its action used."""
    cand = candidates(world, grid, X, np.zeros((len(X), world.n_actions), bool))
    ok = cand.mask & ~cand.accepted
    rows = np.flatnonzero(ok.any(1))
    k = np.array([rng.choice(np.flatnonzero(ok[i])) for i in rows])
    Y = world.apply(X[rows], grid.action[k], grid.value[k]).states
    used = np.zeros((len(rows), world.n_actions), bool)
    used[np.arange(len(rows)), grid.action[k]] = True
    return Y, used


def _agents(world: SequentialWorld, grid: FlatGrid, X: np.ndarray) -> np.ndarray:
    """20 agents: the first 15 and 5 whose estimated two-step completion beats their cheapest
    accepting step (on Adult few agents start with a cheaper two-step completion than one step)."""
    cand = candidates(world, grid, X, np.zeros((len(X), world.n_actions), bool))
    est = np.where(cand.two_step_checked, cand.two_step, np.inf).min(1)
    hopeful = np.setdiff1d(np.flatnonzero(est < _one_step_best(cand)), np.arange(15))[:5]
    return np.r_[np.arange(15), hopeful]


@pytest.mark.parametrize("name", ["adult", "german"])
def test_equals_per_agent_loop(name: str) -> None:
    world, grid, X = _world(name)
    Xs = X[_agents(world, grid, X)]
    # at the start: some agents must take the two-step branch for the test to mean anything
    assert _compare(world, grid, Xs, np.zeros((len(Xs), world.n_actions), bool)) > 0
    # small chunks split agents across chunks: the same answer
    _compare(world, grid, Xs[:6], np.zeros((6, world.n_actions), bool), chunk=7)
    Y, used = _after_one_step(world, grid, X[20:40], np.random.default_rng(0))
    assert len(Y) > 0
    _compare(world, grid, Y, used)


def test_empty_and_bounds() -> None:
    world, grid, X = _world("german")
    Xs = X[:5]
    used = np.zeros((5, world.n_actions), bool)
    cand = candidates(world, grid, Xs, used)
    tot, first = two_step_best(world, grid, Xs, used, cand, np.zeros(5))  # no first step is < 0
    assert np.isinf(tot).all() and (first == -1).all()
    tot, first = two_step_best(world, grid, Xs, used, cand, np.full(5, np.inf))
    found = first >= 0
    assert found.any() and np.isfinite(tot[found]).all() and np.isinf(tot[~found]).all()
    assert (~cand.accepted[found, first[found]]).all() and cand.mask[found, first[found]].all()
    assert default_chunk(world, grid) >= 1
    with pytest.raises(ValueError, match="chunk"):
        two_step_best(world, grid, Xs, used, cand, np.full(5, np.inf), chunk=0)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["adult", "german"]), seed=st.integers(0, 2**31 - 1),
       n=st.integers(1, 8), p_used=st.floats(0.0, 0.6), chunk=st.sampled_from([None, 1, 5, 64]))
def test_property_random_subsets(name: str, seed: int, n: int, p_used: float, chunk: int | None) -> None:
    world, grid, X = _world(name)
    rng = np.random.default_rng(seed)
    Xs = X[rng.choice(len(X), n, replace=False)]
    used = rng.random((n, world.n_actions)) < p_used
    _compare(world, grid, Xs, used, chunk=chunk)
