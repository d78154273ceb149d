"""GeCo's answers completed by a fractional knapsack on the numeric features (beyond the paper, issue 55).

Where the score is (near) linear in the numeric features, as a logistic regression's log-odds is, the
nearest counterfactual with the categorical changes fixed moves the numeric features with the most
log-odds per unit of cost first, each as far as the agent's box allows (the schema's range narrowed by
the world's one-column rules: a step bound often holds the optimum at its edge), the last one part of
the way: a vertex of three or more features that the genetic search and the two-feature polish rarely
assemble. ``filled`` estimates the log-odds slope of each numeric feature both ways from a few bases (x,
and the nearest answers with their numeric changes undone) by finite differences (one black-box call),
fills the missing log-odds in that order at a few overshoots, with every feature and without each one in
turn (one call), and returns the rows the model
accepts and that keep every rule; the refinement then shortens them. The cost per unit is the
feature's share of the distance (its cost weight in that direction over its range). A heuristic: on a
non-linear model the slopes hold near the bases only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

FILL_OVERSHOOT = np.array([1.0 + 1e-6, 1.02, 1.1, 1.3, 2.0])  # multiples of the missing log-odds filled
FILL_STEP = 0.01  # the finite difference: this share of the feature's range (an integer feature: at least 1)


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return np.log(p) - np.log1p(-p)


def filled(run: Any, X: np.ndarray, bases: int = 2) -> np.ndarray:
    """Knapsack fills from x and the ``bases`` nearest answers of ``X`` (their numeric changes undone);
    the valid ones (accepted, every rule kept). ``run`` is a GeCo run (``solvers.geco.search._Run``)."""
    a = run.agent
    prog = a.space.program
    schema = prog.schema
    empty = np.zeros((0, len(a.x)))
    cols = np.array([int(prog.group_cols[g][0]) for g in run.groups if run._ordered(g)], np.int64)
    if not len(cols) or not len(X):
        return empty
    lo, hi = (np.asarray(b, float)[cols] for b in a.bounds())
    span = np.array([r.span for r in prog.raws], float)
    raw_of = {int(r.columns[0]): j for j, r in enumerate(prog.raws)}
    j_of = np.array([raw_of[c] for c in cols])
    rng = np.where(np.isfinite(span[j_of]) & (span[j_of] > 0), span[j_of], 1.0)
    integer = np.array([bool(schema.features[c].integer or schema.features[c].kind == "ordinal") for c in cols])
    up_w = np.ones(len(cols)) if a.cost is None else a.cost[j_of, 0]
    down_w = np.ones(len(cols)) if a.cost is None else a.cost[j_of, 1]
    order = np.argsort(run.distance(X), kind="stable")[:bases]
    B = np.vstack([a.x[None], X[order]])
    B[:, cols] = a.x[cols]
    B = np.unique(B, axis=0)
    xc = a.x[cols]
    h = np.maximum(FILL_STEP * rng, np.where(integer, 1.0, 0.0))
    up_v, down_v = np.minimum(xc + h, hi), np.maximum(xc - h, lo)
    n, m = len(B), len(cols)
    probes = np.repeat(B[:, None, :], 2 * m + 1, axis=1)  # (n, 2m + 1, d): the base, each column up, each down
    probes[:, 1 + np.arange(m), cols] = up_v
    probes[:, 1 + m + np.arange(m), cols] = down_v
    L = _logit(run.model.predict_proba(probes.reshape(-1, len(a.x)))).reshape(n, 2 * m + 1)
    run.refine_rounds += 1
    with np.errstate(divide="ignore", invalid="ignore"):
        gain_up = np.where(up_v > xc, (L[:, 1:m + 1] - L[:, :1]) / (up_v - xc), 0.0)  # log-odds per unit, (n, m)
        gain_down = np.where(down_v < xc, (L[:, m + 1:] - L[:, :1]) / (xc - down_v), 0.0)
    per_up, per_down = up_w / rng, down_w / rng  # distance per unit of change
    ratio_up = np.where(gain_up > 0, gain_up / np.maximum(per_up, 1e-300), 0.0)
    ratio_down = np.where(gain_down > 0, gain_down / np.maximum(per_down, 1e-300), 0.0)
    use_up = ratio_up >= ratio_down
    gain = np.where(use_up, gain_up, gain_down)
    ratio = np.where(use_up, ratio_up, ratio_down)
    room = np.where(use_up, hi - xc, xc - lo)
    sign = np.where(use_up, 1.0, -1.0)
    gain = np.where(ratio > 0, gain, 0.0)
    # each fill also without one of the features (an integer feature whose fractional step would be
    # rounded up to a whole costly one is better left out): E = m + 1 variants, the first with all
    drop = np.vstack([np.ones(m, bool), ~np.eye(m, dtype=bool)])  # (E, m)
    gain = np.where(drop[None], gain[:, None, :], 0.0)  # (n, E, m)
    ratio = np.where(drop[None], ratio[:, None, :], 0.0)
    missing = _logit(np.array([float(run.p.threshold)]))[0] - L[:, 0]  # (n,)
    rank = np.argsort(-ratio, axis=2, kind="stable")
    g_sorted = np.take_along_axis(gain * np.maximum(room, 0.0)[:, None, :], rank, 2)
    before = np.cumsum(g_sorted, 2) - g_sorted  # log-odds the features ahead of each add in full
    target = np.maximum(missing[:, None] * FILL_OVERSHOOT[None, :], 0.0)  # (n, F)
    take = np.clip(target[:, None, :, None] - before[:, :, None, :], 0.0, g_sorted[:, :, None, :])  # (n, E, F, m)
    gs = np.take_along_axis(gain, rank, 2)[:, :, None, :]
    move_sorted = np.where(gs > 0, take / np.where(gs > 0, gs, 1.0), 0.0)
    move = np.empty_like(move_sorted)
    np.put_along_axis(move, np.broadcast_to(rank[:, :, None, :], move.shape), move_sorted, 3)
    move = np.where(integer, np.ceil(move - 1e-9), move)  # whole steps, rounded up
    F = len(FILL_OVERSHOOT)
    rows = np.repeat(B[:, None, None, :], drop.shape[0], axis=1).repeat(F, axis=2)  # (n, E, F, d)
    rows[..., cols] = np.clip(xc + sign[:, None, None, :] * move, lo, hi)
    rows = np.unique(rows.reshape(-1, len(a.x)), axis=0)
    rows = rows[(rows[:, cols] != xc).any(1)]
    if not len(rows):
        return empty
    ok = a.keeps(rows)
    if ok.any():
        ok[ok] = run.model.predict_proba(rows[ok]) > run.p.threshold
        run.refine_rounds += 1
    return rows[ok]
