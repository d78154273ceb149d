"""Tabular worlds on real data: loaders, encoder, schema, white-box models, cache, CLI."""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeClassifier

from data_gen import classifiers, loaders
from data_gen.classifiers import build, build_world, negatives, train_model
from data_gen.loaders import ADULT_EDUCATION, DATASETS, TabularData, load_raw
from data_gen.tabular_encoder import RawColumn, TabularEncoder
from envs.tabular import TabularWorld

# README figures: rows and favourable labels (1) per data set.
EXPECTED = {"adult": (45_222, 11_208), "german": (1_000, 700), "compas": (5_278, 2_795),
            "credit": (29_623, 23_076)}


@pytest.fixture(scope="module")
def raw() -> dict[str, tuple[pd.DataFrame, np.ndarray]]:
    return {name: load_raw(name) for name in DATASETS}


@pytest.fixture(scope="module")
def encoders(raw) -> dict[str, TabularEncoder]:
    return {name: TabularEncoder.fit(DATASETS[name].features, df) for name, (df, _) in raw.items()}


@pytest.mark.parametrize("name", list(DATASETS))
def test_loader_shapes_and_labels(raw, name):
    df, y = raw[name]
    n, n_pos = EXPECTED[name]
    assert df.shape == (n, len(DATASETS[name].features))
    assert list(df.columns) == [f.name for f in DATASETS[name].features]
    assert set(np.unique(y)) == {0, 1} and int(y.sum()) == n_pos
    assert not df.isna().any().any()


def test_adult_parsing(raw):
    df, _ = raw["adult"]
    assert "fnlwgt" not in df.columns and "education" not in df.columns
    assert not (df == "?").any().any()
    assert all(not v.startswith(" ") for v in df["workclass"].unique())
    assert set(df["education-num"]) == set(range(1, 17))


def test_german_decoded(raw):
    df, _ = raw["german"]
    assert set(df["foreign_worker"]) == {"yes", "no"}
    assert "no checking account" in set(df["checking_status"])
    assert not any(str(v).startswith("A") and str(v)[1:].isdigit() for v in df.to_numpy().ravel())


def test_data_dir_override(monkeypatch, tmp_path):
    real = loaders.data_dir_path()
    monkeypatch.setenv("RECOURSE_DATA_DIR", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="RECOURSE_DATA_DIR"):
        load_raw("compas")
    assert len(load_raw("compas", data_dir=real)[0]) == 5_278
    monkeypatch.setenv("RECOURSE_DATA_DIR", str(real))
    assert len(load_raw("compas")[0]) == 5_278
    with pytest.raises(ValueError, match="unknown data set"):
        load_raw("iris")


@pytest.mark.parametrize("name", list(DATASETS))
def test_round_trip(raw, encoders, name):
    df, _ = raw[name]
    enc = encoders[name]
    X = enc.encode(df)
    assert X.dtype == float and X.shape == (len(df), len(enc.schema))
    enc.schema.validate(X)  # inside the bounds, integral where it must be
    pd.testing.assert_frame_equal(enc.decode(X), df.reset_index(drop=True), check_dtype=False)
    again = TabularEncoder.from_dict(json.loads(json.dumps(enc.to_dict())))
    assert again == enc and again.schema == enc.schema
    np.testing.assert_array_equal(again.encode(df), X)


def test_adult_schema(raw, encoders):
    df, _ = raw["adult"]
    enc = encoders["adult"]
    s = enc.schema
    n_cat = {f.name: df[f.name].nunique() for f in enc.raw_columns if f.kind == "categorical"}
    assert len(s) == 4 + 1 + sum(n_cat.values()) == 87  # 4 numbers, the education level, the one-hot columns
    for name, k in n_cat.items():
        cols = enc.columns_of(name)
        assert len(cols) == k
        assert all(s.features[j].group == name and s.features[j].kind == "binary" for j in cols)
    edu = s.features[enc.columns_of("education-num")[0]]
    assert edu.kind == "ordinal" and edu.categories == ADULT_EDUCATION and edu.mutability == "increase"
    age = s.features[s.index["age"]]
    assert (age.kind, age.integer, age.mutability) == ("numeric", True, "increase")
    assert (age.lower, age.upper) == (df["age"].min(), df["age"].max())
    assert not s.features[s.index["capital-gain"]].integer
    for name in ("sex", "race", "native-country", "marital-status", "relationship"):
        assert {s.features[j].mutability for j in enc.columns_of(name)} == {"immutable"}
    for name in ("workclass", "occupation", "hours-per-week", "capital-loss"):
        assert {s.features[j].mutability for j in enc.columns_of(name)} == {"free"}


def test_credit_compas_german_schema(encoders):
    def mut(name):
        return {f.name: f.mutability for f in encoders[name].schema.features}

    credit = mut("credit")
    assert credit["isMale"] == credit["isMarried"] == "immutable"
    assert all(credit[c] == "increase" for c in ("AgeGroup", "EducationLevel", "HasHistoryOfOverduePayments",
                                                 "TotalOverdueCounts", "TotalMonthsOverdue"))
    assert credit["MostRecentBillAmount"] == "free"
    assert len(encoders["credit"].schema) == 14 and len(encoders["compas"].schema) == 5
    compas = encoders["compas"].schema
    assert [f.mutability for f in compas.features] == ["increase", "immutable", "immutable", "increase",
                                                       "free"]
    age_group = compas.features[0]
    assert age_group.kind == "ordinal" and (age_group.lower, age_group.upper) == (0, 2)
    assert compas.features[2].kind == "binary" and compas.features[2].categories == ("Male", "Female")
    german = mut("german")
    assert german["age"] == german["employment"] == "increase" and german["foreign_worker"] == "immutable"
    assert german["personal_status_sex=male: single"] == "immutable"


def test_bad_input_names_the_feature(raw, encoders):
    df, _ = raw["adult"]
    enc = encoders["adult"]
    row = df.iloc[:3].copy()
    for col, value, match in [("workclass", "Astronaut", "'workclass'.*unknown category 'Astronaut'"),
                              ("age", 200, r"'age'.*200.*outside the observed range \[17, 90\]"),
                              ("age", 30.5, "'age'.*30.5.*not an integer"),
                              ("capital-gain", "lots", "'capital-gain'.*'lots'.*not a finite number"),
                              ("education-num", 17, "'education-num'.*17.*not a level")]:
        bad = row.copy()
        bad[col] = bad[col].astype(object)
        bad.loc[bad.index[1], col] = value
        with pytest.raises(ValueError, match=match):
            enc.encode(bad)
    with pytest.raises(ValueError, match="'sex'.*missing"):
        enc.encode(row.drop(columns="sex"))
    X = enc.encode(row)
    X[0, enc.columns_of("workclass")] = 0
    with pytest.raises(ValueError, match="one-hot group 'workclass'"):
        enc.decode(X)
    with pytest.raises(ValueError, match="unknown feature 'salary'"):
        enc.columns_of("salary")


def test_ordinal_outside_observed_range():
    df = pd.DataFrame({"g": [1, 2]})
    enc = TabularEncoder.fit([RawColumn("g", "ordinal", "increase", (1, 2, 3))], df)
    assert enc.schema.features[0].categories == ("1", "2", "3") and enc.schema.features[0].upper == 1
    with pytest.raises(ValueError, match=r"'g'.*3 \(code 2\) is outside"):
        enc.encode(pd.DataFrame({"g": [3]}))


def _adult_subsample(raw, encoders, n: int = 3000) -> TabularData:
    df, y = raw["adult"]
    X = encoders["adult"].encode(df)
    idx = np.random.default_rng(0).permutation(len(y))[:n]
    cut = int(0.8 * n)
    return TabularData(X[idx[:cut]], y[idx[:cut]], X[idx[cut:]], y[idx[cut:]], encoders["adult"])


@pytest.mark.parametrize("model_class", ["tree", "forest", "lr", "mlp"])
def test_white_box_matches_sklearn(raw, encoders, model_class):
    data = _adult_subsample(raw, encoders)
    extra = {"max_iter": 300} if model_class == "mlp" else {}
    model, metrics = train_model(model_class, data, seed=1, **extra)
    assert metrics["test_accuracy"] > 0.75 and metrics["n_columns"] == data.X_train.shape[1]
    if model_class == "tree":
        est = DecisionTreeClassifier(max_depth=8, random_state=1).fit(data.X_train, data.y_train)
        np.testing.assert_array_equal(model.predict(data.X_test), est.predict(data.X_test) == 1)
        assert metrics["leaves_per_tree"] == [est.get_n_leaves()]
    if model_class == "forest":
        assert len(metrics["leaves_per_tree"]) == 10
    if model_class == "lr":
        sc = StandardScaler().fit(data.X_train)
        est = LogisticRegression(max_iter=1000, random_state=1).fit(sc.transform(data.X_train), data.y_train)
        np.testing.assert_array_equal(model.predict(data.X_test), est.predict(sc.transform(data.X_test)) == 1)
        np.testing.assert_allclose(model.predict_proba(data.X_test),
                                   est.predict_proba(sc.transform(data.X_test))[:, 1], atol=1e-9)


def test_model_kwargs_and_errors():
    assert classifiers.model_params("forest") == {"n_estimators": 10, "max_depth": 8}
    assert classifiers.model_params("tree", max_depth=None) == {"max_depth": None}
    with pytest.raises(ValueError, match="unknown 'svm'"):
        classifiers.model_params("svm")


def test_build_world_cache(tmp_path):
    t0 = time.perf_counter()
    first = build("german", "forest", seed=3, cache_dir=tmp_path, n_estimators=5)
    t_first = time.perf_counter() - t0
    assert not first.cached and (first.cache_path / "model.json").exists()
    assert first.metrics["n_train"] == 800 and len(first.metrics["leaves_per_tree"]) == 5
    t0 = time.perf_counter()
    second = build("german", "forest", seed=3, cache_dir=tmp_path, n_estimators=5)
    assert second.cached and time.perf_counter() - t0 < max(2.0, 3 * t_first)
    assert second.world.model.to_dict() == first.world.model.to_dict()
    assert second.world.encoder == first.world.encoder and second.metrics == first.metrics
    np.testing.assert_array_equal(second.data.X_test, first.data.X_test)
    other = build("german", "forest", seed=4, cache_dir=tmp_path, n_estimators=5)
    assert other.cache_path != first.cache_path
    assert len(list(tmp_path.iterdir())) == 2

    world = build_world("german", "forest", seed=3, cache_dir=tmp_path, n_estimators=5)
    assert isinstance(world, TabularWorld) and world.name == "german/forest"
    assert set(world.groups()) == {f.name for f in world.encoder.raw_columns if f.kind == "categorical"}
    neg = negatives(world, first.data.X_test)
    assert len(neg) == first.metrics["n_test_negatives"] and not world.accepts(neg).any()


def test_cli(tmp_path, capsys):
    out = tmp_path / "table.md"
    classifiers.main(["--datasets", "compas", "--models", "tree", "lr", "--cache-dir", str(tmp_path / "c"),
              "--out", str(out)])
    text = out.read_text()
    assert text.count("| compas |") == 2 and "leaves per tree" in text
    assert text.strip() in capsys.readouterr().out
