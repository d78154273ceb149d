"""Tests of the Gymnasium set-cover environment (envs/setcover_env.py)."""

from __future__ import annotations

import importlib
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env

import envs
from envs import CapabilityWorld, SetCoverEnv


def make_world(n_features: int = 8, n_actions: int = 12, seed: int = 0, discounts: bool = False,
               n_groups: int = 1) -> CapabilityWorld:
    """A random capability world in which every feature is added by some action (every group)."""
    rng = np.random.default_rng(seed)
    actions = (rng.random((n_actions, n_features)) < 0.3).astype(np.uint8)
    actions[np.arange(n_actions) % n_features, np.arange(n_actions) % n_features] = 1
    costs = rng.uniform(1.0, 10.0, n_actions).round(2)
    thresholds = (rng.random((n_groups, n_features)) < 0.6).astype(np.uint8)
    thresholds[:, 0] = 1
    access = None
    if n_groups > 1:
        access = rng.random((n_groups, n_actions)) < 0.7
        access[:, : min(n_actions, n_features)] = True  # keep every group able to cover
    edges = [(k, (k + 1) % n_features, 0.5) for k in range(0, n_features, 2)] if discounts else None
    return CapabilityWorld(actions, costs, thresholds if n_groups > 1 else thresholds[0], access, edges)


def negative_agents(world: CapabilityWorld, size: int, seed: int = 1,
                    groups: np.ndarray | None = None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = (rng.random((size * 20, world.n_features)) < 0.5).astype(np.uint8)
    g = None if groups is None else np.resize(groups, len(X))
    X = X[~world.accepts(X, g)][:size]
    assert len(X) == size
    return X


def run_random_episode(env: SetCoverEnv, rng: np.random.Generator, **reset_kw):
    """Take random valid actions until the episode ends; return (rewards, info, terminated)."""
    obs, info = env.reset(**reset_kw)
    rewards, terminated, truncated = [], False, False
    while not (terminated or truncated):
        mask = env.action_masks()
        a = rng.choice(np.flatnonzero(mask))
        obs, r, terminated, truncated, info = env.step(a)
        rewards.append(r)
    return np.array(rewards), info, terminated


# ---------------------------------------------------------------------- checkers


@pytest.mark.parametrize("include_used", [True, False])
@pytest.mark.parametrize("render_mode", [None, "ansi"])
def test_gymnasium_check_env(include_used, render_mode):
    world = make_world(discounts=True)
    # through gymnasium.make so that the checker also renders in the other render modes
    env = gym.make("recourse/SetCover-v0", world=world, include_used_in_obs=include_used,
                   render_mode=render_mode).unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gym_check_env(env, skip_render_check=render_mode is None)
    n, A = world.n_features, world.n_actions
    assert env.observation_space.shape == ((n + A,) if include_used else (n,))
    assert env.observation_space.dtype == np.float32


def test_sb3_check_env():
    from stable_baselines3.common.env_checker import check_env

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(SetCoverEnv(make_world(n_groups=2)), warn=True)
        check_env(SetCoverEnv(make_world(), agents=negative_agents(make_world(), 5)), warn=True)


# ---------------------------------------------------------------------- reset


def test_reset_with_options_picks_the_agent():
    world = make_world(n_groups=3)
    X = negative_agents(world, 4, groups=np.array([2]))
    G = np.array([2, 2, 2, 2])
    env = SetCoverEnv(world, agents=X, groups=G)
    n = world.n_features
    obs, info = env.reset(seed=0, options={"agent": X[1], "group": 2})
    np.testing.assert_array_equal(obs[:n], X[1])
    assert not obs[n:].any() and info["group"] == 2 and info["cost"] == 0.0 and info["sequence"] == []
    obs, info = env.reset(options={"index": 3})
    np.testing.assert_array_equal(obs[:n], X[3])
    assert info["group"] == 2
    assert obs.shape == env.observation_space.shape and obs.dtype == np.float32


def test_reset_draws_from_the_family_uniformly():
    world = make_world()
    X = negative_agents(world, 3)
    env = SetCoverEnv(world, agents=X)
    env.reset(seed=0)
    seen = np.array([env.reset()[0][: world.n_features] for _ in range(300)])
    counts = [(seen == x).all(axis=1).sum() for x in X]
    assert sum(counts) == 300 and min(counts) > 60


def test_default_family_is_negative_and_coverable():
    for n_groups in (1, 3):
        world = make_world(n_groups=n_groups, seed=4)
        env = SetCoverEnv(world)
        env.reset(seed=3)
        groups_seen = set()
        for _ in range(30):
            obs, info = env.reset()
            x = obs[: world.n_features].astype(np.uint8)
            g = None if info["group"] is None else np.array([info["group"]])
            groups_seen.add(info["group"])
            assert not world.accepts(x, g)[0]
            reach = world.actions[world.allowed(info["group"] if n_groups > 1 else None)].any(axis=0)
            assert not (world.deficits(x, g)[0] & ~reach).any()
            assert info["action_mask"].any()
        assert groups_seen == ({None} if n_groups == 1 else {0, 1, 2})


def test_seeded_reproducibility():
    world = make_world(discounts=True)

    def agents(seed):
        env = SetCoverEnv(world)
        first = env.reset(seed=seed)[0]
        return np.array([first] + [env.reset()[0] for _ in range(10)])

    np.testing.assert_array_equal(agents(7), agents(7))
    assert not np.array_equal(agents(7), agents(8))
    X = negative_agents(world, 10)
    a = SetCoverEnv(world, agents=X)
    b = SetCoverEnv(world, agents=X)
    np.testing.assert_array_equal(
        [a.reset(seed=5)[0]] + [a.reset()[0] for _ in range(10)],
        [b.reset(seed=5)[0]] + [b.reset()[0] for _ in range(10)])


# ---------------------------------------------------------------------- masks and dynamics


def test_masks_exclude_used_disallowed_and_useless_actions():
    world = make_world(n_groups=2, seed=3)
    rng = np.random.default_rng(0)
    env = SetCoverEnv(world)
    env.reset(seed=1)
    for _ in range(20):
        obs, info = env.reset()
        g = info["group"]
        allowed = world.allowed(g)
        while True:
            x = obs[: world.n_features].astype(bool)
            used = obs[world.n_features:].astype(bool)
            expected = allowed & ~used & (world.actions & ~x).any(axis=1)
            mask = env.action_masks()
            np.testing.assert_array_equal(mask, expected)
            np.testing.assert_array_equal(info["action_mask"], expected)
            assert not mask[~allowed].any() and not mask[used].any()
            assert mask.dtype == bool and mask.shape == (world.n_actions,)
            obs, _, term, trunc, info = env.step(rng.choice(np.flatnonzero(mask)))
            if term or trunc:
                break


def test_useless_action_is_masked():
    actions = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]])
    world = CapabilityWorld(actions, np.ones(4), np.array([1, 1, 1]))
    env = SetCoverEnv(world)
    _, info = env.reset(options={"agent": [1, 0, 0]})
    np.testing.assert_array_equal(info["action_mask"], [False, True, True, True])
    env.step(1)  # now holds 0 and 1: action 2 adds nothing
    np.testing.assert_array_equal(env.action_masks(), [False, False, False, True])


@pytest.mark.parametrize("discounts", [False, True])
@pytest.mark.parametrize("scale", [1.0, None, 3.0])
def test_rewards_are_minus_step_costs(discounts, scale):
    world = make_world(discounts=discounts, seed=2)
    env = SetCoverEnv(world, reward_scale=scale)
    expected_scale = np.mean(world.costs) if scale is None else scale
    assert env.reward_scale == pytest.approx(expected_scale)
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=0)
    done = False
    while not done:
        x = obs[: world.n_features]
        a = int(rng.choice(np.flatnonzero(env.action_masks())))
        price = world.step_costs(x[None])[0, a]
        obs, r, term, trunc, info = env.step(a)
        assert r == pytest.approx(-price / expected_scale)
        done = term or trunc


@pytest.mark.parametrize("discounts", [False, True])
def test_episode_return_equals_rollout_cost(discounts):
    world = make_world(discounts=discounts, seed=5, n_groups=2)
    env = SetCoverEnv(world)
    env.reset(seed=0)
    rng = np.random.default_rng(1)
    order_mattered = False
    for _ in range(40):
        obs, info = env.reset()
        x0 = obs[: world.n_features].astype(np.uint8)
        rewards, info, terminated = run_random_episode(env, rng, options={"agent": x0, "group": info["group"]})
        assert terminated and info["is_success"] and not info["no_recourse"]
        seq = np.array([info["sequence"]])
        g = np.array([info["group"]])
        final, cost, ok = world.rollout(x0[None], seq, g)
        assert ok[0]
        assert rewards.sum() == pytest.approx(-cost[0])
        assert info["cost"] == pytest.approx(cost[0])
        rev = world.rollout(x0[None], seq[:, ::-1], g)[1][0]
        order_mattered |= not np.isclose(rev, cost[0])
    assert order_mattered == discounts


def test_discounts_make_order_matter_in_rewards():
    actions = np.array([[1, 0], [0, 1]])
    world = CapabilityWorld(actions, np.array([4.0, 10.0]), np.array([1, 1]), discount_edges=[(0, 1, 0.5)])
    env = SetCoverEnv(world)
    env.reset(options={"agent": [0, 0]})
    r = [env.step(0)[1], env.step(1)[1]]
    assert r == [-4.0, -5.0]
    env.reset(options={"agent": [0, 0]})
    r = [env.step(1)[1], env.step(0)[1]]
    assert r == [-10.0, -4.0]


# ---------------------------------------------------------------------- episode end


def test_termination_on_acceptance():
    actions = np.array([[1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 1, 0]])
    world = CapabilityWorld(actions, np.array([3.0, 1.0, 1.0, 2.0]), np.array([1, 1, 1, 0]))
    env = SetCoverEnv(world)
    env.reset(options={"agent": [0, 0, 0, 0]})
    obs, r, term, trunc, info = env.step(0)
    assert not term and not trunc and not info["is_success"]
    obs, r, term, trunc, info = env.step(1)
    assert term and not trunc and info["is_success"]
    assert info["sequence"] == [0, 1] and info["cost"] == 4.0
    np.testing.assert_array_equal(obs, [1, 1, 1, 0, 1, 1, 0, 0])


def test_truncation_on_budget():
    actions = np.eye(4, dtype=np.uint8)
    world = CapabilityWorld(actions, np.ones(4), np.ones(4))
    env = SetCoverEnv(world, max_steps=2)
    assert SetCoverEnv(world).max_steps == 4
    env.reset(options={"agent": [0, 0, 0, 0]})
    *_, term, trunc, info = env.step(0)
    assert not term and not trunc
    *_, term, trunc, info = env.step(1)
    assert not term and trunc and not info["no_recourse"]


def test_truncation_when_no_valid_action_remains():
    actions = np.array([[1, 0, 0], [0, 1, 0]])
    world = CapabilityWorld(actions, np.ones(2), np.array([1, 1, 1]))  # feature 2 is unreachable
    env = SetCoverEnv(world, max_steps=10)
    _, info = env.reset(options={"agent": [0, 0, 0]})
    assert not info["no_recourse"]
    *_, term, trunc, info = env.step(0)
    assert not term and not trunc
    *_, term, trunc, info = env.step(1)
    assert not term and trunc and info["no_recourse"] and not info["action_mask"].any()


def test_grouped_access_blocks_recourse():
    actions = np.array([[1, 0], [0, 1]])
    access = np.array([[True, True], [True, False]])
    world = CapabilityWorld(actions, np.ones(2), np.array([[1, 1], [1, 1]]), access=access)
    env = SetCoverEnv(world)
    _, info = env.reset(options={"agent": [1, 0], "group": 1})
    assert info["no_recourse"] and not env.action_masks().any()
    _, info = env.reset(options={"agent": [1, 0], "group": 0})
    np.testing.assert_array_equal(info["action_mask"], [False, True])


def test_masked_action_gives_penalty_and_keeps_state():
    world = make_world(seed=6)
    env = SetCoverEnv(world, invalid_action_penalty=7.5, max_steps=3)
    obs, info = env.reset(seed=0)
    a = int(np.flatnonzero(env.action_masks())[0])
    obs, *_, info = env.step(a)
    cost = info["cost"]
    obs2, r, term, trunc, info = env.step(a)  # already used
    assert r == -7.5 and info["invalid_action"] and not term
    np.testing.assert_array_equal(obs2, obs)
    assert info["cost"] == cost and info["sequence"] == [a]
    *_, trunc, info = env.step(a)  # third step: the invalid steps counted toward the budget
    assert trunc
    default = SetCoverEnv(world, reward_scale=2.0)
    assert default.invalid_action_penalty == pytest.approx(world.costs.max() / 2.0)


# ---------------------------------------------------------------------- errors


@pytest.mark.parametrize("kwargs, match", [
    ({"agents": np.zeros((2, 5))}, "agents: expected 8 features"),
    ({"agents": np.full((2, 8), 2)}, "capability features are 0 or 1"),
    ({"agents": np.zeros((0, 8))}, "agents"),
    ({"agents": np.ones((1, 8))}, "already accepted"),
    ({"groups": np.array([0])}, "groups: only meaningful with agents"),
    ({"max_steps": 0}, "max_steps"),
    ({"max_steps": 2.5}, "max_steps"),
    ({"reward_scale": -1.0}, "reward_scale"),
    ({"invalid_action_penalty": -1.0}, "invalid_action_penalty"),
    ({"render_mode": "rgb_array"}, "render_mode"),
    ({"world": "not a world"}, "world: expected a CapabilityWorld"),
])
def test_bad_constructor_inputs(kwargs, match):
    kwargs = {"world": make_world(), **kwargs}
    with pytest.raises(ValueError, match=match):
        SetCoverEnv(**kwargs)


def test_grouped_world_needs_groups():
    world = make_world(n_groups=2)
    with pytest.raises(ValueError, match="group"):
        SetCoverEnv(world, agents=np.zeros((2, 8)))
    with pytest.raises(ValueError, match="group: ids must be in"):
        SetCoverEnv(world, agents=np.zeros((2, 8)), groups=np.array([0, 5]))
    env = SetCoverEnv(world)
    with pytest.raises(ValueError, match="group"):
        env.reset(options={"agent": np.zeros(8)})


@pytest.mark.parametrize("options, match", [
    ({"agent": np.ones(8)}, "already accepted"),
    ({"agent": np.zeros(3)}, "agent: expected 8 features"),
    ({"agent": np.zeros((2, 8))}, "agent: expected one agent"),
    ({"agent": [0.5] * 8}, "capability features are 0 or 1"),
    ({"index": 9}, "'index' must be an integer in"),
    ({"index": 0, "agent": np.zeros(8)}, "either 'index' or 'agent'"),
    ({"group": 0}, "'group' needs 'agent'"),
    ({"agnet": np.zeros(8)}, "unknown keys"),
])
def test_bad_reset_options(options, match):
    world = make_world()
    env = SetCoverEnv(world, agents=negative_agents(world, 3))
    with pytest.raises(ValueError, match=match):
        env.reset(options=options)


def test_index_needs_a_family_and_step_needs_reset():
    env = SetCoverEnv(make_world())
    with pytest.raises(ValueError, match="'index' needs a fixed family"):
        env.reset(options={"index": 0})
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.reset(seed=0)
    for bad in (12, -1, 1.0, "a", [0, 1]):
        with pytest.raises(ValueError, match="action: expected an integer"):
            env.step(bad)


# ---------------------------------------------------------------------- registration and training


def test_gymnasium_make_and_registration():
    importlib.reload(envs)  # registering twice must not fail
    world = make_world()
    X = negative_agents(world, 4)
    env = gym.make("recourse/SetCover-v0", world=world, agents=X, max_steps=5)
    assert isinstance(env.unwrapped, SetCoverEnv) and env.unwrapped.max_steps == 5
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    mask = env.get_wrapper_attr("action_masks")()
    np.testing.assert_array_equal(mask, info["action_mask"])
    env.step(int(np.flatnonzero(mask)[0]))
    env.close()


def test_make_without_arguments_uses_the_documented_default():
    """Gymnasium's convention: a registered id makes a working env with no arguments."""
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    from data_gen.config import SyntheticDatasetConfig
    from data_gen.synthetic import make_world as synthetic_world

    env = gym.make("recourse/SetCover-v0")
    world = env.unwrapped.world
    # the stored default is exactly what the project's generator draws for configs/default.yaml's world
    cfg = SyntheticDatasetConfig(n_features=20, seed=0)
    assert world.fingerprint() == synthetic_world(cfg, np.random.default_rng(cfg.seed)).fingerprint()
    assert (world.n_features, world.n_actions, world.n_groups, world.order_matters) == (20, 100, 1, False)
    assert env.observation_space.shape == (120,) and env.action_space.n == 100
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gym_check_env(env.unwrapped)
        sb3_check_env(gym.make("recourse/SetCover-v0").unwrapped, warn=True)
    other = gym.make("recourse/SetCover-v0")
    for seed in (0, 1, 123):
        (a, info_a), (b, info_b) = env.reset(seed=seed), other.reset(seed=seed)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(info_a["action_mask"], info_b["action_mask"])
        assert not world.accepts(a[None, :20].astype(np.uint8))[0]  # starts negative
    env.close()
    other.close()


def test_render_ansi():
    env = SetCoverEnv(make_world(), render_mode="ansi")
    assert env.render() is None
    env.reset(seed=0)
    a = int(np.flatnonzero(env.action_masks())[0])
    env.step(a)
    text = env.render()
    assert isinstance(text, str) and "step 1/" in text and f"a{a}" in text


def test_maskable_ppo_smoke():
    from sb3_contrib import MaskablePPO

    world = make_world(n_features=6, n_actions=8, seed=1)
    model = MaskablePPO("MlpPolicy", SetCoverEnv(world), n_steps=64, batch_size=32, n_epochs=1, seed=0,
                        device="cpu")
    model.learn(total_timesteps=256)
    env = SetCoverEnv(world)
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
    assert env.action_masks()[int(action)]
