"""A data spec's ``rules:`` section (``envs.rules``) against the spec's own features.

``check_spec_rules(spec)`` compiles the rules against the columns the spec describes (bounds where
declared, levels and labels as written), so an unknown feature, a label a feature does not have, a
rule that does not fit its feature's kind, or a contradiction is one error line when the spec is
loaded, before any data is encoded or model trained. ``spec_rules(spec)`` is the rule set a world
built from the spec carries: the section's rules, plus each feature's ``weight`` (both directions)
where the section gives that feature no weight.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from data_gen.tabular_encoder import TabularEncoder
from envs.rules import RuleError, RuleSet, Weight, compile_rules
from envs.schema import FeatureSchema


def spec_rules(spec: Any) -> RuleSet:
    """The rules of ``spec`` (a ``data_gen.spec.DataSpec``) with the features' own weights added."""
    given = {w.feature for w in spec.rules.weights}
    extra = tuple(Weight(f.name, float(f.weight), float(f.weight)) for f in spec.features
                  if f.weight is not None and f.name not in given)
    return replace(spec.rules, weights=spec.rules.weights + extra) if extra else spec.rules


def spec_schema(spec: Any) -> FeatureSchema | None:
    """The encoded columns ``spec`` describes (unbounded where it declares no bound); None where a
    categorical feature has no levels written yet (they come from the data)."""
    cols = []
    for f in spec.to_raw_columns():
        if f.one_hot and not f.levels:
            return None
        lo, hi = f.lower, f.upper
        if f.levels and not f.one_hot:
            lo, hi = (0.0 if lo is None else lo), (len(f.levels) - 1.0 if hi is None else hi)
        cols.append(replace(f, lower=-math.inf if lo is None else lo, upper=math.inf if hi is None else hi))
    return TabularEncoder(cols).schema


def check_spec_rules(spec: Any) -> None:
    """Raise ``envs.rules.RuleError`` (one line naming the rule) where the spec's rules do not fit it."""
    rules = spec_rules(spec)
    if not rules:
        return
    schema = spec_schema(spec)
    if schema is None:
        unknown = sorted(rules.features - set(spec.names))
        if unknown:
            raise RuleError(f"rules: unknown feature {unknown[0]!r} (features: {spec.names})")
        return
    compile_rules(rules, schema)
