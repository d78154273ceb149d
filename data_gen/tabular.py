"""Tabular worlds on real data: Adult, German Credit, COMPAS and Credit default.

Each data set has a loader (files under ``../shared/data`` or ``RECOURSE_DATA_DIR``; never copied
into the repo), a raw-feature spec (kind and mutability, MACE Appendix B.2 and GeCo Appendix A.1),
a ``TabularEncoder`` between raw records and the encoded columns of ``envs.tabular.TabularWorld``,
and the four MACE classifiers (tree, forest, logistic regression, ReLU MLP) as white-box copies.
``build_world`` trains (or reuses from a JSON cache) the model of one data set.

Label 1 is always the favourable outcome. GeCo's implications between features (e.g. "more
education implies older") are not schema rules; solvers add them as constraints.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeClassifier

from envs.models import TreeEnsemble, WhiteBoxModel, from_sklearn
from envs.schema import Feature, FeatureSchema, Mutability
from envs.tabular import TabularWorld

RawKind = Literal["real", "integer", "ordinal", "binary", "categorical"]
CACHE_VERSION = 1


# --------------------------------------------------------------------------------------------- spec

@dataclass(frozen=True)
class RawFeature:
    """One raw column of a data set.

    ``levels`` are the raw values in code order: required for ``ordinal`` (low to high) and
    ``binary`` (the value coded 0, then 1); for ``categorical`` they are fitted from the data.
    ``labels`` name the levels (default ``str(level)``). ``lower``/``upper`` are the observed
    range (raw units for numbers, codes for ordinal/binary), set by ``TabularEncoder.fit``.
    """

    name: str
    kind: RawKind
    mutability: Mutability = "free"
    levels: tuple = ()
    labels: tuple[str, ...] = ()
    lower: float | None = None
    upper: float | None = None

    def __post_init__(self):
        if self.kind not in ("real", "integer", "ordinal", "binary", "categorical"):
            raise ValueError(f"feature {self.name!r}: unknown kind {self.kind!r}")
        if self.kind == "categorical" and self.mutability not in ("free", "immutable"):
            raise ValueError(f"feature {self.name!r}: a categorical feature is free or immutable, "
                             f"not {self.mutability!r}")
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
        return len(self.levels) if self.kind == "categorical" else 1


@dataclass(frozen=True)
class DatasetSpec:
    """A data set: its raw features (in column order) and a loader ``data_dir -> (frame, labels)``."""

    name: str
    features: tuple[RawFeature, ...]
    load: Callable[[Path], tuple[pd.DataFrame, np.ndarray]]


ADULT_COLUMNS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
                 "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
                 "hours-per-week", "native-country", "income")
ADULT_EDUCATION = ("Preschool", "1st-4th", "5th-6th", "7th-8th", "9th", "10th", "11th", "12th",  # codes 1..16
                   "HS-grad", "Some-college", "Assoc-voc", "Assoc-acdm", "Bachelors", "Masters",
                   "Prof-school", "Doctorate")

GERMAN_COLUMNS = ("checking_status", "duration", "credit_history", "purpose", "credit_amount",
                  "savings_status", "employment", "installment_rate", "personal_status_sex", "other_debtors",
                  "residence_since", "property", "age", "other_installment_plans", "housing",
                  "existing_credits", "job", "num_dependents", "own_telephone", "foreign_worker", "class")
GERMAN_CODES: dict[str, dict[str, str]] = {  # UCI german.doc
    "checking_status": {"A11": "<0 DM", "A12": "0-200 DM", "A13": ">=200 DM", "A14": "no checking account"},
    "credit_history": {"A30": "no credits / all paid duly", "A31": "all paid duly at this bank",
                       "A32": "existing paid duly", "A33": "delay in the past", "A34": "critical account"},
    "purpose": {"A40": "car (new)", "A41": "car (used)", "A42": "furniture/equipment",
                "A43": "radio/television", "A44": "domestic appliances", "A45": "repairs",
                "A46": "education", "A47": "vacation", "A48": "retraining", "A49": "business",
                "A410": "others"},
    "savings_status": {"A61": "<100 DM", "A62": "100-500 DM", "A63": "500-1000 DM", "A64": ">=1000 DM",
                       "A65": "unknown / none"},
    "employment": {"A71": "unemployed", "A72": "<1 year", "A73": "1-4 years", "A74": "4-7 years",
                   "A75": ">=7 years"},
    "personal_status_sex": {"A91": "male: divorced/separated", "A92": "female: divorced/separated/married",
                            "A93": "male: single", "A94": "male: married/widowed", "A95": "female: single"},
    "housing": {"A151": "rent", "A152": "own", "A153": "for free"},
    "job": {"A171": "unemployed / unskilled non-resident", "A172": "unskilled resident",
            "A173": "skilled employee", "A174": "management / highly qualified"},
    "foreign_worker": {"A201": "yes", "A202": "no"},
}


def _ordinal(name: str, codes: dict[str, str], mutability: Mutability = "free") -> RawFeature:
    return RawFeature(name, "ordinal", mutability, tuple(codes.values()))


def _categorical(name: str, codes: dict[str, str], mutability: Mutability = "free") -> RawFeature:
    return RawFeature(name, "categorical", mutability, tuple(codes.values()))


ADULT_FEATURES = (
    RawFeature("age", "integer", "increase"),
    RawFeature("workclass", "categorical"),
    RawFeature("education-num", "ordinal", "increase", tuple(range(1, 17)), ADULT_EDUCATION),
    RawFeature("marital-status", "categorical", "immutable"),
    RawFeature("occupation", "categorical"),
    RawFeature("relationship", "categorical", "immutable"),
    RawFeature("race", "categorical", "immutable"),
    RawFeature("sex", "categorical", "immutable"),
    RawFeature("capital-gain", "real"),
    RawFeature("capital-loss", "real"),
    RawFeature("hours-per-week", "integer"),
    RawFeature("native-country", "categorical", "immutable"),
)
CREDIT_FEATURES = (
    RawFeature("isMale", "binary", "immutable", (0, 1), ("female", "male")),
    RawFeature("isMarried", "binary", "immutable", (0, 1), ("no", "yes")),
    RawFeature("AgeGroup", "ordinal", "increase", (1, 2, 3, 4), ("<25", "25-39", "40-59", ">=60")),
    RawFeature("EducationLevel", "ordinal", "increase", (1, 2, 3, 4),
               ("other", "high school", "university", "graduate school")),
    RawFeature("MaxBillAmountOverLast6Months", "real"),
    RawFeature("MaxPaymentAmountOverLast6Months", "real"),
    RawFeature("MonthsWithZeroBalanceOverLast6Months", "integer"),
    RawFeature("MonthsWithLowSpendingOverLast6Months", "integer"),
    RawFeature("MonthsWithHighSpendingOverLast6Months", "integer"),
    RawFeature("MostRecentBillAmount", "real"),
    RawFeature("MostRecentPaymentAmount", "real"),
    RawFeature("TotalOverdueCounts", "integer", "increase"),
    RawFeature("TotalMonthsOverdue", "integer", "increase"),
    RawFeature("HasHistoryOfOverduePayments", "binary", "increase", (0, 1), ("no", "yes")),
)
COMPAS_FEATURES = (
    RawFeature("AgeGroup", "ordinal", "increase", (1, 2, 3), ("<25", "25-45", ">45")),
    RawFeature("Race", "binary", "immutable", (1, 2), ("African-American", "Caucasian")),
    RawFeature("Sex", "binary", "immutable", (1, 2), ("Male", "Female")),
    RawFeature("PriorsCount", "integer", "increase"),
    RawFeature("ChargeDegree", "binary", "free", (1, 2), ("M", "F")),
)
GERMAN_FEATURES = (
    _categorical("checking_status", GERMAN_CODES["checking_status"]),
    RawFeature("duration", "integer"),
    _categorical("credit_history", GERMAN_CODES["credit_history"], "immutable"),
    _categorical("purpose", GERMAN_CODES["purpose"]),
    RawFeature("credit_amount", "integer"),
    _categorical("savings_status", GERMAN_CODES["savings_status"]),
    _ordinal("employment", GERMAN_CODES["employment"], "increase"),
    RawFeature("installment_rate", "integer"),
    _categorical("personal_status_sex", GERMAN_CODES["personal_status_sex"], "immutable"),
    RawFeature("age", "integer", "increase"),
    _categorical("housing", GERMAN_CODES["housing"]),
    RawFeature("existing_credits", "integer"),
    _ordinal("job", GERMAN_CODES["job"]),
    RawFeature("foreign_worker", "binary", "immutable", ("no", "yes")),
)


def _load_adult(data_dir: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """UCI train + test, rows with '?' dropped (45,222).

    ``fnlwgt`` (a sampling weight) and the categorical ``education`` (one-to-one with
    ``education-num``, kept as the ordinal education level) are dropped.
    """
    opts = {"header": None, "names": ADULT_COLUMNS, "skipinitialspace": True, "na_values": "?"}
    parts = [pd.read_csv(data_dir / "adult" / "adult.data", **opts),
             pd.read_csv(data_dir / "adult" / "adult.test", skiprows=1, **opts)]
    df = pd.concat(parts, ignore_index=True).dropna().reset_index(drop=True)
    y = (df["income"].str.rstrip(".") == ">50K").to_numpy(np.int64)
    return df[[f.name for f in ADULT_FEATURES]], y


def _load_german(data_dir: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """UCI german.data with A-codes decoded; label 1 = good credit risk."""
    df = pd.read_csv(data_dir / "german" / "german.data", sep=" ", header=None, names=GERMAN_COLUMNS)
    for col, codes in GERMAN_CODES.items():
        unknown = set(df[col]) - set(codes)
        if unknown:
            raise ValueError(f"german.data: column {col!r} has unknown codes {sorted(unknown)}")
        df[col] = df[col].map(codes)
    y = (df["class"] == 1).to_numpy(np.int64)
    return df[[f.name for f in GERMAN_FEATURES]], y


def _load_compas(data_dir: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """MACE's processed COMPAS (5,278 rows); label 1 = no two-year recidivism."""
    df = pd.read_csv(data_dir / "compas" / "compas_mace_processed_geco.csv", index_col=0)
    y = (1 - df["TwoYearRecid"]).to_numpy(np.int64)
    return df[[f.name for f in COMPAS_FEATURES]].astype(np.int64), y


def _load_credit(data_dir: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """MACE's processed Credit (29,623 rows); label 1 = no default next month."""
    df = pd.read_csv(data_dir / "credit" / "credit_processed.csv")
    y = df["NoDefaultNextMonth (label)"].to_numpy(np.int64)
    ints = [f.name for f in CREDIT_FEATURES if f.kind != "real"]
    df[ints] = df[ints].astype(np.int64)
    return df[[f.name for f in CREDIT_FEATURES]], y


DATASETS: dict[str, DatasetSpec] = {
    "adult": DatasetSpec("adult", ADULT_FEATURES, _load_adult),
    "german": DatasetSpec("german", GERMAN_FEATURES, _load_german),
    "compas": DatasetSpec("compas", COMPAS_FEATURES, _load_compas),
    "credit": DatasetSpec("credit", CREDIT_FEATURES, _load_credit),
}


def data_dir_path(data_dir: str | Path | None = None) -> Path:
    """The data directory: the argument, else ``$RECOURSE_DATA_DIR``, else ``<repo>/../shared/data``."""
    default = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
    path = Path(data_dir or os.environ.get("RECOURSE_DATA_DIR") or default)
    if not path.is_dir():
        raise FileNotFoundError(f"data_dir: {path} is not a directory (pass data_dir or set "
                                "RECOURSE_DATA_DIR)")
    return path.resolve()


def _spec(dataset: str) -> DatasetSpec:
    if dataset not in DATASETS:
        raise ValueError(f"dataset: unknown data set {dataset!r} (known: {sorted(DATASETS)})")
    return DATASETS[dataset]


def load_raw(dataset: str, data_dir: str | Path | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """The raw feature frame (the spec's columns, in order) and the 0/1 labels (1 = favourable)."""
    return _spec(dataset).load(data_dir_path(data_dir))


# ------------------------------------------------------------------------------------------ encoder

def _plain(v: Any) -> Any:
    """A numpy scalar as the matching Python value (for JSON and dictionary keys)."""
    return v.item() if isinstance(v, np.generic) else v


class TabularEncoder:
    """Raw records <-> encoded rows (the state vectors of a TabularWorld), with the schema of the columns.

    Numbers stay in raw units, ordinal and binary features become integer codes, a categorical
    feature becomes one 0/1 column per category (``Feature.group`` = the raw name). Bounds are the
    observed range of the frame the encoder was fitted on.
    """

    def __init__(self, features: Sequence[RawFeature]):
        for f in features:
            if f.lower is None or f.upper is None or (f.kind == "categorical" and not f.levels):
                raise ValueError(f"feature {f.name!r}: not fitted (use TabularEncoder.fit)")
        self.raw_features: tuple[RawFeature, ...] = tuple(features)
        self._codes = {f.name: {_plain(v): i for i, v in enumerate(f.levels)} for f in features}
        starts = np.cumsum([0] + [f.n_columns for f in features])
        self._columns = {f.name: list(range(starts[i], starts[i + 1])) for i, f in enumerate(features)}
        self.schema = FeatureSchema(tuple(col for f in features for col in self._schema_columns(f)))

    @classmethod
    def fit(cls, features: Sequence[RawFeature], df: pd.DataFrame) -> TabularEncoder:
        """Fit categories (sorted, or in the spec's order) and observed ranges on ``df``."""
        fitted = []
        for f in features:
            col = _column(df, f.name)
            if f.kind == "categorical":
                seen = set(col.map(_plain))
                levels = tuple(v for v in f.levels if v in seen) if f.levels else tuple(sorted(seen))
                missing = seen - set(levels)
                if missing:
                    raise ValueError(f"feature {f.name!r}: values {sorted(missing)} are not among its levels")
                fitted.append(RawFeature(f.name, f.kind, f.mutability, levels, lower=0, upper=1))
                continue
            codes = cls._numbers(f, col, {_plain(v): i for i, v in enumerate(f.levels)})
            lo, hi = float(codes.min()), float(codes.max())
            fitted.append(RawFeature(f.name, f.kind, f.mutability, f.levels, f.labels, lo, hi))
        return cls(fitted)

    @staticmethod
    def _schema_columns(f: RawFeature) -> list[Feature]:
        if f.kind == "categorical":
            return [Feature(f"{f.name}={label}", "binary", 0, 1, f.mutability, group=f.name, integer=True)
                    for label in f.labels]
        kind = {"real": "numeric", "integer": "numeric"}.get(f.kind, f.kind)
        return [Feature(f.name, kind, f.lower, f.upper, f.mutability, f.labels, integer=f.kind != "real")]

    @staticmethod
    def _numbers(f: RawFeature, col: pd.Series, codes: dict) -> np.ndarray:
        """A non-categorical column as numbers (codes for ordinal/binary); bad values raise naming them."""
        if f.kind in ("ordinal", "binary"):
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
        for f in self.raw_features:
            col, cols, codes = _column(df, f.name), self._columns[f.name], self._codes[f.name]
            if f.kind == "categorical":
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
        for f in self.raw_features:
            cols = self._columns[f.name]
            if f.kind == "categorical":
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
        return {"features": [{**asdict(f), "levels": [_plain(v) for v in f.levels], "labels": list(f.labels)}
                             for f in self.raw_features]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TabularEncoder:
        return cls([RawFeature(**{**f, "levels": tuple(f["levels"]), "labels": tuple(f["labels"])})
                    for f in d["features"]])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TabularEncoder) and self.raw_features == other.raw_features

    __hash__ = None


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    if name not in df.columns:
        raise ValueError(f"feature {name!r}: column missing from the frame (has {list(df.columns)})")
    return df[name]


# ------------------------------------------------------------------------------------- data, models

@dataclass
class TabularData:
    """Encoded 80/20 stratified split of one data set, with its encoder."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    encoder: TabularEncoder
    fingerprint: str = ""  # hash of the raw frame, labels and split seed


def load_data(dataset: str, *, seed: int = 0, data_dir: str | Path | None = None,
              test_size: float = 0.2) -> TabularData:
    """Load, fit the encoder on the whole data set (every test row encodable) and split by ``seed``."""
    df, y = load_raw(dataset, data_dir)
    encoder = TabularEncoder.fit(_spec(dataset).features, df)
    X = encoder.encode(df)
    train, test = train_test_split(np.arange(len(y)), test_size=test_size, stratify=y, random_state=seed)
    h = hashlib.sha256(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    h.update(y.tobytes())
    h.update(f"{seed}/{test_size}".encode())
    return TabularData(X[train], y[train], X[test], y[test], encoder, h.hexdigest()[:16])


# Defaults follow MACE B.1 (scikit-learn defaults; forest of 10 trees as in sklearn 0.20; MLP 10x10),
# except that trees are depth-limited: exact solvers scale with the leaves. Seed 0, unlimited vs
# max_depth=8, test accuracy (leaves per tree): Adult tree 0.817 (6,485) vs 0.855 (122), forest
# 0.842 (~6,300) vs 0.848 (~128); Credit tree 0.718 (5,004) vs 0.802 (187), forest 0.785 vs 0.806;
# German and COMPAS also equal or better at depth 8.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "tree": {"max_depth": 8},
    "forest": {"n_estimators": 10, "max_depth": 8},
    "lr": {"max_iter": 1000},
    "mlp": {"hidden_layer_sizes": (10, 10)},
}


def _estimator(model_class: str, seed: int, params: dict[str, Any]) -> Any:
    cls = {"tree": DecisionTreeClassifier, "forest": RandomForestClassifier, "lr": LogisticRegression,
           "mlp": MLPClassifier}[model_class]
    try:
        return cls(random_state=seed, **params)
    except TypeError as err:
        raise ValueError(f"model_kwargs: {err}") from None


def model_params(model_class: str, **model_kwargs: Any) -> dict[str, Any]:
    """The estimator's keyword arguments: the defaults of ``model_class`` updated by ``model_kwargs``."""
    if model_class not in MODEL_DEFAULTS:
        raise ValueError(f"model_class: unknown {model_class!r} (known: {sorted(MODEL_DEFAULTS)})")
    return {**MODEL_DEFAULTS[model_class], **model_kwargs}


def train_model(model_class: str, data: TabularData, *, seed: int = 0,
                **model_kwargs: Any) -> tuple[WhiteBoxModel, dict[str, Any]]:
    """Fit a seeded sklearn model and return its white-box copy (checked equal on the test set) and metrics.

    LR and MLP see StandardScaler-ed inputs; the scaler is folded into the white-box copy.
    """
    params = model_params(model_class, **model_kwargs)
    est = _estimator(model_class, seed, params)
    scaled = model_class in ("lr", "mlp")
    scaler = StandardScaler().fit(data.X_train) if scaled else None

    def prep(X: np.ndarray) -> np.ndarray:
        return scaler.transform(X) if scaled else X

    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        est.fit(prep(data.X_train), data.y_train)
    fit_s = time.perf_counter() - t0
    model = from_sklearn(est, scaler.mean_, scaler.scale_) if scaled else from_sklearn(est)
    disagree = int((model.predict(data.X_test) != (est.predict(prep(data.X_test)) == 1)).sum())
    if disagree:
        raise RuntimeError(f"white-box {model_class} disagrees with sklearn on {disagree} test rows")
    trees = model.trees if isinstance(model, TreeEnsemble) else None
    metrics = {
        "train_accuracy": float(np.mean(model.predict(data.X_train) == data.y_train)),
        "test_accuracy": float(np.mean(model.predict(data.X_test) == data.y_test)),
        "leaves_per_tree": None if trees is None else [int((t.left < 0).sum()) for t in trees],
        "n_train": len(data.y_train),
        "n_test": len(data.y_test),
        "n_columns": len(data.encoder.schema),
        "n_test_negatives": int((~model.predict(data.X_test)).sum()),
        "fit_seconds": round(fit_s, 3),
        "converged": not any(issubclass(w.category, ConvergenceWarning) for w in caught),
        "params": params,
    }
    return model, metrics


@dataclass
class TabularBuild:
    """What ``build`` returns: the world, its encoded data and the model's metrics."""

    world: TabularWorld
    data: TabularData
    metrics: dict[str, Any]
    cache_path: Path
    cached: bool = False


def build(dataset: str, model_class: str, *, seed: int = 0, data_dir: str | Path | None = None,
          cache_dir: str | Path | None = "data_cache/tabular", **model_kwargs: Any) -> TabularBuild:
    """Train (or reuse from ``cache_dir``) the model of one data set; ``cache_dir=None``: no cache."""
    data = load_data(dataset, seed=seed, data_dir=data_dir)
    params = model_params(model_class, **model_kwargs)
    key = json.dumps({"v": CACHE_VERSION, "dataset": dataset, "model": model_class, "seed": seed,
                      "params": params, "data": data.fingerprint}, sort_keys=True, default=list)
    path = Path(cache_dir or ".") / f"{dataset}-{model_class}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    name = f"{dataset}/{model_class}"
    files = [path / n for n in ("model.json", "encoder.json", "metrics.json")]
    if cache_dir is not None and all(p.exists() for p in files):
        encoder = TabularEncoder.from_dict(json.loads(files[1].read_text()))
        if encoder != data.encoder:
            raise ValueError(f"cache: {files[1]} does not match the data's encoder (remove {path})")
        world = TabularWorld(name, encoder.schema, WhiteBoxModel.load(files[0]), encoder)
        return TabularBuild(world, data, json.loads(files[2].read_text()), path, cached=True)
    model, metrics = train_model(model_class, data, seed=seed, **model_kwargs)
    metrics = json.loads(json.dumps({"dataset": dataset, "model": model_class, "seed": seed, **metrics},
                                    default=list))  # as the cache holds them
    if cache_dir is not None:
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        model.save(tmp / "model.json")
        (tmp / "encoder.json").write_text(json.dumps(data.encoder.to_dict()))
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=1))
        try:
            tmp.rename(path)
        except OSError:  # a concurrent build finished first; its files are equal
            shutil.rmtree(tmp)
    return TabularBuild(TabularWorld(name, data.encoder.schema, model, data.encoder), data, metrics, path)


def build_world(dataset: str, model_class: str, *, seed: int = 0, data_dir: str | Path | None = None,
                cache_dir: str | Path | None = "data_cache/tabular", **model_kwargs: Any) -> TabularWorld:
    """The TabularWorld of ``dataset`` with a ``model_class`` classifier (see ``build``)."""
    built = build(dataset, model_class, seed=seed, data_dir=data_dir, cache_dir=cache_dir, **model_kwargs)
    return built.world


def negatives(world: TabularWorld, X: np.ndarray) -> np.ndarray:
    """The rows of ``X`` the world's model rejects: the agents to explain."""
    X = np.atleast_2d(np.asarray(X, float))
    return X[~world.accepts(X)]


# ---------------------------------------------------------------------------------------------- CLI

def results_table(rows: Sequence[dict[str, Any]]) -> str:
    """Markdown table of build metrics."""
    lines = ["| data set | model | train | test | encoded cols | train acc | test acc | test negatives "
             "| leaves per tree (mean / max) | converged | fit s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|:-:|---:|"]
    for m in rows:
        leaves = m["leaves_per_tree"]
        shown = f"{np.mean(leaves):.0f} / {max(leaves)}" if leaves else "-"
        lines.append(f"| {m['dataset']} | {m['model']} | {m['n_train']} | {m['n_test']} | {m['n_columns']} "
                     f"| {m['train_accuracy']:.4f} | {m['test_accuracy']:.4f} | {m['n_test_negatives']} "
                     f"| {shown} | {'yes' if m['converged'] else 'no'} | {m['fit_seconds']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Train the tabular worlds' classifiers and tabulate them.")
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    ap.add_argument("--models", nargs="+", default=list(MODEL_DEFAULTS), choices=list(MODEL_DEFAULTS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None, help="default: $RECOURSE_DATA_DIR, else ../shared/data")
    ap.add_argument("--cache-dir", default="data_cache/tabular")
    ap.add_argument("--out", default="benchmarks/results/tabular_models.md")
    args = ap.parse_args(argv)
    rows = [build(d, m, seed=args.seed, data_dir=args.data_dir, cache_dir=args.cache_dir).metrics
            for d in args.datasets for m in args.models]
    table = f"Tabular classifiers (seed {args.seed}, 80/20 stratified split; `python -m data_gen.tabular`)"
    table += f"\n\nModel defaults: `{json.dumps(MODEL_DEFAULTS)}` (sklearn's otherwise; seeded).\n\n"
    table += results_table(rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(table)
    print(table)


if __name__ == "__main__":
    main()
