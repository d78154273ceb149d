"""The exact weighted set cover ILP of the learning-CFE paper (§2.1), through CVXPY and PuLP.

For an agent with deficit D (the capabilities it lacks, t & ~x) and allowed actions, solve

    min  sum_i c_i a_i   s.t.  sum_i d_ij a_i >= 1 for every j in D,   a_i in {0, 1},
                               a_i = 0 for actions the agent may not use.

Uniqueness: after the optimum S*, the no-good cut sum_{i in S*} a_i <= |S*| - 1 removes S* (and
its supersets, which cost more) and the problem is solved again; the optimum is unique iff the
second optimum costs more. Both backends run with zero MIP gap so "optimal" means optimal.
Agents that are already accepted, or whose allowed actions cannot cover the deficit at all, are
answered without calling a solver. These ILPs are the reference; data generation uses the
compiled branch and bound of :mod:`solvers.setcover_fast`.
"""

from __future__ import annotations

import time
import warnings
from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np

from envs.capability import CapabilityWorld
from solvers.base import CoverLabels, SetCoverSolver

REL_TOL = 1e-9  # relative tolerance when comparing two optimal costs

# (deficit (n,) bool, usable (A,) bool, cut: action ids to exclude as a set, or None) ->
# (chosen action ids or None, proven): (ids, True) optimal, (None, True) infeasible, (ids, False)
# the best cover found before time_limit, (None, False) time_limit hit before any cover was found.
SolveFn = Callable[[np.ndarray, np.ndarray, np.ndarray | None], tuple[np.ndarray | None, bool]]


def _same_cost(a: float, b: float) -> bool:
    return abs(a - b) <= REL_TOL * max(abs(a), abs(b))


class _IlpSetCover(SetCoverSolver):
    """The per-agent loop shared by the ILP backends; a backend only builds and solves one ILP."""

    check_unique: bool
    time_limit: float | None

    @abstractmethod
    def _prepare(self, world: CapabilityWorld) -> SolveFn:
        """Check the backend and return the function that solves one agent's ILP in ``world``."""

    def label_batch(self, world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None = None) -> CoverLabels:
        t0 = time.perf_counter()
        if self.time_limit is not None and not self.time_limit > 0:
            raise ValueError(f"time_limit: expected None or a positive number of seconds, got {self.time_limit!r}")
        X, groups = world.validate_agents(X, groups)
        B, A = len(X), world.n_actions
        deficits = world.deficits(X, groups)
        acts = world.actions.astype(np.int64)
        # Only allowed actions that provide a needed capability can be in an optimal cover.
        usable = np.broadcast_to(world.allowed(groups), (B, A)) & (deficits.astype(np.int64) @ acts.T > 0)
        coverable = ~(deficits & ~(usable.astype(np.int64) @ acts > 0)).any(axis=1)
        solve = self._prepare(world) if (coverable & deficits.any(axis=1)).any() else None
        setup = (time.perf_counter() - t0) / max(B, 1)  # world-level work, shared evenly

        cost = np.zeros(B)
        n_optimal = np.ones(B, dtype=np.int8)
        runtime = np.full(B, setup)
        sets: list[tuple[int, ...]] = [()] * B
        unproven = 0
        for i in range(B):
            t1 = time.perf_counter()
            if not deficits[i].any():
                pass  # already accepted: the empty set, cost 0, trivially unique
            elif not coverable[i]:
                cost[i], n_optimal[i] = np.inf, 0
            else:
                chosen, proven = self._checked(solve, world, deficits[i], usable[i], None)
                if chosen is None:
                    raise RuntimeError(f"{self.name}: time_limit={self.time_limit}s stopped agent {i}'s solve before "
                                       "any cover was found; raise time_limit")
                sets[i] = tuple(int(a) for a in np.sort(chosen))
                cost[i] = world.costs[list(sets[i])].sum()
                n_optimal[i] = -1
                if self.check_unique and proven:
                    other, proven = self._checked(solve, world, deficits[i], usable[i], chosen)
                    if other is not None and _same_cost(float(world.costs[other].sum()), cost[i]):
                        n_optimal[i] = 2
                    elif proven:
                        n_optimal[i] = 1
                unproven += not proven
            runtime[i] += time.perf_counter() - t1
        if unproven:
            warnings.warn(f"{self.name}: time_limit={self.time_limit}s stopped {unproven} of {B} agents' solves "
                          "before optimality was proven; their sets may be suboptimal (n_optimal = -1)",
                          RuntimeWarning, stacklevel=2)
        return CoverLabels(cost, CoverLabels.pack(sets), n_optimal, runtime)

    def _checked(self, solve: SolveFn, world: CapabilityWorld, deficit: np.ndarray, usable: np.ndarray,
                 exclude: np.ndarray | None) -> tuple[np.ndarray | None, bool]:
        """Run one solve; an answer that is not a cover (a solver stopped early) counts as none."""
        chosen, proven = solve(deficit, usable, exclude)
        if chosen is not None and not (
                world.actions[chosen][:, deficit].any(axis=0).all() and usable[chosen].all()
                and (exclude is None or not np.isin(exclude, chosen).all())):
            if proven:
                raise RuntimeError(f"{self.name}: the solver reported an optimum that is not a cover of the agent")
            chosen = None
        return chosen, proven


def _cvxpy_options(solver: str, time_limit: float | None) -> dict[str, Any]:
    """Zero-gap (and time-limit) options in each CVXPY backend's own vocabulary."""
    if solver == "HIGHS":
        return {"mip_rel_gap": 0.0, "mip_abs_gap": 0.0, **({"time_limit": float(time_limit)} if time_limit else {})}
    if solver == "SCIPY":
        return {"scipy_options": {"mip_rel_gap": 0.0, **({"time_limit": float(time_limit)} if time_limit else {})}}
    if time_limit is not None:
        raise ValueError(f"time_limit: supported with the CVXPY backends HIGHS and SCIPY, not {solver!r}")
    return {}


class CvxpySetCover(_IlpSetCover):
    """The paper's ILP through CVXPY: one DPP problem per world, re-parameterized per agent."""

    name = "setcover-ilp-cvxpy"

    def __init__(self, solver: str = "HIGHS", check_unique: bool = True, time_limit: float | None = None):
        self.solver = solver  # CVXPY mixed-integer backend (HIGHS, SCIPY, GLPK_MI, CBC, GUROBI, ...)
        self.check_unique = check_unique  # re-solve with a no-good cut to tell a unique optimum from a tie
        self.time_limit = time_limit  # seconds per ILP solve (None: no limit); HIGHS and SCIPY only

    def _prepare(self, world: CapabilityWorld) -> SolveFn:
        import cvxpy as cp
        from cvxpy.reductions.solvers.defines import MI_SOLVERS

        backend = str(self.solver).upper()
        if backend not in MI_SOLVERS:
            raise ValueError(f"solver: {self.solver!r} is not a CVXPY mixed-integer backend (one of {sorted(MI_SOLVERS)})")
        if backend not in cp.installed_solvers():
            raise ImportError(f"solver: the CVXPY backend {backend} is not installed "
                              f"(installed mixed-integer backends: {sorted(set(MI_SOLVERS) & set(cp.installed_solvers()))})")
        options = _cvxpy_options(backend, self.time_limit)
        A = world.n_actions
        a = cp.Variable(A, boolean=True)
        needed = cp.Parameter(world.n_features, nonneg=True)  # 1 on the agent's deficit
        usable = cp.Parameter(A, nonneg=True)  # upper bound of each a_i: 1 if the agent may use it
        cut = cp.Parameter(A, nonneg=True)  # indicator of the excluded set (all zero: no cut)
        cut_rhs = cp.Parameter(nonneg=True)
        problem = cp.Problem(cp.Minimize(world.costs @ a),
                             [world.actions.T.astype(float) @ a >= needed, a <= usable, cut @ a <= cut_rhs])

        def solve(deficit: np.ndarray, allowed: np.ndarray, exclude: np.ndarray | None) -> tuple[np.ndarray | None, bool]:
            needed.value = deficit.astype(float)
            usable.value = allowed.astype(float)
            indicator = np.zeros(A)
            if exclude is not None:
                indicator[exclude] = 1.0
            cut.value = indicator
            cut_rhs.value = 0.0 if exclude is None else float(len(exclude) - 1)
            try:
                problem.solve(solver=backend, **options)
            except cp.error.SolverError:
                if self.time_limit is None:
                    raise
                return None, False  # e.g. SCIPY stopped by the time limit without a solution
            if problem.status == cp.INFEASIBLE:
                return None, True
            if problem.status not in cp.settings.SOLUTION_PRESENT:
                raise RuntimeError(f"solver: CVXPY/{backend} returned status {problem.status!r}")
            chosen = None if a.value is None else np.flatnonzero(a.value > 0.5)
            return chosen, problem.status == cp.OPTIMAL

        return solve


_PULP_ALIASES = {"CBC": ("COIN_CMD", "PULP_CBC_CMD"), "HIGHS": ("HiGHS",)}  # first available wins


class PulpSetCover(_IlpSetCover):
    """The paper's ILP through PuLP (bundled CBC, or HiGHS through highspy), built per agent."""

    name = "setcover-ilp-pulp"

    def __init__(self, solver: str = "CBC", check_unique: bool = True, time_limit: float | None = None):
        self.solver = solver  # PuLP backend: "CBC", "HiGHS", or any name of pulp.listSolvers()
        self.check_unique = check_unique  # re-solve with a no-good cut to tell a unique optimum from a tie
        self.time_limit = time_limit  # seconds per ILP solve (None: no limit)

    def _prepare(self, world: CapabilityWorld) -> SolveFn:
        import pulp

        available = pulp.listSolvers(onlyAvailable=True)
        names = _PULP_ALIASES.get(str(self.solver).upper(), (self.solver,))
        if not set(names) & set(pulp.listSolvers()):
            raise ValueError(f"solver: {self.solver!r} is not a PuLP backend (CBC, HiGHS or one of {pulp.listSolvers()})")
        name = next((n for n in names if n in available), None)
        if name is None:
            raise ImportError(f"solver: the PuLP backend {self.solver!r} is not installed (available: {available})")
        with warnings.catch_warnings():  # PuLP 3.3 deprecates its bundled CBC (PULP_CBC_CMD) for COIN_CMD
            warnings.simplefilter("ignore", DeprecationWarning)
            backend = pulp.getSolver(name, msg=False, gapRel=0.0, gapAbs=0.0, timeLimit=self.time_limit)

        def solve(deficit: np.ndarray, allowed: np.ndarray, exclude: np.ndarray | None) -> tuple[np.ndarray | None, bool]:
            ids = np.flatnonzero(allowed)
            prob = pulp.LpProblem("cover", pulp.LpMinimize)
            a = [prob.add_variable(f"a{i}", cat=pulp.LpBinary) for i in ids]
            prob += pulp.lpSum(float(world.costs[i]) * v for i, v in zip(ids, a, strict=True))
            for j in np.flatnonzero(deficit):
                prob += pulp.lpSum(v for i, v in zip(ids, a, strict=True) if world.actions[i, j]) >= 1
            if exclude is not None:
                out = set(exclude.tolist())
                prob += pulp.lpSum(v for i, v in zip(ids, a, strict=True) if i in out) <= len(out) - 1
            prob.solve(backend)
            if prob.sol_status == pulp.LpSolutionInfeasible:
                return None, True
            if prob.sol_status == pulp.LpSolutionNoSolutionFound and self.time_limit is not None:
                return None, False
            if prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
                raise RuntimeError(f"solver: PuLP/{name} returned status {pulp.LpStatus[prob.status]!r}")
            chosen = ids[[(v.value() or 0.0) > 0.5 for v in a]]
            return chosen, prob.sol_status == pulp.LpSolutionOptimal

        return solve
