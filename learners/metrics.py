"""One definition of every generator metric (learning-CFE paper, sections 4.4 and 5.6)."""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.capability import CapabilityWorld


def _pad(a: np.ndarray, width: int) -> np.ndarray:
    a = np.atleast_2d(a)
    if a.shape[1] >= width:
        return a
    return np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=-1)


def canonical(sets: np.ndarray) -> np.ndarray:
    """Ascending ids, -1 padding last, duplicates removed (so equal sets compare equal)."""
    big = np.iinfo(np.int64).max
    s = np.sort(np.where(np.atleast_2d(sets) < 0, big, sets), axis=1)
    s[:, 1:][s[:, 1:] == s[:, :-1]] = big
    s = np.sort(s, axis=1)
    s[s == big] = -1
    return s


def exact_match(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Zero-one accuracy per agent: the generated action set equals the optimal one."""
    w = max(np.shape(pred)[1], np.shape(true)[1])
    return np.all(canonical(_pad(pred, w)) == canonical(_pad(true, w)), axis=1)


def proportion(hits: np.ndarray) -> dict[str, float]:
    """Share with its 95% interval half-width (1.96 standard errors), the paper's ± columns."""
    n = int(len(hits))
    if n == 0:
        return {"value": float("nan"), "ci95": float("nan"), "n": 0}
    p = float(np.mean(hits))
    return {"value": p, "ci95": float(1.96 * np.sqrt(p * (1 - p) / n)), "n": n}


def generator_metrics(world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None, true_sets: np.ndarray,
                      true_cost: np.ndarray, pred_sets: np.ndarray, confidence: np.ndarray) -> dict[str, Any]:
    """Accuracy (overall, by CFE length, by group), validity, mistakes, regret and confidence."""
    hit = exact_match(pred_sets, true_sets)
    g = None if world.n_groups == 1 else groups
    _, cost, valid = world.rollout(X, canonical(pred_sets), g)
    lengths = (true_sets >= 0).sum(1)
    feasible = ~hit & valid
    infeasible = ~hit & ~valid
    regret = (cost[valid] - true_cost[valid]) / np.maximum(true_cost[valid], 1e-12)
    out: dict[str, Any] = {
        "accuracy": proportion(hit),
        "accuracy_by_length": {str(k): proportion(hit[lengths == k]) for k in np.unique(lengths)},
        "validity": proportion(valid),
        "mistakes": int((~hit).sum()),
        "feasible_mistakes": int(feasible.sum()),
        "infeasible_mistakes": int(infeasible.sum()),
        "feasible_share_of_mistakes": float(feasible.sum() / max((~hit).sum(), 1)),
        "mean_cost_regret": float(regret.mean()) if len(regret) else float("nan"),
        "mean_confidence_right": float(confidence[hit].mean()) if hit.any() else float("nan"),
        "mean_confidence_wrong": float(confidence[~hit].mean()) if (~hit).any() else float("nan"),
    }
    if groups is not None and world.n_groups > 1:
        out["accuracy_by_group"] = {str(k): proportion(hit[groups == k]) for k in np.unique(groups)}
    out["_arrays"] = {"hit": hit, "valid": valid, "cost": cost, "true_cost": true_cost, "confidence": confidence,
                      "lengths": lengths}
    return out
