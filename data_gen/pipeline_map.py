"""Walk a user's fitted scikit-learn preprocessing and say how its final estimator reads the world.

A ``Pipeline`` (or a bare estimator) is walked step by step over symbolic columns: each column says
which raw feature it reads and how (its value as a number, the indicator of one category, the code
an ``OrdinalEncoder`` gives), followed by the elementwise float64 steps of the scalers after it,
computed exactly as scikit-learn computes them (``X -= mean_; X /= scale_`` and so on). Supported:
``ColumnTransformer`` (its remainder too), nested ``Pipeline``s, ``OneHotEncoder`` (any ``drop``,
``handle_unknown``; no infrequent categories), ``OrdinalEncoder``, ``StandardScaler``,
``MinMaxScaler``, ``RobustScaler``, ``MaxAbsScaler``, ``SimpleImputer`` (the identity here: the
world never holds a missing value), ``'passthrough'``, ``'drop'``. Anything else raises
:class:`Unsupported` naming the step.

From the reads, :func:`world_layout` picks how each feature is stored in the world (a feature the
model one-hot encodes is a one-hot group; one it ordinal-encodes is one code column in the
encoder's order; one it reads as a number stays in raw units), and :func:`input_map` builds the
``envs.input_map.InputMap`` over a fitted ``TabularEncoder``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from data_gen.spec import DataSpec, sorted_values
from data_gen.tabular_encoder import TabularEncoder, _plain
from envs.input_map import InputColumn, InputMap


class Unsupported(Exception):
    """A step or estimator the white-box route cannot follow; the message names it."""


@dataclass(frozen=True)
class Op:
    """One elementwise float64 step (a scaler's), with its affine form z = scale * x + shift."""

    fn: Callable[[np.ndarray], np.ndarray]
    scale: float
    shift: float
    clip: tuple[float, float] | None = None  # applied after fn (MinMaxScaler / MaxAbsScaler clip=True)


@dataclass(frozen=True)
class Sym:
    """One column of the data at some point of the pipeline, as a function of one raw feature."""

    name: str
    feature: str | None  # the raw feature it reads; None: a constant
    read: str = "raw"  # raw (untouched), number, indicator (of ``category``), code (``OrdinalEncoder``)
    category: Any = None
    categories: tuple = ()  # code: the encoder's categories, code i is categories[i]
    unknown: float | None = None  # code: the value of a category the encoder does not know (None: error)
    ops: tuple[Op, ...] = field(default=())
    const: float = 0.0


def _step_name(step: Any) -> str:
    return step if isinstance(step, str) else type(step).__name__


def walk(model: Any, names: Sequence[str]) -> tuple[Any, list[Sym], list[str]]:
    """(final estimator, its input columns, the steps walked) for a model fed the columns ``names``."""
    cols = [Sym(str(n), str(n)) for n in names]
    steps: list[str] = []
    if type(model).__name__ != "Pipeline":
        return model, cols, steps
    *pre, (_, est) = _flat_steps(model)
    sparse = False
    for name, step in pre:
        cols, sparse = _apply(step, cols, sparse, f"step {name!r}")
        steps.append(_describe(step))
    return est, cols, steps


def final_estimator(model: Any) -> Any:
    """The estimator at the end of a (nested) pipeline, or the model itself."""
    return _flat_steps(model)[-1][1] if type(model).__name__ == "Pipeline" else model


def _flat_steps(pipe: Any) -> list[tuple[str, Any]]:
    """A pipeline's steps with nested pipelines opened (a final step may itself be a Pipeline)."""
    out = []
    for name, step in pipe.steps:
        out += _flat_steps(step) if type(step).__name__ == "Pipeline" else [(name, step)]
    return out


def _describe(step: Any) -> str:
    if type(step).__name__ == "ColumnTransformer":
        return "ColumnTransformer(" + ", ".join(f"{n}: {_describe(t)}" for n, t, _ in step.transformers_) + ")"
    if type(step).__name__ == "Pipeline":
        return "Pipeline(" + ", ".join(_describe(s) for _, s in step.steps) + ")"
    return _step_name(step)


def _apply(step: Any, cols: list[Sym], sparse: bool, where: str) -> tuple[list[Sym], bool]:
    """The columns after ``step`` and whether its output is a sparse matrix."""
    kind = _step_name(step)
    if step is None or kind == "passthrough" or (kind == "FunctionTransformer" and step.func is None):
        return cols, sparse
    if kind == "drop":
        return [], sparse
    if kind == "Pipeline":
        for name, s in step.steps:
            cols, sparse = _apply(s, cols, sparse, f"{where} > {name!r}")
        return cols, sparse
    if kind == "ColumnTransformer":
        return _column_transformer(step, cols, where), bool(getattr(step, "sparse_output_", False))
    if kind in ("OneHotEncoder", "OrdinalEncoder"):
        if np.dtype(step.dtype) != np.float64:
            raise Unsupported(f"{where} ({kind}): dtype {np.dtype(step.dtype)} (only float64 is followed)")
        if getattr(step, "_infrequent_enabled", False):
            raise Unsupported(f"{where} ({kind}): infrequent categories (min_frequency / max_categories)")
        out = _one_hot(step, cols, where) if kind == "OneHotEncoder" else _ordinal(step, cols, where)
        return out, kind == "OneHotEncoder" and bool(step.sparse_output)
    if kind == "SimpleImputer":
        if step.add_indicator or (step.strategy != "constant" and pd.isna(pd.Series(step.statistics_, dtype=object)).any()):
            raise Unsupported(f"{where} (SimpleImputer): add_indicator or a column dropped as all-missing")
        return cols, sparse
    ops = _scaler_ops(step, len(cols), sparse, where)
    return [replace(c, read="number" if c.read == "raw" else c.read, ops=(*c.ops, op))
            for c, op in zip(cols, ops, strict=True)], sparse


def _column_transformer(ct: Any, cols: list[Sym], where: str) -> list[Sym]:
    index = getattr(ct, "_transformer_to_input_indices", None)
    if index is None:
        raise Unsupported(f"{where} (ColumnTransformer): this scikit-learn version does not say which columns it reads")
    out: list[Sym] = []
    for name, trans, _ in ct.transformers_:
        sub, _ = _apply(trans, [cols[i] for i in index[name]], False, f"{where} > {name!r}")
        out += sub
    try:
        names = [str(n) for n in ct.get_feature_names_out()]
    except Exception:  # a transformer without output names: keep the walk's names
        names = [c.name for c in out]
    if len(names) != len(out):
        raise Unsupported(f"{where} (ColumnTransformer): {len(names)} output columns, the walk found {len(out)}")
    return [replace(c, name=n) for c, n in zip(out, names, strict=True)]


def _one_hot(enc: Any, cols: list[Sym], where: str) -> list[Sym]:
    out = []
    for i, c in enumerate(cols):
        if c.read != "raw":
            raise Unsupported(f"{where} (OneHotEncoder): reads {c.name!r}, already transformed")
        drop = None if enc.drop_idx_ is None else enc.drop_idx_[i]
        cats = tuple(_plain(v) for v in enc.categories_[i] if not pd.isna(v))
        for k, cat in enumerate(enc.categories_[i]):
            if drop is not None and k == drop:
                continue
            name = f"{c.name}_{cat}"
            if pd.isna(cat):  # a category for missing values: the world has none
                out.append(Sym(name, None, "const", const=0.0))
            else:
                out.append(Sym(name, c.feature, "indicator", category=_plain(cat), categories=cats))
    return out


def _ordinal(enc: Any, cols: list[Sym], where: str) -> list[Sym]:
    unknown = float(enc.unknown_value) if enc.handle_unknown == "use_encoded_value" else None
    out = []
    for i, c in enumerate(cols):
        if c.read != "raw":
            raise Unsupported(f"{where} (OrdinalEncoder): reads {c.name!r}, already transformed")
        cats = tuple(_plain(v) for v in enc.categories_[i] if not pd.isna(v))
        out.append(Sym(c.name, c.feature, "code", categories=cats, unknown=unknown))
    return out


def _scaler_ops(step: Any, n: int, sparse: bool, where: str) -> list[Op]:
    """Each column's step, as the scaler's own ``transform`` computes it (dense, or sparse)."""
    kind = _step_name(step)

    def vec(a: Any) -> np.ndarray:
        return np.broadcast_to(np.asarray(a, np.float64), (n,))

    if kind in ("StandardScaler", "RobustScaler"):
        std = kind == "StandardScaler"
        center = (step.mean_ if step.with_mean else None) if std else (step.center_ if step.with_centering else None)
        scale = (step.scale_ if step.with_std else None) if std else (step.scale_ if step.with_scaling else None)
        ops = []
        for j in range(n):
            m = None if center is None else float(vec(center)[j])
            s = None if scale is None else float(vec(scale)[j])
            if sparse:  # sparse data is never centred, and is scaled by the reciprocal (inplace_column_scale)
                a = 1.0 if s is None else 1.0 / s
                ops.append(Op(_times(a), a, 0.0))
            else:
                ops.append(Op(_center_scale(m, s), 1.0 / (s or 1.0), -(m or 0.0) / (s or 1.0)))
        return ops
    if kind == "MinMaxScaler":
        sc, mn = vec(step.scale_), vec(step.min_)
        clip = tuple(map(float, step.feature_range)) if step.clip else None
        return [Op(_times_plus(sc[j], mn[j]), sc[j], mn[j], clip) for j in range(n)]
    if kind == "MaxAbsScaler":
        s = vec(step.scale_)
        clip = (-1.0, 1.0) if getattr(step, "clip", False) else None
        return [Op(_times(1.0 / s[j]) if sparse else _divide(s[j]), 1.0 / s[j], 0.0, clip) for j in range(n)]
    raise Unsupported(f"{where} ({kind}): not a step the white-box route follows")


def _identity(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float64)


def _center_scale(m: float | None, s: float | None) -> Callable[[np.ndarray], np.ndarray]:
    def f(x: np.ndarray) -> np.ndarray:
        z = np.array(x, np.float64)
        if m is not None:
            z -= m
        if s is not None:
            z /= s
        return z
    return f


def _times(a: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: np.asarray(x, np.float64) * a


def _divide(a: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: np.asarray(x, np.float64) / a


def _times_plus(a: float, b: float) -> Callable[[np.ndarray], np.ndarray]:
    def f(x: np.ndarray) -> np.ndarray:
        z = np.asarray(x, np.float64) * a
        z += b
        return z
    return f


# ------------------------------------------------------------------------------------- the world

def finish(cols: list[Sym], spec: DataSpec) -> list[Sym]:
    """The final estimator's columns: an untouched raw column is read as a number (text cannot be)."""
    out = []
    for c in cols:
        if c.read == "raw":
            f = spec.feature(c.feature)
            if f.kind in ("categorical", "binary", "ordinal") and not all(_is_number(v) for v in f.levels or [""]):
                raise Unsupported(f"the estimator reads feature {c.feature!r} ({f.kind}, text values) without an "
                                  "encoder (native categorical support)")
            c = replace(c, read="number")
        out.append(c)
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float | bool | np.number)


def world_layout(cols: list[Sym], spec: DataSpec,
                 df: pd.DataFrame | None = None) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """(one_hot, code) for ``DataSpec.to_raw_columns``: how each feature is stored so that the model's
    reads of it are monotone functions of one encoded column (or indicators of a one-hot group).
    ``df``: the table, whose values join the levels (None: the spec's levels only)."""
    reads: dict[str, set[str]] = {}
    for c in cols:
        if c.feature is not None:
            reads.setdefault(c.feature, set()).add(c.read)
    one_hot: dict[str, tuple] = {}
    code: dict[str, tuple] = {}
    for name, how in reads.items():
        f = spec.feature(name)
        if len(how) > 1:
            raise Unsupported(f"feature {name!r} is read both as {' and as '.join(sorted(how))}")
        how = how.pop()
        seen = sorted_values(pd.unique(df[name].map(_plain))) if df is not None else list(f.levels)
        if how == "indicator":
            if f.kind != "categorical" and f.mutability not in ("free", "immutable"):
                raise Unsupported(f"feature {name!r} is one-hot encoded by the model but {f.mutability!r}-only in "
                                  "the spec (a one-hot group cannot be one-way); ordinal-encode it or make it free")
            cats = next(c.categories for c in cols if c.feature == name)  # the encoder's order, then the rest
            one_hot[name] = tuple(dict.fromkeys([*cats, *f.levels, *seen]))
        elif how == "code" and f.kind in ("categorical", "real", "integer"):
            cats = next(c.categories for c in cols if c.feature == name)
            extra = [v for v in seen if v not in set(cats)]
            code[name] = tuple(cats) + tuple(extra)
        elif how == "number" and f.kind != "real" and f.kind != "integer":
            if not all(_is_number(v) for v in [*f.levels, *seen]):
                raise Unsupported(f"the model reads feature {name!r} ({f.kind}, text values) as a number")
            if f.kind == "categorical":
                code[name] = tuple(sorted(seen))  # a code column whose levels rise with their value
    return one_hot, code


def input_map(cols: list[Sym], encoder: TabularEncoder) -> tuple[InputMap, list[str]]:
    """The ``InputMap`` of the final estimator's columns over ``encoder``'s rows, and the names of the
    columns whose affine form is not exact over the world's range (no linear fold for them)."""
    raw = {f.name: f for f in encoder.raw_columns}
    lo, hi = encoder.schema.bounds()
    out, not_affine = [], []
    for c in cols:
        if c.feature is None:
            out.append(InputColumn(c.name, -1, const=_ops_value(c.ops, c.const)))
            continue
        f, where = raw[c.feature], encoder.columns_of(c.feature)
        if c.read == "indicator":
            if not f.one_hot:
                raise ValueError(f"encoder: feature {c.feature!r} is not a one-hot group, but the model one-hot "
                                 "encodes it (build the encoder from world_layout)")
            k = next((i for i, v in enumerate(f.levels) if v == c.category), None)
            if k is None:  # a category the world never holds
                out.append(InputColumn(c.name, -1, const=_ops_value(c.ops, 0.0)))
                continue
            src, base, values = where[k], _identity, None
        elif f.one_hot:
            raise ValueError(f"encoder: feature {c.feature!r} is a one-hot group, but the model reads it as one column "
                             "(build the encoder from world_layout)")
        else:
            src = where[0]
            values = _code_values(c, f)
            base = _identity if values is None else _lookup(values)
        fn, scale, shift, exact = _compose(base, values, c.ops, lo[src], hi[src])
        if lo[src] == hi[src] or scale == 0:  # the world holds one value: a constant
            out.append(InputColumn(c.name, -1, const=float(fn(np.array([lo[src]]))[0])))
            continue
        if not scale > 0:
            raise Unsupported(f"input column {c.name!r} decreases as feature {c.feature!r} grows")
        if not exact:
            not_affine.append(c.name)
        if values is None and not c.ops:  # the column itself: the default (identity) transform says so
            out.append(InputColumn(c.name, src))
        else:
            out.append(InputColumn(c.name, src, fn, scale, shift))
    return InputMap(tuple(out), len(encoder.schema)), not_affine


def _code_values(c: Sym, f: Any) -> np.ndarray | None:
    """The value the model sees for each code of a code column (None: the column holds the number itself)."""
    if not f.levels:
        if c.read != "number":
            raise ValueError(f"encoder: feature {c.feature!r} holds numbers, but the model ordinal-encodes it "
                             "(build the encoder from world_layout)")
        return None
    if c.read == "number":
        vals = [float(v) for v in f.levels]
    else:
        index = {v: i for i, v in enumerate(c.categories)}
        vals = []
        for v in f.levels:
            if v in index:
                vals.append(float(index[v]))
            elif c.unknown is None or np.isnan(c.unknown):
                raise ValueError(f"feature {c.feature!r}: category {v!r} of the table is unknown to the model's "
                                 "OrdinalEncoder")
            else:
                vals.append(c.unknown)
    vals = np.asarray(vals, np.float64)
    if np.any(np.diff(vals) <= 0):
        raise Unsupported(f"feature {c.feature!r}: the model's values {vals.tolist()} of its levels "
                          f"{list(f.levels)} do not rise with the world's order")
    return vals


def _lookup(values: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    codes = np.arange(len(values), dtype=np.float64)
    return lambda x: np.interp(np.asarray(x, np.float64), codes, values)  # exact at the codes, monotone between


def _compose(base: Callable, values: np.ndarray | None, ops: tuple[Op, ...], lo: float,
             hi: float) -> tuple[Callable[[np.ndarray], np.ndarray], float, float, bool]:
    """(exact transform, scale, shift, is the affine form exact over [lo, hi])."""
    if values is None:
        scale, shift, exact = 1.0, 0.0, True
    else:
        step = values[1] - values[0] if len(values) > 1 else 0.0
        scale, shift = step, float(values[0])
        exact = bool(np.all(values == values[0] + step * np.arange(len(values))))
    for op in ops:
        scale, shift = op.scale * scale, op.scale * shift + op.shift
    fns = [base, *[_clipped(op) for op in ops]]

    def fn(x: np.ndarray) -> np.ndarray:
        z = np.asarray(x, np.float64)
        for g in fns:
            z = g(z)
        return z

    if any(op.clip for op in ops):  # clipping never engages over the world's range: still affine there
        ends = np.array([lo, hi])
        exact = exact and bool(np.all(np.abs(fn(ends) - (scale * ends + shift)) <= 1e-9 * (1 + np.abs(fn(ends)))))
    return fn, scale, shift, exact


def _clipped(op: Op) -> Callable[[np.ndarray], np.ndarray]:
    if op.clip is None:
        return op.fn
    a, b = op.clip
    return lambda x: np.clip(op.fn(x), a, b)


def _ops_value(ops: tuple[Op, ...], v: float) -> float:
    z = np.array([v], np.float64)
    for op in ops:
        z = _clipped(op)(z)
    return float(z[0])
