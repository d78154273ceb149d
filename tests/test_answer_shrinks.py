"""The best answer's one-move shrinks, kept in place of a refinement round's nearest spread moves
(``moves.answer_shrinks``, ``rows.ahead_of_nearest``; issue 56)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.black_box import BlackBoxModel, Budget
from learners.tabular import WorldGeometry
from learners.tabular.rows import ahead_of_nearest


def _staircase3():
    """One tree: accept iff float32(x0) > 2.9 and float32(x1) > 3.9; x2 is read by no split (all in [0, 10])."""
    from envs.models import Tree, TreeEnsemble
    from envs.schema import Feature, FeatureSchema
    from envs.tabular import TabularWorld

    schema = FeatureSchema(tuple(Feature(f"x{i}", "numeric", 0.0, 10.0) for i in range(3)))
    tree = Tree(np.array([1, -1, 3, -1, -1]), np.array([2, -1, 4, -1, -1]), np.array([0, 0, 1, 0, 0]),
                np.array([2.9, 0, 3.9, 0, 0]), np.array([0.0, 0, 0, 0, 1]), np.array([1.0, 1, 1, 1, 0]))
    return TabularWorld("toy/staircase3", schema, TreeEnsemble([tree], 3))


VOCAB = [np.array([1.0, 2.0, 3.0, 3.5, 4.0, 6.0, 6.5, 7.0, 8.0]), np.array([2.0, 4.0, 4.5, 5.0, 5.5, 7.0, 7.5, 9.0]),
         np.array([1.0, 2.0, 5.0])]


def test_answer_shrinks_are_each_feature_back_and_each_changed_column_at_its_values_just_inside():
    """Against their definition, one row at a time: every raw feature back to the agent's value, then every changed
    numeric column alone at one of the ``K`` vocabulary values between the agent and the answer, nearest the answer
    first; an unchanged column and an agent without an answer give no row."""
    import learners.tabular.moves as mv

    geo = WorldGeometry.of(_staircase3())
    X = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    B = np.array([[6.5, 5.0, 0.0], [np.nan, np.nan, np.nan]])
    K = 3
    R = mv.answer_shrinks(geo, X, B, VOCAB, K)
    assert np.isnan(R[1]).all()
    got = [tuple(r) for r in R[0] if not np.isnan(r).any()]
    expected = [(0.0, 5.0, 0.0), (6.5, 0.0, 0.0), (6.5, 5.0, 0.0)]  # each feature back (x2's: the answer itself)
    expected += [(v, 5.0, 0.0) for v in (6.0, 4.0, 3.5)] + [(6.5, v, 0.0) for v in (4.5, 4.0, 2.0)]
    assert got == expected


def test_a_refinement_round_asks_the_answers_one_move_shrinks_its_spread_leaves_out(monkeypatch):
    """At 2 x 20 from the proposal (3, 5), round two's moves are many and their even spread over the nearness ranks
    leaves out x1 at 4, the vocabulary's value just inside the answer: with the one-move shrinks kept it answers
    (3, 4), without them (``ANSWER_SHRINKS`` 0) it stops at (3, 4.5)."""
    import learners.tabular.budget_search as bs

    world = _staircase3()
    geo = WorldGeometry.of(world)
    X, P = np.array([[0.0, 0.0, 0.0]]), np.array([[[3.0, 5.0, 0.0]]])

    def answer():
        bb = BlackBoxModel(world.model)
        with bb.budget(Budget(2, 20), agents=1):
            return bs.budget_search(bb, geo, X, P, Budget(2, 20), vocab=VOCAB, steps=True).CF[0]

    np.testing.assert_array_equal(answer(), [3.0, 4.0, 0.0])
    monkeypatch.setattr(bs, "ANSWER_SHRINKS", 0)
    np.testing.assert_array_equal(answer(), [3.0, 4.5, 0.0])


def _reference(P, M, rows):
    """``ahead_of_nearest`` one agent at a time with plain lists."""
    out = np.full((len(P), rows, P.shape[2]), np.nan)
    for n in range(len(P)):
        lead = []
        for r in P[n]:
            if not np.isnan(r).any() and not any(np.array_equal(r, q) for q in lead):
                lead.append(r)
        rest = [r for r in M[n][len(lead):] if not np.isnan(r).any()]
        kept = []
        for r in lead + rest:
            if not any(np.array_equal(r, q) for q in kept):
                kept.append(r)
        for j, r in enumerate(kept[:rows]):
            out[n, j] = r
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4), st.integers(0, 6), st.integers(1, 9), st.integers(1, 12))
def test_ahead_of_nearest_is_its_definition(seed, n_agents, q, r, rows):
    """Each agent's distinct rows of P first, as many of M's first rows dropped, then the rest of M, no row twice,
    ``rows`` wide (values drawn from a few, so repeats within and across P and M occur)."""
    rng = np.random.default_rng(seed)
    P = rng.integers(0, 3, (n_agents, q, 2)).astype(float)
    M = rng.integers(0, 3, (n_agents, r, 2)).astype(float)
    P[rng.random((n_agents, q)) < 0.3] = np.nan
    M[rng.random((n_agents, r)) < 0.3] = np.nan
    np.testing.assert_array_equal(ahead_of_nearest(P, M, rows), _reference(P, M, rows))
