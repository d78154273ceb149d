"""Rays refused all along, reached by their probabilities (a smooth model, black box).

Round one asks about each lead proposal (a white-box search's answer on a surrogate of the model) on a ladder
of scales along its ray from the agent (``first_round.LEAD_LADDER``, 0.97 to 1.4). Where the surrogate is a
few per cent off, every rung can be refused while the model's own boundary lies just past the last one: German
MLP's agent 0 is refused at P = 0.497 and 0.499 on two rays whose crossing MACE puts at 1.44 times the second
answer. The refinement then shrinks the answers it has, on other rays, and never goes back.

A black box still answers with a probability, and a smooth model's logit is close to linear along a short ray.
So for each lead ray that round one refused at every rung it scored, the logit of its last ``REACH_POINTS``
rungs is fitted as a line in the scale and the line's crossing of the threshold is the ray's estimated reach;
the ray at ``REACH_FACTORS`` times that scale (projected) is asked in the next round, nearest first, where it
would be nearer than the answer. A heuristic: a line through three rungs, nothing more; a model in steps
(a forest) has flat runs and jumps, not a slope, and is left to its own moves.
"""

from __future__ import annotations

import numpy as np

from learners.tabular.geometry import WorldGeometry
from learners.tabular.rows import word_hashes

REACH_FACTORS = (1.0, 1.01, 1.025, 1.05, 1.1, 1.2)  # multiples of a ray's estimated crossing scale asked
REACH_POINTS = 3  # the last rungs of a ray fitted (the nearest the boundary)
REACH_FAR = 4.0  # a crossing estimated past this many times the ray's last rung is not asked
BLOCK = 64  # agents matched at a time (memory: agents x rungs x rows x D)


def _rung_probabilities(L: np.ndarray, C: np.ndarray, proba: np.ndarray) -> np.ndarray:
    """(N, R) the probability the model gave each rung row of ``L`` (N, R, D) among the scored rows ``C``
    (N, Q, D) with ``proba`` (N, Q) (the first equal row's); NaN where the rung was not scored (a repeat, a
    broken rule, cut). Rows are matched by their hashes, then compared whole (NaN rows never equal)."""
    out = np.full(L.shape[:2], np.nan)
    R = L.shape[1]

    def hashes(A: np.ndarray) -> np.ndarray:  # -0.0 read as 0.0, as ``==`` does
        return word_hashes(np.ascontiguousarray(A + 0.0).view(np.uint64))

    for lo in range(0, len(L), BLOCK):
        sl = slice(lo, lo + BLOCK)
        n, r, q = np.nonzero(hashes(L[sl])[:, :, None] == hashes(C[sl])[:, None, :])  # (n, r, q) in order
        eq = (L[sl][n, r] == C[sl][n, q]).all(-1)
        n, r, q = n[eq], r[eq], q[eq]
        first = np.unique(n * R + r, return_index=True)[1]  # each rung's first equal row
        out[sl][n[first], r[first]] = proba[sl][n[first], q[first]]
    return out


def reach_rows(geo: WorldGeometry, X: np.ndarray, P: np.ndarray, scales: tuple[float, ...], L: np.ndarray,
               C: np.ndarray, proba: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    """(N, K * len(REACH_FACTORS), D) for each ray of the proposals ``P`` (N, K, D) that round one asked on
    ``scales`` (its rows ``L`` (N, K * len(scales), D), proposal by proposal, as built for the round) and
    refused at every rung scored, the ray at ``REACH_FACTORS`` times the scale where the line through the
    logits of its last ``REACH_POINTS`` rungs crosses ``threshold``; NaN rows for the other rays. ``C``, ``proba``:
    round one's rows and the model's probabilities of them."""
    N, K, D = P.shape
    S = len(scales)
    F = len(REACH_FACTORS)
    out = np.full((N, K * F, D), np.nan)
    if not K or not S:
        return out
    p = _rung_probabilities(L, C, proba).reshape(N, K, S)
    s = np.broadcast_to(np.asarray(scales, float), p.shape)
    scored = ~np.isnan(p)
    refused = scored.any(-1) & ~(scored & (p > threshold)).any(-1)
    # the last REACH_POINTS scored rungs of each ray (the largest scales), fitted by least squares
    rank = np.cumsum(scored[..., ::-1], axis=-1)[..., ::-1]  # 1 for the last scored rung, 2 the one before, ...
    use = scored & (rank <= REACH_POINTS)
    n = use.sum(-1)
    q = np.clip(np.where(use, p, 0.5), 1e-9, 1 - 1e-9)
    z = np.log(q / (1 - q))  # the rungs' logits (0 where not used)
    sm = np.where(use, s, 0.0).sum(-1) / np.maximum(n, 1)
    zm = np.where(use, z, 0.0).sum(-1) / np.maximum(n, 1)
    ds = np.where(use, s - sm[..., None], 0.0)
    slope = (ds * np.where(use, z - zm[..., None], 0.0)).sum(-1) / np.maximum((ds**2).sum(-1), 1e-300)
    top = np.where(scored, s, -np.inf).max(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cross = sm + (np.log(threshold / (1 - threshold)) - zm) / slope
    ok = refused & (n >= 2) & (slope > 0) & (cross > top) & (cross <= REACH_FAR * top)
    if not ok.any():
        return out
    a, k = np.nonzero(ok)
    scale = cross[a, k][:, None] * np.asarray(REACH_FACTORS)[None, :]  # (m, F)
    num = geo.numeric
    R = np.repeat(P[a, k][:, None, :], F, axis=1)  # (m, F, D): the proposal's other changes as proposed
    R[..., num] = X[a][:, None, num] + scale[..., None] * (P[a, k][:, None, num] - X[a][:, None, num])
    R = geo.project(X[a], R)
    out.reshape(N, K, F, D)[a, k] = R
    return out

