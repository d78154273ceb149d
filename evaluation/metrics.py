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


def row_ids(*arrays: np.ndarray) -> list[np.ndarray]:
    """Integer ids of rows, shared across ``arrays``: two rows get the same id iff they are equal.

    0/1 rows are packed to bytes first (``np.packbits``); each row is then one opaque value and
    a single ``np.unique`` numbers them, so there is no per-row Python loop.
    """
    arrs = [np.atleast_2d(np.asarray(a)) for a in arrays]
    if len({a.shape[1] for a in arrs}) > 1:
        raise ValueError(f"row_ids: arrays differ in width ({[a.shape[1] for a in arrs]})")
    binary = all(a.dtype == bool or (np.issubdtype(a.dtype, np.integer) and (not a.size or (a.min() >= 0 and a.max() <= 1)))
                 for a in arrs)
    # One key type for all arrays, so that equal rows compare equal across them.
    arrs = [np.packbits(a.astype(bool), axis=1) if binary else np.ascontiguousarray(a, dtype=np.int64) for a in arrs]
    keys = [a.view(np.dtype((np.void, a.dtype.itemsize * a.shape[1]))).reshape(len(a)) for a in arrs]
    _, inverse = np.unique(np.concatenate(keys), return_inverse=True)
    return np.split(inverse.reshape(-1).astype(np.int64), np.cumsum([len(k) for k in keys])[:-1])


def unseen_mask(train_X: np.ndarray, test_X: np.ndarray) -> np.ndarray:
    """True for each test agent whose feature vector ``x`` occurs nowhere in ``train_X``."""
    train_ids, test_ids = row_ids(train_X, test_X)
    return ~np.isin(test_ids, train_ids)


def _bayes_hit(x_ids: np.ndarray, cfe_ids: np.ndarray, query: tuple[np.ndarray, np.ndarray] | None = None
               ) -> np.ndarray:
    """Probability that the Bayes-optimal function of x gets each query agent right.

    The joint distribution is the empirical one of the (x, CFE) pairs ``x_ids``/``cfe_ids``; for
    each x the predictor answers a most frequent CFE, drawn uniformly among ties, so an agent
    (x, c) is right with probability [c is a mode of x] / (number of modes of x). ``query``
    gives the agents' (x ids, CFE ids); default: the pairs themselves.
    """
    n_cfe = int(max(cfe_ids.max(initial=-1), -1 if query is None else query[1].max(initial=-1))) + 1
    n_x = int(max(x_ids.max(initial=-1), -1 if query is None else query[0].max(initial=-1))) + 1
    pair = x_ids * n_cfe + cfe_ids
    pairs, inverse = np.unique(pair, return_inverse=True)
    mass = np.bincount(inverse.reshape(-1), minlength=len(pairs))
    px = pairs // max(n_cfe, 1)
    best = np.zeros(n_x, dtype=np.int64)
    np.maximum.at(best, px, mass)
    is_mode = mass == best[px]
    n_modes = np.bincount(px[is_mode], minlength=n_x)
    qx, qc = (x_ids, cfe_ids) if query is None else query
    key = qx * n_cfe + qc
    pos = np.minimum(np.searchsorted(pairs, key), max(len(pairs) - 1, 0))
    found = pairs[pos] == key if len(pairs) else np.zeros(len(key), dtype=bool)
    return (found & is_mode[pos] if len(pairs) else found) / np.maximum(n_modes[qx], 1)


def _by_group(p_hit: np.ndarray, groups: np.ndarray | None) -> dict[str, Any]:
    out: dict[str, Any] = {"value": float(p_hit.mean()) if len(p_hit) else float("nan"), "n": int(len(p_hit))}
    if groups is not None:
        out["by_group"] = {str(g): float(p_hit[groups == g].mean()) for g in np.unique(groups)}
    return out


def empirical_group_blind_ceiling(X: np.ndarray, sets: np.ndarray, groups: np.ndarray | None = None
                                  ) -> dict[str, Any]:
    """Best accuracy any group-blind predictor can reach on these agents, from their own joint.

    The Bayes-optimal group-blind predictor of the empirical joint distribution of ``(x, CFE)``
    over these agents answers, for each distinct ``x``, the CFE most frequent among the agents
    with that ``x`` (ties drawn uniformly). Its accuracy, ``sum_x max_c count(x, c) / N``, is an
    upper bound for every function of ``x`` on these agents. It is loose: an ``x`` that occurs
    once here is always "right", so with mostly distinct ``x`` it approaches 1 (see
    :func:`bayes_group_blind_ceiling` for the population figure). ``by_group``: the same
    predictor's expected accuracy on each group's agents.
    """
    x_ids, cfe_ids = row_ids(X)[0], row_ids(canonical(sets))[0]
    return _by_group(_bayes_hit(x_ids, cfe_ids), groups)


def bayes_group_blind_ceiling(world: CapabilityWorld, X: np.ndarray, groups: np.ndarray, sets: np.ndarray,
                              max_cfe_len: int, require_unique: bool = True,
                              allowed_sets: np.ndarray | None = None) -> dict[str, Any]:
    """Expected accuracy, on these agents, of the Bayes-optimal group-blind predictor of the world.

    Groups are drawn uniformly and independently of ``x``, and an agent enters the dataset iff
    it is kept in its group (rejected, with a recourse whose unique optimum has at most
    ``max_cfe_len`` actions and, under a ``>N`` filter, is one of ``allowed_sets``). So given
    ``x``, the hidden group is uniform over the groups K(x) that keep ``x``. Every (x, g), g in
    K(x), is solved exactly; the predictor answers the CFE optimal for the most groups of K(x)
    (ties drawn uniformly), and no function of ``x`` has a higher expected accuracy. Reported:
    the mean over the agents of its probability of being right on each (x, its group, its CFE
    ``sets``), overall and ``by_group``.
    """
    from data_gen.dataset import label_status
    from solvers.setcover_fast import FastSetCover

    x_ids = row_ids(X)[0]
    uniq, first = np.unique(x_ids, return_index=True)
    G = world.n_groups
    Xq = np.repeat(np.atleast_2d(X)[first], G, axis=0)
    gq = np.tile(np.arange(G), len(uniq))
    labels = FastSetCover().label_batch(world, Xq, gq if G > 1 else None)
    kept = ~world.accepts(Xq, gq if G > 1 else None) & (label_status(labels, max_cfe_len, require_unique) == "kept")
    width = max(max_cfe_len, np.shape(sets)[1], labels.actions.shape[1])
    pad = lambda s: np.pad(s, ((0, 0), (0, width - s.shape[1])), constant_values=-1)  # noqa: E731
    solved = canonical(pad(labels.actions))
    own = canonical(pad(np.atleast_2d(sets)))
    if allowed_sets is not None:
        solved_ids, allowed_ids = row_ids(solved, canonical(pad(np.atleast_2d(allowed_sets))))
        kept &= np.isin(solved_ids, allowed_ids)
    cfe_solved, cfe_own = row_ids(solved, own)
    x_of = np.repeat(uniq, G)
    p_hit = _bayes_hit(x_of[kept], cfe_solved[kept], query=(x_ids, cfe_own))
    out = _by_group(p_hit, groups)
    out["mean_groups_keeping_x"] = float(np.bincount(x_of[kept], minlength=len(uniq))[x_ids].mean())
    return out


def proportion(hits: np.ndarray) -> dict[str, float]:
    """Share with its 95% interval half-width (1.96 standard errors), the paper's ± columns."""
    n = int(len(hits))
    if n == 0:
        return {"value": float("nan"), "ci95": float("nan"), "n": 0}
    p = float(np.mean(hits))
    return {"value": p, "ci95": float(1.96 * np.sqrt(p * (1 - p) / n)), "n": n}


def generator_metrics(world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None, true_sets: np.ndarray,
                      true_cost: np.ndarray, pred_sets: np.ndarray, confidence: np.ndarray,
                      unseen: np.ndarray | None = None) -> dict[str, Any]:
    """Accuracy (overall, by CFE length, by group), validity, mistakes, regret and confidence.

    ``unseen`` (from :func:`unseen_mask`) marks the agents whose ``x`` is not in training: their
    accuracy is reported beside the overall figure (``accuracy_unseen``, ``accuracy_seen``).
    """
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
        **({} if unseen is None else {"accuracy_unseen": proportion(hit[unseen]),
                                      "accuracy_seen": proportion(hit[~unseen])}),
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
