"""The trees of a fitted binary classifier, read from its library as plain arrays (issue 54).

One reader per family, each returning a :class:`NativeEnsemble`: the trees over the model's own
input columns, with the library's split test (``envs.split_rules``), leaf values and decision rule
exactly as the library predicts. ``envs.imported_trees`` then rewrites them over the world's
encoded columns. Nothing here imports XGBoost or LightGBM: their models are read through their own
methods (``save_raw("json")``, ``dump_model()``).

Decision rules, per family (P(accept) is the positive class's):

- scikit-learn DecisionTree / RandomForest / ExtraTrees: the mean over trees of P(1) - P(0) > 0
  (argmax, a tie to class 0); bit for bit.
- GradientBoostingClassifier (log loss): raw = init + sum_t learning_rate * value_t, summed in that
  order in float64; predict is ``raw >= 0``. The white box accepts iff raw > 0: the two differ only
  at a raw score of exactly 0 (tolerance 0).
- HistGradientBoostingClassifier: raw = baseline + sum_t value_t (float64, in order); predict is
  ``raw > 0``; bit for bit.
- LightGBM (objective binary): raw = sum_t leaf_t in float64 (the initial score is in the first
  tree's leaves); predict is argmax(1 - p, p) with p = 1 / (1 + exp(-sigmoid * raw)) in float64,
  which rejects a raw score in (0, ~2.2e-16 / sigmoid]: tolerance 1e-15 / sigmoid.
- XGBoost (binary:logistic): raw = base margin + sum_t leaf_t, summed by XGBoost in float32 in tree
  order (the base margin -logf(1 / base_score - 1), in float32); predict is float32 sigmoid(raw) >
  0.5, which also rejects raw in (0, ~2^-23]. The white box sums the same way (``float32_sums``):
  the margin bit for bit (checked on probe rows when read), tolerance 2^-22. Its MILP reads the
  exact sum, within ``TreeEnsemble.sum_error`` of the float32 one.

The initial prediction is added to the first tree's leaf values (the libraries add it first: the
float64 sum is the library's, bit for bit). Inputs are never NaN in a world, so the libraries'
missing-value branches are never taken and are not read, with one exception: LightGBM reads an
input with |z| <= 1e-35 as 0 (its dense rows drop such values), and a node whose missing_type is
"Zero" sends 0 its default way; that is folded into the threshold where the left branch stays an
interval, and rejected otherwise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.split_rules import Rule

LGBM_ZERO = float(np.float32(1e-35))  # LightGBM's kZeroThreshold: |z| <= this reads as 0
_U32 = 2.0 ** -24  # float32 unit round-off
_SIGMOID_BAND = 2.0 ** -22  # XGBoost's float32 sigmoid(m) is 0.5 for m up to ~2^-23 (its predict needs > 0.5)


@dataclass
class NativeTree:
    """One tree in the library's terms: node k tests input column ``feature[k]`` against
    ``threshold[k]`` by the ensemble's rule (left iff true); leaves have ``left == right == -1``."""

    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray  # the model's input column (not yet the world's)
    threshold: np.ndarray  # float64 (an XGBoost float32 held exactly)
    p1: np.ndarray  # leaf P(1) (forests) or leaf value (boosted)
    p0: np.ndarray  # leaf P(0) (forests) or 0 (boosted)


@dataclass
class NativeEnsemble:
    """A model's trees with how the library reads and sums them."""

    name: str  # the estimator's class name, for messages
    trees: list[NativeTree]
    n_inputs: int  # the model's input columns
    rule: Rule
    boosted: bool
    tolerance: float = 0.0
    float32_sums: bool = False  # the margin summed in float32 (XGBoost)
    read: Callable[[np.ndarray], np.ndarray] | None = None  # the library's own reading of an input (LightGBM's 0)


def _positive_index(est: Any, positive: Any) -> int:
    """Index in ``est.classes_`` of the favourable class; a clear error for non-binary models."""
    name = type(est).__name__
    classes = list(getattr(est, "classes_", [0, 1]))
    if len(classes) != 2:
        raise ValueError(f"{name}: {len(classes)} classes; a white box needs a binary classifier")
    if positive not in classes:
        raise ValueError(f"positive: {positive!r} is not a class of the {name} (classes {classes})")
    return classes.index(positive)


def _boosted(left: Any, right: Any, feature: Any, threshold: Any, values: Any, bias: float | None,
             sign: float) -> NativeTree:
    """A boosted tree: leaf values (float64) as ``p1`` with p0 = 0; ``bias`` (the first tree's) added
    first, as the libraries add it; ``sign`` -1 where the favourable class is the library's class 0."""
    v = np.asarray(values, np.float64)
    if bias is not None:
        v = bias + v
    return NativeTree(np.asarray(left, np.int64), np.asarray(right, np.int64), np.asarray(feature, np.int64),
                      np.asarray(threshold, np.float64), sign * v, np.zeros_like(v))


def sklearn_trees(est: Any, positive: Any = 1) -> NativeEnsemble:
    """DecisionTreeClassifier, RandomForestClassifier, ExtraTreesClassifier: leaf P(1), P(0) as sklearn."""
    pos = _positive_index(est, positive)
    out = []
    for t in getattr(est, "estimators_", None) or [est]:
        tr = t.tree_
        value = tr.value[:, 0, :]
        total = value.sum(axis=1)
        total = np.where(total == 0.0, 1.0, total)  # sklearn's normalizer
        out.append(NativeTree(tr.children_left.astype(np.int64), tr.children_right.astype(np.int64),
                              tr.feature.astype(np.int64), tr.threshold.astype(np.float64),
                              value[:, pos] / total, value[:, 1 - pos] / total))
    return NativeEnsemble(type(est).__name__, out, int(est.n_features_in_), "float32<=", boosted=False)


def sklearn_gradient_boosting(est: Any, positive: Any = 1) -> NativeEnsemble:
    """GradientBoostingClassifier (binary, log loss): init raw + learning_rate * tree values."""
    name = type(est).__name__
    pos = _positive_index(est, positive)
    if getattr(est, "loss", "log_loss") != "log_loss":
        raise ValueError(f"{name}: loss {est.loss!r}; only the binary log loss is supported")
    init = est.init_
    if not (init == "zero" or type(init).__name__ == "DummyClassifier"):
        raise ValueError(f"{name}: init={type(init).__name__}: an initial prediction that depends on x is not "
                         "supported (use the default prior or 'zero')")
    X0 = np.zeros((1, int(est.n_features_in_)))
    bias = float(est._raw_predict_init(X0)[0, 0])  # sklearn's own init (clipped logit of the prior)
    lr = float(est.learning_rate)
    out = []
    for i, t in enumerate(est.estimators_[:, 0]):
        tr = t.tree_
        out.append(_boosted(tr.children_left, tr.children_right, tr.feature, tr.threshold, lr * tr.value[:, 0, 0],
                            bias if i == 0 else None, 1.0 if pos == 1 else -1.0))  # lr * value: sklearn's product
    return NativeEnsemble(name, out, int(est.n_features_in_), "float32<=", boosted=True)


def sklearn_hist_gradient_boosting(est: Any, positive: Any = 1) -> NativeEnsemble:
    """HistGradientBoostingClassifier (binary): baseline + the predictors' leaf values, numeric splits."""
    name = type(est).__name__
    pos = _positive_index(est, positive)
    if getattr(est, "n_trees_per_iteration_", 1) != 1:
        raise ValueError(f"{name}: {est.n_trees_per_iteration_} trees per iteration; only binary models are supported")
    bias = float(np.asarray(est._baseline_prediction).reshape(-1)[0])
    out = []
    for i, (pred,) in enumerate(est._predictors):
        nodes = pred.nodes
        if nodes["is_categorical"].any():
            raise ValueError(f"{name}: tree {i} has a categorical split; only numeric splits have a white box")
        leaf = nodes["is_leaf"].astype(bool)
        left, right = nodes["left"].astype(np.int64), nodes["right"].astype(np.int64)  # uint32 in sklearn
        out.append(_boosted(np.where(leaf, -1, left), np.where(leaf, -1, right), nodes["feature_idx"],
                            nodes["num_threshold"], nodes["value"], bias if i == 0 else None, 1.0 if pos == 1 else -1.0))
    return NativeEnsemble(name, out, int(est.n_features_in_), "float64<=", boosted=True)


def _xgb_margins(trees: list[NativeTree], Z: np.ndarray) -> np.ndarray:
    """The margins the trees give rows Z as XGBoost sums them: float32, in tree order (the base margin
    in the first tree's leaves), each node left iff float32(z) < threshold."""
    Z32 = np.asarray(Z, np.float64).astype(np.float32)
    out = np.zeros(len(Z32), np.float32)
    rows = np.arange(len(Z32))
    for t in trees:
        node = np.zeros(len(Z32), np.int64)
        while (inner := t.left[node] >= 0).any():
            go = Z32[rows, t.feature[node]] < t.threshold[node].astype(np.float32)
            node = np.where(inner, np.where(go, t.left[node], t.right[node]), node)
        out = out + t.p1[node].astype(np.float32)
    return out


def _xgb_probe(trees: list[NativeTree], n_inputs: int) -> np.ndarray:
    """Rows that reach many leaves: each column drawn from its split thresholds and their float32
    neighbours (and 0 where a column has none)."""
    rng = np.random.default_rng(0)
    rows = np.zeros((64, n_inputs))
    for j in range(n_inputs):
        ts = np.concatenate([t.threshold[(t.left >= 0) & (t.feature == j)] for t in trees]).astype(np.float32)
        if len(ts):
            near = np.concatenate([ts, np.nextafter(ts, np.float32(-np.inf)), np.nextafter(ts, np.float32(np.inf))])
            rows[:, j] = rng.choice(near, 64)
    return rows


def xgboost_trees(model: Any, positive: Any = 1) -> NativeEnsemble:
    """XGBClassifier or xgboost Booster with objective binary:logistic, from its JSON model.

    The classifier's predict stops at ``best_iteration`` where early stopping set one (a Booster's
    predict uses every tree, and so does its white box). The margin is XGBoost's, bit for bit: the
    base margin -logf(1 / base_score - 1) in float32, summed with the leaf values in float32 in tree
    order; the reader checks this against the booster's own margins on probe rows, and where they
    differ widens the tolerance by the float32 summation bound instead.
    """
    name = type(model).__name__
    sign = 1.0
    n_iter = None
    if hasattr(model, "get_booster"):
        sign = 1.0 if _positive_index(model, positive) == 1 else -1.0
        booster = model.get_booster()
        try:
            n_iter = int(model.best_iteration) + 1
        except AttributeError:
            n_iter = None
    else:
        booster = model
    learner = json.loads(bytes(booster.save_raw("json")))["learner"]
    objective = learner["objective"]["name"]
    if objective != "binary:logistic":
        raise ValueError(f"{name}: objective {objective!r}; only binary:logistic is supported "
                         "(a multi-class model has no binary white box)")
    gb = learner["gradient_booster"]
    if gb["name"] != "gbtree":
        raise ValueError(f"{name}: booster {gb['name']!r}; only 'gbtree' is supported")
    param = learner["learner_model_param"]
    base = [float(v) for v in str(param["base_score"]).strip("[]").split(",")]
    if len(base) != 1 or int(param.get("num_target", 1)) != 1:
        raise ValueError(f"{name}: {len(base)} base scores / targets; only a single binary target is supported")
    odds = np.float32(1.0) / np.float32(base[0]) - np.float32(1.0)  # XGBoost's ProbToMargin, in float32
    bias = np.float32(-math.log(float(odds)))  # logf, correctly rounded
    trees = gb["model"]["trees"]
    if n_iter is not None:
        trees = trees[: int(gb["model"]["iteration_indptr"][n_iter])]
    out = []
    for i, t in enumerate(trees):
        if any(int(s) != 0 for s in t["split_type"]):
            raise ValueError(f"{name}: tree {i} has a categorical split; only numeric splits have a white box")
        left = np.asarray(t["left_children"], np.int64)
        cond = np.asarray(t["split_conditions"], np.float32)  # a leaf's holds its value
        leaf = left < 0
        values = np.where(leaf, cond, np.float32(0))
        if i == 0:
            values = values + bias  # float32: XGBoost's first addition
        out.append(_boosted(left, np.where(leaf, -1, t["right_children"]), np.where(leaf, 0, t["split_indices"]),
                            np.where(leaf, 0.0, cond.astype(np.float64)), values.astype(np.float64), None, sign))
    n_inputs = int(param["num_feature"])
    tolerance = _SIGMOID_BAND
    probe = _xgb_probe(out, n_inputs)
    native = booster.inplace_predict(probe, iteration_range=(0, n_iter or 0), predict_type="margin",
                                     validate_features=False)
    if not np.array_equal(sign * np.asarray(native, np.float32).reshape(-1), _xgb_margins(out, probe)):
        n = len(out) + 1  # not XGBoost's sums bit for bit: both lie within the float32 bound of the exact sum
        peak = sum(float(np.abs(t.p1[t.left < 0]).max()) for t in out)
        tolerance += 2 * n * _U32 / (1 - n * _U32) * peak
    return NativeEnsemble(name, out, n_inputs, "float32<", boosted=True, tolerance=tolerance, float32_sums=True)


def _lgbm_read(z: np.ndarray) -> np.ndarray:
    """An input as LightGBM's predict reads it: |z| <= 1e-35 (float32) is dropped from its dense rows, i.e. 0."""
    z = np.asarray(z, np.float64)
    return np.where(np.abs(z) <= LGBM_ZERO, 0.0, z)


def _lgbm_threshold(name: str, node: dict[str, Any]) -> float:
    """The node's test as ``z' <= t`` over the values LightGBM can read (0 or |z'| > 1e-35)."""
    if node.get("decision_type", "<=") != "<=":
        raise ValueError(f"{name}: a categorical split (decision_type {node['decision_type']!r}); "
                         "only numeric splits have a white box")
    t = float(node["threshold"])
    if node.get("missing_type") != "Zero":
        return t  # "None" / "NaN": only NaN takes the default way, and inputs are never NaN
    if node.get("default_left", False):  # left iff z' <= t or z' == 0
        if t >= 0:
            return t
        if t >= -LGBM_ZERO:
            return 0.0  # no readable value lies in (t, 0)
    else:  # left iff z' <= t and z' != 0
        if t < 0:
            return t
        if t < LGBM_ZERO:
            return -5e-324  # z' < 0: no readable value lies in [t', 0)
    raise ValueError(f"{name}: a split with missing_type 'Zero' sends 0 the other way than its neighbours "
                     f"(threshold {t!r}, default_left {node.get('default_left')}); not a single split")


def lightgbm_trees(model: Any, positive: Any = 1) -> NativeEnsemble:
    """LGBMClassifier or lightgbm Booster with objective binary, from ``dump_model()`` (the iterations
    its predict uses by default: the best iteration where early stopping set one)."""
    name = type(model).__name__
    sign = 1.0
    if hasattr(model, "booster_"):
        sign = 1.0 if _positive_index(model, positive) == 1 else -1.0
        booster = model.booster_
    else:
        booster = model
    dump = booster.dump_model()
    objective = str(dump.get("objective", ""))
    if not objective.startswith("binary") or int(dump.get("num_class", 1)) != 1 or \
            int(dump.get("num_tree_per_iteration", 1)) != 1:
        raise ValueError(f"{name}: objective {objective!r} with {dump.get('num_class')} classes; only the binary "
                         "objective is supported (a multi-class model has no binary white box)")
    if dump.get("average_output", False):
        raise ValueError(f"{name}: boosting 'rf' averages its trees; only boosted sums are supported")
    sigmoid = next((float(p.split(":")[1]) for p in objective.split() if p.startswith("sigmoid:")), 1.0)
    out = []
    for info in dump["tree_info"]:
        left, right, feature, threshold, value = [], [], [], [], []
        stack = [(info["tree_structure"], -1, False)]
        while stack:  # preorder: a node's id is its position, children after their parent
            node, parent, is_left = stack.pop()
            k = len(left)
            if parent >= 0:
                (left if is_left else right)[parent] = k
            leaf = "leaf_value" in node
            if leaf and ("leaf_coeff" in node or "leaf_features" in node):
                raise ValueError(f"{name}: linear trees are not supported")
            left.append(-1)
            right.append(-1)
            feature.append(0 if leaf else int(node["split_feature"]))
            threshold.append(0.0 if leaf else _lgbm_threshold(name, node))
            value.append(float(node["leaf_value"]) if leaf else 0.0)
            if not leaf:
                stack += [(node["right_child"], k, False), (node["left_child"], k, True)]
        out.append(_boosted(left, right, feature, threshold, value, None, sign))  # the init is in tree 0's leaves
    n_inputs = int(dump["max_feature_idx"]) + 1
    return NativeEnsemble(name, out, n_inputs, "float64<=", boosted=True, tolerance=1e-15 / sigmoid, read=_lgbm_read)
