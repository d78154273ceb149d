"""envs.imported_trees: a user's fitted tree model behind a scaler, as an exact white box.

Every family (DecisionTree, RandomForest, ExtraTrees, GradientBoosting, HistGradientBoosting,
XGBoost, LightGBM) is fitted on the scaled columns of a small table and read back over the raw
encoded columns through a hand-built InputMap; its decision must be the library's ``predict`` on
thousands of random rows and on rows at and next to every split point, and MACE's certified l1
distance the brute-force optimum.
"""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest
from sklearn.ensemble import (
    ExtraTreesClassifier,
    GradientBoostingClassifier,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
)
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from envs.imported_trees import from_fitted
from envs.input_map import InputColumn, InputMap
from envs.models import TreeEnsemble, WhiteBoxModel, model_from_dict
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from envs.tree_parsers import LGBM_ZERO
from solvers.mace import MACE, distance

SKLEARN = ("dt", "rf", "et", "gb", "hgb")
BOOSTERS = ("xgb", "lgbm")
FAMILIES = SKLEARN + BOOSTERS
optional = pytest.mark.optional  # XGBoost and LightGBM are not dependencies of the package


def _estimator(family: str, small: bool = False):
    n = 8 if small else 30
    if family == "dt":
        return DecisionTreeClassifier(max_depth=4 if small else 7, random_state=0)
    if family == "rf":
        return RandomForestClassifier(n // 2, max_depth=3 if small else 6, random_state=0)
    if family == "et":
        return ExtraTreesClassifier(n // 2, max_depth=3 if small else 6, random_state=0)
    if family == "gb":
        return GradientBoostingClassifier(n_estimators=n, max_depth=3, random_state=0)
    if family == "hgb":
        return HistGradientBoostingClassifier(max_iter=n, max_depth=3 if small else None, random_state=0)
    if family == "xgb":
        xgb = pytest.importorskip("xgboost")
        return xgb.XGBClassifier(n_estimators=n, max_depth=3 if small else 4, n_jobs=1, random_state=0)
    lgb = pytest.importorskip("lightgbm")
    return lgb.LGBMClassifier(n_estimators=n, num_leaves=8 if small else 15, min_child_samples=5, n_jobs=1,
                              verbose=-1, random_state=0)


def _marks(families):
    return [pytest.param(f, marks=optional) if f in BOOSTERS else f for f in families]


def _standard(m: float, s: float):
    return lambda x: (np.asarray(x, np.float64) - m) / s  # StandardScaler.transform's arithmetic


def _minmax(lo: float, hi: float):
    scale = 1.0 / (hi - lo)
    return lambda x: np.asarray(x, np.float64) * scale - lo * scale  # MinMaxScaler.transform's arithmetic


def _input_map(X: np.ndarray, scaled: list[int], minmax: list[int]) -> InputMap:
    """A ColumnTransformer by hand: standard-scaled and min-max-scaled numeric columns, the rest passed
    through, plus one constant input (a category the world never holds)."""
    cols = []
    for j in scaled:
        m, s = float(X[:, j].mean()), float(X[:, j].std())
        cols.append(InputColumn(f"std__{j}", j, _standard(m, s), 1 / s, -m / s))
    for j in minmax:
        lo, hi = float(X[:, j].min()), float(X[:, j].max())
        cols.append(InputColumn(f"mm__{j}", j, _minmax(lo, hi), 1 / (hi - lo), -lo / (hi - lo)))
    cols += [InputColumn(f"pass__{j}", j) for j in range(X.shape[1]) if j not in scaled + minmax]
    cols.append(InputColumn("cat__never", -1, const=0.0))
    return InputMap(tuple(cols), X.shape[1])


# ------------------------------------------------------------------------------- the continuous table

def _table(n: int = 1500, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(0, 100, n), 1e6 + rng.uniform(0, 40, n), rng.normal(0, 1e-3, n),
                         rng.integers(0, 6, n), rng.integers(0, 2, n)]).astype(float)
    z = (X[:, 0] - 50) / 20 + (X[:, 1] - 1e6 - 20) / 10 + X[:, 2] * 800 + 0.3 * X[:, 3] - X[:, 4]
    return X, (z + rng.normal(0, 0.7, n) > 0).astype(int)


@pytest.fixture(scope="module")
def fitted() -> dict:
    X, y = _table()
    imap = _input_map(X, scaled=[0, 1, 2], minmax=[3])
    Z = imap.transform(X)
    out = {"X": X, "imap": imap}
    for f in FAMILIES:
        try:
            out[f] = _estimator(f).fit(Z, y)
        except pytest.skip.Exception:
            pass
    return out


def _model(fitted: dict, family: str):
    if family not in fitted:
        pytest.skip(f"{family}: library not installed")
    return fitted[family], from_fitted(fitted[family], fitted["imap"])


def _boundary_rows(model: TreeEnsemble, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """For every split node, a random row with the node's column at U, at its successor L and at
    U's predecessor: the rows where a wrong split point would show."""
    rows = []
    for t in model.trees:
        U, L = t.limits()
        for k in np.flatnonzero(t.left >= 0):
            for v in (U[k], L[k], np.nextafter(U[k], -np.inf)):
                r = X[rng.integers(len(X))].copy()
                r[t.feature[k]] = v
                rows.append(r)
    return np.array(rows)


@pytest.mark.parametrize("family", _marks(FAMILIES))
def test_white_box_is_the_librarys_predict(fitted, family):
    est, model = _model(fitted, family)
    X, imap = fitted["X"], fitted["imap"]
    rng = np.random.default_rng(1)
    wide = np.column_stack([rng.uniform(-20, 120, 4000), 1e6 + rng.uniform(-5, 45, 4000), rng.normal(0, 2e-3, 4000),
                            rng.integers(0, 6, 4000), rng.integers(0, 2, 4000)]).astype(float)
    rows = np.vstack([X, wide, _boundary_rows(model, X, rng)])
    assert len(rows) > 5000
    native = est.predict(imap.transform(rows)) == 1
    mine = model.predict(rows)
    score = model.score(rows)
    wrong = native != mine
    assert not np.any(wrong & (np.abs(score) > model.tolerance)), f"{wrong.sum()} rows disagree"
    assert model.splits == "float64" and model.n_features == X.shape[1]
    if family in ("gb", "hgb", "lgbm"):  # the margin itself, bit for bit
        Z = imap.transform(rows)
        raw = est.predict(Z, raw_score=True) if family == "lgbm" else est.decision_function(Z)
        np.testing.assert_array_equal(score, raw)
    if family in ("dt", "rf", "et"):
        np.testing.assert_array_equal(model.predict_proba(rows), est.predict_proba(imap.transform(rows))[:, 1])
    if family == "xgb":  # XGBoost's float32 sums, bit for bit; only its sigmoid's band near 0 is left
        np.testing.assert_array_equal(score, est.predict(imap.transform(rows), output_margin=True))
        assert model.float32_sums and model.tolerance == 2.0 ** -22 and 0 < model.sum_error < 1e-4


@pytest.mark.parametrize("family", _marks(FAMILIES))
def test_json_round_trip_and_kernels(fitted, family, tmp_path):
    _, model = _model(fitted, family)
    X = fitted["X"][:300]
    path = tmp_path / "model.json"
    model.save(path)
    back = WhiteBoxModel.load(path)
    assert isinstance(back, TreeEnsemble) and back.boosted == model.boosted and back.tolerance == model.tolerance
    assert back.model_class == ("boosted" if family in ("gb", "hgb", "xgb", "lgbm") else
                                "tree" if family == "dt" else "forest")
    np.testing.assert_array_equal(back.score(X), model.score(X))
    # variant rows and box bounds run the same compiled kernels on float64 rows
    rng = np.random.default_rng(2)
    index = rng.integers(0, len(X), 500)
    cols = np.stack([rng.integers(0, 3, 500), np.full(500, -1)], axis=1)
    vals = np.stack([rng.uniform(-1, 1, 500) * np.array([100, 1e6, 1e-3])[cols[:, 0]], np.zeros(500)], axis=1)
    rows = X[index].copy()
    rows[np.arange(500), cols[:, 0]] = vals[:, 0]
    np.testing.assert_array_equal(model.score_variants(X, index, cols, vals), model.score(rows))
    leaves = model.leaves(rows)
    assert leaves.shape == (500, len(model.trees))
    lo, hi = np.minimum(vals[:, :1], X[index, cols[:, 0]][:, None]), np.maximum(vals[:, :1], X[index, cols[:, 0]][:, None])
    bound = model.score_bounds(X[index], cols[:, :1], lo, hi)
    slack = 0.0 if model.boosted else 1e-12  # a forest's bound sums P(1) - P(0), its score P(1) and P(0) apart
    assert np.all(bound >= model.score(rows) - slack) and np.all(bound >= model.score(X[index]) - slack)


def test_identity_map_keeps_sklearns_float32_trees():
    """A model of the project's own (no scaler) comes back exactly as TreeEnsemble.from_sklearn gives it."""
    X, y = _table(400)
    est = RandomForestClassifier(5, max_depth=5, random_state=0).fit(X, y)
    model = from_fitted(est)
    assert model.splits == "float32" and not model.boosted
    assert json.dumps(model.to_dict()) == json.dumps(TreeEnsemble.from_sklearn(est).to_dict())  # old JSON as it was


def test_boosted_model_needs_no_new_keys_when_plain():
    """The JSON of an existing forest has no key it did not have (saved runs load as before)."""
    X, y = _table(200)
    d = TreeEnsemble.from_sklearn(RandomForestClassifier(3, max_depth=3, random_state=0).fit(X, y)).to_dict()
    assert set(d) == {"n_features", "trees"}
    back = model_from_dict({"kind": "tree_ensemble", **d})
    assert not back.boosted and back.splits == "float32" and back.exact


# --------------------------------------------------------------------------------------- errors

def test_clear_errors():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y3 = rng.integers(0, 3, 300)
    for est in (RandomForestClassifier(3, max_depth=2), GradientBoostingClassifier(n_estimators=3),
                HistGradientBoostingClassifier(max_iter=3)):
        with pytest.raises(ValueError, match=f"{type(est).__name__}: 3 classes"):
            from_fitted(est.fit(X, y3))
    with pytest.raises(ValueError, match="no tree white box for DecisionTreeRegressor"):
        from_fitted(DecisionTreeRegressor(max_depth=2).fit(X, X[:, 0]))
    y = (X[:, 0] > 0).astype(int)
    est = DecisionTreeClassifier(max_depth=2).fit(X, y)
    with pytest.raises(ValueError, match="input_map: 2 columns, but the DecisionTreeClassifier reads 3"):
        from_fitted(est, InputMap.identity(["a", "b"]))
    Xc = np.column_stack([X[:, :2], rng.integers(0, 4, 300)])
    hgb = HistGradientBoostingClassifier(max_iter=5, categorical_features=[2]).fit(Xc, (Xc[:, 2] == 1).astype(int))
    with pytest.raises(ValueError, match="HistGradientBoostingClassifier: tree 0 has a categorical split"):
        from_fitted(hgb)
    with pytest.raises(ValueError, match="positive"):
        from_fitted(est, positive="yes")


@optional
def test_booster_errors():
    xgb = pytest.importorskip("xgboost")
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y3 = rng.integers(0, 3, 300)
    with pytest.raises(ValueError, match="XGBClassifier: 3 classes"):
        from_fitted(xgb.XGBClassifier(n_estimators=2, n_jobs=1).fit(X, y3))
    with pytest.raises(ValueError, match="Booster: objective 'multi:softprob'"):
        from_fitted(xgb.XGBClassifier(n_estimators=2, n_jobs=1).fit(X, y3).get_booster())
    with pytest.raises(ValueError, match="LGBMClassifier: 3 classes"):
        from_fitted(lgb.LGBMClassifier(n_estimators=2, verbose=-1).fit(X, y3))
    with pytest.raises(ValueError, match="Booster: objective 'multiclass"):
        from_fitted(lgb.LGBMClassifier(n_estimators=2, verbose=-1).fit(X, y3).booster_)
    Xc = np.column_stack([X[:, :2], rng.integers(0, 4, 300)])
    yc = (Xc[:, 2] == 1).astype(int)
    with pytest.raises(ValueError, match="LGBMClassifier: a categorical split"):
        from_fitted(lgb.LGBMClassifier(n_estimators=3, min_child_samples=5, verbose=-1)
                    .fit(Xc, yc, categorical_feature=[2]))
    with pytest.raises(ValueError, match="regression"):
        from_fitted(lgb.LGBMRegressor(n_estimators=2, verbose=-1).fit(X, X[:, 0]).booster_)


@optional
def test_boosters_without_the_sklearn_wrapper():
    """A bare Booster reads the same as its classifier (no early stopping here)."""
    xgb = pytest.importorskip("xgboost")
    lgb = pytest.importorskip("lightgbm")
    X, y = _table(600)
    for est in (xgb.XGBClassifier(n_estimators=10, max_depth=3, n_jobs=1).fit(X, y),
                lgb.LGBMClassifier(n_estimators=10, verbose=-1, n_jobs=1).fit(X, y)):
        booster = est.get_booster() if hasattr(est, "get_booster") else est.booster_
        a, b = from_fitted(est), from_fitted(booster)
        np.testing.assert_array_equal(a.score(X), b.score(X))
        assert np.array_equal(a.predict(X), est.predict(X) == 1)


@optional
def test_xgboost_early_stopping_uses_the_best_iteration():
    xgb = pytest.importorskip("xgboost")
    X, y = _table(800)
    est = xgb.XGBClassifier(n_estimators=60, max_depth=3, learning_rate=0.5, early_stopping_rounds=3, n_jobs=1)
    est.fit(X[:600], y[:600], eval_set=[(X[600:], y[600:])], verbose=False)
    model = from_fitted(est)
    assert len(model.trees) == est.best_iteration + 1 < 60
    wrong = (est.predict(X) == 1) != model.predict(X)
    assert not np.any(wrong & (np.abs(model.score(X)) > model.tolerance))


@optional
def test_lightgbm_reads_tiny_inputs_as_zero_and_missing_zero_splits():
    """LightGBM reads |z| <= 1e-35 as 0, and a 'Zero' missing type sends 0 the default way: crafted
    one-split models, every threshold and direction, against the library on values around 0."""
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 2))
    base = lgb.train({"objective": "binary", "num_leaves": 2, "verbose": -1, "min_data_in_leaf": 5},
                     lgb.Dataset(X, (X[:, 0] > 0).astype(int)), num_boost_round=1).model_to_string()
    assert "split_feature=0" in base
    z = np.array([-1.0, -2 * LGBM_ZERO, -LGBM_ZERO, -1e-36, -5e-324, 0.0, 5e-324, 1e-37, LGBM_ZERO,
                  np.nextafter(LGBM_ZERO, 1), 3e-35, 1.0])
    rows = np.column_stack([z, np.zeros(len(z))])
    for thr in (1e-37, -1e-37, 5e-36, -5e-36, 0.5, -0.5, 0.0):
        for dtype in (2, 0, 6, 4):  # default left / right, missing None / Zero
            s = re.sub(r"^threshold=.*$", f"threshold={thr!r}", base, flags=re.M)
            s = re.sub(r"^decision_type=.*$", f"decision_type={dtype}", s, flags=re.M)
            booster = lgb.Booster(model_str=s)
            try:
                model = from_fitted(booster)
            except ValueError as err:
                assert dtype in (4, 6) and "missing_type 'Zero'" in str(err)
                continue
            np.testing.assert_array_equal(model.score(rows), booster.predict(rows, raw_score=True))


# ------------------------------------------------------------------------------ MACE, brute force

def _discrete_world(family: str) -> tuple[TabularWorld, np.ndarray, np.ndarray, object, InputMap]:
    rng = np.random.default_rng(0)
    n = 600
    job = np.zeros((n, 3))
    job[np.arange(n), rng.integers(0, 3, n)] = 1
    X = np.column_stack([rng.integers(0, 7, n), rng.integers(0, 4, n), rng.integers(0, 2, n),
                         rng.integers(0, 2, n), job]).astype(float)
    z = 0.5 * X[:, 0] + 0.8 * X[:, 1] + 0.7 * X[:, 2] + X[:, 3] + 1.2 * X[:, 4] - 0.8 * X[:, 5] - 3.6
    y = (z + rng.normal(0, 0.6, n) > 0).astype(int)
    schema = FeatureSchema((
        Feature("a", "numeric", 0, 6, "free", integer=True),
        Feature("b", "ordinal", 0, 3, "increase", integer=True),
        Feature("s", "binary", 0, 1, "immutable", integer=True),
        Feature("t", "binary", 0, 1, "free", integer=True),
        *(Feature(f"g={c}", "binary", 0, 1, "free", group="g", integer=True) for c in "xyz"),
    ))
    imap = _input_map(X, scaled=[0], minmax=[1])
    est = _estimator(family, small=True).fit(imap.transform(X), y)
    return TabularWorld(f"discrete/{family}", schema, from_fitted(est, imap)), X, y, est, imap


def _all_states() -> np.ndarray:
    out = []
    for a, b, s, t, g in itertools.product(range(7), range(4), range(2), range(2), range(3)):
        r = np.zeros(7)
        r[:4] = a, b, s, t
        r[4 + g] = 1
        out.append(r)
    return np.array(out)


@pytest.mark.parametrize("family", _marks(FAMILIES))
def test_mace_matches_brute_force(family):
    world, X, _, est, imap = _discrete_world(family)
    S = _all_states()
    model = world.model
    assert np.array_equal(model.predict(S) | (np.abs(model.score(S)) <= model.tolerance),
                          (est.predict(imap.transform(S)) == 1) | (np.abs(model.score(S)) <= model.tolerance))
    agents = np.unique(X[~model.predict(X)], axis=0)
    agents = agents[np.random.default_rng(0).choice(len(agents), 4, replace=False)]
    for x in agents:
        ok = model.predict(S) & ~world.schema.mutability_violations(x, S)
        best = float(distance(world.schema, x, S[ok], "one").min()) if ok.any() else np.inf
        r = MACE(norm="one").solve(world, x)[0]
        if not np.isfinite(best):
            assert r.status == "no_recourse"
            continue
        tol = max(1e-3 * best, 1e-7)
        assert r.valid and r.optimal
        assert r.extra["delta_min"] <= best <= r.cost <= best + tol
        assert est.predict(imap.transform(np.asarray(r.final_state)[None]))[0] == 1


def _cells(model: TreeEnsemble, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, integer: np.ndarray) -> list:
    """Per column, the point nearest x of every cell between the model's split points (integers: every value)."""
    cuts: dict[int, set] = {}
    for t in model.trees:
        U, L = t.limits()
        for k in np.flatnonzero(t.left >= 0):
            cuts.setdefault(int(t.feature[k]), set()).add((float(U[k]), float(L[k])))
    out = []
    for c in range(len(x)):
        if integer[c]:
            out.append([float(v) for v in range(int(lo[c]), int(hi[c]) + 1)])
            continue
        edges = sorted(cuts.get(c, ()))
        starts, ends = [lo[c]] + [b for _, b in edges], [a for a, _ in edges] + [hi[c]]
        out.append(sorted({float(np.clip(x[c], s, e)) for s, e in zip(starts, ends, strict=True) if s <= e}))
    return out


@pytest.mark.parametrize("family", _marks(["gb", "hgb", "xgb", "lgbm", "rf"]))
def test_mace_continuous_float64_splits(family):
    """Continuous scaled columns (in the millions, and near 0): the exact optimum over every cell of the
    float64 split points, where the library agrees; MACE finds and certifies it."""
    X, y = _table(500, seed=3)
    X = X[:, [0, 1, 3, 4]]
    imap = _input_map(X, scaled=[0, 1], minmax=[2])
    est = _estimator(family, small=True).fit(imap.transform(X), y)
    model = from_fitted(est, imap)
    schema = FeatureSchema((Feature("u", "numeric", 0, 100, "free"), Feature("big", "numeric", 1e6, 1e6 + 40, "free"),
                            Feature("count", "numeric", 0, 5, "free", integer=True),
                            Feature("flag", "binary", 0, 1, "free", integer=True)))
    world = TabularWorld(f"continuous/{family}", schema, model)
    integer = np.array([False, False, True, True])
    agents = np.unique(X[~model.predict(X)], axis=0)
    agents = agents[np.random.default_rng(1).choice(len(agents), 3, replace=False)]
    for x in agents:
        lo, hi = schema.bounds()
        S = np.array(list(itertools.product(*_cells(model, x, lo, hi, integer))))
        ok = model.predict(S)
        native = est.predict(imap.transform(S)) == 1
        assert not np.any((ok != native) & (np.abs(model.score(S)) > model.tolerance))
        best = float(distance(schema, x, S[ok], "one").min())
        r = MACE(norm="one").solve(world, x)[0]
        assert r.valid and r.optimal
        assert r.extra["delta_min"] <= best <= r.cost <= best + max(1e-3 * best, 1e-7)


def test_z3_says_boosted_is_milp_only():
    pytest.importorskip("z3")
    world, X, *_ = _discrete_world("gb")
    x = X[~world.model.predict(X)][0]
    with pytest.raises(ValueError, match="backend: 'z3' does not support boosted models; use backend='milp'"):
        MACE(backend="z3").solve(world, x)


def test_z3_on_an_imported_forest_with_float64_splits():
    pytest.importorskip("z3")
    world, X, *_ = _discrete_world("rf")
    x = np.unique(X[~world.model.predict(X)], axis=0)[0]
    a = MACE(backend="z3", norm="one").solve(world, x)[0]
    b = MACE(backend="milp", norm="one").solve(world, x)[0]
    assert a.optimal and b.optimal and abs(a.cost - b.cost) <= max(1e-3 * b.cost, 1e-7)


def test_geco_partial_evaluation_of_a_boosted_model():
    """GeCo's specialised forest gives a boosted model's own probabilities (the sigmoid of its margin)."""
    from solvers.geco import GeCo, Plaf
    from solvers.geco.partial_eval import BlackBox
    from solvers.geco.search import _Run

    world, X, *_ = _discrete_world("gb")
    geco = GeCo(plaf=Plaf()).fit(world, X)
    x = X[~world.model.predict(X)][0]
    agent = geco.space_.ground(x, (0.0, 1.0, 0.0))
    run = _Run(geco, agent, BlackBox(None), None)
    start = run.pop_class.start(agent)
    pop = run.pop_class.concat(run.mutate(start, 20, 0))
    np.testing.assert_allclose(geco.code_.specialize(agent).proba(pop), world.model.predict_proba(pop.rows()),
                               rtol=0, atol=1e-12)
    got = geco.solve(world, x)
    assert got[0].valid and world.model.predict(np.asarray(got[0].final_state)[None])[0]
