"""A rule set compiled against a schema: clauses of linear atoms, a vectorized checker, cost weights.

Every rule becomes PLAF text first (``plaf_statements``) and is parsed by PLAF's own parser
(``envs.rules.plaf_syntax``), so one reading serves MACE, GeCo and the checker:

- the schema's mutability (when ``mutability``): ``x_cf.F = x.F`` / ``>=`` / ``<=``;
- a step bound ``max_increase v`` (``max_levels_up`` on an ordinal): ``x_cf.F <= x.F + v``, and
  ``max_decrease v``: ``x_cf.F >= x.F - v``;
- a forbidden transition a -> b: ``IF x.F = 'a' THEN x_cf.F != 'b'``;
- a link F -> G with k per unit (on: up): ``IF x_cf.F > x.F THEN x_cf.G >= x.G + k * x_cf.F - k * x.F``
  (``<=`` for k < 0; on: down, ``IF x_cf.F < x.F`` with the difference the other way round);
- a PLAF statement as written (``GROUP`` statements only group GeCo's sampling; they constrain nothing).

Atoms are read as ``envs.rules.atoms`` says (a relative tolerance absorbs float round-off).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from envs.raw_features import DistanceFeature, distance_features
from envs.rules.atoms import OP_CODES, TOL, truth
from envs.rules.conflicts import check_conflicts
from envs.rules.ground import GroundRules, ground
from envs.rules.language import Forbid, Link, RuleError, RuleSet, StepBound
from envs.rules.plaf_syntax import Atom, Parser, PlafError
from envs.schema import FeatureSchema

_MUTABILITY = {"immutable": ("=", "immutable"), "increase": (">=", "increase-only"),
               "decrease": ("<=", "decrease-only")}


@dataclass(frozen=True)
class Clause:
    """``antecedent (all) => consequent`` of rule ``rule`` (an index into ``CompiledRules.names``)."""

    rule: int
    antecedent: tuple[Atom, ...]
    consequent: Atom


@dataclass
class CompiledRules:
    """Rules resolved against a schema (see the module's docstring); build with :func:`compile_rules`."""

    schema: FeatureSchema
    raws: tuple[DistanceFeature, ...]
    rules: RuleSet
    names: tuple[str, ...]  # every rule, the schema's mutability first: what ``violations`` reports
    statements: tuple[str, ...]  # each rule as PLAF text (one per rule name)
    clauses: tuple[Clause, ...]
    cost: np.ndarray  # (J, 2): the cost weight of each raw feature's increase and decrease (1: MACE's default)
    mutability: bool  # the schema's mutability is among the rules
    forbidden: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)  # raw -> (from, to, rule)
    links: list[tuple[int, int, float, str, int]] = field(default_factory=list)  # (from, to, k, on, rule)

    def __post_init__(self) -> None:
        self.integral = np.array([f.integer or f.kind in ("binary", "ordinal", "categorical") or f.group is not None
                                  for f in self.schema.features])  # columns that take whole values
        atoms = [a for c in self.clauses for a in (*c.antecedent, c.consequent)]
        d, m = len(self.schema), len(atoms)
        self._cf, self._x = np.zeros((d, m)), np.zeros((d, m))
        for k, a in enumerate(atoms):
            np.add.at(self._cf[:, k], list(a.cf_cols), a.cf_coefs)
            np.add.at(self._x[:, k], list(a.x_cols), a.x_coefs)
        self._const = np.array([a.const for a in atoms])
        self._op = np.array([OP_CODES[a.op] for a in atoms], np.int64)
        self._ant = np.zeros((m, len(self.clauses)))  # atom -> the clause whose antecedent it is in
        self._cons = np.zeros(len(self.clauses), np.int64)  # the consequent atom of each clause
        self._rule = np.zeros((len(self.clauses), len(self.names)))
        k = 0
        for i, c in enumerate(self.clauses):
            self._ant[k:k + len(c.antecedent), i] = 1
            k += len(c.antecedent)
            self._cons[i] = k
            k += 1
            self._rule[i, c.rule] = 1

    @property
    def weighted(self) -> bool:
        """Some feature's cost weight is not 1 (the distance is not MACE's default)."""
        return bool(np.any(self.cost != 1.0))

    @property
    def constraining(self) -> bool:
        """There is a rule beyond the schema's mutability."""
        return len(self.names) > self._n_schema

    @functools.cached_property
    def _n_schema(self) -> int:
        return sum(n.endswith("(schema)") for n in self.names)

    def broken(self, X: np.ndarray, CF: np.ndarray, tol: float = TOL) -> np.ndarray:
        """(n, rules) bool: which rules each counterfactual row of ``CF`` breaks for its agent in ``X``.

        ``X`` is one agent (d,) for every row or one agent per row (n, d). Vectorized: one product
        per side over every atom, no loop over rows.
        """
        CF = np.atleast_2d(np.asarray(CF, float))
        X = np.asarray(X, float)
        one = X.ndim == 1  # one agent for every row: its side of each atom is computed once
        xe = X @ self._x if one else np.broadcast_to(X, CF.shape) @ self._x
        e = CF @ self._cf + xe + self._const
        # the sizes s of the tolerance only where they can decide: 0 < |e| <= tol * (an upper bound of s)
        # (at e = 0 every reading is the same whatever s: <=, >=, = hold, <, >, != do not)
        xs = np.abs(X) @ np.abs(self._x) if one else None
        top = np.abs(CF).max(axis=0, initial=0.0) @ np.abs(self._cf) + np.abs(self._const) + (
            xs if one else np.abs(X).max(axis=0, initial=0.0) @ np.abs(self._x))
        s = np.zeros_like(e)
        near = np.flatnonzero(((np.abs(e) <= tol * top) & (e != 0)).any(axis=1))
        if len(near):
            xn = xs if one else np.abs(np.broadcast_to(X, CF.shape)[near]) @ np.abs(self._x)
            s[near] = np.abs(CF[near]) @ np.abs(self._cf) + xn + np.abs(self._const)
        t = truth(self._op, e, s, tol)
        antecedent = (~t).astype(float) @ self._ant == 0  # counts in floats: exact, and a BLAS product
        clause_broken = antecedent & ~t[:, self._cons]
        return clause_broken.astype(float) @ self._rule > 0

    def holds(self, X: np.ndarray, CF: np.ndarray, tol: float = TOL) -> np.ndarray:
        """(n,) bool: the row keeps every rule."""
        return ~self.broken(X, CF, tol).any(axis=1)

    def violations(self, X: np.ndarray, CF: np.ndarray, tol: float = TOL) -> np.ndarray:
        """(n,) object array: the name of the first rule each row of ``CF`` breaks, or None where it keeps all."""
        b = self.broken(X, CF, tol)
        out = np.full(len(b), None, object)
        bad = b.any(axis=1)
        out[bad] = np.asarray(self.names, object)[np.argmax(b[bad], axis=1)]
        return out

    def plaf_statements(self, *, schema_rules: bool = False) -> tuple[str, ...]:
        """The rules as PLAF statements (GeCo's ``Plaf(...)``); the schema's own only with ``schema_rules``."""
        return tuple(s for n, s in zip(self.names, self.statements, strict=True)
                     if schema_rules or not n.endswith("(schema)"))

    def ground(self, x: np.ndarray) -> GroundRules:
        """The rules for one agent as linear inequalities over x_cf (``envs.rules.ground``)."""
        return ground(self, np.asarray(x, float))


@functools.lru_cache(maxsize=64)
def compile_rules(rules: RuleSet | None, schema: FeatureSchema, *, mutability: bool = True) -> CompiledRules:
    """Resolve ``rules`` against ``schema`` (with the schema's mutability as rules unless ``mutability``
    is False), check every rule against its feature and the set for contradictions (``RuleError``,
    one line naming the rules). Cached: a rule set is compiled once per schema."""
    rules = rules or RuleSet()
    raws = distance_features(schema)
    index = {r.name: j for j, r in enumerate(raws)}
    for name, feats in [(s.name, [s.feature]) for s in rules.steps] + [(f.name, [f.feature]) for f in rules.forbid] + \
            [(a.name, [a.source, a.target]) for a in rules.links] + [(f"weights: {w.feature}", [w.feature])
                                                                     for w in rules.weights]:
        for f in feats:
            if f not in index:
                raise RuleError(f"rule {name!r}: unknown feature {f!r} (known: {sorted(index)})")
    named: list[tuple[str, str]] = []
    if mutability:
        for r in raws:
            mut = schema.features[r.columns[0]].mutability
            if mut in _MUTABILITY:
                op, word = _MUTABILITY[mut]
                if r.kind == "group" and op != "=":
                    raise RuleError(f"feature {r.name!r}: a one-hot group is free or immutable, not {mut!r}")
                named.append((f"{r.name}: {word} (schema)", f"PLAF x_cf.{r.name} {op} x.{r.name}"))
    named += [(s.name, _step(s, schema, raws[index[s.feature]])) for s in rules.steps]
    first_forbid = len(named)
    named += [(f.name, _forbid(f, schema, raws[index[f.feature]])) for f in rules.forbid]
    first_link = len(named)
    named += [(a.name, _link(a, schema, raws[index[a.source]], raws[index[a.target]])) for a in rules.links]
    named += [(s, s) for s in rules.plaf if s.split(None, 1)[0].upper() != "GROUP"]
    seen: dict[str, int] = {}
    for n, _ in named:
        seen[n] = seen.get(n, 0) + 1
    dupes = [n for n, k in seen.items() if k > 1]
    if dupes:
        raise RuleError(f"rule {dupes[0]!r}: given twice")
    clauses = []
    raw_group = np.arange(len(raws))
    for i, (name, text) in enumerate(named):
        try:
            rule = Parser(text, schema, raws, index, raw_group).rule()
        except PlafError as err:
            raise RuleError(f"rule {name!r}: {err}" if name != text else str(err)) from None
        clauses.append(Clause(i, rule.antecedent, rule.consequent))
    cost = np.ones((len(raws), 2))
    for w in rules.weights:
        j = index[w.feature]
        if raws[j].kind in ("group", "nominal") and w.up != w.down:
            raise RuleError(f"rule 'weights: {w.feature}': a categorical feature has no direction; give one weight")
        if np.any(cost[j] != 1.0) or w.feature in {v.feature for v in rules.weights if v is not w}:
            raise RuleError(f"rule 'weights: {w.feature}': given twice")
        cost[j] = (w.up, w.down)
    out = CompiledRules(schema, raws, rules, tuple(n for n, _ in named), tuple(t for _, t in named), tuple(clauses),
                        cost, mutability)
    for k, f in enumerate(rules.forbid):
        j = index[f.feature]
        a, b = (_code(v, schema, raws[j], f.name) for v in (f.source, f.target))
        out.forbidden.setdefault(j, []).append((int(a), int(b), first_forbid + k))
    for k, a in enumerate(rules.links):
        out.links.append((index[a.source], index[a.target], a.per_unit, a.on, first_link + k))
    check_conflicts(out)
    return out


# ---------------------------------------------------------------------------------- rules as PLAF text

def _kind(schema: FeatureSchema, r: DistanceFeature) -> str:
    """integer | real | ordinal | binary | nominal | group: what a rule may say about the feature."""
    if r.kind in ("group", "nominal", "binary"):
        return r.kind
    f = schema.features[r.columns[0]]
    return "ordinal" if f.kind == "ordinal" else "integer" if f.integer else "real"


def labels(schema: FeatureSchema, r: DistanceFeature) -> list[str]:
    """The level labels of a categorical, ordinal or binary feature (empty: it is coded by numbers)."""
    if r.kind == "group":
        return [schema.features[c].name.removeprefix(f"{r.name}=") for c in r.columns]
    return list(schema.features[r.columns[0]].categories)


def _num(v: float) -> str:
    return repr(float(v))


def _step(s: StepBound, schema: FeatureSchema, r: DistanceFeature) -> str:
    kind = _kind(schema, r)
    levels = "levels" in s.kind
    if levels != (kind == "ordinal") or kind not in ("ordinal", "integer", "real"):
        want = ("max_levels_up / max_levels_down" if kind == "ordinal" else "max_increase / max_decrease"
                if kind in ("integer", "real") else "forbid or the feature's mutability")
        raise RuleError(f"rule {s.name!r}: {s.feature!r} is {kind}; it takes {want}")
    up = s.kind in ("max_increase", "max_levels_up")
    return f"PLAF x_cf.{s.feature} {'<=' if up else '>='} x.{s.feature} {'+' if up else '-'} {_num(s.value)}"


def _code(v, schema: FeatureSchema, r: DistanceFeature, name: str) -> float:
    """The code of level ``v`` of raw feature ``r`` (a label's index, or an integer value)."""
    kind, known = _kind(schema, r), labels(schema, r)
    if known:
        if str(v) not in known:
            raise RuleError(f"rule {name!r}: {v!r} is not a level of {r.name!r} (levels: {known})")
        return float(known.index(str(v)))
    if kind == "real" or isinstance(v, str) or v != int(v):
        raise RuleError(f"rule {name!r}: forbid takes the levels of a categorical, ordinal, binary or integer "
                        f"feature; {r.name!r} is {kind} and {v!r} is not one of its whole values")
    return float(v)


def _level(v, schema: FeatureSchema, r: DistanceFeature, name: str) -> str:
    code = _code(v, schema, r, name)
    if not labels(schema, r):
        return _num(code)
    text = str(v)
    if "'" in text and '"' in text:
        raise RuleError(f"rule {name!r}: the label {text!r} holds both quote characters")
    return f'"{text}"' if "'" in text else f"'{text}'"


def _forbid(f: Forbid, schema: FeatureSchema, r: DistanceFeature) -> str:
    a, b = _level(f.source, schema, r, f.name), _level(f.target, schema, r, f.name)
    if _code(f.source, schema, r, f.name) == _code(f.target, schema, r, f.name):
        raise RuleError(f"rule {f.name!r}: it forbids staying at {f.source!r}, which every agent there must do "
                        "when the feature does not move")
    return f"PLAF IF x.{f.feature} = {a} THEN x_cf.{f.feature} != {b}"


def _link(a: Link, schema: FeatureSchema, src: DistanceFeature, dst: DistanceFeature) -> str:
    for f, r in ((a.source, src), (a.target, dst)):
        if r.kind in ("group", "nominal"):
            raise RuleError(f"rule {a.name!r}: {f!r} is categorical; a link moves numeric, ordinal or binary features")
    k = _num(a.per_unit)
    op = ">=" if a.per_unit > 0 else "<="
    F, G = a.source, a.target
    if a.on == "up":
        return f"PLAF IF x_cf.{F} > x.{F} THEN x_cf.{G} {op} x.{G} + {k} * x_cf.{F} - {k} * x.{F}"
    return f"PLAF IF x_cf.{F} < x.{F} THEN x_cf.{G} {op} x.{G} + {k} * x.{F} - {k} * x_cf.{F}"
