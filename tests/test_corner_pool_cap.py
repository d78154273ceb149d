"""benchmarks/corner_pool_cap.py: the oracle's first accepted corner per pool, checked against a loop over each
agent's corners; its table; its argument check (the measurement itself is a benchmark)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import corner_pool_cap
from benchmarks.corner_pool_cap import main, pool_caps, report
from envs.models import LinearModel
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular.corners import nearest_corners
from learners.tabular.geometry import WorldGeometry

VOCAB = [np.array([30.0, 55.0, 70.0, 90.0]), np.array([20.0, 45.0, 65.0]), np.array([10.0, 60.0])]


def _world() -> TabularWorld:
    """Three numeric features in [0, 100]; accepts 2 x0 + x1 + x2 > 150."""
    schema = FeatureSchema(tuple(Feature(f"x{j}", "numeric", 0.0, 100.0) for j in range(3)))
    return TabularWorld("toy/sum", schema, LinearModel(np.array([2.0, 1.0, 1.0]), -150.0))


@pytest.mark.parametrize("cuts", [None, [np.array([50.0, 80.0]), np.array([40.0]), np.array([35.0])]])
def test_each_pool_takes_the_nearest_accepted_of_its_first_corners(monkeypatch, cuts):
    monkeypatch.setattr(corner_pool_cap, "BLOCK", 3)  # several blocks of agents
    world, geo = _world(), WorldGeometry.of(_world())
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(0, 40, 8), rng.uniform(0, 30, 8), rng.uniform(0, 30, 8)]).round(1)
    R, d = nearest_corners(geo, X, VOCAB, 80, cuts=cuts)
    mace_d = np.empty(len(X))
    for i in range(len(X)):  # "MACE": the nearest accepted corner of all, so a pool that holds it is exact
        yes = [j for j in range(R.shape[1]) if np.isfinite(d[i, j]) and world.accepts(R[i, j][None])[0]]
        mace_d[i] = d[i, yes[0]] if yes else 1.0
    ok = np.ones(len(X), bool)
    got = pool_caps(world, geo, X, mace_d, ok, VOCAB, [1, 4, 80], cuts)
    for p in (1, 4, 80):  # the second route: a loop over each agent's first p corners
        within, found = [], []
        for i in range(len(X)):
            yes = [j for j in range(p) if np.isfinite(d[i, j]) and world.accepts(R[i, j][None])[0]]
            found.append(bool(yes))
            within.append(bool(yes) and d[i, yes[0]] <= 1.01 * mace_d[i])
        assert got[str(p)] == {"within_1pct": float(np.mean(within)), "any": float(np.mean(found))}
    assert got["80"]["within_1pct"] == got["80"]["any"] > got["1"]["any"]


def test_the_table_has_a_column_per_pool():
    cells = [{"cell": "credit/forest", "pools": [256, 1000], "sets": {
        "fresh": {"agents": 400, "256": {"within_1pct": 0.588, "any": 0.627}, "1000": {"within_1pct": 0.715, "any": 0.78}}}}]
    text = report(cells, "python benchmarks/corner_pool_cap.py")
    assert "| cell | agents | 256 corners | 1,000 corners |" in text
    assert "| credit/forest | fresh (400) | 0.588 (0.627) | 0.715 (0.780) |" in text


def test_a_bad_pool_list_stops_the_run_before_any_work(tmp_path):
    with pytest.raises(SystemExit, match="--pools"):
        main(["--pools", "256,x", "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())
