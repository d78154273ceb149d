"""SMT backend of MACE (paper §4.1, Algorithm 1; formulae of §4.1–§4.2 and Appendix A) with z3.

Characteristic formulae: a tree as nested If over its splits (a forest sums them), logistic
regression as a linear inequality, a ReLU MLP with If(z > 0, z, 0) per neuron; the distance of
Eq. 3 with If-based |.| and 1[changed], linf through an upper-bounding variable; plausibility and
l0 diversity clauses. Real variables for continuous columns, Int for integer-coded ones (binary
columns are 0/1 Ints). Algorithm 1 runs a binary search on the distance threshold with one z3
Solver and push/pop per step, keeping delta_min (last UNSAT threshold) and the best SAT point.
Strict comparisons use the robust reading of ``domain.py`` (right iff x >= t + eta·R,
accept iff score >= margin) so both backends solve the same problem.
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
import z3

from envs.models import LinearModel, MLPModel, Tree, TreeEnsemble
from solvers.mace.domain import Instance, Outcome, preactivation_bounds

SMALL_DOMAIN = 64  # integer columns with at most this many values + 1 are encoded by enumeration


def _q(v: float) -> z3.ArithRef:
    return z3.RealVal(repr(float(v)))  # shortest decimal that reads back as the same float


class Z3Backend:
    """The formula of one instance; ``minimize`` is Algorithm 1 over it."""

    def __init__(self, inst: Instance) -> None:
        self.inst = inst
        self.s = z3.SolverFor("QF_LIRA")  # the logic of every formula here; faster than auto-detection
        self.s.set("random_seed", inst.seed)
        n = len(inst.x_hat)
        # Integer columns with a small domain are Reals restricted to their values: z3 then case-splits
        # in its SAT core instead of branch-and-bound over mixed integer/real arithmetic (much faster).
        self.small = [bool(inst.integral[c]) and inst.upper[c] - inst.lower[c] <= SMALL_DOMAIN for c in range(n)]
        self.v = [z3.Int(f"x{c}") if inst.integral[c] and not self.small[c] else z3.Real(f"x{c}") for c in range(n)]
        self.xr = [z3.ToReal(v) if z3.is_int(v) else v for v in self.v]
        self.splits: dict[tuple[int, float], z3.BoolRef] = {}
        self._domain()
        self.s.add(self._accepts())
        self.dist = self._distance()

    def _domain(self) -> None:
        inst = self.inst
        for c, v in enumerate(self.v):
            lo, hi = inst.lower[c], inst.upper[c]
            if self.small[c]:
                self.s.add(z3.Or([v == int(k) for k in range(int(lo), int(hi) + 1)]))
            else:
                bound = (lambda t: int(t)) if inst.integral[c] else _q  # noqa: E731
                self.s.add(v == bound(lo)) if lo == hi else self.s.add(v >= bound(lo), v <= bound(hi))
        for r in inst.raws:
            if r.kind == "group":
                self.s.add(z3.Sum([self.xr[c] for c in r.columns]) == 1)

    # -- model formulae
    def _left(self, c: int, t: float) -> z3.BoolRef:
        u, lo = self.inst.split(c, t)
        key = (c, u)
        if key not in self.splits:
            if self.inst.integral[c]:
                self.splits[key] = self.xr[c] <= int(u)
            else:
                self.splits[key] = self.xr[c] <= _q(u)
                self.s.add(z3.Or(self.xr[c] <= _q(u), self.xr[c] >= _q(lo)))  # no point in the sliver
        return self.splits[key]

    def _tree(self, tree: Tree, k: int = 0) -> z3.ArithRef:
        if tree.left[k] < 0:
            return _q(tree.p1[k])
        c, t = int(tree.feature[k]), float(tree.threshold[k])
        return z3.If(self._left(c, t), self._tree(tree, int(tree.left[k])), self._tree(tree, int(tree.right[k])))

    def _accepts(self) -> z3.BoolRef:
        m, margin = self.inst.model, _q(self.inst.margin)
        if isinstance(m, TreeEnsemble):
            T = len(m.trees)
            return z3.Sum([self._tree(t) for t in m.trees]) >= T * (z3.RealVal(Fraction(1, 2)) + margin)
        if isinstance(m, LinearModel):
            return z3.Sum([_q(w) * x for w, x in zip(m.w, self.xr, strict=True) if w != 0] + [_q(m.b)]) >= margin
        if isinstance(m, MLPModel):
            hp = self.xr
            bounds = preactivation_bounds(m, self.inst.lower, self.inst.upper)
            for (W, b), (z_lo, z_hi) in zip(zip(m.weights[:-1], m.biases[:-1], strict=True), bounds, strict=True):
                z = [z3.Sum([_q(W[i, k]) * hp[i] for i in range(W.shape[0]) if W[i, k] != 0] + [_q(b[k])])
                     for k in range(W.shape[1])]
                hp = [z3.RealVal(0) if z_hi[k] <= 0 else z[k] if z_lo[k] >= 0 else z3.If(z[k] > 0, z[k], 0)
                      for k in range(W.shape[1])]
            W, b = m.weights[-1][:, 0], m.biases[-1][0]
            return z3.Sum([_q(w) * hk for w, hk in zip(W, hp, strict=True) if w != 0] + [_q(b)]) >= margin
        raise ValueError(f"model: MACE has no formula for {type(m).__name__}")

    # -- Eq. 3
    def _distance(self) -> z3.ArithRef:
        inst = self.inst
        a, b, g = inst.weights
        d0, d1 = [], []
        m = z3.Real("dist_inf") if g > 0 else None
        for r in inst.raws:
            cols = list(r.columns)
            if r.kind == "group":
                k = cols[int(np.argmax(inst.x_hat[cols]))]
                delta = 1 - self.xr[k]
                changed = delta
            elif r.kind == "numeric" and r.span > 0:
                c = cols[0]
                diff = self.xr[c] - _q(inst.x_hat[c])
                delta = z3.If(diff >= 0, diff, -diff) / _q(r.span)
                changed = z3.If(diff == 0, z3.RealVal(0), z3.RealVal(1))
            elif r.kind == "numeric":
                continue
            else:  # binary, nominal: 1[changed]
                c = cols[0]
                changed = z3.If(self.xr[c] == _q(inst.x_hat[c]), z3.RealVal(0), z3.RealVal(1))
                delta = changed
            d0.append(changed)
            d1.append(delta)
            if m is not None:
                self.s.add(m >= delta)  # m >= max_j delta_j is enough for "d <= threshold"
        terms = []
        if a > 0 and d0:
            terms.append(_q(a) * z3.Sum(d0))
        if b > 0 and d1:
            terms.append(_q(b) * z3.Sum(d1))
        if m is not None:
            terms.append(_q(g) * m)
        return z3.Sum(terms) if terms else z3.RealVal(0)

    def add_diversity(self, prev: np.ndarray) -> None:
        inst, ors = self.inst, []
        for r in inst.raws:
            cols = list(r.columns)
            if r.kind == "group":
                ors.append(self.xr[cols[int(np.argmax(prev[cols]))]] == 0)
                continue
            c = cols[0]
            if inst.integral[c]:
                ors.append(self.xr[c] != int(prev[c]))
            else:
                gap = inst.gap(c)
                ors += [self.xr[c] >= _q(prev[c] + gap), self.xr[c] <= _q(prev[c] - gap)]
        self.s.add(z3.Or(ors) if ors else z3.BoolVal(False))

    def _point(self) -> np.ndarray:
        mod = self.s.model()
        out = []
        for v in self.v:
            val = mod.eval(v, model_completion=True)
            out.append(float(val.as_long()) if z3.is_int_value(val) else float(val.as_fraction()))
        return np.asarray(out)

    def _check(self, deadline: float) -> z3.CheckSatResult:
        left = deadline - time.perf_counter()
        if left <= 0:
            return z3.unknown
        self.s.set("timeout", max(1, int(left * 1000)))
        return self.s.check()

    def minimize(self, time_limit: float) -> Outcome:
        """Algorithm 1: binary search on the distance threshold with accuracy epsilon."""
        deadline = time.perf_counter() + time_limit
        res, calls = self._check(deadline), 1  # is there any counterfactual at all?
        if res == z3.unsat:
            return Outcome(None, "infeasible", np.inf, calls)
        if res != z3.sat:
            return Outcome(None, "unknown", 0.0, calls)
        best = self._point()
        d_min, d_max = 0.0, float(self.inst.distance(best[None, :])[0])
        while d_max - d_min > self.inst.epsilon:
            mid = (d_min + d_max) / 2
            self.s.push()
            self.s.add(self.dist <= _q(mid))
            res = self._check(deadline)
            calls += 1
            if res == z3.sat:
                best = self._point()
                d_max = min(mid, float(self.inst.distance(best[None, :])[0]))
            self.s.pop()
            if res == z3.unsat:
                d_min = mid
            elif res != z3.sat:
                return Outcome(best, "feasible", d_min, calls)
        return Outcome(best, "optimal", d_min, calls)
