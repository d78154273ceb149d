"""Tabular worlds and references shared by the tabular tests (generators, polish, kernels).

The German forest and its MACE labels are built once per test session (``functools.cache``) and
handed to each test module by its own module-scoped fixture; the arrays a test gets are its own copy.
"""

from __future__ import annotations

import functools
import tempfile

import numpy as np

from data_gen.classifiers import build
from data_gen.mace_labels import label_tabular
from envs.models import Tree, TreeEnsemble
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular import TabularLabels
from learners.tabular.trade_kernels import _split_back
from solvers.mace import MACE


@functools.cache
def _german_forest():
    b = build("german", "forest")
    X = np.concatenate([b.data.X_train, b.data.X_test])
    return b.world, X[~b.world.accepts(X)]


def german_forest_sample():
    """German forest's world and its first 40 rejected rows (train, then test split)."""
    world, neg = _german_forest()
    return world, neg[:40].copy()


def german_rejected():
    """German forest's world and all its rejected rows in a seeded random order."""
    world, neg = _german_forest()
    return world, neg[np.random.default_rng(0).permutation(len(neg))]


@functools.cache
def _german_labels():
    world, neg = german_rejected()
    with tempfile.TemporaryDirectory() as work:
        labels = label_tabular(world, neg[:70], MACE(backend="milp", norm="one"), work, chunk_size=35, n_jobs=1,
                               progress=False)
    ok = np.flatnonzero(labels.ok)
    return labels, ok[:55], ok[55:]


def german_mace_labels():
    """MACE's labels (MILP, l1) of the first 70 of ``german_rejected``'s rows, the solved ones' rows
    split 55 to train, the rest to test: (labels, train rows, test rows)."""
    return _german_labels()


def train_labels(labels, rows):
    return TabularLabels(labels.X[rows], labels.cf[rows], labels.distance[rows])


def german_train_split():
    """German forest's world, its 55 training labels (``TabularLabels``) and the 15 held-out agents' rows."""
    world, _ = german_rejected()
    labels, train, test = german_mace_labels()
    return world, train_labels(labels, train), labels.X[test]


def threshold_world() -> TabularWorld:
    """One tree: accept iff float32(x0) > 5.5 (x0 in [0, 10], real); x1 an integer in [0, 9], unused."""
    schema = FeatureSchema((Feature("x0", "numeric", 0.0, 10.0), Feature("x1", "numeric", 0, 9, integer=True)))
    tree = Tree(np.array([1, -1, -1]), np.array([2, -1, -1]), np.array([0, 0, 0]), np.array([5.5, 0, 0]),
                np.array([0.0, 0.0, 1.0]), np.array([0.0, 1.0, 0.0]))
    return TabularWorld("toy/tree", schema, TreeEnsemble([tree], 2))


def toy_mlp_world(rng: np.random.Generator, D: int = 3) -> TabularWorld:
    """A random 2-layer ReLU MLP over D real features with mixed mutability."""
    from envs.models import MLPModel

    schema = FeatureSchema(tuple(Feature(f"f{j}", "numeric", 0, float(rng.integers(5, 50)),
                                         mutability=("free", "increase", "decrease")[j % 3]) for j in range(D)))
    sizes = [D, 6, 4, 1]
    weights = [rng.normal(0, 1, (a, b)) / np.sqrt(a) for a, b in zip(sizes[:-1], sizes[1:], strict=True)]
    weights[0] = weights[0] / np.array([f.upper for f in schema.features])[:, None] * 10  # unit-free inputs
    biases = [rng.normal(0, 0.5, b) for b in sizes[1:]]
    return TabularWorld("toy/piece", schema, MLPModel(weights, biases))


def split_crossings(edges, x):
    """(n, T) the value just across each split of one column from each of ``x`` (``polish.crossings``)."""
    t, u, lft = edges
    return np.where(t[None, :] >= x[:, None], lft[None, :], u[None, :])


def splits_back_each(t, u, lft, n_splits, xv, cv, cols, k, default):
    """``_split_back`` (the trade sweep's split give-back, compiled inside ``trade_round_kernel``) per entry."""
    return np.array([_split_back(t, u, lft, n_splits[c], c, x, v, k, d)
                     for x, v, c, d in zip(xv, cv, cols, default, strict=True)])


def moved_accepted(world, geo, X, seed):
    """The agents of ``X`` with answers that move each mutable numeric column (with chance 0.6)
    anywhere in its reachable box, projected, and only those the model accepts: (x, c)."""
    from learners.tabular.geometry import accepts

    rng = np.random.default_rng(seed)
    lo, hi = geo.box(X)
    num = geo.numeric & ~geo.fixed
    C = np.where(num & (rng.random(X.shape) < 0.6), lo + rng.random(X.shape) * (hi - lo), X)
    C = geo.project(X, C[:, None, :])[:, 0]
    ok = accepts(world, C)
    return X[ok], C[ok]
