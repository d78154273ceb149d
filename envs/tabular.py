"""The tabular world: mixed features of a real data set and a white-box copy of a trained model.

States are *encoded* rows: one column per numeric / ordinal / binary feature and one binary
column per category of a categorical feature (a one-hot group, named by ``Feature.group``).
Values are in raw units (no scaling: a scaler used in training is folded into the model), so a
counterfactual maps straight back to the raw record through ``encoder.decode``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.models import WhiteBoxModel
from envs.rules import CompiledRules, RuleSet, compile_rules
from envs.schema import FeatureSchema


@dataclass
class TabularWorld:
    """Schema of the encoded columns + the classifier to explain (+ the raw-record encoder)."""

    name: str  # e.g. "adult/forest"
    schema: FeatureSchema  # encoded columns: kinds, bounds (the training data's range), mutability
    model: WhiteBoxModel  # the black box as parameters; accepts iff model.score(x) > 0
    encoder: Any = None  # data_gen.tabular_encoder.TabularEncoder: raw records <-> encoded rows
    rules: RuleSet | None = None  # the user's constraints (envs.rules); None: the schema's mutability only

    def __post_init__(self):
        if self.model.n_features != len(self.schema):
            raise ValueError(f"model: expects {self.model.n_features} encoded columns, the schema has {len(self.schema)}")
        self.compiled_rules()  # a rule that does not fit the schema, or contradicts others, fails here

    def compiled_rules(self, *, mutability: bool = True) -> CompiledRules | None:
        """The rules compiled against the schema (cached), with its mutability unless ``mutability`` is
        False; None when the world has no rules beyond the schema's mutability."""
        return compile_rules(self.rules, self.schema, mutability=mutability) if self.rules else None

    def accepts(self, X: np.ndarray) -> np.ndarray:
        """Boolean acceptance per row (the model's own decision rule)."""
        return self.model.predict(np.atleast_2d(X))

    def groups(self) -> dict[str, list[int]]:
        """One-hot groups: group name -> its column indices."""
        out: dict[str, list[int]] = {}
        for j, f in enumerate(self.schema.features):
            if f.group is not None:
                out.setdefault(f.group, []).append(j)
        return out
