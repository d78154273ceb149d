"""PLAF, GeCo's plausibility-feasibility constraint language (paper §3, Appendix A.1).

A program is a list of statements in the paper's syntax::

    GROUP education-num, occupation
    PLAF x_cf.sex = x.sex
    PLAF x_cf.age >= x.age
    PLAF IF x_cf.education-num > x.education-num THEN x_cf.age >= x.age + 4

``GROUP`` joins raw features whose values must be sampled together from the data (one-hot
columns of a categorical feature always form one feature). A ``PLAF`` rule is
``[IF a_1 and a_2 ... THEN] a_0``; each atom compares two linear expressions (numbers, ``c * ref``,
sums and differences) over the agent's features ``x.F`` and the counterfactual's ``x_cf.F``;
``op`` is one of ``= == != < <= > >=``; ``and`` may be written ``&&``. A quoted string names a
category or an ordinal level (``x_cf.AgeGroup = '25-39'``). Feature names are the schema's raw
feature names and are matched longest first, so names with hyphens or spaces need no quoting.

The rules must be acyclic (paper §3): a rule whose ``x_cf`` references all fall in one group is
*unary* and restricts that group's sample space (``feasibleSpace``); any other rule must define
one feature, ``THEN x_cf.F op e``, and the graph "groups read by the rule -> group of F" must have
no cycle; these rules are enforced on every candidate by ``actionCascade`` in topological order.
The schema's mutability (immutable, increase-only, decrease-only) is added as unary rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from envs.schema import FeatureSchema
from solvers.mace.distance import RawFeature, raw_features

_OPS = {"=": np.equal, "==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
        ">": np.greater, ">=": np.greater_equal}
_ORDERED = ("<", "<=", ">", ">=")
_SYMBOLS = ("==", "!=", "<=", ">=", "&&", "=", "<", ">", "+", "-", "*")
_NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_WORD = re.compile(r"[A-Za-z_]\w*")
_KEYWORDS = {"if": "IF", "then": "THEN", "and": "AND", "plaf": "PLAF"}


class PlafError(ValueError):
    """A PLAF program that does not parse, names an unknown feature, or is cyclic."""


# ------------------------------------------------------------------------------------------ program

@dataclass(frozen=True)
class Plaf:
    """A PLAF program: ``GROUP`` and ``PLAF`` statements in the paper's syntax, one per entry."""

    statements: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Plaf:
        """A program from text: one statement per line; blank lines and ``#`` comments are skipped."""
        lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
        return cls(tuple(line for line in lines if line))

    def __add__(self, other: Plaf) -> Plaf:
        return Plaf(self.statements + other.statements)

    def __str__(self) -> str:
        return "\n".join(self.statements)

    def compile(self, schema: FeatureSchema, *, schema_rules: bool = True) -> CompiledPlaf:
        """Resolve names against ``schema``, check the program, and (by default) add the schema's mutability."""
        return CompiledPlaf.build(self, schema, schema_rules=schema_rules)


#: GeCo Appendix A.1, Adult (Fig. 8). The data's two education columns are one ordinal feature here.
ADULT = Plaf.parse("""
PLAF x_cf.age >= x.age
PLAF x_cf.education-num >= x.education-num
PLAF x_cf.marital-status = x.marital-status
PLAF x_cf.relationship = x.relationship
PLAF x_cf.sex = x.sex
PLAF x_cf.native-country = x.native-country
PLAF IF x_cf.education-num > x.education-num THEN x_cf.age >= x.age + 4
""")

#: GeCo Appendix A.1, Credit (Fig. 8); the paper's AgeGroup 2 is the level '25-39'.
CREDIT = Plaf.parse("""
PLAF x_cf.isMale = x.isMale
PLAF x_cf.isMarried = x.isMarried
PLAF x_cf.AgeGroup >= x.AgeGroup
PLAF x_cf.EducationLevel >= x.EducationLevel
PLAF x_cf.HasHistoryOfOverduePayments >= x.HasHistoryOfOverduePayments
PLAF x_cf.TotalOverdueCounts >= x.TotalOverdueCounts
PLAF x_cf.TotalMonthsOverdue >= x.TotalMonthsOverdue
PLAF IF x_cf.EducationLevel > x.EducationLevel + 1 && x.AgeGroup < '25-39' THEN x_cf.AgeGroup = '25-39'
PLAF IF x_cf.MonthsWithLowSpendingOverLast6Months > x.MonthsWithLowSpendingOverLast6Months THEN x_cf.MonthsWithHighSpendingOverLast6Months < x.MonthsWithHighSpendingOverLast6Months
""")

DEFAULTS: dict[str, Plaf] = {"adult": ADULT, "credit": CREDIT}


def default_program(world_name: str) -> Plaf:
    """The Appendix A.1 program of a world named ``"<dataset>/<model>"``; empty for other data sets."""
    return DEFAULTS.get(world_name.split("/", 1)[0], Plaf())


# ------------------------------------------------------------------------------------------- atoms

@dataclass(frozen=True)
class Atom:
    """``sum a_i * x_cf[c_i] + sum b_j * x[d_j] + const  op  0`` over encoded columns."""

    cf_cols: tuple[int, ...]
    cf_coefs: tuple[float, ...]
    x_cols: tuple[int, ...]
    x_coefs: tuple[float, ...]
    const: float
    op: str


@dataclass(frozen=True)
class Rule:
    """A compiled PLAF rule: ``antecedent => consequent`` (an empty antecedent is true)."""

    text: str
    antecedent: tuple[Atom, ...]
    consequent: Atom
    defines: int | None  # raw feature defined by a consequent ``x_cf.F op e`` (None otherwise)
    groups: frozenset[int]  # feature groups of every x_cf reference
    reads: frozenset[int]  # groups of the x_cf references other than the defined ``x_cf.F``


@dataclass
class GroundRule:
    """A rule with the agent's values substituted: it reads the counterfactual's columns ``cols`` only."""

    rule: Rule
    cols: np.ndarray  # encoded columns read, sorted
    terms: list[tuple[np.ndarray, np.ndarray, float, str]]  # per atom: positions in cols, coefs, const, op

    def atoms(self, V: np.ndarray) -> np.ndarray:
        """(n, atoms) truth of every atom (antecedent first, consequent last) on values ``V`` (n, len(cols))."""
        out = np.empty((len(V), len(self.terms)), bool)
        for a, (pos, coefs, const, op) in enumerate(self.terms):
            lhs = V[:, pos] @ coefs + const if len(pos) else np.full(len(V), const)
            out[:, a] = _OPS[op](lhs, 0.0)
        return out

    def antecedent(self, V: np.ndarray) -> np.ndarray:
        return self.atoms(V)[:, :-1].all(axis=1)

    def holds(self, V: np.ndarray) -> np.ndarray:
        t = self.atoms(V)
        return ~t[:, :-1].all(axis=1) | t[:, -1]


# ------------------------------------------------------------------------------------ the compiled

@dataclass
class CompiledPlaf:
    """A program resolved against a schema: feature groups, rules, and their evaluation order."""

    schema: FeatureSchema
    raws: tuple[RawFeature, ...]
    groups: tuple[tuple[int, ...], ...]  # raw feature indices of each group
    group_cols: tuple[np.ndarray, ...]  # encoded columns of each group, ascending
    col_group: np.ndarray  # (d,) group of every encoded column
    rules: tuple[Rule, ...]
    unary: dict[int, tuple[int, ...]] = field(default_factory=dict)  # group -> its unary rules
    cascade: tuple[int, ...] = ()  # multi-group rules, in topological order of the defined group
    constant: tuple[int, ...] = ()  # rules with no x_cf reference (they hold or fail for the agent)

    @classmethod
    def build(cls, program: Plaf, schema: FeatureSchema, *, schema_rules: bool = True) -> CompiledPlaf:
        raws = raw_features(schema)
        names = {r.name: j for j, r in enumerate(raws)}
        statements = list(program.statements)
        if schema_rules:
            statements = _mutability_rules(schema, raws) + statements
        statements = list(dict.fromkeys(s.strip() for s in statements))  # A.1 repeats the schema's rules
        joined: list[tuple[int, ...]] = []
        rule_texts = []
        for s in statements:
            head, _, rest = s.strip().partition(" ")
            if head.upper() == "GROUP":
                joined.append(_group_names(rest, names, s))
            else:
                rule_texts.append(s)
        groups, raw_group = _partition(len(raws), joined)
        col_group = np.empty(len(schema), np.int64)
        for g, members in enumerate(groups):
            for j in members:
                col_group[list(raws[j].columns)] = g
        group_cols = tuple(np.flatnonzero(col_group == g) for g in range(len(groups)))
        rules = tuple(_Parser(t, schema, raws, names, raw_group).rule() for t in rule_texts)
        out = cls(schema, raws, groups, group_cols, col_group, rules)
        out._order()
        return out

    def _order(self) -> None:
        unary: dict[int, list[int]] = {}
        edges: dict[int, set[int]] = {}
        multi, constant = [], []
        for i, rule in enumerate(self.rules):
            if not rule.groups:
                constant.append(i)
            elif len(rule.groups) == 1:
                unary.setdefault(next(iter(rule.groups)), []).append(i)
            else:
                if rule.defines is None:
                    raise PlafError(f"PLAF rule {rule.text!r}: a rule over several feature groups must end in "
                                    "'THEN x_cf.F op e' (it defines F)")
                target = self.raw_group(rule.defines)
                if target in rule.reads:
                    raise PlafError(f"PLAF rule {rule.text!r}: it reads the group of "
                                    f"{self.raws[rule.defines].name!r}, which it defines (a cycle)")
                edges.setdefault(target, set()).update(rule.reads)
                multi.append(i)
        order = _topological(edges, len(self.groups), self)
        rank = {g: k for k, g in enumerate(order)}
        self.unary = {g: tuple(v) for g, v in unary.items()}
        self.cascade = tuple(sorted(multi, key=lambda i: rank[self.raw_group(self.rules[i].defines)]))
        self.constant = tuple(constant)

    def raw_group(self, raw: int) -> int:
        return int(self.col_group[self.raws[raw].columns[0]])

    def group_name(self, g: int) -> str:
        return "+".join(self.raws[j].name for j in self.groups[g])

    def ground(self, x: np.ndarray) -> GroundedPlaf:
        """The rules with the agent's values substituted (paper §4.2, ``ground``)."""
        x = np.asarray(x, float)
        grounded = []
        for rule in self.rules:
            cols = np.array(sorted({c for a in (*rule.antecedent, rule.consequent) for c in a.cf_cols}), np.int64)
            where = {int(c): k for k, c in enumerate(cols)}
            terms = []
            for a in (*rule.antecedent, rule.consequent):
                const = a.const + float(np.dot(x[list(a.x_cols)], a.x_coefs)) if a.x_cols else a.const
                terms.append((np.array([where[c] for c in a.cf_cols], np.int64), np.array(a.cf_coefs, float),
                              const, a.op))
            grounded.append(GroundRule(rule, cols, terms))
        return GroundedPlaf(self, x, grounded)


@dataclass
class GroundedPlaf:
    """The program grounded on one agent ``x`` (its ``C_x``)."""

    program: CompiledPlaf
    x: np.ndarray
    rules: list[GroundRule]

    @property
    def feasible(self) -> bool:
        """False when a rule without ``x_cf`` fails for this agent: then no counterfactual is allowed."""
        return all(bool(self.rules[i].holds(np.zeros((1, 0)))[0]) for i in self.program.constant)

    def group_mask(self, g: int, values: np.ndarray) -> np.ndarray:
        """Which value rows (n, |columns of g|) of group ``g`` satisfy the group's unary rules."""
        values = np.atleast_2d(values)
        ok = np.ones(len(values), bool)
        cols = self.program.group_cols[g]
        for i in self.program.unary.get(g, ()):
            r = self.rules[i]
            ok &= r.holds(values[:, np.searchsorted(cols, r.cols)])
        return ok

    def violations(self, X: np.ndarray) -> np.ndarray:
        """(n,) number of rules each full row breaks (every rule, the schema's mutability included)."""
        X = np.atleast_2d(np.asarray(X, float))
        out = np.zeros(len(X), np.int64)
        for r in self.rules:
            out += ~r.holds(X[:, r.cols])
        return out

    def broken(self, X: np.ndarray) -> list[list[str]]:
        """The text of the rules each full row breaks."""
        X = np.atleast_2d(np.asarray(X, float))
        bad = np.column_stack([~r.holds(X[:, r.cols]) for r in self.rules]) if self.rules else np.zeros((len(X), 0))
        return [[self.rules[i].rule.text for i in np.flatnonzero(row)] for row in bad]


# ------------------------------------------------------------------------------------------ helpers

def _mutability_rules(schema: FeatureSchema, raws: tuple[RawFeature, ...]) -> list[str]:
    """The schema's immutable / increase-only / decrease-only features as PLAF rules."""
    ops = {"immutable": "=", "increase": ">=", "decrease": "<="}
    out = []
    for r in raws:
        mut = schema.features[r.columns[0]].mutability
        if mut in ops:
            out.append(f"PLAF x_cf.{r.name} {ops[mut]} x.{r.name}")
    return out


def _match_name(text: str, start: int, names: dict[str, int]) -> str | None:
    """The longest known name at ``text[start:]`` that is not the prefix of a longer word."""
    for name in sorted((n for n in names if text.startswith(n, start)), key=len, reverse=True):
        end = start + len(name)
        if not (name[-1:].isalnum() or name.endswith("_")) or end == len(text) or not (
                text[end].isalnum() or text[end] == "_"):
            return name
    return None


def _group_names(text: str, names: dict[str, int], statement: str) -> tuple[int, ...]:
    out, i = [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        name = _match_name(text, i, names)
        if name is None:
            raise PlafError(f"GROUP statement {statement!r}: unknown feature at {text[i:i + 30]!r} "
                            f"(known: {sorted(names)})")
        out.append(names[name])
        i += len(name)
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            break
        if text[i] != ",":
            raise PlafError(f"GROUP statement {statement!r}: expected ',' at {text[i:i + 30]!r}")
        i += 1
    if len(set(out)) < 2:
        raise PlafError(f"GROUP statement {statement!r}: a group needs at least two distinct features")
    return tuple(out)


def _partition(n_raw: int, joined: list[tuple[int, ...]]) -> tuple[tuple[tuple[int, ...], ...], np.ndarray]:
    """Disjoint groups: GROUP statements that share a feature are merged (paper §3, restriction 1)."""
    parent = list(range(n_raw))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for members in joined:
        for m in members[1:]:
            parent[find(m)] = find(members[0])
    roots: dict[int, list[int]] = {}
    for j in range(n_raw):
        roots.setdefault(find(j), []).append(j)
    groups = tuple(tuple(v) for v in sorted(roots.values(), key=lambda v: v[0]))
    raw_group = np.empty(n_raw, np.int64)
    for g, members in enumerate(groups):
        raw_group[list(members)] = g
    return groups, raw_group


def _topological(edges: dict[int, set[int]], n: int, program: CompiledPlaf) -> list[int]:
    indeg = {g: 0 for g in range(n)}
    succ: dict[int, list[int]] = {g: [] for g in range(n)}
    for target, sources in edges.items():
        for s in sources:
            succ[s].append(target)
            indeg[target] += 1
    order, ready = [], [g for g in range(n) if indeg[g] == 0]
    while ready:
        g = ready.pop()
        order.append(g)
        for t in succ[g]:
            indeg[t] -= 1
            if indeg[t] == 0:
                ready.append(t)
    if len(order) < n:
        cyc = sorted(program.group_name(g) for g in range(n) if indeg[g] > 0)
        raise PlafError(f"PLAF rules are cyclic: the groups {cyc} define each other")
    return order


@dataclass
class _Expr:
    """A linear expression: coefficients per (side, raw index), a constant, or one string label."""

    coef: dict[tuple[str, int], float] = field(default_factory=dict)
    const: float = 0.0
    label: str | None = None

    def add(self, other: _Expr, sign: float) -> None:
        if self.label is not None or other.label is not None:
            raise PlafError("a quoted label cannot be added to anything")
        for k, v in other.coef.items():
            self.coef[k] = self.coef.get(k, 0.0) + sign * v
        self.const += sign * other.const


def _defined(left: _Expr) -> int | None:
    """The raw feature F when the expression is exactly ``x_cf.F``."""
    keys = [k for k, v in left.coef.items() if v != 0.0]
    if len(keys) == 1 and keys[0][0] == "x_cf" and left.coef[keys[0]] == 1.0 and left.const == 0.0 \
            and left.label is None:
        return keys[0][1]
    return None


class _Parser:
    """Recursive descent over one statement ``[PLAF] [IF a and a ... THEN] a``."""

    def __init__(self, text: str, schema: FeatureSchema, raws: tuple[RawFeature, ...], names: dict[str, int],
                 raw_group: np.ndarray) -> None:
        self.text, self.schema, self.raws, self.names, self.raw_group = text, schema, raws, names, raw_group
        self.toks = self._tokens()
        self.i = 0
        self.read: set[int] = set()  # raw features whose x_cf value the rule reads

    def fail(self, msg: str) -> PlafError:
        return PlafError(f"PLAF rule {self.text!r}: {msg}")

    def _tokens(self) -> list[tuple]:
        t, i, out = self.text, 0, []
        while i < len(t):
            if t[i].isspace():
                i += 1
                continue
            m = re.match(r"(x_cf|x)\.", t[i:])
            if m and (i == 0 or not (t[i - 1].isalnum() or t[i - 1] == "_")):
                j = i + m.end()
                name = _match_name(t, j, self.names)
                if name is None:
                    raise self.fail(f"unknown feature at {t[j:j + 30]!r} (known: {sorted(self.names)})")
                out.append(("ref", m.group(1), self.names[name]))
                i = j + len(name)
                continue
            if t[i] in "'\"":
                end = t.find(t[i], i + 1)
                if end < 0:
                    raise self.fail("unterminated string")
                out.append(("str", t[i + 1:end]))
                i = end + 1
                continue
            m = _NUMBER.match(t, i)
            if m:
                out.append(("num", float(m.group())))
                i = m.end()
                continue
            m = _WORD.match(t, i)
            if m:
                kw = _KEYWORDS.get(m.group().lower())
                if kw is None:
                    raise self.fail(f"unexpected word {m.group()!r} (features are written x.F or x_cf.F)")
                out.append(("kw", kw))
                i = m.end()
                continue
            sym = next((s for s in _SYMBOLS if t.startswith(s, i)), None)
            if sym is None:
                raise self.fail(f"unexpected character {t[i]!r}")
            out.append(("kw", "AND") if sym == "&&" else ("sym", sym))
            i += len(sym)
        return out

    def peek(self) -> tuple | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple:
        tok = self.peek()
        if tok is None:
            raise self.fail("unexpected end of statement")
        self.i += 1
        return tok

    def rule(self) -> Rule:
        if self.peek() == ("kw", "PLAF"):
            self.i += 1
        antecedent = []
        if self.peek() == ("kw", "IF"):
            self.i += 1
            antecedent.append(self.atom())
            while self.peek() == ("kw", "AND"):
                self.i += 1
                antecedent.append(self.atom())
            if self.take() != ("kw", "THEN"):
                raise self.fail("expected THEN after the conditions")
        consequent, left = self.atom(defining=True)
        if self.peek() is not None:
            raise self.fail(f"unexpected {self.peek()[-1]!r} after the rule")
        defines = _defined(left)
        reads = frozenset(int(self.raw_group[j]) for j in self.read)
        groups = reads if defines is None else reads | {int(self.raw_group[defines])}
        return Rule(self.text, tuple(antecedent), consequent, defines, groups, reads)

    def atom(self, defining: bool = False) -> tuple[Atom, _Expr] | Atom:
        """One comparison; with ``defining``, also its left side and only the right side's refs are 'read'."""
        left = self.expr(record=not defining)
        tok = self.take()
        if tok[0] != "sym" or tok[1] not in _OPS:
            raise self.fail(f"expected a comparison (= != < <= > >=), got {tok[-1]!r}")
        op = tok[1]
        right = self.expr(record=True)
        if defining and _defined(left) is None:  # the left side is read too unless it is exactly x_cf.F
            self.read.update(j for (side, j), k in left.coef.items() if side == "x_cf" and k != 0.0)
        left, right = self._labels(left, right, op), self._labels(right, left, op)
        diff = _Expr(dict(left.coef), left.const)
        diff.add(right, -1.0)
        cf_cols, cf_coefs, x_cols, x_coefs = [], [], [], []
        for (side, j), k in diff.coef.items():
            if k == 0.0:
                continue
            r = self.raws[j]
            if op in _ORDERED and r.kind in ("group", "nominal"):
                raise self.fail(f"{op!r} compares the categorical feature {r.name!r}; use = or !=")
            codes = range(len(r.columns)) if r.kind == "group" else [1]  # a one-hot group's value is its index
            for col, code in zip(r.columns, codes, strict=True):
                if code:
                    (cf_cols if side == "x_cf" else x_cols).append(col)
                    (cf_coefs if side == "x_cf" else x_coefs).append(k * code)
        atom = Atom(tuple(cf_cols), tuple(cf_coefs), tuple(x_cols), tuple(x_coefs), diff.const, op)
        return (atom, left) if defining else atom

    def _labels(self, side: _Expr, other: _Expr, op: str) -> _Expr:
        """A quoted label becomes the code of the category or level of the single feature it is compared with."""
        if side.label is None:
            return side
        refs = [j for (_, j), k in other.coef.items() if k != 0.0]
        if len(refs) != 1 or other.const != 0.0:
            raise self.fail(f"the label {side.label!r} must be compared with one feature")
        r = self.raws[refs[0]]
        if r.kind == "group":
            labels = [self.schema.features[c].name.removeprefix(f"{r.name}=") for c in r.columns]
        else:
            labels = list(self.schema.features[r.columns[0]].categories)
        if side.label not in labels:
            raise self.fail(f"{side.label!r} is not a category of {r.name!r} (known: {labels})")
        return _Expr({}, float(labels.index(side.label)))

    def expr(self, record: bool = True) -> _Expr:
        out = self.term()
        while self.peek() in (("sym", "+"), ("sym", "-")):
            sign = 1.0 if self.take()[1] == "+" else -1.0
            out.add(self.term(), sign)
        if record:
            self.read.update(j for (side, j), k in out.coef.items() if side == "x_cf" and k != 0.0)
        return out

    def term(self) -> _Expr:
        tok = self.take()
        if tok == ("sym", "-"):
            inner = self.term()
            out = _Expr()
            out.add(inner, -1.0)
            return out
        if tok[0] == "num":
            if self.peek() == ("sym", "*"):
                self.i += 1
                ref = self.take()
                if ref[0] != "ref":
                    raise self.fail("expected x.F or x_cf.F after '*'")
                return _Expr({(ref[1], ref[2]): tok[1]})
            return _Expr(const=tok[1])
        if tok[0] == "ref":
            return _Expr({(tok[1], tok[2]): 1.0})
        if tok[0] == "str":
            return _Expr(label=tok[1])
        raise self.fail(f"expected a number, a feature or a label, got {tok[-1]!r}")
