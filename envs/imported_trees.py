"""A user's fitted tree model as an exact white box over the world's encoded rows (issue 54).

``from_fitted(model, input_map)`` reads the trees of a fitted binary DecisionTree, RandomForest,
ExtraTrees, GradientBoosting or HistGradientBoosting classifier (scikit-learn), an XGBoost
``XGBClassifier`` / ``Booster`` (binary:logistic) or a LightGBM ``LGBMClassifier`` / ``Booster``
(binary) (``envs.tree_parsers``), and rewrites every split over the world's encoded column that the
model's input column reads (``envs.input_map``): the user's test ``rule(transform(x), t)`` becomes
``x <= U`` at the exact float64 point U where it flips (``envs.split_rules``), and a node whose test
is constant over every finite x (its column a constant, or a threshold beyond the transform's range)
is replaced by the child it always takes. The result is a :class:`envs.models.TreeEnsemble`:
``splits="float64"`` (float32 as sklearn where every column read is the identity: a depth-first
sklearn forest then comes back as ``TreeEnsemble.from_sklearn`` gives it), ``boosted`` for the
boosted families (score = the library's margin), and the family's ``tolerance`` (0 where the white
box's decision is the library's bit for bit; ``envs.tree_parsers`` says where it is not).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from envs.input_map import InputColumn, InputMap
from envs.models import Tree, TreeEnsemble
from envs.split_rules import rule_holds, split_points
from envs.tree_parsers import (
    NativeEnsemble,
    NativeTree,
    lightgbm_trees,
    sklearn_gradient_boosting,
    sklearn_hist_gradient_boosting,
    sklearn_trees,
    xgboost_trees,
)

# class name -> reader; XGBoost's and LightGBM's ``Booster`` share a name and are told apart by module
READERS: dict[str, Callable[..., NativeEnsemble]] = {
    "DecisionTreeClassifier": sklearn_trees,
    "RandomForestClassifier": sklearn_trees,
    "ExtraTreesClassifier": sklearn_trees,
    "GradientBoostingClassifier": sklearn_gradient_boosting,
    "HistGradientBoostingClassifier": sklearn_hist_gradient_boosting,
    "XGBClassifier": xgboost_trees,
    "LGBMClassifier": lightgbm_trees,
}


def native_trees(model: Any, positive: Any = 1) -> NativeEnsemble:
    """The model's trees as its library reads them (over its own input columns); a clear error for a
    model that has no tree white box here (a regressor, a multi-class model, categorical splits)."""
    name = type(model).__name__
    module = type(model).__module__.split(".")[0]
    if name == "Booster" and module in ("xgboost", "lightgbm"):
        return (xgboost_trees if module == "xgboost" else lightgbm_trees)(model, positive)
    reader = READERS.get(name)
    if reader is None:
        raise ValueError(f"model: no tree white box for {name} (supported: {sorted(READERS)} and the "
                         "XGBoost and LightGBM Boosters)")
    return reader(model, positive)


def _is_identity(col: InputColumn) -> bool:
    return col.transform is InputColumn.__dataclass_fields__["transform"].default


def _split_points(native: NativeEnsemble, input_map: InputMap) -> list[np.ndarray]:
    """Per tree, U per node (NaN at leaves): the test holds iff x_source <= U over finite x; +-inf: constant."""
    read = native.read
    out = [np.full(len(t.left), np.nan) for t in native.trees]
    at: dict[int, list[tuple[int, np.ndarray]]] = {}
    for i, t in enumerate(native.trees):
        inner = np.flatnonzero(t.left >= 0)
        for j in np.unique(t.feature[inner]):
            at.setdefault(int(j), []).append((i, inner[t.feature[inner] == j]))
    for j, places in at.items():
        col = input_map.columns[j]
        thresholds = np.concatenate([native.trees[i].threshold[ks] for i, ks in places])
        if col.source < 0:  # a constant input: every test on it is decided once
            z = np.full(len(thresholds), col.const, np.float64)
            U = np.where(rule_holds(z if read is None else read(z), thresholds, native.rule), np.inf, -np.inf)
        else:
            f = col.transform if read is None else (lambda x, f=col.transform: read(f(x)))
            U = split_points(thresholds, native.rule, f)
        start = 0
        for i, ks in places:
            out[i][ks] = U[start:start + len(ks)]
            start += len(ks)
    return out


def _rebuild(t: NativeTree, U: np.ndarray, source: np.ndarray, keep32: bool) -> Tree:
    """The tree over the world's columns, constant tests replaced by the child they take; preorder ids
    (a child after its parent)."""
    left: list[int] = []
    right: list[int] = []
    feature: list[int] = []
    threshold: list[float] = []
    keep: list[int] = []  # the native node each new node stands for
    stack = [(0, -1, False)]
    while stack:
        k, parent, is_left = stack.pop()
        while t.left[k] >= 0 and not np.isfinite(U[k]):
            k = int(t.left[k] if U[k] > 0 else t.right[k])
        new = len(keep)
        if parent >= 0:
            (left if is_left else right)[parent] = new
        keep.append(k)
        left.append(-1)
        right.append(-1)
        inner = t.left[k] >= 0
        feature.append(int(source[t.feature[k]]) if inner else 0)
        threshold.append((float(t.threshold[k]) if keep32 else float(U[k])) if inner else 0.0)
        if inner:
            stack += [(int(t.right[k]), new, False), (int(t.left[k]), new, True)]
    return Tree(np.asarray(left, np.int64), np.asarray(right, np.int64), np.asarray(feature, np.int64),
                np.asarray(threshold, np.float64), np.asarray(t.p1, np.float64)[keep],
                np.asarray(t.p0, np.float64)[keep], "float32" if keep32 else "float64")


def to_white_box(native: NativeEnsemble, input_map: InputMap) -> TreeEnsemble:
    """The trees rewritten over the world's encoded columns (see the module's docstring)."""
    if len(input_map.columns) != native.n_inputs:
        raise ValueError(f"input_map: {len(input_map.columns)} columns, but the {native.name} reads "
                         f"{native.n_inputs} input columns")
    used = {int(j) for t in native.trees for j in t.feature[t.left >= 0]}
    keep32 = native.rule == "float32<=" and native.read is None and all(
        input_map.columns[j].source >= 0 and _is_identity(input_map.columns[j]) for j in used)
    source = np.array([c.source for c in input_map.columns], np.int64)
    limits = _split_points(native, input_map)
    trees = [_rebuild(t, U, source, keep32) for t, U in zip(native.trees, limits, strict=True)]
    return TreeEnsemble(trees, input_map.n_encoded, native.boosted, native.tolerance, native.float32_sums)


def from_fitted(model: Any, input_map: InputMap | None = None, *, positive: Any = 1) -> TreeEnsemble:
    """The exact white box of a fitted binary tree model over the world's encoded rows.

    ``input_map``: how the model's input columns read the encoded columns (None: the identity, the
    model reads the encoded rows as they are). ``positive``: the favourable class label (for
    classifiers with ``classes_``; a Booster's favourable class is the one its margin scores).
    """
    native = native_trees(model, positive)
    if input_map is None:
        input_map = InputMap.identity([f"x{i}" for i in range(native.n_inputs)])
    return to_white_box(native, input_map)
