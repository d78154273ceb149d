"""The black box (envs/black_box.py) and the proposer within a query budget (learners/tabular/proposer.py,
budget_search.py; issue 56): the model's parameters hidden, calls and rows counted and capped, every
answer accepted by a model call, inside the agent's box and the world's rules, never nearer than the
enumerated optimum; the baselines without a network; persistence; improvement on the model's reward."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest

from envs.black_box import BlackBoxModel, Budget, BudgetExceeded
from envs.rules import RuleSet
from envs.tabular import TabularWorld
from learners.tabular import TabularGenerator, TabularLabels, WorldGeometry, build_tabular_generator
from solvers.mace import MACE
from tests.tabular_worlds import german_mace_labels, german_rejected, train_labels


@pytest.fixture(scope="module")
def german():
    world, _ = german_rejected()
    labels, train, test = german_mace_labels()
    return world, train_labels(labels, train), labels, test


def _black(world: TabularWorld, **kw) -> tuple[TabularWorld, BlackBoxModel]:
    bb = BlackBoxModel(world.model, **kw)
    return replace(world, model=bb), bb


def test_black_box_hides_the_model_and_counts(german):
    world, _, labels, _ = german
    bw, bb = _black(world)
    for name in ("trees", "score", "exact", "leaves", "score_variants"):
        with pytest.raises(AttributeError, match="only predict_proba"):
            getattr(bb, name)
    X = labels.X[:7]
    p = bb.predict_proba(X)
    assert p.shape == (7,) and np.array_equal(bb.predict(X), p > 0.5)
    assert np.array_equal(bb.predict(X), world.accepts(X))  # the decision is the model's
    assert (bb.calls, bb.rows) == (3, 21)
    with bb.budget(Budget(calls=2, rows=5), agents=2):  # 10 rows for 2 agents
        bb.predict_proba(X[:6])
        with pytest.raises(BudgetExceeded, match="passes the budget"):
            bb.predict_proba(X[:6])
        bb.predict_proba(X[:4])
        with pytest.raises(BudgetExceeded):
            bb.predict_proba(X[:1])  # a third call
    bb.predict_proba(X)  # outside the scope: no cap
    slow = BlackBoxModel(world.model, latency_s=0.02)
    t = time.perf_counter()
    slow.predict_proba(X)
    assert time.perf_counter() - t >= 0.02
    with pytest.raises(ValueError, match="calls: must be >= 1"):
        Budget(calls=0)


@pytest.mark.parametrize("budget", [Budget(1, 64), Budget(2, 256), Budget(6, 1000)])
@pytest.mark.parametrize("proposals", ["network", "averages", "neighbours"])
def test_answers_within_the_budget_are_accepted_and_never_beat_mace(german, proposals, budget):
    world, tl, labels, test = german
    gen = build_tabular_generator("proposer", {"proposals": proposals, "max_epochs": 20}).fit(world, tl)
    bw, bb = _black(world)
    X = labels.X[test]
    with bb.budget(budget, agents=len(X)):  # the cap is enforced: a search past it would raise
        rec = gen.recommend_within(bw, X, budget)
    assert rec.calls <= budget.calls and bb.calls == rec.calls
    assert (rec.rows <= budget.rows).all() and int(rec.rows.sum()) == bb.rows
    f = rec.found
    assert f.mean() >= (0.5 if budget.calls == 1 else 0.8)
    assert world.accepts(rec.CF[f]).all()
    assert not WorldGeometry.of(world).violations(X[f], rec.CF[f]).any()
    assert (rec.distance[f] >= labels.delta_min[test][f] - 1e-9).all()  # MACE's certified lower bound


def test_more_budget_never_answers_worse(german):
    world, tl, labels, test = german
    gen = build_tabular_generator("proposer", {"max_epochs": 20}).fit(world, tl)
    bw, _ = _black(world)
    X = labels.X[test]
    small, large = (gen.recommend_within(bw, X, b) for b in (Budget(1, 64), Budget(8, 2000)))
    assert (large.distance <= small.distance + 1e-12).all()  # the first round's rows are the same rows


def test_rules_are_kept_and_the_box_respected(german):
    world, tl, labels, test = german
    rules = RuleSet.from_dict({"duration": {"max_decrease": 6}, "credit_amount": {"max_decrease": 2000},
                               "weights": {"duration": {"up": 1.0, "down": 2.0}}})
    ruled = replace(world, rules=rules)
    gen = build_tabular_generator("proposer", {"max_epochs": 20}).fit(ruled, tl)
    bw, _ = _black(ruled)
    X = labels.X[test]
    rec = gen.recommend_within(bw, X, Budget(4, 1000))
    f = rec.found
    assert f.any()
    assert ruled.compiled_rules().holds(X[f], rec.CF[f]).all()
    assert world.accepts(rec.CF[f]).all()


def test_a_tiny_world_against_enumeration():
    """On an all-discrete world every reachable row is enumerable: the answers are accepted and never nearer
    than the enumerated optimum, and a wide budget meets it on most agents."""
    from tests.test_mace import _all_states, _fit
    from tests.test_mace_rules import _data, _negatives, _schema

    X, y = _data()
    world = TabularWorld("tiny/forest", _schema(), _fit("forest", X, y))
    S = _all_states(world.schema)
    agents = _negatives(world, X, 30)
    mace = MACE(norm="one")
    lab = [(x, r) for x in _negatives(world, X[250:], 120) for r in mace.solve(world, x)[:1] if r.found]
    labels = TabularLabels(np.array([x for x, _ in lab]), np.array([r.final_state for _, r in lab], float),
                           np.array([r.cost for _, r in lab]))
    gen = build_tabular_generator("proposer", {"max_epochs": 30}).fit(world, labels)
    bw, _ = _black(world)
    rec = gen.recommend_within(bw, agents, Budget(8, 2000))
    geo = WorldGeometry.of(world)
    hits = 0
    for i, x in enumerate(agents):
        ok = world.accepts(S) & ~geo.violations(np.repeat(x[None], len(S), 0), S)
        best = geo.distance(x[None], S[ok]).min() if ok.any() else np.inf
        if not rec.found[i]:
            continue
        assert world.accepts(rec.CF[i][None])[0] and rec.distance[i] >= best - 1e-12
        hits += rec.distance[i] <= best * 1.01 + 1e-12
    assert rec.found.mean() >= 0.9 and hits >= 0.6 * rec.found.sum()


@pytest.mark.parametrize("proposals", ["network", "averages", "neighbours"])
def test_save_load_gives_the_same_answers(german, proposals, tmp_path):
    world, tl, labels, test = german
    gen = build_tabular_generator("proposer", {"proposals": proposals, "max_epochs": 10}).fit(world, tl)
    X = labels.X[test][:20]
    a = gen.recommend(world, X)
    gen.save(tmp_path / "m")
    b = TabularGenerator.load(tmp_path / "m").recommend(world, X)
    assert np.array_equal(np.nan_to_num(a.CF, nan=-7), np.nan_to_num(b.CF, nan=-7))


def test_improvement_on_the_model_reward_counts_its_calls(german):
    world, tl, labels, test = german
    bw, bb = _black(world)
    gen = build_tabular_generator("proposer", {"max_epochs": 10, "expert_rounds": 1, "expert_agents": 60,
                                               "expert_epochs": 5}).fit(bw, tl)
    info = gen.fit_info_["expert"][0]
    assert info["calls"] >= 2 and info["rows"] > 0 and bb.calls == info["calls"]
    rec = gen.recommend_within(bw, labels.X[test][:10], Budget(2, 256))
    assert rec.found.any()


def test_bad_parameters_name_the_field():
    with pytest.raises(ValueError, match="heads: must be >= 1"):
        build_tabular_generator("proposer", {"heads": 0})
    with pytest.raises(ValueError, match="proposals: expected"):
        build_tabular_generator("proposer", {"proposals": "magic"})
