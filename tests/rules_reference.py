"""A direct, row-by-row reading of the rule language (tests only): the reference that the compiled
checker (``envs.rules``) and MACE's encoding are held to.

Deliberately naive and independent of ``envs.rules``' compilation: each rule is read from the
``RuleSet`` as its documentation states it, one row at a time in plain Python, and PLAF statements
are given as Python functions of the raw values. Values of raw features: a column's value, or the
index of a one-hot group's 1.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from envs.raw_features import distance_features
from envs.rules import RuleSet
from envs.schema import FeatureSchema

Plaf = Callable[[dict, dict], bool]  # (x values by name, x_cf values by name) -> the statement holds
WORDS = {"immutable": "immutable", "increase": "increase-only", "decrease": "decrease-only"}


def values(schema: FeatureSchema, row: np.ndarray) -> dict[str, float]:
    out = {}
    for r in distance_features(schema):
        out[r.name] = float(np.argmax(row[list(r.columns)])) if r.kind == "group" else float(row[r.columns[0]])
    return out


def _code(schema: FeatureSchema, name: str, level) -> float:
    r = next(r for r in distance_features(schema) if r.name == name)
    if r.kind == "group":
        return float([schema.features[c].name.split("=", 1)[1] for c in r.columns].index(str(level)))
    cats = schema.features[r.columns[0]].categories
    return float(cats.index(str(level))) if cats else float(level)


def broken(schema: FeatureSchema, rules: RuleSet, x: np.ndarray, cf: np.ndarray, plaf: dict[str, Plaf],
           mutability: bool = True) -> list[str]:
    """The names of the rules ``cf`` breaks for agent ``x``, in the compiled order (schema, steps,
    forbidden transitions, links, PLAF)."""
    xv, cv = values(schema, x), values(schema, cf)
    out = []
    if mutability:
        for r in distance_features(schema):
            mut = schema.features[r.columns[0]].mutability
            d = cf[list(r.columns)] - x[list(r.columns)]
            bad = {"immutable": np.any(d != 0), "increase": np.any(d < 0), "decrease": np.any(d > 0)}.get(mut, False)
            if bad:
                out.append(f"{r.name}: {WORDS[mut]} (schema)")
    for s in rules.steps:
        d = cv[s.feature] - xv[s.feature]
        if (d > s.value) if s.kind in ("max_increase", "max_levels_up") else (-d > s.value):
            out.append(s.name)
    for f in rules.forbid:
        if xv[f.feature] == _code(schema, f.feature, f.source) and cv[f.feature] == _code(schema, f.feature, f.target):
            out.append(f.name)
    for a in rules.links:
        m = cv[a.source] - xv[a.source] if a.on == "up" else xv[a.source] - cv[a.source]
        d = cv[a.target] - xv[a.target]
        if m > 0 and not (d >= a.per_unit * m if a.per_unit > 0 else d <= a.per_unit * m):
            out.append(a.name)
    out += [text for text in rules.plaf if not plaf[text](xv, cv)]
    return out


def holds(schema: FeatureSchema, rules: RuleSet, x: np.ndarray, S: np.ndarray, plaf: dict[str, Plaf],
          mutability: bool = True) -> np.ndarray:
    return np.array([not broken(schema, rules, x, s, plaf, mutability) for s in S], bool)


def weighted_distance(schema: FeatureSchema, rules: RuleSet, x: np.ndarray, S: np.ndarray, norm: str) -> np.ndarray:
    """The distance of ``solvers.mace.distance``'s documentation with the rules' cost weights, row by row."""
    raws = distance_features(schema)
    J = len(raws)
    a, b, g = {"zero": (1 / J, 0, 0), "one": (0, 1 / J, 0), "infty": (0, 0, 1)}[norm]
    w = {v.feature: (v.up, v.down) for v in rules.weights}
    out = []
    for s in S:
        xv, sv = values(schema, x), values(schema, s)
        terms = []
        for r in raws:
            if xv[r.name] == sv[r.name]:
                continue
            up, down = w.get(r.name, (1.0, 1.0))
            weight = up if r.kind in ("group", "nominal") or sv[r.name] > xv[r.name] else down
            delta = abs(sv[r.name] - xv[r.name]) / r.span if r.kind == "numeric" else 1.0
            terms.append((weight, weight * delta))
        out.append(a * sum(t[0] for t in terms) + b * sum(t[1] for t in terms) + g * max([t[1] for t in terms],
                                                                                          default=0.0))
    return np.array(out)
