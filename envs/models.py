"""White-box copies of trained black-box classifiers: tree, forest, logistic regression, ReLU MLP.

MACE (and any exact method) needs the model's parameters, not only its predictions. These
classes hold the parameters of a fitted scikit-learn model as plain arrays, reproduce its
``predict``/``predict_proba`` exactly, and save as JSON (no pickle). Every model takes the
*encoded* state in raw units (one-hot columns, ordinal codes, numbers as they are); a scaler
used in training is folded into the first affine layer so the formulae stay linear in x.

Decision rule (the one sklearn uses): the model accepts iff ``score(x) > 0`` where
``score`` is the logit (linear, MLP) or ``mean_t P_t(1 | x) - 1/2`` (tree, forest; sklearn's
argmax breaks the tie 1/2 towards class 0).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


@dataclass
class Tree:
    """One binary decision tree in sklearn's array layout.

    Internal node k tests ``x[feature[k]] <= threshold[k]`` (go to ``left[k]``) else
    ``right[k]``; leaves have ``left == right == -1`` and ``p1[k]`` = P(class 1) at the leaf.
    """

    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    p1: np.ndarray

    def leaves(self, X: np.ndarray) -> np.ndarray:
        """Leaf index reached by each row (vectorized descent)."""
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
        return {k: getattr(self, k).tolist() for k in ("left", "right", "feature", "threshold", "p1")}

    @classmethod
    def from_dict(cls, d: dict[str, list]) -> Tree:
        return cls(np.asarray(d["left"], np.int64), np.asarray(d["right"], np.int64),
                   np.asarray(d["feature"], np.int64), np.asarray(d["threshold"], float), np.asarray(d["p1"], float))

    @classmethod
    def from_sklearn(cls, tree: Any, positive_index: int = 1) -> Tree:
        t = tree.tree_
        value = t.value[:, 0, :]
        p1 = value[:, positive_index] / np.maximum(value.sum(axis=1), 1e-300)
        leaf = t.children_left < 0
        return cls(t.children_left.astype(np.int64), t.children_right.astype(np.int64),
                   np.where(leaf, 0, t.feature).astype(np.int64), np.where(leaf, 0.0, t.threshold).astype(float), p1)


class WhiteBoxModel:
    """Base class: ``score``, ``predict_proba`` (P(accept)), ``predict`` and JSON persistence."""

    kind: ClassVar[str] = "model"
    n_features: int

    def score(self, X: np.ndarray) -> np.ndarray:
        """Decision score per row; the model accepts iff it is > 0."""
        raise NotImplementedError

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Boolean acceptance, with sklearn's tie-breaking."""
        return self.score(np.atleast_2d(np.asarray(X, float))) > 0

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


@dataclass
class TreeEnsemble(WhiteBoxModel):
    """A decision tree (one tree) or a random forest (probabilities averaged over trees)."""

    trees: list[Tree]
    n_features: int
    kind: ClassVar[str] = "tree_ensemble"

    @property
    def model_class(self) -> str:
        return "tree" if len(self.trees) == 1 else "forest"

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        X = self._check(X)
        return np.mean([t.p1[t.leaves(X)] for t in self.trees], axis=0)

    def score(self, X: np.ndarray) -> np.ndarray:
        return self.predict_proba(X) - 0.5

    def to_dict(self) -> dict[str, Any]:
        return {"n_features": self.n_features, "trees": [t.to_dict() for t in self.trees]}

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
        for W, b in zip(self.weights[:-1], self.biases[:-1], strict=True):
            h = np.maximum(h @ W + b, 0.0)
            out.append(h)
        return out

    def score(self, X: np.ndarray) -> np.ndarray:
        hs = self.hidden(X)
        h = hs[-1] if hs else self._check(X)
        return (h @ self.weights[-1] + self.biases[-1]).reshape(-1)

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


def model_from_dict(d: dict[str, Any]) -> WhiteBoxModel:
    kind = d.get("kind")
    if kind == "tree_ensemble":
        return TreeEnsemble([Tree.from_dict(t) for t in d["trees"]], int(d["n_features"]))
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
