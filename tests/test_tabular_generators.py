"""Tabular generators (learners/tabular/) and tabular experiments (evaluation/tabular_experiment.py):
valid answers that never beat MACE's certificate, persistence, errors, experiments end to end,
fuzzed records. The searches' parts: test_change_value_search.py, test_tabular_polish.py,
test_geometry_kernels.py and the other kernel tests."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from envs.models import split_limits
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from evaluation.tabular_experiment import (
    evaluate_tabular,
    load_tabular_config,
    load_tabular_run,
    train_tabular,
)
from learners.tabular import (
    TABULAR_GENERATORS,
    NamedCfeTabularGenerator,
    NearestCfeGenerator,
    TabularGenerator,
    TabularLabels,
    WorldGeometry,
    accepts,
    build_tabular_generator,
)
from tests.tabular_worlds import german_mace_labels, german_rejected, threshold_world, train_labels


@pytest.fixture(scope="module")
def german():
    return german_rejected()


@pytest.fixture(scope="module")
def german_labels():
    return german_mace_labels()


@pytest.mark.parametrize("method", sorted(TABULAR_GENERATORS))
def test_answers_are_valid_and_never_beat_the_certificate(german, german_labels, method, tmp_path):
    world, _ = german
    labels, train, test = german_labels
    params = {"max_epochs": 5} if method in ("named_cfe", "change_value") else {}
    gen = build_tabular_generator(method, params).fit(world, train_labels(labels, train))
    X = labels.X[test]
    rec = gen.recommend(world, X)
    assert rec.found.mean() >= 0.8
    f = rec.found
    assert accepts(world, rec.CF[f]).all()
    assert not WorldGeometry.of(world).violations(X[f], rec.CF[f]).any()
    assert np.isnan(rec.CF[~f]).all() and np.isinf(rec.distance[~f]).all()
    # MACE's delta_min is a certified lower bound: no answer may be shorter
    assert (rec.distance[f] >= labels.delta_min[test][f] - 1e-9).all()
    assert (rec.distance[f] <= 1).all()
    # save / load without pickles gives the same answers
    gen.save(tmp_path / "m")
    again = TabularGenerator.load(tmp_path / "m")
    rec2 = again.recommend(world, X)
    assert np.array_equal(np.nan_to_num(rec.CF, nan=-7), np.nan_to_num(rec2.CF, nan=-7))
    alts = gen.recommend(world, X[:3], n_alternatives=2).alternatives
    assert alts.shape == (3, 2, X.shape[1])
    some = ~np.isnan(alts).any(-1)
    assert accepts(world, alts[some]).all()
    none = gen.recommend(world, X[:0], n_alternatives=2)  # a batch of no agents: empty answers, no error
    assert none.CF.shape == (0, X.shape[1]) and none.alternatives.shape == (0, 2, X.shape[1]) and not len(none.found)
    with pytest.raises(ValueError, match="encoded columns"):
        gen.recommend(world, X[:0, :-1])


def test_no_candidate_means_no_answer():
    world = threshold_world()
    schema = FeatureSchema((Feature("x0", "numeric", 0.0, 10.0, "decrease"), Feature("x1", "numeric", 0, 9, integer=True)))
    frozen = TabularWorld("toy/frozen", schema, world.model)
    gen = NearestCfeGenerator().fit(frozen, TabularLabels(np.array([[1.0, 0.0]]), np.array([[6.0, 0.0]]), np.ones(1)))
    rec = gen.recommend(frozen, np.array([[2.0, 0.0]]))  # x0 may only decrease: no reachable acceptance
    assert not rec.found[0] and np.isnan(rec.CF[0]).all()


def test_bad_input_names_the_problem(german, german_labels):
    world, _ = german
    labels, train, _ = german_labels
    with pytest.raises(ValueError, match="unknown hyperparameter"):
        NearestCfeGenerator(kk=3)
    with pytest.raises(ValueError, match="k: must be >= 1"):
        NearestCfeGenerator(k=0)
    with pytest.raises(ValueError, match="unknown tabular generator"):
        build_tabular_generator("nope")
    gen = NearestCfeGenerator().fit(world, train_labels(labels, train))
    with pytest.raises(ValueError, match="X: expected"):
        gen.recommend(world, labels.X[:2, :-1])
    with pytest.raises(ValueError, match="no solved training agents"):
        NamedCfeTabularGenerator().fit(world, TabularLabels(labels.X[:0], labels.cf[:0], labels.distance[:0]))


def _tiny_config(tmp_path):
    cfg = {"name": "tiny", "output_dir": str(tmp_path), "tabular": {
        "dataset": "german", "model": "tree", "agents": 40, "mace": {"time_limit": 10},
        "compute": {"n_workers": 1}, "geco_agents": 3},
        "generators": [{"method": "named_cfe", "params": {"max_epochs": 3}}, {"method": "nearest_cfe"}]}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_experiment_trains_evaluates_and_loads(tmp_path):
    cfg = load_tabular_config(_tiny_config(tmp_path))
    run_dir = train_tabular(cfg, progress=False)
    metrics = evaluate_tabular(run_dir, progress=False)
    for name in ("named_cfe", "nearest_cfe"):
        g = metrics["generators"][name]
        assert g["validity"] == 1.0 and g["coverage"] > 0.5 and g["us_per_agent_batched"] > 0
    assert "GeCo" in (run_dir / "report.md").read_text()
    run = load_tabular_run(run_dir)
    assert list(run.generators) == ["named_cfe", "nearest_cfe"] and run.mace_params["norm"] == "one"
    labels = run.labels()
    train, test = run.split()
    assert not set(train) & set(test) and len(train) + len(test) == len(labels)
    # a changed model file is refused at load
    model = run_dir / "world" / "model.json"
    d = json.loads(model.read_text())
    d["trees"][0]["threshold"][0] += 1.0
    model.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="fingerprint"):
        load_tabular_run(run_dir)


@pytest.mark.parametrize("patch, message", [
    ({"tabular": {"dataset": "mnist", "model": "tree"}}, "tabular.dataset"),
    ({"tabular": {"dataset": "german", "model": "tree", "agents": 3}}, "tabular.agents"),
    ({"generators": [{"method": "nearest_cfe"}, {"method": "nearest_cfe"}]}, "model names must differ"),
    ({"generators": [{"method": "nearest_cfe", "params": {"k": 0}}]}, "generators.0.params"),
    ({"generators": [{"method": "gan"}]}, "generators.0.method"),
])
def test_config_errors_name_the_field(tmp_path, patch, message):
    base = yaml.safe_load(_tiny_config(tmp_path).read_text())
    base.update(patch)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(base))
    with pytest.raises(ValueError, match=message):
        load_tabular_config(path)


def test_experiment_adds_generated_training_agents(tmp_path):
    """Generated agents add MACE labels to training only; held-out agents stay real rows, and a rerun
    reuses the generated labels (same key), while a changed setting gets a new key."""
    path = _tiny_config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["tabular"].update(generated_agents=12, agents=20)
    raw["generators"] = [{"method": "change_value", "params": {"max_epochs": 3}}, {"method": "nearest_cfe"}]
    path.write_text(yaml.safe_dump(raw))
    run_dir = train_tabular(load_tabular_config(path), progress=False)
    from data_gen.mace_labels import MaceLabelSet

    gen = MaceLabelSet.load(run_dir / "labels_generated")
    assert len(gen) == 12
    real = load_tabular_run(run_dir).labels()
    train, test = load_tabular_run(run_dir).split()
    assert {r.tobytes() for r in gen.X}.isdisjoint({r.tobytes() for r in real.X})  # never a real (held-out) row
    fit = json.loads((run_dir / "models" / "change_value" / "fit.json").read_text())
    assert fit["train_agents"] == int(real.ok[train].sum() + gen.ok.sum())
    chunks = sorted((run_dir / "labels_generated").glob("chunks_*"))
    assert len(chunks) == 1
    raw["tabular"]["generated_numeric_scale"] = 0.1
    path.write_text(yaml.safe_dump(raw))
    train_tabular(load_tabular_config(path), progress=False)
    assert len(sorted((run_dir / "labels_generated").glob("chunks_*"))) == 2


def test_polish_never_returns_an_unprobed_point():
    """x + (c - x) can miss c's last bit. A candidate exactly at the split's edge, whose scaled copy
    at scale 1 falls back across the split, once came back from the polish unverified (served as
    generator_invalid)."""
    from learners.tabular import polish

    world = threshold_world()
    geo = WorldGeometry.of(world)
    edge = split_limits(5.5)[1]  # the smallest value sklearn's float32 test sends right (accepted)
    xs = [v for v in np.linspace(0.0, 5.0, 20001) if v + (edge - v) != edge and not accepts(world, np.array([[v + (edge - v), 0.0]]))[0]]
    assert xs, "no agent value whose round trip misses the edge (the test needs one)"
    X = np.array([[xs[0], 3.0]])
    C = np.array([[edge, 3.0]])
    assert accepts(world, C).all()
    P = polish(world, geo, X, C)
    assert accepts(world, P).all() and P[0, 0] == edge


@pytest.mark.slow
def test_fuzzed_rejected_records_get_only_accepted_answers(german, german_labels):
    """Random records within the schema (what a fuzzer sends), rejected by the model: every answer
    a generator gives is accepted by the model and breaks no constraint (issue 40)."""
    from serving.records import RecordCodec

    world, _ = german
    labels, train, _ = german_labels
    rng = np.random.default_rng(3)
    lo, hi = (np.asarray(b, float) for b in world.schema.bounds())
    X = lo + rng.random((3000, len(lo))) * (hi - lo)
    integral = np.array([f.integer or f.kind in ("binary", "ordinal", "categorical") for f in world.schema.features])
    X[:, integral] = np.round(X[:, integral])
    for cols in world.groups().values():
        X[:, cols] = np.eye(len(cols))[rng.integers(len(cols), size=len(X))]
    X = X[~world.accepts(X)][:1000]
    codec = RecordCodec(world.encoder, "one")
    for method in sorted(TABULAR_GENERATORS):
        params = {"max_epochs": 3} if method in ("named_cfe", "change_value") else {}
        gen = build_tabular_generator(method, params).fit(world, train_labels(labels, train))
        rec = gen.recommend(world, X)
        f = rec.found
        assert f.mean() > 0.5
        assert world.accepts(rec.CF[f]).all(), method
        assert all(v is None for v in codec.violations(X[f], rec.CF[f])), method


def test_change_value_refits_to_the_same_net(german, german_labels):
    """Seeded training is reproducible on one machine: the initial weights are seeded too (a refit
    once drew them from the global torch state and answered differently)."""
    world, neg = german
    labels, train, test = german_labels
    nets = [build_tabular_generator("change_value", {"max_epochs": 2}).fit(world, train_labels(labels, train), seed=3)
            for _ in range(2)]
    probs = [g._predict(neg[:20])[0] for g in nets]
    np.testing.assert_array_equal(probs[0], probs[1])


def test_an_answer_that_breaks_a_rule_is_never_counted_optimal():
    """``score_answers``: a row as near as MACE's optimum that the model refuses, or whose integer column is
    fractional, is not valid, so it is not optimal either; the valid one at the optimum is."""
    from evaluation.tabular_experiment import score_answers

    world = threshold_world()  # accept iff x0 > 5.5; x1 an integer
    x0 = float(split_limits(5.5)[1])  # the first value past the split
    X = np.array([[5.0, 3.0], [5.0, 3.0], [5.0, 3.4]])
    CF = np.array([[x0, 3.0], [5.0, 3.0], [x0, 3.4]])  # valid; refused (the agent itself); x1 fractional
    mace_d = WorldGeometry.of(world, "one").distance(X[:1], CF[:1]).repeat(3)
    m = score_answers(world, X, CF, np.ones(3, bool), mace_d, np.ones(3, bool), "one")
    assert m["validity"] == pytest.approx(1 / 3)
    assert m["optimal_share"] == pytest.approx(1 / 3)
