"""A run on the user's own table and fitted Pipeline, end to end (issue 54 item 3): ``train.py`` on a config
that names a CSV, a target, a spec and a ``.skops`` model labels with MACE, trains generators, evaluates;
the run keeps its spec, split and a checked copy of the model; the service answers raw records in the
table's own columns and every answer it calls verified is accepted by the user's own model; bad input
leaves no half-written run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from sklearn.compose import ColumnTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from evaluation.tabular_experiment import (
    evaluate_tabular,
    load_tabular_config,
    load_tabular_run,
    train_tabular,
)
from tests.test_user_model import CATS, NUMS, USER_SPEC, make_table


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    import skops.io as sio

    root = tmp_path_factory.mktemp("your_data")
    table = make_table(400, seed=1)
    table.to_csv(root / "loans.csv", index=False)
    pipe = Pipeline([("prep", ColumnTransformer([("num", StandardScaler(), NUMS), ("cat", OneHotEncoder(), CATS)])),
                     ("clf", LogisticRegression(max_iter=1000))]).fit(table.drop(columns="y"), table.y)
    sio.dump(pipe, root / "pipe.skops")
    (root / "spec.yaml").write_text(yaml.safe_dump(USER_SPEC))
    cfg = {"name": "loans", "output_dir": str(root / "runs"),
           "tabular": {"table": str(root / "loans.csv"), "target": "y", "favourable": "good",
                       "spec": str(root / "spec.yaml"), "model_file": str(root / "pipe.skops"), "agents": 40,
                       "geco_agents": 0, "mace": {"time_limit": 20}, "compute": {"backend": "local", "n_workers": 1}},
           "generators": [{"method": "nearest_cfe"}]}
    (root / "loans.yaml").write_text(yaml.safe_dump(cfg))
    return train_tabular(load_tabular_config(root / "loans.yaml"), progress=False), pipe, table


def test_the_run_keeps_spec_split_and_a_checked_model(run_dir):
    d, pipe, table = run_dir
    world = d / "world"
    assert {p.name for p in world.iterdir()} >= {"spec.yaml", "data.npz", "route.json", "user_model.skops",
                                                 "model.json", "encoder.json", "fingerprint.json"}
    spec = yaml.safe_load((world / "spec.yaml").read_text())
    assert spec["target"] == "y" and spec["features"]["edu"]["kind"] == "ordinal"
    run = load_tabular_run(d)
    oracle = run.user_oracle()
    data = run.data()
    # The oracle is the user's model on raw records: it agrees with the pipeline on the stored test rows.
    raw = run.world.encoder.decode(data.X_test)
    assert np.array_equal(oracle(data.X_test), pipe.predict(raw[list(table.columns[:-1])]) == "good")
    assert np.array_equal(run.world.accepts(data.X_test), oracle(data.X_test))
    (world / "user_model.skops").write_bytes((world / "user_model.skops").read_bytes() + b"x")
    with pytest.raises(ValueError, match="does not match its SHA-256"):
        run.user_oracle()
    (world / "user_model.skops").write_bytes((world / "user_model.skops").read_bytes()[:-1])


def test_labels_are_certified_and_evaluation_runs(run_dir):
    d, _, _ = run_dir
    m = evaluate_tabular(d, progress=False)
    assert m["mace"]["certified_share"] >= 0.95
    assert m["generators"]["nearest_cfe"]["validity"] == 1.0


def test_served_answers_are_accepted_by_the_users_model(run_dir):
    from serving.tabular import TabularService

    d, pipe, table = run_dir
    from serving.startup import warm_up_tabular

    svc = TabularService(d, fallback_budget_s=None)
    try:
        assert warm_up_tabular(svc) >= 0.0  # serve.py's warm-up on a real generator's answers
        run = load_tabular_run(d)
        X = run.data().X_test
        X = X[~run.world.accepts(X)][:10]
        records = [svc.codec.decode(x) for x in X]
        out = svc.recommend_records(records)
        results = out["results"] if isinstance(out, dict) else out
        answered = [r for r in results if r["status"] == "ok"]
        assert answered and all(r["verified"] for r in answered)
        after = pd.DataFrame([{**rec, **{c["feature"]: c["to"] for c in r["changes"]}}
                              for rec, r in zip(records, results, strict=True) if r["status"] == "ok"])
        assert (pipe.predict(after[list(table.columns[:-1])]) == "good").all()
    finally:
        svc.close()


def test_bad_input_leaves_no_run_behind(tmp_path):
    table = make_table(100)
    table.to_csv(tmp_path / "t.csv", index=False)
    cfg = {"name": "bad", "output_dir": str(tmp_path / "runs"),
           "tabular": {"table": str(tmp_path / "t.csv"), "target": "y", "favourable": "excellent"}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError, match="excellent"):
        train_tabular(load_tabular_config(tmp_path / "bad.yaml"), progress=False)
    assert not (tmp_path / "runs" / "bad").exists()
    with pytest.raises(ValueError, match="exactly one"):
        (tmp_path / "both.yaml").write_text(yaml.safe_dump({**cfg, "tabular": {**cfg["tabular"], "dataset": "german"}}))
        load_tabular_config(tmp_path / "both.yaml")


def test_a_category_the_model_ordinal_encodes_is_one_code_column_in_requests():
    """OrdinalEncoder on a nominal column: the world stores one code column (RawColumn.as_code), and the
    service's codec reads and writes raw records of it both ways."""
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.preprocessing import OrdinalEncoder

    from data_gen.user_world import build_user_world
    from serving.records import RecordCodec

    table = make_table(300, seed=3)
    pipe = Pipeline([("prep", ColumnTransformer([("num", StandardScaler(), NUMS),
                                                 ("ord", OrdinalEncoder(), CATS)])),
                     ("clf", RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0))])
    pipe.fit(table.drop(columns="y"), table.y)
    world, bundle = build_user_world(table, target="y", favourable="good", model=pipe)
    coded = [f.name for f in world.encoder.raw_columns if getattr(f, "as_code", False)]
    assert "job" in coded
    codec = RecordCodec(world.encoder)
    X = bundle.data.X_test[:50]
    records = [codec.decode(x) for x in X]
    assert records[0]["job"] in set(table.job)
    assert np.array_equal(codec.encode(records), X)
    assert all(v is None for v in codec.violations(X, X))
