"""White-box copies of trained black-box classifiers: tree, forest, logistic regression, ReLU MLP.

MACE (and any exact method) needs the model's parameters, not only its predictions. These
classes hold the parameters of a fitted scikit-learn model as plain arrays, reproduce its
``predict``/``predict_proba`` exactly, and save as JSON (no pickle). Every model takes the
*encoded* state in raw units (one-hot columns, ordinal codes, numbers as they are); a scaler
used in training is folded into the first affine layer so the formulae stay linear in x.

Decision rule (the one sklearn uses): the model accepts iff ``score(x) > 0`` where
``score`` is the logit (linear, MLP) or ``mean_t P_t(1 | x) - mean_t P_t(0 | x)`` (tree, forest;
sklearn's argmax breaks a tie towards class 0).

Trees and forests are evaluated exactly as scikit-learn evaluates them, bit for bit: sklearn casts
the input to float32 and sends a row left at a node iff ``float32(x_f) <= threshold`` (a float64
threshold; ``_tree.pyx``), and a forest sums its trees' probabilities in estimator order before
dividing by their number. ``split_limits`` turns a threshold into the exact float64 interval of
each branch, which exact solvers (MACE) encode. LR and MLP copies fold the scaler into the first
layer and so agree with sklearn only up to float64 round-off (``exact = False``).

A ``TreeEnsemble`` also holds an imported model (``envs.imported_trees``): ``splits="float64"``
(a node goes left iff ``x <= threshold``, the threshold being the exact float64 point where the
user's own test on their scaled input flips, ``envs.split_rules``) and ``boosted`` (the score is
the sum of the leaf values, the library's margin, not the mean of the trees' P(1) - P(0)).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from envs.block_diagonal import block_matmul, blocks_of, packed_layers
from envs.rowwise import rowwise_matmul


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def variant_rows(base: np.ndarray, index: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """(T, D) the rows that variants describe: row t is ``base[index[t]]`` with column ``cols[t, i]``
    set to ``vals[t, i]`` for each ``i`` where ``cols[t, i] >= 0`` (the columns of a row distinct)."""
    rows = np.asarray(base, float)[index]
    t, i = np.nonzero(cols >= 0)
    rows[t, cols[t, i]] = vals[t, i]
    return rows


def _first_layer_variants(W: np.ndarray, b: np.ndarray, base: np.ndarray, index: np.ndarray, cols: np.ndarray,
                          vals: np.ndarray) -> np.ndarray:
    """(T, H) ``row @ W + b`` of every variant row from its base's product and a rank-k update for
    the k changed columns: no (T, D) row is built (equal to the full product up to rounding)."""
    base = np.asarray(base, float)
    Z = (base @ W + b)[index]
    for j in range(cols.shape[1]):
        c = cols[:, j]
        live = c >= 0
        cj = np.where(live, c, 0)
        delta = np.where(live, vals[:, j] - base[index, cj], 0.0)
        Z += delta[:, None] * W[cj]
    return Z


def split_limits(threshold: float | np.ndarray) -> tuple[Any, Any]:
    """(U, L): sklearn's test ``float32(x) <= threshold`` holds iff x <= U and fails iff x >= L.

    U is the largest float64 whose float32 rounding is <= threshold and L = nextafter(U, +inf), so
    the two branches are exactly ``x <= U`` and ``x >= L`` over float64 inputs (no float64 lies
    between them). Over the reals the left branch is x <= m or x < m, m being the midpoint of the
    float32 a <= threshold and its successor: float32 rounding sends m to whichever is even.
    Works elementwise on arrays; a scalar gives floats.
    """
    t = np.asarray(threshold, float)
    if not np.all(np.abs(t) < float(np.finfo(np.float32).max)):
        raise ValueError(f"threshold: {threshold!r} is outside the finite float32 range")
    a = t.astype(np.float32)
    a = np.where(a.astype(float) > t, np.nextafter(a, np.float32(-np.inf)), a)  # the largest float32 <= t
    b = np.nextafter(a, np.float32(np.inf))
    m = (a.astype(float) + b.astype(float)) / 2  # exact: float32 significands fit float64 with room
    odd = (np.atleast_1d(a).view(np.uint32) & 1).astype(bool).reshape(a.shape)
    u = np.where(odd, np.nextafter(m, -np.inf), m)  # odd a: the tie m rounds up to b, which is > t
    lo = np.nextafter(u, np.inf)
    return (float(u), float(lo)) if t.ndim == 0 else (u, lo)


@dataclass
class Tree:
    """One binary decision tree in sklearn's array layout.

    Internal node k tests ``float32(x[feature[k]]) <= threshold[k]`` (go to ``left[k]``) else
    ``right[k]``, as sklearn does (``splits="float64"``: ``x[feature[k]] <= threshold[k]``); leaves
    have ``left == right == -1`` and ``p1[k]`` / ``p0[k]`` = P(class 1) / P(class 0) at the leaf,
    each computed as sklearn's ``predict_proba`` computes it (a boosted tree: its leaf value and 0).
    """

    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    p1: np.ndarray
    p0: np.ndarray | None = None  # None: 1 - p1 (models saved before p0 was stored; not bit-exact)
    splits: str = "float32"  # how a node compares: "float32" as sklearn, "float64" x <= threshold exactly
    _limits: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.p0 is None:
            self.p0 = 1.0 - np.asarray(self.p1, float)
        if self.splits not in ("float32", "float64"):
            raise ValueError(f"splits: expected 'float32' or 'float64', got {self.splits!r}")

    def limits(self) -> tuple[np.ndarray, np.ndarray]:
        """(U, L) per node (``split_limits`` of every threshold, or the float64 threshold and its
        successor; leaves hold junk), computed once."""
        if self._limits is None:
            t = np.where(self.left >= 0, self.threshold, 0.0)
            self._limits = split_limits(t) if self.splits == "float32" else (t, np.nextafter(t, np.inf))
        return self._limits

    def row_type(self) -> type:
        """The dtype a row is cast to before its tests (float32 as sklearn, or float64)."""
        return np.float32 if self.splits == "float32" else np.float64

    def leaves(self, X: np.ndarray) -> np.ndarray:
        """Leaf index reached by each row (vectorized descent on the float32 cast, as sklearn)."""
        X = np.asarray(X).astype(self.row_type())  # float32 vs float64 threshold compares exactly in float64
        node = np.zeros(len(X), dtype=np.int64)
        active = self.left[node] >= 0
        while active.any():
            idx = np.nonzero(active)[0]
            k = node[idx]
            go_left = X[idx, self.feature[k]] <= self.threshold[k]
            node[idx] = np.where(go_left, self.left[k], self.right[k])
            active[idx] = self.left[node[idx]] >= 0
        return node

    def is_leaf(self, k: int) -> bool:
        return bool(self.left[k] < 0)

    def paths(self) -> list[tuple[int, list[tuple[int, float, bool]]]]:
        """Every leaf with its path: ``(leaf, [(feature, threshold, went_left), ...])``."""
        out, stack = [], [(0, [])]
        while stack:
            k, path = stack.pop()
            if self.is_leaf(k):
                out.append((k, path))
                continue
            f, t = int(self.feature[k]), float(self.threshold[k])
            stack.append((int(self.right[k]), path + [(f, t, False)]))
            stack.append((int(self.left[k]), path + [(f, t, True)]))
        return out

    def to_dict(self) -> dict[str, list]:
        return {k: getattr(self, k).tolist() for k in ("left", "right", "feature", "threshold", "p1", "p0")}

    @classmethod
    def from_dict(cls, d: dict[str, list], splits: str = "float32") -> Tree:
        return cls(np.asarray(d["left"], np.int64), np.asarray(d["right"], np.int64),
                   np.asarray(d["feature"], np.int64), np.asarray(d["threshold"], float), np.asarray(d["p1"], float),
                   np.asarray(d["p0"], float) if "p0" in d else None, splits)

    @classmethod
    def from_sklearn(cls, tree: Any, positive_index: int = 1) -> Tree:
        """The arrays of a fitted binary sklearn tree; leaf probabilities normalized as its predict_proba."""
        t = tree.tree_
        value = t.value[:, 0, :]
        total = value.sum(axis=1)
        total = np.where(total == 0.0, 1.0, total)  # sklearn's normalizer
        leaf = t.children_left < 0
        return cls(t.children_left.astype(np.int64), t.children_right.astype(np.int64),
                   np.where(leaf, 0, t.feature).astype(np.int64), np.where(leaf, 0.0, t.threshold).astype(float),
                   value[:, positive_index] / total, value[:, 1 - positive_index] / total)


class WhiteBoxModel:
    """Base class: ``score``, ``predict_proba`` (P(accept)), ``predict`` and JSON persistence."""

    kind: ClassVar[str] = "model"
    exact: ClassVar[bool] = False  # does ``predict`` reproduce sklearn's decision bit for bit?
    n_features: int

    def score(self, X: np.ndarray) -> np.ndarray:
        """Decision score per row; the model accepts iff it is > 0."""
        raise NotImplementedError

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Boolean acceptance, with sklearn's tie-breaking."""
        return self.score(np.atleast_2d(np.asarray(X, float))) > 0

    def score_variants(self, base: np.ndarray, index: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """``score`` of the rows ``variant_rows(base, index, cols, vals)`` describe (a few columns of a
        base row changed): one model call. The white boxes below evaluate them without building the
        rows; this default builds them."""
        return self.score(variant_rows(base, index, cols, vals))

    def score_bounds(self, base: np.ndarray, cols: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray | None:
        """(n,) an upper bound of ``score`` over every row that is ``base[i]`` but for column
        ``cols[i, j]`` (-1: none) anywhere in [``lo[i, j]``, ``hi[i, j]``], from the model's
        parameters (no query of the model); None: this model has none. The searches skip a box whose
        bound says no row of it can be accepted."""
        return None

    def _check(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, float))
        if X.shape[1] != self.n_features:
            raise ValueError(f"X: expected {self.n_features} encoded columns, got {X.shape[1]}")
        return X

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"kind": self.kind, **self.to_dict()}))

    @staticmethod
    def load(path: str | Path) -> WhiteBoxModel:
        return model_from_dict(json.loads(Path(path).read_text()))


COMPLETE_DEPTH = 12  # a forest at most this deep is descended as complete trees (2**depth nodes each)
COMPLETE_NODES = 1 << 20  # and only where all its complete trees hold at most this many nodes (about 32 MB)


@dataclass
class TreeEnsemble(WhiteBoxModel):
    """A decision tree (one tree), a random forest (probabilities averaged over trees) or, with
    ``boosted``, a boosted ensemble: score = the sum over the trees, in order, of the leaf's
    p1 - p0 (p1 the leaf value, p0 = 0), the library's margin; the initial prediction is folded
    into the first tree's leaves, so the sum runs in the libraries' order (first term init + v1)."""

    trees: list[Tree]
    n_features: int
    boosted: bool = False  # the score is the sum of leaf values (a margin), not the mean of P(1) - P(0)
    tolerance: float = 0.0  # the native model may decide otherwise only where |score| <= tolerance
    float32_sums: bool = False  # the margin is summed in float32 in tree order, as XGBoost sums it
    kind: ClassVar[str] = "tree_ensemble"

    def __post_init__(self):
        if len({t.splits for t in self.trees}) > 1:
            raise ValueError("trees: all trees of an ensemble must compare the same way (splits)")
        if not self.tolerance >= 0:
            raise ValueError(f"tolerance: must be >= 0, got {self.tolerance!r}")

    @property
    def exact(self) -> bool:
        """``predict`` is the native model's decision (no float tolerance; a score of exactly 0 aside)."""
        return self.tolerance == 0.0

    @property
    def sum_error(self) -> float:
        """A bound of |score - the exact sum of the leaf values| (the MILP's reading): float32 sums
        err by at most gamma_n * sum_t max_l |v_tl| in any order (Higham); float64 sums: 0 (ignored)."""
        if not self.float32_sums:
            return 0.0
        if "_sum_error" not in self.__dict__:
            n = len(self.trees) + 1
            gamma = n * 2.0 ** -24 / (1 - n * 2.0 ** -24)
            self.__dict__["_sum_error"] = gamma * sum(float(np.abs(t.p1 - t.p0)[t.left < 0].max()) for t in self.trees)
        return self.__dict__["_sum_error"]

    @property
    def splits(self) -> str:
        return self.trees[0].splits if self.trees else "float32"

    @property
    def model_class(self) -> str:
        return "boosted" if self.boosted else "tree" if len(self.trees) == 1 else "forest"

    def _rows(self, X: np.ndarray) -> np.ndarray:
        """Rows cast as the trees compare them (float32 as sklearn, or float64), contiguous."""
        return np.ascontiguousarray(self._check(X), self.trees[0].row_type() if self.trees else np.float32)

    def _divisor(self) -> int:
        """What the summed leaf values are divided by: the trees' number (a forest's mean), or 1."""
        return 1 if self.boosted else len(self.trees)

    def _sums(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from envs.tree_kernels import complete_sums, forest_sums

        rows = self._rows(X)
        complete = self._complete()
        return complete_sums(rows, *complete) if complete is not None else forest_sums(rows, *self._stacked())

    def class_probas(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(P(0), P(1)) per row, summed over the trees in order and divided by their number, as sklearn
        (a boosted model: 1 - P and P, P the sigmoid of its margin)."""
        if self.boosted:
            p = self.predict_proba(X)
            return 1.0 - p, p
        s0, s1 = self._sums(X)
        return s0 / len(self.trees), s1 / len(self.trees)

    def _stacked(self) -> tuple[np.ndarray, ...]:
        """Every tree's node arrays in one, built once: root offsets, children (node ids offset per
        tree; a leaf points to itself), features, thresholds, the deepest leaf's depth, P(0), P(1)."""
        stack = self.__dict__.get("_stack")
        if stack is None:
            offsets = np.cumsum([0] + [len(t.left) for t in self.trees])[:-1].astype(np.int64)
            left = np.concatenate([np.where(t.left >= 0, t.left + o, -1) for t, o in zip(self.trees, offsets, strict=True)])
            right = np.concatenate([np.where(t.right >= 0, t.right + o, -1) for t, o in zip(self.trees, offsets, strict=True)])
            own = np.arange(len(left))
            feature = np.concatenate([np.where(t.left >= 0, t.feature, 0) for t in self.trees])
            threshold = np.concatenate([t.threshold for t in self.trees])
            depth, level = 0, offsets.copy()
            while True:  # the deepest leaf, level by level
                level = level[left[level] >= 0]
                if not len(level):
                    break
                level, depth = np.concatenate([left[level], right[level]]), depth + 1
            dtype = np.float32 if self.float32_sums else np.float64  # the kernels sum in this dtype
            p0 = np.concatenate([np.asarray(t.p0, float) for t in self.trees]).astype(dtype)
            p1 = np.concatenate([np.asarray(t.p1, float) for t in self.trees]).astype(dtype)
            stack = (offsets, np.where(left >= 0, left, own).astype(np.int64),
                     np.where(right >= 0, right, own).astype(np.int64), feature.astype(np.int64),
                     np.ascontiguousarray(threshold, np.float64), np.int64(depth), p0, p1)
            self.__dict__["_stack"] = stack
        return stack

    def _complete(self) -> tuple[Any, ...] | None:
        """The trees as complete trees (``tree_kernels.complete_layout``: a step loads no child id)
        where the deepest leaf is at most ``COMPLETE_DEPTH`` deep and the padded trees hold at most
        ``COMPLETE_NODES`` nodes; None otherwise (the linked ``_stacked`` layout then). Built once."""
        if "_complete_stack" not in self.__dict__:
            from envs.tree_kernels import complete_layout

            stack = self._stacked()
            depth = int(stack[5])
            small = depth <= COMPLETE_DEPTH and len(self.trees) << depth <= COMPLETE_NODES
            self.__dict__["_complete_stack"] = complete_layout(*stack) if small else None
        return self.__dict__["_complete_stack"]

    def leaves(self, X: np.ndarray) -> np.ndarray:
        """(rows, trees) leaf index of each row in each tree, on the float32 cast as sklearn
        (compiled: a forest's per-tree Python loop cost ~75 µs a tree)."""
        from envs.tree_kernels import forest_leaves

        offsets, left, right, feature, threshold, depth, _, _ = self._stacked()
        return forest_leaves(self._rows(X), offsets, left, right, feature, threshold, depth) - offsets

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return _sigmoid(self.score(X)) if self.boosted else self.class_probas(X)[1]

    def score_variants(self, base: np.ndarray, index: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """``score`` of variant rows, bit for bit: the compiled descent copies each base row and its
        changed columns into one float32 row buffer (the same cast as ``score``)."""
        from envs.tree_kernels import complete_sums_variants, forest_sums_variants

        rows = self._rows(base)
        args = (rows, np.ascontiguousarray(index, np.int64), np.ascontiguousarray(cols, np.int64),
                np.ascontiguousarray(vals, np.float64).astype(rows.dtype))
        complete = self._complete()
        s0, s1 = (complete_sums_variants(*args, *complete) if complete is not None
                  else forest_sums_variants(*args, *self._stacked()))
        n = self._divisor()
        return s1 / n - s0 / n

    def score_bounds(self, base: np.ndarray, cols: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """The largest P(1) - P(0) each tree can reach within the box, summed: exact per tree (each
        split straddled by an interval is followed both ways, on the float32 cast of the bounds)."""
        from envs.tree_kernels import forest_box_bounds

        offsets, left, right, feature, threshold, _, p0, p1 = self._stacked()
        rows = self._rows(base)
        bound = forest_box_bounds(rows, np.ascontiguousarray(cols, np.int64), np.asarray(lo, float).astype(rows.dtype),
                                  np.asarray(hi, float).astype(rows.dtype), offsets, left, right, feature, threshold,
                                  p1 - p0)
        # rounding is monotone (a sum of larger terms is not smaller); float32 sums may exceed the exact sum
        return bound / self._divisor() + 2 * self.sum_error

    def score(self, X: np.ndarray) -> np.ndarray:
        """P(1) - P(0): > 0 exactly where sklearn's argmax picks class 1 (a - b > 0 iff a > b in IEEE);
        a boosted model: its margin, summed in the library's order."""
        s0, s1 = self._sums(X)
        n = self._divisor()
        return s1 / n - s0 / n

    def to_dict(self) -> dict[str, Any]:
        extra = {"boosted": True} if self.boosted else {}  # keys only where not the default: old JSON as it was
        extra.update({"splits": self.splits} if self.splits != "float32" else {})
        extra.update({"tolerance": self.tolerance} if self.tolerance else {})
        extra.update({"float32_sums": True} if self.float32_sums else {})
        return {"n_features": self.n_features, "trees": [t.to_dict() for t in self.trees], **extra}

    @classmethod
    def from_sklearn(cls, est: Any) -> TreeEnsemble:
        pos = list(est.classes_).index(1)
        trees = getattr(est, "estimators_", None) or [est]
        return cls([Tree.from_sklearn(t, pos) for t in trees], int(est.n_features_in_))


@dataclass
class LinearModel(WhiteBoxModel):
    """Logistic regression: P(accept) = sigmoid(w . x + b)."""

    w: np.ndarray
    b: float
    kind: ClassVar[str] = "linear"
    n_features: int = field(init=False)
    model_class: ClassVar[str] = "lr"

    def __post_init__(self):
        self.w = np.asarray(self.w, float).reshape(-1)
        self.n_features = len(self.w)

    def score(self, X: np.ndarray) -> np.ndarray:
        return self._check(X) @ self.w + self.b

    def score_variants(self, base: np.ndarray, index: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """``score`` of variant rows by a rank-k update of each base's score (equal up to rounding)."""
        return _first_layer_variants(self.w[:, None], np.array([self.b]), self._check(base), index, cols,
                                     vals).reshape(-1)

    def score_bounds(self, base: np.ndarray, cols: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """The score's largest value over the box (linear: each column at the bound its weight favours)."""
        return _interval_layers([self.w[:, None]], [np.array([self.b])], self._check(base), cols, lo, hi)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return _sigmoid(self.score(X))

    def to_dict(self) -> dict[str, Any]:
        return {"w": self.w.tolist(), "b": float(self.b)}

    @classmethod
    def from_sklearn(cls, est: Any, mean: np.ndarray | None = None, scale: np.ndarray | None = None) -> LinearModel:
        """From a fitted LogisticRegression, folding a standard scaler ``(x - mean) / scale``."""
        w, b = est.coef_.reshape(-1).astype(float), float(est.intercept_[0])
        if list(est.classes_).index(1) == 0:
            w, b = -w, -b
        if scale is not None:
            w, b = w / scale, b - float(np.sum(w / scale * mean))
        return cls(w, b)


@dataclass
class MLPModel(WhiteBoxModel):
    """A ReLU multilayer perceptron with one logistic output: hidden layers ``W_l x + b_l``."""

    weights: list[np.ndarray]  # each (in, out), as sklearn's coefs_
    biases: list[np.ndarray]
    blocks: bool = False  # variant rows' later layers as BLAS blocks (tree_kernels.mlp_scores_blocks), not the loop
    rowwise: bool = False  # every product a row at a time (envs.rowwise): a row's score the same bits in any batch
    variant_dtype: ClassVar[type] = np.float64  # ``blocks``' products (float32: a surrogate's, learners.tabular.surrogate)
    kind: ClassVar[str] = "mlp"
    n_features: int = field(init=False)
    model_class: ClassVar[str] = "mlp"

    def __post_init__(self):
        self.weights = [np.asarray(w, float) for w in self.weights]
        self.biases = [np.asarray(b, float).reshape(-1) for b in self.biases]
        if self.weights[-1].shape[1] != 1:
            raise ValueError(f"weights: the last layer must have one output, got {self.weights[-1].shape[1]}")
        self.n_features = self.weights[0].shape[0]

    def hidden(self, X: np.ndarray) -> list[np.ndarray]:
        """Post-ReLU activations of each hidden layer."""
        h, out = self._check(X), []
        for i, b in enumerate(self.biases[:-1]):
            h = np.maximum(self._product(h, i) + b, 0.0)
            out.append(h)
        return out

    def score(self, X: np.ndarray) -> np.ndarray:
        hs = self.hidden(X)
        h = hs[-1] if hs else self._check(X)
        return (self._product(h, len(self.weights) - 1) + self.biases[-1]).reshape(-1)

    def layer_blocks(self) -> list[np.ndarray | None]:
        """Per layer, its diagonal blocks (k, a, b) where it is block-diagonal (``envs.block_diagonal``: an
        ensemble run as one network), else None; found once."""
        if "_blocks" not in self.__dict__:
            self.__dict__["_blocks"] = blocks_of(self.weights)
        return self.__dict__["_blocks"]

    def _product(self, A: np.ndarray, layer: int) -> np.ndarray:
        """``A`` times layer ``layer``'s weights: a row at a time with ``rowwise``, by blocks where block-diagonal."""
        B, W = self.layer_blocks()[layer], self.weights[layer]
        return block_matmul(A, B, self.rowwise) if B is not None else rowwise_matmul(A, W) if self.rowwise else A @ W

    def score_variants(self, base: np.ndarray, index: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """``score`` of variant rows: the first layer by a rank-k update of each base's product (no
        (rows, features) matrix; equal up to rounding), the other layers as ``score`` (in a compiled loop,
        or with ``blocks`` as BLAS products of fixed-size blocks: faster, not the loop's bits)."""
        from envs.tree_kernels import mlp_scores_blocks, mlp_scores_variants

        base = self._check(base)
        if len(self.weights) == 1:
            return _first_layer_variants(self.weights[0], self.biases[0], base, index, cols, vals).reshape(-1)
        t, packed = self.variant_dtype, self.__dict__.get("_packed")
        if packed is None:  # layer 1 and the later layers flattened for the compiled kernels, in ``variant_dtype``, once
            dims, diag, w, b = packed_layers(self.weights[1:], self.biases[1:], self.layer_blocks()[1:])
            packed = self.__dict__["_packed"] = (np.ascontiguousarray(self.weights[0], t), dims, diag, w.astype(t), b.astype(t))
        Z0 = np.ascontiguousarray(self._product(base, 0) + self.biases[0], t)
        return (mlp_scores_blocks if self.blocks else mlp_scores_variants)(
            Z0, np.ascontiguousarray(base), np.ascontiguousarray(index, np.int64), np.ascontiguousarray(cols, np.int64),
            np.ascontiguousarray(vals, np.float64), *packed)

    def score_bounds(self, base: np.ndarray, cols: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Interval bound propagation: each unit's interval over the box, layer by layer (sound, loose
        where the box is wide)."""
        return _interval_layers(self.weights, self.biases, self._check(base), cols, lo, hi, self.layer_blocks())

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return _sigmoid(self.score(X))

    def to_dict(self) -> dict[str, Any]:
        return {"weights": [w.tolist() for w in self.weights], "biases": [b.tolist() for b in self.biases]}

    @classmethod
    def from_sklearn(cls, est: Any, mean: np.ndarray | None = None, scale: np.ndarray | None = None) -> MLPModel:
        """From a fitted ReLU MLPClassifier (binary), folding a standard scaler into layer 1."""
        if est.activation != "relu":
            raise ValueError(f"est.activation: MACE's MLP formula needs 'relu', got {est.activation!r}")
        W = [np.asarray(w, float).copy() for w in est.coefs_]
        b = [np.asarray(v, float).copy() for v in est.intercepts_]
        if list(est.classes_).index(1) == 0:
            W[-1], b[-1] = -W[-1], -b[-1]
        if scale is not None:
            b[0] = b[0] - (mean / scale) @ W[0]
            W[0] = W[0] / scale[:, None]
        return cls(W, b)


@dataclass
class SklearnOracle:
    """The real scikit-learn model as a verifier: encoded rows -> bool acceptance (class 1).

    ``preprocess`` is the fitted transformer the model was trained behind (a StandardScaler for
    LR/MLP here), applied exactly as in training. MACE verifies its answers with it when given.
    """

    estimator: Any
    preprocess: Any = None

    def __call__(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, float))
        if self.preprocess is not None:
            X = self.preprocess.transform(X)
        return np.asarray(self.estimator.predict(X)) == 1


def model_from_dict(d: dict[str, Any]) -> WhiteBoxModel:
    kind = d.get("kind")
    if kind == "tree_ensemble":
        splits = str(d.get("splits", "float32"))
        return TreeEnsemble([Tree.from_dict(t, splits) for t in d["trees"]], int(d["n_features"]),
                            bool(d.get("boosted", False)), float(d.get("tolerance", 0.0)),
                            bool(d.get("float32_sums", False)))
    if kind == "linear":
        return LinearModel(np.asarray(d["w"], float), float(d["b"]))
    if kind == "mlp":
        return MLPModel([np.asarray(w, float) for w in d["weights"]], [np.asarray(b, float) for b in d["biases"]])
    raise ValueError(f"kind: unknown white-box model kind {kind!r}")


def from_sklearn(est: Any, mean: np.ndarray | None = None, scale: np.ndarray | None = None) -> WhiteBoxModel:
    """The white-box copy of a fitted binary sklearn tree, forest, logistic regression or MLP."""
    name = type(est).__name__
    if name in ("DecisionTreeClassifier", "RandomForestClassifier", "ExtraTreesClassifier"):
        return TreeEnsemble.from_sklearn(est)
    if name == "LogisticRegression":
        return LinearModel.from_sklearn(est, mean, scale)
    if name == "MLPClassifier":
        return MLPModel.from_sklearn(est, mean, scale)
    raise ValueError(f"est: no white-box copy for {name}")



def _interval_layers(weights: list[np.ndarray], biases: list[np.ndarray], base: np.ndarray, cols: np.ndarray,
                     lo: np.ndarray, hi: np.ndarray, blocks: list[np.ndarray | None] | None = None) -> np.ndarray:
    """(n,) the upper end of the output's interval (interval bound propagation) over rows that are
    ``base[i]`` but for columns ``cols[i]`` (-1: none) in [lo, hi]; ReLU between the layers. ``blocks``: per
    layer its diagonal blocks where it is block-diagonal (``MLPModel.layer_blocks``), multiplied a block at a time."""
    cols = np.asarray(cols, np.int64)
    rows = np.arange(len(base))[:, None]
    live = cols >= 0
    c = np.maximum(cols, 0)
    dlo = np.where(live, np.asarray(lo, float) - base[rows, c], 0.0)[..., None]  # (n, k, 1)
    dhi = np.where(live, np.asarray(hi, float) - base[rows, c], 0.0)[..., None]
    W0 = weights[0][c]  # (n, k, H)
    z = base @ weights[0] + biases[0]
    z_lo = z + np.minimum(dlo * W0, dhi * W0).sum(1)
    z_hi = z + np.maximum(dlo * W0, dhi * W0).sum(1)
    for i, (W, b) in enumerate(zip(weights[1:], biases[1:], strict=True), start=1):
        a_lo, a_hi = np.maximum(z_lo, 0.0), np.maximum(z_hi, 0.0)
        B = None if blocks is None else blocks[i]
        if B is None:
            Wp, Wn = np.maximum(W, 0.0), np.minimum(W, 0.0)
            z_lo, z_hi = a_lo @ Wp + a_hi @ Wn + b, a_hi @ Wp + a_lo @ Wn + b
        else:
            Bp, Bn = np.maximum(B, 0.0), np.minimum(B, 0.0)
            z_lo = block_matmul(a_lo, Bp) + block_matmul(a_hi, Bn) + b
            z_hi = block_matmul(a_hi, Bp) + block_matmul(a_lo, Bn) + b
    return z_hi.reshape(len(base), -1)[:, 0]
