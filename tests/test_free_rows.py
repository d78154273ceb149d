"""Rows a refinement round leaves free, with a round to follow (``budget_search``): the answer's columns bisected
there (``FREE_BISECT``: not only in the last round, where nothing else would ask them), and the vocabulary's corners
up to ``CORNER_FAR`` times the answer's distance (a set whose value the vocabulary lacks, reached past it and
shrunk later). Neither touches a search of two round trips (its one refinement round is the last)."""

from __future__ import annotations

import numpy as np
import pytest

import learners.tabular.budget_search as budget_search_module
from envs.black_box import BlackBoxModel, Budget
from envs.models import LinearModel
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular import WorldGeometry
from learners.tabular.budget_search import budget_search
from tests.blackbox_worlds import StepModel


@pytest.fixture(scope="module")
def geo() -> WorldGeometry:
    schema = FeatureSchema(tuple(Feature(f"x{j}", "numeric", 0.0, 100.0) for j in range(4)))
    return WorldGeometry.of(TabularWorld("toy/free-rows", schema, LinearModel(np.ones(4), -1.0)))


X = np.zeros((1, 4))
EDGE = StepModel(lambda X: X[:, 0] >= 37.3)  # a split no vocabulary value sits just past
PAIR = StepModel(lambda X: (X[:, 0] >= 55) | ((X[:, 1] >= 21) & (X[:, 2] >= 21)))  # the nearer set past its vocabulary


def test_free_rows_bisect_the_answer_before_the_last_round(geo, monkeypatch):
    vocab = [np.arange(10.0, 101.0, 10.0)] * 4
    P = np.array([[[50.0, 0.0, 0.0, 0.0]]])
    optimum = geo.distance(X, np.array([[37.3, 0.0, 0.0, 0.0]]))[0]
    on = budget_search(BlackBoxModel(EDGE), geo, X, P, Budget(8, 2000), vocab=vocab, steps=True)
    assert on.found[0] and EDGE.predict(on.CF)[0] and on.distance[0] == pytest.approx(optimum, rel=1e-6)
    monkeypatch.setattr(budget_search_module, "FREE_BISECT", False)  # bisected in the last round only
    off = budget_search(BlackBoxModel(EDGE), geo, X, P, Budget(8, 2000), vocab=vocab, steps=True)
    assert off.distance[0] > optimum * (1 + 1e-5)


def test_free_rows_reach_a_set_past_the_vocabulary(geo, monkeypatch):
    vocab = [np.array([55.0, 60.0, 90.0])] + [np.array([30.0, 60.0, 90.0])] * 3
    P = np.array([[[60.0, 0.0, 0.0, 0.0]]])
    on = budget_search(BlackBoxModel(PAIR), geo, X, P, Budget(4, 300), vocab=vocab, steps=True)
    answer_alone = geo.distance(X, np.array([[55.0, 0.0, 0.0, 0.0]]))[0]
    assert on.found[0] and PAIR.predict(on.CF)[0] and on.distance[0] < 0.9 * answer_alone
    assert (on.CF[0, 1:3] > 0).all()  # the pair's set, shrunk below its corner (30, 30)
    monkeypatch.setattr(budget_search_module, "CORNER_FAR", 0.0)
    off = budget_search(BlackBoxModel(PAIR), geo, X, P, Budget(4, 300), vocab=vocab, steps=True)
    assert off.distance[0] == pytest.approx(answer_alone)


@pytest.mark.parametrize("model", [EDGE, PAIR])
def test_two_round_trips_are_untouched(geo, monkeypatch, model):
    vocab = [np.array([30.0, 55.0, 60.0, 90.0])] * 4
    P = np.array([[[60.0, 0.0, 0.0, 0.0]]])
    on = budget_search(BlackBoxModel(model), geo, X, P, Budget(2, 256), vocab=vocab, steps=True)
    monkeypatch.setattr(budget_search_module, "FREE_BISECT", False)
    monkeypatch.setattr(budget_search_module, "CORNER_FAR", 0.0)
    off = budget_search(BlackBoxModel(model), geo, X, P, Budget(2, 256), vocab=vocab, steps=True)
    assert np.array_equal(on.CF, off.CF, equal_nan=True) and np.array_equal(on.rows, off.rows)
