"""SMT backend of MACE (paper §4.1, Algorithm 1; formulae of §4.1–§4.2 and Appendix A) with z3.

Characteristic formulae: a tree as nested If over its splits (a forest sums them), logistic
regression as a linear inequality, a ReLU MLP with If(z > 0, z, 0) per neuron; the distance of
Eq. 3 with If-based |.| and 1[changed], linf through an upper-bounding variable; plausibility and
l0 diversity clauses. Real variables for continuous columns, Int for integer-coded ones (binary
columns are 0/1 Ints). Algorithm 1 runs a binary search on the distance threshold with one z3
Solver and push/pop per step, keeping delta_min (last UNSAT threshold) and the best verified point.

The formula is the relaxed reading of ``domain.py`` (splits exactly as sklearn reads them, the
float64 gap between U and L excluded; acceptance score >= 0, a single tree per leaf), so every
UNSAT threshold is a true lower bound in exact rational arithmetic. A SAT point that does not
verify (a tie, or a point on the boundary that ``repair`` cannot nudge) is replaced by the robust
reading's point at the same threshold (score >= margin, one more check). The search stops when
the best verified distance is within max(rel_tol·d, epsilon) of the bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from envs.models import LinearModel, MLPModel, Tree, TreeEnsemble
from envs.optional import require
from solvers.mace.domain import Instance, Outcome, preactivation_bounds

try:
    import z3
except ImportError:  # the smt extra: this module still imports; Z3Backend names the extra on use
    z3 = None

SMALL_DOMAIN = 64  # integer columns with at most this many values + 1 are encoded by enumeration


def _q(v: float) -> z3.ArithRef:
    return z3.RealVal(repr(float(v)))  # shortest decimal that reads back as the same float


class Z3Backend:
    """The formula of one instance; ``minimize`` is Algorithm 1 over it."""

    def __init__(self, inst: Instance) -> None:
        if z3 is None:
            require("z3", "MACE backend: 'z3'")
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
        if inst.rules is not None:
            self._rules()
        self.score, self.robust = self._score()
        self.s.add(self.score >= (1 if inst.single_tree() else 0))
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

    def _rules(self) -> None:
        """The world's rules grounded on the agent (``envs.rules``), in their relaxed reading (every point the
        shared checker accepts satisfies it, so an UNSAT threshold stays a lower bound): each clause an Or
        of Ands of ``a·x <= r``; a rule no point of the box keeps makes the formula UNSAT."""
        inst = self.inst
        lo, hi, scale = inst.lower, inst.upper, inst.scales()
        clauses, dead = inst.rules.prune(lo, hi, scale, None)
        if dead is not None:
            self.s.add(z3.BoolVal(False))
            return
        for cl in clauses:
            self.s.add(z3.Or([z3.And([z3.Sum([_q(a) * self.xr[c] for c, a in zip(q.cols, q.coefs, strict=True)])
                                      <= _q(q.rhs_for(lo, hi, scale, None)) for q in dj])
                              for dj in cl.disjuncts]))

    # -- model formulae
    def _left(self, c: int, limits: tuple[float, float]) -> z3.BoolRef:
        u, lo = self.inst.split(c, limits)
        key = (c, u)
        if key not in self.splits:
            if self.inst.integral[c]:
                self.splits[key] = self.xr[c] <= int(u)
            else:
                self.splits[key] = self.xr[c] <= _q(u)
                self.s.add(z3.Or(self.xr[c] <= _q(u), self.xr[c] >= _q(lo)))  # no float64 lies between
        return self.splits[key]

    def _tree(self, tree: Tree, single: bool, k: int = 0) -> z3.ArithRef:
        if tree.left[k] < 0:
            return z3.RealVal(int(tree.p1[k] > tree.p0[k])) if single else _q(tree.p1[k] - tree.p0[k])
        c = int(tree.feature[k])
        U, L = tree.limits()
        return z3.If(self._left(c, (U[k], L[k])), self._tree(tree, single, int(tree.left[k])),
                     self._tree(tree, single, int(tree.right[k])))

    def _score(self) -> tuple[z3.ArithRef, z3.BoolRef | None]:
        """(score, robust acceptance): the relaxed reading is score >= 0 (a single tree: its leaf's
        verdict >= 1, exact, no robust variant); the robust one score >= margin."""
        m, margin = self.inst.model, _q(self.inst.margin)
        if isinstance(m, TreeEnsemble):
            if m.boosted:
                raise ValueError("backend: 'z3' does not support boosted models; use backend='milp'")
            T = len(m.trees)
            score = z3.Sum([self._tree(t, T == 1) for t in m.trees])
            return score, None if T == 1 else score >= T * margin  # the sum of T trees' P(1) - P(0)
        if isinstance(m, LinearModel):
            score = z3.Sum([_q(w) * x for w, x in zip(m.w, self.xr, strict=True) if w != 0] + [_q(m.b)])
            return score, score >= margin
        if isinstance(m, MLPModel):
            hp = self.xr
            bounds = preactivation_bounds(m, self.inst.lower, self.inst.upper)
            for (W, b), (z_lo, z_hi) in zip(zip(m.weights[:-1], m.biases[:-1], strict=True), bounds, strict=True):
                z = [z3.Sum([_q(W[i, k]) * hp[i] for i in range(W.shape[0]) if W[i, k] != 0] + [_q(b[k])])
                     for k in range(W.shape[1])]
                hp = [z3.RealVal(0) if z_hi[k] <= 0 else z[k] if z_lo[k] >= 0 else z3.If(z[k] > 0, z[k], 0)
                      for k in range(W.shape[1])]
            W, b = m.weights[-1][:, 0], m.biases[-1][0]
            score = z3.Sum([_q(w) * hk for w, hk in zip(W, hp, strict=True) if w != 0] + [_q(b)])
            return score, score >= margin
        raise ValueError(f"model: MACE has no formula for {type(m).__name__}")

    # -- Eq. 3
    def _distance(self) -> z3.ArithRef:
        inst = self.inst
        a, b, g = inst.weights
        W = np.ones((len(inst.raws), 2)) if inst.cost is None else inst.cost  # rules' cost weights (up, down)
        d0, d1 = [], []
        m = z3.Real("dist_inf") if g > 0 else None
        for j, r in enumerate(inst.raws):
            wu, wd = (_q(v) for v in W[j])
            cols = list(r.columns)
            if r.kind == "group":  # any change of a categorical feature costs its "up" weight
                k = cols[int(np.argmax(inst.x_hat[cols]))]
                delta = wu * (1 - self.xr[k])
                changed = delta
            elif r.kind == "numeric" and r.span > 0:
                c = cols[0]
                diff = self.xr[c] - _q(inst.x_hat[c])
                delta = z3.If(diff >= 0, wu * diff, -wd * diff) / _q(r.span)
                changed = z3.If(diff == 0, z3.RealVal(0), z3.If(diff > 0, wu, wd))
            elif r.kind == "numeric":
                continue
            else:  # binary (0 -> 1 is up), nominal (any change: up): w·1[changed]
                c = cols[0]
                w = wu if r.kind == "nominal" or inst.x_hat[c] == 0 else wd
                changed = z3.If(self.xr[c] == _q(inst.x_hat[c]), z3.RealVal(0), w)
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

    def _sat_point(self, deadline: float, validate: Callable[[np.ndarray], np.ndarray | None],
                   extra: list[z3.BoolRef]) -> tuple[z3.CheckSatResult, np.ndarray | None, int, float]:
        """Check the relaxed formula (with ``extra``); on SAT, the verified point, else the robust one.

        Returns (relaxed result, verified point or None, calls made, the relaxed point's distance).
        """
        self.s.push()
        self.s.add(*extra)
        res, calls, point, d = self._check(deadline), 1, None, np.inf
        if res == z3.sat:
            x = self._point()
            d = float(self.inst.distance(x[None])[0])
            point = validate(x)
            if point is None and self.robust is not None:
                self.s.add(self.robust)
                calls += 1
                if self._check(deadline) == z3.sat:
                    point = validate(self._point())
        self.s.pop()
        return res, point, calls, d

    def minimize(self, time_limit: float, validate: Callable[[np.ndarray], np.ndarray | None]) -> Outcome:
        """Algorithm 1: binary search on the distance threshold until the certificate's tolerance.

        ``validate`` turns a SAT point into a verified counterfactual (or None). The search bisects
        [delta_min, the least relaxed SAT distance], except that after an UNSAT answer it asks
        d_best - tolerance when that lies above the midpoint: near the optimum one UNSAT answer
        there certifies, where bisection would take log2(1 / rel_tol) hard steps (while SAT points
        come back just below the threshold asked, so asking it first from afar would crawl down by
        a tolerance per call). It stops when the best verified
        distance d has d - delta_min <= max(rel_tol·d, epsilon) (certified), or when the relaxed
        interval is a quarter of that tolerance wide and the verified point still lies above it.
        """
        inst, deadline = self.inst, time.perf_counter() + time_limit
        dist = inst.distance
        res, best, calls, hi = self._sat_point(deadline, validate, [])  # is there any counterfactual at all?
        if res == z3.unsat:
            return Outcome(None, "infeasible", np.inf, calls)
        if res != z3.sat:
            return Outcome(None, "unknown", 0.0, calls, why="time limit before any counterfactual was found")
        if best is not None:
            hi = min(hi, float(dist(best[None])[0]))
        lo, last_unsat = 0.0, False
        while best is None or not inst.certified(float(dist(best[None])[0]), lo):
            if hi - lo <= inst.tolerance(hi) / 4:
                break
            mid = (lo + hi) / 2
            if best is not None and last_unsat:  # then d_best is likely near-optimal: one UNSAT at
                d_best = float(dist(best[None])[0])  # d_best - tolerance certifies it at once
                target = d_best - inst.tolerance(d_best)
                mid = target if mid < target < hi else mid
            res, point, n, d = self._sat_point(deadline, validate, [self.dist <= _q(mid)])
            calls += n
            last_unsat = res == z3.unsat
            if res == z3.unsat:
                lo = inst.round_bound(mid)
            elif res == z3.sat:
                hi = min(mid, d)
                if point is not None and (best is None or dist(point[None])[0] < dist(best[None])[0]):
                    best = point
                    hi = min(hi, float(dist(best[None])[0]))  # a verified point is a relaxed one too
            else:
                return Outcome(best, "feasible" if best is not None else "unknown", lo, calls, why="time limit")
        if best is None:
            return Outcome(None, "unknown", lo, calls, why="points with score >= 0 exist but none verified, "
                                                           f"nor any with score >= {inst.margin:g}")
        status = "optimal" if inst.certified(float(dist(best[None])[0]), lo) else "feasible"
        return Outcome(best, status, lo, calls)
