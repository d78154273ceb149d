"""A user's own fitted model (data_gen.user_model, data_gen.pipeline_map, data_gen.user_world): the
white box over the world decides as the model's ``predict`` on the table and on random records, for
LR, MLP and the tree families inside Pipeline(ColumnTransformer(...), model); the black-box route and
the errors name the step, estimator or column; models load safely."""

from __future__ import annotations

import pickle
import warnings

import joblib
import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import (
    ExtraTreesClassifier,
    GradientBoostingClassifier,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
)
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import (
    FunctionTransformer,
    MaxAbsScaler,
    MinMaxScaler,
    OneHotEncoder,
    OrdinalEncoder,
    PolynomialFeatures,
    RobustScaler,
    StandardScaler,
)
from sklearn.svm import SVC
from sklearn.tree import DecisionTreeClassifier

from data_gen.spec import load_spec
from data_gen.tabular_encoder import TabularEncoder
from data_gen.user_model import (
    BlackBoxModel,
    UserModelOracle,
    check_agreement,
    favourable_index,
    load_model,
    translate,
    world_columns,
)
from data_gen.user_world import build_user_world
from envs.models import LinearModel

NUMS, CATS = ["age", "income", "kids"], ["job", "sex", "edu"]
EDU = ["low", "mid", "high"]
USER_SPEC = {"features": {"edu": {"kind": "ordinal", "levels": EDU}, "age": {"mutability": "increase"}}}


def make_table(n: int = 300, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"age": rng.integers(18, 70, n), "income": np.round(rng.normal(3000, 600, n), 2),
                       "kids": rng.integers(0, 4, n), "job": rng.choice(["clerk", "nurse", "pilot", "chef"], n),
                       "sex": rng.choice(["f", "m"], n), "edu": rng.choice(EDU, n)})
    z = (df.age - 40) / 15 + (df.income - 3000) / 600 + (df.job == "pilot") - 0.5 * df.kids \
        + df.edu.map({"low": -1, "mid": 0, "high": 1}) + rng.normal(0, 0.7, n)
    return df.assign(y=np.where(z > 0, "good", "bad"))


TABLE = make_table()
X_RAW = TABLE.drop(columns="y")
SPEC = load_spec(USER_SPEC, TABLE, target="y", favourable="good")

PREPROCESSORS = {
    "onehot+standard": lambda: ColumnTransformer([("num", StandardScaler(), NUMS), ("cat", OneHotEncoder(), CATS)]),
    "drop_first+minmax": lambda: ColumnTransformer([("num", MinMaxScaler(), NUMS),
                                                    ("cat", OneHotEncoder(drop="first"), ["job", "sex"]),
                                                    ("edu", OrdinalEncoder(categories=[EDU]), ["edu"])]),
    "if_binary+robust+ordinal": lambda: ColumnTransformer([
        ("num", RobustScaler(), NUMS), ("oh", OneHotEncoder(drop="if_binary", handle_unknown="ignore"), ["job", "sex"]),
        ("ord", OrdinalEncoder(categories=[EDU]), ["edu"])]),
    "ordinal+passthrough+drop": lambda: ColumnTransformer([
        ("ord", OrdinalEncoder(), ["job", "sex"]), ("keep", "passthrough", ["age", "kids"]), ("gone", "drop", ["income"]),
        ("e", OrdinalEncoder(categories=[EDU], handle_unknown="use_encoded_value", unknown_value=-1), ["edu"])]),
    "nested+remainder": lambda: ColumnTransformer([
        ("num", Pipeline([("imp", SimpleImputer()), ("sc", StandardScaler())]), ["income"]),
        ("cat", Pipeline([("imp", SimpleImputer(strategy="most_frequent")),
                          ("oh", OneHotEncoder(sparse_output=False))]), CATS)], remainder=StandardScaler()),
    "sparse+maxabs": lambda: Pipeline([
        ("ct", ColumnTransformer([("oh", OneHotEncoder(), CATS)], remainder="passthrough", sparse_threshold=1.0)),
        ("sc", StandardScaler(with_mean=False)), ("mx", MaxAbsScaler())]),
}
ESTIMATORS = {
    "lr": lambda: LogisticRegression(max_iter=5000),
    "mlp": lambda: MLPClassifier((6,), max_iter=400, random_state=0),
    "tree": lambda: DecisionTreeClassifier(max_depth=5, random_state=0),
    "forest": lambda: RandomForestClassifier(6, max_depth=5, random_state=0),
    "extra": lambda: ExtraTreesClassifier(6, max_depth=5, random_state=0),
    "gb": lambda: GradientBoostingClassifier(n_estimators=8, max_depth=3, random_state=0),
    "hgb": lambda: HistGradientBoostingClassifier(max_iter=8, random_state=0),
}
TREES = ("tree", "forest", "extra", "gb", "hgb", "xgb", "lgbm")


def _fit(model, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence of the small MLPs
        return model.fit(X, y)


def random_rows(enc: TabularEncoder, n: int, seed: int = 1) -> np.ndarray:
    """Encoded rows drawn over the world's whole domain (every level, every number in range)."""
    rng = np.random.default_rng(seed)
    X = np.zeros((n, len(enc.schema)))
    for f in enc.raw_columns:
        cols = enc.columns_of(f.name)
        if f.one_hot:
            X[np.arange(n), np.asarray(cols)[rng.integers(0, len(cols), n)]] = 1.0
        elif f.kind == "real":
            X[:, cols[0]] = rng.uniform(f.lower, f.upper, n)
        else:
            X[:, cols[0]] = rng.integers(int(f.lower), int(f.upper) + 1, n)
    return X


def assert_same_decisions(model, white, spec, frame, E):
    pos, _ = favourable_index(model, spec.favourable)
    said = np.asarray(model.predict(frame if hasattr(model, "feature_names_in_") else frame.to_numpy())) == \
        model.classes_[pos]
    score = white.score(E)
    differ = said != (score > 0)
    assert not (differ & (np.abs(score) > getattr(white, "tolerance", 0.0))).any(), np.flatnonzero(differ)[:5]


def check_white_box(model, spec=SPEC, table=TABLE, records: int = 400):
    """The translation's input columns equal the preprocessing's output bit for bit, and the white box
    decides as the model on the table and on random records; returns the white box."""
    X = table[spec.names]
    enc = TabularEncoder.fit(world_columns(model, spec, X), X)
    white, imap, report = translate(model, spec, enc)
    assert report.route == "white-box", str(report)
    E = enc.encode(X)
    if type(model).__name__ == "Pipeline":
        Z = model[:-1].transform(X[list(model.feature_names_in_)])
        np.testing.assert_array_equal(imap.transform(E), Z.toarray() if hasattr(Z, "toarray") else np.asarray(Z, float))
    assert_same_decisions(model, white, spec, X[list(getattr(model, "feature_names_in_", spec.names))], E)
    R = random_rows(enc, records)
    oracle = UserModelOracle.build(model, spec, enc, X)
    assert_same_decisions(model, white, spec, oracle.frame(R), R)
    agreement = check_agreement(model, white, imap, spec, enc, table)
    assert agreement.rows == len(table) and agreement.boundary == 0 and agreement.accuracy is not None
    return white


@pytest.mark.parametrize(("pre", "est"), [(p, e) for p in PREPROCESSORS for e in ESTIMATORS
                                          if (p, e) != ("sparse+maxabs", "hgb")])  # HistGB takes no sparse input
def test_pipelines_translate_exactly(pre, est):
    model = _fit(Pipeline([("pre", PREPROCESSORS[pre]()), ("model", ESTIMATORS[est]())]), X_RAW, TABLE.y)
    white = check_white_box(model)
    assert type(white).__name__ == {"lr": "LinearModel", "mlp": "MLPModel"}.get(est, "TreeEnsemble")


@pytest.mark.optional
@pytest.mark.parametrize("lib", ["xgb", "lgbm"])
def test_boosted_libraries_in_pipelines(lib):
    pytest.importorskip("envs.imported_trees")
    est = pytest.importorskip("xgboost").XGBClassifier(n_estimators=8, max_depth=3) if lib == "xgb" else \
        pytest.importorskip("lightgbm").LGBMClassifier(n_estimators=8, verbose=-1)
    model = _fit(Pipeline([("pre", PREPROCESSORS["drop_first+minmax"]()), ("model", est)]), X_RAW,
                 (TABLE.y == "good").astype(int))  # these libraries take 0/1 labels: 1 is favourable
    check_white_box(model)


def test_world_layout_follows_the_pipeline():
    model = _fit(Pipeline([("pre", PREPROCESSORS["ordinal+passthrough+drop"]()), ("m", LogisticRegression())]),
                 X_RAW, TABLE.y)
    cols = {c.name: c for c in world_columns(model, SPEC, X_RAW)}
    assert cols["job"].as_code and cols["job"].levels == ("chef", "clerk", "nurse", "pilot")  # the encoder's order
    assert cols["sex"].kind == "binary" and cols["edu"].kind == "ordinal" and cols["income"].kind == "real"
    one_hot = {c.name: c for c in world_columns(_fit(Pipeline([("pre", PREPROCESSORS["onehot+standard"]()),
                                                               ("m", LogisticRegression())]), X_RAW, TABLE.y),
                                                SPEC, X_RAW)}
    assert one_hot["job"].one_hot and one_hot["edu"].one_hot and one_hot["age"].kind == "integer"


def test_bare_estimators_direct_steps_and_unnamed_inputs():
    num = TABLE[["age", "income", "kids", "y"]]
    spec = load_spec(None, num, target="y", favourable="good")
    Xn = num.drop(columns="y")
    check_white_box(_fit(LogisticRegression(max_iter=5000), Xn, num.y), spec, num)
    check_white_box(_fit(Pipeline([("sc", StandardScaler()), ("mm", MinMaxScaler()), ("lr", LogisticRegression())]),
                         Xn, num.y), spec, num)
    check_white_box(_fit(MLPClassifier((5,), max_iter=300, random_state=0), Xn.to_numpy(), num.y), spec, num)
    cat = TABLE[["job", "sex", "edu", "y"]]
    spec_cat = load_spec(USER_SPEC | {"features": {"edu": USER_SPEC["features"]["edu"]}}, cat, target="y",
                         favourable="good")
    check_white_box(_fit(Pipeline([("oh", OneHotEncoder(sparse_output=False)), ("lr", LogisticRegression())]),
                         cat.drop(columns="y"), cat.y), spec_cat, cat)


def test_categories_the_world_or_the_encoder_lacks():
    enc_cats = [["astronaut", "chef", "clerk", "nurse"], ["f", "m"], EDU]  # knows no pilot; an astronaut never seen
    pre = ColumnTransformer([("cat", OneHotEncoder(categories=enc_cats, handle_unknown="ignore"), CATS),
                             ("num", StandardScaler(), NUMS)])
    model = _fit(Pipeline([("pre", pre), ("lr", LogisticRegression(max_iter=5000))]), X_RAW, TABLE.y)
    enc = TabularEncoder.fit(world_columns(model, SPEC, X_RAW), X_RAW)
    _, imap, _ = translate(model, SPEC, enc)
    astronaut = next(c for c in imap.columns if c.name.endswith("job_astronaut"))
    assert (astronaut.source, astronaut.const) == (-1, 0.0)
    assert "job=pilot" in enc.names  # the world keeps the table's category; the model reads it as all zeros
    check_white_box(model)
    strict = _fit(Pipeline([("pre", ColumnTransformer([("cat", OneHotEncoder(categories=enc_cats), CATS)])),
                            ("lr", LogisticRegression())]), X_RAW[X_RAW.job != "pilot"], TABLE.y[X_RAW.job != "pilot"])
    enc = TabularEncoder.fit(world_columns(strict, SPEC, X_RAW), X_RAW)
    white, imap, _ = translate(strict, SPEC, enc)
    with pytest.raises(ValueError, match=r"^agreement: the model cannot score the table \(.*pilot"):
        check_agreement(strict, white, imap, SPEC, enc, TABLE)


def black_box_reason(model, spec=SPEC, table=TABLE) -> str:
    X = table[spec.names]
    enc = TabularEncoder.fit(world_columns(model, spec, X), X)
    white, _, report = translate(model, spec, enc)
    assert white is None and report.route == "black-box" and str(report).startswith(
        "black-box route: GeCo / MD-PSO, answers not certified")
    check_agreement(model, None, None, spec, enc, table)  # the oracle on decoded records agrees
    return report.reason


def test_black_box_route_names_the_step_or_estimator():
    def pipe(*steps, pre=None):
        pre = pre or ColumnTransformer([("num", StandardScaler(), NUMS), ("cat", OneHotEncoder(), CATS)])
        return _fit(Pipeline([("pre", pre), *steps]), X_RAW, TABLE.y)

    assert "estimator SVC" in black_box_reason(pipe(("svc", SVC(probability=True, random_state=0))))
    assert "step 'poly' (PolynomialFeatures)" in black_box_reason(
        pipe(("poly", PolynomialFeatures()), ("lr", LogisticRegression(max_iter=5000))))
    assert "'log' (FunctionTransformer)" in black_box_reason(pipe(("lr", LogisticRegression()), pre=ColumnTransformer(
        [("log", FunctionTransformer(np.log1p), ["income"]), ("cat", OneHotEncoder(), CATS)])))
    assert "activation 'tanh'" in black_box_reason(pipe(("mlp", MLPClassifier((4,), activation="tanh", max_iter=50))))
    sorted_edu = ColumnTransformer([("ord", OrdinalEncoder(), ["edu"]), ("num", StandardScaler(), NUMS)])
    assert "feature 'edu'" in black_box_reason(pipe(("lr", LogisticRegression()), pre=sorted_edu))  # high < low < mid
    assert "feature 'age' is one-hot encoded" in black_box_reason(pipe(("lr", LogisticRegression()), pre=ColumnTransformer(
        [("oh", OneHotEncoder(handle_unknown="ignore"), ["age"]), ("num", StandardScaler(), ["income"])])))


class ProbaOnly:
    """A model seen only through predict_proba (no classes_, no predict), as a wrapped torch model would be."""

    def __init__(self, inner):
        self.inner = inner

    def predict_proba(self, X):
        return self.inner.predict_proba(X)


def test_a_model_with_only_predict_proba_takes_the_black_box_route():
    inner = _fit(Pipeline([("pre", PREPROCESSORS["onehot+standard"]()), ("lr", LogisticRegression(max_iter=5000))]),
                 X_RAW, (TABLE.y == "good").astype(int))
    world, bundle = build_user_world(TABLE, spec=USER_SPEC, target="y", favourable="good", model=ProbaOnly(inner))
    assert bundle.white_box is None and "estimator ProbaOnly" in bundle.report.reason
    assert "second column is taken as favourable" in bundle.report.notes[0] and bundle.agreement.accuracy > 0.6
    assert (world.accepts(bundle.data.X_test) == (inner.predict(bundle.oracle.frame(bundle.data.X_test)) == 1)).all()
    with pytest.raises(ValueError, match=r"^model: object has neither classes_ nor predict_proba"):
        favourable_index(object(), "good")


def test_clipping_and_uneven_levels_fold_only_where_exact():
    narrow = TABLE.income < 3500  # fitted on a narrower range: the clip engages inside the world's range
    clip = ColumnTransformer([("mm", MinMaxScaler(clip=True), ["income"]), ("cat", OneHotEncoder(), CATS)])
    model = _fit(Pipeline([("pre", clip), ("lr", LogisticRegression(max_iter=5000))]), X_RAW[narrow], TABLE.y[narrow])
    assert "not affine" in black_box_reason(model)
    pytest.importorskip("envs.imported_trees")
    check_white_box(_fit(Pipeline([("pre", clip), ("t", DecisionTreeClassifier(max_depth=4))]), X_RAW[narrow],
                         TABLE.y[narrow]))
    uneven = TABLE.assign(tier=TABLE.kids.map({0: 1, 1: 2, 2: 5, 3: 9}))
    spec = load_spec({"features": {"tier": {"kind": "ordinal"}, **USER_SPEC["features"]}}, uneven, target="y",
                     favourable="good")
    cols = ColumnTransformer([("keep", "passthrough", ["tier", "age"]), ("cat", OneHotEncoder(), CATS)])
    Xu = uneven[spec.names]
    assert "['keep__tier']" in black_box_reason(
        _fit(Pipeline([("pre", cols), ("lr", LogisticRegression(max_iter=5000))]), Xu, uneven.y), spec, uneven)
    check_white_box(_fit(Pipeline([("pre", cols), ("t", DecisionTreeClassifier(max_depth=4))]), Xu, uneven.y),
                    spec, uneven)


def test_errors_name_the_problem():
    X = TABLE[SPEC.names]
    three = _fit(LogisticRegression(max_iter=5000), X[NUMS], np.arange(len(X)) % 3)
    with pytest.raises(ValueError, match=r"^model: a multi-class model \(classes \[0, 1, 2\]\)"):
        favourable_index(three, "good")
    renamed = ColumnTransformer([("num", StandardScaler(), ["age", "income", "children"]), ("cat", OneHotEncoder(), CATS)])
    lr = _fit(Pipeline([("pre", renamed), ("lr", LogisticRegression())]), X.rename(columns={"kids": "children"}),
              TABLE.y)
    enc = TabularEncoder.fit(SPEC.to_raw_columns(), X)
    with pytest.raises(ValueError, match=r"^model: its feature_names_in_ differ .* the model lacks \['kids'\].*"
                                         r"the table lacks \['children'\]$"):
        translate(lr, SPEC, enc)
    odd = _fit(LogisticRegression(), X[NUMS], np.where(TABLE.y == "good", "x", "z"))
    with pytest.raises(ValueError, match=r"^model: its classes \['x', 'z'\] do not include the favourable value 'good'"):
        favourable_index(odd, "good")
    assert favourable_index(_fit(LogisticRegression(), X[NUMS], (TABLE.y == "good").astype(int)), "good") == (
        1, "the model's classes are [0, 1]: 1 is taken as the favourable 'good'")


def test_check_agreement_stops_at_the_first_wrong_row():
    model = _fit(Pipeline([("pre", PREPROCESSORS["onehot+standard"]()), ("lr", LogisticRegression(max_iter=5000))]),
                 X_RAW, TABLE.y)
    enc = TabularEncoder.fit(world_columns(model, SPEC, X_RAW), X_RAW)
    white, imap, _ = translate(model, SPEC, enc)
    wrong = LinearModel(white.w, white.b + 0.5)
    with pytest.raises(ValueError, match=r"^agreement: row \d+: the model gives P\(favourable\) = [\d.e-]+ \((accept|"
                                         r"reject)\), the white box \(LinearModel\) [\d.e-]+"):
        check_agreement(model, wrong, imap, SPEC, enc, TABLE)


def test_oracle_keeps_the_tables_dtypes():
    df = TABLE.assign(kids=TABLE.kids.astype(np.int32), job=TABLE.job.astype("category"))
    model = _fit(Pipeline([("pre", PREPROCESSORS["onehot+standard"]()), ("m", SVC(random_state=0))]),
                 df.drop(columns="y"), df.y)
    world, bundle = build_user_world(df, spec=USER_SPEC, target="y", favourable="good", model=model)
    frame = bundle.oracle.frame(bundle.data.X_test)
    assert dict(frame.dtypes) == dict(df[list(model.feature_names_in_)].dtypes)
    assert isinstance(world.model, BlackBoxModel) and "estimator SVC" in bundle.report.reason
    accepts = world.accepts(bundle.data.X_test)
    assert (accepts == (model.predict(frame) == "good")).all() and accepts.any() and not accepts.all()


# ------------------------------------------------------------------------------------- loading

def test_skops_pickle_and_corrupt_files(tmp_path):
    sio = pytest.importorskip("skops.io")
    model = _fit(Pipeline([("pre", PREPROCESSORS["onehot+standard"]()), ("lr", LogisticRegression())]), X_RAW, TABLE.y)
    sio.dump(model, tmp_path / "m.skops")
    loaded = load_model(tmp_path / "m.skops")
    assert (loaded.predict(X_RAW) == model.predict(X_RAW)).all()
    odd = _fit(Pipeline([("sc", Doubler()), ("lr", LogisticRegression())]), X_RAW[NUMS], TABLE.y)
    sio.dump(odd, tmp_path / "odd.skops")
    with pytest.raises(ValueError, match=r"^model: .*odd.skops holds types skops does not trust: .*Doubler \(check them, "
                                         r"then set trusted: true"):
        load_model(tmp_path / "odd.skops")
    assert (load_model(tmp_path / "odd.skops", trusted=True).predict(X_RAW[NUMS]) == odd.predict(X_RAW[NUMS])).all()
    joblib.dump(model, tmp_path / "m.joblib")
    (tmp_path / "m.pkl").write_bytes(pickle.dumps(model))
    for name in ("m.joblib", "m.pkl"):
        with pytest.raises(ValueError, match=r"^model: .* is a pickle, and unpickling runs code .* set trusted: true"):
            load_model(tmp_path / name)
        assert (load_model(tmp_path / name, trusted=True).predict(X_RAW) == model.predict(X_RAW)).all()
    for name, content in (("bad.skops", b"not a zip"), ("bad.pkl", b"\x80\x04garbage"), ("bad.json", b"{nope"),
                          ("bad.txt", b"garbage"), ("m.onnx", b"")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match=rf"^model: .*{name}") as err:
            load_model(tmp_path / name, trusted=True)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"^model: .*none.skops is not a file"):
        load_model(tmp_path / "none.skops")


class Doubler(StandardScaler):
    """A type skops does not know (it lives in this test module)."""


@pytest.mark.optional
@pytest.mark.parametrize("fmt", ["xgb.json", "xgb.ubj", "lgbm.txt"])
def test_native_boosters_from_files(tmp_path, fmt):
    num = TABLE[NUMS + ["y"]]
    y01 = (num.y == "good").astype(int)
    if fmt.startswith("xgb"):
        xgb = pytest.importorskip("xgboost")
        model = xgb.XGBClassifier(n_estimators=6, max_depth=3).fit(num[NUMS], y01)
        model.save_model(tmp_path / fmt)
        xgb.XGBRegressor(n_estimators=2).fit(num[NUMS], y01).get_booster().save_model(tmp_path / "reg.json")
        with pytest.raises(ValueError, match=r"^model: .*reg.json: XGBoost objective 'reg:squarederror' is not a binary"):
            load_model(tmp_path / "reg.json")
        xgb.XGBClassifier(n_estimators=2).fit(num[NUMS], np.arange(len(num)) % 3).save_model(tmp_path / "multi.json")
        with pytest.raises(ValueError, match=r"^model: .*multi.json is a multi-class XGBoost model"):
            load_model(tmp_path / "multi.json")
    else:
        lgb = pytest.importorskip("lightgbm")
        model = lgb.LGBMClassifier(n_estimators=6, verbose=-1).fit(num[NUMS], y01)
        model.booster_.save_model(tmp_path / fmt)
    pytest.importorskip("envs.imported_trees")
    world, bundle = build_user_world(num, target="y", favourable="good", model_path=tmp_path / fmt)
    assert bundle.report.route == "white-box", str(bundle.report)
    assert bundle.agreement.rows == len(num) and "1 is taken as the favourable 'good'" in bundle.report.notes[0]
    R = random_rows(world.encoder, 300)
    assert_same_decisions(bundle.model, bundle.white_box, bundle.spec, bundle.oracle.frame(R), R)


def test_build_user_world_routes(tmp_path):
    path = tmp_path / "t.csv"
    TABLE.to_csv(path, index=False)
    world, bundle = build_user_world(path, spec=USER_SPEC, target="y", favourable="good", model_class="lr")
    assert world.name == "user/lr" and bundle.report.route == "white-box" and bundle.model is None
    assert world.schema.features[world.schema.index["age"]].mutability == "increase"
    assert len(bundle.data.X_train) == 240 and bundle.metrics["test_accuracy"] > 0.6
    sio = pytest.importorskip("skops.io")
    model = _fit(Pipeline([("pre", PREPROCESSORS["drop_first+minmax"]()), ("lr", LogisticRegression(max_iter=5000))]),
                 X_RAW, TABLE.y)
    sio.dump(model, tmp_path / "m.skops")
    world, bundle = build_user_world(path, spec=USER_SPEC, model_path=tmp_path / "m.skops", target="y",
                                     favourable="good")
    assert isinstance(world.model, LinearModel) and bundle.agreement.boundary == 0
    assert (world.accepts(bundle.data.X_test) == bundle.oracle(bundle.data.X_test)).all()


def test_random_tables_translate_exactly():
    """Property: random tables and preprocessing choices; the white box decides as the model."""
    hyp = pytest.importorskip("hypothesis")
    st = hyp.strategies

    @hyp.settings(max_examples=15, deadline=None, derandomize=True)
    @hyp.given(seed=st.integers(0, 10_000), n_num=st.integers(1, 3), n_cat=st.integers(0, 2),
               scaler=st.sampled_from(["standard", "minmax", "robust", "passthrough"]),
               encoder=st.sampled_from(["onehot", "first", "ordinal"]), est=st.sampled_from(["lr", "mlp", "tree"]))
    def prop(seed, n_num, n_cat, scaler, encoder, est):
        if est == "tree":
            pytest.importorskip("envs.imported_trees")
        rng = np.random.default_rng(seed)
        n = 120
        cols = {f"n{i}": (rng.integers(-5, 50, n) if i % 2 else np.round(rng.normal(0, 10, n), 1)) for i in range(n_num)}
        cols |= {f"c{i}": rng.choice(list("abcde")[: 2 + i + seed % 2], n) for i in range(n_cat)}
        df = pd.DataFrame(cols)
        z = df[[c for c in df if c.startswith("n")]].sum(axis=1) + sum((df[c] == "a") * 5.0 for c in df if c[0] == "c")
        df["y"] = np.where(z + rng.normal(0, 3, n) > z.median(), 1, 0)
        if df.y.nunique() < 2:
            return
        spec = load_spec(None, df, target="y", favourable=1)
        num_step = {"standard": StandardScaler(), "minmax": MinMaxScaler(), "robust": RobustScaler(),
                    "passthrough": "passthrough"}[scaler]
        cat_step = {"onehot": OneHotEncoder(), "first": OneHotEncoder(drop="first"), "ordinal": OrdinalEncoder()}[encoder]
        nums = [c for c in spec.names if spec.feature(c).kind in ("real", "integer")]
        cats = [c for c in spec.names if c not in nums]
        pre = ColumnTransformer([("num", num_step, nums), ("cat", cat_step, cats)])
        est_ = {"lr": LogisticRegression(max_iter=5000), "mlp": MLPClassifier((4,), max_iter=200, random_state=0),
                "tree": DecisionTreeClassifier(max_depth=4, random_state=0)}[est]
        model = _fit(Pipeline([("pre", pre), ("m", est_)]), df[spec.names], df.y)
        check_white_box(model, spec, df, records=200)

    prop()


def test_clone_of_the_table_model_still_translates():
    """A clone refitted on the world's own decoded records is the same model (the oracle's frame is faithful)."""
    model = _fit(Pipeline([("pre", PREPROCESSORS["onehot+standard"]()), ("lr", LogisticRegression(max_iter=5000))]),
                 X_RAW, TABLE.y)
    enc = TabularEncoder.fit(world_columns(model, SPEC, X_RAW), X_RAW)
    frame = UserModelOracle.build(model, SPEC, enc, X_RAW).frame(enc.encode(X_RAW))
    again = _fit(clone(model), frame, TABLE.y)
    np.testing.assert_array_equal(again.predict_proba(X_RAW), model.predict_proba(X_RAW))


def test_mace_answers_on_a_user_world_are_accepted_by_the_users_model():
    from solvers.mace import MACE

    model = _fit(Pipeline([("pre", PREPROCESSORS["ordinal+passthrough+drop"]()), ("lr", LogisticRegression(max_iter=5000))]),
                 X_RAW, TABLE.y)  # job as a nominal code column, edu as an ordinal code
    world, bundle = build_user_world(TABLE, spec=USER_SPEC, target="y", favourable="good", model=model)
    rejected = bundle.data.X_test[~world.accepts(bundle.data.X_test)][:2]
    for x in rejected:
        answer = MACE(backend="milp", norm="one").solve(world, x)[0]
        assert answer.valid and answer.optimal and bundle.oracle(answer.final_state[None])[0]
        age = world.schema.index["age"]
        assert answer.final_state[age] >= x[age]  # increase-only, as the user's spec says


def train_tiny_run(root, name: str = "t"):
    """A tabular run on ``make_table`` (LR, 30 agents, nearest_cfe) trained under ``root``: the serving tests'
    run directory (tests/test_jobs_restart.py, tests/test_ray_serve.py)."""
    import yaml

    from evaluation.tabular_experiment import load_tabular_config, train_tabular

    make_table(400, seed=2).to_csv(root / f"{name}.csv", index=False)
    cfg = {"name": name, "output_dir": str(root / "runs"),
           "tabular": {"table": str(root / f"{name}.csv"), "target": "y", "favourable": "good", "model": "lr",
                       "agents": 30, "geco_agents": 0, "compute": {"backend": "local", "n_workers": 1}},
           "generators": [{"method": "nearest_cfe"}]}
    (root / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    return train_tabular(load_tabular_config(root / f"{name}.yaml"), progress=False)
