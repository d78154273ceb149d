"""Gymnasium environment: sequential, consequence-aware recourse in the CSCF worlds as a deterministic MDP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.sequential import SequentialWorld
from envs.sequential_candidates import (
    CANDIDATE_CHANNELS,
    OBS_CLIP,
    Candidates,
    FlatGrid,
    candidates,
    observations,
)

#: Stored default worlds and agents of ``gym.make("recourse/Sequential-v0", world=NAME)`` (see
#: :func:`default_world`): ``envs`` imports no higher layer, so they live beside this module.
DEFAULT_WORLDS_DIR = Path(__file__).with_name("sequential_default_worlds")
DEFAULT_WORLD_NAMES = ("adult", "german")


def default_world(name: str = "adult") -> tuple[SequentialWorld, np.ndarray]:
    """The stored default world ``adult`` (CSCF's Adult actions with the discount graph, the spec's
    MLP 2x50 black box) or ``german`` (German Credit actions, c = b, MLP 2x40), as
    ``data_gen.sequential_worlds.build_sequential(name)`` builds them with seed 0, and their
    default agents: rejected agents drawn by ``rejected_agents(built, n, split="all", seed=0)``
    (Adult 200, German all 197). ``tests/test_sequential_env.py`` regenerates both with
    :func:`save_default_world` and compares (``RECOURSE_WRITE_ENV_DEFAULTS=1`` rewrites them)."""
    if name not in DEFAULT_WORLD_NAMES:
        raise ValueError(f"world: unknown default sequential world {name!r} (known: {list(DEFAULT_WORLD_NAMES)})")
    d = json.loads((DEFAULT_WORLDS_DIR / f"{name}.json").read_text())
    world = SequentialWorld.from_dict(d["world"])
    return world, np.asarray(d["agents"], dtype=float)


def save_default_world(path: str | Path, world: SequentialWorld, agents: np.ndarray) -> None:
    """Write a default world file (the world's JSON and its agents)."""
    Path(path).write_text(json.dumps({"world": world.to_dict(), "agents": np.asarray(agents).tolist()},
                                     default=float))


class SequentialEnv(gym.Env[np.ndarray, np.int64]):
    """
    ## Description

    Recourse in a sequential CSCF world (:class:`envs.sequential.SequentialWorld`: Adult or
    German Credit, a black-box classifier, actions with values, consequences, pre/post
    conditions and, for Adult, consequential discounts) as a deterministic MDP over a family of
    rejected agents. An agent takes one (action, value) step at a time; the step changes the
    state by the world's transition (its direct feature and its consequences, e.g. AddEducation
    +2 also adds 4 years of age) and costs ``c = b * g``, priced by the world at the state where
    it is taken (with discounts the order matters). Each action is used at most once (as in CSCF
    and the sequencer). The episode ends when the classifier accepts. The cheapest episode is the
    agent's cheapest sequence on the value grid, the one the exact reference
    (``solvers.sequential.ExactSequenceSearch``) finds.

    ## Action Space

    ``Discrete(K)`` over the flattened (action, value) grid, ``K = sum(world.grid_sizes)``
    (Adult 304, German 265): index ``k = offsets[a] + j`` is action ``a`` with the ``j``-th value
    of its documented grid (``world.actions[a].grid``, raw units; an assign action has one
    index). ``env.grid`` (:class:`FlatGrid`) maps indices to (action, grid position, value) and
    back. A step is *valid* (``action_masks()[k]`` True) when its action is unused, its pre and
    post conditions hold, its value is inside the action's domain (every grid point is; grid
    points beyond a bound, e.g. an age past 120, fail a post condition) and it changes the state.
    An invalid step (only algorithms that ignore masks take one) leaves the state unchanged,
    counts as a step and is rewarded ``-invalid_action_penalty``.

    ## Observation Space

    ``Box(-5, 5, (D + A + 1,), float32)``: the encoded state scaled by the schema's bounds,
    ``(x - lo) / (hi - lo)`` (clipped to +-5: states may leave the data's range), the used-action
    indicator (A entries) and the share of the step budget spent. With
    ``candidate_features=True`` (the learned policies' input) ``7 K`` entries follow: for each
    (action, value) step from the current state, whether it is allowed, ``log(1 + cost)`` (clipped to 5), the
    classifier's decision score of the child (clipped to +-5; > 0 accepts), whether the child
    is accepted, whether a completion of at most two steps is estimated, ``log(1 + its
    estimated cost)`` (:func:`two_step_estimate`: from this state's candidates alone, gains
    assumed additive) and whether that estimated pair's end state is accepted when scored as a
    pair (first layer additive; zeros where not allowed).

    ## Rewards

    Minus the step cost ``-c / reward_scale``; with ``reward_scale=1`` (default) the return of an
    episode is minus the world's price of its sequence, ``world.evaluate(x, steps).cost``, which
    is how the sequencer prices it too (a test checks both).

    ## Starting State

    ``reset()`` draws an agent uniformly from ``agents`` with the environment's ``np_random``;
    ``options={"agent": x}`` or ``{"index": i}`` sets it. Every episode starts rejected.

    ## Episode End

    - Termination: the classifier accepts the current state.
    - Truncation: ``max_steps`` steps were taken (default: the number of actions), or no valid
      step remains while the agent is still rejected (``info["no_recourse"]`` True).

    ## Info

    ``"action_mask"`` (bool ``(K,)``), ``"cost"`` (cumulative raw cost), ``"steps"`` (the
    ``(action name, value)`` steps taken), ``"sequence"`` (their flat indices),
    ``"no_recourse"``, ``"invalid_action"`` and ``"is_success"`` (accepted).

    ## Default worlds and agents

    ``gym.make("recourse/Sequential-v0")`` (or ``world="adult"``) uses the stored Adult world of
    :func:`default_world` (discount graph, MLP 2x50) and its 200 default rejected agents;
    ``world="german"`` the German Credit world (c = b, MLP 2x40) and its 197 rejected agents.

    ## Arguments

    ```python
    import gymnasium as gym
    import envs  # registers recourse/Sequential-v0
    env = gym.make("recourse/Sequential-v0", world="adult")
    env = gym.make("recourse/Sequential-v0", world=world, agents=X)
    ```

    - ``world``: ``"adult"`` (default), ``"german"`` or a :class:`SequentialWorld`.
    - ``agents``: (B, D) encoded rejected agents; None: the default agents of a named world
      (required with a world object).
    - ``max_steps``: step budget; None = the number of actions.
    - ``reward_scale``: rewards are costs divided by it (> 0; default 1).
    - ``invalid_action_penalty``: reward ``-penalty`` of a masked step (>= 0; default 10).
    - ``candidate_features``: append the per-step candidate features (above).
    - ``render_mode``: None, ``"ansi"`` or ``"human"``.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(self, world: str | SequentialWorld = "adult", agents: np.ndarray | None = None,
                 max_steps: int | None = None, reward_scale: float = 1.0, invalid_action_penalty: float = 10.0,
                 candidate_features: bool = False, render_mode: str | None = None):
        if isinstance(world, str):
            world, default_agents = default_world(world)
            agents = default_agents if agents is None else agents
        elif not isinstance(world, SequentialWorld):
            raise ValueError(f"world: expected 'adult', 'german' or a SequentialWorld, got {type(world).__name__}")
        elif agents is None:
            raise ValueError("agents: required with a world object (a named world has default agents)")
        self.world = world
        X = world.validate(agents, name="agents")
        if len(X) == 0:
            raise ValueError("agents: the family is empty")
        accepted = world.accepts(X)
        if accepted.any():
            raise ValueError(f"agents: row {int(np.argmax(accepted))} is already accepted by the classifier "
                             f"({int(accepted.sum())} such rows); episodes must start rejected")
        self.agents = X
        max_steps = world.n_actions if max_steps is None else max_steps
        if isinstance(max_steps, bool) or not isinstance(max_steps, int | np.integer) or max_steps < 1:
            raise ValueError(f"max_steps: expected a positive integer, got {max_steps!r}")
        self.max_steps = int(max_steps)
        if not np.isfinite(reward_scale) or reward_scale <= 0:
            raise ValueError(f"reward_scale: expected a finite value > 0, got {reward_scale!r}")
        if not np.isfinite(invalid_action_penalty) or invalid_action_penalty < 0:
            raise ValueError(f"invalid_action_penalty: expected a finite value >= 0, got {invalid_action_penalty!r}")
        self.reward_scale, self.invalid_action_penalty = float(reward_scale), float(invalid_action_penalty)
        self.candidate_features = bool(candidate_features)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode: expected one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.render_mode = render_mode
        self.grid = FlatGrid.of(world)
        D, A, K = world.n_features, world.n_actions, self.grid.size
        self.action_space = spaces.Discrete(K)
        obs_dim = D + A + 1 + (CANDIDATE_CHANNELS * K if self.candidate_features else 0)
        self.observation_space = spaces.Box(-OBS_CLIP, OBS_CLIP, shape=(obs_dim,), dtype=np.float32)
        self._x: np.ndarray | None = None
        self._used = np.zeros(A, dtype=bool)
        self._cand: Candidates | None = None
        self._sequence: list[int] = []
        self._cost = 0.0
        self._steps = 0

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        x = self._agent(options) if options else self.agents[int(self.np_random.integers(len(self.agents)))]
        if self.world.accepts(x[None])[0]:
            raise ValueError("agent: already accepted by the classifier; episodes must start rejected")
        self._x = np.array(x, dtype=float)
        self._used = np.zeros(self.world.n_actions, dtype=bool)
        self._sequence, self._cost, self._steps = [], 0.0, 0
        self._update()
        if self.render_mode == "human":
            self.render()
        return self._obs(), self._info(not self._cand.mask.any(), False, False)

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._x is None:
            raise RuntimeError("step: call reset() before step()")
        arr = np.asarray(action)
        if arr.size != 1 or not np.issubdtype(arr.dtype, np.integer) or not 0 <= arr.item() < self.grid.size:
            raise ValueError(f"action: expected an integer in [0, {self.grid.size}), got {action!r}")
        k = int(arr.item())
        self._steps += 1
        invalid = not self._cand.mask[0, k]
        if invalid:
            reward = -self.invalid_action_penalty
        else:
            a = int(self.grid.action[k])
            t = self.world.transition(self._x[None], a, np.array([self.grid.value[k]]))
            cost = float(t.cost[0])
            self._x = t.states[0]
            self._used[a] = True
            self._sequence.append(k)
            self._cost += cost
            reward = -cost / self.reward_scale
        terminated = bool(self.world.accepts(self._x[None])[0])
        if not invalid:
            self._update()
        no_recourse = not terminated and not self._cand.mask.any()
        truncated = not terminated and (no_recourse or self._steps >= self.max_steps)
        if self.render_mode == "human":
            self.render()
        return self._obs(), float(reward), terminated, truncated, self._info(no_recourse, invalid, terminated)

    def action_masks(self) -> np.ndarray:
        """The valid (action, value) steps at the current state, bool ``(K,)`` (for MaskablePPO)."""
        return self._cand.mask[0].copy() if self._cand is not None else np.zeros(self.grid.size, dtype=bool)

    def render(self) -> str | None:
        if self.render_mode is None or self._x is None:
            return None
        text = f"step {self._steps}/{self.max_steps} {self.describe()} cost={self._cost:.4g}"
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def describe(self) -> str:
        """The steps taken so far, readably (as ``world.describe``)."""
        if not self._sequence:
            return "(no action)"
        return " / ".join(f"{n} {v}" if v is not None else n for n, v in self._steps_taken())

    # ------------------------------------------------------------------ helpers
    def _agent(self, options: dict[str, Any]) -> np.ndarray:
        unknown = set(options) - {"agent", "index"}
        if unknown or len(options) != 1:
            raise ValueError(f"options: give exactly one of 'agent' or 'index', got {sorted(options)}")
        if "index" in options:
            i = options["index"]
            if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= i < len(self.agents):
                raise ValueError(f"options: 'index' must be an integer in [0, {len(self.agents)}), got {i!r}")
            return self.agents[i]
        X = self.world.validate(options["agent"], name="agent")
        if len(X) != 1:
            raise ValueError(f"agent: expected one agent, got {len(X)}")
        return X[0]

    def _update(self) -> None:
        self._cand = candidates(self.world, self.grid, self._x[None], self._used[None],
                                score=self.candidate_features)

    def _obs(self) -> np.ndarray:
        return observations(self.world, self._x[None], self._used[None], np.array([self._steps]), self.max_steps,
                            self._cand if self.candidate_features else None)[0]

    def _steps_taken(self) -> list[tuple[str, float | None]]:
        out = []
        for k in self._sequence:
            a = int(self.grid.action[k])
            out.append((self.world.actions[a].name, None if not self.world.actions[a].valued
                        else float(self.grid.value[k])))
        return out

    def _info(self, no_recourse: bool, invalid: bool, accepted: bool) -> dict[str, Any]:
        return {"action_mask": self.action_masks(), "cost": self._cost, "steps": self._steps_taken(),
                "sequence": list(self._sequence), "no_recourse": bool(no_recourse),
                "invalid_action": bool(invalid), "is_success": bool(accepted)}
