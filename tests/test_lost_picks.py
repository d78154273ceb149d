"""``budget_search``'s ``lost_picks``: rows for the agents a round left with nothing accepted, first in their next
round (a share ``LOST_PICK_SHARE`` of its rows). A set no proposal, ray, screen or near corner holds is reached
there; an agent with an answer is answered bit for bit as without them, and the picks are asked only for the lost
agents, at most their own share."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from envs.black_box import BlackBoxModel, Budget
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular import WorldGeometry
from learners.tabular.budget_search import LOST_PICK_SHARE, budget_search
from learners.tabular.corners import nearest_corners
from tests.blackbox_worlds import StepModel

# accepts x0 >= 20 and x3 >= 20 (near), or x1 >= 90 alone (far)
Sets = functools.partial(StepModel, lambda X: ((X[:, 0] >= 20) & (X[:, 3] >= 20)) | (X[:, 1] >= 90))
VOCAB = [np.arange(10.0, 101.0, 10.0)] * 4
OPTIMUM = np.array([20.0, 0.0, 0.0, 20.0])
BUDGET = Budget(2, 16)


@pytest.fixture(scope="module")
def geo() -> WorldGeometry:
    schema = FeatureSchema(tuple(Feature(f"x{j}", "numeric", 0.0, 100.0) for j in range(4)))
    from envs.models import LinearModel  # the world's own model is not what the search asks

    return WorldGeometry.of(TabularWorld("toy/lost", schema, LinearModel(np.ones(4), -1.0)))


# agent 0's proposal names x2 only (refused at every scale); agent 1's names x1 (accepted in round one)
X = np.zeros((2, 4))
P = np.array([[[0.0, 0.0, 80.0, 0.0]], [[0.0, 95.0, 0.0, 0.0]]])


class Picks:
    """A stand-in for a student: the optimum first, then far corners; records which agents it was asked for."""

    def __init__(self):
        self.asked: list[np.ndarray] = []

    def __call__(self, agents: np.ndarray, k: int) -> np.ndarray:
        self.asked.append(np.asarray(agents))
        out = np.full((len(agents), k, 4), np.nan)
        out[:, 0] = OPTIMUM
        out[:, 1:] = 100.0
        return out


def test_the_optimum_lies_past_the_corners_a_small_budget_reaches(geo):
    R, _ = nearest_corners(geo, X[:1], VOCAB, 2000)
    assert int(np.flatnonzero((R[0] == OPTIMUM).all(1))[0]) > BUDGET.rows


def test_a_lost_agent_is_answered_by_its_picks(geo):
    """Without the picks agent 0's round two finds only the far set (x1 to its bound, a screen); with them it is
    answered at the optimum. Agent 1 (answered in round one) is answered bit for bit as without the picks, and the
    picks are asked for agent 0 alone, once."""
    model = Sets()
    without = budget_search(BlackBoxModel(model), geo, X, P, BUDGET, vocab=VOCAB, steps=True)
    assert without.found[0] and without.distance[0] > 2 * geo.distance(X[:1], OPTIMUM[None])[0]
    picks = Picks()
    lost = budget_search(BlackBoxModel(model), geo, X, P, BUDGET, vocab=VOCAB, steps=True, lost_picks=picks)
    assert lost.found[0] and model.predict(lost.CF[:1])[0]
    assert lost.distance[0] == pytest.approx(geo.distance(X[:1], OPTIMUM[None])[0])
    assert len(picks.asked) == 1 and picks.asked[0].tolist() == [0]
    assert np.array_equal(lost.CF[1], without.CF[1]) and lost.distance[1] == without.distance[1]


def test_the_picks_take_at_most_their_share_of_the_round(geo):
    """Picks past the agent's share of its round are not asked: of round two's rows, those that are picks (every
    one accepted, each distinct) are at most ``LOST_PICK_SHARE`` of the rows round two had."""

    class Far(Picks):
        def __call__(self, agents, k):
            out = super().__call__(agents, k)
            out[:, :, 1] = np.linspace(1.0, 9.0, k)[None, :]  # every pick accepted, each distinct
            return out

    model = Sets()
    budget = BUDGET
    bb = BlackBoxModel(model)
    seen = []
    inner = bb.predict_proba

    def spy(R):
        seen.append(np.asarray(R).copy())
        return inner(R)

    bb.predict_proba = spy
    budget_search(bb, geo, X[:1], P[:1], budget, vocab=VOCAB, steps=True, lost_picks=Far())
    second = seen[1]
    picked = np.isclose(second[:, 0], 20.0) & np.isclose(second[:, 3], 20.0)
    cap = budget.rows - len(seen[0])
    assert 0 < picked.sum() <= int(LOST_PICK_SHARE * cap)
