"""benchmarks/forest_copy.py: the oracle's thresholds read from every tree, rows snapped to their cells scored as
before, a copy that cuts only on the forest's thresholds, the drawn rows inside each agent's box; its argument
check (the measurement itself is a benchmark)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import RandomForestClassifier

from benchmarks.forest_copy import drawn_rows, fit_copy, main, snap_to_cells, true_thresholds
from envs.models import from_sklearn
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular.geometry import WorldGeometry


def _forest(seed: int = 0):
    """A 10-tree forest of depth 4 on three numeric columns in [0, 100] (the third one integer-valued)."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(0, 100, 3000), rng.uniform(0, 100, 3000), rng.integers(0, 101, 3000)])
    y = (X[:, 0] + 0.5 * X[:, 1] - 0.3 * X[:, 2] + rng.normal(0, 8, 3000) > 60).astype(int)
    est = RandomForestClassifier(n_estimators=10, max_depth=4, random_state=seed).fit(X, y)
    return from_sklearn(est), X


def test_true_thresholds_are_every_split_of_every_tree():
    forest, _ = _forest()
    T = true_thresholds(forest)
    loop: dict[int, set[float]] = {}
    for t in forest.trees:
        for k in range(len(t.left)):
            if t.left[k] >= 0:
                loop.setdefault(int(t.feature[k]), set()).add(float(t.threshold[k]))
    assert sorted(T) == sorted(loop)
    for j, th in T.items():
        assert list(th) == sorted(loop[j])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_snapped_row_is_scored_as_before_and_the_copy_cuts_only_on_the_thresholds(seed):
    forest, X = _forest(seed)
    T = true_thresholds(forest)
    rng = np.random.default_rng(seed + 10)
    R = rng.uniform(0, 100, (4000, 3))
    R = np.concatenate([R, np.array([[th, 50.0, 50.0] for th in T.get(0, [])])])  # rows exactly on a threshold
    Xs = snap_to_cells(R, T)
    assert (forest.predict(Xs) == forest.predict(R)).all()
    assert (forest.predict_proba(Xs) == forest.predict_proba(R)).all()
    copy = fit_copy(R, forest.predict(R).astype(int), T, trees=60, leaves=15, seed=seed)
    for t in copy.trees:
        for k in np.flatnonzero(t.left >= 0):
            assert float(t.threshold[k]) in set(T[int(t.feature[k])].tolist())
    fresh = rng.uniform(0, 100, (3000, 3))
    assert (copy.predict(fresh) == forest.predict(fresh)).mean() > 0.95  # a copy, though not an exact one


def test_drawn_rows_stay_in_each_agents_box():
    schema = FeatureSchema((Feature("a", "numeric", 0.0, 100.0), Feature("b", "numeric", 0.0, 100.0),
                            Feature("n", "numeric", 0.0, 100.0, integer=True)))
    forest, _ = _forest()
    world = TabularWorld("toy/forest", schema, forest)
    geo = WorldGeometry.of(world)
    agents = np.array([[10.0, 20.0, 30.0], [50.0, 5.0, 7.0]])
    R = drawn_rows(geo, agents, np.array([[30.0, 0.0, -10.0], [0.0, 40.0, 20.0]]), 500, seed=0)
    assert R.shape == (1000, 3)
    lo, hi = geo.box(np.repeat(agents, 500, axis=0))
    assert ((R >= lo - 1e-9) & (R <= hi + 1e-9)).all()
    assert (R[:, 2] == np.round(R[:, 2])).all()
    assert (R != np.repeat(agents, 500, axis=0)).any(1).mean() > 0.8  # most rows move something


def test_bad_arguments_fail_before_any_work():
    with pytest.raises(SystemExit):
        main(["--per", "0"])
