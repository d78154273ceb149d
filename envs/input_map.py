"""How a user's fitted model reads the world's encoded rows (issue 54).

A user's model sees the columns its own preprocessing makes (a ``ColumnTransformer`` of scalers,
one-hot and ordinal encoders, passthrough); the solvers see the world's encoded rows (numbers in
raw units, ordinal and binary codes, one 0/1 column per category; ``data_gen.tabular_encoder``).
An :class:`InputMap` states, for every input column of the user's model in its order, which
encoded column it reads and the exact float64 function the preprocessing applies to it, so that a
white-box copy of the model can be written over the encoded rows: a tree's split on a scaled
column becomes a split on the raw column at the exact float64 point where the user's test flips
(``envs.split_rules``), a linear layer absorbs the affine map.

Built from a fitted ``Pipeline`` in ``data_gen.user_model``; used by the translators of
``envs.imported_trees`` (trees and boosted ensembles) and ``envs.models`` (linear, MLP).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


def _identity(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float64)


@dataclass(frozen=True)
class InputColumn:
    """One input column of the user's model as a function of one encoded column of the world."""

    name: str  # the column's name after the user's preprocessing (e.g. "num__income", "cat__job_clerk")
    source: int  # the encoded column it reads; -1: a constant (a category the world never holds, say)
    transform: Callable[[np.ndarray], np.ndarray] = field(default=_identity, compare=False)
    # float64 -> float64, vectorized, monotone non-decreasing, computed exactly as the user's step does
    # (e.g. ``(x - mean_) / scale_``); identity for passthrough and one-hot columns
    scale: float = 1.0  # the affine form z = scale * x + shift (folded into linear layers; not bit-exact)
    shift: float = 0.0
    const: float = 0.0  # the column's value where ``source == -1``

    def __post_init__(self):
        if self.source < -1:
            raise ValueError(f"input column {self.name!r}: source {self.source} is not a column index or -1")
        if not self.scale > 0 and self.source >= 0:
            raise ValueError(f"input column {self.name!r}: scale {self.scale} must be positive "
                             "(a decreasing transform is not supported)")

    def values(self, X: np.ndarray) -> np.ndarray:
        """The column as the user's model sees it, for encoded rows ``X`` (exact transform)."""
        if self.source < 0:
            return np.full(len(X), self.const, np.float64)
        return self.transform(np.asarray(X[:, self.source], np.float64))


@dataclass(frozen=True)
class InputMap:
    """Every input column of the user's model, in the model's order, over ``n_encoded`` world columns."""

    columns: tuple[InputColumn, ...]
    n_encoded: int

    def __post_init__(self):
        bad = [c.name for c in self.columns if c.source >= self.n_encoded]
        if bad:
            raise ValueError(f"input map: columns {bad} read beyond the {self.n_encoded} encoded columns")

    @classmethod
    def identity(cls, names: Sequence[str]) -> InputMap:
        """The model reads the encoded columns as they are (the project's own classifiers)."""
        return cls(tuple(InputColumn(str(n), i) for i, n in enumerate(names)), len(names))

    def transform(self, X: np.ndarray) -> np.ndarray:
        """The user's model's input matrix for encoded rows ``X`` (exact, column by column)."""
        X = np.atleast_2d(np.asarray(X, np.float64))
        return np.column_stack([c.values(X) for c in self.columns]) if self.columns else np.empty((len(X), 0))

    def affine(self) -> tuple[np.ndarray, np.ndarray]:
        """(A, s): the map as z = X @ A + s, A of shape (n_encoded, n_inputs) (for linear layers)."""
        A = np.zeros((self.n_encoded, len(self.columns)))
        s = np.zeros(len(self.columns))
        for j, c in enumerate(self.columns):
            if c.source < 0:
                s[j] = c.const
            else:
                A[c.source, j] = c.scale
                s[j] = c.shift
        return A, s
