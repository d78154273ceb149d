"""The world's rules (``envs.rules``, issue 55) as the tabular generators use them, vectorized over agents.

``RuleGate.of(world)`` is None for a world without rules beyond the schema's mutability and without
cost weights (the generators then run exactly as before); otherwise it holds the world's
``CompiledRules`` and gives

- ``box(X, lo, hi)``: the agents' reachable boxes narrowed by every rule that bounds one column for
  an agent whatever the rest of the counterfactual (a step bound, ``x_cf.F >= x.F + c``, a forbidden
  category of a one-hot group, ``x_cf.G = x.G`` on a group), conditions on the agent's own values
  (``IF x.F = 'a' THEN ...``) read per agent: all agents at once, one pass per such rule. A valid
  relaxation (every rule-keeping point stays in it; strict comparisons on real columns take their
  closure), and the agent's own value always stays inside, so the searches' steps keep their
  bearings; the other rules are left to ``keeps``;
- ``keeps(X, C)``: the shared checker (``CompiledRules.holds``) on candidate rows ``C`` (..., D) of
  the agents ``X`` (broadcast): what every accepted candidate must pass;
- ``cost``: the (J, 2) cost weights of each raw feature's increase and decrease, or None when all are 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from envs.rules import CompiledRules
from envs.rules.atoms import OP_CODES, truth


@dataclass
class _Bound:
    """Rule clause ``antecedent (x only) => consequent`` that bounds columns of x_cf for the agents where the
    antecedent holds. ``kind``: "col" (a·x_cf[col] + k op 0), "forbid" (x_cf[col] = 0), "pick" (x_cf[col] = 1,
    the group's other columns 0), "pin" (the group's columns = x's)."""

    antecedent: list[tuple[np.ndarray, np.ndarray, float, int]]  # (x cols, x coefs, const, op code) per atom
    kind: str
    cols: np.ndarray  # the column (col, forbid, pick: first) and, for pick and pin, the group's columns
    coef: float = 1.0
    x_cols: np.ndarray | None = None
    x_coefs: np.ndarray | None = None
    const: float = 0.0
    op: str = "<="
    integral: bool = False


class RuleGate:
    """The rules of one world for the generators (see the module's docstring)."""

    def __init__(self, rules: CompiledRules) -> None:
        self.rules = rules
        self.cost = rules.cost if rules.weighted else None
        bounds = _bounds(rules)
        plain = [b for b in bounds if b.kind == "col" and not b.antecedent]  # one matrix product for all
        self.bounds = [b for b in bounds if not (b.kind == "col" and not b.antecedent)]
        self._plain = None
        if plain:
            D = len(rules.schema)
            M = np.zeros((D, len(plain)))
            for i, b in enumerate(plain):
                np.add.at(M[:, i], b.x_cols, b.x_coefs)
            coef = np.array([b.coef for b in plain])
            flip = {"<=": ">=", "<": ">", ">=": "<=", ">": "<", "=": "="}
            ops = [b.op if b.coef > 0 else flip[b.op] for b in plain]
            self._plain = (M, np.array([b.const for b in plain]), coef, np.array([int(b.cols[0]) for b in plain]),
                           np.array([o in ("<=", "<", "=") for o in ops]), np.array([o in (">=", ">", "=") for o in ops]),
                           np.array([o in ("<", ">") for o in ops]), np.array([b.integral for b in plain]))

    @classmethod
    def of(cls, world) -> RuleGate | None:
        """The gate of ``world``, or None where it has no rule beyond the schema's mutability and no weight."""
        rules = world.compiled_rules() if callable(getattr(world, "compiled_rules", None)) else None
        if rules is None or not (rules.constraining or rules.weighted):
            return None
        return cls(rules)

    def keeps(self, X: np.ndarray, C: np.ndarray) -> np.ndarray:
        """(...) bool: each row of ``C`` (..., D) keeps every rule for its agent in ``X`` (broadcast to ``C``)."""
        C = np.asarray(C, float)
        shape = C.shape[:-1]
        if not C.size:
            return np.zeros(shape, bool)
        if not self.rules.constraining:
            return np.ones(shape, bool)
        D = C.shape[-1]
        X = np.asarray(X, float)
        if X.size == D:  # one agent for every row (a request of one record): its side of each atom once
            return self.rules.holds(X.reshape(D), C.reshape(-1, D)).reshape(shape)
        X = np.broadcast_to(X, C.shape).reshape(-1, D)
        return self.rules.holds(X, C.reshape(-1, D)).reshape(shape)

    def box(self, X: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, D) the boxes ``lo``, ``hi`` of the agents ``X`` (N, D) narrowed by the one-column rules."""
        if not self.bounds and self._plain is None:
            return lo, hi
        X = np.atleast_2d(np.asarray(X, float))
        lo, hi = np.array(lo, float), np.array(hi, float)
        rows = np.arange(len(X))
        if self._plain is not None:  # a·x_cf[col] + (x·m + const) op 0 for every agent: x_cf[col] op' v
            M, const, coef, col, upper, lower, strict, integral = self._plain
            v = -(X @ M + const) / coef  # (N, B)
            up = np.where(integral, np.where(strict, np.ceil(v - 1e-9) - 1.0, np.floor(v + 1e-9)), v)
            down = np.where(integral, np.where(strict, np.floor(v + 1e-9) + 1.0, np.ceil(v - 1e-9)), v)
            for i, c in enumerate(col):
                if upper[i]:
                    hi[:, c] = np.minimum(hi[:, c], up[:, i])
                if lower[i]:
                    lo[:, c] = np.maximum(lo[:, c], down[:, i])
        for b in self.bounds:
            on = np.ones(len(X), bool)
            for cols, coefs, const, op in b.antecedent:
                e = X[:, cols] @ coefs + const
                on &= truth(op, e, np.abs(X[:, cols]) @ np.abs(coefs) + abs(const))
            if not on.any():
                continue
            if b.kind == "forbid":
                hi[on, b.cols[0]] = np.minimum(hi[on, b.cols[0]], 0.0)
            elif b.kind == "pick":
                lo[on, b.cols[0]] = np.maximum(lo[on, b.cols[0]], 1.0)
                others = b.cols[1:]
                hi[np.ix_(rows[on], others)] = np.minimum(hi[np.ix_(rows[on], others)], 0.0)
            elif b.kind == "pin":
                sub = np.ix_(rows[on], b.cols)
                lo[sub], hi[sub] = np.maximum(lo[sub], X[sub]), np.minimum(hi[sub], X[sub])
            else:
                c = int(b.cols[0])
                k = (X[on][:, b.x_cols] @ b.x_coefs if len(b.x_cols) else 0.0) + b.const
                v = -k / b.coef  # a·x_cf + k op 0  <=>  x_cf op' v (op' flipped where a < 0)
                op = b.op if b.coef > 0 else {"<=": ">=", "<": ">", ">=": "<=", ">": "<", "=": "="}[b.op]
                if op in ("<=", "<", "="):
                    up = v
                    if b.integral:
                        up = np.where(op == "<", np.ceil(v - 1e-9) - 1.0, np.floor(v + 1e-9))
                    hi[on, c] = np.minimum(hi[on, c], up)
                if op in (">=", ">", "="):
                    down = v
                    if b.integral:
                        down = np.where(op == ">", np.floor(v + 1e-9) + 1.0, np.ceil(v - 1e-9))
                    lo[on, c] = np.maximum(lo[on, c], down)
        # the agent's own value stays inside (a rule that forces a move is left to ``keeps``); an empty box
        # (no rule-keeping value: the gate rejects every candidate) is the agent's value alone
        lo, hi = np.minimum(lo, X), np.maximum(hi, X)
        return lo, hi


def _bounds(rules: CompiledRules) -> list[_Bound]:
    """The clauses of ``rules`` that bound one column (or pin / restrict one one-hot group) for an agent."""
    groups = {r.columns[1:]: r for r in rules.raws if r.kind == "group"}
    out = []
    for clause in rules.clauses:
        if any(a.cf_cols for a in clause.antecedent) or rules.names[clause.rule].endswith("(schema)"):
            continue  # the condition reads x_cf: not a box (the schema's mutability: the geometry's own box)
        ant = [(np.array(a.x_cols, np.int64), np.array(a.x_coefs, float), float(a.const), OP_CODES[a.op])
               for a in clause.antecedent]
        a = clause.consequent
        if len(a.cf_cols) == 1 and a.op != "!=":
            c = int(a.cf_cols[0])
            whole = bool(rules.integral[c])  # whole values: the bound rounds inward
            out.append(_Bound(ant, "col", np.array([c]), float(a.cf_coefs[0]), np.array(a.x_cols, np.int64),
                              np.array(a.x_coefs, float), float(a.const), "=" if a.op == "==" else a.op, whole))
            continue
        r = groups.get(tuple(a.cf_cols))
        if r is None or a.op not in ("=", "==", "!=") or \
                any(coef != r.columns.index(c) for c, coef in zip(a.cf_cols, a.cf_coefs, strict=True)):
            continue
        if not a.x_cols:  # x_cf.G op 'b': the group's index against a constant code
            code = -float(a.const)
            if not code.is_integer() or not 0 <= code < len(r.columns):
                continue
            col = r.columns[int(code)]
            if a.op == "!=":
                out.append(_Bound(ant, "forbid", np.array([col])))
            else:
                out.append(_Bound(ant, "pick", np.array([col, *(c for c in r.columns if c != col)])))
        elif a.op != "!=" and tuple(a.x_cols) == tuple(a.cf_cols) and a.const == 0 and \
                all(math.isclose(xc, -cc) for xc, cc in zip(a.x_coefs, a.cf_coefs, strict=True)):
            out.append(_Bound(ant, "pin", np.array(r.columns)))  # x_cf.G = x.G
    return out


__all__ = ["RuleGate"]
