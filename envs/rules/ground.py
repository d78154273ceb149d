"""Rules grounded on one agent: linear inequalities over x_cf in disjunctive form, and their box.

With the agent's values x substituted, every atom is ``sum a_i x_cf[c_i] + k op 0`` and every clause
``A_1 and ... and A_n => C`` is the disjunction ``not A_1 or ... or not A_n or C``; each literal is one
or two conjunctions of inequalities ``sum a_i x_cf[c_i] <= rhs`` (``<`` where strict): ``=`` is two
inequalities, ``!=`` two disjuncts. Atoms without x_cf are decided here. An atom on a one-hot
group's index (PLAF's reading of ``x_cf.G = 'b'`` / ``!= 'b'``) becomes ``x_cf[G=b] = 1`` / ``= 0``,
the same on every valid one-hot row and far tighter for a solver.

Two readings of an inequality over a box (``Ineq.rhs_for``):

- *relaxed*: the closure of strict ones, loosened by the checker's tolerance over the box, so it
  contains every point the checker accepts (a solver's bound on it bounds every rule-keeping point);
  an integer form (integral columns, integer coefficients) is exact: ``<= floor``, strict ``<= ceil - 1``.
- *robust* (``margin``): continuous inequalities tightened by margin·(1 + sum |a_i| R_i) and the
  tolerance, so that a solver's point within its feasibility tolerance still keeps the rule.

``GroundRules.box`` narrows a box by the clauses that are single inequalities on one column (step
bounds, mutability, a forbidden category): a valid relaxation, as every rule-keeping point is in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.rules.atoms import NEGATION, OP_CODES, TOL, truth
from envs.rules.plaf_syntax import Atom


@dataclass(frozen=True)
class Ineq:
    """``sum coefs * x_cf[cols] <= rhs`` (``<`` when strict); ``size``: the x-side magnitude in the tolerance;
    ``integral``: integral columns and integer coefficients (the left side takes whole values)."""

    cols: tuple[int, ...]
    coefs: tuple[float, ...]
    rhs: float
    strict: bool
    size: float  # sum |b_j x_j| + |const| of the atom it came from
    integral: bool = False

    def span(self, lo: np.ndarray, hi: np.ndarray) -> tuple[float, float]:
        """(min, max) of the left side over the box [lo, hi] (interval arithmetic; plain Python: 1-3 terms)."""
        mn = mx = 0.0
        for c, a in zip(self.cols, self.coefs, strict=True):
            u, v = a * float(lo[c]), a * float(hi[c])
            mn, mx = (mn + u, mx + v) if u <= v else (mn + v, mx + u)
        return mn, mx

    def rhs_for(self, lo: np.ndarray, hi: np.ndarray, scale: np.ndarray, margin: float | None = None) -> float:
        """The right side of the relaxed reading (``margin`` None) or of the robust one (see the module)."""
        reach = sum(abs(a) * max(abs(float(lo[c])), abs(float(hi[c]))) for c, a in zip(self.cols, self.coefs,
                                                                                         strict=True))
        loose = TOL * (reach + self.size)
        if self.integral and loose < 0.5:
            n = round(self.rhs)
            if abs(self.rhs - n) <= 1e-12 * (1.0 + abs(n)):
                return float(n - 1 if self.strict else n)
            return float(math.ceil(self.rhs) - 1 if self.strict else math.floor(self.rhs))
        if margin is None:
            return self.rhs + loose
        return self.rhs - loose - margin * (1.0 + sum(abs(a) * float(scale[c]) for c, a in zip(self.cols, self.coefs,
                                                                                              strict=True)))


Disjunct = tuple[Ineq, ...]  # a conjunction


@dataclass(frozen=True)
class GroundClause:
    """One clause of rule ``rule`` for this agent: at least one disjunct (a conjunction of inequalities) holds."""

    rule: str
    disjuncts: tuple[Disjunct, ...]


@dataclass
class GroundRules:
    """The rules of ``compiled`` grounded on agent ``x``; ``unsatisfiable`` names a rule no x_cf can keep."""

    compiled: Any  # the CompiledRules it grounds (envs.rules.compiled; not imported: it imports this module)
    x: np.ndarray
    clauses: tuple[GroundClause, ...]
    unsatisfiable: str | None = None

    def violation(self, cf: np.ndarray) -> str | None:
        """The first rule the counterfactual ``cf`` breaks (the shared checker), or None."""
        return self.compiled.violations(self.x, np.asarray(cf, float)[None])[0]

    def prune(self, lo: np.ndarray, hi: np.ndarray, scale: np.ndarray, margin: float | None = None) -> tuple[list[GroundClause], str | None]:
        """The clauses that constrain the box: disjuncts impossible on it dropped, clauses a disjunct of which
        always holds on it dropped; and the name of a rule none of whose disjuncts is possible (else None)."""
        out = []
        for cl in self.clauses:
            keep, always = [], False
            for dj in cl.disjuncts:
                spans = [q.span(lo, hi) for q in dj]
                rhs = [q.rhs_for(lo, hi, scale, margin) for q in dj]
                if any(s[0] > r for s, r in zip(spans, rhs, strict=True)):
                    continue  # this disjunct cannot hold on the box
                if all(s[1] <= r for s, r in zip(spans, rhs, strict=True)):
                    always = True
                    break
                keep.append(dj)
            if always:
                continue
            if not keep:
                return out, cl.rule
            out.append(GroundClause(cl.rule, tuple(keep)))
        return out, None

    def box(self, lo: np.ndarray, hi: np.ndarray, scale: np.ndarray, rounds: int = 4) -> tuple[np.ndarray, np.ndarray, str | None]:
        """The box narrowed by every clause that is one inequality on one column (relaxed reading, so
        it holds every rule-keeping point), repeated while it narrows; and the name of a rule that no
        point of the box keeps (then the box may be empty), else None."""
        lo, hi = np.array(lo, float), np.array(hi, float)
        integral = self.compiled.integral
        for _ in range(rounds):
            clauses, dead = self.prune(lo, hi, scale)
            if dead is not None:
                return lo, hi, dead
            before = (lo.copy(), hi.copy())
            for cl in clauses:
                if len(cl.disjuncts) != 1:
                    continue
                for q in cl.disjuncts[0]:
                    if len(q.cols) != 1:
                        continue
                    c, a = q.cols[0], q.coefs[0]
                    v = q.rhs_for(lo, hi, scale) / a
                    if a > 0:
                        hi[c] = min(hi[c], math.floor(v + 1e-9) if integral[c] else v)
                    else:
                        lo[c] = max(lo[c], math.ceil(v - 1e-9) if integral[c] else v)
            if np.any(lo > hi):
                name = next(cl.rule for cl in clauses if len(cl.disjuncts) == 1)
                return lo, hi, name
            if np.array_equal(before[0], lo) and np.array_equal(before[1], hi):
                break
        return lo, hi, None


def ground(compiled: Any, x: np.ndarray) -> GroundRules:
    """The clauses of ``compiled`` for agent ``x`` (see the module's docstring)."""
    group_of = {c: r for r in compiled.raws if r.kind == "group" for c in r.columns}
    clauses, dead = [], None
    for clause in compiled.clauses:
        literals = [_literal(a, x, NEGATION[a.op], group_of, compiled.integral) for a in clause.antecedent]
        literals.append(_literal(clause.consequent, x, clause.consequent.op, group_of, compiled.integral))
        if any(lit is True for lit in literals):
            continue  # a literal holds whatever x_cf: the clause holds
        disjuncts = tuple(dj for lit in literals if lit is not False for dj in lit)
        name = compiled.names[clause.rule]
        if not disjuncts and dead is None:
            dead = name
        clauses.append(GroundClause(name, disjuncts))
    return GroundRules(compiled, x, tuple(clauses), dead)


def _literal(atom: Atom, x: np.ndarray, op: str, group_of: dict, integral: np.ndarray
             ) -> bool | tuple[Disjunct, ...]:
    """``atom`` read with operator ``op`` for agent ``x``: True/False when it does not depend on x_cf,
    else its disjuncts."""
    k = atom.const + float(np.dot(x[list(atom.x_cols)], atom.x_coefs)) if atom.x_cols else atom.const
    size = abs(atom.const) + float(np.abs(x[list(atom.x_cols)] * np.asarray(atom.x_coefs)).sum()) if atom.x_cols \
        else abs(atom.const)
    cols, coefs = tuple(atom.cf_cols), tuple(float(a) for a in atom.cf_coefs)
    if not cols:
        return bool(truth(OP_CODES[op], np.array([k]), np.array([size]))[0])
    r = group_of.get(cols[0])
    if r is not None and op in ("=", "==", "!=") and set(cols) == set(r.columns[1:]) and all(
            a == r.columns.index(c) for c, a in zip(cols, coefs, strict=True)):
        code = -k  # the atom reads "index of group r op code": one column of the group
        if not float(code).is_integer() or not 0 <= code < len(r.columns):
            return op == "!="
        cols, coefs, k, size = (r.columns[int(code)],), (1.0,), (-1.0 if op != "!=" else 0.0), 1.0
        op = "="
    neg = tuple(-a for a in coefs)
    whole = all(bool(integral[c]) for c in cols) and all(float(a).is_integer() for a in coefs)
    if op in ("<=", "<"):
        return ((Ineq(cols, coefs, -k, op == "<", size, whole),),)
    if op in (">=", ">"):
        return ((Ineq(cols, neg, k, op == ">", size, whole),),)
    if op in ("=", "=="):
        return ((Ineq(cols, coefs, -k, False, size, whole), Ineq(cols, neg, k, False, size, whole)),)
    return ((Ineq(cols, coefs, -k, True, size, whole),), (Ineq(cols, neg, k, True, size, whole),))
