"""Exact reference: the cheapest valid sequence of at most ``max_length`` distinct actions whose
values lie on the world's value grid (uniform-cost search over (action, value) steps).

The search space is the sequencer's, restricted to short sequences: each action at most once,
each value a grid point, consequences and discounts applied in order by the world itself
(:meth:`SequentialWorld.transition`, so both solvers price a sequence identically). A step must
change the state and keep its pre/post conditions; a sequence is a goal when the classifier
accepts its last state.

Uniform-cost search, layer by layer and batched. Costs are non-negative, so a goal of cost U
makes every node costing >= U useless. Layer t expands every not-accepted node of layer t - 1
that costs < U with all (action, value) steps at once (one vectorized transition per action),
keeps the children costing < U, sorts them by cost and goal-tests them in that order in batches
(one classifier call per batch) until a batch holds an accepted child: that child is the
cheapest goal of the layer, U drops to its cost, and every untested child costs at least as
much. After the last layer U is the optimum: every sequence cheaper than U had all its prefixes
cheaper than U when they were expanded, so it was generated and tested.

Memory stays bounded on the last layer: children are kept as (parent, action, grid position,
cost) and states are rebuilt per test batch; if more than ``max_frontier`` children cost < U the
cheapest ``max_frontier`` (and their ties) are tested first and the rest, in cost bands, only if
needed.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from envs.recourse import Recourse
from envs.sequential import SequentialWorld
from solvers.base import Solver
from solvers.sequential._blas import blas_limit


class ExactSequenceSearch(Solver):
    """Optimal sequence on the value grid (at most ``max_length`` distinct actions)."""

    name = "sequential_exact"
    exact = True

    def __init__(self, max_length: int = 3, batch_size: int = 8192, max_frontier: int = 2_000_000,
                 max_evaluations: int | None = None, chunk_rows: int = 262_144, blas_threads: int | None = 1):
        self.max_length = max_length  # longest sequence searched (the reference uses 3)
        self.batch_size = batch_size  # children goal-tested per classifier call
        self.max_frontier = max_frontier  # last-layer children held at once (memory bound; bands beyond)
        self.max_evaluations = max_evaluations  # give up (status "unknown") after this many goal tests
        self.chunk_rows = chunk_rows  # rows per vectorized transition while expanding
        self.blas_threads = blas_threads  # BLAS threads while solving (1: parallelism comes from agents)

    def _check(self) -> None:
        for k in ("max_length", "batch_size", "max_frontier", "chunk_rows"):
            if getattr(self, k) < 1:
                raise ValueError(f"{k}: must be >= 1, got {getattr(self, k)}")
        if self.max_evaluations is not None and self.max_evaluations < 1:
            raise ValueError(f"max_evaluations: must be >= 1 or None, got {self.max_evaluations}")

    # ------------------------------------------------------------------ expansion
    def _expand(self, world: SequentialWorld, X: np.ndarray, cost: np.ndarray, used: np.ndarray,
                lo: float, hi: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """All allowed children of the nodes (X, cost, used) costing more than ``lo`` and less than
        ``hi``: their parent, action, grid position and cost (states are not kept)."""
        parts: list[tuple[np.ndarray, ...]] = []
        G = world.action_discounts(X)  # g depends on the parent only
        for a in range(world.n_actions):
            n = int(world.grid_sizes[a])
            free = np.flatnonzero(~used[:, a] & (cost < hi))
            step = max(1, self.chunk_rows // n)
            for s in range(0, len(free), step):
                p = free[s: s + step]
                Xp = np.repeat(X[p], n, axis=0)
                t = world.transition(Xp, a, np.tile(world.grid_values[a, :n], len(p)), np.repeat(G[p, a], n))
                c = np.repeat(cost[p], n) + t.cost
                keep = t.ok & (c > lo) & (c < hi) & (t.states != Xp).any(axis=1)
                k = np.flatnonzero(keep)
                parts.append((p[k // n], np.full(len(k), a), k % n, c[k]))
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        return tuple(np.concatenate(z) for z in zip(*parts, strict=True))  # type: ignore[return-value]

    @staticmethod
    def _states(world: SequentialWorld, X: np.ndarray, parent: np.ndarray, action: np.ndarray,
                index: np.ndarray) -> np.ndarray:
        """The children's states, rebuilt from their parents (grouped by action)."""
        out = X[parent].copy()
        for a in np.unique(action):
            rows = action == a
            out[rows] = world.transition(X[parent[rows]], int(a), world.grid_values[a, index[rows]]).states
        return out

    # ------------------------------------------------------------------ search
    def solve(self, world: SequentialWorld, x: np.ndarray, **options: Any) -> list[Recourse]:
        """The optimal sequence (``optimal=True``), or ``Recourse.none`` with status
        ``no_recourse`` (none exists on the grid within ``max_length``) or ``unknown`` (budget)."""
        self._check()
        with blas_limit(self.blas_threads):
            return self._solve(world, x)

    def _solve(self, world: SequentialWorld, x: np.ndarray) -> list[Recourse]:
        t0 = time.perf_counter()
        X0 = world.validate(x)
        if len(X0) != 1:
            raise ValueError(f"x: expected one agent, got {len(X0)} rows")
        x0 = X0[0]
        if world.accepts(x0)[0]:
            return [world.evaluate(x0, [], method=self.name, runtime=time.perf_counter() - t0,
                                   already_accepted=True)]
        # the layer being expanded: states, costs, used actions and the paths (action, grid position)
        X, cost = x0[None].copy(), np.zeros(1)
        used = np.zeros((1, world.n_actions), dtype=bool)
        paths = np.zeros((1, 0, 2), dtype=np.int64)
        best_cost, best_path = np.inf, None
        tested = generated = 0
        for depth in range(1, self.max_length + 1):
            last = depth == self.max_length
            lo, found = -np.inf, False
            survivors: list[tuple[np.ndarray, ...]] = []
            while True:  # cost bands (one band unless the last layer overflows max_frontier)
                parent, action, index, c = self._expand(world, X, cost, used, lo, best_cost)
                generated += len(c)
                hi = best_cost
                if last and len(c) > self.max_frontier:  # this band: (lo, the max_frontier-th cheapest]
                    hi = float(np.partition(c, self.max_frontier - 1)[self.max_frontier - 1])
                    keep = c <= hi
                    parent, action, index, c = parent[keep], action[keep], index[keep], c[keep]
                order = np.argsort(c, kind="stable")
                for s in range(0, len(order), self.batch_size):
                    b = order[s: s + self.batch_size]
                    if c[b[0]] >= best_cost:
                        break
                    states = self._states(world, X, parent[b], action[b], index[b])
                    accepted = world.accepts(states)
                    tested += len(b)
                    if accepted.any():
                        i = b[np.flatnonzero(accepted)[np.argmin(c[b][accepted])]]
                        best_cost, found = float(c[i]), True
                        best_path = np.vstack([paths[parent[i]], [[action[i], index[i]]]])
                    if not last:  # rejected children cheaper than the best goal are expanded next
                        survivors.append((b[~accepted], states[~accepted]))
                    if found:
                        break
                    if self.max_evaluations is not None and tested >= self.max_evaluations:
                        return [Recourse.none(self.name, status="unknown", runtime=time.perf_counter() - t0,
                                              reason=f"evaluation budget {self.max_evaluations} exhausted")]
                if found or not last or hi >= best_cost or not np.isfinite(hi):
                    break
                lo = hi  # nothing accepted up to hi: the next band of the last layer
            if last:
                break
            b = np.concatenate([s[0] for s in survivors]) if survivors else np.zeros(0, np.int64)
            if len(b) == 0:
                break
            states = np.concatenate([s[1] for s in survivors])
            keep = c[b] < best_cost
            b, X = b[keep], states[keep]
            cost = c[b]
            used = used[parent[b]].copy()
            used[np.arange(len(b)), action[b]] = True
            paths = np.concatenate([paths[parent[b]], np.stack([action[b], index[b]], axis=1)[:, None]], axis=1)
            if len(b) == 0:
                break
        runtime = time.perf_counter() - t0
        stats = {"tested": tested, "generated": generated, "max_length": self.max_length}
        if best_path is None:
            return [Recourse.none(self.name, runtime=runtime,
                                  reason=f"no valid sequence of <= {self.max_length} actions on the value grid")]
        steps = [(int(a), None if not world.actions[a].valued else float(world.grid_values[a, k]))
                 for a, k in best_path]
        r = world.evaluate(x0, steps, method=self.name, runtime=runtime, **stats)
        r.optimal = True
        return [r]
