"""Gymnasium environment: recourse in the capability (set-cover) world as a deterministic MDP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.capability import CapabilityWorld

#: The world of ``gym.make("recourse/SetCover-v0")`` without arguments (see :func:`default_world`).
DEFAULT_WORLD_PATH = Path(__file__).with_name("setcover_default_world.json")


def default_world() -> CapabilityWorld:
    """The default world of :class:`SetCoverEnv`: the world of ``configs/default.yaml``, i.e. the
    paper's 20-feature synthetic world (section 4.1: 100 actions each providing a capability with
    probability 0.5, integer coordinate costs in [1, 20], the all-ones threshold classifier, no
    groups, no discounts) drawn by ``data_gen.synthetic.make_world`` with seed 0. It is stored as
    JSON beside this module because ``envs`` imports no higher layer; a test regenerates it and
    compares."""
    return CapabilityWorld.from_dict(json.loads(DEFAULT_WORLD_PATH.read_text()))


class SetCoverEnv(gym.Env[np.ndarray, np.int64]):
    """
    ## Description

    Recourse in the capability (set-cover) world of the learning-CFE paper (sections 2 and 4.1)
    as a deterministic MDP over a *family* of agents. Features are binary capabilities; an agent
    ``x`` the threshold classifier rejects picks actions one at a time; action ``i`` adds its
    capabilities (``x' = max(x, a_i)``) and costs ``c_i(x) = b_i * g_i(x)``, priced at the state
    where it is taken (with consequential discounts the order matters). The episode ends when the
    classifier accepts. The cheapest episode is the agent's optimal (ordered) counterfactual.

    Agents may belong to a hidden group (``world.n_groups > 1``) that selects their thresholds
    and the actions they may use; the group is not observed, but it shapes the action mask.

    ## Action Space

    ``Discrete(A)`` with ``A = world.n_actions``: action ``i`` applies ``world.actions[i]``.
    An action is *valid* (``action_masks()[i]`` is True) when it is allowed for the agent's
    group (``world.allowed(group)``), has not been used in this episode, and adds at least one
    capability the agent does not hold yet (``a_i & ~x`` non-empty). Taking an invalid action
    (only algorithms that ignore masks, e.g. DQN, do) leaves the state unchanged, counts as a
    step and is rewarded ``-invalid_action_penalty``.

    ## Observation Space

    ``Box(0, 1, shape=(n + A,), float32)``: the current capability vector ``x`` (``n`` features)
    followed by the used-action indicator (``A`` entries, 1 where the action has been taken).
    With ``include_used_in_obs=False`` the shape is ``(n,)``. The hidden group is never observed.

    ## Rewards

    Minus the cost of the step, ``-world.step_costs(x)[i] / reward_scale``, priced at the state
    before the action. With ``reward_scale=1`` the undiscounted return of an episode that ends
    in acceptance is minus the cost ``world.rollout`` gives the same sequence. An invalid action
    is rewarded ``-invalid_action_penalty`` instead.

    ## Starting State

    ``reset()`` draws an agent uniformly from ``agents`` (with its group from ``groups``) using
    the environment's ``np_random``. Without ``agents`` the family is a distribution: each feature
    is active with probability 0.68, and the draw is repeated until the agent is rejected by the
    classifier and its deficit can be covered by its allowed actions (its group, when the world
    has several, is drawn uniformly). ``options={"agent": x, "group": g}`` or ``{"index": i}``
    sets the agent explicitly. Every episode starts negative: an accepted agent is an error.

    ## Episode End

    - Termination: the classifier accepts the current state (``world.accepts(x, group)``).
    - Truncation: the step budget ``max_steps`` is reached, or no valid action remains while the
      agent is still rejected (then ``info["no_recourse"]`` is True).

    ## Info

    ``reset`` and ``step`` return the same keys: ``"action_mask"`` (bool ``(A,)``, as
    ``action_masks()``), ``"cost"`` (cumulative raw cost of the actions taken, unscaled and
    without penalties), ``"sequence"`` (list of the action ids taken, in order, invalid ones
    excluded), ``"group"`` (the hidden group id, ``None`` in a world with one group),
    ``"no_recourse"`` (bool), ``"invalid_action"`` (bool: the last action was masked) and
    ``"is_success"`` (bool: accepted; read by stable-baselines3's Monitor and EvalCallback).

    ## Default world and agents

    ``gym.make("recourse/SetCover-v0")`` with no arguments, as every registered Gymnasium env,
    gives a working environment: the world is :func:`default_world` (the 20-feature, 100-action
    synthetic world of ``configs/default.yaml``: all-ones thresholds, costs ``b_i`` = sum of
    integer coordinate costs, no groups, no discounts; seed 0) and the agents are the random
    family above (each capability held with probability 0.68, the paper's ``pf``). Everything is
    seeded: the same ``reset(seed=...)`` gives the same agent in every such environment.

    ## Arguments

    ```python
    import gymnasium as gym
    import envs  # registers recourse/SetCover-v0
    env = gym.make("recourse/SetCover-v0")  # the default world and random agents
    env = gym.make("recourse/SetCover-v0", world=world, agents=X)
    ```

    - ``world``: the capability world (actions, efforts, thresholds, access, discounts); None
      (default): :func:`default_world`.
    - ``agents``: (B, n) 0/1 family of agents to draw from; None draws random agents (above).
    - ``groups``: (B,) hidden group id per agent; required with ``agents`` when the world has
      several groups, not allowed without ``agents``.
    - ``max_steps``: step budget per episode; None = ``A`` (every action at most once).
    - ``reward_scale``: rewards are costs divided by it; 1.0 (default) keeps raw costs, None
      uses the mean action effort ``mean(world.costs)`` so a typical step is rewarded about -1.
    - ``invalid_action_penalty``: the (non-negative) penalty of a masked action; None = the
      largest action effort divided by ``reward_scale`` (no valid step is penalised more).
    - ``include_used_in_obs``: whether the observation carries the used-action indicator.
    - ``render_mode``: None, ``"ansi"`` (``render()`` returns a text line) or ``"human"``
      (prints it).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"], "render_fps": 4}

    #: Probability that a feature of a randomly drawn agent is active (the default family).
    ACTIVE_PROBABILITY: ClassVar[float] = 0.68
    #: Candidates drawn per vectorized batch, and batches tried, when sampling the default family.
    _SAMPLE_BATCH: ClassVar[int] = 256
    _SAMPLE_TRIES: ClassVar[int] = 64

    def __init__(
        self,
        world: CapabilityWorld | None = None,
        agents: np.ndarray | None = None,
        groups: np.ndarray | None = None,
        max_steps: int | None = None,
        reward_scale: float | None = 1.0,
        invalid_action_penalty: float | None = None,
        include_used_in_obs: bool = True,
        render_mode: str | None = None,
    ):
        if world is None:
            world = default_world()
        if not isinstance(world, CapabilityWorld):
            raise ValueError(f"world: expected a CapabilityWorld, got {type(world).__name__}")
        self.world = world
        n, A = world.n_features, world.n_actions

        # ---- the family of agents
        self.agents: np.ndarray | None = None
        self.groups: np.ndarray | None = None
        if agents is None:
            if groups is not None:
                raise ValueError("groups: only meaningful with agents (random agents draw their own group)")
        else:
            X, g = world.validate_agents(agents, groups, name="agents")
            if len(X) == 0:
                raise ValueError("agents: the family is empty")
            accepted = world.accepts(X, g)
            if accepted.any():
                r = int(np.flatnonzero(accepted)[0])
                raise ValueError(f"agents: row {r} is already accepted by the classifier "
                                 f"({int(accepted.sum())} such rows); episodes must start negative")
            self.agents, self.groups = X, g

        # ---- parameters
        if max_steps is None:
            max_steps = A
        if isinstance(max_steps, bool) or not isinstance(max_steps, int | np.integer) or max_steps < 1:
            raise ValueError(f"max_steps: expected a positive integer, got {max_steps!r}")
        self.max_steps = int(max_steps)
        if reward_scale is None:
            reward_scale = float(np.mean(world.costs))
        if not isinstance(reward_scale, int | float | np.number) or not np.isfinite(reward_scale) or reward_scale <= 0:
            raise ValueError(f"reward_scale: expected a finite value > 0, got {reward_scale!r}")
        self.reward_scale = float(reward_scale)
        if invalid_action_penalty is None:
            invalid_action_penalty = float(world.costs.max()) / self.reward_scale
        if (not isinstance(invalid_action_penalty, int | float | np.number)
                or not np.isfinite(invalid_action_penalty) or invalid_action_penalty < 0):
            raise ValueError(f"invalid_action_penalty: expected a finite value >= 0, got {invalid_action_penalty!r}")
        self.invalid_action_penalty = float(invalid_action_penalty)
        self.include_used_in_obs = bool(include_used_in_obs)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode: expected one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.render_mode = render_mode

        # ---- spaces
        self.action_space = spaces.Discrete(A)
        obs_dim = n + A if self.include_used_in_obs else n
        self.observation_space = spaces.Box(0.0, 1.0, shape=(obs_dim,), dtype=np.float32)

        # ---- episode state (set by reset)
        self._x: np.ndarray | None = None  # (n,) bool current capabilities
        self._group: int | None = None
        self._allowed = np.zeros(A, dtype=bool)
        self._used = np.zeros(A, dtype=bool)
        self._mask = np.zeros(A, dtype=bool)
        self._sequence: list[int] = []
        self._cost = 0.0
        self._steps = 0

    # ------------------------------------------------------------------ agents
    def _sample_agent(self) -> tuple[np.ndarray, int | None]:
        """Draw from the family (fixed rows, or random negative agents that have a cover)."""
        if self.agents is not None:
            i = int(self.np_random.integers(len(self.agents)))
            return self.agents[i], None if self.groups is None else int(self.groups[i])
        w = self.world
        allowed = np.broadcast_to(w.allowed(np.arange(w.n_groups)), (w.n_groups, w.n_actions))
        reach = allowed[:, :, None] & w.actions[None]  # (G, A, n)
        coverable = reach.any(axis=1)  # (G, n) capabilities each group can obtain
        for _ in range(self._SAMPLE_TRIES):
            X = self.np_random.random((self._SAMPLE_BATCH, w.n_features)) < self.ACTIVE_PROBABILITY
            g = self.np_random.integers(w.n_groups, size=self._SAMPLE_BATCH)
            deficit = w.deficits(X, g if w.n_groups > 1 else None)
            ok = deficit.any(axis=1) & ~(deficit & ~coverable[g]).any(axis=1)
            if ok.any():
                i = int(np.argmax(ok))
                return X[i].astype(np.uint8), int(g[i]) if w.n_groups > 1 else None
        raise ValueError("agents: no random agent is both rejected by the classifier and coverable by its "
                         f"allowed actions after {self._SAMPLE_TRIES * self._SAMPLE_BATCH} draws; pass agents")

    def _agent_from_options(self, options: dict[str, Any]) -> tuple[np.ndarray, int | None]:
        unknown = set(options) - {"agent", "group", "index"}
        if unknown:
            raise ValueError(f"options: unknown keys {sorted(unknown)}; use 'agent' (+ 'group') or 'index'")
        if "index" in options:
            if "agent" in options or "group" in options:
                raise ValueError("options: give either 'index' or 'agent' (+ 'group'), not both")
            if self.agents is None:
                raise ValueError("options: 'index' needs a fixed family of agents (pass agents=...)")
            i = options["index"]
            if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= i < len(self.agents):
                raise ValueError(f"options: 'index' must be an integer in [0, {len(self.agents)}), got {i!r}")
            return self.agents[i], None if self.groups is None else int(self.groups[i])
        if "agent" not in options:
            raise ValueError("options: 'group' needs 'agent'")
        g = options.get("group")
        X, G = self.world.validate_agents(options["agent"], None if g is None else np.atleast_1d(g), name="agent")
        if len(X) != 1:
            raise ValueError(f"agent: expected one agent, got {len(X)}")
        return X[0], None if G is None else int(G[0])

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        x, group = self._agent_from_options(options) if options else self._sample_agent()
        if self.world.accepts(x, None if group is None else np.array([group]))[0]:
            raise ValueError("agent: already accepted by the classifier; episodes must start negative")
        self._x = np.asarray(x, dtype=bool).copy()
        self._group = group
        self._allowed = np.array(self.world.allowed(group), dtype=bool)
        self._used = np.zeros(self.world.n_actions, dtype=bool)
        self._sequence = []
        self._cost = 0.0
        self._steps = 0
        self._update_mask()
        if self.render_mode == "human":
            self.render()
        return self._obs(), self._info(no_recourse=not self._mask.any(), invalid=False, accepted=False)

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._x is None:
            raise RuntimeError("step: call reset() before step()")
        arr = np.asarray(action)
        if arr.size != 1 or not np.issubdtype(arr.dtype, np.integer) or not 0 <= arr.item() < self.world.n_actions:
            raise ValueError(f"action: expected an integer in [0, {self.world.n_actions}), got {action!r}")
        a = int(arr.item())

        self._steps += 1
        invalid = not self._mask[a]
        if invalid:
            reward = -self.invalid_action_penalty
        else:
            cost = float(self.world.step_costs(self._x[None])[0, a])
            self._cost += cost
            self._x |= self.world.actions[a]
            self._used[a] = True
            self._sequence.append(a)
            self._update_mask()
            reward = -cost / self.reward_scale

        terminated = self._accepted()
        no_recourse = not terminated and not self._mask.any()
        truncated = not terminated and (no_recourse or self._steps >= self.max_steps)
        if self.render_mode == "human":
            self.render()
        return self._obs(), float(reward), terminated, truncated, self._info(no_recourse, invalid, terminated)

    def action_masks(self) -> np.ndarray:
        """The valid actions at the current state, bool ``(A,)`` (for sb3-contrib's MaskablePPO)."""
        return self._mask.copy()

    def render(self) -> str | None:
        if self.render_mode is None or self._x is None:
            return None
        x = "".join("1" if v else "0" for v in self._x)
        names = [self.world.action_names[i] for i in self._sequence]
        text = (f"step {self._steps}/{self.max_steps} x={x} group={self._group} "
                f"actions={names} cost={self._cost:.4g} valid_next={int(self._mask.sum())}")
        if self.render_mode == "human":
            print(text)
            return None
        return text

    # ------------------------------------------------------------------ helpers
    def _update_mask(self) -> None:
        assert self._x is not None
        adds = (self.world.actions & ~self._x).any(axis=1)
        self._mask = self._allowed & ~self._used & adds

    def _obs(self) -> np.ndarray:
        assert self._x is not None
        parts = (self._x, self._used) if self.include_used_in_obs else (self._x,)
        return np.concatenate(parts).astype(np.float32)

    def _accepted(self) -> bool:
        return bool(self.world.accepts(self._x, None if self._group is None else np.array([self._group]))[0])

    def _info(self, no_recourse: bool, invalid: bool, accepted: bool) -> dict[str, Any]:
        return {
            "action_mask": self._mask.copy(),
            "cost": self._cost,
            "sequence": list(self._sequence),
            "group": self._group,
            "no_recourse": bool(no_recourse),
            "invalid_action": bool(invalid),
            "is_success": bool(accepted),
        }
