"""``budget_search``'s ``next_picks`` (a student's picks in round two). For an agent round one left with nothing
accepted they lead its round two (a share ``LOST_PICK_SHARE`` of its rows at most): a set no proposal, ray, screen or
near corner holds is reached there. For an agent with an answer, the first ``NEAR_PICKS`` past round one's picks that
are nearer than the answer lead its moves; with none nearer it is answered bit for bit as without them."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from envs.black_box import BlackBoxModel, Budget
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular import WorldGeometry
from learners.tabular.budget_search import LOST_PICK_SHARE, NEAR_PICKS, budget_search
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
    """A stand-in for a student: the optimum first, then far corners; records whom and how many it was asked for."""

    def __init__(self):
        self.asked: list[tuple[list[int], int]] = []

    def __call__(self, agents: np.ndarray, k: int) -> np.ndarray:
        self.asked.append((np.asarray(agents).tolist(), int(k)))
        out = np.full((len(agents), k, 4), np.nan)
        out[:, 0] = OPTIMUM
        out[:, 1:] = 100.0
        return out


def test_the_optimum_lies_past_the_corners_a_small_budget_reaches(geo):
    R, _ = nearest_corners(geo, X[:1], VOCAB, 2000)
    assert int(np.flatnonzero((R[0] == OPTIMUM).all(1))[0]) > BUDGET.rows


def test_a_lost_agent_is_answered_by_its_picks(geo):
    """Without the picks agent 0's round two finds only the far set (x1 to its bound, a screen); with them it is
    answered at the optimum. Agent 2, answered in round one nearer than any pick (it starts at x1 = 85), is answered
    bit for bit as without them. The picks are asked once for the agents with an answer (the next ``NEAR_PICKS``)
    and once for agent 0."""
    model = Sets()
    X3 = np.concatenate([X, [[0.0, 85.0, 0.0, 0.0]]])
    P3 = np.concatenate([P, [[[0.0, 95.0, 0.0, 0.0]]]])
    without = budget_search(BlackBoxModel(model), geo, X3, P3, BUDGET, vocab=VOCAB, steps=True)
    assert without.found[0] and without.distance[0] > 2 * geo.distance(X[:1], OPTIMUM[None])[0]
    picks = Picks()
    lost = budget_search(BlackBoxModel(model), geo, X3, P3, BUDGET, vocab=VOCAB, steps=True, next_picks=picks)
    assert lost.found[0] and model.predict(lost.CF[:1])[0]
    assert lost.distance[0] == pytest.approx(geo.distance(X[:1], OPTIMUM[None])[0])
    assert picks.asked[0] == ([0, 1, 2], NEAR_PICKS) and len(picks.asked) == 2 and picks.asked[1][0] == [0]
    assert without.distance[2] < geo.distance(X3[2:], OPTIMUM[None])[0]
    assert np.array_equal(lost.CF[2], without.CF[2]) and lost.distance[2] == without.distance[2]


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
    budget_search(bb, geo, X[:1], P[:1], budget, vocab=VOCAB, steps=True, next_picks=Far())
    second = seen[1]
    picked = np.isclose(second[:, 0], 20.0) & np.isclose(second[:, 3], 20.0)
    cap = budget.rows - len(seen[0])
    assert 0 < picked.sum() <= int(LOST_PICK_SHARE * cap)


def test_picks_nearer_than_an_answer_lead_round_two(geo):
    """An agent answered in round one by the far set (x1 to 95) is offered the student's next picks nearer than that
    answer ahead of its moves: the optimum (a set no proposal names) is its answer. The picks round one asked
    already are counted past (``NEAR_PICKS`` more are asked for)."""
    model = Sets()
    x, p = X[1:], P[1:]
    alone = budget_search(BlackBoxModel(model), geo, x, p, BUDGET, vocab=VOCAB, steps=True)
    assert alone.found[0] and alone.distance[0] > 2 * geo.distance(x, OPTIMUM[None])[0]
    picks = Picks()
    first = np.full((1, 2, 4), 100.0)  # round one's picks: two far rows
    res = budget_search(BlackBoxModel(model), geo, x, p, BUDGET, vocab=VOCAB, steps=True, next_picks=picks,
                        picks=first, grid_share=0.25)
    assert res.found[0] and res.distance[0] == pytest.approx(geo.distance(x, OPTIMUM[None])[0])
    assert picks.asked == [([0], NEAR_PICKS + 2)]


@pytest.mark.parametrize("near", [0, 5, 128])
def test_near_picks_is_how_many_are_asked_for(geo, near):
    """``near_picks``: the picks asked for past round one's (none asked where 0: the far answer stays, as without
    any picks)."""
    model = Sets()
    x, p = X[1:], P[1:]
    picks = Picks()
    first = np.full((1, 2, 4), 100.0)
    res = budget_search(BlackBoxModel(model), geo, x, p, BUDGET, vocab=VOCAB, steps=True, next_picks=picks,
                        picks=first, grid_share=0.25, near_picks=near)
    if near == 0:
        alone = budget_search(BlackBoxModel(model), geo, x, p, BUDGET, vocab=VOCAB, steps=True, picks=first,
                              grid_share=0.25)
        assert picks.asked == [] and res.distance[0] == alone.distance[0]
    else:
        assert picks.asked == [([0], near + 2)]
        assert res.distance[0] == pytest.approx(geo.distance(x, OPTIMUM[None])[0])


def test_a_lost_agent_whose_picks_were_refused_gets_the_next_spread_over_their_sets(geo):
    """Round one asked the student's picks (x0 alone, refused) and nothing was accepted: round two lists
    ``LOST_SPREAD`` times more picks than it has rows for and takes every other one round robin over their changed
    sets, the sets round one refused last, so the one pick of another set, far down a list of x0-alone corners, is
    asked and is the answer (nearest first it would be past the rows round two has)."""
    from learners.tabular.set_spread import LOST_SPREAD

    class Crowded(Picks):
        def __call__(self, agents, k):
            self.asked.append((np.asarray(agents).tolist(), int(k)))
            out = np.zeros((len(agents), k, 4))
            out[:, :, 0] = np.linspace(21.0, 99.0, k)[None, :]  # x0 alone: refused
            if k > 20:
                out[:, k - 1] = OPTIMUM
            return out

    model = Sets()
    picks = Crowded()
    first = np.zeros((1, 2, 4))
    first[:, :, 0] = [30.0, 60.0]  # round one's picks: x0 alone, refused
    res = budget_search(BlackBoxModel(model), geo, X[:1], P[:1], BUDGET, vocab=VOCAB, steps=True, next_picks=picks,
                        picks=first, grid_share=0.25)
    lost_k = picks.asked[-1][1]
    assert (lost_k - 2) % LOST_SPREAD == 0 and lost_k > 20  # round one's picks, then LOST_SPREAD per row kept
    assert res.found[0] and res.distance[0] == pytest.approx(geo.distance(X[:1], OPTIMUM[None])[0])
