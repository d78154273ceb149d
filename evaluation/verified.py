"""Verified top-k decoding: the cheapest of a generator's k likeliest CFEs that the world accepts.

A named-CFE softmax ranks the CFE classes it saw in training. When the world is known (the
classifier can be queried and the actions' effects and costs are known, as when serving),
``verified_top_k`` applies the k likeliest sets to each agent in one batched rollout and returns
the cheapest one the classifier accepts, falling back to the likeliest when none is accepted.
This is not an exact solver: it only ever answers with a CFE class seen in training, and it
needs k classifier queries per agent. It is the serving path's verification, moved before the
answer instead of after it.
"""

from __future__ import annotations

import numpy as np

from envs.capability import CapabilityWorld
from learners.base import Prediction


def verified_top_k(model, world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None = None,
                   k: int = 20) -> Prediction:
    """Per agent, the cheapest accepted set among the model's ``k`` most probable CFE classes.

    ``model`` must expose ``predict_proba(X) -> (B, C)`` over ``model.classes_`` (padded action-id
    rows), as the named-CFE generator does. Confidence is the model's probability of the answer.
    """
    if k < 1:
        raise ValueError(f"k: must be >= 1, got {k}")
    if not hasattr(model, "classes_"):
        raise ValueError(f"model: {type(model).__name__} has no CFE classes (use a named-CFE generator)")
    P = model.predict_proba(X)
    B, C = P.shape
    k = min(k, C)
    top = np.argpartition(-P, k - 1, axis=1)[:, :k] if k < C else np.tile(np.arange(C), (B, 1))
    probs = np.take_along_axis(P, top, 1)
    order = np.argsort(-probs, axis=1, kind="stable")  # likeliest first: ties in cost go to it
    top, probs = np.take_along_axis(top, order, 1), np.take_along_axis(probs, order, 1)
    sets = model.classes_[top.reshape(-1)]
    Xr = np.repeat(np.asarray(X), k, axis=0)
    gr = None if groups is None else np.repeat(np.asarray(groups), k)
    _, _, ok = world.rollout(Xr, sets, gr)
    cost = np.where(ok, world.set_costs(sets), np.inf).reshape(B, k)
    best = np.where(np.isfinite(cost).any(1), cost.argmin(1), 0)
    rows = np.arange(B)
    return Prediction(model.classes_[top[rows, best]], probs[rows, best].astype(np.float64))
