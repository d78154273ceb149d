"""MD-PSO (solvers/pso.py): its objective's optimum on brute-forceable worlds, constraints, selection, errors."""

from __future__ import annotations

import numpy as np
import pytest
from blackbox_worlds import SCHEMA, rejected, toy_data, toy_world
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.ensemble import RandomForestClassifier

from envs.models import from_sklearn
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from solvers.mace.distance import deltas, distance_features
from solvers.pso import MDPSO, information_value, kmeans

MODELS = ("tree", "forest", "lr", "mlp")


@pytest.fixture(scope="module")
def worlds():
    return {k: toy_world(k) for k in MODELS}


def objective_optimum(world, x):
    """min over the accepted rows of D (all plausible points) of Gower + l0 / J, honouring mutability."""
    X = toy_data()
    ok = (world.model.predict_proba(X) > 0.5) & ~SCHEMA.mutability_violations(np.tile(x, (len(X), 1)), X)
    D = deltas(distance_features(SCHEMA), x, X[ok])
    return float((D.mean(1) + (D > 0).mean(1)).min())


@pytest.mark.parametrize("kind", MODELS)
def test_finds_its_objectives_optimum(worlds, kind):
    world = worlds[kind]
    pso = MDPSO().fit(world, toy_data())
    for x in rejected(world)[::29][:5]:
        got = pso.solve(world, x)
        assert got[0].found and got[0].valid
        D = deltas(distance_features(SCHEMA), x, got[0].final_state[None])
        assert float(D.mean() + (D > 0).mean()) == pytest.approx(objective_optimum(world, x), abs=1e-12)
        assert got[0].cost == pytest.approx(float(D.mean()))  # cost: the Gower distance (MACE's l1)
        assert got[0].extra["model_calls"] > 100  # one batched call per iteration, and a few more


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(age=st.integers(0, 4), edu=st.integers(0, 3), sex=st.integers(0, 1), income=st.integers(0, 5),
       job=st.integers(0, 2), kind=st.sampled_from(MODELS), seed=st.integers(0, 3),
       box=st.sampled_from(["relative", "absolute"]), sparsify=st.booleans())
def test_constraints_never_violated(worlds, age, edu, sex, income, job, kind, seed, box, sparsify):
    world = worlds[kind]
    x = np.array([age, edu, sex, income, *np.eye(3)[job]], float)
    pso = MDPSO(seed=seed, box=box, sparsify=sparsify, n_iterations=30).fit(world, toy_data())
    got = pso.solve(world, x)
    if not got[0].found or got[0].extra.get("reason") == "already_positive":
        return
    X = np.array([r.final_state for r in got])
    SCHEMA.validate(X)  # range and integers
    assert (X[:, 4:].sum(1) == 1).all()  # one job
    assert not SCHEMA.mutability_violations(np.tile(x, (len(X), 1)), X).any()
    assert (world.model.predict_proba(X) > 0.5).all()
    assert len({tuple(r) for r in X}) == len(X) <= 5
    assert [r.extra["rank"] for r in got] == list(range(len(got)))


def test_real_valued_world_and_the_box():
    rng = np.random.default_rng(0)
    X = rng.normal(10, 2, (400, 6))
    y = (X[:, 0] + X[:, 1] > 20.5).astype(int)
    lo, hi = X.min(0), X.max(0)
    schema = FeatureSchema(tuple(Feature(f"f{j}", "numeric", lo[j], hi[j]) for j in range(6)))
    world = TabularWorld("reals/forest", schema, from_sklearn(RandomForestClassifier(10, max_depth=4,
                                                                                      random_state=0).fit(X, y)))
    x = X[world.model.predict_proba(X) <= 0.5][0]
    for box, eps in (("relative", 0.2), ("absolute", 0.05)):
        got = MDPSO(box=box, epsilon=eps, proximity="mad").fit(world, X).solve(world, x)
        for r in got:
            z = (x - lo) / (hi - lo)
            s = (r.final_state - lo) / (hi - lo)
            half = eps * z if box == "relative" else eps
            assert np.all(np.abs(s - z) <= half + 1e-9)
    pso = MDPSO(active_features=2).fit(world, X)
    assert {r.name for r in pso.active(world, x)} == {"f0", "f1"}  # the model reads f0 + f1: highest IV


def test_information_value_and_kmeans():
    rng = np.random.default_rng(1)
    label = rng.random(1000) < 0.4
    assert information_value(label.astype(float) + rng.normal(0, 0.1, 1000), label) > 2.0
    assert information_value(rng.normal(size=1000), label) < 0.1
    pts = np.vstack([rng.normal(c, 0.1, (20, 2)) for c in (0, 5, 10)])
    labels = kmeans(pts, 3, rng)
    assert len(set(labels.tolist())) == 3
    assert all(len(set(labels[i * 20:(i + 1) * 20].tolist())) == 1 for i in range(3))


def test_already_positive_no_recourse_and_errors(worlds):
    world = worlds["forest"]
    X = toy_data()
    pso = MDPSO().fit(world, X)
    pos = X[world.model.predict_proba(X) > 0.5][0]
    got = pso.solve(world, pos)
    assert got[0].cost == 0.0 and got[0].extra["reason"] == "already_positive"
    frozen = FeatureSchema(tuple(Feature(f.name, f.kind, f.lower, f.upper, "immutable", f.categories, f.group,
                                         f.integer) for f in SCHEMA.features))
    stuck = TabularWorld("toy/frozen", frozen, world.model)
    got = MDPSO().fit(stuck, X).solve(stuck, rejected(world)[0])
    assert got[0].status == "no_recourse"
    with pytest.raises(ValueError, match="not fitted"):
        MDPSO().solve(world, X[0])
    with pytest.raises(ValueError, match="fitted on 'toy/forest'"):
        pso.solve(worlds["lr"], X[0])
    with pytest.raises(ValueError, match="expected 7 features"):
        pso.solve(world, X[0, :3])
    for params, msg in (({"n_particles": 0}, "n_particles"), ({"epsilon": 0}, "epsilon"), ({"box": "ball"}, "box"),
                        ({"proximity": "l2"}, "proximity"), ({"init": "zeros"}, "init"),
                        ({"active_features": 0}, "active_features"), ({"snap": 0.7}, "snap")):
        with pytest.raises(ValueError, match=msg):
            MDPSO(**params).fit(world, X)


def test_numeric_data_sets_load_as_worlds():
    from data_gen.loaders import load_data

    for name, columns in (("hill_valley", 100), ("arrhythmia", 279), ("lsvt", 312)):
        data = load_data(name)
        schema = data.encoder.schema
        assert len(schema) == columns and data.X_train.shape[1] == columns
        assert all(f.kind == "numeric" and f.mutability == "free" and not f.integer for f in schema.features)
        assert np.isfinite(data.X_train).all() and set(np.unique(data.y_train)) == {0, 1}
        schema.validate(data.X_test)


def test_coverage_loop_returns_k_counterfactuals(worlds):
    """A swarm too small and short to meet k counterfactuals keeps going (restarting) until it has k."""
    world = worlds["forest"]
    agents = rejected(world)[::31][:4]
    short = MDPSO(n_particles=3, n_iterations=1, max_iterations=1).fit(world, toy_data())
    looped = MDPSO(n_particles=3, n_iterations=1, max_iterations=400, restart_every=5).fit(world, toy_data())
    assert any(len([r for r in short.solve(world, x) if r.found]) < 5 for x in agents)
    for x in agents:
        got = looped.solve(world, x)
        assert len(got) == 5 and all(r.found and r.valid for r in got)
        assert len({tuple(r.final_state) for r in got}) == 5
        assert world.model.predict_proba(np.array([r.final_state for r in got])).min() > 0.5
        assert not SCHEMA.mutability_violations(np.tile(x, (5, 1)), np.array([r.final_state for r in got])).any()
        assert got[0].extra["iterations"] <= 400
    with pytest.raises(ValueError, match="restart_every"):
        MDPSO(restart_every=0).fit(world, toy_data())
