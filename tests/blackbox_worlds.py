"""Small tabular worlds for the black-box searches' tests, with a brute-force optimum.

The toy world has every combination of its features' values in its data set D (720 rows), so
GeCo's search space (the active domain of D) is the whole plausible space and brute force over D
gives the exact optimum that every method can be checked against.
"""

from __future__ import annotations

import itertools

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.tree import DecisionTreeClassifier

from envs.models import from_sklearn
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from solvers.geco.plaf import Plaf
from solvers.mace.distance import deltas, distance_features

SCHEMA = FeatureSchema((
    Feature("age", "numeric", 0, 4, "increase", integer=True),
    Feature("edu", "ordinal", 0, 3, "increase", categories=("none", "school", "college", "degree"), integer=True),
    Feature("sex", "binary", 0, 1, "immutable", integer=True),
    Feature("income", "numeric", 0, 5, "free", integer=True),
    *(Feature(f"job={c}", "binary", 0, 1, "free", group="job", integer=True) for c in ("x", "y", "z")),
))
#: an implication in the style of GeCo A.1: more education takes two more years
RULES = Plaf.parse("PLAF IF x_cf.edu > x.edu THEN x_cf.age >= x.age + 2")


def toy_data() -> np.ndarray:
    """Every combination of the toy schema's values."""
    rows = []
    for age, edu, sex, income, job in itertools.product(range(5), range(4), range(2), range(6), range(3)):
        rows.append([age, edu, sex, income, *np.eye(3)[job]])
    return np.array(rows, float)


def toy_world(kind: str, seed: int = 0) -> TabularWorld:
    """The toy schema with a ``kind`` model ("tree", "forest", "lr", "mlp") trained on a noisy rule."""
    X = toy_data()
    rng = np.random.default_rng(seed)
    z = 0.5 * X[:, 0] + 0.9 * X[:, 1] + 0.4 * X[:, 3] + 1.2 * X[:, 5] - 0.6 * X[:, 2] - 4.0
    y = (z + rng.normal(0, 0.8, len(X)) > 0).astype(int)
    mean, scale = X.mean(0), X.std(0) + 1e-12
    if kind == "tree":
        model = from_sklearn(DecisionTreeClassifier(max_depth=5, random_state=seed).fit(X, y))
    elif kind == "forest":
        model = from_sklearn(RandomForestClassifier(5, max_depth=5, random_state=seed).fit(X, y))
    elif kind == "lr":
        model = from_sklearn(LogisticRegression().fit((X - mean) / scale, y), mean, scale)
    else:
        mlp = MLPClassifier((6,), max_iter=2000, random_state=seed).fit((X - mean) / scale, y)
        model = from_sklearn(mlp, mean, scale)
    return TabularWorld(f"toy/{kind}", SCHEMA, model)


def brute_force(world: TabularWorld, x: np.ndarray, program: Plaf | None = None, *,
                weights: tuple[float, float, float] | None = None) -> tuple[float, np.ndarray]:
    """(optimal distance, the optimal rows) over all of D: accepted (P > 0.5) and breaking no rule.

    ``weights`` are MACE's (alpha, beta, gamma); default: the l1 norm ("one").
    """
    X = toy_data()
    raws = distance_features(world.schema)
    w = weights or (0.0, 1.0 / len(raws), 0.0)
    rules = (program or Plaf()).compile(world.schema).ground(x)
    ok = (world.model.predict_proba(X) > 0.5) & (rules.violations(X) == 0)
    D = deltas(raws, x, X[ok])
    d = w[0] * (D > 0).sum(1) + w[1] * D.sum(1) + w[2] * D.max(1)
    if not len(d):
        return float("inf"), X[:0]
    return float(d.min()), X[ok][d <= d.min() + 1e-12]


def rejected(world: TabularWorld) -> np.ndarray:
    """The toy rows the model rejects."""
    X = toy_data()
    return X[world.model.predict_proba(X) <= 0.5]


class StepModel:
    """A model in steps over ``n_features`` columns, its probability 0 or 1 (no slope to follow): accepts the rows
    where ``accept(X)`` (N,) is True."""

    def __init__(self, accept, n_features: int = 4):
        self.accept, self.n_features = accept, n_features

    def predict_proba(self, X):
        p = np.asarray(self.accept(np.atleast_2d(X)), float)
        return np.column_stack([1 - p, p])

    def predict(self, X):
        return self.predict_proba(X)[:, 1] > 0.5
