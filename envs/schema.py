"""Feature schema: names, kinds, domains and mutability, with input validation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

Kind = Literal["binary", "numeric", "ordinal", "categorical"]
Mutability = Literal["free", "immutable", "increase", "decrease"]


@dataclass(frozen=True)
class Feature:
    """One column of the state vector.

    ``lower``/``upper`` bound numeric and ordinal features; ``categories`` names the codes of an
    ordinal or categorical feature (code i is ``categories[i]``); ``group`` names the one-hot
    group a binary column belongs to (columns of one group sum to one).
    """

    name: str
    kind: Kind = "numeric"
    lower: float = -np.inf
    upper: float = np.inf
    mutability: Mutability = "free"
    categories: tuple[str, ...] = ()
    group: str | None = None
    integer: bool = False

    def __post_init__(self):
        if self.kind not in ("binary", "numeric", "ordinal", "categorical"):
            raise ValueError(f"feature {self.name!r}: unknown kind {self.kind!r}")
        if self.mutability not in ("free", "immutable", "increase", "decrease"):
            raise ValueError(f"feature {self.name!r}: unknown mutability {self.mutability!r}")
        if self.lower > self.upper:
            raise ValueError(f"feature {self.name!r}: lower bound {self.lower} exceeds upper bound {self.upper}")


@dataclass(frozen=True)
class FeatureSchema:
    """An ordered list of features with checks for states and changes."""

    features: tuple[Feature, ...]
    index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        names = [f.name for f in self.features]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"features: duplicate names {dupes}")
        object.__setattr__(self, "index", {n: i for i, n in enumerate(names)})

    @classmethod
    def binary(cls, n: int, mutability: Mutability = "increase", prefix: str = "f") -> FeatureSchema:
        """``n`` binary capability features (the set-cover world)."""
        return cls(tuple(Feature(f"{prefix}{j}", "binary", 0, 1, mutability, integer=True) for j in range(n)))

    def __len__(self) -> int:
        return len(self.features)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.features]

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return (np.array([f.lower for f in self.features], float), np.array([f.upper for f in self.features], float))

    def validate(self, X: np.ndarray | Sequence, *, name: str = "x") -> np.ndarray:
        """Return ``X`` as a float 2-D array or raise a ValueError naming the first problem."""
        arr = np.asarray(X, dtype=float) if not isinstance(X, np.ndarray) or X.dtype == object else X
        try:
            arr = np.asarray(arr, dtype=float)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{name}: values must be numbers ({err})") from None
        arr = np.atleast_2d(arr)
        if arr.ndim != 2 or arr.shape[1] != len(self):
            raise ValueError(f"{name}: expected {len(self)} features per row, got shape {np.shape(X)}")
        bad = ~np.isfinite(arr)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise ValueError(f"{name}: row {r} feature {self.features[c].name!r} is {arr[r, c]} (NaN/inf not allowed)")
        lo, hi = self.bounds()
        out = (arr < lo) | (arr > hi)
        if out.any():
            r, c = np.argwhere(out)[0]
            f = self.features[c]
            raise ValueError(f"{name}: row {r} feature {f.name!r} = {arr[r, c]} is outside [{f.lower}, {f.upper}]")
        integral = np.array([f.integer or f.kind in ("binary", "ordinal", "categorical") for f in self.features])
        frac = integral & (arr != np.round(arr))
        if frac.any():
            r, c = np.argwhere(frac)[0]
            raise ValueError(f"{name}: row {r} feature {self.features[c].name!r} = {arr[r, c]} must be an integer code")
        return arr

    def mutability_violations(self, x_from: np.ndarray, x_to: np.ndarray, tol: float = 1e-9) -> np.ndarray:
        """Per row: does the change from ``x_from`` to ``x_to`` break a mutability rule?"""
        x_from, x_to = np.atleast_2d(x_from), np.atleast_2d(x_to)
        delta = x_to - x_from
        mut = np.array([f.mutability for f in self.features])
        bad = ((mut == "immutable") & (np.abs(delta) > tol)) | ((mut == "increase") & (delta < -tol)) | (
            (mut == "decrease") & (delta > tol))
        return bad.any(axis=1)
