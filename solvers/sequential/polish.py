"""Batched local search on decoded sequences: the last-mile refinement of the sequencer.

The BRKGA finds good action sets and orders quickly but tunes values on a fine grid slowly: a
child changes a value key only by inheriting a random non-elite's key, and CSCF has no mutation
operator. Costs such as German's ((new - old) / old)^2 also reward splitting one change over two
actions with balanced values, which no single-value move reaches. This steepest descent takes the
cheapest sequences of the final front and repeatedly moves each to its cheapest feasible
neighbour, where a neighbour

- sets one step's value to any point of its grid (a full line search per step), alone or while
  another step's value moves by +-1 or 2 grid positions (a trade-off between two steps);
- drops a step, or swaps two adjacent steps, alone or with a line search on another step;
- inserts an unused action at any position, with a value near the value its column has there
  (+-0, 1, 2, 4, 8 grid positions; added amounts: the smallest ones) or at 0, 1/4, ..., 1 of
  its grid, alone or together with a +-1 or 2 move of another step's value.

All neighbours of all incumbents are evaluated in one batch per round (one rollout, one
classifier call); it stops when no incumbent improves.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from envs.sequential import SequentialWorld

NEAR = (-8, -4, -2, -1, 0, 1, 2, 4, 8)
QUANTILES = (0.0, 0.25, 0.5, 0.75, 1.0)
NUDGE = (-2, -1, 1, 2)


class _Batch:
    """Collects neighbours as (incumbent row, actions, grid positions)."""

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, rows: np.ndarray, acts: np.ndarray, idx: np.ndarray) -> None:
        if len(rows):
            self.parts.append((rows, acts, idx))

    def arrays(self, A: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not self.parts:
            return np.zeros(0, np.int64), np.zeros((0, A), np.int64), np.zeros((0, A), np.int64)
        rows, acts, idx = (np.concatenate(z) for z in zip(*self.parts, strict=True))
        return rows, acts, np.where(acts >= 0, idx, -1)


def _line_searches(out: _Batch, world: SequentialWorld, rows: np.ndarray, acts: np.ndarray, idx: np.ndarray,
                   skip: int = -1) -> None:
    """Neighbours of (acts, idx) that set one valued step (other than position ``skip``) to any
    point of its grid."""
    valued = np.array([a.valued for a in world.actions])
    for q in range(acts.shape[1]):
        if q == skip:
            continue
        for a in np.unique(acts[:, q]):
            if a < 0 or not valued[a]:
                continue
            r = np.flatnonzero(acts[:, q] == a)
            n = int(world.grid_sizes[a])
            i2 = np.repeat(idx[r], n, axis=0)
            i2[:, q] = np.tile(np.arange(n), len(r))
            out.add(np.repeat(rows[r], n), np.repeat(acts[r], n, axis=0), i2)


def _nudges(out: _Batch, world: SequentialWorld, rows: np.ndarray, acts: np.ndarray, idx: np.ndarray,
            skip: int) -> None:
    """Neighbours of (acts, idx) that move one valued step other than position ``skip`` by NUDGE."""
    sizes = world.grid_sizes
    valued = np.array([a.valued for a in world.actions])
    safe = np.maximum(acts, 0)
    for q in range(acts.shape[1]):
        if q == skip:
            continue
        ok_q = (acts[:, q] >= 0) & valued[safe[:, q]]
        for d in NUDGE:
            new = idx[:, q] + d
            r = np.flatnonzero(ok_q & (new >= 0) & (new < sizes[safe[:, q]]))
            i2 = idx[r].copy()
            i2[:, q] = new[r]
            out.add(rows[r], acts[r], i2)


def neighbours(world: SequentialWorld, actions: np.ndarray, index: np.ndarray, states: np.ndarray,
               max_length: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All neighbours of padded sequences (actions (K, A), -1 after the last step; grid positions
    alike; ``states`` (K, A + 1, D) the states along each): (incumbent of each neighbour, their
    actions, their grid positions)."""
    K, A = actions.shape
    max_length = A if max_length is None else min(max_length, A)
    sizes = world.grid_sizes
    valued = np.array([a.valued for a in world.actions])
    length = (actions >= 0).sum(axis=1)
    safe = np.maximum(actions, 0)
    movable = (actions >= 0) & valued[safe]
    out = _Batch()
    _line_searches(out, world, np.arange(K), actions, index)
    for p in range(A):
        for d in NUDGE:  # trade-offs: step p by +-1 or 2 while another step moves anywhere on its grid
            new = index[:, p] + d
            r = np.flatnonzero(movable[:, p] & (new >= 0) & (new < sizes[safe[:, p]]))
            if len(r):
                idx = index[r].copy()
                idx[:, p] = new[r]
                _line_searches(out, world, r, actions[r], idx, skip=p)
        r = np.flatnonzero(actions[:, p] >= 0)  # drop step p (and retune another)
        keep, pad = [c for c in range(A) if c != p], np.full((len(r), 1), -1)
        acts, idx = np.hstack([actions[r][:, keep], pad]), np.hstack([index[r][:, keep], pad])
        out.add(r, acts, idx)
        _line_searches(out, world, r, acts, idx)
        if p + 1 < A:  # swap steps p and p + 1 (and retune one)
            r = np.flatnonzero(actions[:, p + 1] >= 0)
            perm = list(range(A))
            perm[p], perm[p + 1] = p + 1, p
            acts, idx = actions[r][:, perm], index[r][:, perm]
            out.add(r, acts, idx)
            _line_searches(out, world, r, acts, idx)
    for u in range(A):  # insert an unused action u at position p
        act, n = world.actions[u], int(sizes[u])
        free = ~(actions == u).any(axis=1) & (length < max_length)
        j = world.schema.index[act.column]
        for p in range(A):
            r = np.flatnonzero(free & (length >= p))
            if not len(r):
                continue
            if not act.valued:
                choices = [np.zeros(len(r), np.int64)]
            else:
                fixed = [np.full(len(r), int(round(f * (n - 1)))) for f in QUANTILES]
                if act.mode == "set":  # near the column's value at position p
                    base = np.clip(np.searchsorted(act.grid, states[r, p, j]), 0, n - 1)
                    near = [np.clip(base + d, 0, n - 1) for d in NEAR]
                else:
                    near = [np.full(len(r), min(k, n - 1)) for k in (0, 1, 2, 4, 8)]
                choices = near + fixed
            rr = np.tile(r, len(choices))
            acts = np.hstack([actions[rr, :p], np.full((len(rr), 1), u), actions[rr, p: A - 1]])
            idx = np.hstack([index[rr, :p], np.concatenate(choices)[:, None], index[rr, p: A - 1]])
            out.add(rr, acts, idx)
            _nudges(out, world, rr, acts, idx, skip=p)
    return out.arrays(A)


def descend(world: SequentialWorld, x0: np.ndarray, actions: np.ndarray, index: np.ndarray, cost: np.ndarray,
            evaluate: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
            max_length: int | None = None, max_rounds: int = 50) -> tuple[np.ndarray, np.ndarray, int]:
    """Steepest descent of feasible sequences on their cost; ``evaluate(actions, index)`` returns
    (cost, feasible) of a batch. Returns the improved actions, grid positions and the rounds run."""
    actions, index, cost = actions.copy(), index.copy(), np.asarray(cost, dtype=float).copy()
    active = np.ones(len(actions), dtype=bool)  # incumbents that improved last round
    rounds = 0
    while rounds < max_rounds and active.any():
        k = np.flatnonzero(active)
        values = np.where(actions[k] >= 0, world.grid_values[np.maximum(actions[k], 0), np.maximum(index[k], 0)],
                          np.nan)
        states = world.rollout(np.broadcast_to(x0, (len(k), len(x0))), actions[k], values, keep_states=True).states
        rows, acts, idx = neighbours(world, actions[k], index[k], states, max_length)
        if not len(rows):
            break
        rounds += 1
        rows = k[rows]
        c, feasible = evaluate(acts, idx)
        c = np.where(feasible, c, np.inf)
        order = np.lexsort((c, rows))  # by incumbent, cheapest first
        first = order[np.unique(rows[order], return_index=True)[1]]
        better = first[c[first] < cost[rows[first]] - 1e-12]
        active[:] = False
        if len(better):
            b = rows[better]
            actions[b], index[b], cost[b] = acts[better], idx[better], c[better]
            active[b] = True
    return actions, index, rounds
