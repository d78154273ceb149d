"""MILP backend of MACE: the nearest counterfactual by direct minimisation with HiGHS.

Same semantics as Algorithm 1 (paper §4.1): the optimum within the certificate's tolerance
(HiGHS stops at a relative gap rel_tol or an absolute gap epsilon, both halved to leave room for
the final clean-up). HiGHS's word is not the certificate (issue 34): ``minimize(cut=...)`` re-solves
by a second route (objective cut, another seed, no presolve) and only its infeasibility proves
delta_min (``mace.py``). Tolerances are explicit (``FEAS_TOL``) and every bound is lowered by
``bound_slack``. The bound is taken on the relaxed reading (``domain``), so it bounds every true
counterfactual.

Encodings (paper §4.2 distance and plausibility; the models of §4.1 as mixed-integer constraints):
- tree / forest: the split-indicator formulation of Mišić (2020, "Optimization of tree ensembles"):
  one binary w per distinct split level of a column (w = 1 iff the point goes right, x >= L; the
  levels are the exact float64 limits of sklearn's float32 test), monotone along the column and
  tied to x by a thermometer (two rows per column); per tree
  continuous leaf weights y with sum 1, and for every split node sum(y, left leaves) <= 1 - w,
  sum(y, right leaves) <= w, written in flow form (q_k = sum of y under node k) and pruned to the
  nodes the plausibility box can reach; accept iff sum_t sum_l (p1_l - p0_l) y_l / T >= margin
  (0 when relaxed); a single tree accepts iff its leaf does (the y of accepting leaves sum to 1).
  A boosted ensemble (``TreeEnsemble.boosted``) the same with the sum of leaf values (no / T, the
  initial prediction in the first tree's leaves), and float64 splits read by their own limits.
  A model with a ``tolerance`` or float32 sums (XGBoost) is read relaxed as sum >= -(tolerance +
  sum_error), the sum being exact, which holds wherever the white box's float32 score or the
  library accepts; robustly as sum >= margin + tolerance (its point is verified on the float32
  score like any other, and the float32 error is ~1e-6 where its bound is ~1e-4).
- logistic regression: w.x + b >= margin (0 when relaxed).
- ReLU MLP: big-M per unstable neuron; pre-activation bounds by interval arithmetic on the box for
  the first layer and by LP over the relaxed earlier layers for the others (stable neurons need
  no binary); final logit >= margin (0 when relaxed).
- distance: x = x^ + p - n (split deviations) for numeric features, delta = (p + n) / R; l0 by a
  change binary c with p + n <= R·c; binary columns and one-hot groups are linear
  (delta_g = 1 - x[column of the factual category]); linf by an epigraph variable.
- diversity (l0, paper §4.2): per earlier counterfactual, at least one raw feature differs.
"""

from __future__ import annotations

import math

import highspy
import numpy as np
from scipy.sparse import csc_matrix

from envs.models import LinearModel, MLPModel, TreeEnsemble
from solvers.mace.domain import Instance, Outcome, preactivation_bounds
from solvers.mace.rules_milp import encode_rules

# HiGHS's tolerances, set explicitly (issue 34). With the former 1e-9 (primal and MIP feasibility),
# on a German-MLP agent HiGHS 1.15 reported "optimal" at d = 0.017632 (dual bound 0.0176320) in a box
# that holds the valid d = 0.017427; at 1e-7 (HiGHS's own primal default), without presolve, or with
# another seed it finds 0.017427. 1e-9 asks for more than its simplex attains on these rows
# (coefficients ~1e-4 on integer columns ranging to ~2e4, the scaler folded in); the mechanism inside
# HiGHS was not traced. A looser feasibility tolerance only relaxes the MILP (the bound moves the safe
# way), the returned point is cleaned and verified anyway, and the proof step re-checks every claim.
FEAS_TOL = 1e-7
BOUND_SLACK_ABS = 1e-9  # what the tolerances can hide of the objective: delta_min gives it back
BOUND_SLACK_REL = 1e-6  # (dual feasibility 1e-7 on costs <= 1 / J, times |x| in the normalized units)
LP_BOUND_PAD = 1e-6  # LP pre-activation bounds widened by this (times 1 + |bound|) before big-M uses them
# The proof's second route: no presolve (and another seed), a different tree. The feasibility-jump
# heuristic is off there: a primal heuristic can only find points, never prune one, so the
# infeasibility proof is the branch and bound's either way; without presolve it ran at the root of
# every proof and cost ~3 ms, five times the solve, on the MILPs that presolve alone closes (Credit LR).
PROOF_ROUTE = {"presolve": "off", "mip_heuristic_run_feasibility_jump": False}


def bound_slack(bound: float) -> float:
    """The amount subtracted from a HiGHS dual bound (or objective cut) before it becomes delta_min."""
    return BOUND_SLACK_ABS + BOUND_SLACK_REL * abs(bound)


def proof_closes(status: str, distance: float, delta_min: float, cut: float) -> bool:
    """The proof route's verdict: the search closed with no point of distance < ``cut``.

    "infeasible"; or "optimal" with a point at or above the cut (HiGHS 1.15 reports a point its
    heuristics saw and the bound rejected) and a dual bound (``delta_min``, slack already taken) not
    below the cut. Without presolve, HiGHS 1.15 can also end "optimal" with a point above the cut
    and a dual bound below it, at the distance of a point below the cut that it does not return
    (an all-discrete forest under l0, cut 0.301: point 0.4, bound 0.2, and 0.2 exists): no proof.
    """
    return status == "infeasible" or (status == "optimal" and distance >= cut
                                      and delta_min >= cut - bound_slack(cut))


class _Program:
    """A minimisation MILP assembled column by column and row by row (flat lists: cheap to append)."""

    def __init__(self) -> None:
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.cost: list[float] = []
        self.integer: list[bool] = []
        self.ri: list[int] = []  # row of each nonzero
        self.ci: list[int] = []  # column of each nonzero
        self.va: list[float] = []  # value of each nonzero
        self.rlo: list[float] = []
        self.rhi: list[float] = []
        self.offset = 0.0
        self._highs: highspy.Highs | None = None  # the model as last passed to HiGHS (``solve(reuse=True)``)
        self._shape: tuple[int, int, int] | None = None  # (columns, rows, nonzeros) when it was passed

    def var(self, lb: float, ub: float, cost: float = 0.0, integer: bool = False) -> int:
        self.lb.append(lb)
        self.ub.append(ub)
        self.cost.append(cost)
        self.integer.append(integer)
        return len(self.lb) - 1

    def row(self, idx, vals, lo: float = -math.inf, hi: float = math.inf) -> None:
        r = len(self.rlo)
        idx = list(idx)
        self.ri.extend([r] * len(idx))
        self.ci.extend(int(i) for i in idx)
        self.va.extend(float(v) for v in vals)
        self.rlo.append(lo)
        self.rhi.append(hi)

    def solve(self, time_limit: float, gaps: tuple[float, float], seed: int,
              tol: float, options: dict | None = None, reuse: bool = False) -> tuple[str, np.ndarray | None, float]:
        """(status, solution, dual bound); HiGHS stops at an absolute or a relative gap, whichever first.

        ``reuse``: solve the model already passed to HiGHS by the last call, with its solver state
        (solution, basis, search) cleared, when no column, row or nonzero was added since; else build
        it. The model HiGHS holds is the one passed, never its presolved form, so a reused solve is the
        solve of a fresh build, without rebuilding the matrix. ``options`` must then override every
        option the last call set beyond the common ones (the proof route sets the same keys each time).
        """
        n, m = len(self.lb), len(self.rlo)
        shape = (n, m, len(self.va))
        if reuse and self._highs is not None and self._shape == shape:
            h = self._highs
            h.clearSolver()
        else:
            A = csc_matrix((np.asarray(self.va, float), (np.asarray(self.ri, np.int64), np.asarray(self.ci, np.int64))),
                           shape=(m, n))
            A.sum_duplicates()
            lp = highspy.HighsLp()
            lp.num_col_, lp.num_row_ = n, m
            lp.col_cost_ = np.asarray(self.cost, float)
            lp.col_lower_, lp.col_upper_ = np.asarray(self.lb, float), np.asarray(self.ub, float)
            lp.row_lower_ = np.asarray(self.rlo, float)
            lp.row_upper_ = np.asarray(self.rhi, float)
            lp.offset_ = self.offset
            lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
            lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
            lp.integrality_ = [highspy.HighsVarType.kInteger if b else highspy.HighsVarType.kContinuous
                               for b in self.integer]
            h = highspy.Highs()
            h.silent()
            h.passModel(lp)
        for k, v in {"time_limit": float(max(time_limit, 0.01)), "mip_abs_gap": gaps[0], "mip_rel_gap": gaps[1],
                     "random_seed": seed, "mip_feasibility_tolerance": tol,
                     "primal_feasibility_tolerance": tol, "dual_feasibility_tolerance": tol,
                     **(options or {})}.items():
            h.setOptionValue(k, v)
        h.run()
        self._highs, self._shape = h, shape
        status, info = h.getModelStatus(), h.getInfo()
        has_x = info.primal_solution_status == 2  # kSolutionStatusFeasible
        x = np.asarray(h.getSolution().col_value, float) if has_x else None
        if status == highspy.HighsModelStatus.kInfeasible:
            return "infeasible", None, math.inf
        if status == highspy.HighsModelStatus.kOptimal:
            return "optimal", x, float(info.mip_dual_bound)
        bound = float(info.mip_dual_bound) if np.isfinite(info.mip_dual_bound) else 0.0
        return ("feasible" if has_x else "unknown"), x, bound

    def lp_range(self, exprs: list[tuple[list[int], np.ndarray, float]], tol: float) -> tuple[np.ndarray, np.ndarray]:
        """(min, max) of each affine expression sum(v·x[i]) + c over the LP relaxation of the rows so far.

        Used for the MLP's big-M: a neuron's pre-activation over the relaxed earlier layers (their
        ReLUs as the triangle hull) and the box, much tighter than interval arithmetic. Each
        bound is padded by ``LP_BOUND_PAD`` against the simplex's tolerance; an LP that does not
        solve to optimality returns an infinite bound (the caller keeps its interval one).
        """
        n, m = len(self.lb), len(self.rlo)
        A = csc_matrix((np.asarray(self.va, float), (np.asarray(self.ri, np.int64), np.asarray(self.ci, np.int64))),
                       shape=(m, n))
        A.sum_duplicates()
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n, m
        lp.col_cost_ = np.zeros(n)
        lp.col_lower_, lp.col_upper_ = np.asarray(self.lb, float), np.asarray(self.ub, float)
        lp.row_lower_, lp.row_upper_ = np.asarray(self.rlo, float), np.asarray(self.rhi, float)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
        h = highspy.Highs()
        h.silent()
        for k, v in {"primal_feasibility_tolerance": tol, "dual_feasibility_tolerance": tol,
                     "presolve": "off"}.items():
            h.setOptionValue(k, v)
        h.passModel(lp)
        lo, hi = np.full(len(exprs), -math.inf), np.full(len(exprs), math.inf)
        everything = np.arange(n, dtype=np.int32)
        for e, (idx, vals, c) in enumerate(exprs):
            for sense, out in ((1.0, lo), (-1.0, hi)):
                cost = np.zeros(n)
                np.add.at(cost, np.asarray(idx, np.int64), sense * np.asarray(vals, float))
                h.changeColsCost(n, everything, cost)
                h.run()
                if h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
                    v = sense * float(h.getInfo().objective_function_value) + c
                    out[e] = v - sense * LP_BOUND_PAD * (1.0 + abs(v))
        return lo, hi


class MilpBackend:
    """Builds the MILP of one instance once; diversity clauses are added between runs.

    ``margin=None`` is the relaxed reading (acceptance score >= 0), whose dual bound is the
    certificate; a number is the robust reading score >= margin.
    """

    def __init__(self, inst: Instance, tol: float = FEAS_TOL, budget: float = 1.0, margin: float | None = None,
                 lp_bounds: bool = True) -> None:
        if budget < 1.0:
            inst = _within(inst, budget)
        self.inst, self.tol, self.budget = inst, tol, budget
        tol = float(getattr(inst.model, "tolerance", 0.0))  # where the library may decide otherwise
        err = float(getattr(inst.model, "sum_error", 0.0))  # how far a float32 score may lie from the exact sum
        self.margin = -(tol + err) if margin is None else float(margin) + tol
        self.lp_bounds = lp_bounds  # tighten the MLP's big-M by LP over the earlier layers (else interval only)
        self.unstable = 0  # MLP neurons that needed a binary (the others are fixed on or off by their bounds)
        self.levels: dict[int, tuple[list[float], list[float], list[int]]] = {}  # column -> (U's, L's, w's)
        self.p = _Program()
        n = len(inst.x_hat)
        # Columns 0..n-1 are the encoded features, within the plausibility box.
        self.x = [self.p.var(inst.lower[c], inst.upper[c], integer=bool(inst.integral[c])) for c in range(n)]
        self.dev: dict[int, tuple[int, int, int | None, int | None]] = {}  # numeric column -> (up, down, change
        self._domain()  # binaries of the increase and the decrease: one variable unless their weights differ)
        if inst.rules is not None:
            encode_rules(self.p, self.x, inst, margin)
        self._distance()
        self._classifier()

    # -- plausibility: one-hot groups sum to one (bounds and integrality are on the columns)
    def _domain(self) -> None:
        for r in self.inst.raws:
            if r.kind == "group":
                self.p.row(list(r.columns), np.ones(len(r.columns)), 1.0, 1.0)

    # -- Eq. 3 as a linear objective, each feature's change weighted by the cost of its direction (envs.rules)
    def _distance(self) -> None:
        inst, p = self.inst, self.p
        a, b, g = inst.weights
        W = np.ones((len(inst.raws), 2)) if inst.cost is None else inst.cost
        t = p.var(0.0, max(1.0, float(W.max())), cost=g) if g > 0 else None  # linf epigraph
        for j, r in enumerate(inst.raws):
            wu, wd = (float(v) for v in W[j])
            cols = list(r.columns)
            c0, xh = cols[0], inst.x_hat[cols[0]]
            if r.kind == "group":
                k = cols[int(np.argmax(inst.x_hat[cols]))]
                p.offset += (a + b) * wu  # delta = w·(1 - x[k])
                p.cost[self.x[k]] -= (a + b) * wu
                if t is not None:
                    p.row([t, self.x[k]], [1.0, wu], wu)
            elif r.kind == "binary":
                w, s = (wu if xh == 0 else wd), 1.0 - 2.0 * xh  # delta = w·(xh + s·x); 0 -> 1 is up
                p.offset += (a + b) * w * xh
                p.cost[self.x[c0]] += (a + b) * w * s
                if t is not None:
                    p.row([t, self.x[c0]], [1.0, -w * s], w * xh)
            elif inst.upper[c0] > inst.lower[c0]:  # numeric or nominal code that can move
                up = p.var(0.0, inst.upper[c0] - xh)
                dn = p.var(0.0, xh - inst.lower[c0])
                p.row([self.x[c0], up, dn], [1.0, -1.0, 1.0], xh, xh)
                if r.kind == "nominal":  # delta = 1[changed] = the change binary
                    ch = p.var(0.0, 1.0, cost=(a + b) * wu, integer=True)
                    p.row([up, dn, ch], [1.0, 1.0, -(inst.upper[c0] - inst.lower[c0])], hi=0.0)
                    if t is not None:
                        p.row([t, ch], [1.0, -wu], 0.0)
                    continue
                p.cost[up] += b * wu / r.span
                p.cost[dn] += b * wd / r.span
                cu = cd = None
                if a > 0 and wu == wd:
                    cu = cd = p.var(0.0, 1.0, cost=a * wu, integer=True)
                    p.row([up, dn, cu], [1.0, 1.0, -(inst.upper[c0] - inst.lower[c0])], hi=0.0)
                elif a > 0:  # a change binary per direction, each with its own weight
                    cu, cd = p.var(0.0, 1.0, cost=a * wu, integer=True), p.var(0.0, 1.0, cost=a * wd, integer=True)
                    p.row([up, cu], [1.0, -(inst.upper[c0] - xh)], hi=0.0)
                    p.row([dn, cd], [1.0, -(xh - inst.lower[c0])], hi=0.0)
                self.dev[c0] = (up, dn, cu, cd)
                if t is not None:
                    p.row([t, up, dn], [1.0, -wu / r.span, -wd / r.span], 0.0)

    # -- the characteristic formula of the model (acceptance with a margin)
    def _classifier(self) -> None:
        m = self.inst.model
        if isinstance(m, TreeEnsemble):
            self._forest(m)
        elif isinstance(m, LinearModel):
            nz = np.nonzero(m.w)[0]
            self.p.row([self.x[c] for c in nz], m.w[nz], self.margin - m.b)
        elif isinstance(m, MLPModel):
            self._mlp(m)
        else:
            raise ValueError(f"model: MACE has no formula for {type(m).__name__}")

    def _forest(self, m: TreeEnsemble) -> None:
        inst, p = self.inst, self.p
        # Split levels per column; a level outside the box has a constant direction.
        levels: dict[int, dict[float, float]] = {}
        for tree in m.trees:
            U, L = tree.limits()
            for k in np.nonzero(tree.left >= 0)[0]:
                c = int(tree.feature[k])
                u, lo = inst.split(c, (U[k], L[k]))
                if lo > inst.lower[c] and u < inst.upper[c]:
                    levels.setdefault(c, {})[u] = lo
        wvar: dict[tuple[int, float], int] = {}
        for c, lv in levels.items():
            us = sorted(lv)
            ws = [p.var(0.0, 1.0, integer=True) for _ in us]
            wvar.update({(c, u): w for u, w in zip(us, ws, strict=True)})
            for w1, w2 in zip(ws[:-1], ws[1:], strict=True):
                p.row([w1, w2], [1.0, -1.0], 0.0)  # right of a higher level implies right of a lower one
            ls = [lv[u] for u in us]
            self.levels[c] = (us, ls, ws)
            # thermometer: x >= L_k and x <= U_{k+1} for the last k with w_k = 1
            p.row([self.x[c], *ws], [1.0, *(-np.diff([inst.lower[c], *ls]))], inst.lower[c])
            p.row([self.x[c], *ws], [1.0, *(-np.diff([*us, inst.upper[c]]))], hi=us[0])
            if c in self.dev:
                self._interval_cuts(c, us, ls, ws)
        # Flow form of the same polytope: q_k = the sum of the leaf weights under node k, so a split
        # node needs q_left + q_right = q_k, q_left <= 1 - w, q_right <= w (O(nodes) nonzeros instead
        # of O(leaves x depth)). Subtrees the box rules out are never built.
        score_idx, score_val = [], []
        single = self.inst.single_tree()
        for tree in m.trees:
            U, L = tree.limits()
            root = p.var(1.0, 1.0)
            stack = [(0, root)]
            while stack:
                k, q = stack.pop()
                if tree.left[k] < 0:
                    score_idx.append(q)
                    score_val.append(float(tree.p1[k] > tree.p0[k]) if single else float(tree.p1[k] - tree.p0[k]))
                    continue
                c = int(tree.feature[k])
                u, lo = inst.split(c, (U[k], L[k]))
                if lo <= inst.lower[c]:  # always right
                    stack.append((int(tree.right[k]), q))
                elif u >= inst.upper[c]:  # always left
                    stack.append((int(tree.left[k]), q))
                else:
                    w = wvar[(c, u)]
                    ql, qr = p.var(0.0, 1.0), p.var(0.0, 1.0)
                    p.row([ql, qr, q], [1.0, 1.0, -1.0], 0.0, 0.0)
                    p.row([ql, w], [1.0, 1.0], hi=1.0)
                    p.row([qr, w], [1.0, -1.0], hi=0.0)
                    stack += [(int(tree.left[k]), ql), (int(tree.right[k]), qr)]
        if single:  # the leaf decides: accepting leaves carry the unit flow
            p.row(score_idx, score_val, 1.0)
        else:
            p.row(score_idx, np.asarray(score_val) / (1 if m.boosted else len(m.trees)), self.margin)

    def _interval_cuts(self, c: int, us: list[float], ls: list[float], ws: list[int]) -> None:
        """Valid inequalities that price the split indicators directly (the LP bound is 0 without them).

        The thermometer alone lets a fractional w move up at one level and down at another with x
        unchanged. Here |x - x^| >= sum over crossed levels above x^ of the step to the next level
        (w_k = 1) plus the same below x^ (w_k = 0), and x changed >= the first level crossed either way.
        """
        p, xh = self.p, float(self.inst.x_hat[c])
        up, dn, cu, cd = self.dev[c]
        idx, val, rhs, prev = [up, dn], [1.0, 1.0], 0.0, xh
        for lo, w in zip(ls, ws, strict=True):  # levels above x^: crossing costs the step
            if lo > xh:
                idx.append(w)
                val.append(-(lo - prev))
                prev = lo
        nxt = xh
        for u, w in zip(us[::-1], ws[::-1], strict=True):  # levels below x^: staying left costs the step
            if u < xh:
                idx.append(w)
                val.append(nxt - u)
                rhs += nxt - u
                nxt = u
        p.row(idx, val, rhs)
        if cu is not None:
            above = [w for lo, w in zip(ls, ws, strict=True) if lo > xh]
            below = [w for u, w in zip(us, ws, strict=True) if u < xh]
            if above:
                p.row([cu, above[0]], [1.0, -1.0], 0.0)
            if below:
                p.row([cd, below[-1]], [1.0, 1.0], 1.0)

    def _mlp(self, m: MLPModel) -> None:
        """Big-M ReLUs. Layer 1's bounds are interval arithmetic on the box (exact for an affine map of
        a box); every later layer's are the LP range over the relaxed earlier layers, intersected
        with interval arithmetic from the previous layer's bounds."""
        inst, p = self.inst, self.p
        h_idx: list[int | None] = list(self.x)
        h_lo, h_hi = np.asarray(inst.lower, float), np.asarray(inst.upper, float)
        first = preactivation_bounds(m, inst.lower, inst.upper)[0]
        for layer, (W, bias) in enumerate(zip(m.weights[:-1], m.biases[:-1], strict=True)):
            live = [i for i, v in enumerate(h_idx) if v is not None]
            if layer == 0:
                z_lo, z_hi = first
            else:
                Wp, Wn = np.maximum(W, 0), np.minimum(W, 0)
                z_lo, z_hi = bias + h_lo @ Wp + h_hi @ Wn, bias + h_hi @ Wp + h_lo @ Wn
                # LP only where interval arithmetic leaves the neuron unstable: a neuron it already fixes
                # on or off needs no binary and no big-M, and its interval bounds are valid as they are.
                need = np.flatnonzero((z_lo < 0) & (z_hi > 0)) if self.lp_bounds else np.zeros(0, int)
                if len(need):
                    exprs = [([h_idx[i] for i in live], W[live, k], float(bias[k])) for k in need]
                    l2, u2 = p.lp_range(exprs, self.tol)
                    z_lo, z_hi = z_lo.copy(), z_hi.copy()
                    z_lo[need], z_hi[need] = np.maximum(z_lo[need], l2), np.minimum(z_hi[need], u2)
                    z_hi = np.maximum(z_hi, z_lo)  # padding keeps them ordered; guard round-off anyway
            new_idx: list[int | None] = []
            for k in range(W.shape[1]):
                idx = [h_idx[i] for i in live]
                wk = W[live, k]
                if z_hi[k] <= 0:  # always inactive
                    new_idx.append(None)
                    continue
                h = p.var(max(z_lo[k], 0.0), z_hi[k])
                if z_lo[k] >= 0:  # always active: h = z
                    p.row([h, *idx], [1.0, *(-wk)], bias[k], bias[k])
                else:
                    self.unstable += 1
                    a = p.var(0.0, 1.0, integer=True)
                    p.row([h, *idx], [1.0, *(-wk)], bias[k])  # h >= z
                    p.row([h, *idx, a], [1.0, *(-wk), -z_lo[k]], hi=bias[k] - z_lo[k])  # h <= z - L(1 - a)
                    p.row([h, a], [1.0, -z_hi[k]], hi=0.0)  # h <= U a
                new_idx.append(h)
            h_idx = new_idx
            h_lo, h_hi = np.maximum(z_lo, 0.0), np.maximum(z_hi, 0.0)
        W, bias = m.weights[-1][:, 0], float(m.biases[-1][0])
        live = [i for i, v in enumerate(h_idx) if v is not None]
        self.p.row([h_idx[i] for i in live], W[live], self.margin - bias)

    # -- diversity (paper §4.2): OR_j x_j != x^i_j
    def add_diversity(self, prev: np.ndarray) -> None:
        inst, p = self.inst, self.p
        terms = []
        for r in inst.raws:
            cols = list(r.columns)
            if r.kind == "group":
                k = cols[int(np.argmax(prev[cols]))]
                u = p.var(0.0, 1.0, integer=True)
                p.row([u, self.x[k]], [1.0, 1.0], hi=1.0)  # u <= 1 - x[k]
                terms.append(u)
                continue
            c = cols[0]
            if r.kind == "binary":
                u = p.var(0.0, 1.0, integer=True)
                p.row([u, self.x[c]], [1.0, 2.0 * prev[c] - 1.0], hi=prev[c])  # u <= |x - prev|
                terms.append(u)
                continue
            gap, lo, hi = inst.gap(c), inst.lower[c], inst.upper[c]
            if prev[c] + gap <= hi:  # up: x >= prev + gap
                u, M = p.var(0.0, 1.0, integer=True), prev[c] + gap - lo
                p.row([self.x[c], u], [1.0, -M], prev[c] + gap - M)
                terms.append(u)
            if prev[c] - gap >= lo:  # down: x <= prev - gap
                u, M = p.var(0.0, 1.0, integer=True), hi - prev[c] + gap
                p.row([self.x[c], u], [1.0, M], hi=prev[c] - gap + M)
                terms.append(u)
        p.row(terms, np.ones(len(terms)), 1.0)  # no term at all: infeasible, as it should be

    def minimize(self, time_limit: float, cut: float | None = None) -> Outcome:
        """Solve; the point comes with the split cells its binaries chose (``domain.clean`` snaps into them).

        ``cut``: the proof route. HiGHS gets ``objective_bound = cut`` (it prunes every node whose
        bound reaches the cut; no objective-parallel row, see below), another random seed and no
        presolve, so a different search tree. "infeasible", or "optimal" with a point above the cut
        (HiGHS 1.15 reports a heuristic point the bound rejected) and a dual bound not below it
        (``proof_closes``), proves that no point of the box has distance < cut (less ``bound_slack``);
        a point below the cut, that the first solve missed it.
        """
        # No explicit row d <= budget: the box already holds every point with d <= budget, and HiGHS
        # 1.15 once returned a wrong optimum with that objective-parallel row (tests/test_mace.py).
        inst = self.inst
        gaps = (inst.epsilon / 2, inst.rel_tol / 2)  # half: the clean-up and a repair may cost a little
        opts = None if cut is None else {"objective_bound": float(cut), **PROOF_ROUTE}
        seed = inst.seed if cut is None else inst.seed + 7919
        status, sol, bound = self.p.solve(time_limit, gaps, seed, self.tol, opts, reuse=cut is not None)
        if sol is None:
            return Outcome(None, status, bound, 1)  # type: ignore[arg-type]
        cells = {}
        for c, (us, ls, ws) in self.levels.items():
            k = int(sum(sol[w] > 0.5 for w in ws))  # levels crossed; the w's are monotone
            cells[c] = (ls[k - 1] if k else inst.lower[c], us[k] if k < len(us) else inst.upper[c])
        return Outcome(sol[: len(inst.x_hat)], status, bound - bound_slack(bound), 1, cells)  # type: ignore[arg-type]


def _within(inst: Instance, budget: float) -> Instance:
    """The instance restricted to d <= budget: numeric columns boxed by w·delta_j <= budget / (beta + gamma).

    d >= (beta + gamma)·w·delta_j for every numeric feature j moved in the direction of cost weight w, so
    the box loses no counterfactual within the budget; on large forests it turns most splits constant and
    the MILP small (the optimum is usually near). A weight of 0 leaves that direction unboxed.
    """
    _, b, g = inst.weights
    lo, hi = inst.lower.copy(), inst.upper.copy()
    W = np.ones((len(inst.raws), 2)) if inst.cost is None else inst.cost
    for j, r in enumerate(inst.raws):
        c = r.columns[0]
        if r.kind == "numeric" and b + g > 0 and r.span > 0:
            rad = r.span * budget / (b + g)
            down, up = (inst.x_hat[c] - rad / W[j, 1] if W[j, 1] > 0 else -math.inf,
                        inst.x_hat[c] + rad / W[j, 0] if W[j, 0] > 0 else math.inf)
            lo[c], hi[c] = max(lo[c], down), min(hi[c], up)
            if inst.integral[c]:
                lo[c], hi[c] = math.ceil(lo[c] - 1e-9), math.floor(hi[c] + 1e-9)
    return Instance(**{**vars(inst), "lower": lo, "upper": hi})
