"""The syntax of PLAF: statements parsed into linear atoms over a schema's encoded columns.

``Parser(text, ...).rule()`` reads ``[PLAF] [IF a and a ... THEN] a``; an atom compares two linear
expressions over ``x.F`` and ``x_cf.F`` (a one-hot group's value is its category index); names are
matched longest first against the schema's raw features; a quoted label is the code of a category
or ordinal level of the one feature it is compared with. ``solvers.geco.plaf`` builds GeCo's programs
from it, and ``envs.rules`` compiles the rule language's PLAF statements with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from envs.raw_features import DistanceFeature
from envs.schema import FeatureSchema

OPS = {"=": np.equal, "==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
        ">": np.greater, ">=": np.greater_equal}
_ORDERED = ("<", "<=", ">", ">=")
_SYMBOLS = ("==", "!=", "<=", ">=", "&&", "=", "<", ">", "+", "-", "*")
_NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_WORD = re.compile(r"[A-Za-z_]\w*")
_KEYWORDS = {"if": "IF", "then": "THEN", "and": "AND", "plaf": "PLAF"}


class PlafError(ValueError):
    """A PLAF program that does not parse, names an unknown feature, or is cyclic."""


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


def match_name(text: str, start: int, names: dict[str, int]) -> str | None:
    """The longest known name at ``text[start:]`` that is not the prefix of a longer word."""
    for name in sorted((n for n in names if text.startswith(n, start)), key=len, reverse=True):
        end = start + len(name)
        if not (name[-1:].isalnum() or name.endswith("_")) or end == len(text) or not (
                text[end].isalnum() or text[end] == "_"):
            return name
    return None


def group_names(text: str, names: dict[str, int], statement: str) -> tuple[int, ...]:
    out, i = [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        name = match_name(text, i, names)
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


class Parser:
    """Recursive descent over one statement ``[PLAF] [IF a and a ... THEN] a``."""

    def __init__(self, text: str, schema: FeatureSchema, raws: tuple[DistanceFeature, ...], names: dict[str, int],
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
                name = match_name(t, j, self.names)
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
        if tok[0] != "sym" or tok[1] not in OPS:
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
