"""evaluation/counterfactual_metrics.py: every metric on a hand-computed example, violations, summaries."""

from __future__ import annotations

import numpy as np
import pytest
from blackbox_worlds import RULES, SCHEMA, toy_data

from envs.recourse import Recourse
from envs.tabular import TabularWorld
from evaluation.counterfactual_metrics import (
    CounterfactualScorer,
    dominates,
    gap_summary,
    ratio_summary,
    summarize,
)
from solvers.geco import Plaf


class AcceptAll:
    """A model that accepts every row except those with income 0."""

    n_features = 7

    def predict_proba(self, X):
        return (np.atleast_2d(X)[:, 3] > 0).astype(float)

    def predict(self, X):
        return self.predict_proba(X) > 0.5


def answer(*rows) -> list[Recourse]:
    return [Recourse((), (), np.array(r, float), 0.0, True, "test") for r in rows]


@pytest.fixture()
def scorer():
    world = TabularWorld("toy/stub", SCHEMA, AcceptAll())
    return CounterfactualScorer(n_diverse=2, plaf=Plaf()).fit(world, toy_data())  # MADs: age 1, edu 1, income 1.5


X0 = [1, 1, 0, 2, 1, 0, 0]
CF1 = [2, 1, 0, 2, 1, 0, 0]  # age + 1
CF2 = [1, 1, 0, 5, 0, 1, 0]  # income + 3, job x -> y


def test_hand_computed_example(scorer):
    m = scorer.score(np.array(X0, float), answer(CF1, CF2), seconds=0.5, model_calls=7)
    assert m["returned"] == 2 and m["valid"] == 2 and m["validity"] == 1.0 and m["coverage"] == 1.0
    assert m["proximity"] == pytest.approx((1 / 3 + 2 / 3) / 2)  # (|1|/1)/3 and (3/1.5)/3
    assert m["proximity_cat"] == pytest.approx((0 + 0.5) / 2)  # job changed: 1 of 2 categorical
    assert m["sparsity"] == pytest.approx((1 / 5 + 2 / 5) / 2)
    assert m["diversity"] == pytest.approx((1 + 2) / 3 + 0.5)
    assert m["norm_diversity"] == pytest.approx(1.5 / (1 / 3 + 2 / 3 + 0.5))
    assert m["distance"] == pytest.approx(0.25 / 5)  # MACE l1: age moved 1 of its range 4, over 5 features
    assert m["changed"] == 1 and m["changed_mean"] == 1.5
    assert (m["seconds"], m["model_calls"], m["violations"]) == (0.5, 7, 0)


def test_invalid_and_violating_counterfactuals(scorer):
    x = np.array(X0, float)
    sex = [1, 1, 1, 2, 1, 0, 0]  # immutable sex changed
    younger = [0, 1, 0, 2, 1, 0, 0]  # increase-only age decreased
    fractional = [1, 1, 0, 2.5, 1, 0, 0]
    rejected = [1, 2, 0, 0, 1, 0, 0]  # income 0: the model rejects it
    m = scorer.score(x, answer(CF1, sex, younger, fractional, rejected))
    assert m["returned"] == 5 and m["violations"] == 3 and m["valid"] == 1
    assert m["validity"] == pytest.approx(4 / 5) and m["coverage"] == 0.0 and m["found"]
    assert m["diversity"] is None and m["proximity"] == pytest.approx(1 / 3)
    empty = scorer.score(x, [Recourse.none("test")])
    assert empty["returned"] == 0 and not empty["found"] and empty["distance"] is None


def test_plaf_rules_count_as_violations():
    world = TabularWorld("toy/stub", SCHEMA, AcceptAll())
    scorer = CounterfactualScorer(plaf=RULES).fit(world, toy_data())
    x = np.array(X0, float)
    m = scorer.score(x, answer([1, 2, 0, 2, 1, 0, 0], [3, 2, 0, 2, 1, 0, 0]))  # edu up: age +2 needed
    assert m["violations"] == 1 and m["valid"] == 1


def test_summaries():
    rows = [{"violations": 0, "seconds": 1.0, "distance": 0.2, "coverage": 1.0},
            {"violations": 2, "seconds": 3.0, "distance": None, "coverage": 0.0}]
    s = summarize(rows)
    assert (s["agents"], s["violations"], s["seconds"], s["seconds_max"]) == (2, 2, 2.0, 3.0)
    assert s["distance"] == 0.2 and s["coverage"] == 0.5 and s["proximity"] is None
    g = gap_summary([1.0, 1.005, 1.2, None, 0.99], [1.0, 1.0, 1.0, 1.0, 1.0])
    assert (g["agents"], g["missing"]) == (4, 1)
    assert g["optimal"] == pytest.approx(3 / 4) and g["worse_10pct"] == pytest.approx(1 / 4)
    assert g["better"] == pytest.approx(1 / 4) and g["gap_max"] == pytest.approx(0.2)
    assert gap_summary([None], [None])["agents"] == 0


def test_errors():
    world = TabularWorld("toy/stub", SCHEMA, AcceptAll())
    with pytest.raises(ValueError, match="n_diverse"):
        CounterfactualScorer(n_diverse=0).fit(world, toy_data())
    with pytest.raises(ValueError, match="data: expected 7 features"):
        CounterfactualScorer().fit(world, toy_data()[:, :3])


def test_distance_accepted_ignores_constraints(scorer):
    x = np.array(X0, float)
    sex = [1, 1, 1, 2, 1, 0, 0]  # immutable sex changed: accepted by the model, not valid
    m = scorer.score(x, answer(sex))
    assert m["distance"] is None and m["distance_accepted"] == pytest.approx(1 / 5)  # a binary change, J = 5
    m = scorer.score(x, answer(CF1, sex))
    assert m["distance"] == pytest.approx(0.05) and m["distance_accepted"] == pytest.approx(0.05)
    rows = [m, scorer.score(x, answer(sex)), scorer.score(x, [Recourse.none("test")])]
    s = summarize(rows)
    assert (s["valid_count"], s["accepted_count"], s["valid_share"]) == (1, 2, pytest.approx(1 / 3))
    assert s["distance_accepted"] == pytest.approx((0.05 + 0.2) / 2)


def test_ratio_summary():
    r = ratio_summary([0.2, 0.1, None, 0.3], [0.1, 0.1, 0.1, None])  # ratios 2 and 1
    assert r["compared"] == 2 and r["ratio_median"] == pytest.approx(1.5) and r["ratio_mean"] == pytest.approx(1.5)
    assert r["ratio_p90"] == pytest.approx(1.9) and r["within"] == pytest.approx(0.5)
    assert ratio_summary([0.0], [0.0])["ratio_median"] == 1.0  # the agent itself was optimal (d* = 0)
    assert ratio_summary([None], [0.1]) == {"compared": 0, "ratio_median": None, "ratio_mean": None,
                                            "ratio_p90": None, "within": None}


def test_dominates():
    ours = {"violations": 0, "ratio_median": 1.0, "valid_share": 1.0, "seconds": 0.1}
    peer = {"violations": 3, "ratio_median": 2.0, "valid_share": 0.9, "seconds": 0.2}
    assert dominates(ours, peer)
    assert not dominates({**ours, "seconds": 0.3}, peer)  # slower
    assert not dominates({**ours, "violations": 1}, peer)  # breaks a constraint
    assert not dominates({**ours, "valid_share": 0.8}, peer)  # less valid
    assert dominates(ours, {**peer, "ratio_median": 1.0})  # as close, more valid and faster: Pareto-better
    assert not dominates(ours, {**peer, "ratio_median": 1.0}, strict_distance=True)  # but not strictly closer
    assert dominates(ours, peer, strict_distance=True)
    assert not dominates(ours, {**ours})  # equal on every axis: no domination
    assert dominates(ours, {**peer, "ratio_median": None})  # a peer with no valid answer is infinitely far
    assert not dominates({**ours, "ratio_median": None}, peer)
