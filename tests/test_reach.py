"""Rays refused all along, reached by their probabilities (``learners/tabular/reach.py``): the estimated crossing
against a model whose logit is linear along a ray (exact there), the rays it leaves alone, batch independence,
and, inside ``budget_search``, an agent whose lead proposals all stop short of the boundary."""

from __future__ import annotations

import numpy as np
import pytest

import learners.tabular.budget_search as bs
from envs.black_box import BlackBoxModel, Budget
from envs.models import LinearModel
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular import WorldGeometry
from learners.tabular.first_round import LEAD_LADDER, _round_one
from learners.tabular.reach import REACH_FACTORS, reach_rows


def _world() -> TabularWorld:
    """Logistic: P = sigmoid(0.5 x0 + 0.25 x1 - 10) over x0, x1 in [0, 40]; its logit is linear along every ray."""
    schema = FeatureSchema((Feature("x0", "numeric", 0.0, 40.0), Feature("x1", "numeric", 0.0, 40.0)))
    return TabularWorld("toy/logistic", schema, LinearModel(np.array([0.5, 0.25]), -10.0))


def _ladder(world, X, P):
    """Round one's rows of the lead proposals and the model's probabilities of them, as ``budget_search`` asks."""
    geo = WorldGeometry.of(world)
    L = _round_one(geo, X, P, None, P.shape[1] * len(LEAD_LADDER), LEAD_LADDER)
    flat = L.reshape(-1, L.shape[-1])
    proba = world.model.predict_proba(np.nan_to_num(flat)).reshape(L.shape[:2])
    return geo, L, np.where(np.isnan(L).any(-1), np.nan, proba)


def test_the_crossing_of_a_linear_logit_is_exact():
    """Proposals at 50% and 60% of the way to the boundary: every rung (up to 1.4) refused, and the ray at the
    first factor lies on the boundary (logit 0 to 1e-9), the next factors past it (accepted)."""
    world = _world()
    X = np.array([[4.0, 4.0]])  # logit -7
    d = np.array([1.0, 0.5])  # the logit rises 0.625 per unit along d: the boundary at t = 11.2
    P = X[:, None, :] + np.array([0.5, 0.6])[None, :, None] * 11.2 * d[None, None, :]
    geo, L, proba = _ladder(world, X, P)
    assert (proba < 0.5).all()
    R = reach_rows(geo, X, P, LEAD_LADDER, L, L, proba)
    assert R.shape == (1, 2 * len(REACH_FACTORS), 2)
    z = world.model.score(R.reshape(-1, 2)).reshape(2, len(REACH_FACTORS))
    np.testing.assert_allclose(z[:, 0], 0.0, atol=1e-9)
    assert (z[:, 1:] > 0).all()


def test_a_ray_accepted_on_a_rung_or_falling_is_left_alone():
    """No row for a ray accepted somewhere on its ladder (the refinement has it), for one whose logit falls
    along it, or for one whose crossing lies past ``REACH_FAR`` times its last rung."""
    world = _world()
    X = np.array([[4.0, 4.0]])
    d = np.array([1.0, 0.5])
    P = X[:, None, :] + np.array([[0.9 * 11.2 * d, -2.0 * d, 0.05 * 11.2 * d]])  # accepted at 1.15; falls; far
    geo, L, proba = _ladder(world, X, P)
    assert (proba[0, :len(LEAD_LADDER)] > 0.5).any()
    R = reach_rows(geo, X, P, LEAD_LADDER, L, L, proba)
    assert np.isnan(R).all()


def test_rungs_not_scored_are_not_fitted():
    """A rung missing from round one's rows (a repeat, a broken rule) is left out of the fit; fewer than two
    scored rungs give no row."""
    world = _world()
    X = np.array([[4.0, 4.0]])
    P = X[:, None, :] + 0.5 * 11.2 * np.array([1.0, 0.5])[None, None, :]
    geo, L, proba = _ladder(world, X, P)
    C = L.copy()
    C[0, -1] = np.nan  # the last rung was not scored: the line through the two before it is the same line
    full = reach_rows(geo, X, P, LEAD_LADDER, L, L, proba)
    part = reach_rows(geo, X, P, LEAD_LADDER, L, C, np.where(np.isnan(C).any(-1), np.nan, proba))
    np.testing.assert_allclose(part, full, rtol=1e-9)
    C[0, 1:] = np.nan  # one rung left
    assert np.isnan(reach_rows(geo, X, P, LEAD_LADDER, L, C, proba)).all()


def test_each_agent_alone_is_its_batch_row():
    rng = np.random.default_rng(5)
    world = _world()
    X = rng.uniform(0, 10, (9, 2))
    X = X[~world.accepts(X)]
    P = np.clip(X[:, None, :] + rng.uniform(0, 12, (len(X), 3, 2)), 0, 40)
    geo, L, proba = _ladder(world, X, P)
    batch = reach_rows(geo, X, P, LEAD_LADDER, L, L, proba)
    assert (~np.isnan(batch).any(-1)).any()
    for i in range(len(X)):
        alone = reach_rows(geo, X[i:i + 1], P[i:i + 1], LEAD_LADDER, L[i:i + 1], L[i:i + 1], proba[i:i + 1])
        assert np.array_equal(alone, batch[i:i + 1], equal_nan=True)


class _ShortSurrogate:
    """A stand-in surrogate that picks round one's first rows as they come (the lead rungs lead either way)."""

    def pick(self, geo, X, C, rows, below):
        from learners.tabular.rows import compact

        return compact(C, rows)


@pytest.mark.parametrize("reach", [False, True])
def test_the_search_reaches_a_boundary_past_every_rung(reach, monkeypatch):
    """A lead proposal at 55% of the way to the boundary of a linear logit (a surrogate that far off), no
    other proposal: without ``reach`` the 2 x 64 search ends on a farther answer or none; with it the answer
    is within 1% of the boundary's point on the ray."""
    monkeypatch.setattr(bs, "REACH", reach)
    world = _world()
    geo = WorldGeometry.of(world)
    X = np.array([[4.0, 4.0]])
    d = np.array([1.0, 0.5])
    P = (X + 0.55 * 11.2 * d)[:, None, :]
    bb = BlackBoxModel(world.model)
    budget = Budget(2, 64)
    with bb.budget(budget):
        res = bs.budget_search(bb, geo, X, P, budget, surrogate=_ShortSurrogate(), lead=1)
    best = geo.distance(X, X + 11.2 * d)[0]
    near = bool(res.found[0]) and res.distance[0] <= 1.01 * best
    assert near == reach
