"""MACE distance (paper §4.2, Eq. 3): per-feature normalized deltas mixed as a0·l0 + b·l1 + g·linf.

Raw features come from the schema: the columns of a one-hot group (``Feature.group``) form ONE
categorical feature; every other column is its own feature. The normalized delta is
|x_j - x^_j| / R_j for numeric, ordinal and integer features (R_j = upper - lower; a feature with
R_j = 0 cannot move and has delta 0) and 1[changed] for binary and categorical features, so every
delta lies in [0, 1]. The distance is d = alpha·||delta||_0 + beta·||delta||_1 + gamma·||delta||_inf
with J·(alpha + beta) + gamma = 1, which keeps d in [0, 1] (max ||.||_0 = max ||.||_1 = J,
max ||.||_inf = 1; the footnote of Eq. 3 prints the same condition with J dividing instead).
The named norms are "zero" (d = ||delta||_0 / J), "one" (||delta||_1 / J) and "infty" (||delta||_inf).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from envs.schema import FeatureSchema

DistanceKind = Literal["numeric", "binary", "nominal", "group"]
Norm = str | tuple[float, float, float]
NORMS = ("zero", "one", "infty")


@dataclass(frozen=True)
class DistanceFeature:
    """One feature of the distance: its encoded columns and how its delta is measured."""

    name: str  # the column name, or the one-hot group name
    kind: DistanceKind  # numeric: |dx|/R; binary/nominal/group: 1[changed]
    columns: tuple[int, ...]  # encoded column indices (several only for a group)
    span: float  # R_j = upper - lower for numeric features, 1 for the others


def distance_features(schema: FeatureSchema) -> tuple[DistanceFeature, ...]:
    """The raw features of a schema, in order of their first column."""
    out: list[DistanceFeature] = []
    groups: dict[str, list[int]] = {}
    for c, f in enumerate(schema.features):
        if f.group is not None:
            if f.group not in groups:
                groups[f.group] = []
                out.append(DistanceFeature(f.group, "group", (), 1.0))  # columns filled below
            groups[f.group].append(c)
        elif f.kind == "binary":
            out.append(DistanceFeature(f.name, "binary", (c,), 1.0))
        elif f.kind == "categorical":
            out.append(DistanceFeature(f.name, "nominal", (c,), 1.0))
        else:
            out.append(DistanceFeature(f.name, "numeric", (c,), float(f.upper - f.lower)))
    return tuple(DistanceFeature(r.name, r.kind, tuple(groups[r.name]), 1.0) if r.kind == "group" else r for r in out)


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


def mix(D: np.ndarray, weights: tuple[float, float, float]) -> np.ndarray:
    """Eq. 3 on a matrix of deltas."""
    a, b, g = weights
    return a * (D != 0).sum(axis=1) + b * D.sum(axis=1) + g * (D.max(axis=1) if D.shape[1] else 0.0)


def distance(schema: FeatureSchema, x_hat: np.ndarray, X: np.ndarray, norm: Norm = "one") -> np.ndarray:
    """MACE distance in [0, 1] from ``x_hat`` to every row of ``X`` (vectorized; used to check and brute-force)."""
    raws = distance_features(schema)
    return mix(deltas(raws, np.asarray(x_hat, float), X), norm_weights(norm, len(raws)))
