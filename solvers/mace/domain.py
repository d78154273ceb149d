"""The MACE problem of one agent, shared by both backends (paper §4.1–§4.2).

Holds the plausibility box (type and range consistency, one-hot validity, actionability: immutable
and monotone features), the exact reading of tree splits, the certificate's tolerance, and the
numpy checks that every returned counterfactual must pass (coverage, paper §5).

Two readings of the model, so that the certificate is conservative by construction:

- *relaxed* (the lower bound): splits are read exactly as scikit-learn reads them
  (``envs.models.split_limits``: left iff x <= U, right iff x >= L, the float64 neighbours around
  sklearn's float32 test; an imported model's float64 split points likewise) and acceptance as
  ``score >= 0``, which contains every accepted point (``score > 0``); ``score >= -tolerance`` for
  a model whose library may decide otherwise within its ``tolerance`` (XGBoost). Each backend's
  bound on this reading bounds every true counterfactual. A single tree's acceptance is read per
  leaf (exactly: no tie is possible).
- *robust* (a fallback for the point): acceptance as ``score >= margin``. It is used only when the
  relaxed optimum is not a counterfactual (a tie of a forest's trees, or a point on the decision
  boundary of LR/MLP that ``repair`` cannot nudge across cheaply).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

import numpy as np

from envs.models import LinearModel, MLPModel, TreeEnsemble, WhiteBoxModel
from envs.rules import GroundRules
from envs.schema import FeatureSchema
from solvers.mace.distance import DistanceFeature, deltas, directions, mix

Status = Literal["optimal", "feasible", "infeasible", "unknown"]
Oracle = Callable[[np.ndarray], np.ndarray]  # encoded rows -> bool acceptance by the real model


@dataclass
class Instance:
    """Everything a backend needs to encode one nearest-counterfactual problem."""

    schema: FeatureSchema
    model: WhiteBoxModel
    x_hat: np.ndarray  # the factual, encoded row
    raws: tuple[DistanceFeature, ...]
    weights: tuple[float, float, float]  # (alpha, beta, gamma) of Eq. 3
    lower: np.ndarray  # per-column box after plausibility (immutable fixed, monotone one-sided)
    upper: np.ndarray
    integral: np.ndarray  # bool per column: integer-valued (binary, ordinal, integer, categorical code)
    epsilon: float  # absolute floor of the certificate's tolerance
    rel_tol: float = 1e-3  # relative tolerance: certified iff d - delta_min <= max(rel_tol * d, epsilon)
    margin: float = 1e-6  # robust acceptance: score >= margin (LR/MLP answers without an oracle need it)
    diversity_gap: float = 1e-5  # "x_j != x^i_j" for a continuous column means |x_j - x^i_j| >= gap·R
    previous: list[np.ndarray] = field(default_factory=list)  # earlier counterfactuals (diversity)
    oracle: Oracle | None = None  # the real model (e.g. the sklearn estimator); verifies when given
    seed: int = 0
    rules: GroundRules | None = None  # the world's rules grounded on x_hat (envs.rules); the box already holds
    # their single-column bounds (a valid relaxation), the MILP encodes the rest (solvers/mace/rules_milp.py)
    cost: np.ndarray | None = None  # (J, 2) cost weights of each raw feature's increase and decrease (None: 1)
    blocked: str | None = None  # a rule that no point of the box keeps (then there is no recourse)

    def scale(self, c: int) -> float:
        """R of a column from the schema's bounds (1 where it is 0 or unbounded), scaling gaps."""
        f = self.schema.features[c]
        r = f.upper - f.lower
        return float(r) if np.isfinite(r) and r > 0 else 1.0

    def split(self, c: int, limits: tuple[float, float]) -> tuple[float, float]:
        """(U, L): a tree test on column c goes left iff x_c <= U and right iff x_c >= L, exactly.

        ``limits`` are the float64 limits of the threshold (``Tree.limits``); an integer column
        goes left iff x_c <= floor(U).
        """
        u, lo = float(limits[0]), float(limits[1])
        if self.integral[c]:
            u = float(math.floor(u))
            return u, u + 1.0
        return u, lo

    def gap(self, c: int) -> float:
        """The smallest change of column c that counts as "different" for diversity."""
        return 1.0 if self.integral[c] else self.diversity_gap * self.scale(c)

    def distance(self, X: np.ndarray) -> np.ndarray:
        W = None if self.cost is None else directions(self.raws, self.x_hat, X, self.cost)
        return mix(deltas(self.raws, self.x_hat, X), self.weights, W)

    def scales(self) -> np.ndarray:
        """``scale`` of every column."""
        return np.array([self.scale(c) for c in range(len(self.x_hat))])

    def tolerance(self, d: float) -> float:
        """The certificate's allowed gap at distance d: max(rel_tol·d, epsilon)."""
        return max(self.rel_tol * d, self.epsilon)

    def round_bound(self, lb: float) -> float:
        """A lower bound raised to the next attainable distance where distances are discrete.

        With only the l0 term (beta = gamma = 0) every distance is alpha times a sum of cost weights (1
        without rules' weights); where every weight is a whole multiple of a unit u (the gcd of the weights
        as fractions: 0.5 for weights 0.5, 1, 1.5, 2), every distance is alpha·u·n for an integer n, so
        d >= lb implies d >= alpha·u·ceil(lb / (alpha·u)); the 1e-9 keeps float noise from jumping a level.
        """
        a, b, g = self.weights
        if b == 0 and g == 0 and a > 0 and np.isfinite(lb):
            unit = self.weight_unit()
            if unit is not None:
                step = a * unit
                return step * math.ceil(lb / step - 1e-9)
        return lb

    def weight_unit(self) -> float | None:
        """The gcd of the cost weights as exact fractions (1 without weights), or None where a weight is not
        a fraction with a denominator of at most 1000 (then no rounding)."""
        if self.cost is None:
            return 1.0
        fracs = []
        for w in np.unique(np.asarray(self.cost, float)):
            f = Fraction(float(w)).limit_denominator(1000)
            if w <= 0 or abs(float(f) - w) > 1e-12 * max(1.0, w):
                return None
            fracs.append(f)
        num = math.gcd(*(f.numerator for f in fracs))
        den = math.lcm(*(f.denominator for f in fracs))
        return float(Fraction(num, den))

    def certified(self, d: float, delta_min: float) -> bool:
        return d - delta_min <= self.tolerance(d)

    def single_tree(self) -> bool:
        """A single tree: acceptance is a property of the leaf, read exactly (no margin, no tie)."""
        return isinstance(self.model, TreeEnsemble) and len(self.model.trees) == 1 and not self.model.boosted


@dataclass
class Outcome:
    """What a backend found: a candidate counterfactual and the certificate."""

    x: np.ndarray | None
    status: Status
    delta_min: float  # every counterfactual has distance >= delta_min
    calls: int  # oracle calls (SAT checks, or MILP solves)
    cells: dict[int, tuple[float, float]] = field(default_factory=dict)  # column -> the split cell chosen
    why: str = ""  # why there is no point, where that is not a proof of infeasibility; or why not proven optimal
    proof: str = ""  # how optimality was proven (empty: not proven)


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


def exact_score(model: WhiteBoxModel, x: np.ndarray) -> Fraction | None:
    """The white box's acceptance score at ``x`` in exact rational arithmetic (LR and MLP; None for trees).

    Every float64 weight and input is a rational number, so this is the score without round-off:
    a second reading of the witness that does not share numpy's (or the solver's) floating point.
    """
    xs = [Fraction(float(v)) for v in np.asarray(x, float).reshape(-1)]
    if isinstance(model, MLPModel):
        h = xs
        layers = list(zip(model.weights, model.biases, strict=True))
        for li, (W, b) in enumerate(layers):
            Wf = [[Fraction(float(v)) for v in row] for row in W]
            z = [sum((h[i] * Wf[i][k] for i in range(len(h)) if Wf[i][k]), Fraction(float(b[k])))
                 for k in range(W.shape[1])]
            h = z if li == len(layers) - 1 else [max(v, Fraction(0)) for v in z]
        return h[0]
    if isinstance(model, LinearModel):
        return sum((xi * Fraction(float(w)) for xi, w in zip(xs, model.w, strict=True) if w), Fraction(float(model.b)))
    return None


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


def accepted(inst: Instance, X: np.ndarray) -> np.ndarray:
    """Acceptance as verified: the real model when given, else the white box.

    A bit-exact white box (trees, forests) is read as it is; an LR/MLP copy (float64 round-off
    apart from sklearn) must clear ``margin`` so that sklearn surely agrees, and a model with a
    ``tolerance`` (XGBoost) ``margin + tolerance``.
    """
    X = np.atleast_2d(X)
    if inst.oracle is not None:
        return np.asarray(inst.oracle(X), bool).reshape(-1)
    return _white_box_accepts(inst, X)


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
    broken = inst.rules.violation(x) if inst.rules is not None else None
    if broken is not None:
        out.append(f"it breaks rule {broken!r}")
    if not accepted(inst, x)[0]:
        out.append("the model does not accept it" + (" (the real model)" if inst.oracle is not None else ""))
    for i, prev in enumerate(inst.previous):
        if not np.any(deltas(inst.raws, prev, x[None, :])):
            out.append(f"it equals earlier counterfactual {i} on every feature")
    return out


def clean(inst: Instance, x: np.ndarray, cells: dict[int, tuple[float, float]] | None = None) -> np.ndarray:
    """Remove solver round-off: near-unchanged columns snapped back, integers rounded, one-hot argmax,
    clipped to the box, then into the split cells the solver chose (its binaries are the decision;
    x may miss a cell by the solver's feasibility tolerance)."""
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
    x = np.clip(x, inst.lower, inst.upper)
    for c, (lo, hi) in (cells or {}).items():
        x[c] = min(max(x[c], lo), hi)
    return x


def repair(inst: Instance, x: np.ndarray, actionable: bool, budget: float) -> np.ndarray | None:
    """Nudge a boundary point of a continuous model (LR, MLP) across the decision boundary.

    The relaxed optimum of a continuous model lies on score = 0, where acceptance is a coin toss.
    Moving one continuous column by the step that lifts the score to 2·margin (its slope measured
    by a finite difference, clipped to the box) costs about margin / slope; the cheapest move that
    verifies and costs at most ``budget`` more distance is returned, else None (the caller then
    solves the robust reading).
    """
    if isinstance(inst.model, TreeEnsemble):
        return None  # piecewise constant: no small move changes the score
    s0 = float(inst.model.score(x[None])[0])
    d0 = float(inst.distance(x[None])[0])
    cols = [c for c in range(len(x)) if not inst.integral[c] and inst.upper[c] > inst.lower[c]]
    if not cols:
        return None
    steps = np.array([1e-7 * inst.scale(c) for c in cols])
    probe = np.repeat(x[None], len(cols), axis=0)
    probe[np.arange(len(cols)), cols] += steps
    slope = (inst.model.score(probe) - s0) / steps  # d score / d x_c (one-sided)
    need = 2.0 * inst.margin - s0
    cand = []
    for k, c in enumerate(cols):
        if slope[k] == 0:
            continue
        for grow in (1.0, 4.0, 16.0):
            y = x.copy()
            y[c] = np.clip(x[c] + grow * need / slope[k], inst.lower[c], inst.upper[c])
            cand.append(y)
    if not cand:
        return None
    C = np.array(cand)
    ok = accepted(inst, C) & (inst.distance(C) <= d0 + budget)
    for k in np.argsort(inst.distance(C)):
        if ok[k] and not problems(inst, C[k], actionable):
            return C[k]
    return None


def _white_box_accepts(inst: Instance, X: np.ndarray) -> np.ndarray:
    """``accepted`` without the oracle: cheap enough for a search over many candidate rows."""
    if inst.model.exact:
        return inst.model.predict(X)
    return inst.model.score(X) >= inst.margin + float(getattr(inst.model, "tolerance", 0.0))


def _valid_rows(inst: Instance, X: np.ndarray) -> np.ndarray:
    """Per row: inside the plausibility box, keeping the world's rules, accepted by the white box, and unlike
    earlier answers."""
    ok = np.all((X >= inst.lower) & (X <= inst.upper), axis=1) & _white_box_accepts(inst, X)
    if inst.rules is not None and ok.any():
        idx = np.flatnonzero(ok)
        ok[idx] = inst.rules.compiled.holds(inst.x_hat, X[idx])
    for prev in inst.previous:
        ok &= deltas(inst.raws, prev, X).any(axis=1)
    return ok


def _cell_points(inst: Instance, c: int, a: float, b: float) -> list[float]:
    """The point nearest x^_c of every split cell of column c that meets [a, b] (tree models)."""
    if not isinstance(inst.model, TreeEnsemble):
        return []
    out = []
    for tree in inst.model.trees:
        U, L = tree.limits()
        inner = (tree.left >= 0) & (tree.feature == c)
        for k in np.nonzero(inner)[0]:
            u, lo = inst.split(c, (U[k], L[k]))
            out += [v for v in (u, lo) if a <= v <= b]
    return out


def descend(inst: Instance, x: np.ndarray, actionable: bool) -> np.ndarray:
    """Move a verified counterfactual's features back toward x^ while it stays one, feature by feature.

    z3's SAT points lie anywhere below the threshold asked; this cheap coordinate search (a grid of
    1/1024 of each move, and every split cell's edge for trees) makes the bisection's upper end
    tight, so far fewer SAT calls are spent above the optimum. The result is re-verified in full.
    """
    best = x.copy()
    order = np.argsort(-deltas(inst.raws, inst.x_hat, best[None])[0])
    for j in order:
        r = inst.raws[j]
        cols = list(r.columns)
        if np.array_equal(best[cols], inst.x_hat[cols]):
            continue
        if r.kind == "numeric":
            c = cols[0]
            a, b = sorted((inst.x_hat[c], best[c]))
            vals = np.concatenate([inst.x_hat[c] + (best[c] - inst.x_hat[c]) * np.linspace(0, 1, 1025),
                                   _cell_points(inst, c, a, b)])
            vals = np.unique(np.round(vals) if inst.integral[c] else vals)
            C = np.repeat(best[None], len(vals), axis=0)
            C[:, c] = vals
        else:  # binary, nominal, one-hot group: back to the factual's value
            C = best[None].copy()
            C[0, cols] = inst.x_hat[cols]
        ok = _valid_rows(inst, C)
        if ok.any():
            d = inst.distance(C[ok])
            if d.min() < inst.distance(best[None])[0]:
                best = C[ok][int(np.argmin(d))]
    return best if not problems(inst, best, actionable) else x


def validate(inst: Instance, x: np.ndarray, actionable: bool, cells: dict[int, tuple[float, float]] | None = None,
             budget: float = 0.0) -> tuple[np.ndarray | None, str]:
    """(the cleaned counterfactual or None, why not): clean, check, and repair a boundary point."""
    x = clean(inst, x, cells)
    issues = problems(inst, x, actionable)
    if not issues:
        return x, ""
    if issues == [p for p in issues if p.startswith("the model does not accept")]:
        y = repair(inst, x, actionable, budget)
        if y is not None:
            return y, ""
    return None, "; ".join(issues)
