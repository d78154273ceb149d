"""The MACE problem of one agent, shared by both backends (paper §4.1–§4.2).

Holds the plausibility box (type and range consistency, one-hot validity, actionability: immutable
and monotone features), the robust reading of strict comparisons that both backends use, and the
numpy checks that every returned counterfactual must pass (coverage, paper §5).

Robust semantics: an exact solver can return a point on the boundary of a strict inequality
("go right iff x_f > t", "accept iff score > 0") that float arithmetic then reads the other way.
Both backends therefore require "right" as x_f >= t + eta·R_f (integer columns: x_f >= floor(t) + 1)
and acceptance as score >= margin. This excludes an open sliver of width eta·R_f around each
threshold; the distance it can cost is at most about eta (documented in the report).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from envs.models import MLPModel, WhiteBoxModel
from envs.schema import FeatureSchema
from solvers.mace.distance import RawFeature, deltas, mix

Status = Literal["optimal", "feasible", "infeasible", "unknown"]


@dataclass
class Instance:
    """Everything a backend needs to encode one nearest-counterfactual problem."""

    schema: FeatureSchema
    model: WhiteBoxModel
    x_hat: np.ndarray  # the factual, encoded row
    raws: tuple[RawFeature, ...]
    weights: tuple[float, float, float]  # (alpha, beta, gamma) of Eq. 3
    lower: np.ndarray  # per-column box after plausibility (immutable fixed, monotone one-sided)
    upper: np.ndarray
    integral: np.ndarray  # bool per column: integer-valued (binary, ordinal, integer, categorical code)
    epsilon: float  # accuracy of the distance
    margin: float = 1e-6  # acceptance is score >= margin (strict score > 0, robustly)
    eta: float = 1e-6  # a continuous split goes right at x >= t + eta·R
    diversity_gap: float = 1e-5  # "x_j != x^i_j" for a continuous column means |x_j - x^i_j| >= gap·R
    previous: list[np.ndarray] = field(default_factory=list)  # earlier counterfactuals (diversity)
    seed: int = 0

    def scale(self, c: int) -> float:
        """R of a column from the schema's bounds (1 where it is 0 or unbounded), scaling eta and gaps."""
        f = self.schema.features[c]
        r = f.upper - f.lower
        return float(r) if np.isfinite(r) and r > 0 else 1.0

    def split(self, c: int, t: float) -> tuple[float, float]:
        """(U, L): go left iff x_c <= U, go right iff x_c >= L, for the tree test x_c <= t."""
        if self.integral[c]:
            u = float(math.floor(t))
            return u, u + 1.0
        return float(t), float(t) + self.eta * self.scale(c)

    def gap(self, c: int) -> float:
        """The smallest change of column c that counts as "different" for diversity."""
        return 1.0 if self.integral[c] else self.diversity_gap * self.scale(c)

    def distance(self, X: np.ndarray) -> np.ndarray:
        return mix(deltas(self.raws, self.x_hat, X), self.weights)


@dataclass
class Outcome:
    """What a backend found: a candidate counterfactual (unverified) and the certificate."""

    x: np.ndarray | None
    status: Status
    delta_min: float  # every counterfactual has distance >= delta_min (> for the SAT search)
    calls: int  # oracle calls (SAT checks, or 1 MILP solve)


def preactivation_bounds(model: MLPModel, lower: np.ndarray, upper: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Interval-arithmetic bounds of every hidden layer's pre-activations over the box [lower, upper].

    Neurons with upper bound <= 0 are always off and with lower bound >= 0 always on: both
    backends drop their ReLU case split; the others get big-M (MILP) or If (SMT).
    """
    out, h_lo, h_hi = [], np.asarray(lower, float), np.asarray(upper, float)
    for W, b in zip(model.weights[:-1], model.biases[:-1], strict=True):
        Wp, Wn = np.maximum(W, 0), np.minimum(W, 0)
        z_lo, z_hi = b + h_lo @ Wp + h_hi @ Wn, b + h_hi @ Wp + h_lo @ Wn
        out.append((z_lo, z_hi))
        h_lo, h_hi = np.maximum(z_lo, 0.0), np.maximum(z_hi, 0.0)
    return out


def integral_columns(schema: FeatureSchema) -> np.ndarray:
    return np.array([f.integer or f.kind in ("binary", "ordinal", "categorical") or f.group is not None
                     for f in schema.features])


def plausible_box(schema: FeatureSchema, x_hat: np.ndarray, actionable: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-column bounds: the schema's range, narrowed by mutability when ``actionable``."""
    lo, hi = schema.bounds()
    if actionable:
        mut = np.array([f.mutability for f in schema.features])
        fixed, up, down = mut == "immutable", mut == "increase", mut == "decrease"
        lo = np.where(fixed | up, np.maximum(lo, x_hat), lo)
        hi = np.where(fixed | down, np.minimum(hi, x_hat), hi)
    return lo, hi


def problems(inst: Instance, x: np.ndarray, actionable: bool) -> list[str]:
    """Why ``x`` is not a plausible, diverse counterfactual (empty when it is one)."""
    out = []
    lo, hi = inst.schema.bounds()
    if np.any(x < lo) or np.any(x > hi):
        out.append("outside the schema's bounds")
    if np.any(inst.integral & (x != np.round(x))):
        out.append("an integer column is fractional")
    for r in inst.raws:
        if r.kind == "group" and (np.sum(x[list(r.columns)]) != 1 or np.any(~np.isin(x[list(r.columns)], (0, 1)))):
            out.append(f"one-hot group {r.name!r} is not valid")
    if actionable and inst.schema.mutability_violations(inst.x_hat, x, tol=0.0)[0]:
        out.append("an immutable or monotone feature moved the wrong way")
    if not inst.model.predict(x[None, :])[0]:
        out.append("the model does not accept it")
    for i, prev in enumerate(inst.previous):
        if not np.any(deltas(inst.raws, prev, x[None, :])):
            out.append(f"it equals earlier counterfactual {i} on every feature")
    return out


def clean(inst: Instance, x: np.ndarray) -> np.ndarray:
    """Remove solver round-off: near-unchanged columns snapped back, integers rounded, one-hot argmax, clipped."""
    x = np.asarray(x, float).copy()
    tol = 1e-9 * np.array([inst.scale(c) for c in range(len(x))])
    x = np.where(np.abs(x - inst.x_hat) <= tol, inst.x_hat, x)  # l0 must not count a 1e-12 move
    x = np.where(inst.integral, np.round(x), x)
    for r in inst.raws:
        if r.kind == "group":
            cols = list(r.columns)
            k = cols[int(np.argmax(x[cols]))]
            x[cols] = 0.0
            x[k] = 1.0
    return np.clip(x, inst.lower, inst.upper)
