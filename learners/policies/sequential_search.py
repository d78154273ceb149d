"""Verified beam search over the (action, value) grid of a sequential CSCF world, batched.

A sequential policy's greedy rollout follows one path per agent. :func:`beam_search` keeps the
``width`` best partial sequences per agent instead, ranked by a key that a policy supplies (its
summed log-probabilities, or a no-learning heuristic), and returns per agent the **cheapest
sequence that the world accepts** among every completion it met. It is a search guided by the
ranking, not an exact method: a completion outside the beam is never seen.

Per depth, for all agents' beam nodes at once:

1. ``expand(nodes, cand)`` gives a key per (node, candidate) step (higher is better; ``-inf``: not
   taken) and optionally a new recurrent memory per node (the encoder-decoder's hidden state);
2. each node's ``width`` best steps, plus (when the candidates carry classifier scores) its
   cheapest step whose child the score calls accepted, become children, priced by the
   candidates' step costs (the world's own transition rules, bit-equal to ``world.apply``'s);
3. accepted children are completions: the cheapest per agent so far is kept; rejected children
   whose path already costs at least that are pruned (prices are >= 0, a longer path only costs
   more); of the rest, the ``width`` best keys per agent form the next beam, and only these are
   applied with ``world.apply`` (exact transitions).

Which children are accepted: without candidate scores, every child is applied and decided by
``world.accepts``. With them (the default), a child whose candidate score is farther than
:data:`SCORE_MARGIN` (relative) from the decision boundary is decided by its sign, and only the
children within the margin are applied and decided by ``world.accepts``: the incremental float32
scores (exact ``world.score`` for other models) differ from ``world.score`` by < 1e-5 relative
on the bundled worlds (100x below the margin; ``tests/test_sequential_search.py``), so this only
saves applying and scoring the ``width`` x ``width`` children per agent.

The answer is priced and decided again by ``world.rollout`` (consequences and discounts in
order), as every sequential answer is: its validity never rests on an estimate. An agent with no
completion within ``max_steps`` gets its greedy fallback (``fallback``: the policy's own rollout)
or an empty, invalid answer: no recourse found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from envs.sequential import SequentialWorld
from envs.sequential_candidates import Candidates, FlatGrid, candidates

#: Relative distance of a candidate's float32 decision score from 0 within which the beam decides
#: acceptance by the world's classifier instead (see the module doc).
SCORE_MARGIN = 1e-3


@dataclass
class Nodes:
    """A batch of beam nodes (partial sequences) of several agents."""

    agent: np.ndarray  # (N,) row of the agent in the searched batch
    states: np.ndarray  # (N, D) encoded state after the steps so far
    used: np.ndarray  # (N, A) actions used so far
    steps: np.ndarray  # (N,) steps taken so far
    cost: np.ndarray  # (N,) price of the steps so far (the world's, in order)
    key: np.ndarray  # (N,) ranking key of the node (higher is better)
    prev: np.ndarray  # (N,) flat index of the last step (-1: none yet)
    memory: np.ndarray | None  # (N, H) the ranker's recurrent memory, if it keeps one

    def take(self, rows: np.ndarray) -> Nodes:
        return Nodes(self.agent[rows], self.states[rows], self.used[rows], self.steps[rows], self.cost[rows],
                     self.key[rows], self.prev[rows], None if self.memory is None else self.memory[rows])


class Expand(Protocol):
    def __call__(self, nodes: Nodes, cand: Candidates) -> tuple[np.ndarray, np.ndarray | None]:
        """(N, K) keys of every node's candidate steps (``-inf``: not taken) and the nodes' new
        memory (inherited by their children; None if the ranker keeps none)."""


def top_per_group(group: np.ndarray, key: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest ``key`` within each value of ``group`` (ties: lower index)."""
    if len(group) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(len(key)), -key, group))
    g = group[order]
    start = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1]
    rank = np.arange(len(g)) - np.repeat(start, np.diff(np.r_[start, len(g)]))
    return np.sort(order[rank < k])


def beam_search(world: SequentialWorld, expand: Expand, X: np.ndarray, *, width: int, max_steps: int,
                chunk: int = 1024, score_children: bool = True, memory: np.ndarray | None = None,
                fallback: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """Beam search for every agent of ``X`` (see the module doc). ``score_children``: compute the
    candidates' classifier scores (the policy's features, and free completions); ``memory``: the
    ranker's initial memory per agent. Returns the chosen (B, T) actions and values (-1 / NaN
    padded), whether each agent got a completion, and search statistics per agent searched: nodes
    expanded, children computed and scored (nodes x grid size), children kept as ranked steps or
    free completions (``expanded_per_agent``)."""
    if width < 1:
        raise ValueError(f"width: must be >= 1, got {width}")
    X0 = world.validate(X, name="X")
    grid = FlatGrid.of(world)
    B, T = len(X0), int(max_steps)
    best = np.full(B, np.inf)
    best_A, best_V = np.full((B, T), -1, np.int64), np.full((B, T), np.nan)
    nodes = Nodes(np.arange(B), X0.copy(), np.zeros((B, world.n_actions), bool), np.zeros(B, np.int64),
                  np.zeros(B), np.zeros(B), np.full(B, -1, np.int64), memory)
    path_A, path_V = np.full((B, T), -1, np.int64), np.full((B, T), np.nan)
    start_ok = world.accepts(X0)
    best[start_ok] = 0.0  # already accepted: the empty sequence
    keep = ~start_ok
    nodes, path_A, path_V = nodes.take(np.flatnonzero(keep)), path_A[keep], path_V[keep]
    expanded = n_nodes = 0
    for t in range(T):
        if len(nodes.agent) == 0:
            break
        n_nodes += len(nodes.agent)
        parts = [_expand_chunk(world, grid, expand, nodes, s, min(s + chunk, len(nodes.agent)), width,
                               score_children) for s in range(0, len(nodes.agent), chunk)]
        rows, ks, keys, step_cost, est = (np.concatenate(z) for z in zip(*parts, strict=True))
        # a node's free completion may also be among its top steps: each (node, step) once
        _, first = np.unique(rows * grid.size + ks, return_index=True)
        rows, ks, keys, step_cost, est = rows[first], ks[first], keys[first], step_cost[first], est[first]
        expanded += len(rows)
        if len(rows) == 0:
            break
        a, v = grid.action[ks], grid.value[ks]
        cost = nodes.cost[rows] + step_cost  # candidates are allowed steps: finite, world-priced
        by_world = np.abs(est) <= SCORE_MARGIN * np.maximum(1.0, np.abs(est))  # est 0: not scored
        states = np.empty((len(rows), X0.shape[1]))
        accepted = est > 0
        if by_world.any():  # applied and judged by the world's classifier
            tr = world.apply(nodes.states[rows[by_world]], a[by_world], v[by_world])
            states[by_world] = tr.states
            accepted[by_world] = tr.ok & world.accepts(tr.states)
        agent = nodes.agent[rows]
        cA, cV = path_A[rows], path_V[rows]
        cA[:, t], cV[:, t] = a, v
        done = np.flatnonzero(accepted)  # completions: keep the cheapest per agent
        if len(done):
            order = done[np.lexsort((cost[done], agent[done]))]
            first = order[np.r_[True, agent[order][1:] != agent[order][:-1]]]
            win = first[cost[first] < best[agent[first]]]
            best[agent[win]] = cost[win]
            best_A[agent[win]], best_V[agent[win]] = cA[win], cV[win]
        # the next beam: rejected children cheaper than their agent's best completion so far
        alive = np.flatnonzero(~accepted & (cost < best[agent]))
        if len(alive) == 0 or t + 1 == T:
            break
        sel = alive[top_per_group(agent[alive], keys[alive], width)]
        todo = sel[~by_world[sel]]  # only the next beam's children are needed as states
        if len(todo):
            states[todo] = world.apply(nodes.states[rows[todo]], a[todo], v[todo]).states
        used = nodes.used[rows[sel]].copy()
        used[np.arange(len(sel)), a[sel]] = True
        nodes = Nodes(agent[sel], states[sel], used, nodes.steps[rows[sel]] + 1, cost[sel], keys[sel], ks[sel],
                      None if nodes.memory is None else nodes.memory[rows[sel]])
        path_A, path_V = cA[sel], cV[sel]
    found = np.isfinite(best)
    # a node's expansion computes (and, with scores, classifies) its whole grid of children: the
    # search's time is about proportional to scored_per_agent
    stats = {"nodes_per_agent": n_nodes / max(B, 1), "scored_per_agent": n_nodes * grid.size / max(B, 1),
             "expanded_per_agent": expanded / max(B, 1), "found": int(found.sum())}
    if fallback is not None and not found.all():
        miss = np.flatnonzero(~found)
        fA, fV, fok = fallback(X0[miss])
        w = min(fA.shape[1], T)
        best_A[miss[:, None], np.arange(w)], best_V[miss[:, None], np.arange(w)] = fA[:, :w], fV[:, :w]
        stats["fallback"] = int(len(miss))
        found[miss] = fok
    return best_A, best_V, found, stats


def _expand_chunk(world: SequentialWorld, grid: FlatGrid, expand: Expand, nodes: Nodes, s: int, e: int, width: int,
                  score_children: bool) -> tuple[np.ndarray, ...]:
    """Nodes ``s:e``: their ``width`` best steps by key, plus each one's cheapest step whose child
    the candidates' scores call accepted; as (node row, flat step, child key, step cost, the
    child's candidate score: 0 where not computed)."""
    part = nodes.take(np.arange(s, e))
    cand = candidates(world, grid, part.states, part.used, score=score_children)
    keys, mem = expand(part, cand)
    if mem is not None:  # children inherit their parent's updated memory
        nodes.memory[s:e] = mem
    keys = np.where(cand.mask, keys, -np.inf)
    m = min(width, keys.shape[1])
    top = np.argpartition(-keys, m - 1, axis=1)[:, :m]
    rows, ks = np.repeat(np.arange(e - s), m), top.reshape(-1)
    fine = np.isfinite(keys[rows, ks])
    rows, ks = rows[fine], ks[fine]
    if score_children:
        acc = np.where(cand.accepted, cand.cost, np.inf)
        has = np.flatnonzero(np.isfinite(acc.min(1)))
        rows, ks = np.r_[rows, has], np.r_[ks, acc.argmin(1)[has]]
    est = cand.score[rows, ks] if score_children else np.zeros(len(rows))
    return rows + s, ks, keys[rows, ks], cand.cost[rows, ks], est
