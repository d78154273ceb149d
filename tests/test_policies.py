"""RL policies (learners/policies/): training, batched greedy rollout, persistence, BC quality,
the lookahead baseline, policy metrics and the experiment runner. Tiny worlds and budgets: the whole module runs in
well under a minute and a half on 2 cores."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("sb3_contrib")

from brute import brute_force_covers, brute_force_sequence  # noqa: E402
from worlds import random_world  # noqa: E402

from data_gen.dataset import Split  # noqa: E402
from envs import SetCoverEnv  # noqa: E402
from evaluation.policy_eval import best_order_costs, policy_metrics  # noqa: E402
from learners.base import FitContext, Generator, build_generator  # noqa: E402
from learners.policies import CapabilityFeatures, LookaheadPolicy, greedy_rollout  # noqa: E402
from solvers.setcover_fast import FastSetCover  # noqa: E402
from solvers.ucs import UniformCostSearch  # noqa: E402

METHODS = ["maskable_ppo", "bc", "bc_ppo", "dqn"]  # trained with sb3
ALL_METHODS = [*METHODS, "lookahead"]  # every registered policy
RL = {"total_timesteps": 256, "n_envs": 2, "eval_freq": 128, "n_eval_episodes": 4, "checkpoint_freq": 128,
      "net_arch": [16, 16]}
PPO = {"n_steps": 64, "batch_size": 64, "n_epochs": 2}
PARAMS = {
    "maskable_ppo": RL | PPO,
    "bc": {"bc_epochs": 3, "bc_batch_size": 32, "net_arch": [16, 16]},
    "bc_ppo": RL | PPO | {"bc_epochs": 2, "bc_batch_size": 32, "lookahead_prior": False},
    "dqn": RL | {"learning_starts": 64, "batch_size": 32, "buffer_size": 1000, "target_update_interval": 64},
    "lookahead": {},
}


def all_agents(world, n: int) -> np.ndarray:
    """Every rejected agent of a small world that has a recourse."""
    X = ((np.arange(1 << n)[:, None] >> np.arange(n)) & 1).astype(np.uint8)
    X = X[~world.accepts(X)]
    return X[FastSetCover().label_batch(world, X).has_cover]


def split_of(world, X: np.ndarray) -> Split:
    lab = FastSetCover().label_batch(world, X)
    zeros = np.zeros(len(X), dtype=np.int64)
    return Split(X, zeros, lab.actions, lab.cost, zeros, lab.runtime)


@pytest.fixture(scope="module")
def tiny():
    world = random_world(0, n=6, A=8)
    X = all_agents(world, 6)
    return world, X, split_of(world, X)


@pytest.fixture(scope="module")
def fitted(tiny, tmp_path_factory):
    world, _, train = tiny
    cache: dict[str, Generator] = {}

    def get(method: str) -> Generator:
        if method not in cache:
            run_dir = tmp_path_factory.mktemp(method)
            ctx = FitContext.from_world(world, 3, seed=0, run_dir=run_dir, progress=False)
            cache[method] = build_generator(method, PARAMS[method]).fit(train, None, ctx)
            cache[method].run_dir = run_dir
        return cache[method]

    return get


@pytest.mark.parametrize("method", METHODS)
def test_trains_and_predicts_valid_shaped_output(method, tiny, fitted):
    world, X, _ = tiny
    model = fitted(method)
    pred = model.predict(X)
    assert pred.sets.ndim == 2 and pred.sets.shape[0] == len(X) and pred.sets.dtype == np.int64
    assert ((pred.sets >= -1) & (pred.sets < world.n_actions)).all()
    assert ((pred.confidence > 0) & (pred.confidence <= 1 + 1e-9)).all()
    r = model.predict_sequences(X)
    # masks + a step budget of A: every rollout of an agent with a recourse ends accepted
    assert r.accepted.all() and not r.stuck.any()
    _, cost, valid = world.rollout(X, r.sequences)
    assert valid.all() and np.allclose(cost, r.cost)
    assert (r.steps == (r.sequences >= 0).sum(1)).all()
    info = model.fit_info_
    assert info["heldout"] and info["train_agents"] + info["heldout_agents"] == len(X)
    if method != "bc":  # RL: sb3's evaluation and checkpoint callbacks wrote under run_dir
        assert (model.run_dir / "eval" / "evaluations.npz").exists()
        assert any((model.run_dir / "checkpoints").iterdir())
    assert (model.run_dir / "logs" / "progress.csv").exists()


@pytest.mark.parametrize("method", ALL_METHODS)
def test_save_load_gives_identical_recommendations(method, tiny, fitted, tmp_path):
    world, X, _ = tiny
    model = fitted(method)
    model.save(tmp_path)
    sb3 = method in METHODS
    files = {p.name for p in tmp_path.iterdir()}
    assert {"config.json", "weights.pt", "world.json"} <= files and ("sb3_model.zip" in files) == sb3
    torch.load(tmp_path / "weights.pt", weights_only=True)  # a plain state_dict, no pickle
    loaded = Generator.load(tmp_path)
    assert type(loaded) is type(model) and loaded.params == model.params
    if sb3:
        assert loaded.model_ is None  # serving rebuilt the network without sb3
    a, b = model.predict_sequences(X), loaded.predict_sequences(X)
    assert np.array_equal(a.sequences, b.sequences)
    assert np.allclose(a.confidence, b.confidence, rtol=1e-6)
    again = tmp_path / "again"
    loaded.save(again)  # re-saving a loaded policy keeps the sb3 zip for resuming
    assert (again / "sb3_model.zip").exists() == sb3


def test_resume_training_from_the_sb3_zip(tiny, fitted, tmp_path):
    world, X, train = tiny
    model = fitted("maskable_ppo")
    model.save(tmp_path)
    loaded = Generator.load(tmp_path)
    env = SetCoverEnv(world, agents=X)
    algo = loaded.load_sb3(env=env)  # trusted file: written by this test
    algo.learn(64)
    loaded.sync()
    assert loaded.predict_sequences(X).accepted.all()


@pytest.mark.parametrize("method", METHODS)
def test_batched_rollout_equals_per_agent_env_rollout(method, tiny, fitted):
    world, X, _ = tiny
    model = fitted(method)
    batched = model.predict_sequences(X)
    env = SetCoverEnv(world, agents=X)
    for i in range(len(X)):
        obs, info = env.reset(options={"index": i})
        done = False
        while not done:
            mask = env.action_masks()
            if method == "dqn":  # sb3's DQN.predict ignores masks; the served rollout masks
                with torch.no_grad():
                    q = model.model_.q_net(torch.as_tensor(obs[None]))[0].numpy()
                action = int(np.argmax(np.where(mask, q, -np.inf)))
            else:
                action, _ = model.model_.predict(obs, action_masks=mask, deterministic=True)
            obs, _, terminated, truncated, info = env.step(np.int64(action))
            done = terminated or truncated
        seq = batched.sequences[i][batched.sequences[i] >= 0].tolist()
        assert info["sequence"] == seq, f"agent {i}"
        assert np.isclose(info["cost"], batched.cost[i])


def test_max_steps_budget_reports_unaccepted_rollouts(tiny, fitted):
    world, X, _ = tiny
    net = fitted("bc").net_
    r = greedy_rollout(world, net, X, max_steps=1)
    needs_two = (split_of(world, X).sets >= 0).sum(1) >= 2
    assert not r.accepted[needs_two].any()  # never completed silently
    assert (r.steps <= 1).all()


@pytest.mark.parametrize("discounts", [0, 10])
def test_bc_reaches_high_optimality(discounts):
    world = random_world(3, n=7, A=9, discounts=discounts)
    X = all_agents(world, 7)
    perm = np.random.default_rng(0).permutation(len(X))
    cut = int(0.75 * len(X))
    train, test = X[np.sort(perm[:cut])], X[np.sort(perm[cut:])]
    model = build_generator("bc", {"bc_epochs": 40, "bc_batch_size": 32, "bc_learning_rate": 3e-3,
                                   "net_arch": [32, 32]})
    model.fit(split_of(world, train), None, FitContext.from_world(world, 7, seed=0, progress=False))
    r = model.predict_sequences(test)
    if discounts:  # brute force over orderings, capped at 4 actions (UCS optimum lengths here are <= 4)
        ucs = [UniformCostSearch().solve(world, x)[0] for x in test]
        assert max(len(u.action_ids) for u in ucs) <= 4
        best = np.array([brute_force_sequence(world, x, max_len=4)[0] for x in test])
        assert np.allclose(best, [u.cost for u in ucs])
    else:
        best = np.array([brute_force_covers(world, x)[0] for x in test])
    optimal = r.accepted & (r.cost <= best + 1e-9)
    assert optimal.mean() >= 0.9, optimal.mean()


@pytest.mark.parametrize("discounts", [0, 10])
def test_lookahead_is_optimal_within_two_steps(discounts):
    """The lookahead baseline takes the cheapest completion within two actions (priced in order),
    so it is optimal on every agent whose optimal recourse has at most two actions (the exact
    optimum by uniform-cost search, which test_bc_reaches_high_optimality checks by brute force)."""
    world = random_world(5, n=6, A=8, discounts=discounts)
    X = all_agents(world, 6)
    model = build_generator("lookahead", {}).fit(split_of(world, X), None, FitContext.from_world(world, 6))
    assert isinstance(model, LookaheadPolicy) and not list(model.net_.parameters())  # nothing learned
    r = model.predict_sequences(X)
    assert r.accepted.all() and ((r.confidence > 0) & (r.confidence <= 1 + 1e-9)).all()
    exact = [UniformCostSearch().solve(world, x)[0] for x in X]  # checked against brute force above
    best, short = np.array([e.cost for e in exact]), np.array([len(e.action_ids) <= 2 for e in exact])
    assert short.any() and (r.cost[short] <= best[short] + 1e-9).all()
    assert (r.cost >= best - 1e-9).all()


@pytest.mark.parametrize("discounts", [0, 10])
def test_capability_features_match_the_world(discounts):
    world = random_world(1, n=6, A=8, discounts=discounts)
    X = all_agents(world, 6)
    feats = CapabilityFeatures(None, world.to_dict(), 2.0, lookahead=True)
    used = np.zeros((len(X), world.n_actions))
    out = feats(torch.as_tensor(np.concatenate([X, used], 1), dtype=torch.float32)).numpy()
    n, A = world.n_features, world.n_actions
    assert np.allclose(out[:, n + 3 * A : n + 4 * A] * 2.0, world.step_costs(X), atol=1e-5)
    done, best = out[:, n + 4 * A : n + 5 * A], out[:, n + 5 * A : n + 6 * A] * 2.0
    for i, x in enumerate(X):
        for a in range(A):
            seqs = np.array([[a, -1]] + [[a, b] for b in range(A) if b != a])
            _, c, ok = world.rollout(np.repeat(x[None], len(seqs), 0), seqs)
            if ok.any():
                assert done[i, a] == 1 and np.isclose(best[i, a], c[ok].min(), rtol=1e-5)
            else:
                assert done[i, a] == 0


def test_policy_metrics_with_discounts(fitted):
    world = random_world(2, n=6, A=8, discounts=12)
    X = all_agents(world, 6)
    model = build_generator("bc", {"bc_epochs": 5, "bc_batch_size": 32, "net_arch": [16, 16]})
    model.fit(split_of(world, X), None, FitContext.from_world(world, 6, seed=0, progress=False))
    m = policy_metrics(model, world, X, exact_agents=20, repeats=1)
    assert m["exact_solver"] == "ucs" and m["exact_agents"] == 20 and m["optimality"]["n"] == 20
    assert m["validity"]["value"] == 1.0 and m["inference_s_per_agent"] > 0 and m["exact_s_per_agent"] > 0
    sc = m["set_cover_vs_ucs"]
    assert 0 <= sc["best_order_suboptimal"]["value"] <= sc["canonical_order_suboptimal"]["value"] <= 1
    json.dumps(m)  # JSON-able
    # the best order of a set is no costlier than the canonical order, and matches brute force
    sets = FastSetCover().label_batch(world, X[:20]).actions
    _, canon, _ = world.rollout(X[:20], sets)
    assert (best_order_costs(world, X[:20], None, sets) <= canon + 1e-9).all()


def test_policy_metrics_without_discounts(tiny, fitted):
    world, X, train = tiny
    m = policy_metrics(fitted("bc"), world, X, repeats=1)
    assert m["exact_solver"] == "setcover-bnb" and m["exact_agents"] == len(X)
    assert "set_cover_vs_ucs" not in m


@pytest.mark.parametrize("params, field", [
    ({"features": "pixels"}, "features"),
    ({"head": "per_action", "features": "raw"}, "head"),
    ({"bc_target": "any"}, "bc_target"),
    ({"bc_epochs": 0, "total_timesteps": 0}, "total_timesteps"),
    ({"nope": 1}, "nope"),
])
def test_bad_hyperparameters_are_named(params, field):
    with pytest.raises(ValueError, match=field):
        build_generator("bc", params)


def test_dqn_rejects_the_per_action_head():
    with pytest.raises(ValueError, match="head"):
        build_generator("dqn", {"head": "per_action"})


def test_fit_needs_the_world(tiny):
    _, _, train = tiny
    ctx = FitContext(6, 8, 3)
    with pytest.raises(ValueError, match="ctx.world"):
        build_generator("bc", {"bc_epochs": 1}).fit(train, None, ctx)


def test_grouped_world_needs_groups_at_predict():
    world = random_world(4, n=6, A=8, groups=2)
    X = ((np.arange(64)[:, None] >> np.arange(6)) & 1).astype(np.uint8)
    g = np.arange(64) % 2
    keep = ~world.accepts(X, g) & FastSetCover().label_batch(world, X, g).has_cover
    X, g = X[keep], g[keep]
    lab = FastSetCover().label_batch(world, X, g)
    split = Split(X, g, lab.actions, lab.cost, np.zeros(len(X), int), lab.runtime)
    model = build_generator("bc", {"bc_epochs": 2, "bc_batch_size": 32, "net_arch": [16, 16]})
    model.fit(split, None, FitContext.from_world(world, 6, seed=0, progress=False))
    with pytest.raises(ValueError, match="group"):
        model.predict(X)
    r = model.predict_sequences(X, g)
    _, _, valid = world.rollout(X, r.sequences, g)
    assert np.array_equal(valid, r.accepted) and r.accepted.all()  # only allowed actions are taken


def test_experiment_config_with_policies(tmp_path):
    from evaluation.config import parse_config
    from evaluation.experiment import evaluate_run, train_experiment

    cfg = parse_config({
        "name": "rl_tiny", "data_dir": str(tmp_path / "data"), "output_dir": str(tmp_path / "runs"),
        "dataset": {"n_features": 6, "n_actions": 8, "n_agents": 400, "seed": 0},
        "policies": [{"method": "bc", "params": {"bc_epochs": 2, "net_arch": [16, 16]}},
                     {"method": "maskable_ppo", "name": "ppo", "params": RL | PPO}],
        "evaluation": {"solver_timing_agents": 0}})
    run = train_experiment(cfg, progress=False, log=lambda *_: None)
    results = evaluate_run(run, plots=False, log=lambda *_: None)
    assert set(results["models"]) == {"bc [all]", "ppo [all]"}
    for r in results["models"].values():
        assert r["seeds"][0]["validity"]["value"] == 1.0
    assert (run / "models" / "ppo" / "all" / "seed0" / "weights.pt").exists()
