"""The raw features of a tabular data set and the encoder between raw records and encoded rows.

``RawColumn`` is one raw column (its kind, mutability, levels and observed range);
``TabularEncoder`` turns raw records (a data frame) into the encoded rows of
``envs.tabular.TabularWorld`` and back, with the ``FeatureSchema`` of the encoded columns: numbers
in raw units, ordinal and binary features as integer codes, a categorical feature as one 0/1 column
per category (or, with ``RawColumn.as_code``, one integer code column, read by the solvers as a
nominal feature: a user's model that ordinal-encodes the column reads it so). A run stores it as JSON
(``to_dict``, ``world/encoder.json``). The data sets and their raw-feature specs are in
``data_gen.loaders``; a user's table gets its spec from ``data_gen.spec``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np
import pandas as pd

from envs.schema import Feature, FeatureSchema, Mutability

ColumnKind = Literal["real", "integer", "ordinal", "binary", "categorical"]


@dataclass(frozen=True)
class RawColumn:
    """One raw column of a data set.

    ``levels`` are the raw values in code order: required for ``ordinal`` (low to high) and
    ``binary`` (the value coded 0, then 1); for ``categorical`` they are fitted from the data.
    ``labels`` name the levels (default ``str(level)``). ``lower``/``upper`` are the observed
    range (raw units for numbers, codes for ordinal/binary), set by ``TabularEncoder.fit`` where not
    given (declared bounds are kept, and a value outside them is an error). ``as_code`` stores a
    categorical feature as one code column (code i is ``levels[i]``; given levels are all kept, in
    their order) instead of a one-hot group.
    """

    name: str
    kind: ColumnKind
    mutability: Mutability = "free"
    levels: tuple = ()
    labels: tuple[str, ...] = ()
    lower: float | None = None
    upper: float | None = None
    as_code: bool = False  # categorical only: one integer code column (nominal), not a one-hot group

    def __post_init__(self):
        if self.kind not in ("real", "integer", "ordinal", "binary", "categorical"):
            raise ValueError(f"feature {self.name!r}: unknown kind {self.kind!r}")
        if self.kind == "categorical" and self.mutability not in ("free", "immutable"):
            raise ValueError(f"feature {self.name!r}: a categorical feature is free or immutable, "
                             f"not {self.mutability!r}")
        if self.as_code and self.kind != "categorical":
            raise ValueError(f"feature {self.name!r}: as_code applies to categorical features, not {self.kind!r}")
        if self.kind in ("ordinal", "binary") and not self.levels:
            raise ValueError(f"feature {self.name!r}: an {self.kind} feature needs its levels in order")
        if self.kind == "binary" and len(self.levels) != 2:
            raise ValueError(f"feature {self.name!r}: a binary feature has 2 levels, got {len(self.levels)}")
        if self.labels and len(self.labels) != len(self.levels):
            raise ValueError(f"feature {self.name!r}: {len(self.labels)} labels, {len(self.levels)} levels")
        if not self.labels:
            object.__setattr__(self, "labels", tuple(str(v) for v in self.levels))

    @property
    def n_columns(self) -> int:
        return len(self.levels) if self.one_hot else 1

    @property
    def one_hot(self) -> bool:
        """Encoded as one 0/1 column per level (a categorical feature not stored as a code)."""
        return self.kind == "categorical" and not self.as_code


def _plain(v: Any) -> Any:
    """A numpy scalar as the matching Python value (for JSON and dictionary keys)."""
    return v.item() if isinstance(v, np.generic) else v


class TabularEncoder:
    """Raw records <-> encoded rows (the state vectors of a TabularWorld), with the schema of the columns.

    Numbers stay in raw units, ordinal and binary features become integer codes, a categorical
    feature becomes one 0/1 column per category (``Feature.group`` = the raw name). Bounds are the
    observed range of the frame the encoder was fitted on.
    """

    def __init__(self, features: Sequence[RawColumn]):
        for f in features:
            if f.lower is None or f.upper is None or (f.one_hot and not f.levels):
                raise ValueError(f"feature {f.name!r}: not fitted (use TabularEncoder.fit)")
        self.raw_columns: tuple[RawColumn, ...] = tuple(features)
        self._codes = {f.name: {_plain(v): i for i, v in enumerate(f.levels)} for f in features}
        starts = np.cumsum([0] + [f.n_columns for f in features])
        self._columns = {f.name: list(range(starts[i], starts[i + 1])) for i, f in enumerate(features)}
        self.schema = FeatureSchema(tuple(col for f in features for col in self._schema_columns(f)))

    @classmethod
    def fit(cls, features: Sequence[RawColumn], df: pd.DataFrame) -> TabularEncoder:
        """Fit categories (sorted, or in the spec's order) and observed ranges (where not declared) on ``df``."""
        fitted = []
        for f in features:
            col = _column(df, f.name)
            if f.as_code and not f.levels:
                f = replace(f, levels=tuple(sorted(set(col.map(_plain)))), labels=())
            if f.one_hot:
                seen = set(col.map(_plain))
                levels = tuple(v for v in f.levels if v in seen) if f.levels else tuple(sorted(seen))
                missing = seen - set(levels)
                if missing:
                    raise ValueError(f"feature {f.name!r}: values {sorted(missing)} are not among its levels")
                fitted.append(RawColumn(f.name, f.kind, f.mutability, levels, lower=0, upper=1))
                continue
            codes = cls._numbers(f, col, {_plain(v): i for i, v in enumerate(f.levels)})
            lo = float(codes.min()) if f.lower is None else float(f.lower)
            hi = float(codes.max()) if f.upper is None else float(f.upper)
            out = (codes < lo) | (codes > hi)
            if out.any():
                r = int(np.argmax(out))
                raise ValueError(f"feature {f.name!r}: row {col.index[r]} value {_plain(col.iloc[r])!r} is outside "
                                 f"the declared bounds [{lo:g}, {hi:g}]")
            fitted.append(replace(f, lower=lo, upper=hi))
        return cls(fitted)

    @staticmethod
    def _schema_columns(f: RawColumn) -> list[Feature]:
        if f.one_hot:
            return [Feature(f"{f.name}={label}", "binary", 0, 1, f.mutability, group=f.name, integer=True)
                    for label in f.labels]
        kind = {"real": "numeric", "integer": "numeric"}.get(f.kind, f.kind)
        return [Feature(f.name, kind, f.lower, f.upper, f.mutability, f.labels, integer=f.kind != "real")]

    @staticmethod
    def _numbers(f: RawColumn, col: pd.Series, codes: dict) -> np.ndarray:
        """A non-categorical column as numbers (codes for ordinal/binary); bad values raise naming them."""
        if f.levels:  # ordinal, binary, a categorical code
            out = col.map(lambda v: codes.get(_plain(v), -1)).to_numpy(float)
            bad = out < 0
            problem = f"is not a level (levels: {list(f.levels)})"
        else:
            out = pd.to_numeric(col, errors="coerce").to_numpy(float)
            bad = ~np.isfinite(out)
            problem = "is not a finite number"
            if f.kind == "integer" and not bad.any():
                bad = out != np.round(out)
                problem = "is not an integer"
        if bad.any():
            r = int(np.argmax(bad))
            value = _plain(col.iloc[r])
            raise ValueError(f"feature {f.name!r}: row {col.index[r]} value {value!r} {problem}")
        return out

    @property
    def names(self) -> list[str]:
        """The encoded column names."""
        return self.schema.names

    def columns_of(self, raw_name: str) -> list[int]:
        """Encoded column indices of one raw feature."""
        if raw_name not in self._columns:
            raise ValueError(f"raw_name: unknown feature {raw_name!r} (known: {list(self._columns)})")
        return list(self._columns[raw_name])

    def encode(self, df: pd.DataFrame) -> np.ndarray:
        """Encode raw records to a float (N, D) array; unknown categories and out-of-range values raise."""
        X = np.zeros((len(df), len(self.schema)))
        for f in self.raw_columns:
            col, cols, codes = _column(df, f.name), self._columns[f.name], self._codes[f.name]
            if f.one_hot:
                idx = col.map(lambda v, c=codes: c.get(_plain(v), -1)).to_numpy(np.int64)
                if (idx < 0).any():
                    r = int(np.argmax(idx < 0))
                    raise ValueError(f"feature {f.name!r}: row {col.index[r]} unknown category "
                                     f"{_plain(col.iloc[r])!r} (known: {list(f.levels)})")
                X[np.arange(len(df)), cols[0] + idx] = 1.0
                continue
            values = self._numbers(f, col, codes)
            out = (values < f.lower) | (values > f.upper)
            if out.any():
                r = int(np.argmax(out))
                shown = f"{_plain(col.iloc[r])!r}" + (f" (code {values[r]:g})" if f.levels else "")
                raise ValueError(f"feature {f.name!r}: row {col.index[r]} value {shown} is outside the "
                                 f"observed range [{f.lower:g}, {f.upper:g}]")
            X[:, cols[0]] = values
        return X

    def decode(self, X: np.ndarray) -> pd.DataFrame:
        """Encoded rows back to raw records (integral columns within 1e-6 of an integer are rounded)."""
        X = np.atleast_2d(np.asarray(X, float))
        integral = np.array([f.integer for f in self.schema.features])
        near = integral & (np.abs(X - np.round(X)) <= 1e-6)
        X = self.schema.validate(np.where(near, np.round(X), X), name="X")
        out = {}
        for f in self.raw_columns:
            cols = self._columns[f.name]
            if f.one_hot:
                block = X[:, cols]
                bad = block.sum(axis=1) != 1
                if bad.any():
                    r = int(np.argmax(bad))
                    raise ValueError(f"X: row {r} one-hot group {f.name!r} is {block[r].tolist()} "
                                     "(needs exactly one 1)")
                out[f.name] = np.array(f.levels, dtype=object)[block.argmax(axis=1)]
            elif f.levels:
                out[f.name] = [f.levels[int(c)] for c in X[:, cols[0]]]
            else:
                out[f.name] = X[:, cols[0]].astype(np.int64) if f.kind == "integer" else X[:, cols[0]]
        return pd.DataFrame(out)

    def to_dict(self) -> dict[str, Any]:
        # as_code is written only where set, so the JSON of every other encoder is as before
        return {"features": [{**{k: v for k, v in asdict(f).items() if k != "as_code" or v},
                              "levels": [_plain(v) for v in f.levels], "labels": list(f.labels)}
                             for f in self.raw_columns]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TabularEncoder:
        return cls([RawColumn(**{**f, "levels": tuple(f["levels"]), "labels": tuple(f["labels"])})
                    for f in d["features"]])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TabularEncoder) and self.raw_columns == other.raw_columns

    __hash__ = None


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    if name not in df.columns:
        raise ValueError(f"feature {name!r}: column missing from the frame (has {list(df.columns)})")
    return df[name]
