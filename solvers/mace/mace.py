"""MACE: model-agnostic nearest counterfactual explanations (paper §3–§4), two backends.

``MACE(backend="milp" | "z3")`` returns the nearest plausible counterfactual with a certificate:
``delta_min``, a lower bound on the distance of every counterfactual, conservative by construction
(it is taken on the relaxed reading of ``domain.py``: sklearn's exact float32 splits, acceptance
score >= 0). The answer is flagged optimal iff the search finished, the MILP backend's proof step
held (issue 34: a second HiGHS route with the objective cut at d - tolerance / 2 finds nothing
below it; ``extra["proof"]`` says how) and ``distance - delta_min <= max(rel_tol·distance,
epsilon)``; otherwise ``extra["reason"]`` says why not and ``delta_min`` is the honest bound.
Every answer reports ``delta_min``, its ``distance`` and the relative ``gap`` (distance -
delta_min) / distance; LR and MLP answers also ``witness_exact_score``, the white box's score at
the answer in exact rational arithmetic. Optionally k diverse
counterfactuals come from successive runs with l0 diversity clauses (paper §4.2).

Every counterfactual returned has been verified in numpy (the real model when an ``oracle`` is
given, else the white box; the plausibility box, one-hot validity, diversity, and the world's rules
by the shared checker of ``envs.rules``, which the MILP encodes: ``solvers/mace/rules_milp.py``); a candidate that
fails is replaced by the robust reading's point (acceptance score >= margin, then 100x and
10000x larger margins), and never returned unverified.
"""

from __future__ import annotations

import math
import time
from typing import Any, Literal

import numpy as np

from envs.models import LinearModel
from envs.recourse import Recourse
from envs.tabular import TabularWorld
from solvers.base import Solver
from solvers.mace.distance import Norm, distance_features, norm_weights
from solvers.mace.domain import (
    Instance,
    Oracle,
    Outcome,
    descend,
    exact_score,
    integral_columns,
    plausible_box,
    validate,
)
from solvers.mace.milp import MilpBackend, bound_slack, proof_closes

BACKENDS = ("milp", "z3")


def _z3_backend():
    """The z3 backend class, imported on use: z3-solver is the optional ``smt`` extra (a missing
    one raises :class:`envs.optional.MissingExtraError`)."""
    from solvers.mace.smt import Z3Backend

    return Z3Backend


_TIGHTEN = (1.0, 100.0, 10000.0)  # robust margin multipliers of the point fallback
_PROOF_ROUNDS = 3  # proof re-solves per answer that may each replace it by a closer one
_REBOX = 0.7  # the proof rebuilds the MILP on the box of budget d when d < _REBOX x the solve's budget


class MACE(Solver):
    """Nearest (and diverse) counterfactuals with an optimality certificate."""

    name = "mace"
    exact = True

    def __init__(self, backend: Literal["milp", "z3"] = "milp", norm: Norm = "one", rel_tol: float = 1e-3,
                 epsilon: float = 1e-7, n_diverse: int = 1, plausible: bool = True, time_limit: float = 60.0,
                 margin: float = 1e-6, oracle: Oracle | None = None, seed: int = 0, exact_witness: bool = True) -> None:
        self.backend = backend  # "milp" (HiGHS, direct minimisation) or "z3" (SMT, Algorithm 1)
        self.norm = norm  # "zero", "one", "infty" or (alpha, beta, gamma) of Eq. 3
        self.rel_tol = rel_tol  # certified iff d - delta_min <= max(rel_tol * d, epsilon)
        self.epsilon = epsilon  # absolute floor of that tolerance (distances lie in [0, 1])
        self.n_diverse = n_diverse  # number of successive diverse counterfactuals
        self.plausible = plausible  # actionability: immutable / monotone features (ranges always hold)
        self.time_limit = time_limit  # seconds per counterfactual (all oracle calls together)
        self.margin = margin  # robust acceptance score >= margin (LR/MLP white boxes need it without an oracle)
        self.oracle = oracle  # the real model, X -> bool acceptance (e.g. envs.models.SklearnOracle)
        self.seed = seed  # solver random seed
        self.exact_witness = exact_witness  # report the LR/MLP witness's score in exact rational arithmetic

    def _check_params(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend: unknown backend {self.backend!r}; expected one of {BACKENDS}")
        if not 0.0 < float(self.epsilon) < 1.0:
            raise ValueError(f"epsilon: must be in (0, 1), got {self.epsilon!r}")
        if not 0.0 <= float(self.rel_tol) < 1.0:
            raise ValueError(f"rel_tol: must be in [0, 1), got {self.rel_tol!r}")
        if int(self.n_diverse) < 1:
            raise ValueError(f"n_diverse: must be >= 1, got {self.n_diverse!r}")
        if not self.time_limit > 0:
            raise ValueError(f"time_limit: must be > 0, got {self.time_limit!r}")
        if not float(self.margin) > 0:
            raise ValueError(f"margin: must be > 0, got {self.margin!r}")
        if self.oracle is not None and not callable(self.oracle):
            raise ValueError(f"oracle: must be callable X -> bool acceptance, got {type(self.oracle).__name__}")

    def _instance(self, world: TabularWorld, x: np.ndarray) -> Instance:
        schema = world.schema
        raws = distance_features(schema)
        weights = norm_weights(self.norm, len(raws))
        x = schema.validate(x, name="x")
        if x.shape[0] != 1:
            raise ValueError(f"x: expected one agent (a 1-D row), got {x.shape[0]} rows")
        x = x[0]
        for r in raws:
            if r.kind == "group" and x[list(r.columns)].sum() != 1:
                raise ValueError(f"x: one-hot group {r.name!r} must have exactly one 1, got {x[list(r.columns)]}")
        lo, hi = plausible_box(schema, x, self.plausible)
        bad = [schema.features[c].name for c in range(len(x)) if lo[c] < hi[c] and not np.isfinite(hi[c] - lo[c])]
        if bad:
            raise ValueError(f"schema: features {bad} need finite lower/upper bounds (R_j normalizes the distance)")
        inst = Instance(schema, world.model, x, raws, weights, lo, hi, integral_columns(schema),
                        float(self.epsilon), float(self.rel_tol), float(self.margin), oracle=self.oracle,
                        seed=int(self.seed))
        compiled = world.compiled_rules(mutability=self.plausible) if isinstance(world, TabularWorld) else None
        if compiled is not None:  # the world's rules (envs.rules): the box narrowed by them, the rest in the MILP
            inst.rules = compiled.ground(x)
            inst.cost = compiled.cost if compiled.weighted else None
            inst.lower, inst.upper, inst.blocked = inst.rules.box(lo, hi, inst.scales())
        return inst

    def _validator(self, inst: Instance, cells: dict[int, tuple[float, float]] | None = None, improve: bool = False):
        """x -> the verified counterfactual or None; a boundary repair may cost a tenth of the tolerance.

        ``improve`` (z3) also moves the verified point back toward the factual while it stays one.
        """
        def check(x: np.ndarray) -> np.ndarray | None:
            d = float(inst.distance(x[None])[0])
            y = validate(inst, x, self.plausible, cells, budget=inst.tolerance(d) / 10)[0]
            return descend(inst, y, self.plausible) if improve and y is not None else y
        return check

    def _milp(self, inst: Instance, deadline: float) -> Outcome:
        """Minimise within growing distance budgets D = 4^k / 1024 (k = 0..5), on the relaxed reading.

        The box of budget D holds every point with d <= D, so a box with no counterfactual, or whose
        optimum lies above D, suggests d* > min(D, its bound), as an UNSAT step of Algorithm 1 does;
        the first box whose optimum lies within D holds the global optimum. A box whose optimum d lies
        above D is followed by the box of budget min(next D, d), which holds every point at distance
        <= d and so its optimum too (on 200-tree boosted models the box of 4D cost up to 50 s). A relaxed optimum that
        does not verify is replaced by the robust reading's in the same box. HiGHS's "optimal" is
        then only a claim: ``_prove`` turns it into a certificate or into ``optimal: false``.
        """
        floor, calls = 0.0, 0
        budgets = [4.0**k / 1024 for k in range(6)] if inst.weights[1] + inst.weights[2] > 0 else [1.0]
        D = budgets[0]
        while True:
            be = MilpBackend(inst, budget=D)
            for prev in inst.previous:
                be.add_diversity(prev)
            out = be.minimize(deadline - time.perf_counter())
            calls += 1
            if out.status == "infeasible":
                if D >= 1.0:
                    return Outcome(None, "infeasible", np.inf, calls)
                floor = D  # no counterfactual within the budget
                D = min(b for b in budgets if b > D)
                continue
            if out.x is None:
                return Outcome(None, "unknown", floor, calls, why="time limit before any counterfactual was found")
            d = float(inst.distance(out.x[None])[0])
            floor = inst.round_bound(max(floor, out.delta_min if D >= 1.0 else min(out.delta_min, D)))
            if out.status == "optimal" and d > D + inst.tolerance(d) and D < 1.0:
                D = min(min(b for b in budgets if b > D), d)  # d* > D; widen, no further than d
                continue
            x = self._validator(inst, out.cells)(out.x)
            status = out.status
            for k in _TIGHTEN:
                if x is not None or time.perf_counter() >= deadline:
                    break
                rb = MilpBackend(inst, budget=D, margin=inst.margin * k)
                for prev in inst.previous:
                    rb.add_diversity(prev)
                rob = rb.minimize(deadline - time.perf_counter())
                calls += 1
                if rob.x is not None:
                    x = self._validator(inst, rob.cells)(rob.x)
                    status = rob.status if rob.status == "feasible" else status
            if x is None:
                why = ("time limit" if time.perf_counter() >= deadline else
                       f"points with score >= 0 exist but none verified, nor any with score >= {inst.margin * k:g}")
                return Outcome(None, "unknown", floor, calls, why=why)
            return self._prove(inst, be, D, x, status, floor, calls, deadline)

    def _prove(self, inst: Instance, be: MilpBackend, D: float, x: np.ndarray, status: str, floor: float,
               calls: int, deadline: float) -> Outcome:
        """Turn HiGHS's "optimal" into a proof, or say why not (issue 34).

        The proof re-solves by a second route (``MilpBackend.minimize(cut=...)``: objective bound
        cut = d - tolerance(d) / 2, another seed, no presolve) on a box that holds every point with
        distance <= cut: the first solve's MILP, reused (no rebuild), or, for forests and MLPs under a
        norm with an l1 or linf term, where d < 0.7 D, the smaller MILP of the box of budget d
        (fewer splits, tighter big-M; the box of D can be a thousand times wider on Credit forests).
        A search that closes with no point below the cut proves delta_min = cut - slack, which
        certifies d. A point below the cut means the first solve missed it: a verified one replaces the answer and is proven in
        turn (at most ``_PROOF_ROUNDS`` times); otherwise, and on a time limit, the answer is not
        flagged optimal, delta_min is the smaller of the two routes' dual bounds, and ``why`` says why.
        """
        if status != "optimal":
            return Outcome(x, status, floor, calls, why="time limit before HiGHS closed the gap")
        why = ""
        # A smaller box pays for its build where it removes splits (forests) or tightens big-M (MLPs),
        # and only under a norm with an l1 or linf term (an l0 budget does not shrink the box).
        shrinks = inst.weights[1] + inst.weights[2] > 0 and not isinstance(inst.model, LinearModel)
        for _ in range(_PROOF_ROUNDS):
            d = float(inst.distance(x[None])[0])
            cut = d - inst.tolerance(d) / 2
            if cut <= 0:  # d <= epsilon / 2: nothing to prove below a non-negative distance
                return Outcome(x, "optimal", 0.0, calls, proof="d <= epsilon / 2")
            pb = be  # the MILP already passed to HiGHS, its solver state cleared (no rebuild)
            if cut > D or (d < _REBOX * D and shrinks):  # this box holds only d <= D, or is wider
                pb = MilpBackend(inst, budget=min(1.0, d))  # than needed: prove on the box of budget d
                for prev in inst.previous:
                    pb.add_diversity(prev)
            left = deadline - time.perf_counter()
            if left <= 0:
                return Outcome(x, "feasible", floor, calls, why="time limit before the proof re-solve")
            pr = pb.minimize(left, cut=cut)
            calls += 1
            v = float(inst.distance(pr.x[None])[0]) if pr.x is not None else math.inf
            if proof_closes(pr.status, v, pr.delta_min, cut):
                # HiGHS under an objective bound ends "optimal" with a point above the bound (one its
                # heuristics saw and the bound rejected) when the search closed with nothing below it.
                lb = inst.round_bound(cut - bound_slack(cut))
                return Outcome(x, "optimal", lb, calls, proof=f"second route: no point below {cut:.9g}")
            if pr.x is None or v >= cut:  # time limit, or a bound below the cut without a point below it
                why = ("time limit in the proof re-solve" if pr.status != "optimal" else
                       f"the proof re-solve's bound {pr.delta_min:.9g} lies below the cut {cut:.9g}, "
                       "and it returned no point below it")
                return Outcome(x, "feasible", min(floor, max(pr.delta_min, 0.0)), calls, why=why)
            y = self._validator(inst, pr.cells)(pr.x)
            v = float(inst.distance(pr.x[None])[0])
            floor = inst.round_bound(min(floor, max(pr.delta_min, 0.0)))
            if y is None or float(inst.distance(y[None])[0]) >= d:
                # A relaxed point below the cut that is no counterfactual (a boundary point): both routes'
                # dual bounds still bound every counterfactual, and may certify d on their own.
                if pr.status == "optimal" and inst.certified(d, floor):
                    return Outcome(x, "optimal", floor, calls,
                                   proof=f"both routes' dual bounds >= {floor:.9g} (the second's optimum {v:.9g} "
                                         "is a boundary point of the relaxed reading)")
                why = (f"the proof re-solve found a point of the relaxed reading at distance {v:.9g} below the "
                       f"cut {cut:.9g} that does not verify as a counterfactual")
                return Outcome(x, "feasible", floor, calls, why=why)
            x = y  # the first solve missed a closer counterfactual; prove the new one
            if pr.status != "optimal":
                return Outcome(x, "feasible", floor, calls, why="time limit in the proof re-solve")
            why = "the proof re-solve kept finding closer counterfactuals"
        return Outcome(x, "feasible", floor, calls, why=why)

    def _search(self, inst: Instance) -> Outcome:
        """One search: z3 (Algorithm 1) or the MILP; the point it returns is verified."""
        deadline = time.perf_counter() + self.time_limit
        if self.backend == "z3":
            be = _z3_backend()(inst)
            for prev in inst.previous:
                be.add_diversity(prev)
            return be.minimize(self.time_limit, self._validator(inst, improve=True))
        return self._milp(inst, deadline)

    def solve(self, world: TabularWorld, x: np.ndarray, **options: Any) -> list[Recourse]:
        self._check_params()
        inst = self._instance(world, x)
        method = f"{self.name}-{self.backend}"
        base = {"backend": self.backend, "norm": self.norm, "rel_tol": float(self.rel_tol),
                "epsilon": float(self.epsilon), "verified_by": "oracle" if self.oracle is not None else "white-box"}
        if inst.rules is not None:
            base["rules"] = len(inst.rules.compiled.names)
        if inst.blocked is not None and not world.model.predict(inst.x_hat[None, :])[0]:
            return [Recourse.none(method, status="no_recourse", runtime=0.0,
                                  reason=f"no counterfactual keeps rule {inst.blocked!r} for this agent")]
        if world.model.predict(inst.x_hat[None, :])[0]:
            return [Recourse((), (), inst.x_hat.copy(), 0.0, True, method, optimal=True,
                             extra={**base, "reason": "already_positive", "distance": 0.0, "delta_min": 0.0,
                                    "gap": 0.0, "sat_calls": 0, "counterfactual": inst.x_hat.tolist()})]
        found: list[Recourse] = []
        for _ in range(int(self.n_diverse)):
            t0 = time.perf_counter()
            out = self._search(inst)
            rt = time.perf_counter() - t0
            if out.x is None:
                if not found:  # later diverse runs may simply run out of counterfactuals
                    status = "no_recourse" if out.status == "infeasible" else "unknown"
                    reason = "no plausible counterfactual exists" if status == "no_recourse" else out.why
                    return [Recourse.none(method, status=status, runtime=rt, reason=reason)]
                break
            found.append(self._recourse(inst, out.x, out, rt, method, base))
            inst.previous.append(out.x)
        # Successive runs add constraints, so optima are non-decreasing; within the tolerance a later
        # point may still land nearer, so report best first.
        return sorted(found, key=lambda r: r.cost)

    def _recourse(self, inst: Instance, cf: np.ndarray, out: Outcome, rt: float, method: str,
                  base: dict[str, Any]) -> Recourse:
        d = float(inst.distance(cf[None, :])[0])
        delta_min = float(min(max(out.delta_min, 0.0), d))
        steps, ids = [], []
        for j, r in enumerate(inst.raws):
            cols = list(r.columns)
            if np.array_equal(cf[cols], inst.x_hat[cols]):
                continue
            ids.append(j)
            if r.kind == "group":
                steps.append((r.name, inst.schema.features[cols[int(np.argmax(cf[cols]))]].name))
            else:
                v = cf[cols[0]]
                steps.append((r.name, int(v) if inst.integral[cols[0]] else float(v)))
        certified = out.status == "optimal" and inst.certified(d, delta_min)
        gap = (d - delta_min) / d if d > 0 else 0.0
        extra = {**base, "distance": d, "delta_min": delta_min, "gap": gap, "sat_calls": out.calls,
                 "counterfactual": cf.tolist()}
        if certified:
            extra["proof"] = out.proof or ("z3: UNSAT at the bound (exact rationals)" if self.backend == "z3" else "")
        else:
            extra["reason"] = out.why or (f"gap {d - delta_min:.3g} above the tolerance {inst.tolerance(d):.3g}"
                                          if out.status == "optimal" else f"search ended {out.status}")
        exact = exact_score(inst.model, cf) if self.exact_witness else None
        if exact is not None:  # the witness re-read in exact rational arithmetic (LR, MLP)
            extra["witness_exact_score"] = float(exact)
        return Recourse(tuple(steps), tuple(ids), cf, d, True, method, runtime=rt, optimal=certified, extra=extra)
