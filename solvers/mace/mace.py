"""MACE: model-agnostic nearest counterfactual explanations (paper §3–§4), two backends.

``MACE(backend="milp" | "z3")`` returns the nearest plausible counterfactual within epsilon of
the optimum, the certified lower bound delta_min, and optionally k diverse counterfactuals by
successive runs with l0 diversity clauses (paper §4.2). Every counterfactual returned has been
verified in numpy (the model's own predict, the plausibility box, one-hot validity, diversity); a
candidate that fails for numerical reasons is re-solved with a 100x larger margin/eta and tighter
tolerances, and never returned unverified.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import numpy as np

from envs.recourse import Recourse
from envs.tabular import TabularWorld
from solvers.base import Solver
from solvers.mace.distance import Norm, norm_weights, raw_features
from solvers.mace.domain import Instance, Outcome, clean, integral_columns, plausible_box, problems
from solvers.mace.milp import MilpBackend

BACKENDS = ("milp", "z3")


def _z3_backend():
    """The z3 backend class, imported on use: z3-solver is the optional ``smt`` extra."""
    try:
        from solvers.mace.smt import Z3Backend
    except ImportError as err:
        raise ImportError(f"backend: 'z3' needs z3-solver (pip install 'recourse-gym[smt]'): {err}") from None
    return Z3Backend
_TIGHTEN = (1.0, 100.0, 10000.0)  # margin/eta multipliers of the retries after a failed verification


class MACE(Solver):
    """Nearest (and diverse) counterfactuals with an optimality certificate."""

    name = "mace"
    exact = True

    def __init__(self, backend: Literal["milp", "z3"] = "milp", norm: Norm = "one", epsilon: float = 1e-3,
                 n_diverse: int = 1, plausible: bool = True, time_limit: float = 60.0, margin: float = 1e-6,
                 eta: float = 1e-6, seed: int = 0) -> None:
        self.backend = backend  # "milp" (HiGHS, direct minimisation) or "z3" (SMT, Algorithm 1)
        self.norm = norm  # "zero", "one", "infty" or (alpha, beta, gamma) of Eq. 3
        self.epsilon = epsilon  # accuracy of the distance: d <= optimum + epsilon
        self.n_diverse = n_diverse  # number of successive diverse counterfactuals
        self.plausible = plausible  # actionability: immutable / monotone features (ranges always hold)
        self.time_limit = time_limit  # seconds per counterfactual (all oracle calls together)
        self.margin = margin  # accept iff score >= margin (the model's strict score > 0, robustly)
        self.eta = eta  # a continuous split goes right at x >= t + eta·R
        self.seed = seed  # solver random seed

    def _check_params(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend: unknown backend {self.backend!r}; expected one of {BACKENDS}")
        if not 0.0 < float(self.epsilon) < 1.0:
            raise ValueError(f"epsilon: must be in (0, 1), got {self.epsilon!r}")
        if int(self.n_diverse) < 1:
            raise ValueError(f"n_diverse: must be >= 1, got {self.n_diverse!r}")
        if not self.time_limit > 0:
            raise ValueError(f"time_limit: must be > 0, got {self.time_limit!r}")

    def _instance(self, world: TabularWorld, x: np.ndarray) -> Instance:
        schema = world.schema
        raws = raw_features(schema)
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
        return Instance(schema, world.model, x, raws, weights, lo, hi, integral_columns(schema),
                        float(self.epsilon), float(self.margin), float(self.eta), seed=int(self.seed))

    def _search(self, inst: Instance, tighten: float, time_limit: float) -> Outcome:
        """One backend search. z3: Algorithm 1. MILP: minimise within growing distance budgets.

        The MILP galloping search solves min d s.t. d <= D for D = 4^k / 1024 (k = 0..5): a D with no
        counterfactual proves delta_min >= D (as an UNSAT step of Algorithm 1); the first feasible one
        holds the global optimum, and its dual bound is global too.
        """
        if self.backend == "z3":
            be = _z3_backend()(inst)
            for prev in inst.previous:
                be.add_diversity(prev)
            return be.minimize(time_limit)
        t0, floor, calls = time.perf_counter(), 0.0, 0
        budgets = [4.0**k / 1024 for k in range(6)] if inst.weights[1] + inst.weights[2] > 0 else [1.0]
        for D in budgets:
            be = MilpBackend(inst, tol=1e-9 / tighten, budget=D)  # 1e-8 let HiGHS prune a better node once
            for prev in inst.previous:
                be.add_diversity(prev)
            out = be.minimize(time_limit - (time.perf_counter() - t0))
            calls += 1
            # Within the box of budget D lies every point with d <= D: an optimum <= D is global (its
            # bound too); none, or an optimum above D, proves d* > D, as an UNSAT step would.
            done = out.status in ("feasible", "unknown") or (
                out.status == "optimal" and float(inst.distance(out.x[None])[0]) <= D + inst.epsilon)
            if done or D >= 1.0:  # outside the box every d > D, so the box's bound holds globally only up to D
                return Outcome(out.x, out.status, max(min(out.delta_min, D), floor), calls)
            floor = D
        raise AssertionError("unreachable: the last budget is 1")

    def _one(self, inst: Instance) -> tuple[Outcome, np.ndarray | None, str]:
        """One run of the search, retried with a larger margin until its point verifies."""
        t0, out, why = time.perf_counter(), None, ""
        for k in _TIGHTEN:
            left = self.time_limit - (time.perf_counter() - t0)
            if left <= 0:
                break
            tight = Instance(**{**vars(inst), "margin": inst.margin * k, "eta": inst.eta * k,
                                "diversity_gap": inst.diversity_gap * k})
            out = self._search(tight, k, left)
            if out.x is None:
                return out, None, out.status
            x = clean(inst, out.x)
            issues = problems(inst, x, self.plausible)
            if not issues:
                return out, x, ""
            why = "; ".join(issues)
        status = out.status if out is not None else "unknown"
        return Outcome(None, "unknown", 0.0, 0 if out is None else out.calls), None, f"{status}: not verified ({why})"

    def solve(self, world: TabularWorld, x: np.ndarray, **options: Any) -> list[Recourse]:
        self._check_params()
        inst = self._instance(world, x)
        method = f"{self.name}-{self.backend}"
        base = {"backend": self.backend, "norm": self.norm, "epsilon": float(self.epsilon)}
        if world.model.predict(inst.x_hat[None, :])[0]:
            return [Recourse((), (), inst.x_hat.copy(), 0.0, True, method, optimal=True,
                             extra={**base, "reason": "already_positive", "distance": 0.0, "delta_min": 0.0,
                                    "sat_calls": 0, "counterfactual": inst.x_hat.tolist()})]
        found: list[Recourse] = []
        for _ in range(int(self.n_diverse)):
            t0 = time.perf_counter()
            out, cf, why = self._one(inst)
            rt = time.perf_counter() - t0
            if cf is None:
                if not found:  # later diverse runs may simply run out of counterfactuals
                    status = "no_recourse" if out.status == "infeasible" else "unknown"
                    reason = ("no plausible counterfactual exists" if status == "no_recourse"
                              else why or "time limit before any counterfactual was found")
                    return [Recourse.none(method, status=status, runtime=rt, reason=reason)]
                break
            found.append(self._recourse(inst, cf, out, rt, method, base))
            inst.previous.append(cf)
        # Successive runs add constraints, so optima are non-decreasing; within epsilon a later point
        # may still land nearer, so report best first.
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
        certified = out.status == "optimal" and d - delta_min <= inst.epsilon + 1e-9
        return Recourse(tuple(steps), tuple(ids), cf, d, True, method, runtime=rt, optimal=certified,
                        extra={**base, "distance": d, "delta_min": delta_min, "sat_calls": out.calls,
                               "counterfactual": cf.tolist()})
