"""An agent's answer must not depend on which other agents share its batch (issue 56): the pieces that once
let it (BLAS's one-row kernel, a partition's tie-breaking (the corners now listed best first), the far round's and the donors' rows cut at the
batch's widest cap) each against a second route, and ``budget_search`` on a forest in steps with agents
that round one leaves without an answer (with and without the student's picks spread over their sets), each alone
against the batch, bit for bit (one machine)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.black_box import BlackBoxModel, Budget
from envs.rowwise import rowwise_matmul
from learners.tabular import WorldGeometry
from learners.tabular.budget_search import budget_search, value_vocabulary
from learners.tabular.change_net import forward_layers
from learners.tabular.corners import nearest_corners
from learners.tabular.pieces import _piece_rows, region_step
from tests.tabular_worlds import german_train_split, toy_mlp_world


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), k=st.integers(1, 70), h=st.integers(1, 90), seed=st.integers(0, 10**6))
def test_rowwise_matmul_gives_each_row_the_bits_it_gets_alone(n, k, h, seed):
    rng = np.random.default_rng(seed)
    A, B = rng.normal(size=(n, k)), rng.normal(size=(k, h))
    full = rowwise_matmul(A, B)
    np.testing.assert_allclose(full, A @ B, rtol=1e-9, atol=1e-9)
    A32, B32 = A.astype(np.float32), B.astype(np.float32)
    assert np.array_equal(rowwise_matmul(A32[-1:], B32)[0], rowwise_matmul(A32, B32)[-1])
    for i in range(n):
        assert np.array_equal(rowwise_matmul(A[i:i + 1], B)[0], full[i])


def test_a_network_forward_of_one_row_equals_its_row_in_a_batch():
    rng = np.random.default_rng(0)
    layers = [("linear", rng.normal(size=(30, 64)).astype(np.float32), rng.normal(size=64).astype(np.float32)),
              ("relu", None, None),
              ("linear", rng.normal(size=(64, 17)).astype(np.float32), rng.normal(size=17).astype(np.float32))]
    H = rng.normal(size=(100, 30)).astype(np.float32)
    full = forward_layers(layers, H)
    assert all(np.array_equal(forward_layers(layers, H[i:i + 1])[0], full[i]) for i in range(len(H)))


@pytest.fixture(scope="module")
def german():
    return german_train_split()


def _donors(labels, geo: WorldGeometry, X: np.ndarray):
    """The labels' new values set on each agent, nearest label first (scaled l2), each row 4 times (donor
    rows repeat: neighbours whose answers are alike): ``budget_search``'s ``donors`` argument, written out per
    agent."""
    span = np.where(geo.span > 0, geo.span, 1.0)
    moved = np.abs(labels.CF - labels.X) > 1e-12

    def rows(a: np.ndarray, start: np.ndarray, k: int) -> np.ndarray:
        out = np.full((len(a), k, X.shape[1]), np.nan)
        for r, i in enumerate(a):
            order = np.repeat(np.argsort((((labels.X - X[i]) / span) ** 2).sum(1), kind="stable"), 4)
            for q, m in enumerate(order[start[r]:start[r] + k]):
                out[r, q] = np.where(moved[m], labels.CF[m], X[i])
        return out

    return rows


def test_agents_round_one_leaves_without_an_answer_get_the_same_rows_alone(german):
    """Agents that propose nothing and whose fallback rows are all refused leave round one unanswered with
    different rows left (caps: the fallback rows they were asked); their later round is the screens, then the
    donors up to their own cap. Alone or in the batch, each agent's answer and rows scored are the same."""
    world, labels, test = german
    geo = WorldGeometry.of(world)
    vocab = value_vocabulary(geo, labels.X, labels.CF)
    rng = np.random.default_rng(7)
    X = test
    N, D = X.shape
    P = np.repeat(X[:, None, :], 4, axis=1)  # no proposal moves anything: round one asks the fallback rows
    num = np.flatnonzero(geo.numeric & ~geo.fixed)
    fallback = np.repeat(X[:, None, :], 64, axis=1)  # tiny distinct numeric moves: refused
    fallback[:, :, num] += rng.uniform(-0.01, 0.01, (N, 64, len(num))) * geo.span[num]
    for i in range(N):  # each agent its own number of them (round one asks at most EXTRA_SHARE of its rows)
        fallback[i, (3 * i) % 9:] = np.nan
    budget = Budget(2, 140)  # round two: 132-139 rows, ~85 of them screens, the rest unique donors (of 55)
    kw = dict(vocab=vocab, steps=True, fallback=fallback)
    batch = budget_search(BlackBoxModel(world.model), geo, X, P, budget, donors=_donors(labels, geo, X), **kw)
    one_round = budget_search(BlackBoxModel(world.model), geo, X, P, Budget(1, 70), **kw)
    assert len(np.unique(one_round.rows[~one_round.found])) > 1  # unanswered agents with different caps
    for i in range(N):
        kw_one = dict(kw, fallback=fallback[i:i + 1])
        one = budget_search(BlackBoxModel(world.model), geo, X[i:i + 1], P[i:i + 1], budget,
                            donors=_donors(labels, geo, X[i:i + 1]), **kw_one)
        assert one.found[0] == batch.found[i]
        np.testing.assert_array_equal(one.CF[0], batch.CF[i])
        assert one.rows[0] == batch.rows[i]


def test_nearest_corners_of_an_agent_alone_equal_its_corners_in_a_block(german):
    world, labels, test = german
    geo = WorldGeometry.of(world)
    vocab = value_vocabulary(geo, labels.X, labels.CF)
    R, d = nearest_corners(geo, test, vocab, 200)
    for i in range(len(test)):
        Ri, di = nearest_corners(geo, test[i:i + 1], vocab, 200)
        np.testing.assert_array_equal(Ri[0], R[i])
        np.testing.assert_array_equal(di[0], d[i])


def test_an_mlp_scored_a_row_at_a_time_and_its_region_step_do_not_depend_on_the_batch():
    """The surrogate's MLP (``rowwise``) scores a row alone as in a batch, and ``region_step`` re-chooses an
    answer on its linear piece the same alone as among others (Credit MLP's surrogate search: 46 of 100
    answers differed in their last bits alone, one of them within 1% of MACE only in the batch)."""
    from envs.models import MLPModel

    rng = np.random.default_rng(5)
    world = toy_mlp_world(rng, D=12)
    scale = np.array([f.upper for f in world.schema.features])
    sizes = [12, 64, 64, 1]  # wide enough for BLAS's kernels to sum a row differently with the rows around it
    weights = [rng.normal(0, 1, (a, b)) / np.sqrt(a) for a, b in zip(sizes[:-1], sizes[1:], strict=True)]
    weights[0] = weights[0] / scale[:, None] * 4
    model = MLPModel(weights, [rng.normal(0, 0.5, b) for b in sizes[1:]], rowwise=True)
    world = replace(world, model=model)
    geo = WorldGeometry.of(world)
    lo, hi = geo.lower, geo.upper
    X = lo + rng.random((30, len(lo))) * (hi - lo)
    full = model.score(X)
    assert all(model.score(X[i:i + 1])[0] == full[i] for i in range(len(X)))
    C = geo.project(X, (X + rng.normal(0, 0.3, X.shape) * (hi - lo))[:, None, :])[:, 0]
    ok = model.predict_proba(C) > 0.5
    assert ok.sum() >= 5
    X, C = X[ok], C[ok]
    num = np.arange(X.shape[1])
    z, _, _, score, _ = _piece_rows(model.weights, model.biases, C, num)
    for i in range(len(C)):
        z1, _, _, s1, _ = _piece_rows(model.weights, model.biases, C[i:i + 1], num)
        assert np.array_equal(z1[0], z[i]) and s1[0] == score[i]
    R = region_step(world, geo, X, C)
    assert (np.abs(R - C) > 0).any()  # it moved some answers
    for i in range(len(X)):
        np.testing.assert_array_equal(region_step(world, geo, X[i:i + 1], C[i:i + 1])[0], R[i])


def test_an_agent_s_training_distances_neighbours_and_named_sets_do_not_depend_on_the_batch(german):
    """What orders the proposer's neighbours, donors and named sets: each agent's distances to the training
    agents and the set namer's ranking, the same bits alone as in a batch."""
    from learners.tabular.nearest import NearestCfeGenerator
    from learners.tabular.set_names import SetNamer

    world, labels, test = german
    gen = NearestCfeGenerator().fit(world, labels)
    X = np.concatenate([test, labels.X[:40]])
    d, near = gen._train_distances(X), gen._neighbours(X, 8)
    for i in range(len(X)):
        assert np.array_equal(gen._train_distances(X[i:i + 1])[0], d[i])
        assert np.array_equal(gen._neighbours(X[i:i + 1], 8)[0], near[i])
    rng = np.random.default_rng(2)
    Xs = rng.random((300, X.shape[1]))
    namer = SetNamer().fit(Xs, rng.random((300, 5)) < 0.3)  # up to 32 sets
    scores, ranks = namer.scores(Xs[:50]), namer.rank(Xs[:50], 6)
    assert all(np.array_equal(namer.scores(Xs[i:i + 1])[0], scores[i]) for i in range(50))
    assert all(np.array_equal(namer.rank(Xs[i:i + 1], 6)[0], ranks[i]) for i in range(50))


def test_a_requests_distances_are_kept_for_its_next_ask_and_measured_again_for_other_labels(german):
    """``_train_distances`` keeps a small batch's distances for its next ask (a request asks 3 to 4 times): the same
    bits, a copy a caller's writes do not reach, and measured again once the labels change (self-labels join them);
    ``_moved_labels`` likewise."""
    from learners.tabular.nearest import NearestCfeGenerator

    world, labels, test = german
    gen = NearestCfeGenerator().fit(world, labels)
    x = test[:1]
    d = gen._train_distances(x)
    again = gen._train_distances(x)
    assert np.array_equal(again, d) and again is not d
    again[:] = -1.0
    assert np.array_equal(gen._train_distances(x), d)
    assert np.array_equal(gen._train_distances(test[1:2])[0], gen._train_distances(test[:2])[1])  # another agent's own
    moved = gen._moved_labels()
    assert np.array_equal(moved, np.abs(gen.CF_ - gen.X_) > 1e-12) and gen._moved_labels() is moved
    gen.X_, gen.CF_ = gen.X_[::-1].copy(), gen.CF_[::-1].copy()  # other labels (new arrays): measured again
    np.testing.assert_allclose(gen._train_distances(x), d[:, ::-1], rtol=1e-5, atol=1e-6)
    assert np.array_equal(gen._moved_labels(), moved[::-1])


def test_lost_agents_next_picks_spread_over_sets_do_not_depend_on_the_batch(german):
    """Agents round one leaves without an answer after refusing the student's picks (each its own number of them,
    so their caps in round two differ) take their next picks spread over their sets (``set_spread``) from a list
    of their own length (their own cap, not the batch's widest): alone or in the batch, each agent's answer, rows
    scored and round two's rows are the same. The next picks here: each agent's nearest corners (a list whose head
    does not depend on its length, as a student's)."""
    world, labels, X = german
    geo = WorldGeometry.of(world)
    vocab, rng, N = value_vocabulary(geo, labels.X, labels.CF), np.random.default_rng(11), len(X)
    P = np.repeat(X[:, None, :], 4, axis=1)  # no proposal moves anything
    num = np.flatnonzero(geo.numeric & ~geo.fixed)
    fallback = np.repeat(X[:, None, :], 64, axis=1) + 0.0  # tiny distinct numeric moves (rule-breaking: dropped)
    fallback[:, :, num] += rng.uniform(-0.01, 0.01, (N, 64, len(num))) * geo.span[num]
    for i in range(N):  # each agent its own number of fallback rows: its own cap in round two
        fallback[i, 1 + (3 * i) % 9:] = np.nan
    picks = np.repeat(X[:, None, :], 24, axis=1)  # round one's picks: one column a step or more up, mostly refused
    c0 = num[0]
    picks[:, :, c0] = np.clip(X[:, None, c0] + np.arange(1, 25)[None, :], geo.lower[c0], geo.upper[c0])
    for i in range(N):  # each agent its own number of them: round two's caps differ by up to 22 rows
        picks[i, 1 + (5 * i) % 23:] = np.nan

    def next_picks(a, k):
        return nearest_corners(geo, X[a], vocab, k)[0]

    class Recorded:  # the rows of each call, kept
        def __init__(self):
            self.calls = []

        def predict_proba(self, R):
            self.calls.append(np.asarray(R, float).copy())
            return world.model.predict_proba(R)

    budget = Budget(2, 140)
    kw = dict(vocab=vocab, steps=True, grid_share=0.25)
    seen = Recorded()
    batch = budget_search(BlackBoxModel(seen), geo, X, P, budget, fallback=fallback, picks=picks,
                          next_picks=lambda a, k: next_picks(a, k), **kw)
    asked_in_batch = {r.tobytes() for r in seen.calls[1]}
    one_round = budget_search(BlackBoxModel(world.model), geo, X, P, Budget(1, 70), fallback=fallback, picks=picks, **kw)
    lost = np.flatnonzero(~one_round.found)
    assert len(lost) > 1 and len(np.unique(one_round.rows[lost])) > 1  # lost agents with different caps
    for i in lost:
        alone = Recorded()
        one = budget_search(BlackBoxModel(alone), geo, X[i:i + 1], P[i:i + 1], budget,
                            fallback=fallback[i:i + 1], picks=picks[i:i + 1],
                            next_picks=lambda a, k, i=i: next_picks(np.array([i])[a], k), **kw)
        assert all(r.tobytes() in asked_in_batch for r in alone.calls[1])  # round two: the same rows asked
        assert one.found[0] == batch.found[i]
        np.testing.assert_array_equal(one.CF[0], batch.CF[i])
        assert one.rows[0] == batch.rows[i]
