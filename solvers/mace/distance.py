"""MACE distance (paper §4.2, Eq. 3): per-feature normalized deltas mixed as a0·l0 + b·l1 + g·linf.

Raw features come from the schema: the columns of a one-hot group (``Feature.group``) form ONE
categorical feature; every other column is its own feature. The normalized delta is
|x_j - x^_j| / R_j for numeric, ordinal and integer features (R_j = upper - lower; a feature with
R_j = 0 cannot move and has delta 0) and 1[changed] for binary and categorical features, so every
delta lies in [0, 1]. The distance is d = alpha·||delta||_0 + beta·||delta||_1 + gamma·||delta||_inf
with J·(alpha + beta) + gamma = 1, which keeps d in [0, 1] (max ||.||_0 = max ||.||_1 = J,
max ||.||_inf = 1; the footnote of Eq. 3 prints the same condition with J dividing instead).
The named norms are "zero" (d = ||delta||_0 / J), "one" (||delta||_1 / J) and "infty" (||delta||_inf).

Cost weights (``envs.rules``, a spec's ``weights:``): a weight w_j^up / w_j^down replaces the implicit
weight 1 of feature j's normalised change in the direction it moved (a binary's 0 -> 1 is up; a
categorical feature has one weight): delta_j becomes w·|x_j - x^_j| / R_j (w·1[changed]), in the l0
term too (a changed feature counts w), so d = alpha·sum w_j 1[changed] + beta·sum w_j delta_j +
gamma·max w_j delta_j. d then lies in [0, max(1, largest weight)]: in [0, 1] when every weight is <= 1.
"""

from __future__ import annotations

import numpy as np

from envs.raw_features import DistanceFeature, distance_features
from envs.schema import FeatureSchema

Norm = str | tuple[float, float, float]
NORMS = ("zero", "one", "infty")


def norm_weights(norm: Norm, n_raw: int) -> tuple[float, float, float]:
    """(alpha, beta, gamma) of Eq. 3 for a named norm, or explicit weights checked to keep d in [0, 1]."""
    if isinstance(norm, str):
        if norm not in NORMS:
            raise ValueError(f"norm: unknown norm {norm!r}; expected one of {NORMS} or (alpha, beta, gamma)")
        return {"zero": (1.0 / n_raw, 0.0, 0.0), "one": (0.0, 1.0 / n_raw, 0.0), "infty": (0.0, 0.0, 1.0)}[norm]
    try:
        a, b, g = (float(v) for v in norm)
    except (TypeError, ValueError):
        raise ValueError(f"norm: expected a name in {NORMS} or three weights (alpha, beta, gamma), got {norm!r}") from None
    if min(a, b, g) < 0 or abs(n_raw * (a + b) + g - 1.0) > 1e-6:
        raise ValueError(f"norm: weights {norm!r} must be >= 0 with J*(alpha+beta)+gamma = 1 (J = {n_raw} features)")
    return a, b, g


def deltas(raws: tuple[DistanceFeature, ...], x_hat: np.ndarray, X: np.ndarray) -> np.ndarray:
    """(n, J) normalized per-feature deltas of the rows of ``X`` from ``x_hat`` (all in [0, 1])."""
    X = np.atleast_2d(np.asarray(X, float))
    out = np.zeros((len(X), len(raws)))
    for j, r in enumerate(raws):
        cols = list(r.columns)
        if r.kind == "numeric":
            if r.span > 0:  # R_j = 0: the feature is fixed, delta 0; inf span gives 0 too
                out[:, j] = np.abs(X[:, cols[0]] - x_hat[cols[0]]) / r.span
        else:
            out[:, j] = np.any(X[:, cols] != x_hat[cols], axis=1)
    return out


def directions(raws: tuple[DistanceFeature, ...], x_hat: np.ndarray, X: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """(n, J) the cost weight of the way each feature moved: ``cost[j, 0]`` where it increased (a binary
    0 -> 1; any change of a categorical feature), ``cost[j, 1]`` where it decreased (``envs.rules``)."""
    X = np.atleast_2d(np.asarray(X, float))
    first = np.array([r.columns[0] for r in raws], np.int64)
    down = (X[:, first] < x_hat[first]) & np.array([r.kind not in ("group", "nominal") for r in raws])
    return np.where(down, cost[:, 1], cost[:, 0])


def mix(D: np.ndarray, weights: tuple[float, float, float], W: np.ndarray | None = None) -> np.ndarray:
    """Eq. 3 on a matrix of deltas; with direction weights ``W`` (``directions``) each feature's delta and
    change count are multiplied by its weight: a·sum W·1[D > 0] + b·sum W·D + g·max W·D."""
    a, b, g = weights
    C = (D != 0).astype(float)
    if W is not None:
        D, C = D * W, C * W
    return a * C.sum(axis=1) + b * D.sum(axis=1) + g * (D.max(axis=1) if D.shape[1] else 0.0)


def distance(schema: FeatureSchema, x_hat: np.ndarray, X: np.ndarray, norm: Norm = "one",
             cost: np.ndarray | None = None) -> np.ndarray:
    """MACE distance from ``x_hat`` to every row of ``X`` (vectorized; used to check and brute-force): in
    [0, 1]; with ``cost`` ((J, 2) weights of each raw feature's increase and decrease, ``envs.rules``) in
    [0, max(1, largest weight)]."""
    raws = distance_features(schema)
    x_hat = np.asarray(x_hat, float)
    W = None if cost is None else directions(raws, x_hat, X, np.asarray(cost, float))
    return mix(deltas(raws, x_hat, X), norm_weights(norm, len(raws)), W)
