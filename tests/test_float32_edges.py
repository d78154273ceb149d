"""A forest reads its rows as float32 (sklearn, XGBoost): a split edge the labels hold only as the copy that reads
on the other side of it is asked one float32 step away (``vocab_table.float32_sides``, ``moves.edge_twins``), and an
agent right on a split is crossed by the next float32 (``steps.float32_nudges``) (issue 56)."""

from __future__ import annotations

import numpy as np
import pytest

import learners.tabular.budget_search as budget_search_module
from envs.black_box import BlackBoxModel, Budget
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular import WorldGeometry
from learners.tabular.budget_search import budget_search
from learners.tabular.moves import edge_twins
from learners.tabular.steps import float32_nudges
from learners.tabular.vocab_table import float32_sides, vocab_sides

F32 = np.float32
EDGE = 495.0
ONE_COPY = 495.0000152587891  # a label's copy of the edge ``x <= 495``: float32 reads it as 495.00003, past the edge
MIDPOINT = 495.0000152587890625  # float32 reads it as 495.0 (ties to even), on the edge


class Float32Split:
    """Accepts ``x0 <= 495 and x1 > 400`` as sklearn's trees read a row: cast to float32 first."""

    n_features = 2

    def predict_proba(self, X):
        X = np.atleast_2d(X).astype(np.float32)
        p = ((X[:, 0] <= EDGE) & (X[:, 1] > 400.0)).astype(float)
        return np.column_stack([1 - p, p])

    def predict(self, X):
        return self.predict_proba(X)[:, 1] > 0.5


class OnTheSplit:
    """Accepts ``x0 > 580`` in float32: an agent at 580.0 is refused, the next float32 up accepted."""

    n_features = 2

    def predict_proba(self, X):
        p = (np.atleast_2d(X).astype(np.float32)[:, 0] > 580.0).astype(float)
        return np.column_stack([1 - p, p])


@pytest.fixture(scope="module")
def geo() -> WorldGeometry:
    schema = FeatureSchema((Feature("x0", "numeric", 0.0, 1000.0), Feature("x1", "numeric", 0.0, 1000.0)))
    from envs.models import LinearModel  # the world's own model is not what the search asks

    return WorldGeometry.of(TabularWorld("toy/float32", schema, LinearModel(np.ones(2), -1.0)))


def test_the_copies_read_as_the_tests_assume():
    assert F32(ONE_COPY) > EDGE and F32(MIDPOINT) == EDGE and MIDPOINT < ONE_COPY


def test_float32_sides_move_a_wrong_reading_one_float32_step_and_keep_exact_values():
    up, down = float32_sides(np.array([ONE_COPY, MIDPOINT, 2.0]), np.array([ONE_COPY, MIDPOINT, 2.0]))
    assert up[0] == ONE_COPY and F32(up[1]) > EDGE and up[2] == 2.0  # up: each reads past the edge
    assert down[0] == EDGE and down[1] == MIDPOINT and down[2] == 2.0  # down: each reads on it
    assert all(F32(v).astype(float) >= v for v in up) and all(F32(v).astype(float) <= v for v in down)
    for side in vocab_sides(np.array([1.0, 7.0, ONE_COPY])):  # every other move: the labels' one copy both ways
        assert side.tolist() == [1.0, 7.0, ONE_COPY]


def test_edge_twins_are_the_answers_first_inner_edge_on_its_side(geo):
    X = np.array([[610.0, 370.0], [100.0, 370.0], [610.0, 370.0]])
    B = np.array([[490.0, 480.0], [600.0, 480.0], [np.nan, np.nan]])  # down past the edge, up past it, none
    vocab = [np.array([300.0, ONE_COPY, 700.0]), np.zeros(0)]
    T = edge_twins(geo, X, B, vocab)
    assert T.shape == (3, 1, 2)
    assert T[0, 0].tolist() == [EDGE, 480.0]  # the labels' copy reads 495.00003, its twin 495.0
    assert np.isnan(T[1]).all()  # going up the labels' copy already reads past the edge: no twin
    assert np.isnan(T[2]).all()


def test_a_search_reaches_the_edge_the_labels_hold_only_on_its_far_side(geo, monkeypatch):
    X = np.array([[610.0, 370.0]])
    P = np.array([[[490.0, 480.0]]])
    vocab = [np.array([ONE_COPY, 490.0]), np.array([480.0000152587891])]
    model = Float32Split()
    optimum = np.array([[EDGE, 400.0000305175781]])  # the nearest row it accepts, as float32 reads it
    res = budget_search(BlackBoxModel(model), geo, X, P, Budget(8, 2000), vocab=vocab, steps=True)
    assert res.found[0] and model.predict(res.CF)[0] and res.CF[0, 0] == EDGE
    monkeypatch.setattr(budget_search_module, "EDGE_TWINS", False)
    without = budget_search(BlackBoxModel(model), geo, X, P, Budget(8, 2000), vocab=vocab, steps=True)
    assert without.found[0] and without.CF[0, 0] < EDGE and without.distance[0] > res.distance[0]
    assert geo.distance(X, optimum)[0] <= res.distance[0]


def test_an_agent_on_a_split_is_answered_one_float32_step_away(geo, monkeypatch):
    X = np.array([[580.0, 10.0]])
    N = float32_nudges(geo, X)
    assert N.shape == (1, 4, 2)
    assert N[0, :, 0].tolist() == [float(np.nextafter(F32(580.0), F32(np.inf))), 580.0,
                                   float(np.nextafter(F32(580.0), F32(-np.inf))), 580.0]
    P = np.array([[[700.0, 10.0]]])
    vocab = [np.array([700.0]), np.zeros(0)]
    step = float(np.nextafter(F32(580.0), F32(np.inf))) - 580.0
    res = budget_search(BlackBoxModel(OnTheSplit()), geo, X, P, Budget(8, 2000), vocab=vocab, steps=True)
    assert res.found[0] and 580.0 < res.CF[0, 0] <= 580.0 + step  # the nudge, or nearer past the split's reading
    monkeypatch.setattr(budget_search_module, "float32_nudges", lambda g, A: np.full((len(A), 0, 2), np.nan))
    monkeypatch.setattr(budget_search_module, "FREE_BISECT", False)  # (its rows bisect toward the split too)
    monkeypatch.setattr(budget_search_module, "FINE_ROWS", 0)  # (and the last round's fine grid closes in on it)
    without = budget_search(BlackBoxModel(OnTheSplit()), geo, X, P, Budget(8, 2000), vocab=vocab, steps=True)
    assert without.found[0] and without.CF[0, 0] - 580.0 > 2 * step
