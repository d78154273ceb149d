"""Verified top-k decoding against brute force over the model's CFE classes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluation.verified import verified_top_k
from tests.worlds import random_world


class _Ranker:
    """A stand-in named-CFE model: fixed class list, seeded random probabilities."""

    def __init__(self, classes: np.ndarray, seed: int):
        self.classes_, self.seed = classes, seed

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        P = np.random.default_rng(self.seed).random((len(X), len(self.classes_)))
        return P / P.sum(1, keepdims=True)


def _classes(A: int, max_len: int = 2) -> np.ndarray:
    sets = [s for r in range(1, max_len + 1) for s in itertools.combinations(range(A), r)]
    out = np.full((len(sets), max_len), -1)
    for i, s in enumerate(sets):
        out[i, : len(s)] = s
    return out


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 40))
def test_cheapest_accepted_among_the_top_k(seed, k):
    world = random_world(seed, n=5, A=6)
    X = (np.random.default_rng(seed).random((30, 5)) < 0.4).astype(np.uint8)
    model = _Ranker(_classes(6), seed)
    pred = verified_top_k(model, world, X, k=k)
    P = model.predict_proba(X)
    for i in range(len(X)):
        top = np.argsort(-P[i], kind="stable")[: min(k, len(P[i]))]
        _, _, ok = world.rollout(np.repeat(X[i : i + 1], len(top), 0), model.classes_[top])
        cost = np.where(ok, world.set_costs(model.classes_[top]), np.inf)
        want = model.classes_[top[np.argmin(cost)] if ok.any() else top[0]]
        got_cost = world.set_costs(pred.sets[i : i + 1])[0]
        if ok.any():  # the cheapest accepted (ties: any of equal cost)
            assert world.rollout(X[i : i + 1], pred.sets[i : i + 1])[2][0]
            assert got_cost == pytest.approx(cost.min())
        else:  # none accepted: the likeliest
            np.testing.assert_array_equal(pred.sets[i], want)


def test_all_classes_gives_the_exact_optimum_when_it_is_a_class():
    from solvers.setcover_fast import FastSetCover

    world = random_world(3, n=5, A=6)
    X = (np.random.default_rng(0).random((200, 5)) < 0.4).astype(np.uint8)
    X = X[~world.accepts(X)]
    labels = FastSetCover().label_batch(world, X)
    keep = labels.has_cover & (labels.length <= 2)
    model = _Ranker(_classes(6), 0)
    pred = verified_top_k(model, world, X[keep], k=len(model.classes_))
    np.testing.assert_allclose(world.set_costs(pred.sets), labels.cost[keep])


def test_bad_arguments():
    world = random_world(0)
    with pytest.raises(ValueError, match="k:"):
        verified_top_k(_Ranker(_classes(8), 0), world, np.zeros((1, 6)), k=0)
    with pytest.raises(ValueError, match="model:"):
        verified_top_k(object(), world, np.zeros((1, 6)))
