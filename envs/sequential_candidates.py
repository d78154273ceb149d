"""Candidates of the sequential worlds: every (action, value) step of a batch of states at once.

The flat action grid (:class:`FlatGrid`), the vectorized children of a batch of states
(:func:`candidates`: one transition per action, one classifier call for every child, only the
changed columns), the two-step estimate, and the features and observations the policies read.
The Gymnasium environment (:mod:`envs.sequential_env`) and every sequential policy and search
build on these.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.sequential import SequentialWorld

#: Bounds of the scaled observation (states may leave the data range: age 90 + 30 years).
OBS_CLIP = 5.0
#: Per (action, value) candidate features appended with ``candidate_features=True``.
CANDIDATE_CHANNELS = 7


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
    are computed (:func:`grid_step`, the world's own transition rules on the changed columns;
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
        cols, Ycols, ok, c = grid_step(world, a, X, G[:, a])  # every row: cheaper than selecting the free ones
        ok &= ~used[:, a][:, None]
        mask[:, s:e] = ok
        cost[:, s:e] = np.where(ok, c, np.inf)
        if keep_states:
            children[:, s:e] = dense_columns(X, cols, Ycols)
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
            block[fi, vi] = world.score(dense_columns(X[fi][:, None, :], cols, Ycols[fi, vi][:, None, :])[:, 0])
            sc[:, s:e] = block
    if mlp:  # one pass of the later layers for all children; rows not allowed are dropped
        with np.errstate(invalid="ignore", over="ignore"):
            sc = np.where(mask, mlp_tail(world.model, H.reshape(B * K, -1)).reshape(B, K), -np.inf)
        parent = mlp_tail(world.model, pre)  # the same float32 arithmetic: gains are differences
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
                out.two_step_checked[bi, ki] = mlp_tail(world.model, h) > 0
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


def dense_columns(X: np.ndarray, cols: list[int], Ycols: np.ndarray) -> np.ndarray:
    """Full children (F, n, D) from the parents (F, D) and their changed columns (F, n, m)."""
    Y = np.repeat(np.atleast_3d(X[:, None, :] if X.ndim == 2 else X), Ycols.shape[1], axis=1)
    Y[:, :, cols] = Ycols
    return Y


def grid_step(world: SequentialWorld, action: int, X: np.ndarray, g: np.ndarray
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


def mlp_tail(model: Any, pre: np.ndarray) -> np.ndarray:
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
