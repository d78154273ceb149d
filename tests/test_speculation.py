"""Round two's moves guessed while round one's call waits (learners/tabular/speculation.py; issue 56): the
cached moves are the moves' finite rows in order, however the cache was filled; the search answers the
same bits with the guess as without it, and the guess is used; the helper's jobs start with the call."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import learners.tabular.budget_search as bs
from envs.black_box import BlackBoxModel, Budget
from learners.tabular import WorldGeometry
from learners.tabular.moves import _moves
from learners.tabular.speculation import MoveCache, _shrink_rows, cached_moves, guess_shifts, speculate
from learners.tabular.surrogate import Surrogate, SurrogateParams
from tests.tabular_worlds import toy_mlp_world


@pytest.fixture(scope="module")
def toy():
    """A random ReLU MLP over 4 real features, its rejected agents, a surrogate fitted on its scores near
    them and proposals around each agent."""
    rng = np.random.default_rng(3)  # a model that accepts 60% of its box
    world = toy_mlp_world(rng, D=4)
    geo = WorldGeometry.of(world)
    upper = np.array([f.upper for f in world.schema.features])
    R = rng.uniform(0, 1, (4000, 4)) * upper
    agents = R[~world.accepts(R)][:12]
    Q = rng.uniform(0, 1, (6000, 4)) * upper
    sur = Surrogate(SurrogateParams(hidden=(16, 16), max_epochs=30)).fit(Q, world.model.predict_proba(Q))
    P = geo.project(agents, agents[:, None, :] + rng.normal(0, 0.4, (len(agents), 6, 4)) * upper)
    return world, geo, agents, sur, P


def _finite(M: np.ndarray) -> np.ndarray:
    return M[~np.isnan(M).any(-1)]


@pytest.mark.parametrize("trades", [False, True])
def test_cached_moves_are_the_moves_finite_rows_in_order(toy, trades):
    """Built now, or taken from a cache another batch of starts filled, the rows are ``_moves``' finite rows
    in the same order (the second route: the search's own builder)."""
    world, geo, agents, _, _ = toy
    rng = np.random.default_rng(1)
    for i in range(4):
        X = agents[i:i + 1]
        S = geo.project(X, X[:, None, :] + rng.normal(0, 0.3, (1, 5, 4)) * geo.span * (rng.random((1, 5, 4)) < 0.7))
        S[0, 3] = np.nan  # a start that is not there moves nothing
        lo = np.where(rng.random((1, 5)) < 0.5, rng.uniform(0.3, 0.99, (1, 5)), 0.0)
        want = _finite(_moves(geo, X, S, None, False, lo, trades)[0])
        cold = cached_moves(MoveCache(), geo, X, S, None, lo, trades)[0]
        warm_cache = MoveCache()
        for t in (4, 1):  # filled one start at a time, in another order
            warm_cache.rows[MoveCache.key(S[0, t], trades)] = _shrink_rows(geo, X[0], S[0, t:t + 1], None, trades)[0]
        warm = cached_moves(warm_cache, geo, X, S, None, lo, trades)[0]
        assert np.array_equal(want, cold) and np.array_equal(want, warm)
        assert warm_cache.hits == 2 and warm_cache.misses == 2


def test_speculate_fills_the_cache_and_stops_when_told(toy):
    world, geo, agents, sur, P = toy
    C = P[:1]
    cache = MoveCache()
    speculate(cache, geo, agents[0], C, sur.logit, 0.0, guess_shifts(sur.sigma_), 3, None, False)
    assert len(cache.rows) >= 1
    stopped = MoveCache()
    stopped.stop.set()
    speculate(stopped, geo, agents[0], C, sur.logit, 0.0, guess_shifts(sur.sigma_), 3, None, False)
    assert not stopped.rows


def same_answers_with_the_guess(monkeypatch, run) -> tuple[list[MoveCache], object]:
    """``run()`` (each agent's answer, one at a time) with ``budget_search._guess`` recorded and with it off: the
    same answers, distances, rows and calls, some answer found and some start's moves taken from a cache. Returns
    the caches and the recording ``_guess``."""
    caches = []
    guess = bs._guess

    def recording(*args, **kwargs):
        out = guess(*args, **kwargs)
        if out is not None:
            caches.append(out[0])
        return out

    monkeypatch.setattr(bs, "_guess", recording)
    with_guess = run()
    monkeypatch.setattr(bs, "_guess", lambda *a, **k: None)
    without = run()
    for a, b in zip(with_guess, without, strict=True):
        assert np.array_equal(a.CF, b.CF, equal_nan=True) and np.array_equal(a.distance, b.distance)
        assert np.array_equal(a.rows, b.rows) and a.calls == b.calls
    assert any(r.found[0] for r in without)
    assert caches and sum(c.hits for c in caches) > 0
    return caches, recording


@pytest.mark.parametrize("budget", [Budget(2, 256), Budget(3, 400)])
def test_the_guess_changes_no_answer_and_is_used(toy, budget, monkeypatch):
    """Each agent alone, the model 5 ms away: the same answers, distances and rows scored with the guess as
    without it, and some starts' moves came from the cache; none is guessed for a model without latency."""
    world, geo, agents, sur, P = toy

    def run():
        out = []
        bb = BlackBoxModel(world.model, latency_s=0.005)  # one model: its calls' time is known after the first
        for i in range(len(agents)):
            with bb.budget(budget):
                out.append(bs.budget_search(bb, geo, agents[i:i + 1], P[i:i + 1], budget, surrogate=sur, lead=2))
        return out

    caches, recording = same_answers_with_the_guess(monkeypatch, run)
    monkeypatch.setattr(bs, "_guess", recording)
    caches.clear()
    # a model in this process: its calls take less than the least wait worth filling (the bar raised to a
    # second here: on a loaded machine even an in-process call can take the default's 3 ms; CI failed so)
    monkeypatch.setattr(bs, "GUESS_MIN_SECONDS", 1.0)
    bb = BlackBoxModel(world.model)
    for i in range(3):
        with bb.budget(budget):
            bs.budget_search(bb, geo, agents[i:i + 1], P[i:i + 1], budget, surrogate=sur, lead=2)
    assert not caches  # a call in this process: no wait to fill


def test_the_helpers_jobs_start_with_the_call_even_when_nothing_is_asked(toy):
    """``_accept`` sets ``go`` as its call starts, and also when it has no row to ask (a job waiting on it
    would otherwise wait for ever)."""
    world, geo, agents, _, _ = toy
    seen = []

    class Model:
        def predict_proba(self, X):
            seen.append(go.is_set())
            return np.zeros(len(X))

    go = threading.Event()
    bs._accept(Model(), geo, agents[:1], agents[None, :1], 0.5, go)
    assert seen == [True] and go.is_set()
    go = threading.Event()
    bs._accept(Model(), geo, agents[:1], np.full((1, 2, 4), np.nan), 0.5, go)
    assert seen == [True] and go.is_set()
