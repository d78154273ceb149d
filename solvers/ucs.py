"""Exact uniform-cost search over the capability world's deterministic MDP.

With consequential discounts the cost of an action depends on the capabilities already held,
so the order of a recourse matters and the set-cover ILP is no longer exact. The MDP's state is
the capability vector (reusing an action changes nothing, so "which actions were used" adds no
information); a transition takes one allowed action that adds at least one capability and costs
b_i * g_i(x). The search is A* with the consistent heuristic h(x) = the largest, over missing
capabilities, of the cheapest fully discounted action providing it (discount factors only shrink
as capabilities are added, so b_i * g_i(all capabilities) is a floor). Without discounts it
returns the set-cover optimum.
"""

from __future__ import annotations

import heapq
import time
from typing import Any

import numpy as np

from envs.capability import CapabilityWorld
from envs.recourse import Recourse
from solvers.base import Solver


class UniformCostSearch(Solver):
    """Exact optimal ordered recourse (A* with an admissible, consistent heuristic)."""

    name = "ucs"
    exact = True

    def __init__(self, max_expansions: int = 1_000_000, max_len: int | None = None):
        self.max_expansions = max_expansions  # give up (status "unknown") after this many expanded states
        self.max_len = max_len  # longest sequence considered (None: no limit)

    def solve(self, world: CapabilityWorld, x: np.ndarray, group: int | None = None, **options: Any) -> list[Recourse]:
        t0 = time.perf_counter()
        X, groups = world.validate_agents(x, None if group is None else [group])
        x0 = X[0].astype(bool)
        need = world.thresholds_of(groups)[0] if groups is not None else world.thresholds_of(None)
        need = np.atleast_2d(need)[0]
        allowed = np.atleast_2d(world.allowed(groups))[0] if groups is not None else world.allowed(None)
        acts = world.actions
        pow2 = 1 << np.arange(world.n_features, dtype=object)
        to_int = lambda v: int(np.dot(v.astype(object), pow2))  # noqa: E731
        need_i = to_int(need)
        act_i = [to_int(a) for a in acts]
        floor = world.costs * (world.step_costs(np.ones((1, world.n_features)))[0] / world.costs)

        def heuristic(state: int) -> float:
            missing = need_i & ~state
            h = 0.0
            for j in range(world.n_features):
                if missing >> j & 1:
                    c = [floor[a] for a in range(world.n_actions) if allowed[a] and act_i[a] >> j & 1]
                    if not c:
                        return np.inf
                    h = max(h, min(c))
            return h

        start = to_int(x0)
        h0 = heuristic(start)
        if not np.isfinite(h0):
            return [Recourse.none(self.name, runtime=time.perf_counter() - t0,
                                  reason="no allowed action provides a needed capability")]
        best = {start: 0.0}
        parent: dict[int, tuple[int, int]] = {}
        depth = {start: 0}
        frontier = [(h0, 0.0, start)]
        expanded = 0
        while frontier:
            f, g, s = heapq.heappop(frontier)
            if g > best.get(s, np.inf) + 1e-12:
                continue
            if need_i & ~s == 0:
                seq = []
                while s != start:
                    s, a = parent[s]
                    seq.append(a)
                seq.reverse()
                return [world.evaluate(x0.astype(np.uint8), seq, group, method=self.name,
                                       runtime=time.perf_counter() - t0, optimal=True)]
            expanded += 1
            if expanded > self.max_expansions:
                return [Recourse.none(self.name, status="unknown", runtime=time.perf_counter() - t0,
                                      reason=f"expansion budget {self.max_expansions} exhausted")]
            if self.max_len is not None and depth[s] >= self.max_len:
                continue
            state = np.array([s >> j & 1 for j in range(world.n_features)], dtype=float)
            step = world.step_costs(state[None])[0]
            for a in np.flatnonzero(allowed):
                nxt = s | act_i[a]
                if nxt == s:
                    continue
                g2 = g + float(step[a])
                if g2 < best.get(nxt, np.inf) - 1e-12:
                    best[nxt] = g2
                    parent[nxt] = (s, int(a))
                    depth[nxt] = depth[s] + 1
                    heapq.heappush(frontier, (g2 + heuristic(nxt), g2, nxt))
        return [Recourse.none(self.name, runtime=time.perf_counter() - t0,
                              reason="no sequence of allowed actions reaches acceptance")]
