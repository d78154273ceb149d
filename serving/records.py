"""Raw records <-> encoded rows for serving a tabular world, with errors that name the field.

A raw record is what a client knows about a person: one value per raw feature of the data set
(``age``, ``workclass``, ...), categories as their level strings, ordinal and binary features as
their levels, numbers as numbers. :class:`RecordCodec` turns records into the encoded rows of
``envs.tabular.TabularWorld`` (the one-hot and code layout of ``data_gen.loaders.TabularEncoder``)
and back, feature by feature, without pandas (one record takes microseconds), and checks each
value against the feature's domain: the levels the encoder was fitted on, the observed range
(``lower``/``upper``), integrality. It also checks a counterfactual against the schema
(:meth:`RecordCodec.violations`): the same checks plus one-hot validity and the mutability rules.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from solvers.mace.distance import distance_features, mix, norm_weights


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


class RecordError(ValueError):
    """A raw record is invalid; the message starts with the field (``records[3].age: ...``)."""


@dataclass(frozen=True)
class Domain:
    """The values one raw feature accepts in a request."""

    name: str
    kind: str  # real | integer | ordinal | binary | categorical
    mutability: str  # free | immutable | increase | decrease
    columns: tuple[int, ...]  # its encoded columns
    levels: tuple = ()  # allowed levels (categorical: all; ordinal/binary: codes lower..upper), in code order
    first_code: int = 0  # code of levels[0] (ordinal/binary)
    labels: tuple[str, ...] = ()  # names of the levels
    lower: float | None = None  # numbers: the observed range (raw units)
    upper: float | None = None
    coded: bool = False  # categorical stored as one integer code column (RawColumn.as_code), not one-hot

    @property
    def one_hot(self) -> bool:
        return self.kind == "categorical" and not self.coded

    @property
    def integer_levels(self) -> bool:
        """Ordinal/binary levels that are consecutive integers (stated as minimum/maximum)."""
        lv = self.levels
        return bool(lv) and all(isinstance(v, int) and not isinstance(v, bool) for v in lv) and \
            list(lv) == list(range(lv[0], lv[0] + len(lv)))

    def describe(self) -> str:
        """One line for the OpenAPI schema: the kind, the domain and the mutability."""
        if self.kind == "categorical":
            what = f"category, one of {len(self.levels)}"
        elif self.kind in ("ordinal", "binary"):
            named = [f"{v} ({lab})" if str(v) != lab else str(v) for v, lab in zip(self.levels, self.labels, strict=True)]
            what = f"{self.kind}, low to high: " + ", ".join(named)
        else:
            what = f"{'integer' if self.kind == 'integer' else 'number'} in [{self.lower:g}, {self.upper:g}]"
        rule = {"immutable": "immutable: a recommendation never changes it",
                "increase": "increase-only: a recommendation may only raise it",
                "decrease": "decrease-only: a recommendation may only lower it"}.get(self.mutability, "free to change")
        return f"{what}; {rule}"


class RecordCodec:
    """Encode and decode raw records of one tabular encoder (``data_gen.loaders.TabularEncoder``)."""

    def __init__(self, encoder: Any, norm: Any = "one", cost: np.ndarray | None = None):
        self.encoder = encoder
        self.schema = encoder.schema
        self.domains: list[Domain] = []
        for f in encoder.raw_columns:
            cols = tuple(encoder.columns_of(f.name))
            if f.kind == "categorical":
                d = Domain(f.name, f.kind, f.mutability, cols, tuple(_plain(v) for v in f.levels), 0, tuple(f.labels),
                           coded=bool(getattr(f, "as_code", False)))
            elif f.kind in ("ordinal", "binary"):
                lo, hi = int(f.lower), int(f.upper)
                d = Domain(f.name, f.kind, f.mutability, cols, tuple(_plain(v) for v in f.levels[lo: hi + 1]), lo,
                           tuple(f.labels[lo: hi + 1]))
            else:
                d = Domain(f.name, f.kind, f.mutability, cols, lower=float(f.lower), upper=float(f.upper))
            self.domains.append(d)
        self.names = [d.name for d in self.domains]
        self._codes = [{v: i for i, v in enumerate(d.levels)} for d in self.domains]
        self.n_columns = len(self.schema)
        lo, hi = self.schema.bounds()
        self.lower, self.upper = lo, hi
        self.integral = np.array([f.integer or f.kind in ("binary", "ordinal", "categorical")
                                  for f in self.schema.features])
        self.codes = np.array([f.kind in ("binary", "ordinal", "categorical") for f in self.schema.features])
        mut = np.array([f.mutability for f in self.schema.features])
        self.immutable, self.increase, self.decrease = mut == "immutable", mut == "increase", mut == "decrease"
        self.groups = [list(d.columns) for d in self.domains if d.one_hot]
        self.raws = distance_features(self.schema)
        self.norm = norm
        self.weights = norm_weights(norm, len(self.raws))
        # the world's cost weights per raw feature and direction (envs.rules; None: MACE's default, all 1)
        self.cost = None if cost is None or np.all(np.asarray(cost) == 1.0) else np.asarray(cost, float)
        self._first = np.array([r.columns[0] for r in self.raws], np.int64)
        self._directed = np.array([r.kind not in ("group", "nominal") for r in self.raws])

    # ----------------------------------------------------------------------------- records -> rows
    def _value(self, j: int, v: Any, where: str) -> tuple[int, float]:
        """(column offset, value) of feature j's raw value, or a RecordError naming ``where``."""
        d = self.domains[j]
        if d.levels:
            key = _plain(v)
            if isinstance(key, bool) or (isinstance(key, float) and key.is_integer() and d.integer_levels):
                key = int(key) if not isinstance(key, bool) else key
            code = self._codes[j].get(key) if not isinstance(key, bool) and isinstance(key, str | int | float) else None
            if code is None:
                shown = list(d.levels) if len(d.levels) <= 12 else [*d.levels[:12], "..."]
                raise RecordError(f"{where}: {v!r} is not in the domain (one of {shown})")
            return (code, 1.0) if d.one_hot else (0, float(d.first_code + code))
        if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
            raise RecordError(f"{where}: expected a number, got {type(v).__name__} {v!r}")
        x = float(v)
        if not math.isfinite(x):
            raise RecordError(f"{where}: {v!r} is not a finite number")
        if d.kind == "integer" and not x.is_integer():
            raise RecordError(f"{where}: {v!r} is not an integer")
        if not d.lower <= x <= d.upper:
            raise RecordError(f"{where}: {v!r} is outside the observed range [{d.lower:g}, {d.upper:g}]")
        return 0, x

    def encode(self, records: Sequence[Mapping[str, Any]], field: str = "records", single: bool = False) -> np.ndarray:
        """(N, D) encoded rows of raw records; an unknown or missing feature or a value outside its
        domain raises :class:`RecordError` naming it (``field[i].feature``, or ``feature`` when
        ``single``)."""
        X = np.zeros((len(records), self.n_columns))
        known = set(self.names)
        for i, rec in enumerate(records):
            at = "" if single else f"{field}[{i}]"
            if not isinstance(rec, Mapping):
                raise RecordError(f"{at or 'body'}: expected a JSON object of raw features, got {type(rec).__name__}")
            extra = [k for k in rec if k not in known]
            if extra:
                raise RecordError(f"{at + '.' if at else ''}{extra[0]}: unknown feature (known: {self.names})")
            for j, d in enumerate(self.domains):
                where = f"{at + '.' if at else ''}{d.name}"
                if d.name not in rec:
                    raise RecordError(f"{where}: required feature missing")
                off, val = self._value(j, rec[d.name], where)
                X[i, d.columns[0] + off] = val
        return X

    # ----------------------------------------------------------------------------- rows -> records
    def value(self, j: int, row: np.ndarray) -> Any:
        """Feature j's raw value in an encoded row (JSON-ready Python value)."""
        d = self.domains[j]
        if d.one_hot:
            return d.levels[int(np.argmax(row[list(d.columns)]))]
        v = float(row[d.columns[0]])
        if d.levels:
            return d.levels[int(round(v)) - d.first_code]
        if d.kind == "integer":  # a world's consequence may leave an integer feature fractional: show it as it is
            return int(round(v)) if abs(v - round(v)) <= 1e-9 else v
        return v

    def decode(self, row: np.ndarray) -> dict[str, Any]:
        return {d.name: self.value(j, row) for j, d in enumerate(self.domains)}

    def changes(self, x: np.ndarray, cf: np.ndarray) -> list[dict[str, Any]]:
        """``[{feature, from, to}]`` in raw units for every raw feature ``cf`` changes."""
        out = []
        for j, d in enumerate(self.domains):
            cols = list(d.columns)
            if not np.array_equal(x[cols], cf[cols]):
                a, b = self.value(j, x), self.value(j, cf)
                if a != b:
                    out.append({"feature": d.name, "from": a, "to": b})
        return out

    # ----------------------------------------------------------------------------- checks
    def violations(self, X: np.ndarray, CF: np.ndarray, integral: bool = True, bounds: bool = True
                   ) -> list[str | None]:
        """Per row: None if ``CF`` is a well-formed plausible change of ``X`` (finite, in the
        schema's bounds, integral codes, valid one-hot groups, immutable / monotone features
        respected), else the first problem in words. Acceptance is checked by the caller.
        ``integral=False`` leaves integer *numbers* alone (a sequential world's consequences may
        make them fractional); one-hot, ordinal and binary codes are always checked.
        ``bounds=False`` leaves the schema's (data) bounds to the caller: a sequential world's
        actions have their own domains (CSCF's German loan duration: 0 < d < 120 months, the
        data's 4..72), checked by its post-conditions."""
        X, CF = np.atleast_2d(X), np.atleast_2d(CF)
        out: list[str | None] = [None] * len(CF)
        names = self.schema.names

        def flag(mask: np.ndarray, what: str) -> None:
            for r, c in np.argwhere(mask):
                if out[r] is None:
                    out[r] = f"{names[c]} {what}"

        if CF.shape != X.shape:
            return [f"shape {CF.shape} != {X.shape}"] * len(CF)
        finite = np.isfinite(CF)
        flag(~finite, "is not finite")
        C = np.where(finite, CF, 0.0)
        if bounds:
            flag((C < self.lower - 1e-9) | (C > self.upper + 1e-9), "is outside its bounds")
        must = self.integral if integral else self.codes
        flag(must & (np.abs(C - np.round(C)) > 1e-9), "is not an integer code")
        for cols in self.groups:
            block = C[:, cols]
            bad = ~(np.isin(block, (0.0, 1.0)).all(1) & (block.sum(1) == 1))
            mask = np.zeros(C.shape, bool)
            mask[bad, cols[0]] = True
            flag(mask, "(its one-hot group) is not exactly one category")
        delta = C - X
        flag(self.immutable & (np.abs(delta) > 1e-9), "is immutable but changed")
        flag(self.increase & (delta < -1e-9), "is increase-only but decreased")
        flag(self.decrease & (delta > 1e-9), "is decrease-only but increased")
        return out

    def distance(self, X: np.ndarray, CF: np.ndarray) -> np.ndarray:
        """MACE's normalized distance (Eq. 3, the served norm) between paired rows, each feature's change
        weighted by the world's cost weight of the way it moved (``cost``; as ``solvers.mace.distance``)."""
        X, CF = np.atleast_2d(X), np.atleast_2d(CF)
        D = np.zeros((len(X), len(self.raws)))
        for j, r in enumerate(self.raws):
            cols = list(r.columns)
            if r.kind == "numeric":
                if r.span > 0 and np.isfinite(r.span):
                    D[:, j] = np.abs(CF[:, cols[0]] - X[:, cols[0]]) / r.span
            else:
                D[:, j] = np.any(CF[:, cols] != X[:, cols], axis=1)
        if self.cost is None:
            return mix(D, self.weights)
        down = (CF[:, self._first] < X[:, self._first]) & self._directed
        return mix(D, self.weights, np.where(down, self.cost[:, 1], self.cost[:, 0]))
