"""The surrogate of a black box (learners/tabular/surrogate.py; issue 56): its queries lie in the agents'
boxes, it learns a smooth model's logit, its white-box form computes the same logit, ``pick`` keeps rows
of the pool that are nearer than the bound and ranks by the chance of being the nearest accepted; the
proposer with it stays within the budget, answers only with rows the model accepted, never nearer than
the enumerated optimum, counts the surrogate's training calls and saves and loads."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from envs.black_box import BlackBoxModel, Budget
from envs.tabular import TabularWorld
from learners.tabular import TabularGenerator, TabularLabels, WorldGeometry, build_tabular_generator
from learners.tabular.budget_search import LEAD_LADDER
from learners.tabular.surrogate import Surrogate, SurrogateParams, boundary_queries
from solvers.mace import MACE


@pytest.fixture(scope="module")
def tiny_mlp():
    """The all-discrete world of ``test_mace_rules`` with a ReLU MLP, MACE labels and every state."""
    from tests.test_mace import _all_states, _fit
    from tests.test_mace_rules import _data, _negatives, _schema

    X, y = _data()
    world = TabularWorld("tiny/mlp", _schema(), _fit("mlp", X, y))
    mace = MACE(norm="one")
    lab = [(x, r) for x in _negatives(world, X[250:], 120) for r in mace.solve(world, x)[:1] if r.found]
    labels = TabularLabels(np.array([x for x, _ in lab]), np.array([r.final_state for _, r in lab], float),
                           np.array([r.cost for _, r in lab]))
    return world, labels, _negatives(world, X, 30), _all_states(world.schema)


def test_queries_lie_in_the_agents_boxes(tiny_mlp):
    world, labels, _, _ = tiny_mlp
    geo = WorldGeometry.of(world)
    Q = boundary_queries(geo, labels.X, labels.CF, 20, seed=1).reshape(len(labels.X), 20, -1)
    lo, hi = geo.box(labels.X)
    assert (Q >= lo[:, None] - 1e-9).all() and (Q <= hi[:, None] + 1e-9).all()
    assert not geo.violations(np.repeat(labels.X, 20, 0), Q.reshape(-1, Q.shape[-1])).any()
    moved = np.abs(Q - labels.X[:, None]).max(-1) > 1e-12
    assert moved.mean() > 0.5  # most rows differ from the agent
    assert np.array_equal(Q, boundary_queries(geo, labels.X, labels.CF, 20, seed=1).reshape(Q.shape))  # seeded


def test_it_learns_a_smooth_models_logit_and_its_white_box_form_agrees(tiny_mlp):
    world, labels, _, S = tiny_mlp
    geo = WorldGeometry.of(world)
    Q = boundary_queries(geo, labels.X, labels.CF, 200)
    sur = Surrogate(SurrogateParams(hidden=(32, 32), max_epochs=40)).fit(Q, world.model.predict_proba(Q))
    assert sur.agreement_ >= 0.9 and sur.sigma_ < 0.5
    assert (sur.logit(S) > 0).__eq__(world.accepts(S)).mean() >= 0.85  # every state, not only the queries
    net = sur.as_model()
    assert np.allclose(net.score(S), sur.logit(S), atol=1e-4)
    # its search's variant rows go through float32 BLAS blocks (thousands an answer), scored as the rows are
    # up to float32's rounding, the same bits in any batch
    base, index = S[:3], np.arange(len(S)) % 3
    cols = np.tile(np.arange(S.shape[1]), (len(S), 1))
    got = net.score_variants(base, index, cols, S)
    assert net.blocks and np.allclose(got, net.score(S), rtol=1e-5, atol=1e-4)
    assert not np.array_equal(got, net.score(S))  # float32: not float64's bits (the test would pass a float64 path)
    np.testing.assert_array_equal(net.score_variants(base, index[5:9], cols[5:9], S[5:9]), got[5:9])
    back = Surrogate.from_arrays(sur.arrays())
    assert np.allclose(back.logit(S), sur.logit(S)) and back.sigma_ == sur.sigma_


def test_an_ensemble_is_one_mlp_whose_logit_is_its_members_mean(tiny_mlp):
    """``members``: networks fitted with successive seeds, folded into one MLP as wide as all of them
    (``average_layers``) that the white-box searches read as one; its logit is the members' mean, and it
    saves and loads as one network."""
    from learners.tabular.surrogate import average_layers

    world, labels, _, S = tiny_mlp
    geo = WorldGeometry.of(world)
    Q = boundary_queries(geo, labels.X, labels.CF, 100)
    proba = world.model.predict_proba(Q)
    one = [Surrogate(SurrogateParams(hidden=(16, 16), max_epochs=15)).fit(Q, proba, seed=s) for s in (3, 4)]
    mean = Surrogate.from_arrays(one[0].arrays())
    mean.layers_ = average_layers([one[0].layers_, one[1].layers_])  # the same input scaling: the same rows
    assert np.allclose(mean.logit(S), (one[0].logit(S) + one[1].logit(S)) / 2, atol=1e-4)
    two = Surrogate(SurrogateParams(hidden=(16, 16), max_epochs=15, members=2)).fit(Q, proba, seed=3)
    W = [a for k, a, _ in two.layers_ if k == "linear"]
    assert [w.shape for w in W] == [(Q.shape[1], 32), (32, 32), (32, 1)]
    assert not W[1][:16, 16:].any() and not W[1][16:, :16].any()  # a member reads only its own units
    first = [a for k, a, _ in one[0].layers_ if k == "linear"]  # member 0 is the single fit of the same seed
    assert np.allclose(W[0][:, :16], first[0]) and np.allclose(W[1][:16, :16], first[1])
    assert np.allclose(2 * W[2][:16], first[2])
    assert np.allclose(two.as_model().score(S), two.logit(S), atol=1e-4)
    assert np.allclose(Surrogate.from_arrays(two.arrays()).logit(S), two.logit(S))
    assert len(two.training_) == 2 and average_layers([one[0].layers_]) is one[0].layers_
    with pytest.raises(ValueError, match="members"):
        Surrogate(SurrogateParams(members=0)).fit(Q, proba)


class _Stub(Surrogate):
    """A surrogate whose logit is the first column minus 5 (accepts x0 > 5), known exactly."""

    def __init__(self) -> None:
        super().__init__()
        self.sigma_ = 0.1

    def logit(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(X, float)[..., 0] - 5.0


def test_pick_keeps_the_rows_worth_asking():
    from tests.tabular_worlds import threshold_world

    world = threshold_world()
    geo = WorldGeometry.of(world)
    X = np.array([[1.0, 3.0]])
    vals = np.linspace(1.5, 9.5, 17)  # x0 from 1.5 to 9.5: accepted from 5.5 up
    C = np.stack([vals, np.full_like(vals, 3.0)], -1)[None]
    got = _Stub().pick(geo, X, C, 4, np.array([np.inf]))[0]
    assert got.shape == (4, 2) and np.isin(got[:, 0], vals).all()
    assert got[0, 0] <= 5.5 and np.any(got[:, 0] == 5.5)  # around the boundary, nearest first
    assert (np.diff(got[:, 0]) > 0).all()
    assert not np.any(got[:, 0] >= 7.0)  # past a sure acceptance nothing can be nearer
    capped = _Stub().pick(geo, X, C, 4, np.array([geo.distance(X, C[:, 6])[0]]))[0]  # below x0 = 4.5
    live = ~np.isnan(capped).any(-1)
    assert live.any() and (capped[live, 0] < 4.5).all()


def test_the_proposer_with_a_surrogate_against_enumeration(tiny_mlp, tmp_path):
    world, labels, agents, S = tiny_mlp
    bw = replace(world, model=BlackBoxModel(world.model))
    gen = build_tabular_generator("proposer", {"max_epochs": 20, "surrogate": True, "surrogate_queries": 200,
                                               "surrogate_epochs": 30, "surrogate_max_sigma": 10.0}).fit(bw, labels)
    info = gen.fit_info_["surrogate"]
    per = 3 * len(LEAD_LADDER)  # a round: the 3 answers per training agent on the ladder, and half as many moved
    assert info["rows"] == len(labels.X) * (200 + per + per // 2) and info["calls"] == 2 and info["used"]
    assert gen.surrogate_ is not None and gen.inner_ is not None
    budget = Budget(2, 256)
    bb = BlackBoxModel(world.model)
    with bb.budget(budget, agents=len(agents)):
        rec = gen.recommend_within(replace(world, model=bb), agents, budget)
    assert rec.calls <= 2 and (rec.rows <= 256).all() and int(rec.rows.sum()) == bb.rows
    geo = WorldGeometry.of(world)
    for i, x in enumerate(agents):
        ok = world.accepts(S) & ~geo.violations(np.repeat(x[None], len(S), 0), S)
        if rec.found[i]:
            assert world.accepts(rec.CF[i][None])[0]
            assert rec.distance[i] >= geo.distance(x[None], S[ok]).min() - 1e-12
    assert rec.found.mean() >= 0.9
    gen.save(tmp_path / "m")
    back = TabularGenerator.load(tmp_path / "m")
    assert back.surrogate_ is not None
    b = back.recommend_within(world, agents, budget)
    assert np.array_equal(np.nan_to_num(rec.CF, nan=-7), np.nan_to_num(b.CF, nan=-7))


def test_a_surrogate_that_did_not_learn_the_model_is_not_used(tiny_mlp):
    world, labels, _, _ = tiny_mlp
    gen = build_tabular_generator("proposer", {"max_epochs": 5, "surrogate": True, "surrogate_queries": 20,
                                               "surrogate_epochs": 2, "surrogate_max_sigma": 1e-9}).fit(world, labels)
    assert gen.surrogate_ is None and gen.inner_ is None and not gen.fit_info_["surrogate"]["used"]
    with pytest.raises(ValueError, match="surrogate_queries: must be >= 1"):
        build_tabular_generator("proposer", {"surrogate_queries": 0})


def test_the_surrogates_picks_alone_without_its_search(tiny_mlp):
    world, labels, agents, _ = tiny_mlp
    gen = build_tabular_generator("proposer", {"max_epochs": 5, "surrogate": True, "surrogate_queries": 50,
                                               "surrogate_epochs": 5, "surrogate_search": 0,
                                               "surrogate_max_sigma": 10.0}).fit(world, labels)
    assert gen.surrogate_ is not None and gen.inner_ is None and gen.fit_info_["surrogate"]["calls"] == 1
    bb = BlackBoxModel(world.model)
    with bb.budget(Budget(2, 64), agents=len(agents)):
        rec = gen.recommend_within(replace(world, model=bb), agents, Budget(2, 64))
    assert (rec.rows <= 64).all() and rec.found.mean() >= 0.8 and world.accepts(rec.CF[rec.found]).all()


def test_a_refit_that_comes_out_worse_sets_the_surrogate_and_its_search_aside(tiny_mlp, monkeypatch):
    """The first fit passes the bar and the refit after the answers' round does not: neither is used."""
    world, labels, agents, _ = tiny_mlp
    fits = iter([0.01, 9.0])
    real_fit = Surrogate.fit

    def fit(self, *a, **k):
        real_fit(self, *a, **k)
        self.sigma_ = next(fits)
        return self

    monkeypatch.setattr(Surrogate, "fit", fit)
    gen = build_tabular_generator("proposer", {"max_epochs": 5, "surrogate": True, "surrogate_queries": 30,
                                               "surrogate_epochs": 2, "surrogate_max_sigma": 1.0}).fit(world, labels)
    assert gen.surrogate_ is None and gen.inner_ is None and not gen.fit_info_["surrogate"]["used"]
    rec = gen.recommend_within(world, agents, Budget(2, 64))
    assert rec.found.any()


def test_the_surrogates_piece_milp_runs_while_fitting_and_only_on_request_when_answering(tiny_mlp, monkeypatch):
    import learners.tabular.change_value as change_value

    world, labels, agents, _ = tiny_mlp
    gen = build_tabular_generator("proposer", {"max_epochs": 5, "surrogate": True, "surrogate_queries": 50,
                                               "surrogate_epochs": 5, "surrogate_max_sigma": 10.0}).fit(world, labels)
    assert gen.inner_ is not None and gen.inner_.params.piece_lp and not gen.params.answer_piece_lp
    solved = []
    real = change_value.piece_optimum
    monkeypatch.setattr(change_value, "piece_optimum", lambda *a, **k: solved.append(1) or real(*a, **k))
    rec = gen.recommend_within(world, agents[:4], Budget(2, 64))
    assert not solved and rec.found.any()  # answering: the fitted search without its last step
    gen._surrogate_answers(world, agents[:4], fitting=True)
    assert len(solved) == 1  # fitting (the refit rounds): with it
    gen.params = replace(gen.params, answer_piece_lp=True)
    again = gen.recommend_within(world, agents[:4], Budget(2, 64))
    assert len(solved) == 2 and gen.inner_.params.piece_lp  # on request; the fitted search itself unchanged
    # an all-discrete world has no piece to move on: the same answers either way
    assert np.array_equal(np.nan_to_num(again.CF, nan=-7), np.nan_to_num(rec.CF, nan=-7))
