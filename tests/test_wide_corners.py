"""A search of ``WIDE_MIN_ROWS`` rows or more offers its unused rows ``WIDE_CORNERS`` nearest vocabulary corners per row
of its budget (``budget_search._corner_count``): a changed set no proposal names, nearer than the answer and past an
agent's first 1,000 corners, is reached; below that budget the count is as before."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import learners.tabular.budget_search as budget_search_module
from envs.black_box import BlackBoxModel, Budget
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular import WorldGeometry
from learners.tabular.budget_search import (
    CORNERS,
    WIDE_CORNERS,
    WIDE_MIN_ROWS,
    _corner_count,
    _corners_below,
    budget_search,
)
from learners.tabular.corners import nearest_corners
from learners.tabular.rows import nearest_first
from tests.blackbox_worlds import StepModel

# accepts (x0 >= 60 and x3 >= 60) or (x1 >= 90 and x2 >= 90)
TwoSets = functools.partial(StepModel, lambda X: ((X[:, 0] >= 60) & (X[:, 3] >= 60)) | ((X[:, 1] >= 90) & (X[:, 2] >= 90)))
# accepts x0 >= 30 and x3 >= 30 only: no single feature, and no row along the proposal's far set
OnlyPair = functools.partial(StepModel, lambda X: (X[:, 0] >= 30) & (X[:, 3] >= 30))


@pytest.fixture(scope="module")
def geo() -> WorldGeometry:
    schema = FeatureSchema(tuple(Feature(f"x{j}", "numeric", 0.0, 100.0) for j in range(4)))
    from envs.models import LinearModel  # the world's own model is not what the search asks

    return WorldGeometry.of(TabularWorld("toy/two-sets", schema, LinearModel(np.ones(4), -1.0)))


VOCAB = [np.arange(10.0, 101.0, 10.0)] * 4
X = np.zeros((1, 4))
P = np.array([[[0.0, 95.0, 95.0, 0.0]]])  # the proposal names the far set only
OPTIMUM = np.array([[60.0, 0.0, 0.0, 60.0]])


def test_the_optimum_lies_past_the_first_thousand_corners(geo):
    R, d = nearest_corners(geo, X, VOCAB, 5000)
    rank = int(np.flatnonzero((R[0] == OPTIMUM[0]).all(1))[0])
    assert CORNERS < rank < WIDE_CORNERS * WIDE_MIN_ROWS
    assert geo.distance(X, OPTIMUM)[0] < geo.distance(X, np.array([[0.0, 90.0, 90.0, 0.0]]))[0]


def test_a_wide_search_reaches_a_set_no_proposal_names(geo, monkeypatch):
    """With the bolder rows off (they too reach this toy's optimum, pushing its refused corners further): the wide
    corners reach the optimum, the first 1,000 alone do not."""
    monkeypatch.setattr(budget_search_module, "BOLD_SHARE", 0.0)
    model = TwoSets()
    wide = budget_search(BlackBoxModel(model), geo, X, P, Budget(8, 2000), vocab=VOCAB, steps=True)
    assert wide.found[0] and model.predict(wide.CF)[0]
    assert wide.distance[0] == pytest.approx(geo.distance(X, OPTIMUM)[0])
    monkeypatch.setattr(budget_search_module, "WIDE_MIN_ROWS", 10 ** 9)  # the first 1,000 corners only
    narrow = budget_search(BlackBoxModel(model), geo, X, P, Budget(8, 2000), vocab=VOCAB, steps=True)
    assert narrow.found[0] and narrow.distance[0] > 1.1 * wide.distance[0]


def test_the_corner_count_below_the_wide_budget_is_as_before():
    assert _corner_count(256) == 256 and _corner_count(1000) == CORNERS and _corner_count(WIDE_MIN_ROWS - 1) == CORNERS
    assert _corner_count(WIDE_MIN_ROWS) == WIDE_CORNERS * WIDE_MIN_ROWS


@pytest.mark.parametrize("k", [256, 5000])
def test_corners_cut_at_the_answer_keep_the_rows_the_search_would_take(geo, k):
    """``_corners_below`` carries only the corners up to the last one nearer than an answer (and builds those past
    the first ``CORNERS`` only where they can be nearer): ``nearest_first`` takes the same rows from them as from
    every corner, for answers near and far; and fewer are carried when the answers are near."""
    rng = np.random.default_rng(k)
    X = rng.choice([0.0, 10.0, 20.0], size=(6, 4))
    full, dist = nearest_corners(geo, X, VOCAB, k)
    below = np.array([0.05, 0.3, 0.8, 1.5, 2.5, np.nextafter(dist[5, 40], 0)])
    cut = _corners_below(geo, X, VOCAB, k, below)
    assert cut.shape[1] <= k
    same = ~np.isnan(cut).any(-1)  # past an agent's first CORNERS, unbuilt where none can be nearer: NaN
    assert np.array_equal(cut[same], full[:, :cut.shape[1]][same])
    for rows in (8, 64, 512):
        assert np.array_equal(nearest_first(geo, X, cut, rows, below), nearest_first(geo, X, full, rows, below),
                              equal_nan=True)
    own = _corners_below(geo, X, VOCAB, k, below, own=full)  # built ahead: cut the same way
    assert own.shape == cut.shape
    assert np.array_equal(nearest_first(geo, X, own, 64, below), nearest_first(geo, X, full, 64, below), equal_nan=True)
    near = _corners_below(geo, X, VOCAB, k, np.full(6, 0.1))
    assert near.shape[1] < full.shape[1] and (geo.distance(X[:, None, :], near[:, -1:])[:, 0] < 0.1 * (1 + 1e-9)).any()


def test_an_agent_with_nothing_accepted_gets_the_nearest_corners(geo):
    """An agent none of whose proposals, rays pushed further or screens is accepted (and no donors) is offered the
    vocabulary's nearest corners in its later rounds' free rows: a set only a corner holds is reached, not a false
    "no answer" (Adult forest's fresh agent 323 at 8 x 2,000 before)."""
    model = OnlyPair()
    res = budget_search(BlackBoxModel(model), geo, X, P, Budget(4, 1000), vocab=VOCAB, steps=True)
    assert res.found[0] and model.predict(res.CF)[0]
    assert res.distance[0] == pytest.approx(geo.distance(X, np.array([[30.0, 0.0, 0.0, 30.0]]))[0])
