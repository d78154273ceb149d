"""Classifiers as the worlds see them: ``predict_proba(X) -> P(accept)`` over a batch."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Classifier(Protocol):
    """Anything that scores a batch of states with the probability of acceptance."""

    def predict_proba(self, X: np.ndarray) -> np.ndarray:  # (batch, d) -> (batch,)
        ...


def accepts(classifier: Classifier, X: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    """Boolean acceptance of a batch: ``P(accept) >= threshold``."""
    return np.asarray(classifier.predict_proba(np.atleast_2d(X))) >= threshold


class ThresholdClassifier:
    """The set-cover world's classifier: positive iff ``x_j >= t_j`` for every feature j.

    ``thresholds`` may be one vector (n,) or one per hidden group (G, n); with groups, the
    agent's group picks its thresholds (differential validity) and must be passed to
    :meth:`predict_proba`.
    """

    def __init__(self, thresholds: np.ndarray):
        t = np.asarray(thresholds)
        if t.ndim not in (1, 2) or t.size == 0:
            raise ValueError(f"thresholds: expected a vector (n,) or a matrix (groups, n), got shape {t.shape}")
        self.thresholds = np.atleast_2d(t).astype(np.uint8)

    @property
    def n_features(self) -> int:
        return self.thresholds.shape[1]

    def predict_proba(self, X: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
        X = np.atleast_2d(X)
        t = self.thresholds[0] if groups is None else self.thresholds[np.asarray(groups)]
        return np.all(X >= t, axis=-1).astype(np.float64)


class SklearnClassifier:
    """Adapter for a fitted scikit-learn estimator with ``predict_proba``."""

    def __init__(self, estimator: Any, positive_class: Any = 1):
        self.estimator = estimator
        classes = list(getattr(estimator, "classes_", [0, 1]))
        if positive_class not in classes:
            raise ValueError(f"positive_class: {positive_class!r} is not one of the estimator's classes {classes}")
        self.column_ = classes.index(positive_class)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self.estimator.predict_proba(np.atleast_2d(X))[:, self.column_]


class TorchClassifier:
    """Adapter for a torch module; ``output`` says what the module returns.

    ``"logit"``: one logit per row; ``"prob"``: one probability; ``"softmax"``: class logits,
    of which ``positive_index`` is acceptance.
    """

    def __init__(self, module: Any, output: str = "logit", positive_index: int = 1):
        if output not in ("logit", "prob", "softmax"):
            raise ValueError(f"output: expected 'logit', 'prob' or 'softmax', got {output!r}")
        self.module, self.output, self.positive_index = module, output, positive_index

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            out = self.module(torch.as_tensor(np.atleast_2d(X), dtype=torch.float32))
            if self.output == "logit":
                p = torch.sigmoid(out.reshape(-1))
            elif self.output == "prob":
                p = out.reshape(-1)
            else:
                p = torch.softmax(out, dim=-1)[:, self.positive_index]
        return p.cpu().numpy().astype(np.float64)
