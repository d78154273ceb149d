"""Tabular generators (learners/tabular/) and tabular experiments (evaluation/tabular_experiment.py)."""

import json

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from data_gen.classifiers import build
from data_gen.mace_labels import label_tabular
from envs.models import Tree, TreeEnsemble, split_limits
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
from solvers.mace import MACE
from solvers.mace.distance import distance as mace_distance


@pytest.fixture(scope="module")
def german():
    b = build("german", "forest")
    X = np.concatenate([b.data.X_train, b.data.X_test])
    neg = X[~b.world.accepts(X)]
    return b.world, neg[np.random.default_rng(0).permutation(len(neg))]


@pytest.fixture(scope="module")
def german_labels(german, tmp_path_factory):
    world, neg = german
    labels = label_tabular(world, neg[:70], MACE(backend="milp", norm="one"), tmp_path_factory.mktemp("lab"),
                           chunk_size=35, n_jobs=1, progress=False)
    ok = np.flatnonzero(labels.ok)
    return labels, ok[:55], ok[55:]


def _train(labels, rows):
    return TabularLabels(labels.X[rows], labels.cf[rows], labels.distance[rows])


def test_forest_descends_all_trees_like_each_tree(german):
    world, neg = german
    X = np.concatenate([neg[:50], neg[:50] + np.random.default_rng(1).normal(0, 3, (50, neg.shape[1]))])
    stacked = world.model.leaves(X)
    for j, tree in enumerate(world.model.trees):
        assert np.array_equal(stacked[:, j], tree.leaves(X))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.floats(0.1, 50.0))
def test_projection_never_breaks_a_constraint(german, seed, scale):
    world, neg = german
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(seed)
    X = neg[rng.integers(0, len(neg), 6)]
    C = X[:, None, :] + rng.normal(0, scale, (6, 5, X.shape[1]))  # wild proposals, also below/above the bounds
    P = geo.project(X, C)
    for k in range(P.shape[1]):
        assert not geo.violations(X, P[:, k]).any()
        assert not world.schema.mutability_violations(X, P[:, k]).any()



@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_compiled_projection_is_the_numpy_one_bit_for_bit(german, seed):
    """The compiled projection against the numpy it replaced, on proposals with NaN, infinities and
    tied one-hot entries (the first of a tie wins in both)."""
    world, neg = german
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(seed)
    X = neg[rng.integers(0, len(neg), 8)]
    C = X[:, None, :] + rng.normal(0, 1, (8, 6, X.shape[1])) * np.where(np.isfinite(geo.span), geo.span, 1.0) * 0.3
    C[rng.random(C.shape) < 0.05] = np.nan
    C[rng.random(C.shape) < 0.02] = np.inf
    C[rng.random(C.shape) < 0.02] = -np.inf
    for cols in geo.group_columns:
        C[:, :2, cols] = 0.5  # ties
    lo, hi = geo.box(X)
    R = np.clip(np.nan_to_num(C, nan=0.0), lo[:, None, :], hi[:, None, :])
    for cols in geo.group_columns:
        R[..., cols] = (np.arange(len(cols)) == R[..., cols].argmax(-1)[..., None]).astype(float)
    ints = geo.rounded
    d = R[..., ints] - X[:, None, ints]
    R[..., ints] = X[:, None, ints] + np.sign(d) * np.ceil(np.abs(d) - 1e-9)
    R = np.clip(R, lo[:, None, :], hi[:, None, :])
    np.testing.assert_array_equal(geo.project(X, C), R)

def test_geometry_distance_is_mace_distance(german):
    world, neg = german
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(0)
    X = neg[:5]
    C = geo.project(X, X[:, None, :] + rng.normal(0, 5, (5, 7, X.shape[1])))
    for norm in ("one", "zero", "infty"):
        geo = WorldGeometry.of(world, norm)
        for i in range(5):
            assert np.allclose(geo.distance(X[i], C[i]), mace_distance(world.schema, X[i], C[i], norm))


def _numpy_distance(geo, X, C):
    """The numpy formula the compiled ``deltas`` and ``distance`` replaced (the reference)."""
    diff = np.abs(C - X)
    d = np.zeros(diff.shape[:-1] + (geo.n_raw,))
    num = np.flatnonzero(geo.numeric)
    d[..., geo.raw_of_column[num]] = np.nan_to_num(diff[..., num] / geo.span[num])
    other = np.flatnonzero(~geo.numeric)
    to_raw = np.zeros((len(other), geo.n_raw))
    to_raw[np.arange(len(other)), geo.raw_of_column[other]] = 1.0
    d += ((diff[..., other] > 1e-9).astype(float) @ to_raw) > 0
    a, b, g = geo.weights
    return d, a * (d > 1e-12).sum(-1) + b * d.sum(-1) + g * d.max(-1, initial=0.0)


@pytest.mark.parametrize("cell", ["german", 5, 19])
def test_compiled_distance_is_the_numpy_formula_bit_for_bit(german, cell):
    """Ties between answers are broken by distance, so the compiled Eq. 3 must add in numpy's order
    (pairwise from 8 raw features on, eight sums from 16: German has 14, the toys 5 and 19),
    broadcast as numpy does."""
    world, neg = german if cell == "german" else (_toy_mlp_world(np.random.default_rng(0), D=cell), None)
    rng = np.random.default_rng(0)
    for norm in ("one", "zero", "infty"):
        geo = WorldGeometry.of(world, norm)
        X = neg[:6] if neg is not None else geo.lower + rng.random((6, len(geo.lower))) * (geo.upper - geo.lower)
        C = geo.project(X, X[:, None, :] + rng.normal(0, 3, (6, 9, X.shape[1])) * (rng.random((6, 9, X.shape[1])) < .4))
        for x, c in ((X[:, None, :], C), (X[0], C[0]), (X[:, None, :], C[:, :1])):
            want_d, want = _numpy_distance(geo, x, c)
            np.testing.assert_array_equal(geo.deltas(x, c), want_d)
            np.testing.assert_array_equal(geo.distance(x, c), want)
            assert geo.distance(x, c).shape == np.broadcast_shapes(x.shape, c.shape)[:-1]


@pytest.mark.parametrize("method", sorted(TABULAR_GENERATORS))
def test_answers_are_valid_and_never_beat_the_certificate(german, german_labels, method, tmp_path):
    world, _ = german
    labels, train, test = german_labels
    params = {"max_epochs": 5} if method in ("named_cfe", "change_value") else {}
    gen = build_tabular_generator(method, params).fit(world, _train(labels, train))
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


def _threshold_world() -> TabularWorld:
    """One tree: accept iff float32(x0) > 5.5 (x0 in [0, 10], real); x1 an integer in [0, 9], unused."""
    schema = FeatureSchema((Feature("x0", "numeric", 0.0, 10.0), Feature("x1", "numeric", 0, 9, integer=True)))
    tree = Tree(np.array([1, -1, -1]), np.array([2, -1, -1]), np.array([0, 0, 0]), np.array([5.5, 0, 0]),
                np.array([0.0, 0.0, 1.0]), np.array([0.0, 1.0, 0.0]))
    return TabularWorld("toy/tree", schema, TreeEnsemble([tree], 2))


def test_polish_reaches_the_known_optimum():
    """Brute force knows the nearest counterfactual: x0 just above 5.5, x1 unchanged."""
    world = _threshold_world()
    X_train = np.array([[1.0, 3.0], [2.0, 7.0], [4.0, 1.0]])
    CF_train = np.array([[9.0, 3.0], [8.0, 2.0], [7.5, 1.0]])  # far answers, and one changing x1 needlessly
    gen = NearestCfeGenerator(k=3).fit(world, TabularLabels(X_train, CF_train, np.ones(3)))
    X = np.array([[3.0, 4.0], [0.5, 9.0]])
    rec = gen.recommend(world, X)
    assert rec.found.all()
    for i in range(2):
        assert rec.CF[i, 1] == X[i, 1]  # the needless change was dropped
        assert np.float32(rec.CF[i, 0]) > 5.5  # accepted ...
        # ... exactly at the split: the smallest float64 sklearn's float32 test sends right of 5.5
        assert rec.CF[i, 0] == split_limits(5.5)[1]


def test_no_candidate_means_no_answer():
    world = _threshold_world()
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
    gen = NearestCfeGenerator().fit(world, _train(labels, train))
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


def _two_split_world() -> TabularWorld:
    """One tree on two real features in [0, 10]: accept iff x0 > 6 or (x0 > 3 and x1 > 7)."""
    schema = FeatureSchema((Feature("x0", "numeric", 0.0, 10.0), Feature("x1", "numeric", 0.0, 10.0)))
    # node 0: x0 <= 6 ? node 1 : leaf 2 (accept); node 1: x0 <= 3 ? leaf 3 (reject) : node 4
    # node 4: x1 <= 7 ? leaf 5 (reject) : leaf 6 (accept)
    left = np.array([1, 3, -1, -1, 5, -1, -1])
    right = np.array([2, 4, -1, -1, 6, -1, -1])
    feature = np.array([0, 0, 0, 0, 1, 0, 0])
    threshold = np.array([6.0, 3.0, 0, 0, 7.0, 0, 0])
    p1 = np.array([0, 0, 1, 0, 0, 0, 1.0])
    return TabularWorld("toy/two", schema, TreeEnsemble([Tree(left, right, feature, threshold, p1, 1 - p1)], 2))


def _brute_force(world, x, grid):
    """The nearest accepted point over a fine grid that holds every split crossing."""
    geo = WorldGeometry.of(world)
    P = np.array(np.meshgrid(grid, grid, indexing="ij")).reshape(2, -1).T
    P = P[accepts(world, P)]
    d = geo.distance(x, P)
    return d.min()


@settings(max_examples=30, deadline=None)
@given(x0=st.floats(0.0, 2.9), x1=st.floats(0.0, 6.9))
def test_change_value_reaches_the_brute_force_optimum(x0, x1):
    """Trained on a few MACE-like answers of a toy tree, the learned generator's grid over the
    predicted subsets and the exact edge sweep find the brute-force nearest counterfactual."""
    world = _two_split_world()
    rng = np.random.default_rng(0)
    X_train = np.column_stack([rng.uniform(0, 2.9, 40), rng.uniform(0, 6.9, 40)])
    to_x0 = np.column_stack([np.full(40, split_limits(6.0)[1]), X_train[:, 1]])
    to_both = np.column_stack([np.full(40, split_limits(3.0)[1]), np.full(40, split_limits(7.0)[1])])
    geo = WorldGeometry.of(world)
    CF = np.where((geo.distance(X_train, to_x0) <= geo.distance(X_train, to_both))[:, None], to_x0, to_both)
    gen = build_tabular_generator("change_value", {"max_epochs": 30, "hidden": [32, 32]}).fit(
        world, TabularLabels(X_train, CF, geo.distance(X_train, CF)))
    x = np.array([[x0, x1]])
    rec = gen.recommend(world, x)
    edges = np.concatenate([split_limits(t) for t in (3.0, 6.0, 7.0)])
    grid = np.unique(np.concatenate([np.linspace(0, 10, 101), edges, x[0]]))
    assert rec.found[0]
    assert rec.distance[0] <= _brute_force(world, x[0], grid) + 1e-12


def test_change_value_subsets_are_the_most_probable():
    gen = build_tabular_generator("change_value", {"top_features": 3, "top_subsets": 7})
    prob = np.array([[0.9, 0.1, 0.6, 0.01]])
    subs = gen.subsets(prob)[0]
    assert subs.shape == (7, 4) and not subs[:, 3].any()  # feature 3 is not among the top 3
    assert len({tuple(s) for s in subs}) == 7 and subs.any(1).all()
    q = np.clip(prob[0, :3], 1e-6, 1 - 1e-6)
    logp = [np.sum(np.where(s[:3], np.log(q), np.log1p(-q))) for s in subs]
    assert all(a >= b - 1e-12 for a, b in zip(logp, logp[1:], strict=False))
    assert tuple(subs[0]) == (True, False, True, False)


def test_change_value_rejects_bad_params():
    with pytest.raises(ValueError, match="top_features"):
        build_tabular_generator("change_value", {"top_features": 20})
    with pytest.raises(ValueError, match="top_subsets"):
        build_tabular_generator("change_value", {"top_subsets": 0})
    with pytest.raises(ValueError, match="scan_depth"):
        build_tabular_generator("change_value", {"scan_depth": 4})
    with pytest.raises(ValueError, match="scan_starts"):
        build_tabular_generator("change_value", {"scan_starts": 0})
    with pytest.raises(ValueError, match="scan_features"):
        build_tabular_generator("change_value", {"scan_features": -1})


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

    world = _threshold_world()
    geo = WorldGeometry.of(world)
    edge = split_limits(5.5)[1]  # the smallest value sklearn's float32 test sends right (accepted)
    xs = [v for v in np.linspace(0.0, 5.0, 20001) if v + (edge - v) != edge and not accepts(world, np.array([[v + (edge - v), 0.0]]))[0]]
    assert xs, "no agent value whose round trip misses the edge (the test needs one)"
    X = np.array([[xs[0], 3.0]])
    C = np.array([[edge, 3.0]])
    assert accepts(world, C).all()
    P = polish(world, geo, X, C)
    assert accepts(world, P).all() and P[0, 0] == edge


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
        gen = build_tabular_generator(method, params).fit(world, _train(labels, train))
        rec = gen.recommend(world, X)
        f = rec.found
        assert f.mean() > 0.5
        assert world.accepts(rec.CF[f]).all(), method
        assert all(v is None for v in codec.violations(X[f], rec.CF[f])), method


@settings(max_examples=40, deadline=None)
@given(w0=st.floats(0.5, 5.0), w1=st.floats(0.5, 5.0), need=st.floats(5.0, 60.0), start=st.integers(0, 1))
def test_trades_shorten_and_never_beat_the_brute_force_optimum(w0, w1, need, start):
    """Two integer features and a linear boundary: a trade gives one feature back and the other
    takes it up. The result is accepted, no farther than the start, and no nearer than the
    brute-force optimum over every integer point."""
    from envs.models import LinearModel
    from learners.tabular import trade_sweep

    schema = FeatureSchema((Feature("a", "numeric", 0, 20, integer=True), Feature("b", "numeric", 0, 40, integer=True)))
    world = TabularWorld("toy/linear", schema, LinearModel(np.array([w0, w1]), -need))
    geo = WorldGeometry.of(world)
    x = np.array([[0.0, 0.0]])
    grid = np.array(np.meshgrid(np.arange(21.0), np.arange(41.0), indexing="ij")).reshape(2, -1).T
    ok = accepts(world, grid)
    if not ok.any():
        return
    best = geo.distance(x, grid[ok]).min()
    # start from the accepted point that changes one feature only (the farther of the two if both exist)
    singles = [p for p in grid[ok] if (p == 0).sum() == 1]
    if not singles:
        return
    c = np.array([max(singles, key=lambda p: geo.distance(x, p[None])[0]) if start else singles[0]])
    out = trade_sweep(world, geo, x, c)
    assert accepts(world, out).all()
    assert geo.distance(x, out)[0] <= geo.distance(x, c)[0] + 1e-12
    assert geo.distance(x, out)[0] >= best - 1e-12


def test_a_trade_beats_the_coordinate_optimum():
    """3a + 2b >= 40 from (0, 0), b's span twice a's: (14, 0) cannot shrink along a alone (13 fails),
    yet giving a back and taking b up is nearer."""
    from envs.models import LinearModel
    from learners.tabular import trade_sweep

    schema = FeatureSchema((Feature("a", "numeric", 0, 20, integer=True), Feature("b", "numeric", 0, 40, integer=True)))
    world = TabularWorld("toy/linear", schema, LinearModel(np.array([3.0, 2.0]), -40.0))
    geo = WorldGeometry.of(world)
    x, c = np.array([[0.0, 0.0]]), np.array([[14.0, 0.0]])
    assert accepts(world, c).all() and not accepts(world, np.array([[13.0, 0.0]])).all()
    out = trade_sweep(world, geo, x, c)
    assert accepts(world, out).all() and geo.distance(x, out)[0] < geo.distance(x, c)[0]



def test_a_large_integer_change_is_traded_in_shares():
    """German MLP's case: a wide integer feature (an amount, span 10,000) changed by thousands of units
    where a narrow one (span 60) buys more score per unit of distance. Give-backs of 1-16 units free
    too little room to pay for one month; shares of the change do: from (9,100, 0) the trade lands
    within 10% of the brute-force optimum (45 months alone), the old steps alone stay at 1.2x."""
    from envs.models import LinearModel
    from learners.tabular import trade_sweep

    schema = FeatureSchema((Feature("amount", "numeric", 0, 10_000, integer=True),
                            Feature("months", "numeric", 0, 60, integer=True)))
    world = TabularWorld("toy/wide", schema, LinearModel(np.array([0.01, 2.0]), -90.0))
    geo = WorldGeometry.of(world)
    x, c = np.array([[0.0, 0.0]]), np.array([[9100.0, 0.0]])
    assert accepts(world, c).all()
    grid = np.array(np.meshgrid(np.arange(0.0, 10_001.0), np.arange(61.0), indexing="ij")).reshape(2, -1).T
    best = geo.distance(x, grid[accepts(world, grid)]).min()
    out = trade_sweep(world, geo, x, c)
    assert accepts(world, out).all()
    assert geo.distance(x, out)[0] <= best * 1.10


def test_forest_probabilities_are_sklearns_bit_for_bit():
    """The compiled descent (envs/tree_kernels.py) against sklearn itself, on rows that sit on the
    thresholds' float32 edges, where a cast or a comparison in the wrong precision flips a branch."""
    from sklearn.ensemble import RandomForestClassifier

    rng = np.random.default_rng(3)
    X = rng.normal(0, 1, (400, 5)) * [1, 10, 100, 1e4, 1e-3]
    y = (X[:, 0] + X[:, 1] / 10 + rng.normal(0, 0.5, 400) > 0).astype(int)
    est = RandomForestClassifier(n_estimators=7, max_depth=6, random_state=0).fit(X, y)
    model = TreeEnsemble.from_sklearn(est)
    t = np.concatenate([tr.threshold[tr.left >= 0] for tr in model.trees])
    f = np.concatenate([tr.feature[tr.left >= 0] for tr in model.trees])
    Z = np.repeat(X[:len(t)], 3, axis=0)
    for k, (ti, fi) in enumerate(zip(t, f, strict=True)):  # on, just below and just above each threshold
        Z[3 * k:3 * k + 3, fi] = [ti, np.nextafter(np.float32(ti), -np.inf), np.nextafter(np.float32(ti), np.inf)]
    np.testing.assert_array_equal(model.predict_proba(Z), est.predict_proba(Z)[:, 1])
    np.testing.assert_array_equal(model.predict(Z), est.predict(Z) == 1)
    np.testing.assert_array_equal(model.leaves(Z), np.stack([e.apply(Z.astype(np.float32)) for e in est.estimators_], 1))


def test_nearest_accepted_matches_a_loop():
    from learners.tabular.geometry import nearest_accepted

    world = _threshold_world()
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 2, (6, 2))
    T = rng.uniform(0, 10, (300, 2))
    own = rng.integers(0, 6, 300)
    d, idx = nearest_accepted(world, geo, X, T, own, k=3)
    ok = accepts(world, T)
    for i in range(6):
        mine = np.flatnonzero(ok & (own == i))
        want = np.sort(geo.distance(X[i][None], T[mine]))[:3]
        np.testing.assert_allclose(d[i][np.isfinite(d[i])], want)
        assert ((idx[i] >= 0) == np.isfinite(d[i])).all()
        live = idx[i][idx[i] >= 0]
        assert (own[live] == i).all() and ok[live].all()


def test_discrete_variants_are_every_reachable_value_once(german):
    """Every other reachable value of each discrete feature, alone, once, in agent order: the
    variants' rows are those of a brute force over every column set of each feature."""
    from learners.tabular.change_value import discrete_variants

    world, neg = german
    geo = WorldGeometry.of(world)
    x = neg[:5]
    V, owner = discrete_variants(geo, x)
    assert (np.diff(owner) >= 0).all()
    R = V.rows()
    lo, hi = geo.box(x)
    for i in range(len(x)):
        want = []  # brute force: each discrete raw feature at each of its other values, kept where reachable
        for j, kind in enumerate(geo.raw_kinds):
            cols = np.flatnonzero(geo.raw_of_column == j)
            if kind == "numeric":
                continue
            if kind == "group":
                options = [np.eye(len(cols))[k] for k in range(len(cols))]
            else:
                options = [np.array([v]) for v in range(int(geo.lower[cols[0]]), int(geo.upper[cols[0]]) + 1)]
            for v in options:
                r = x[i].copy()
                r[cols] = v
                if (r != x[i]).any() and (r >= lo[i]).all() and (r <= hi[i]).all():
                    want.append(r)
        mine = R[owner == i]
        np.testing.assert_array_equal(mine, np.array(want).reshape(-1, x.shape[1]))
        assert len(mine)
        d = geo.deltas(x[i][None], mine)
        assert ((d > 0).sum(1) == 1).all()  # one raw feature each
        assert not geo.violations(np.repeat(x[i][None], len(mine), 0), mine).any()  # reachable, groups one-hot
        assert len(np.unique(mine, axis=0)) == len(mine)
        # an immutable discrete feature never moves
        for j in (j for j, k in enumerate(geo.raw_kinds) if k != "numeric" and geo.fixed[geo.raw_of_column == j].all()):
            assert (d[:, j] == 0).all()
    assert V.cols.shape[1] <= 2  # a move changes one column, or two of a one-hot group


def test_room_levels_take_every_reachable_step_that_fits():
    """An integer feature with 3 steps within reach gets all 3 (a regression: the spread pick once
    returned the first step e times), and a real one e values over its whole reach, both ways."""
    from envs.models import LinearModel
    from learners.tabular.change_value import room_levels

    schema = FeatureSchema((Feature("a", "numeric", 0, 100, integer=True, mutability="increase"),
                            Feature("b", "numeric", 0, 10)))
    world = TabularWorld("toy/levels", schema, LinearModel(np.array([1.0, 1.0]), -5.0))
    geo = WorldGeometry.of(world)
    x = np.array([[50.0, 5.0]])
    out = room_levels(world, geo, x, np.array([0.035]), [(8, False)])[(8, False)][0]
    assert sorted(out[0][~np.isnan(out[0])]) == [51.0, 52.0, 53.0]  # increase-only: 3.5 steps of reach
    b = out[1][~np.isnan(out[1])]
    assert len(b) == 8 and (b < 5).any() and (b > 5).any() and np.abs(b - 5).max() <= 0.35 + 1e-9


def test_room_levels_of_integer_columns_are_every_step_within_reach():
    """All-integer columns (where only the steps within reach are built, not e each way) against a
    brute force: every integer step within reach and the box, ascending, spread over e where more."""
    from envs.models import LinearModel
    from learners.tabular.change_value import room_levels

    schema = FeatureSchema((Feature("a", "numeric", 0, 40, integer=True),
                            Feature("b", "numeric", 0, 9, integer=True, mutability="increase"),
                            Feature("c", "numeric", -5, 5, integer=True)))
    world = TabularWorld("toy/int-levels", schema, LinearModel(np.array([1.0, 1.0, 1.0]), -5.0))
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(0)
    X = np.stack([rng.integers(0, 41, 60), rng.integers(0, 10, 60), rng.integers(-5, 6, 60)], 1).astype(float)
    room = rng.uniform(0, 0.4, 60)
    lo, hi = geo.box(X)
    for e in (16, 40):  # at most 16 steps within reach (e: spread over, or all)
        out = room_levels(world, geo, X, room, [(e, False)])[(e, False)]
        for i in range(len(X)):
            for c in range(3):
                reach = room[i] * geo.span[c]
                ks = [k for k in range(-60, 61) if k and abs(k) <= reach + 1e-12]
                want = [X[i, c] + k for k in ks if lo[i, c] <= X[i, c] + k <= hi[i, c]]
                if len(want) > e:
                    want = [want[int(np.floor(j * len(want) / e))] for j in range(e)]
                got = out[i, c][~np.isnan(out[i, c])]
                assert list(got) == want, (e, i, c, got, want)


def test_change_value_refits_to_the_same_net(german, german_labels):
    """Seeded training is reproducible on one machine: the initial weights are seeded too (a refit
    once drew them from the global torch state and answered differently)."""
    world, neg = german
    labels, train, test = german_labels
    nets = [build_tabular_generator("change_value", {"max_epochs": 2}).fit(world, _train(labels, train), seed=3)
            for _ in range(2)]
    probs = [g._predict(neg[:20])[0] for g in nets]
    np.testing.assert_array_equal(probs[0], probs[1])


def test_combinations_within_are_every_winning_product_of_the_options(german, monkeypatch):
    """``combinations_within`` with no cap against a brute-force product: every combination of two or
    more numeric features at their option values (or unchanged) nearer than the budget, and no other;
    a cap keeps that many per agent, the farthest first."""
    import itertools

    from learners.tabular.change_value import combinations_within, room_levels
    from learners.tabular.polish import split_edges

    world, neg = german
    geo = WorldGeometry.of(world)
    X = neg[:4]
    best = np.array([0.02, 0.05, 0.03, 0.0])
    cols = [c for c in np.flatnonzero(geo.numeric & ~geo.fixed) if c in split_edges(world)]
    common = np.full((X.shape[1], 2), np.nan)
    common[cols[0]] = [X[:, cols[0]].max() + 1, np.nan]  # a value the training answers would lend
    lv0 = room_levels(world, geo, X, best / geo.weights[1], [(2, True)])[(2, True)]
    common[cols[1], 0] = lv0[0, cols[1], 0]  # and one that is also a crossing: tried once
    bounded, own_b = combinations_within(world, geo, X, best, 2, 10**9, common)
    monkeypatch.setattr(type(world.model), "score_bounds", lambda self, *a: None)  # the enumeration itself
    V, own = combinations_within(world, geo, X, best, 2, 10**9, common)
    rows = V.rows()
    d = geo.distance(X[own], rows)
    assert len(rows) > 10 and (d < best[own]).all()
    assert ((np.abs(rows - X[own]) > 1e-12).sum(1) >= 2).all()
    room = best / geo.weights[1]
    lv = room_levels(world, geo, X, room, [(2, True)])[(2, True)]
    for i in range(len(X)):
        opts = []
        for c in cols:
            o = [v for v in lv[i, c] if not np.isnan(v)]
            v = common[c, 0]
            lo, hi = geo.box(X[i:i + 1])
            if not np.isnan(v) and lo[0, c] <= v <= hi[0, c] and v != X[i, c] and abs(v - X[i, c]) <= room[i] * geo.span[c] + 1e-12:
                o.append(v)
            opts.append([X[i, c]] + o)
        want = set()
        for combo in itertools.product(*opts):
            r = X[i].copy()
            r[cols] = combo
            if (np.abs(r - X[i]) > 1e-12).sum() >= 2 and geo.distance(X[i], r) < best[i] - 1e-12:
                want.add(r.tobytes())
        assert {r.tobytes() for r in rows[own == i]} == want
        assert len(want) == (own == i).sum()  # each once: an option met again (a common value that is a crossing) adds no row
    assert not (own == 3).any()  # a zero budget: nothing can win
    accepted = world.accepts(rows)
    for i in range(len(X)):  # with the model's score bound: all of an agent's, or none where none is accepted
        got = {r.tobytes() for r in bounded.rows()[own_b == i]}
        assert got == {r.tobytes() for r in rows[own == i]} or (not got and not accepted[own == i].any())
    V2, own2 = combinations_within(world, geo, X, best, 2, 5, common)
    assert np.bincount(own2, minlength=4).max() <= 5 and len(own2)
    every = {(int(o), r.tobytes()) for o, r in zip(own, rows, strict=True)}
    assert {(int(o), r.tobytes()) for o, r in zip(own2, V2.rows(), strict=True)} <= every  # capped: some of the same
    far = geo.distance(X[own2], V2.rows())
    for i in np.unique(own2):  # the farther of the agent's combinations are kept
        assert far[own2 == i].mean() >= d[own == i].mean()


def test_combination_values_are_the_common_ones_then_the_neighbours(german, german_labels):
    """Per agent, ``_combo_values`` holds the training answers' most common values per column, then
    each value the answers of its nearest training agents move the column to; ``combinations_within``
    with the same values per agent (N, D, m) gives what the shared (D, m) gives, and with values met
    twice what it gives with each once."""
    from learners.tabular.change_value import _first_of_each, combinations_within

    world, neg = german
    labels, train, _ = german_labels
    gen = build_tabular_generator("change_value", {"max_epochs": 2, "combo_neighbours": 5}).fit(
        world, _train(labels, train), seed=0)
    X = neg[:6]
    vals = gen._combo_values(X)
    common = gen._common_values(int(gen.params.combo_common))
    near = gen._neighbours(X, 5)
    assert vals.shape == (len(X), X.shape[1], common.shape[1] + 5)
    for i in range(len(X)):
        for c in range(X.shape[1]):
            got = vals[i, c][~np.isnan(vals[i, c])]
            moved = np.abs(gen.CF_[near[i], c] - gen.X_[near[i], c]) > 1e-12
            want = set(common[c][~np.isnan(common[c])]) | set(gen.CF_[near[i], c][moved])
            assert set(got) == want
            k = int((~np.isnan(common[c])).sum())
            np.testing.assert_array_equal(vals[i, c, :k], common[c, :k])  # the common ones first, in order
    geo = WorldGeometry.of(world)
    best = np.full(len(X), 0.05)
    shared = combinations_within(world, geo, X, best, 2, 50, common)
    per_agent = combinations_within(world, geo, X, best, 2, 50, np.broadcast_to(common[None], (len(X),) + common.shape))
    np.testing.assert_array_equal(shared[1], per_agent[1])
    np.testing.assert_array_equal(shared[0].rows(), per_agent[0].rows())
    mine = combinations_within(world, geo, X, best, 2, 10**6, vals)[0].rows()
    assert len(mine) >= len(combinations_within(world, geo, X, best, 2, 10**6, common)[0].rows())
    once = _first_of_each(vals)
    assert np.isnan(once).sum() > np.isnan(vals).sum()  # some value was met twice
    np.testing.assert_array_equal(mine, combinations_within(world, geo, X, best, 2, 10**6, once)[0].rows())


def test_score_bounds_skip_only_rows_no_model_accepts(german, german_labels, monkeypatch):
    """The searches skip the boxes a forest's score bound rules out: the answers are the same as
    with no bound at all (every skipped row would have been rejected), on an MLP's interval bound too."""
    from data_gen.classifiers import build as build_cell
    from envs.models import MLPModel, TreeEnsemble

    world, neg = german
    labels, train, _ = german_labels
    gen = build_tabular_generator("change_value", {"max_epochs": 3}).fit(world, _train(labels, train), seed=0)
    mlp_world = build_cell("german", "mlp").world
    mlp_gen = build_tabular_generator("change_value", {"max_epochs": 3}).fit(mlp_world, _train(labels, train), seed=0)
    with_bound = [gen.recommend(world, neg[:30]).CF, mlp_gen.recommend(mlp_world, neg[:30]).CF]
    calls = []
    for cls in (TreeEnsemble, MLPModel):
        original = cls.score_bounds

        def spy(self, *a, _original=original):
            calls.append(1)
            return _original(self, *a)

        monkeypatch.setattr(cls, "score_bounds", spy)
    gen.recommend(world, neg[:30])
    mlp_gen.recommend(mlp_world, neg[:30])
    assert calls  # the bound was used
    for cls in (TreeEnsemble, MLPModel):
        monkeypatch.setattr(cls, "score_bounds", lambda self, *a: None)
    without = [gen.recommend(world, neg[:30]).CF, mlp_gen.recommend(mlp_world, neg[:30]).CF]
    for a, b in zip(with_bound, without, strict=True):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_region_step_reaches_the_l1_optimum_of_a_linear_model(seed):
    """On LR the linear piece is the whole model, so the fractional fill is the l1 optimum: it meets an
    LP's optimum (scipy's HiGHS) from any accepted start, and is accepted."""
    from scipy.optimize import linprog

    from envs.models import LinearModel
    from learners.tabular.geometry import MARGIN
    from learners.tabular.polish import region_step

    rng = np.random.default_rng(seed)
    D = 4
    schema = FeatureSchema(tuple(Feature(f"f{j}", "numeric", 0, float(rng.integers(5, 50)),
                                         mutability=("free", "increase", "decrease")[j % 3]) for j in range(D)))
    w = rng.normal(0, 1, D)
    world = TabularWorld("toy/region", schema, LinearModel(w, 0.0))
    geo = WorldGeometry.of(world)
    span = geo.span
    x = rng.uniform(0, 1, D) * span
    world.model.b = float(-(x @ w) - rng.uniform(0.1, 2.0))  # the agent is rejected by a margin
    lo, hi = geo.box(x[None])
    # an accepted start: the box corner the weights favour, if it is accepted
    start = np.where(w > 0, hi[0], lo[0])
    if start @ w + world.model.b < MARGIN * 10:
        return  # no recourse in the box
    R = region_step(world, geo, x[None], start[None], rounds=2)[0]
    # the LP: min sum |d_j| / span_j  s.t.  w . (x + d) + b >= margin, box; d = u - v, u, v >= 0
    c = np.concatenate([1 / span, 1 / span])
    A = -np.concatenate([w, -w])[None]
    res = linprog(c, A_ub=A, b_ub=[(x @ w) + world.model.b - MARGIN],
                  bounds=[(0, hi[0, j] - x[j]) for j in range(D)] + [(0, x[j] - lo[0, j]) for j in range(D)],
                  method="highs")
    assert res.status == 0
    got = (np.abs(R - x) / span).sum()
    assert world.model.score(R[None])[0] >= MARGIN
    assert got <= res.fun * (1 + 1e-5) + 1e-12


def _toy_mlp_world(rng: np.random.Generator, D: int = 3) -> TabularWorld:
    """A random 2-layer ReLU MLP over D real features with mixed mutability."""
    from envs.models import MLPModel

    schema = FeatureSchema(tuple(Feature(f"f{j}", "numeric", 0, float(rng.integers(5, 50)),
                                         mutability=("free", "increase", "decrease")[j % 3]) for j in range(D)))
    sizes = [D, 6, 4, 1]
    weights = [rng.normal(0, 1, (a, b)) / np.sqrt(a) for a, b in zip(sizes[:-1], sizes[1:], strict=True)]
    weights[0] = weights[0] / np.array([f.upper for f in schema.features])[:, None] * 10  # unit-free inputs
    biases = [rng.normal(0, 0.5, b) for b in sizes[1:]]
    return TabularWorld("toy/piece", schema, MLPModel(weights, biases))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_piece_lp_is_the_optimum_over_the_answers_piece(seed):
    """On a random ReLU MLP the LP's answer is accepted, never farther than the start, and no point of
    the start's linear piece that the model accepts is nearer (5,000 sampled points of the box, kept
    where every unit is on the start's side: a second route). Agents solved together (block-diagonal
    LPs) get what each gets alone."""
    from learners.tabular.geometry import MARGIN
    from learners.tabular.polish import piece_lp

    rng = np.random.default_rng(seed)
    world = _toy_mlp_world(rng)
    geo = WorldGeometry.of(world)
    model = world.model
    X = rng.uniform(0, 1, (40, 3)) * geo.span
    lo, hi = geo.box(X)
    S = np.stack([rng.uniform(lo[i], hi[i], (200, 3)) for i in range(len(X))])  # candidate starts per agent
    scores = model.score(S.reshape(-1, 3)).reshape(len(X), -1)
    rejected = model.score(X) < 0
    has = (scores >= 10 * MARGIN).any(1) & rejected
    if has.sum() < 2:
        return
    X, S, scores, lo, hi = X[has], S[has], scores[has], lo[has], hi[has]
    start = S[np.arange(len(X)), scores.argmax(1)]  # an accepted start far from the boundary
    together = piece_lp(world, geo, X, start)
    alone = np.stack([piece_lp(world, geo, X[i:i + 1], start[i:i + 1])[0] for i in range(len(X))])
    np.testing.assert_allclose(together, alone, rtol=1e-6, atol=1e-6 * geo.span.max())
    assert (model.score(together) >= MARGIN).all()
    d_start, d_lp = geo.distance(X, start), geo.distance(X, together)
    assert (d_lp <= d_start + 1e-12).all()

    def pattern(R):
        return np.concatenate([h > 0 for h in model.hidden(R)], 1)

    for i in range(len(X)):
        P = rng.uniform(lo[i], hi[i], (5000, 3))
        same = (pattern(P) == pattern(start[i:i + 1])).all(1) & (model.score(P) >= 2 * MARGIN)
        if same.any():
            assert geo.distance(X[i:i + 1], P[same]).min() >= d_lp[i] - 1e-6


def test_piece_lp_leaves_other_models_and_missing_answers_alone():
    """A tree ensemble has no linear pieces: answers come back as they were; a row without an answer
    (NaN) stays NaN."""
    from learners.tabular.polish import piece_lp

    rng = np.random.default_rng(0)
    world = _toy_mlp_world(rng)
    geo = WorldGeometry.of(world)
    X = rng.uniform(0, 1, (3, 3)) * geo.span
    C = X.copy()
    C[1] = np.nan
    out = piece_lp(world, geo, X, C)
    assert np.isnan(out[1]).all()
    tree_world = _threshold_world()
    tree_geo = WorldGeometry.of(tree_world)
    T = np.array([[2.0, 3.0], [9.0, 3.0]])
    np.testing.assert_array_equal(piece_lp(tree_world, tree_geo, np.array([[1.0, 3.0], [1.0, 3.0]]), T), T)


def test_a_start_near_the_margin_leaves_its_chunk_solvable():
    """An agent whose box holds no point scoring twice the margin (its start clears the margin only)
    cannot make the block LP it shares with other agents infeasible: the others are still solved,
    as each is alone, and that agent's start is kept or replaced only by an accepted, nearer point.
    An LR: score = f0 + f1 - 15, f0 may only rise (to 10), f1 only fall, so agent i's best score is
    its own f1 - 5."""
    from envs.models import LinearModel
    from learners.tabular.geometry import MARGIN
    from learners.tabular.polish import piece_lp

    schema = FeatureSchema((Feature("f0", "numeric", 0.0, 10.0, mutability="increase"),
                            Feature("f1", "numeric", 0.0, 10.0, mutability="decrease")))
    world = TabularWorld("toy/lr", schema, LinearModel(np.array([1.0, 1.0]), -15.0))
    geo = WorldGeometry.of(world)
    X = np.array([[0.0, 5.0 + 1.9 * MARGIN], [0.0, 8.0], [1.0, 9.0], [2.0, 7.5]])
    start = np.array([[10.0 - 0.4 * MARGIN, X[0, 1]], [10.0, 8.0], [10.0, 9.0], [10.0, 7.5]])
    assert MARGIN <= world.model.score(start[:1])[0] < 2 * MARGIN
    together = piece_lp(world, geo, X, start)
    alone = np.stack([piece_lp(world, geo, X[i:i + 1], start[i:i + 1])[0] for i in range(len(X))])
    np.testing.assert_allclose(together[1:], alone[1:], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(together[1:, 0], 15.0 - X[1:, 1], atol=1e-5)  # f0 rises just far enough
    assert world.model.score(together[:1])[0] >= MARGIN
    assert geo.distance(X[:1], together[:1])[0] <= geo.distance(X[:1], start[:1])[0] + 1e-12


def test_the_predictions_pieces_only_ever_shorten_answers(german, german_labels):
    """The LP over the network's predicted pieces (``piece_predicted``) keeps every answer valid and
    never farther than without it, and shortens some on an MLP."""
    from data_gen.classifiers import build as build_cell
    from learners.tabular.geometry import accepts

    world, neg = german
    labels, train, _ = german_labels
    mlp_world = build_cell("german", "mlp").world
    X = neg[:40]
    X = X[~accepts(mlp_world, X)]
    out = {}
    for k in (0, 1):
        gen = build_tabular_generator("change_value", {"max_epochs": 3, "piece_predicted": k}).fit(
            mlp_world, _train(labels, train), seed=0)
        out[k] = gen.recommend(mlp_world, X)
    assert (out[1].found == out[0].found).all()
    f = out[1].found
    assert accepts(mlp_world, out[1].CF[f]).all()
    assert (out[1].distance[f] <= out[0].distance[f] + 1e-12).all()


def _room_levels_numpy(world, geo, X, room, requests):
    """The numpy ``room_levels_compact`` of a tree ensemble that ``split_levels_kernel`` replaced (the
    reference the kernel must equal bit for bit)."""
    from learners.tabular.polish import padded_edges, split_edges

    N, D = X.shape
    edges = split_edges(world)
    cols = np.array([c for c in np.flatnonzero(geo.numeric & ~geo.fixed) if int(c) in edges], np.int64)
    out = {r: np.full((N, len(cols) + 1, r[0]), np.nan) for r in requests}
    lo, hi = geo.box(X)
    xc, loc, hic = X[:, cols, None], lo[:, cols, None], hi[:, cols, None]
    reach = (room[:, None] * geo.span[cols][None, :])[..., None]
    rnd = geo.rounded[cols]
    t, u, lft = padded_edges(world, cols)
    cand = np.where(t[None] >= xc, lft[None], u[None])
    gap = cand[:, rnd] - xc[:, rnd]
    cand[:, rnd] = xc[:, rnd] + np.sign(gap) * np.ceil(np.abs(gap) - 1e-9)
    ok = (cand >= loc) & (cand <= hic) & (cand != xc) & (np.abs(cand - xc) <= reach + 1e-12)
    for e, nearest in requests:
        order = np.argsort(np.where(ok, np.abs(cand - xc), np.inf), axis=-1, kind="stable") if nearest \
            else np.argsort(~ok, axis=-1, kind="stable")
        n_ok, ar = ok.sum(-1), np.arange(e)
        pick = np.broadcast_to(ar, (N, len(cols), e)) if nearest else \
            np.where((n_ok <= e)[..., None], ar, np.floor(ar * np.maximum(n_ok, 1)[..., None] / e).astype(np.int64))
        vals = np.take_along_axis(cand, np.take_along_axis(order, np.minimum(pick, cand.shape[-1] - 1), -1), -1)
        out[(e, nearest)][:, : len(cols), :] = np.where(ar < np.minimum(n_ok, e)[..., None], vals, np.nan)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_split_levels_are_the_numpy_ones_bit_for_bit(german, seed):
    """A forest's room levels (split crossings within reach, nearest first or spread by value) from
    the compiled kernel equal the numpy computation it replaced, for every request at once, with
    integer and real columns, rooms from none to past the box."""
    from learners.tabular.change_value import room_levels_compact

    world, neg = german
    rng = np.random.default_rng(seed)
    X = neg[rng.permutation(len(neg))[:60]]
    requests = [(544, True), (16, False), (32, False), (2, True), (5, False), (3, True)]
    toy = _threshold_world()  # a real-valued column (German's split columns are all integers)
    toy_x = np.column_stack([rng.uniform(0, 10, 40), rng.integers(0, 10, 40)]).astype(float)
    for w, x in ((world, X), (toy, toy_x)):
        g = WorldGeometry.of(w)
        r_room = rng.choice([0.0, 1e-3, 0.02, 0.1, 0.5, 3.0], len(x))
        got, _ = room_levels_compact(w, g, x, r_room, requests)
        want = _room_levels_numpy(w, g, x, r_room, requests)
        for r in requests:  # the kernel's arrays stop where no agent has more values
            w = got[r].shape[-1]
            assert w <= r[0] and np.isnan(want[r][..., w:]).all()
            np.testing.assert_array_equal(got[r], want[r][..., :w])
            assert np.isfinite(got[r]).any()
