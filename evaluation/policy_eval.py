"""Policy-specific metrics: optimality of the greedy rollout against the exact ordered optimum.

``evaluation.metrics.generator_metrics`` compares generated *sets* with the dataset's labels and
prices them in canonical order; a policy's answer is an ordered sequence, and with consequential
discounts the dataset's labels (the order-blind set cover) are not the optimum. Here the policy's
sequences are priced in the order it chose them and compared with the exact optimum computed in
the same run: :class:`~solvers.setcover_fast.FastSetCover`'s cost without discounts (every
agent), :class:`~solvers.ucs.UniformCostSearch`'s with discounts (the first ``exact_agents``
agents: about 20 ms each at 20 features and 100 actions). Both solvers are timed per agent on
those agents, beside the policy's batched inference time.

With discounts the set-cover answer is also priced against UCS, in two orders: canonical
(ascending action ids, what a set-valued label gives) and its best order (every permutation of
the set, tried in batch; the strongest use of an order-blind answer). The share of agents on
which even the best order is costlier than UCS measures what an order-blind method misses.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np

from envs.capability import CapabilityWorld
from evaluation.metrics import proportion

_REL = 1e-9
_MAX_PERMUTED = 6  # sets longer than this are priced in canonical order only (6! = 720 orders)


def _optimal(cost: np.ndarray, valid: np.ndarray, best: np.ndarray) -> np.ndarray:
    return valid & (cost <= best * (1.0 + _REL) + _REL)


def _regret(cost: np.ndarray, valid: np.ndarray, best: np.ndarray) -> float:
    r = (cost[valid] - best[valid]) / np.maximum(best[valid], 1e-12)
    return float(r.mean()) if len(r) else float("nan")


def best_order_costs(world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None, sets: np.ndarray
                     ) -> np.ndarray:
    """Cost of each agent's action set in its cheapest order (every permutation, batched)."""
    sets = np.atleast_2d(sets)
    lengths = (sets >= 0).sum(1)
    best = np.full(len(X), np.inf)
    for k in np.unique(lengths):
        rows = np.flatnonzero(lengths == k)
        if k > _MAX_PERMUTED:
            _, c, ok = world.rollout(X[rows], sets[rows], None if groups is None else groups[rows])
            best[rows] = np.where(ok, c, np.inf)
            continue
        base = np.sort(np.where(sets[rows] < 0, np.iinfo(np.int64).max, sets[rows]), 1)[:, : max(k, 1)]
        base[base == np.iinfo(np.int64).max] = -1
        for perm in itertools.permutations(range(max(int(k), 1))):
            _, c, ok = world.rollout(X[rows], base[:, list(perm)], None if groups is None else groups[rows])
            best[rows] = np.minimum(best[rows], np.where(ok, c, np.inf))
    return best


def exact_optimum(world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None, exact_agents: int | None
                  ) -> dict[str, Any]:
    """The exact optimal cost of the first agents (all without discounts), the solver used and
    its time per agent; with discounts also the set-cover answer for the same agents."""
    from solvers.setcover_fast import FastSetCover

    fast = FastSetCover(dedupe=False)  # per-agent work: no sharing between identical agents
    fast.label_batch(world, X[:2], None if groups is None else groups[:2])  # compile outside the timing
    if not world.order_matters:
        k = len(X) if exact_agents is None else min(exact_agents, len(X))
        t = time.perf_counter()
        lab = fast.label_batch(world, X[:k], None if groups is None else groups[:k])
        return {"solver": fast.name, "agents": k, "cost": lab.cost, "s_per_agent": (time.perf_counter() - t) / k}
    from solvers.ucs import UniformCostSearch

    k = min(1000 if exact_agents is None else exact_agents, len(X))
    ucs = UniformCostSearch()
    t = time.perf_counter()
    res = [ucs.solve(world, X[i], None if groups is None else int(groups[i]))[0] for i in range(k)]
    s_per_agent = (time.perf_counter() - t) / k
    t = time.perf_counter()
    lab = fast.label_batch(world, X[:k], None if groups is None else groups[:k])
    sc_s = (time.perf_counter() - t) / k
    return {"solver": ucs.name, "agents": k, "s_per_agent": s_per_agent,
            "cost": np.array([r.cost if r.valid else np.inf for r in res]),
            "lengths": np.array([len(r.action_ids) for r in res]),
            "set_cover_sets": lab.actions, "set_cover_s_per_agent": sc_s}


def policy_metrics(policy: Any, world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None = None,
                   exact_agents: int | None = None, repeats: int = 3,
                   exact: dict[str, Any] | None = None) -> dict[str, Any]:
    """Optimality rate, regret, validity, steps and batched inference time of a policy
    (anything with ``predict_sequences(X, groups)``), beside the exact solver's time.

    ``exact_agents``: how many agents (the first) are compared with the exact optimum (None:
    all without discounts, 1000 with). ``exact``: a result of :func:`exact_optimum` to reuse
    (several policies on the same agents). Inference time is the best of ``repeats`` batched
    rollouts of all agents, after a warm-up.
    """
    g = None if world.n_groups == 1 else groups
    X = np.asarray(X)
    policy.predict_sequences(X[:8], None if g is None else g[:8])  # warm-up
    times = []
    for _ in range(max(repeats, 1)):
        t = time.perf_counter()
        r = policy.predict_sequences(X, g)
        times.append(time.perf_counter() - t)
    infer = min(times) / max(len(X), 1)
    ex = exact if exact is not None else exact_optimum(world, X, g, exact_agents)
    k = ex["agents"]
    best = ex["cost"]
    opt = _optimal(r.cost[:k], r.accepted[:k], best)
    out: dict[str, Any] = {
        "agents": int(len(X)),
        "validity": proportion(r.accepted),
        "not_accepted": int((~r.accepted).sum()),
        "stopped_without_valid_action": int(r.stuck.sum()),
        "mean_steps": float(r.steps.mean()),
        "exact_solver": ex["solver"],
        "exact_agents": int(k),
        "optimality": proportion(opt),
        "mean_regret": _regret(r.cost[:k], r.accepted[:k], best),
        "max_regret": float(((r.cost[:k] - best) / best)[r.accepted[:k]].max(initial=0.0)),
        "inference_s_per_agent": infer,
        "exact_s_per_agent": ex["s_per_agent"],
        "speedup_vs_exact": ex["s_per_agent"] / max(infer, 1e-12),
        "mean_confidence": float(r.confidence.mean()),
    }
    if world.order_matters:
        sets = ex["set_cover_sets"]
        _, canon, ok = world.rollout(X[:k], sets, None if g is None else g[:k])
        canon = np.where(ok, canon, np.inf)
        best_order = best_order_costs(world, X[:k], None if g is None else g[:k], sets)
        sc_opt = best_order <= best * (1.0 + _REL) + _REL
        out["set_cover_vs_ucs"] = {
            "set_cover_s_per_agent": ex["set_cover_s_per_agent"],
            "canonical_order_suboptimal": proportion(~(canon <= best * (1.0 + _REL) + _REL)),
            "canonical_order_mean_regret": _regret(canon, np.isfinite(canon), best),
            "best_order_suboptimal": proportion(~sc_opt),
            "best_order_mean_regret": _regret(best_order, np.isfinite(best_order), best),
            "policy_optimal_where_set_cover_best_order_is_not": proportion(opt[~sc_opt]),
            "ucs_longer_than_3": int((ex["lengths"] > 3).sum()),
        }
    return out
