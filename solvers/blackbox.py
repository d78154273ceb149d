"""What the black-box searches (GeCo, MD-PSO) share: the counted model, the agent check, the answer.

Both searches see the classifier only through ``predict_proba`` on batches. ``CountingModel``
wraps it, counts the calls and the rows, and applies the decision rule of the GeCo paper
(accept iff P(accept) > threshold, 0.5 by default). ``check_agent`` rejects bad input with an
error that names the field and the problem (the checks MACE makes). ``point_recourse`` turns a
counterfactual row into the project's ``Recourse``: one step per raw feature changed, named as
MACE names them (a one-hot group's step carries the chosen category's column name).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.recourse import Recourse
from envs.schema import FeatureSchema
from solvers.mace.distance import DistanceFeature, distance_features


class CountingModel:
    """A classifier seen only through batched ``predict_proba``, with its calls and rows counted."""

    def __init__(self, model: Any, threshold: float = 0.5) -> None:
        if not callable(getattr(model, "predict_proba", None)):
            raise ValueError(f"model: {type(model).__name__} has no predict_proba(X)")
        if not 0.0 <= float(threshold) < 1.0:
            raise ValueError(f"threshold: must be in [0, 1), got {threshold!r}")
        self.model = model  # the black box: predict_proba(X) -> P(accept) per row
        self.threshold = float(threshold)  # accept iff P(accept) > threshold
        self.calls = 0  # predict_proba calls so far
        self.rows = 0  # rows scored so far

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """P(accept) of every row, as a float vector (a two-column output gives its second column)."""
        X = np.atleast_2d(np.asarray(X, float))
        if len(X) == 0:
            return np.zeros(0)
        p = np.asarray(self.model.predict_proba(X), float)
        if p.ndim == 2 and p.shape[1] == 2:
            p = p[:, 1]
        if p.shape != (len(X),) or not np.all(np.isfinite(p)):
            raise ValueError(f"model.predict_proba: expected {len(X)} finite probabilities, got shape {p.shape}")
        self.calls += 1
        self.rows += len(X)
        return p

    def accepts(self, X: np.ndarray) -> np.ndarray:
        return self.predict_proba(X) > self.threshold


def check_agent(schema: FeatureSchema, x: np.ndarray) -> np.ndarray:
    """One agent as a float row, or a ValueError naming the problem (length, NaN, range, integrality, one-hot)."""
    arr = schema.validate(x, name="x")
    if arr.shape[0] != 1:
        raise ValueError(f"x: expected one agent (a 1-D row), got {arr.shape[0]} rows")
    row = arr[0]
    for r in distance_features(schema):
        if r.kind == "group" and row[list(r.columns)].sum() != 1:
            raise ValueError(f"x: one-hot group {r.name!r} must have exactly one 1, got {row[list(r.columns)]}")
    return row


def changed_steps(schema: FeatureSchema, raws: tuple[DistanceFeature, ...], x: np.ndarray,
                  cf: np.ndarray) -> tuple[tuple[tuple[str, Any], ...], tuple[int, ...]]:
    """``(raw name, new value)`` per raw feature that ``cf`` changes, and the raw features' indices."""
    steps, ids = [], []
    for j, r in enumerate(raws):
        cols = list(r.columns)
        if np.array_equal(cf[cols], x[cols]):
            continue
        ids.append(j)
        if r.kind == "group":
            steps.append((r.name, schema.features[cols[int(np.argmax(cf[cols]))]].name))
        else:
            f = schema.features[cols[0]]
            v = cf[cols[0]]
            steps.append((r.name, int(v) if f.integer or f.kind != "numeric" else float(v)))
    return tuple(steps), tuple(ids)


def point_recourse(schema: FeatureSchema, raws: tuple[DistanceFeature, ...], x: np.ndarray, cf: np.ndarray,
                   *, method: str, distance: float, valid: bool, runtime: float,
                   extra: dict[str, Any]) -> Recourse:
    """The ``Recourse`` of one counterfactual row (cost = its distance; not certified optimal)."""
    steps, ids = changed_steps(schema, raws, x, cf)
    return Recourse(steps, ids, np.asarray(cf, float).copy(), float(distance), bool(valid), method,
                    runtime=float(runtime), optimal=None,
                    extra={"distance": float(distance), "counterfactual": np.asarray(cf, float).tolist(), **extra})
