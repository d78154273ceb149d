"""``learners/tabular/lifts.py``: near misses (refused rows most trees accept) lifted by one more feature."""

from __future__ import annotations

import numpy as np
import pytest

from envs.black_box import BlackBoxModel, Budget
from envs.models import Tree, TreeEnsemble
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular import WorldGeometry
from learners.tabular.budget_search import budget_search
from learners.tabular.first_round import screens
from learners.tabular.lifts import NEAR_MIN, lift_rows, lifted, near_misses
from learners.tabular.rows import row_keys

D = 5


def _stump(j: int, t: float = 5.5) -> Tree:
    """Accepts (P(1) = 1) iff float32(x_j) > t."""
    return Tree(np.array([1, -1, -1]), np.array([2, -1, -1]), np.array([j, 0, 0]), np.array([t, 0.0, 0.0]),
                np.array([0.0, 0.0, 1.0]), np.array([0.0, 1.0, 0.0]))


@pytest.fixture(scope="module")
def votes() -> TabularWorld:
    """A forest of five stumps, one per feature (x0, x1 in [0, 100]: cheap to move by 6; the others in
    [0, 10]): P(accept) is the share of x_j > 5.5, and the model accepts three or more; a row with two is a
    near miss (0.4)."""
    schema = FeatureSchema(tuple(Feature(f"x{j}", "numeric", 0.0, 100.0 if j < 2 else 10.0) for j in range(D)))
    return TabularWorld("toy/votes", schema, TreeEnsemble([_stump(j) for j in range(D)], D))


def test_lift_rows_are_each_near_miss_with_one_screen_feature_more(votes):
    geo = WorldGeometry.of(votes)
    X = np.zeros((3, D))
    B = np.array([[9.0, 9.0, 0, 0, 0], [0, 0, 0, 0, 0], [np.nan] * D])
    Sc = screens(geo, X)
    L = lift_rows(geo, X, B, Sc)
    for i in range(3):
        for q in range(Sc.shape[1]):
            moved = np.flatnonzero(np.abs(np.nan_to_num(Sc[i, q]) - X[i]) > 1e-12)
            if np.isnan(B[i]).any() or np.isnan(Sc[i, q]).any() or (np.abs(B[i, moved] - X[i, moved]) > 1e-12).any():
                assert np.isnan(L[i, q]).all()  # a feature B changes already, or nothing to lift
            else:
                want = B[i].copy()
                want[moved] = Sc[i, q, moved]
                np.testing.assert_array_equal(L[i, q], want)


def test_near_misses_are_the_refused_rows_most_trees_accept_nearer_than_the_answer(votes):
    geo = WorldGeometry.of(votes)
    X = np.zeros((1, D))
    rows = np.array([[[9, 9, 0, 0, 0], [6, 0, 0, 0, 0], [9, 9, 9, 0, 0], [1, 1, 1, 1, 9], [0, 0, 0, 10, 10]]], float)
    bb = BlackBoxModel(votes.model)
    proba = bb.predict_proba(rows[0])[None]
    ok = proba > 0.5
    best = geo.distance(X, rows[0, 2][None])  # the accepted row's distance
    near, p = near_misses(geo, X, rows, proba, ok, best, k=3)
    # two stumps accept [9, 9, 0, 0, 0] (0.4 >= NEAR_MIN) and it is nearer than the answer; [..., 10, 10] is
    # as likely but farther than the answer; [6, 0, ...] has one vote (0.2), [1, 1, 1, 1, 9] one
    assert NEAR_MIN <= 0.4 and p[0, 0] == pytest.approx(0.4) and (p[0, 1:] < 0).all()
    np.testing.assert_array_equal(near[0, 0], rows[0, 0])
    assert np.isnan(near[0, 1:]).all()
    # kept from a round before: still a near miss while nearer than the best answer
    again, p2 = near_misses(geo, X, np.full((1, 1, D), np.nan), np.full((1, 1), np.nan), np.zeros((1, 1), bool),
                            best, kept=(near, p), k=1)
    np.testing.assert_array_equal(again[0, 0], rows[0, 0])
    gone, _ = near_misses(geo, X, np.full((1, 1, D), np.nan), np.full((1, 1), np.nan), np.zeros((1, 1), bool),
                          geo.distance(X, rows[0, 1][None]), kept=(near, p), k=1)
    assert np.isnan(gone).all()  # an answer nearer than it was found


def test_lifted_rows_are_new_nearer_than_the_answer_and_within_each_agents_cap(votes):
    geo = WorldGeometry.of(votes)
    X = np.zeros((2, D))
    near = np.array([[[9, 9, 0, 0, 0]], [[0, 0, 0, 8, 8]]], float)
    Sc = screens(geo, X)
    first = lift_rows(geo, X, near[:, 0], Sc)
    asked = row_keys(np.where(np.isnan(first[:, :1]).any(-1, keepdims=True), np.nan, first[:, :1]))
    below = np.array([np.inf, 0.0])
    L = lifted(geo, X, near, Sc, asked, 16, below, np.array([5, 16]))
    live = ~np.isnan(L).any(-1)
    assert live[0].sum() == 5 and not live[1].any()  # agent 0's own cap; agent 1: nothing nearer than 0
    assert not any((L[0, q] == first[0, 0]).all() for q in np.flatnonzero(live[0]))  # asked before: not again
    assert (geo.distance(X[:1], L[0, live[0]]) == np.sort(geo.distance(X[:1], L[0, live[0]]))).all()


def test_the_search_lifts_a_near_miss_to_an_answer_the_moves_do_not_reach(votes, monkeypatch):
    """Agents at 0 with two proposals: the two cheap features up (two votes: refused, a near miss) and the
    three dear ones up (accepted, dear). The moves only shrink or drop the dear answer's changes (each drop
    loses a vote); the near miss with one dear feature more is nearer. Two rounds in steps: with the lifts the
    answer is that (two cheap features and one dear one) and accepted; without them (``LIFT_SHARE`` 0) it
    stays the three dear features."""
    import learners.tabular.budget_search as bs

    geo = WorldGeometry.of(votes)
    X = np.zeros((4, D))
    P = np.array([[[8.0, 8.0, 0, 0, 0], [0, 0, 8.0, 8.0, 8.0]]] * 4)

    def run():
        bb = BlackBoxModel(votes.model)
        with bb.budget(Budget(2, 64), agents=len(X)):
            return budget_search(bb, geo, X, P, Budget(2, 64), steps=True)

    lifted_ = run()
    monkeypatch.setattr(bs, "LIFT_SHARE", 0.0)
    plain = run()
    assert lifted_.found.all() and votes.accepts(lifted_.CF).all() and plain.found.all()
    assert (lifted_.rows <= 64).all() and lifted_.calls == 2
    assert (lifted_.distance < plain.distance - 1e-9).all(), (lifted_.distance, plain.distance)
    assert (lifted_.CF[:, :2] > 5.5).all() and ((lifted_.CF[:, 2:] > 5.5).sum(1) == 1).all()
    assert ((plain.CF[:, 2:] > 5.5).sum(1) == 3).all()  # the dear answer, shrunk
