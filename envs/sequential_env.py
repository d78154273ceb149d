"""Gymnasium environment: sequential, consequence-aware recourse in the CSCF worlds as a deterministic MDP."""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.sequential import SequentialWorld

#: Stored default worlds and agents of ``gym.make("recourse/Sequential-v0", world=NAME)`` (see
#: :func:`default_world`): ``envs`` imports no higher layer, so they live beside this module.
DEFAULT_WORLDS_DIR = Path(__file__).with_name("sequential_default_worlds")
DEFAULT_WORLD_NAMES = ("adult", "german")
#: Bounds of the scaled observation (states may leave the data range: age 90 + 30 years).
OBS_CLIP = 5.0
#: Per (action, value) candidate features appended with ``candidate_features=True``.
CANDIDATE_CHANNELS = 7


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


# ---------------------------------------------------------------------------- the flat action grid
@dataclass(frozen=True)
class FlatGrid:
    """The flattened (action, value) grid: flat index k = ``offsets[a] + j`` for grid position j of
    action a (an assign action has the single position 0)."""

    action: np.ndarray  # (K,) action id of each flat index
    position: np.ndarray  # (K,) grid position of each flat index
    value: np.ndarray  # (K,) value in raw units (NaN for an assign action)
    offsets: np.ndarray  # (A + 1,) start of each action's block

    @classmethod
    def of(cls, world: SequentialWorld) -> FlatGrid:
        sizes = world.grid_sizes
        action = np.repeat(np.arange(world.n_actions), sizes)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        position = np.arange(len(action)) - offsets[action]
        return cls(action, position, world.grid_values[action, position], offsets)

    @property
    def size(self) -> int:
        return len(self.action)

    def index(self, world: SequentialWorld, action: int, value: float | None) -> int:
        """The flat index of (action id, value); the value must be a grid point of the action."""
        if not world.actions[action].valued:
            return int(self.offsets[action])
        hit = np.flatnonzero(np.isclose(world.grid_values[action, : world.grid_sizes[action]], float(value),
                                        rtol=1e-9, atol=1e-9))
        if len(hit) == 0:
            raise ValueError(f"value: {value!r} is not on the grid of {world.actions[action].name!r}")
        return int(self.offsets[action] + hit[0])


@dataclass
class Candidates:
    """Every (action, value) step from a batch of states, batched: one transition per action and
    one classifier call for all children."""

    mask: np.ndarray  # (B, K) allowed: conditions hold, state changes, action unused
    cost: np.ndarray  # (B, K) step cost c = b * g (inf where not allowed)
    score: np.ndarray  # (B, K) classifier decision score of the child (> 0: accepted; -inf where not allowed)
    states: np.ndarray | None = None  # (B, K, D) children, when asked for
    two_step: np.ndarray | None = None  # (B, K) estimated cheapest <= 2-step completion (see two_step_estimate)
    two_step_checked: np.ndarray | None = None  # (B, K) the estimated pair's end state scores > 0 (see candidates)

    @property
    def accepted(self) -> np.ndarray:
        return self.mask & (self.score > 0)


def candidates(world: SequentialWorld, grid: FlatGrid, X: np.ndarray, used: np.ndarray, *,
               score: bool = True, keep_states: bool = False) -> Candidates:
    """All one-step children of states ``X`` (B, D) whose used actions are ``used`` (B, A).

    Vectorized over the batch and each action's whole value grid, and sparse: a step changes only
    its own column, its one-hot group and its consequences' columns, so only those (B, n) columns
    are computed (:func:`_grid_step`, the world's own transition rules on the changed columns;
    ``tests/test_sequential_env.py`` checks it equals :func:`candidates_dense`, which applies
    ``world.transition`` to every (state, value) row). With a white-box MLP
    (``envs.models.MLPModel``) the children's decision scores are computed incrementally: the
    first layer of a child is its parent's plus the changed columns, the later layers in float32
    (equal to ``world.score`` up to ~1e-6; these scores are features and look-ahead hints:
    validity is always decided by the world's own ``accepts``).
    """
    X = np.atleast_2d(np.asarray(X, dtype=float))
    used = np.atleast_2d(np.asarray(used, dtype=bool))
    B, K = len(X), grid.size
    mask = np.zeros((B, K), dtype=bool)
    cost = np.full((B, K), np.inf)
    G = world.action_discounts(X)
    children = np.repeat(X[:, None, :], K, axis=1) if keep_states else None
    mlp = score and getattr(world.model, "weights", None) is not None and getattr(world.model, "kind", "") == "mlp"
    if mlp:  # first-layer pre-activations of every child, float32 (the tail is float32 anyway)
        pre = (X @ world.model.weights[0] + world.model.biases[0]).astype(np.float32)
        W0 = world.model.weights[0].astype(np.float32)
        H = np.empty((B, K, pre.shape[1]), dtype=np.float32)
    elif score:
        sc = np.full((B, K), -np.inf)
    for a in range(world.n_actions):
        s, e = int(grid.offsets[a]), int(grid.offsets[a + 1])
        cols, Ycols, ok, c = _grid_step(world, a, X, G[:, a])  # every row: cheaper than selecting the free ones
        ok &= ~used[:, a][:, None]
        mask[:, s:e] = ok
        cost[:, s:e] = np.where(ok, c, np.inf)
        if keep_states:
            children[:, s:e] = _dense(X, cols, Ycols)
        if mlp:
            with np.errstate(invalid="ignore", over="ignore"):
                dY = (Ycols - X[:, cols][:, None, :]).astype(np.float32)
                out = H[:, s:e]
                np.multiply(dY[..., 0, None], W0[cols[0]], out=out)
                for i in range(1, len(cols)):
                    out += dY[..., i, None] * W0[cols[i]]
                out += pre[:, None, :]
        elif score and ok.any():
            fi, vi = np.nonzero(ok)
            block = np.full(ok.shape, -np.inf)
            block[fi, vi] = world.score(_dense(X[fi][:, None, :], cols, Ycols[fi, vi][:, None, :])[:, 0])
            sc[:, s:e] = block
    if mlp:  # one pass of the later layers for all children; rows not allowed are dropped
        with np.errstate(invalid="ignore", over="ignore"):
            sc = np.where(mask, _mlp_tail(world.model, H.reshape(B * K, -1)).reshape(B, K), -np.inf)
        parent = _mlp_tail(world.model, pre)  # the same float32 arithmetic: gains are differences
    out = Candidates(mask, cost, sc if score else np.full((B, K), -np.inf), children)
    if score:
        out.two_step, second = two_step_estimate(world, grid, parent if mlp else world.score(X), out)
        out.two_step_checked = out.accepted.copy()
        bi, ki = np.nonzero(second >= 0)
        if mlp and len(bi):
            # the estimated pair's end state scored with the first layer additive (exact where the
            # two steps change different columns or shift the same ones, as AddEducation and
            # WaitYears both shift age), the later layers as above; conditions/discounts of the
            # second step at the child are not re-checked (a feature, not a price)
            with np.errstate(invalid="ignore", over="ignore"):
                h = H[bi, ki] + H[bi, second[bi, ki]] - pre[bi]
                out.two_step_checked[bi, ki] = _mlp_tail(world.model, h) > 0
        elif len(bi):
            out.two_step_checked[bi, ki] = True
    return out


_PAIRS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def additive_pairs(world: SequentialWorld) -> np.ndarray:
    """(A, A) bool: actions a != b whose changes add up whichever comes first (they change
    different columns, or shift a shared column additively: an ``add`` action's own column or a
    ``shift`` consequence, as AddEducation's and WaitYears' ages); for such a pair the end state
    of both steps is the parent plus both children's changes."""
    if world in _PAIRS:
        return _PAIRS[world]
    A = world.n_actions
    kinds: list[dict[int, bool]] = []
    for act, comp in zip(world.actions, world._compiled, strict=True):
        d = {int(comp["j"]): act.mode == "add"}
        d.update({int(k): False for k in comp["group"]})
        for k, kind, _ in comp["cons"]:
            d[int(k)] = d.get(int(k), True) and kind == "shift"
        kinds.append(d)
    out = np.zeros((A, A), dtype=bool)
    for a in range(A):
        for b in range(A):
            shared = kinds[a].keys() & kinds[b].keys()
            out[a, b] = a != b and all(kinds[a][k] and kinds[b][k] for k in shared)
    _PAIRS[world] = out
    return out


def two_step_estimate(world: SequentialWorld, grid: FlatGrid, parent_score: np.ndarray, c: Candidates,
                      clip: float = 1e3) -> tuple[np.ndarray, np.ndarray]:
    """(B, K) estimated cost of the cheapest completion of at most two steps that starts with each
    candidate, from the parent's candidates alone (no second transition, no classifier call): the
    candidate's cost if its child is accepted, else its cost plus the cheapest allowed step of
    another action additive with it (:func:`additive_pairs`) whose own score gain at the parent, ``score(parent + step) - score(parent)``,
    would lift the child's score above 0 (gains assumed additive, second-step costs as priced at
    the parent); inf where none. Also (B, K) the flat index of that second step (-1: none). A
    cheap stand-in for the two-step lookahead's quantity (features; every choice is priced by the
    world). Batched: one sort and one search for all agents, a suffix minimum per action."""
    B, K = c.mask.shape
    gain = np.where(c.mask, np.clip(c.score - parent_score[:, None], -clip, clip), -2 * clip)
    need = np.clip(-c.score, -clip, clip)  # the second step's gain must exceed this
    # every row's candidates sorted by gain; one search for all queries (rows kept apart by offsets)
    order = np.argsort(gain, axis=1, kind="stable")
    span = int(4 * clip + 2)
    keys = (np.take_along_axis(gain, order, 1) + np.arange(B)[:, None] * span).reshape(-1)
    pos = np.searchsorted(keys, (need + np.arange(B)[:, None] * span).reshape(-1), side="right").reshape(B, K)
    pos -= np.arange(B)[:, None] * K  # first candidate (in gain order) whose gain exceeds the need
    rpos = np.minimum(K - 1 - pos, K - 1)  # the same position in reversed order (pos == K: none)
    cost_sorted = np.take_along_axis(np.where(c.mask, c.cost, np.inf), order, 1)
    act_sorted = grid.action[order]
    best_second = np.full((B, K), np.inf)
    second = np.full((B, K), -1, dtype=np.int64)
    t = np.arange(K)
    pairs = additive_pairs(world)
    for a in range(world.n_actions):
        # suffix minimum (and where it is) over action a's candidates: its cheapest step with a
        # gain >= the position's, as a running minimum in reversed order
        rev = np.where(act_sorted == a, cost_sorted, np.inf)[:, ::-1]
        run = np.minimum.accumulate(rev, axis=1)
        at = np.maximum.accumulate(np.where(rev == run, t, -1), axis=1)
        f = np.where(pos < K, np.take_along_axis(run, rpos, 1), np.inf)
        f[:, ~pairs[grid.action, a]] = np.inf  # the second step is another action, additive with the first
        better = f < best_second
        if better.any():
            k2 = np.take_along_axis(order, K - 1 - np.take_along_axis(at, rpos, 1), 1)
            best_second = np.where(better, f, best_second)
            second = np.where(better, k2, second)
    accepted = c.mask & (c.score > 0)
    two = np.where(accepted, c.cost, np.where(c.mask, c.cost + best_second, np.inf))
    return two, np.where(accepted | ~np.isfinite(two), -1, second)


def _dense(X: np.ndarray, cols: list[int], Ycols: np.ndarray) -> np.ndarray:
    """Full children (F, n, D) from the parents (F, D) and their changed columns (F, n, m)."""
    Y = np.repeat(np.atleast_3d(X[:, None, :] if X.ndim == 2 else X), Ycols.shape[1], axis=1)
    Y[:, :, cols] = Ycols
    return Y


def _grid_step(world: SequentialWorld, action: int, X: np.ndarray, g: np.ndarray
               ) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """Action ``action`` with every value of its grid from every state of ``X`` (F, D), computed on
    the columns it changes only, with the world's transition rules (``SequentialWorld.transition``,
    the same floating-point operations in the same order): ``(cols, Ycols (F, n, m), ok (F, n),
    cost (F, n))``. ``ok``: conditions hold, the state changes, the cost is finite; ``g`` (F,) is
    the rows' discount of this action."""
    act, comp = world.actions[action], world._compiled[action]
    F, n = len(X), int(world.grid_sizes[action])
    j = comp["j"]
    xj = X[:, j][:, None]
    if act.mode == "add":
        yj = xj + world.grid_values[action, :n][None]
    elif act.mode == "set":
        yj = np.broadcast_to(world.grid_values[action, :n][None], (F, n))
    else:
        yj = np.full((F, n), float(act.assign_value))
    new: dict[int, np.ndarray] = {int(k): np.zeros((F, n)) for k in comp["group"]}
    new[j] = yj
    for k, kind, factor in comp["cons"]:
        if kind == "shift":
            new[k] = X[:, k][:, None] + factor * (yj - xj)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                new[k] = X[:, k][:, None] * (yj / xj) ** factor
    failed = np.zeros((F, n), dtype=np.int64)
    for k, fn, v in comp["pre"]:
        failed += ~fn(X[:, k], v)[:, None]
    for k, fn, v in comp["post"]:
        failed += ~fn(new[k] if k in new else np.broadcast_to(X[:, k][:, None], (F, n)), v)
    finite = np.ones((F, n), dtype=bool)
    for k in comp["touched"]:
        finite &= np.isfinite(new[k])
    failed += ~finite
    if act.effort.kind == "const":
        effort = np.full((F, n), act.effort.scale)
    elif act.effort.kind == "abs":
        effort = np.abs(yj - xj) / act.effort.scale
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            effort = np.nan_to_num(((yj - xj) / xj) ** 2, nan=np.inf)
    cost = effort * g[:, None]
    cols = sorted(new)
    Ycols = np.stack([np.broadcast_to(new[k], (F, n)) for k in cols], axis=-1)
    changed = (Ycols != X[:, cols][:, None, :]).any(axis=-1)
    return cols, Ycols, (failed == 0) & changed & np.isfinite(cost), cost


def candidates_dense(world: SequentialWorld, grid: FlatGrid, X: np.ndarray, used: np.ndarray, *,
                     keep_states: bool = False) -> Candidates:
    """The reference of :func:`candidates` (mask, cost, children): ``world.transition`` on every
    (state, value) row, full width (slow; for tests). Scores: ``world.score`` of each child."""
    X = np.atleast_2d(np.asarray(X, dtype=float))
    B, K = len(X), grid.size
    mask = np.zeros((B, K), dtype=bool)
    cost = np.full((B, K), np.inf)
    sc = np.full((B, K), -np.inf)
    G = world.action_discounts(X)
    children = np.repeat(X[:, None, :], K, axis=1) if keep_states else None
    for a in range(world.n_actions):
        s, e = int(grid.offsets[a]), int(grid.offsets[a + 1])
        n = e - s
        free = np.flatnonzero(~used[:, a])
        if len(free) == 0:
            continue
        Xp = np.repeat(X[free], n, axis=0)
        t = world.transition(Xp, a, np.tile(world.grid_values[a, :n], len(free)), np.repeat(G[free, a], n))
        ok = t.ok & (t.states != Xp).any(axis=1) & np.isfinite(t.cost)
        mask[free, s:e] = ok.reshape(len(free), n)
        cost[free, s:e] = np.where(ok, t.cost, np.inf).reshape(len(free), n)
        if keep_states:
            children[free, s:e] = t.states.reshape(len(free), n, -1)
        if ok.any():
            block = np.full(len(free) * n, -np.inf)
            block[ok] = world.score(t.states[ok])
            sc[free, s:e] = block.reshape(len(free), n)
    return Candidates(mask, cost, sc, children)


def _mlp_tail(model: Any, pre: np.ndarray) -> np.ndarray:
    """An MLP's decision score from its first layer's pre-activations (later layers in float32:
    these scores are features and look-ahead hints; acceptance is always decided by the world)."""
    h = np.maximum(pre.astype(np.float32, copy=False), np.float32(0.0))
    for W, b in zip(model.weights[1:-1], model.biases[1:-1], strict=True):
        h = h @ W.astype(np.float32)
        h += b.astype(np.float32)
        np.maximum(h, np.float32(0.0), out=h)
    return (h @ model.weights[-1].astype(np.float32)).reshape(-1).astype(float) + float(model.biases[-1][0])


def candidate_features(c: Candidates) -> np.ndarray:
    """(B, K, 7) features of the candidates: allowed, log(1 + cost) and the child's decision score
    (both clipped to OBS_CLIP), accepted, whether a <= 2-step completion is estimated,
    log(1 + its estimated cost) (:func:`two_step_estimate`) and whether the estimated pair's end
    state is accepted when scored as a pair (see :func:`candidates`; all 0 where not allowed)."""
    m = c.mask
    two = c.two_step if c.two_step is not None else np.full(m.shape, np.inf)
    has2 = m & np.isfinite(two)
    checked = c.two_step_checked if c.two_step_checked is not None else np.zeros(m.shape, bool)
    return np.stack([m.astype(float), np.where(m, np.minimum(np.log1p(np.minimum(c.cost, 1e6)), OBS_CLIP), 0.0),
                     np.where(m, np.clip(c.score, -OBS_CLIP, OBS_CLIP), 0.0), c.accepted.astype(float),
                     has2.astype(float), np.where(has2, np.minimum(np.log1p(np.minimum(two, 1e6)), OBS_CLIP), 0.0),
                     (has2 & checked).astype(float)], axis=-1)


def scale_states(world: SequentialWorld, X: np.ndarray) -> np.ndarray:
    """Encoded states scaled by the schema's bounds, (x - lo) / (hi - lo), clipped to +-OBS_CLIP."""
    lo, hi = world.schema.bounds()
    span = np.where(hi > lo, hi - lo, 1.0)
    return np.clip((np.atleast_2d(X) - lo) / span, -OBS_CLIP, OBS_CLIP)


def observations(world: SequentialWorld, X: np.ndarray, used: np.ndarray, steps: np.ndarray, max_steps: int,
                 cand: Candidates | None = None) -> np.ndarray:
    """Batched observations (see :class:`SequentialEnv`); ``cand`` appends the candidate features."""
    parts = [scale_states(world, X), used.astype(float), (np.asarray(steps, float) / max_steps)[:, None]]
    if cand is not None:
        parts.append(candidate_features(cand).reshape(len(X), -1))
    return np.concatenate(parts, axis=1).astype(np.float32)


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
