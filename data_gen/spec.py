"""A data spec for any table: the target and its favourable value, and per feature its kind, bounds,
resolution, mutability, cost weight, display name and unit.

``infer_spec(df, target=..., favourable=...)`` infers one from the table: bool columns and columns
with exactly 2 values are ``binary``; strings, objects and unordered categories ``categorical``
(an ordered pandas category ``ordinal`` in its order); other integers ``integer``; floats ``real``
with the resolution of the decimals seen (1, 0.1, ..., 1e-6; none for a measurement); bounds are the
observed range. ``python -m data_gen.spec infer TABLE --target COL --favourable VALUE > spec.yaml``
writes it as an editable YAML file with comments, and ``load_spec(path_or_dict, df)`` merges a
user-written (partial) spec over the inferred one: a field the user writes wins, a feature the user
does not mention is inferred, a column listed under ``ignore`` is not a feature.

Mutability uses ``envs.schema.Mutability`` (free, immutable, increase, decrease); ``fixed``,
``increasing``, ``increase-only`` and the like are accepted as aliases. A weight of ``None`` (the
default) leaves the cost to MACE's normalisation (a change over the feature's range); a number
multiplies that normalised change (``envs.rules``: a weight per direction goes under ``rules: weights:``).

Missing values: rows of the table with a missing value in a feature or the target are dropped, with
one warning giving the count (``DataSpec.clean``); a record with a missing value at serving time is
rejected naming the column, and so is an unseen category (``DataSpec.check_records``). Every
problem is one ``ValueError`` line naming the column and the problem.

A ``rules:`` section holds the user's constraints in the rule language of ``envs.rules`` (PLAF
statements, step bounds, forbidden transitions, links, cost weights per direction); it is checked
against the spec's features when the spec is read (``data_gen.spec_rules``), written back by
``to_yaml``/``to_dict``, and a feature's ``weight`` joins it as a weight of both directions.

``DataSpec.to_raw_columns()`` gives the ``RawColumn``s of ``data_gen.tabular_encoder``, so the
encoder and the worlds are the ones the bundled data sets use; ``spec_from_dataset(name)`` writes a
bundled data set as the same kind of spec (one code path).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from data_gen.spec_rules import check_spec_rules
from data_gen.tabular_encoder import ColumnKind, RawColumn, _plain
from envs.rules import RuleSet
from envs.schema import Mutability

KINDS: tuple[str, ...] = ("real", "integer", "binary", "categorical", "ordinal")
KIND_ALIASES = {"float": "real", "numeric": "real", "continuous": "real", "int": "integer", "bool": "binary",
                "boolean": "binary", "category": "categorical", "nominal": "categorical"}
MUTABILITY_ALIASES = {"fixed": "immutable", "mutable": "free", "increasing": "increase",
                      "increase-only": "increase", "increase_only": "increase", "decreasing": "decrease",
                      "decrease-only": "decrease", "decrease_only": "decrease"}
MAX_DECIMALS = 6  # the finest resolution inferred for a real feature: 1e-6
BUNDLED_TARGET = "label"  # the bundled loaders return the labels apart; 1 is the favourable one


def sorted_values(values: Any) -> list:
    """Values in sorted order (by their text where types do not compare)."""
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=lambda v: (type(v).__name__, str(v)))


def match_value(value: Any, seen: Sequence) -> Any:
    """``value`` as the table holds it: a YAML ``1`` matches a column of strings ``"1"``."""
    value = _plain(value)
    same = [v for v in seen if v == value and isinstance(v, bool) == isinstance(value, bool)]
    return same[0] if same else next((v for v in seen if str(v) == str(value)), value)


def decimals_resolution(values: np.ndarray) -> float | None:
    """The coarsest of 1, 0.1, ..., 1e-6 on which every finite value lies; None where none fits."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    for k in range(MAX_DECIMALS + 1):
        step = 10.0 ** -k
        off = np.abs(v - np.round(v / step) * step)  # float32 data is off by ~1e-7 relative
        if np.all(off <= np.minimum(1e-7 * np.maximum(1.0, np.abs(v)), 0.1 * step)):
            return float(round(step, k))
    return None


@dataclass(frozen=True)
class FeatureSpec:
    """One feature (a column of the table) as the user describes it."""

    name: str
    kind: ColumnKind
    mutability: Mutability = "free"
    levels: tuple = ()  # ordinal: low to high (required); binary: the value coded 0, then 1; categorical: its categories
    labels: tuple[str, ...] = ()  # names of the levels (default: the levels as text)
    lower: float | None = None  # real/integer: raw units; ordinal: a level; None: the observed range
    upper: float | None = None
    resolution: float | None = None  # the smallest step a person can make (1: whole units, 0.01: cents)
    weight: float | None = None  # cost weight of a change (times the change over the range); None: 1
    display: str = ""  # the name shown to a person (default: the column name)
    unit: str = ""  # e.g. "EUR", "years"
    time: str = ""  # only time moves it, in this unit (age: "years"); an increase-only number

    def __post_init__(self):
        where = f"feature {self.name!r}"
        kind = KIND_ALIASES.get(self.kind, self.kind)
        if kind not in KINDS:
            raise ValueError(f"{where}: unknown kind {self.kind!r} (known: {', '.join(KINDS)})")
        mut = MUTABILITY_ALIASES.get(self.mutability, self.mutability)
        if mut not in ("free", "immutable", "increase", "decrease"):
            raise ValueError(f"{where}: unknown mutability {self.mutability!r} (free, immutable/fixed, increase, "
                             "decrease)")
        levels = tuple(_plain(v) for v in (self.levels or ()))
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "mutability", mut)
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "labels", tuple(str(v) for v in (self.labels or ())))
        if kind == "ordinal" and not levels:
            raise ValueError(f"{where}: an ordinal feature needs its levels in order (levels: [low, ..., high])")
        if kind == "binary" and len(levels) != 2:
            raise ValueError(f"{where}: a binary feature has 2 levels, got {len(levels)}")
        if len(set(map(repr, levels))) != len(levels):
            raise ValueError(f"{where}: levels {list(levels)} repeat a value")
        if self.labels and len(self.labels) != len(levels):
            raise ValueError(f"{where}: {len(self.labels)} labels for {len(levels)} levels")
        if kind == "categorical" and mut not in ("free", "immutable"):
            raise ValueError(f"{where}: a categorical feature is free or immutable, not {mut!r}")
        if kind in ("binary", "categorical") and (self.lower is not None or self.upper is not None):
            raise ValueError(f"{where}: bounds apply to real, integer and ordinal features, not {kind}")
        if kind == "ordinal":
            for b in (self.lower, self.upper):
                if b is not None and match_value(b, levels) not in levels:
                    raise ValueError(f"{where}: bound {b!r} is not one of its levels {list(levels)}")
        elif self.lower is not None and self.upper is not None and float(self.lower) > float(self.upper):
            raise ValueError(f"{where}: bounds inverted: lower {self.lower} > upper {self.upper}")
        if self.resolution is not None and not float(self.resolution) > 0:
            raise ValueError(f"{where}: resolution must be positive, got {self.resolution!r}")
        if self.weight is not None and not float(self.weight) >= 0:
            raise ValueError(f"{where}: weight must be >= 0, got {self.weight!r}")
        if self.time and (kind not in ("real", "integer") or mut != "increase"):
            raise ValueError(f"{where}: time ({self.time!r}: only time moves it) needs an increase-only number, "
                             f"not a {mut} {kind} feature")

    def code_bounds(self) -> tuple[float | None, float | None]:
        """(lower, upper) in the encoder's units: raw units, or the code of an ordinal level."""
        if self.kind != "ordinal":
            return (None if self.lower is None else float(self.lower), None if self.upper is None else float(self.upper))
        return tuple(None if b is None else float(self.levels.index(match_value(b, self.levels)))
                     for b in (self.lower, self.upper))


FEATURE_FIELDS = tuple(f.name for f in fields(FeatureSpec) if f.name != "name")


@dataclass(frozen=True)
class DataSpec:
    """A table's spec: the target, its favourable value, the features (in table order), ignored columns."""

    target: str
    favourable: Any
    features: tuple[FeatureSpec, ...]
    ignore: tuple[str, ...] = ()  # columns of the table that are not features (ids, free text)
    rules: RuleSet = RuleSet()  # the user's constraints over the features (envs.rules)

    def __post_init__(self):
        names = [f.name for f in self.features]
        dupes = sorted_values({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"spec: features {dupes} are listed twice")
        both = sorted_values(set(names) & ({self.target} | set(self.ignore)))
        if both:
            raise ValueError(f"spec: {both} cannot be a feature and the target or ignored")
        check_spec_rules(self)

    @property
    def names(self) -> list[str]:
        """The feature columns, in order."""
        return [f.name for f in self.features]

    def feature(self, name: str) -> FeatureSpec:
        for f in self.features:
            if f.name == name:
                return f
        raise ValueError(f"feature {name!r}: not in the spec (features: {self.names})")

    # ---------------------------------------------------------------------------- the world's columns
    def to_raw_columns(self, *, one_hot: Mapping[str, Sequence] | None = None,
                       code: Mapping[str, Sequence] | None = None) -> tuple[RawColumn, ...]:
        """The encoder's raw columns. By default: numbers in raw units, ordinal/binary codes, a
        categorical feature as a one-hot group. ``one_hot`` (name -> level order) stores a feature as a
        one-hot group whatever its kind; ``code`` (name -> level order) stores a categorical feature as
        one nominal code column and a number as an ordinal code (a model that ordinal-encodes it)."""
        one_hot, code = dict(one_hot or {}), dict(code or {})
        out = []
        for f in self.features:
            lo, hi = f.code_bounds()
            if f.name in one_hot:
                if f.mutability not in ("free", "immutable"):
                    raise ValueError(f"feature {f.name!r}: stored as a one-hot group, it can be free or immutable, "
                                     f"not {f.mutability!r}")
                out.append(RawColumn(f.name, "categorical", f.mutability, tuple(one_hot[f.name] or f.levels)))
            elif f.name in code and f.kind == "categorical":
                out.append(RawColumn(f.name, "categorical", f.mutability, tuple(code[f.name] or f.levels), as_code=True))
            elif f.name in code and f.kind in ("real", "integer"):
                out.append(RawColumn(f.name, "ordinal", f.mutability, tuple(code[f.name])))
            elif f.kind == "categorical":
                out.append(RawColumn(f.name, "categorical", f.mutability, f.levels, f.labels))
            else:
                out.append(RawColumn(f.name, f.kind, f.mutability, f.levels, f.labels, lo, hi))
        return tuple(out)

    # ------------------------------------------------------------------------------------ the data
    def check_table(self, df: pd.DataFrame) -> None:
        """Raise one line naming the column and the problem where ``df`` does not fit the spec."""
        _check_target(df, self.target, self.favourable)
        missing = [n for n in self.names + list(self.ignore) if n not in df.columns]
        if missing:
            raise ValueError(f"column {missing[0]!r}: in the spec but missing from the table (has {list(df.columns)})")
        extra = [c for c in df.columns if c not in set(self.names) | set(self.ignore) | {self.target}]
        if extra:
            raise ValueError(f"column {extra[0]!r}: in the table but not in the spec (add it or list it under ignore)")
        for f in self.features:
            _check_values(f, df[f.name].dropna())

    def clean(self, df: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
        """(the feature frame, labels 1 = favourable) with rows missing a feature or the target dropped
        (one warning gives the count); the table is checked against the spec first."""
        df = drop_missing(df, [*self.names, self.target])
        self.check_table(df)
        favourable = match_value(self.favourable, list(pd.unique(df[self.target].map(_plain))))
        y = (df[self.target].map(_plain) == favourable).to_numpy(np.int64)
        return df[self.names], y

    def check_records(self, df: pd.DataFrame) -> None:
        """Raise one line where a record (a row to explain) is missing a feature or a value, has an
        unknown column, a category the spec does not know, or text where a number belongs."""
        extra = [c for c in df.columns if c not in set(self.names) | set(self.ignore) | {self.target}]
        if extra:
            raise ValueError(f"column {extra[0]!r}: not a feature of the spec (features: {self.names})")
        for f in self.features:
            if f.name not in df.columns:
                raise ValueError(f"feature {f.name!r}: missing from the record")
            col = df[f.name]
            na = col.isna().to_numpy()
            if na.any():
                raise ValueError(f"feature {f.name!r}: row {col.index[int(np.argmax(na))]} has no value "
                                 "(a record with a missing value is rejected)")
            _check_values(f, col, unseen="unseen")

    # ------------------------------------------------------------------------------------- storage
    def to_dict(self) -> dict[str, Any]:
        feats = {}
        for f in self.features:
            d = {k: getattr(f, k) for k in FEATURE_FIELDS if k != "time" or f.time}
            d["levels"], d["labels"] = [_plain(v) for v in f.levels], list(f.labels)
            feats[f.name] = d
        return {"target": self.target, "favourable": _plain(self.favourable), "ignore": list(self.ignore),
                "features": feats, **({"rules": self.rules.to_dict()} if self.rules else {})}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DataSpec:
        """A complete spec (every feature written out), e.g. ``to_dict``'s output or a stored run's."""
        _known(d, ("target", "favourable", "ignore", "features", "rules"), "spec")
        feats = [_feature(name, dict(fd)) for name, fd in _feature_dicts(d.get("features") or {}).items()]
        return cls(str(_need(d, "target")), _need(d, "favourable"), tuple(feats), tuple(d.get("ignore") or ()),
                   RuleSet.from_dict(d.get("rules")))

    def to_yaml(self, *, source: str = "") -> str:
        """The spec as an editable YAML file, with comments on every field."""
        j = json.dumps  # JSON scalars and flow lists are valid YAML, quoted where needed
        lines = [f"# Data spec{f' of {source}' if source else ''}: inferred by `python -m data_gen.spec infer`;",
                 "# edit it and pass it as the spec: a field written here wins over the inferred one.",
                 "# kind: real | integer | binary | categorical | ordinal (ordinal: levels from low to high)",
                 "# mutability: free | immutable (or fixed) | increase | decrease (categorical: free or immutable)",
                 "# lower/upper: bounds a counterfactual must stay within (default: the observed range)",
                 "# resolution: the smallest step a person can make (1: whole units, 0.01: cents)",
                 "# weight: the cost weight of a change; null: MACE's normalisation by the feature's range",
                 "# time: only time moves it, in this unit (an increase-only number such as age: time: years)",
                 "# Rows with a missing value are dropped; records with one are rejected, naming the column.",
                 f"target: {j(self.target)}", f"favourable: {j(_plain(self.favourable))}  # the good outcome",
                 f"ignore: {j(list(self.ignore))}  # columns that are not features (ids, free text)", "features:"]
        for name, d in self.to_dict()["features"].items():
            lines.append(f"  {j(name)}:")
            for k in FEATURE_FIELDS:
                if k not in d:
                    continue
                v = d[k]
                if k == "levels" and not v or k == "labels" and (not v or v == [str(x) for x in d["levels"]]):
                    continue  # no levels, or labels that are the levels as text
                if k in ("lower", "upper", "resolution") and v is None and (
                        d["kind"] in ("binary", "categorical") or k == "resolution" and d["kind"] == "ordinal"):
                    continue
                lines.append(f"    {k}: {j(v)}")
        if self.rules:  # the rule language of envs.rules (docs/constraints.md)
            lines += ["# rules: plaf statements, per-feature step bounds and forbidden transitions, links, weights",
                      yaml.safe_dump({"rules": self.rules.to_dict()}, sort_keys=False, allow_unicode=True,
                                     default_flow_style=None, width=110).rstrip()]
        return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------- inference

def drop_missing(df: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``df`` without the rows missing a value in ``columns`` (one warning with the count)."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"column {missing[0]!r}: missing from the table (has {list(df.columns)})")
    na = df[list(columns)].isna()
    rows = na.any(axis=1).to_numpy()
    if rows.any():
        r = int(np.argmax(rows))
        first = na.columns[int(np.argmax(na.iloc[r].to_numpy()))]
        warnings.warn(f"data: dropped {int(rows.sum())} of {len(df)} rows with a missing value "
                      f"(first: row {df.index[r]}, column {first!r})", stacklevel=3)
    return df[~rows]


def infer_feature(col: pd.Series) -> FeatureSpec:
    """A feature inferred from its (non-missing) values."""
    return FeatureSpec(**_inferred(col))


def _inferred(col: pd.Series, kind: str | None = None) -> dict[str, Any]:
    """The fields inferred for a column; ``kind`` forces the kind (the user's)."""
    name = str(col.name)
    where = f"feature {name!r}"
    dtype = col.dtype
    if pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype):
        raise ValueError(f"{where}: dtype {dtype} is not supported (convert it to a number or list it under ignore)")
    if not len(col):
        raise ValueError(f"{where}: has no values")
    seen = list(pd.unique(col.map(_plain)))
    ordered = isinstance(dtype, pd.CategoricalDtype) and dtype.ordered
    numeric = pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)
    if kind is None:
        if ordered:
            kind = "ordinal"
        elif pd.api.types.is_bool_dtype(dtype) or len(seen) == 2:
            kind = "binary"
        elif not numeric:
            kind = "categorical"
        else:
            kind = "integer" if pd.api.types.is_integer_dtype(dtype) else "real"
    kind = KIND_ALIASES.get(kind, kind)
    out: dict[str, Any] = {"name": name, "kind": kind, "display": name}
    if kind in ("binary", "categorical", "ordinal"):
        if isinstance(dtype, pd.CategoricalDtype):  # the dtype's order, present levels only
            levels = [v for v in map(_plain, dtype.categories) if v in set(seen)]
        else:
            levels = sorted_values(seen)
        if kind == "ordinal" and not (ordered or numeric):
            levels = []  # an order text cannot tell: the user writes it
        return {**out, "levels": tuple(levels)}
    if kind not in ("real", "integer"):
        return out  # an unknown kind: FeatureSpec names it
    values = _numbers(name, col)
    lo, hi = float(values.min()), float(values.max())
    if kind == "integer":
        return {**out, "lower": int(lo), "upper": int(hi), "resolution": 1}
    return {**out, "lower": lo, "upper": hi, "resolution": decimals_resolution(values)}


def infer_spec(df: pd.DataFrame, *, target: str, favourable: Any, ignore: Sequence[str] = ()) -> DataSpec:
    """Infer the spec of a table (see the module's docstring); rows with a missing value are dropped."""
    unknown = [c for c in [target, *ignore] if c not in df.columns]
    if unknown:
        raise ValueError(f"column {unknown[0]!r}: not a column of the table (has {list(df.columns)})")
    names = [c for c in df.columns if c != target and c not in set(ignore)]
    df = drop_missing(df, [*names, target])
    favourable = _check_target(df, target, favourable)
    return DataSpec(target, favourable, tuple(infer_feature(df[c]) for c in names), tuple(ignore))


def load_spec(spec: str | Path | Mapping[str, Any] | DataSpec | None, df: pd.DataFrame, *,
              target: str | None = None, favourable: Any = None) -> DataSpec:
    """The spec of ``df``: the inferred one with the user's (partial) spec merged over it.

    ``spec`` is a YAML path, a dict of the same shape (``target``, ``favourable``, ``ignore``,
    ``features: {name: {field: value}}``), a ``DataSpec`` (checked against ``df``) or None (all
    inferred). ``target``/``favourable`` given here win over the spec's. The result is checked
    against the table; every problem is one line naming the column.
    """
    if isinstance(spec, DataSpec):
        spec = spec.to_dict()
    if isinstance(spec, str | Path):
        try:
            spec = yaml.safe_load(Path(spec).read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            raise ValueError(f"spec: cannot read {spec}: {str(err).splitlines()[0]}") from None
    user = dict(spec or {})
    _known(user, ("target", "favourable", "ignore", "features", "rules"), "spec")
    target = target if target is not None else user.get("target")
    favourable = favourable if favourable is not None else user.get("favourable")
    if target is None or favourable is None:
        raise ValueError(f"spec: {'target' if target is None else 'favourable'} is not given "
                         "(write it in the spec or pass it)")
    ignore = tuple(user.get("ignore") or ())
    wrote = _feature_dicts(user.get("features") or {})
    bad = [n for n in wrote if n not in df.columns]
    if bad:
        raise ValueError(f"feature {bad[0]!r}: not a column of the table (has {list(df.columns)})")
    with warnings.catch_warnings():  # the rows are dropped (and counted) where the data is used
        warnings.simplefilter("ignore", UserWarning)
        inferred = infer_spec(df, target=target, favourable=favourable, ignore=ignore)
    clean = df.loc[df[[*inferred.names, target]].notna().all(axis=1)]
    feats = []
    for f in inferred.features:
        d = dict(wrote.get(f.name) or {})
        _known(d, FEATURE_FIELDS, f"feature {f.name!r}")
        kind = KIND_ALIASES.get(d.get("kind", f.kind), d.get("kind", f.kind))
        base = {k: getattr(f, k) for k in ("name", *FEATURE_FIELDS)} if kind == f.kind else \
            _inferred(clean[f.name], kind)  # another kind: its own defaults, then the user's fields
        seen = list(pd.unique(clean[f.name].map(_plain)))
        d = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()}
        if d.get("levels") is not None:
            d["levels"] = tuple(match_value(v, seen) for v in d["levels"])
            d.setdefault("labels", ())
        feats.append(FeatureSpec(**{**base, **d}))
    out = DataSpec(str(target), inferred.favourable, tuple(feats), ignore, RuleSet.from_dict(user.get("rules")))
    out.check_table(df.loc[df[[*out.names, target]].notna().all(axis=1)])
    return out


def spec_from_dataset(name: str) -> DataSpec:
    """A bundled data set (``data_gen.loaders.DATASETS``) as a spec; its raw columns are the loader's.
    The loaders return the labels apart, so the target is ``label`` with 1 favourable. Adult and German
    carry their default rules (``data_gen.default_rules``: GeCo's Appendix A.1 program and the
    language's other kinds); every feature its display name, unit and, for age, ``time: years``."""
    from data_gen.default_rules import FEATURE_TEXT, default_rules
    from data_gen.loaders import DATASETS, EXTRA_DATASETS

    ds = DATASETS.get(name) or EXTRA_DATASETS.get(name)
    if ds is None:
        raise ValueError(f"dataset: unknown data set {name!r} (known: {sorted(DATASETS) + sorted(EXTRA_DATASETS)})")
    text = FEATURE_TEXT.get(name, {})
    feats = tuple(FeatureSpec(f.name, f.kind, f.mutability, f.levels, f.labels, display=text.get(f.name, (f.name,))[0],
                              unit=text.get(f.name, ("", ""))[1], time=text.get(f.name, ("", "", ""))[2],
                              resolution=1 if f.kind == "integer" else None) for f in ds.features)
    return DataSpec(BUNDLED_TARGET, 1, feats, rules=default_rules(name))


def read_table(path: str | Path) -> pd.DataFrame:
    """A CSV (``.csv``, ``.csv.gz``, ``.tsv``) or Parquet (``.parquet``, ``.pq``) table."""
    p = Path(path)
    suffixes = "".join(p.suffixes).lower()
    if not p.is_file():
        raise ValueError(f"table: {p} is not a file")
    try:
        if suffixes.endswith((".parquet", ".pq")):
            return pd.read_parquet(p)
        if suffixes.endswith((".csv", ".csv.gz", ".tsv", ".tsv.gz")):
            return pd.read_csv(p, sep="\t" if ".tsv" in suffixes else ",")
    except Exception as err:  # a parser's many error types: one line naming the file
        raise ValueError(f"table: cannot read {p}: {str(err).splitlines()[0] if str(err) else type(err).__name__}") \
            from None
    raise ValueError(f"table: {p} is neither CSV (.csv, .tsv) nor Parquet (.parquet, .pq)")


# ------------------------------------------------------------------------------------------ checks

def _need(d: Mapping[str, Any], key: str) -> Any:
    if d.get(key) is None:
        raise ValueError(f"spec: {key!r} is not given")
    return d[key]


def _known(d: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    if not isinstance(d, Mapping):
        raise ValueError(f"{where}: expected a mapping of fields, got {type(d).__name__}")
    bad = [k for k in d if k not in allowed]
    if bad:
        raise ValueError(f"{where}: unknown field {bad[0]!r} (known: {', '.join(allowed)})")


def _feature_dicts(features: Any) -> dict[str, dict[str, Any]]:
    """``features`` as name -> fields: a mapping, or a list of mappings each with its ``name``."""
    if isinstance(features, Mapping):
        return {str(k): dict(v or {}) for k, v in features.items()}
    if isinstance(features, list) and all(isinstance(v, Mapping) and "name" in v for v in features):
        return {str(v["name"]): {k: x for k, x in v.items() if k != "name"} for v in features}
    raise ValueError("spec: features must map each column to its fields (or list them with a name each)")


def _feature(name: str, d: dict[str, Any]) -> FeatureSpec:
    _known(d, FEATURE_FIELDS, f"feature {name!r}")
    if "kind" not in d:
        raise ValueError(f"feature {name!r}: no kind given")
    return FeatureSpec(name, **{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()})


def _check_target(df: pd.DataFrame, target: str, favourable: Any) -> Any:
    """The favourable value as the target column holds it; one line if the target is not binary or lacks it."""
    if target not in df.columns:
        raise ValueError(f"target {target!r}: not a column of the table (has {list(df.columns)})")
    values = sorted_values(pd.unique(df[target].dropna().map(_plain)))
    if len(values) != 2:
        shown = values if len(values) <= 10 else [*values[:10], "..."]
        raise ValueError(f"target {target!r}: has {len(values)} values {shown}; a binary target has 2")
    fav = match_value(favourable, values)
    if fav not in values:
        raise ValueError(f"target {target!r}: favourable value {favourable!r} is not in the column (values: {values})")
    return fav


def _numbers(name: str, col: pd.Series) -> np.ndarray:
    if pd.api.types.is_bool_dtype(col.dtype):
        return col.to_numpy(float)
    values = pd.to_numeric(col, errors="coerce").to_numpy(float)
    bad = ~np.isfinite(values)
    if bad.any():
        r = int(np.argmax(bad))
        raise ValueError(f"feature {name!r}: row {col.index[r]} value {_plain(col.iloc[r])!r} is not a finite number")
    return values


def _check_values(f: FeatureSpec, col: pd.Series, unseen: str = "") -> None:
    """One line where a value of ``col`` does not fit feature ``f``."""
    where = f"feature {f.name!r}"
    if f.kind in ("binary", "ordinal") or f.levels:
        known = {v: i for i, v in enumerate(f.levels)}  # as the encoder looks levels up
        vals = col.map(_plain)
        bad = ~vals.map(lambda v: v in known).to_numpy(bool)
        if bad.any():
            r = int(np.argmax(bad))
            what = f"{unseen} category" if unseen else "value"
            raise ValueError(f"{where}: row {col.index[r]} {what} {vals.iloc[r]!r} is not among its levels "
                             f"{list(f.levels)}")
        return
    if f.kind == "categorical":
        return
    values = _numbers(f.name, col)
    if f.kind == "integer" and (values != np.round(values)).any():
        r = int(np.argmax(values != np.round(values)))
        raise ValueError(f"{where}: row {col.index[r]} value {values[r]!r} is not an integer")
    lo, hi = f.code_bounds()
    out = ((values < lo) if lo is not None else False) | ((values > hi) if hi is not None else False)
    if np.any(out):
        r = int(np.argmax(out))
        raise ValueError(f"{where}: row {col.index[r]} value {values[r]!r} is outside the bounds [{lo}, {hi}]")


# --------------------------------------------------------------------------------------------- CLI

def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m data_gen.spec", description="Data specs of tables.")
    sub = ap.add_subparsers(dest="command", required=True)
    inf = sub.add_parser("infer", help="infer a table's spec and print it as editable YAML")
    inf.add_argument("table", help="a CSV or Parquet file")
    inf.add_argument("--target", required=True, help="the column to explain")
    inf.add_argument("--favourable", required=True, help="the target's good value")
    inf.add_argument("--ignore", nargs="*", default=[], help="columns that are not features")
    args = ap.parse_args(argv)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            spec = infer_spec(read_table(args.table), target=args.target, favourable=args.favourable,
                              ignore=args.ignore)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    sys.stdout.write(spec.to_yaml(source=Path(args.table).name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
