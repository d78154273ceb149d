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
    if budget.calls == 2:  # a batch of no agents: empty answers, no call
        calls = bb.calls
        none = gen.recommend_within(bw, X[:0], budget)
        assert none.CF.shape == (0, X.shape[1]) and none.calls == 0 and bb.calls == calls


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
    steps = gen.fit_info_["steps"]  # the probe for steps: one call
    assert info["calls"] >= 2 and info["rows"] > 0 and bb.calls == info["calls"] + steps["calls"]
    assert bb.rows == info["rows"] + steps["rows"]
    rec = gen.recommend_within(bw, labels.X[test][:10], Budget(2, 256))
    assert rec.found.any()


def test_bad_parameters_name_the_field():
    with pytest.raises(ValueError, match="heads: must be >= 1"):
        build_tabular_generator("proposer", {"heads": 0})
    with pytest.raises(ValueError, match="proposals: expected"):
        build_tabular_generator("proposer", {"proposals": "magic"})
    with pytest.raises(ValueError, match="first_share: a share of the rows in"):
        build_tabular_generator("proposer", {"first_share": 1.0})


@pytest.mark.parametrize("share", [0.25, 0.75])
def test_round_one_takes_first_share_of_the_rows(german, share):
    """``first_share`` reaches the search: round one asks at most that share of an answer's rows, one agent."""
    world, tl, labels, test = german
    gen = build_tabular_generator("proposer", {"max_epochs": 5, "first_share": share}).fit(world, tl)
    asked = []

    class Recording(BlackBoxModel):
        def predict_proba(self, rows):
            asked.append(len(rows))
            return super().predict_proba(rows)

    x = labels.X[test][:1]
    gen.recommend_within(replace(world, model=Recording(world.model)), x, Budget(2, 256))
    assert 0 < asked[0] <= round(share * 256)
    assert sum(asked) <= 256


def test_screens_change_one_feature_inside_the_box(german):
    """``screens``: every row changes exactly one raw feature of its agent, lies in the agent's box and is
    a valid one-hot row; every mutable numeric column reaches its bound either way where it has room,
    and the vocabulary values nearest the agent are among the rows."""
    from learners.tabular.budget_search import screens

    world, labels = german[0], german[1]
    geo = WorldGeometry.of(world)
    X = labels.X[:12]
    vocab = [np.unique(labels.CF[:, c]) if geo.numeric[c] else np.zeros(0) for c in range(X.shape[1])]
    S = screens(geo, X, vocab)
    lo, hi = geo.box(X)
    for i in range(len(X)):
        R = S[i][~np.isnan(S[i]).any(1)]
        assert len(R)
        assert ((geo.deltas(X[i][None], R) > 1e-12).sum(1) == 1).all()
        assert not geo.violations(np.repeat(X[i][None], len(R), 0), R).any()
        for c in np.flatnonzero(geo.numeric & ~geo.fixed):
            if hi[i, c] > X[i, c]:
                assert np.isclose(R[:, c], hi[i, c]).any()
            if lo[i, c] < X[i, c]:
                assert np.isclose(R[:, c], lo[i, c]).any()
            above = vocab[c][vocab[c] > X[i, c]]
            if len(above) and above[0] <= hi[i, c]:
                assert np.isclose(R[:, c], above[0]).any()


def test_starts_take_the_nearest_of_each_changed_set_first():
    """``_starts`` with the agents: the nearest row overall first, then the nearest of every other changed
    set, before a second row of a set already taken."""
    from learners.tabular.budget_search import _starts

    X = np.zeros((1, 3))
    C = np.array([[[1.0, 0, 0], [2.0, 0, 0], [0, 3.0, 0], [0, 0, 4.0], [3.0, 0, 0]]])
    d = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]])
    S, dS = _starts(C, d, 4, X)
    np.testing.assert_array_equal(dS[0], [1.0, 3.0, 4.0, 2.0])
    S0, d0 = _starts(C, d, 4)  # without the agents: nearest first
    np.testing.assert_array_equal(d0[0], [1.0, 2.0, 3.0, 4.0])


def test_trades_give_back_an_integer_step_and_move_a_partner(german):
    """``_trades``: an answer that moved an integer column gives back one or two steps and another numeric
    column moves on, in a direction it may move, by shares of the distance the step freed."""
    from learners.tabular.budget_search import TRADE_SHARES, _trades

    world, labels = german[0], german[1]
    geo = WorldGeometry.of(world)
    ints = np.flatnonzero(geo.numeric & geo.rounded & ~geo.fixed)
    if not len(ints):
        pytest.skip("the test world has no integer column")
    X = labels.X[:6]
    B = X.copy()
    lo, hi = geo.box(X)
    c = ints[0]
    B[:, c] = np.where(hi[:, c] - X[:, c] >= 3, X[:, c] + 3, X[:, c])
    changed = np.abs(B - X) > 1e-12
    rows = [R for R in _trades(geo, X, B, changed)]
    assert rows
    R = np.concatenate(rows, 1)
    for i in np.flatnonzero(changed[:, c]):
        live = R[i][~np.isnan(R[i]).any(1)]
        assert len(live) >= len(TRADE_SHARES)
        assert set(np.round(B[i, c] - live[:, c])) <= {1.0, 2.0}  # one or two steps given back
        moved = np.abs(live - B[i]) > 1e-12
        assert (moved.sum(1) == 2).all()


def test_rows_past_the_cap_are_spread_over_the_nearness_ranks(german):
    """``_nearest_first``: with more shortening rows than the round's cap, the rows kept run evenly from the
    nearest to the mildest (ranks 0, 3, 6, 9 of 10 for a cap of 4), each once; with fewer, all of them,
    nearest first; a row no nearer than the answer is never kept."""
    from learners.tabular.rows import nearest_first as _nearest_first

    world = german[0]
    geo = WorldGeometry.of(world)
    x = german[1].X[:1]
    num = int(np.flatnonzero(geo.numeric & ~geo.fixed & ~geo.rounded)[0]) if (geo.numeric & ~geo.fixed & ~geo.rounded).any() \
        else int(np.flatnonzero(geo.numeric & ~geo.fixed)[0])
    lo, hi = geo.box(x)
    step = (hi[0, num] - x[0, num]) / 20 if hi[0, num] > x[0, num] else (lo[0, num] - x[0, num]) / 20
    C = np.repeat(x[:, None, :], 11, axis=1)
    C[0, :, num] = x[0, num] + step * np.arange(1, 12)  # nearer and nearer rows: rank k is row k
    d = geo.distance(x[:, None, :], C)[0]
    below = np.array([d[9] + 1e-12])  # row 10 is no nearer than the answer
    kept = _nearest_first(geo, x, C, 4, below)[0]
    np.testing.assert_allclose(kept[:, num], C[0, [0, 3, 6, 9], num])
    all_of_them = _nearest_first(geo, x, C, 16, below)[0]
    assert np.isfinite(all_of_them).all(1).sum() == 10
    np.testing.assert_allclose(all_of_them[:10, num], C[0, :10, num])


def test_additions_add_one_feature_the_answer_left_at_the_agent(german):
    """``_additions``: every row keeps the answer's changed features (numeric ones scaled toward the agent by
    ``ADD_SHRINK``), changes exactly one more raw feature, lies in the agent's box; an agent with no
    answer (a NaN row) gets none."""
    from learners.tabular.budget_search import ADD_SHRINK, _additions

    world, labels = german[0], german[1]
    geo = WorldGeometry.of(world)
    X = labels.X[:8]
    B = labels.CF[:8].copy()
    B[0] = np.nan
    vocab = [np.unique(labels.CF[:, c]) if geo.numeric[c] else np.zeros(0) for c in range(X.shape[1])]
    A = _additions(geo, X, B, vocab)
    assert np.isnan(A[0]).all()
    for i in range(1, len(X)):
        R = A[i][~np.isnan(A[i]).any(1)]
        assert len(R)
        before = geo.deltas(X[i][None], B[i][None])[0] > 1e-12
        after = geo.deltas(X[i][None], R) > 1e-12
        assert (after >= before).all() and (after.sum(1) == before.sum() + 1).all()
        assert not geo.violations(np.repeat(X[i][None], len(R), 0), R).any()
        kept = np.flatnonzero(geo.numeric & (np.abs(B[i] - X[i]) > 1e-12) & ~geo.rounded)
        for c in kept:  # a continuous change scaled by one of the shrink factors
            t = (R[:, c] - X[i, c]) / (B[i, c] - X[i, c])
            assert np.isclose(t[:, None], np.asarray(ADD_SHRINK)[None, :]).any(1).all()
