"""Sequential policies: smoke training with tiny budgets, save/load round trip (no pickles), the
lookahead baseline against brute force on a small case, the experiment config."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from envs.sequential_candidates import FlatGrid, candidates
from envs.sequential_env import default_world
from learners.base import Generator, build_generator
from learners.policies.sequential import SequentialLookahead, sequential_context
from learners.policies.sequential_rollout import lookahead_choose


@pytest.fixture(scope="module")
def labelled():
    """20 Adult agents labelled by the one-step lookahead (a cheap stand-in for the sequencer)."""
    world, X = default_world("adult")
    X = X[:20]
    la = SequentialLookahead(depth=1).fit(None, None, sequential_context(world))
    p = la.predict(X)
    return world, SimpleNamespace(X=X, actions=p.sets, values=p.values, cost=np.where(p.accepted, p.cost, np.inf),
                                  ok=p.accepted)


@pytest.mark.parametrize("method,params", [
    ("seq_bc", {"bc_epochs": 2}),
    ("seq_maskable_ppo", {"total_timesteps": 64, "n_steps": 16, "batch_size": 32, "n_envs": 2, "eval_freq": 32}),
    ("seq_bc_ppo", {"bc_epochs": 1, "total_timesteps": 32, "n_steps": 16, "batch_size": 16, "n_envs": 2}),
    ("seq_lookahead", {"depth": 2}),
    ("seq_lookahead", {"depth": 2, "estimate": True}),
    ("seq_bc", {"bc_epochs": 2, "prior_scale": 5.0, "expert_relabel": True}),
])
def test_train_predict_save_load(labelled, method, params, tmp_path):
    world, lab = labelled
    model = build_generator(method, params).fit(lab, None, sequential_context(world))
    pred = model.predict(lab.X)
    assert pred.sets.shape[0] == len(lab.X) and pred.values.shape == pred.sets.shape
    assert ((pred.sets >= 0).sum(1) >= 1).all()
    # the reported cost and validity are the world's for the answered steps
    for i in range(3):
        r = world.evaluate(lab.X[i], model.steps(pred, i))
        assert r.cost == pytest.approx(pred.cost[i]) and r.valid == pred.accepted[i]
    model.save(tmp_path / "m")
    assert not list((tmp_path / "m").glob("*.pkl")) and not list((tmp_path / "m").glob("*.zip"))
    loaded = Generator.load(tmp_path / "m")
    again = loaded.predict(lab.X)
    np.testing.assert_array_equal(again.sets, pred.sets)
    np.testing.assert_allclose(again.cost, pred.cost)


def test_lookahead_matches_brute_force():
    """The first step of the two-step lookahead starts a cheapest <= 2-step completion (brute force:
    every single step and every ordered pair of (action, value) steps priced by ``world.rollout``),
    and the one-step lookahead takes the cheapest accepting single step."""
    world, X = default_world("german")
    grid = FlatGrid.of(world)
    choose1, choose2 = lookahead_choose(world, grid, 1), lookahead_choose(world, grid, 2)
    checked = 0
    for x in X[:3]:
        used = np.zeros((1, world.n_actions), bool)
        c = candidates(world, grid, x[None], used)
        allowed = np.flatnonzero(c.mask[0])
        k1, k2 = (g.reshape(-1) for g in np.meshgrid(allowed, allowed, indexing="ij"))
        pair = grid.action[k1] != grid.action[k2]
        k1, k2 = k1[pair], k2[pair]
        A = np.concatenate([np.stack([grid.action[allowed], np.full(len(allowed), -1)], 1),
                            np.stack([grid.action[k1], grid.action[k2]], 1)])
        V = np.concatenate([np.stack([grid.value[allowed], np.full(len(allowed), np.nan)], 1),
                            np.stack([grid.value[k1], grid.value[k2]], 1)])
        first = np.concatenate([allowed, k1])
        r = world.rollout(np.repeat(x[None], len(A), 0), A, V)
        ok = r.ok & world.accepts(r.final)
        # a pair counts only when its first step alone is rejected (otherwise the sequence ends there)
        single_ok = dict(zip(allowed.tolist(), ok[: len(allowed)].tolist(), strict=True))
        ok[len(allowed):] &= ~np.array([single_ok[int(k)] for k in k1], dtype=bool)
        if not ok.any():
            continue
        best = r.cost[ok].min()
        k, _ = choose2(x[None], used, np.zeros(1), c)
        assert r.cost[ok & (first == k[0])].min() == pytest.approx(best, rel=1e-9)
        singles = ok[: len(allowed)]
        if singles.any():
            k, _ = choose1(x[None], used, np.zeros(1), c)
            assert c.cost[0, k[0]] == pytest.approx(r.cost[: len(allowed)][singles].min())
        checked += 1
    assert checked


def test_sequential_config(tmp_path):
    from evaluation.sequential_experiment import is_sequential_config, load_sequential_config

    cfg = load_sequential_config("configs/sequential_adult.yaml")
    assert cfg.world == "adult" and {p.method for p in cfg.policies} >= {"seq_maskable_ppo", "seq_bc", "seq_bc_ppo"}
    assert is_sequential_config({"world": "german"}) and not is_sequential_config({"dataset": {}})
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nworld: adult\nagents: 10\ntest_agents: 10\n")
    with pytest.raises(ValueError, match="test_agents"):
        load_sequential_config(bad)
    with pytest.raises(ValueError, match="max_steps"):
        build_generator("seq_bc", {"max_steps": 0})
    with pytest.raises(ValueError, match="estimate"):
        build_generator("seq_lookahead", {"depth": 1, "estimate": True})
    with pytest.raises(ValueError, match="expert"):
        build_generator("seq_bc", {"expert": "oracle"})
    with pytest.raises(ValueError, match="dagger_iters"):
        build_generator("seq_bc", {"expert": "exact", "dagger_iters": 1})
    assert "seq_encoder_decoder" in {p.method for p in cfg.policies} and set(cfg.beam_policies) <= {
        p.label for p in cfg.policies}
    bad.write_text("name: x\nworld: adult\npolicies: [{method: seq_bc}]\nbeam_policies: [nope]\n")
    with pytest.raises(ValueError, match="beam_policies"):
        load_sequential_config(bad)
    bad.write_text("name: x\nworld: adult\nbeam_widths: [1]\n")
    with pytest.raises(ValueError, match="beam_widths"):
        load_sequential_config(bad)
    with pytest.raises(ValueError, match="beam_width"):
        build_generator("seq_bc", {"beam_width": 0})


def test_bc_targets_any_equally_priced_order():
    """With bc_any_order the targets of a state are the label's next step plus every later label
    step that, taken next, keeps the sequence valid and no dearer (German: c = b, so both orders
    of two steps on different columns cost the same); without it, only the label's next step."""
    world, X = default_world("german")
    grid = FlatGrid.of(world)
    found = None
    for x in X[:10]:
        c = candidates(world, grid, x[None], np.zeros((1, world.n_actions), bool))
        ks = np.flatnonzero(c.mask[0] & ~c.accepted[0])[::7]
        k1, k2 = (g.reshape(-1) for g in np.meshgrid(ks, ks, indexing="ij"))
        keep = grid.action[k1] < grid.action[k2]
        k1, k2 = k1[keep], k2[keep]
        fwd = world.rollout(np.repeat(x[None], len(k1), 0), np.stack([grid.action[k1], grid.action[k2]], 1),
                            np.stack([grid.value[k1], grid.value[k2]], 1))
        bwd = world.rollout(np.repeat(x[None], len(k1), 0), np.stack([grid.action[k2], grid.action[k1]], 1),
                            np.stack([grid.value[k2], grid.value[k1]], 1))
        both = fwd.ok & bwd.ok & world.accepts(fwd.final) & world.accepts(bwd.final) & np.isclose(fwd.cost, bwd.cost)
        if both.any():
            i = int(np.argmax(both))
            found = x, k1[i], k2[i]
            break
    assert found is not None
    x, k1, k2 = found
    A = np.array([[grid.action[k1], grid.action[k2]]])
    V = np.array([[grid.value[k1], grid.value[k2]]])
    for any_order, first in ((True, {k1, k2}), (False, {k1})):
        model = build_generator("seq_bc", {"bc_any_order": any_order})
        model.world_ = world
        obs, tgt, masks, ret = model._pairs(x[None], A, V)
        assert set(np.flatnonzero(tgt[0]).tolist()) == first and (tgt <= masks).all()
        assert set(np.flatnonzero(tgt[1]).tolist()) == {k2}


def test_batched_rollout_equals_env_stepping(labelled):
    """The batched rollout (all agents step together, one network forward per step) takes the same
    steps and gets the same prices as stepping ``SequentialEnv`` one agent at a time with the same
    network on the environment's own observation and action mask."""
    import torch

    from envs.sequential_env import SequentialEnv
    from learners.policies.sequential_rollout import MASKED_LOGIT

    world, lab = labelled
    model = build_generator("seq_bc", {"bc_epochs": 3, "augment_agents": 10, "dagger_iters": 1, "prior_scale": 5.0,
                                       "dagger_epochs": 1}).fit(lab, None, sequential_context(world))
    assert model.fit_info_["bc"]["augmented_agents"] > 0 and model.fit_info_["bc"]["dagger"][0]["states"] > 0
    pred = model.predict(lab.X)
    env = SequentialEnv(world, lab.X, candidate_features=True)
    for i in range(len(lab.X)):
        obs, info = env.reset(options={"index": i})
        done, total = False, 0.0
        while not done:
            with torch.no_grad():
                logits = model.net_.forward_actor(torch.as_tensor(obs[None]))[0]
            logits = torch.where(torch.as_tensor(env.action_masks()), logits, torch.tensor(MASKED_LOGIT))
            obs, r, term, trunc, info = env.step(np.int64(int(logits.argmax())))
            total -= r
            done = term or trunc
        assert info["steps"] == model.steps(pred, i)
        assert total == pytest.approx(pred.cost[i], rel=1e-12, abs=1e-12)
        assert info["is_success"] == pred.accepted[i]


def test_recombined_agents(labelled):
    from learners.policies.sequential_experts import recombined_agents

    world, lab = labelled
    Y = recombined_agents(world, lab.X, 30, np.random.default_rng(0))
    assert len(Y) == 30 and not world.accepts(Y).any()
    world.validate(Y)
    assert not ({y.tobytes() for y in Y} & {x.tobytes() for x in lab.X})
    for c in range(Y.shape[1]):  # every value is one a real agent has
        assert np.isin(Y[:, c], lab.X[:, c]).all()


def test_losses_to_a_reference():
    """The per-agent comparison of two evaluated policies counts and lists exactly the agents where
    the first is dearer (German: the one-step lookahead on 7 of these 8), with both answers' steps
    as the world names them."""
    from evaluation.sequential_experiment import losses_to, policy_metrics, where_raw_policies_lose

    world, X = default_world("german")
    X = X[:8]
    ctx = sequential_context(world)
    one = SequentialLookahead(depth=1).fit(None, None, ctx).predict(X)
    two = SequentialLookahead(depth=2).fit(None, None, ctx).predict(X)
    seq = np.where(two.accepted, two.cost, np.inf)
    res = {"sequencer": {"_costs": seq.tolist()},
           "models": {n: policy_metrics(world, X, p, seq, seq, 1.0) for n, p in (("la1", one), ("la2", two))}}
    both = one.accepted & two.accepted
    dearer = np.flatnonzero(both & (one.cost > two.cost + 1e-9))
    assert len(dearer) >= 3
    lines = losses_to(res, "la1", "la2", n=len(X))
    assert lines[0].startswith(f"**la1** against **la2**: dearer on {len(dearer)}, cheaper on "
                               f"{int((both & (one.cost < two.cost - 1e-9)).sum())}")
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
    assert sorted(int(r.split("|")[1]) for r in rows) == dearer.tolist()
    for r in rows:
        i = int(r.split("|")[1])
        assert world.action_names[one.sets[i, 0]] in r.split("|")[2]
    # the report's section picks the raw learned policy (not a lookahead) and compares it with lookahead2
    res["models"] = {"policy seed0": res["models"]["la1"], "lookahead2 seed0": res["models"]["la2"],
                     "lookahead1 seed0": res["models"]["la2"]}
    section = where_raw_policies_lose(res)
    assert section[0].endswith("the two-step lookahead:") and section[2].startswith("**policy seed0** against")
    assert where_raw_policies_lose({"models": {"policy seed0": res["models"]["policy seed0"]}}) == []


def test_exact_expert_targets(labelled, tmp_path, monkeypatch):
    """With ``expert="exact"`` the relabelled target of each agent is the cheaper of its label and
    the exact grid reference's answer (priced by the world), the recombined agents get the exact
    answers, and the labels are kept under the run dir: a second fit with another seed but the same
    ``data_seed`` recombines the same agents and solves nothing again."""
    from evaluation.sequential_experiment import exact_reference
    from learners.policies.sequential_experts import expert_answers, expert_targets
    from learners.policies.sequential_params import SequentialBCParams

    world, lab = labelled
    p = SequentialBCParams(expert="exact", expert_jobs=1)
    answers = expert_answers(world, p, sequential_context(world, run_dir=tmp_path), 8, 64)
    X, A, V = lab.X[:8], lab.actions[:8], lab.values[:8]
    Xt, At, Vt, info = expert_targets(world, answers, X, A, V, relabel=True, augment=0, rng=np.random.default_rng(0))
    exact = exact_reference(world, X)["cost"]
    own = world.rollout(X, A, V).cost
    np.testing.assert_allclose(world.rollout(Xt, At, Vt).cost, np.minimum(own, exact), rtol=1e-12)
    assert info["relabelled_by_expert"] == int((exact < own - 1e-12).sum())

    params = {"bc_epochs": 1, "expert": "exact", "expert_jobs": 1, "augment_agents": 4, "data_seed": 3}
    first = build_generator("seq_bc", params).fit(lab, None, sequential_context(world, 0, run_dir=tmp_path))
    assert first.fit_info_["bc"]["augmented_agents"] > 0
    dirs = sorted((tmp_path / "expert_labels").iterdir())
    from solvers.sequential import ExactSequenceSearch

    def refuse(*args, **kwargs):
        raise AssertionError("the exact expert's labels should have been reused")
    monkeypatch.setattr(ExactSequenceSearch, "_solve", refuse)
    again = build_generator("seq_bc", params).fit(lab, None, sequential_context(world, 1, run_dir=tmp_path))
    assert sorted((tmp_path / "expert_labels").iterdir()) == dirs
    assert again.fit_info_["bc"]["augmented_agents"] == first.fit_info_["bc"]["augmented_agents"]
