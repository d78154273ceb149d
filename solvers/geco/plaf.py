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

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs.raw_features import DistanceFeature, distance_features
from envs.rules.plaf_syntax import OPS, Atom, Parser, PlafError, Rule, group_names
from envs.schema import FeatureSchema

__all__ = ["ADULT", "CREDIT", "DEFAULTS", "Atom", "CompiledPlaf", "GroundRule", "GroundedPlaf", "Plaf", "PlafError",
           "Rule", "default_program", "loop_checker", "with_rules"]

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


def with_rules(plaf: Plaf, schema: FeatureSchema, rules: Any = None) -> tuple[CompiledPlaf, tuple[str, ...]]:
    """``plaf`` compiled with a world's rules (``envs.rules.CompiledRules`` or None; issue 55): its
    statements (``plaf_statements()``: step bounds, forbidden transitions and links as PLAF, the user's
    PLAF statements) and its ``GROUP`` statements join the program, so GeCo's feasible space and action
    cascade respect them. A statement GeCo's PLAF cannot order (a rule over several groups that defines
    none, or one closing a cycle of definitions) is left out of the program and returned: the search
    then enforces it by the shared checker alone (``AgentSpace.keeps``), dropping the candidates that
    break it. Returns the compiled program and those statements."""
    if rules is None:
        return plaf.compile(schema), ()
    groups = tuple(s for s in rules.rules.plaf if s.split(None, 1)[0].upper() == "GROUP")
    base = Plaf(plaf.statements + groups)
    program = base.compile(schema)
    taken: list[str] = []
    left: list[str] = []
    for statement in rules.plaf_statements():
        try:
            trial = Plaf(base.statements + tuple(taken) + (statement,)).compile(schema)
        except PlafError:
            left.append(statement)
            continue
        taken.append(statement)
        program = trial
    return program, tuple(left)


def loop_checker(rules: Any, left: tuple[str, ...], schema: FeatureSchema) -> Any:
    """The shared checker a GeCo search runs on its candidates beside the program (``with_rules``): None
    where the program enforces every rule at least as strictly as the checker; the leftover statements
    compiled (``envs.rules.compile_rules``) where some are left out of the program; the whole rule set
    where the program's exact reading of some atom is looser than the checker's (a condition
    ``<=``, ``>=``, ``=`` or a strict consequence on real values, where the checker's tolerance decides).
    The answers are always checked by the whole rule set."""
    if rules is None:
        return None
    for clause in rules.clauses:
        for atom, condition in [*((a, True) for a in clause.antecedent), (clause.consequent, False)]:
            strict = atom.op in ("<", ">", "!=")
            whole = all(bool(rules.integral[c]) for c in (*atom.cf_cols, *atom.x_cols)) and all(
                float(v).is_integer() for v in (*atom.cf_coefs, *atom.x_coefs, atom.const))
            if not whole and strict != condition:
                return rules
    if not left:
        return None
    from envs.rules import RuleSet, compile_rules

    return compile_rules(RuleSet(plaf=left), schema, mutability=False)


# ---------------------------------------------------------------------------------- grounded rules

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
            out[:, a] = OPS[op](lhs, 0.0)
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
    raws: tuple[DistanceFeature, ...]
    groups: tuple[tuple[int, ...], ...]  # raw feature indices of each group
    group_cols: tuple[np.ndarray, ...]  # encoded columns of each group, ascending
    col_group: np.ndarray  # (d,) group of every encoded column
    rules: tuple[Rule, ...]
    unary: dict[int, tuple[int, ...]] = field(default_factory=dict)  # group -> its unary rules
    cascade: tuple[int, ...] = ()  # multi-group rules, in topological order of the defined group
    constant: tuple[int, ...] = ()  # rules with no x_cf reference (they hold or fail for the agent)

    @classmethod
    def build(cls, program: Plaf, schema: FeatureSchema, *, schema_rules: bool = True) -> CompiledPlaf:
        raws = distance_features(schema)
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
                joined.append(group_names(rest, names, s))
            else:
                rule_texts.append(s)
        groups, raw_group = _partition(len(raws), joined)
        col_group = np.empty(len(schema), np.int64)
        for g, members in enumerate(groups):
            for j in members:
                col_group[list(raws[j].columns)] = g
        group_cols = tuple(np.flatnonzero(col_group == g) for g in range(len(groups)))
        rules = tuple(Parser(t, schema, raws, names, raw_group).rule() for t in rule_texts)
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

def _mutability_rules(schema: FeatureSchema, raws: tuple[DistanceFeature, ...]) -> list[str]:
    """The schema's immutable / increase-only / decrease-only features as PLAF rules."""
    ops = {"immutable": "=", "increase": ">=", "decrease": "<="}
    out = []
    for r in raws:
        mut = schema.features[r.columns[0]].mutability
        if mut in ops:
            out.append(f"PLAF x_cf.{r.name} {ops[mut]} x.{r.name}")
    return out


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
