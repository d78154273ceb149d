"""Data specs of any table (data_gen.spec): inference, overrides, YAML round trip, one-line errors, the
missing-value rule, the encoder's code columns and declared bounds, the bundled data sets as specs."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import yaml

from data_gen.loaders import DATASETS, EXTRA_DATASETS, load_data, load_raw
from data_gen.spec import DataSpec, FeatureSpec, infer_spec, load_spec, main, read_table, spec_from_dataset
from data_gen.tabular_encoder import RawColumn, TabularEncoder


def table(n: int = 60, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "age": rng.integers(18, 70, n),
        "income": np.round(rng.normal(3000, 500, n), 2),
        "score": rng.normal(size=n),
        "ratio": np.round(rng.uniform(0, 1, n), 1),
        "job": rng.choice(["clerk", "nurse", "pilot"], n),
        "sex": rng.choice(["f", "m"], n),
        "edu": pd.Categorical(rng.choice(["low", "mid", "high"], n), categories=["low", "mid", "high"], ordered=True),
        "owner": rng.integers(0, 2, n).astype(bool),
        "kids": rng.integers(0, 4, n),
        "y": rng.choice(["good", "bad"], n),
    })


def test_inference_kinds_bounds_and_resolution():
    df = table()
    spec = infer_spec(df, target="y", favourable="good")
    f = {x.name: x for x in spec.features}
    assert spec.names == [c for c in df.columns if c != "y"] and spec.favourable == "good"
    assert (f["age"].kind, f["age"].lower, f["age"].upper, f["age"].resolution) == (
        "integer", df.age.min(), df.age.max(), 1)
    assert f["income"].kind == "real" and f["income"].resolution == 0.01
    assert f["ratio"].resolution == 0.1 and f["score"].resolution is None
    assert f["income"].lower == df.income.min() and f["income"].upper == df.income.max()
    assert (f["job"].kind, f["job"].levels) == ("categorical", ("clerk", "nurse", "pilot"))
    assert (f["sex"].kind, f["sex"].levels) == ("binary", ("f", "m"))
    assert (f["edu"].kind, f["edu"].levels) == ("ordinal", ("low", "mid", "high"))  # an ordered category's order
    assert (f["owner"].kind, f["owner"].levels) == ("binary", (False, True))
    assert f["kids"].kind == "integer" and all(x.mutability == "free" and x.weight is None for x in spec.features)


def test_user_fields_win_over_the_inferred_ones():
    df = table()
    user = {"ignore": ["score"], "features": {
        "age": {"mutability": "increase", "lower": 18, "upper": 99, "unit": "years", "display": "Age"},
        "job": {"mutability": "fixed"},
        "kids": {"kind": "ordinal"},  # numbers: their order is the default
        "income": {"weight": 2.5, "resolution": 1},
        "sex": {"levels": ["m", "f"]},
    }}
    spec = load_spec(user, df, target="y", favourable="good")
    f = {x.name: x for x in spec.features}
    assert "score" not in spec.names and spec.ignore == ("score",)
    assert (f["age"].mutability, f["age"].lower, f["age"].upper, f["age"].unit, f["age"].display) == (
        "increase", 18, 99, "years", "Age")
    assert f["job"].mutability == "immutable"  # the issue's word, as the project's vocabulary
    assert (f["kids"].kind, f["kids"].levels) == ("ordinal", (0, 1, 2, 3))
    assert (f["income"].weight, f["income"].resolution, f["income"].lower) == (2.5, 1, df.income.min())
    assert f["sex"].levels == ("m", "f")
    spec2 = load_spec({"features": {"job": {"kind": "ordinal", "levels": ["pilot", "nurse", "clerk"]}}}, df,
                      target="y", favourable="good")
    assert spec2.feature("job").levels == ("pilot", "nurse", "clerk")


def test_favourable_and_levels_are_matched_to_the_column():
    df = pd.DataFrame({"code": ["1", "2", "3", "1"], "y": ["0", "1", "1", "0"]})
    spec = load_spec({"features": {"code": {"kind": "ordinal", "levels": [3, 2, 1]}}}, df, target="y", favourable=1)
    assert spec.favourable == "1" and spec.feature("code").levels == ("3", "2", "1")


def test_yaml_round_trip_and_cli(tmp_path, capsys):
    df = table()
    spec = infer_spec(df, target="y", favourable="good")
    text = spec.to_yaml(source="t.csv")
    assert text.startswith("# Data spec of t.csv") and "# mutability:" in text
    assert load_spec(yaml.safe_load(text), df) == spec
    assert DataSpec.from_dict(yaml.safe_load(text)) == spec and DataSpec.from_dict(spec.to_dict()) == spec
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)
    assert main(["infer", str(path), "--target", "y", "--favourable", "good"]) == 0
    out = capsys.readouterr().out
    csv = read_table(path)
    assert load_spec(yaml.safe_load(out), csv) == infer_spec(csv, target="y", favourable="good")
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(out.replace('mutability: "free"', 'mutability: "fixed"', 1))
    assert load_spec(spec_file, csv).features[0].mutability == "immutable"
    assert main(["infer", str(path), "--target", "nope", "--favourable", "good"]) == 2
    assert "column 'nope'" in capsys.readouterr().err


def test_parquet_tables(tmp_path):
    df = table()
    df.to_parquet(tmp_path / "t.parquet")
    back = read_table(tmp_path / "t.parquet")
    assert infer_spec(back, target="y", favourable="good") == infer_spec(df, target="y", favourable="good")
    (tmp_path / "t.xlsx").write_text("x")
    with pytest.raises(ValueError, match=r"^table: .*neither CSV"):
        read_table(tmp_path / "t.xlsx")
    with pytest.raises(ValueError, match=r"^table: .* is not a file"):
        read_table(tmp_path / "none.csv")


BAD_SPECS = [
    ({"features": {"agee": {"mutability": "fixed"}}}, {}, r"^feature 'agee': not a column of the table"),
    ({"features": {"age": {"kind": "complex"}}}, {}, r"^feature 'age': unknown kind 'complex'"),
    ({"features": {"job": {"kind": "ordinal"}}}, {}, r"^feature 'job': an ordinal feature needs its levels"),
    ({"features": {"age": {"lower": 60, "upper": 20}}}, {}, r"^feature 'age': bounds inverted"),
    ({"features": {"age": {"mutability": "sideways"}}}, {}, r"^feature 'age': unknown mutability 'sideways'"),
    ({"features": {"age": {"kinds": "real"}}}, {}, r"^feature 'age': unknown field 'kinds'"),
    ({"features": {"job": {"mutability": "increase"}}}, {}, r"^feature 'job': a categorical feature is free or immutable"),
    ({"features": {"job": {"levels": ["clerk", "nurse"]}}}, {}, r"^feature 'job': row \d+ value 'pilot' is not among"),
    ({"features": {"age": {"lower": 30}}}, {}, r"^feature 'age': row \d+ value .* outside the bounds"),
    ({"features": {"sex": {"levels": ["f", "m", "x"]}}}, {}, r"^feature 'sex': a binary feature has 2 levels"),
    ({"features": {"job": {"lower": 1}}}, {}, r"^feature 'job': bounds apply to real, integer and ordinal"),
    ({"features": {"age": {"resolution": 0}}}, {}, r"^feature 'age': resolution must be positive"),
    ({"features": {"income": {"weight": -1}}}, {}, r"^feature 'income': weight must be >= 0"),
    ({"features": {"age": {"kind": "integer"}, "income": {"kind": "integer"}}}, {},
     r"^feature 'income': row \d+ value .* is not an integer"),
    ({"favourable": "great"}, {"favourable": None}, r"^target 'y': favourable value 'great' is not in the column"),
    ({}, {"target": "kids", "favourable": 1}, r"^target 'kids': has 4 values .*a binary target has 2"),
    ({}, {"target": "nope", "favourable": 1}, r"^column 'nope': not a column of the table"),
    ({"speck": 1}, {}, r"^spec: unknown field 'speck'"),
    ({}, {"favourable": None}, r"^spec: favourable is not given"),
    ({"ignore": ["ghost"]}, {}, r"^column 'ghost': not a column of the table"),
]


@pytest.mark.parametrize(("user", "args", "message"), BAD_SPECS)
def test_bad_specs_get_one_line_naming_the_column(user, args, message):
    kw = {"target": "y", "favourable": "good", **args}
    with pytest.raises(ValueError, match=message) as err:
        load_spec(user, table(), **kw)
    assert "\n" not in str(err.value)


def test_table_checks_against_a_complete_spec():
    df = table()
    spec = infer_spec(df, target="y", favourable="good")
    with pytest.raises(ValueError, match=r"^column 'extra': in the table but not in the spec"):
        spec.check_table(df.assign(extra=1))
    with pytest.raises(ValueError, match=r"^column 'age': in the spec but missing from the table"):
        spec.check_table(df.drop(columns="age"))
    with pytest.raises(ValueError, match=r"^feature 'when': dtype datetime64"):
        infer_spec(df.assign(when=pd.Timestamp("2024-01-01")), target="y", favourable="good")


def test_missing_values_dropped_with_one_warning_and_rejected_in_records():
    df = table()
    df.loc[[3, 7], "income"] = np.nan
    df.loc[9, "y"] = None
    spec = load_spec(None, df, target="y", favourable="good")
    with pytest.warns(UserWarning, match=r"^data: dropped 3 of 60 rows with a missing value \(first: row 3, "
                                         r"column 'income'\)$") as caught:
        X, y = spec.clean(df)
    assert len(caught) == 1 and len(X) == len(y) == 57 and list(X.columns) == spec.names
    assert y.tolist() == (df.drop(index=[3, 7, 9]).y == "good").astype(int).tolist()
    records = table().drop(columns="y").head(3)
    spec.check_records(records)
    with pytest.raises(ValueError, match=r"^feature 'income': row 1 has no value \(a record with a missing value"):
        spec.check_records(records.assign(income=[1.0, np.nan, 2.0]))
    with pytest.raises(ValueError, match=r"^feature 'job': row 0 unseen category 'astronaut' is not among"):
        spec.check_records(records.assign(job="astronaut"))
    with pytest.raises(ValueError, match=r"^column 'agee': not a feature of the spec"):
        spec.check_records(records.assign(agee=1))
    with pytest.raises(ValueError, match=r"^feature 'age': missing from the record"):
        spec.check_records(records.drop(columns="age"))
    with pytest.raises(ValueError, match=r"^feature 'age': row 0 value 'old' is not a finite number"):
        spec.check_records(records.astype({"age": object}).assign(age="old"))


def test_raw_columns_feed_the_encoder():
    df = table()
    spec = infer_spec(df, target="y", favourable="good")
    enc = TabularEncoder.fit(spec.to_raw_columns(), df)
    assert enc.names[:4] == ["age", "income", "score", "ratio"] and "job=pilot" in enc.names
    back = enc.decode(enc.encode(df))
    assert back["job"].tolist() == df["job"].tolist() and back["age"].tolist() == df["age"].tolist()
    with pytest.raises(ValueError, match=r"^feature 'job': row 0 unknown category 'astronaut'"):
        enc.encode(df.assign(job="astronaut"))
    one = spec.to_raw_columns(one_hot={"sex": ("m", "f")}, code={"job": ("pilot", "clerk", "nurse"), "kids": (0, 1, 2, 3)})
    by = {c.name: c for c in one}
    assert (by["sex"].kind, by["sex"].levels) == ("categorical", ("m", "f"))
    assert by["job"].as_code and by["job"].levels == ("pilot", "clerk", "nurse")
    assert (by["kids"].kind, by["kids"].levels) == ("ordinal", (0, 1, 2, 3))
    with pytest.raises(ValueError, match=r"^feature 'age': stored as a one-hot group, it can be free or immutable"):
        load_spec({"features": {"age": {"mutability": "increase"}}}, df, target="y",
                  favourable="good").to_raw_columns(one_hot={"age": ()})


def test_code_columns_and_declared_bounds_in_the_encoder():
    df = table()
    cols = [RawColumn("job", "categorical", levels=("pilot", "clerk", "nurse", "chef"), as_code=True),
            RawColumn("age", "integer", lower=0, upper=120)]
    enc = TabularEncoder.fit(cols, df)
    assert enc.names == ["job", "age"] and enc.schema.features[0].kind == "categorical"
    assert enc.raw_columns[0].levels == ("pilot", "clerk", "nurse", "chef")  # every level kept, in order
    assert (enc.schema.features[1].lower, enc.schema.features[1].upper) == (0, 120)
    X = enc.encode(df)
    assert set(X[:, 0]) == {0.0, 1.0, 2.0} and enc.decode(X)["job"].tolist() == df["job"].tolist()
    assert TabularEncoder.from_dict(enc.to_dict()) == enc and enc.to_dict()["features"][0]["as_code"] is True
    assert "as_code" not in enc.to_dict()["features"][1]  # other columns' JSON as before
    with pytest.raises(ValueError, match=r"^feature 'age': row \d+ value \d+ is outside the declared bounds"):
        TabularEncoder.fit([RawColumn("age", "integer", lower=30, upper=40)], df)
    with pytest.raises(ValueError, match=r"^feature 'kids': as_code applies to categorical"):
        RawColumn("kids", "integer", as_code=True)


@pytest.mark.parametrize("name", [*DATASETS, *EXTRA_DATASETS])
def test_bundled_data_sets_are_specs(name):
    spec = spec_from_dataset(name)
    features = (DATASETS.get(name) or EXTRA_DATASETS[name]).features
    assert spec.to_raw_columns() == features and spec.favourable == 1


def test_bundled_encoder_through_the_spec_path():
    df, _ = load_raw("compas")
    assert TabularEncoder.fit(spec_from_dataset("compas").to_raw_columns(), df) == load_data("compas").encoder
    with pytest.raises(ValueError, match=r"^dataset: unknown data set 'mnist'"):
        spec_from_dataset("mnist")


def test_feature_spec_aliases():
    f = FeatureSpec("x", "float", "increase-only")
    assert (f.kind, f.mutability) == ("real", "increase")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert FeatureSpec("b", "bool", "fixed", levels=(0, 1)).mutability == "immutable"


def test_time_flag_and_the_bundled_defaults(tmp_path):
    """``time: years`` marks an increase-only number only time moves; the bundled Adult and German specs
    carry their default rules (data_gen/default_rules.py), display names and units; ``rules_for`` reads a
    config's ``tabular.rules``."""
    from data_gen.default_rules import default_rules, rules_for
    from envs.rules import RuleError

    age = FeatureSpec("age", "integer", "increase", unit="years", time="years")
    assert age.time == "years" and DataSpec.from_dict(DataSpec("y", 1, (age,)).to_dict()).features[0] == age
    assert "time" not in DataSpec("y", 1, (FeatureSpec("n", "integer"),)).to_dict()["features"]["n"]
    with pytest.raises(ValueError, match=r"^feature 'n': time \('years': only time moves it\) needs an increase"):
        FeatureSpec("n", "integer", "free", time="years")
    adult, german = spec_from_dataset("adult"), spec_from_dataset("german")
    assert adult.rules == default_rules("adult") and german.rules == default_rules("german") and adult.rules
    assert (german.feature("age").time, german.feature("duration").unit, german.feature("duration").display) == (
        "years", "months", "loan duration")
    assert not spec_from_dataset("compas").rules
    assert rules_for("none", dataset="adult") is None and rules_for("default", dataset="compas") is None
    assert rules_for("default", dataset="german") == default_rules("german")
    (tmp_path / "r.yaml").write_text("rules:\n  duration: {max_increase: 6}\n")
    assert rules_for(str(tmp_path / "r.yaml")).to_dict() == {"features": {"duration": {"max_increase": 6.0}}}
    with pytest.raises(ValueError, match="no file"):
        rules_for(str(tmp_path / "nowhere.yaml"))
    (tmp_path / "bad.yaml").write_text("duration: {max_increase: -1}\n")
    with pytest.raises(RuleError, match="max_increase"):
        rules_for(str(tmp_path / "bad.yaml"))
