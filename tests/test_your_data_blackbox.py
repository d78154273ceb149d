"""The black-box route end to end (issue 54): a user's Pipeline with a step recourse-gym cannot translate
(PolynomialFeatures) trains through ``train.py``'s runner with GeCo labels (the route stated, nothing
certified), reloads with the user's model as the world's ``BlackBoxModel`` (its file checked), is evaluated
against GeCo ("reference: GeCo, not certified"), is served with GeCo as the only fallback (MACE never
called, ``optimal`` never true, every answer accepted by the user's model) and is not audited."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from sklearn.compose import ColumnTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, PolynomialFeatures, StandardScaler

from data_gen.mace_labels import MaceLabelSet
from data_gen.user_model import BlackBoxModel
from evaluation.blackbox_runs import AUDIT_REFUSAL, LABELS_LINE
from evaluation.tabular_experiment import (
    evaluate_tabular,
    load_tabular_config,
    load_tabular_run,
    train_tabular,
)
from tests.test_user_model import CATS, NUMS, USER_SPEC, make_table

ROOT = Path(__file__).resolve().parents[1]


def _no_mace(*args, **kwargs):
    raise AssertionError("MACE was called on a black-box world")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    import skops.io as sio

    root = tmp_path_factory.mktemp("your_data_blackbox")
    table = make_table(400, seed=1)
    table.to_csv(root / "loans.csv", index=False)
    pipe = Pipeline([("prep", ColumnTransformer([("num", StandardScaler(), NUMS), ("cat", OneHotEncoder(), CATS)])),
                     ("poly", PolynomialFeatures(2)), ("clf", LogisticRegression(max_iter=2000))])
    pipe.fit(table.drop(columns="y"), table.y)
    sio.dump(pipe, root / "pipe.skops")
    (root / "spec.yaml").write_text(yaml.safe_dump(USER_SPEC))
    cfg = {"name": "loans_bb", "output_dir": str(root / "runs"),
           "tabular": {"table": str(root / "loans.csv"), "target": "y", "favourable": "good",
                       "spec": str(root / "spec.yaml"), "model_file": str(root / "pipe.skops"), "agents": 30,
                       "geco_agents": 5, "compute": {"backend": "local", "n_workers": 1}},
           "generators": [{"method": "nearest_cfe"},  # served: the first
                          {"method": "proposer", "params": {"max_epochs": 20, "surrogate": True, "surrogate_queries": 60,
                                                            "surrogate_epochs": 20, "self_labels": 12,
                                                            "self_label_calls": 2, "self_label_rows": 200}}]}
    (root / "loans.yaml").write_text(yaml.safe_dump(cfg))
    mp = pytest.MonkeyPatch()
    from solvers.mace import MACE

    mp.setattr(MACE, "solve", _no_mace)  # the whole module: training, evaluation and serving never call MACE
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        d = train_tabular(load_tabular_config(root / "loans.yaml"), progress=True)
    yield d, pipe, table, out.getvalue()
    mp.undo()


@pytest.mark.slow
def test_training_labels_with_geco_and_states_the_route(run_dir):
    d, _, _, printed = run_dir
    assert LABELS_LINE in printed
    route = json.loads((d / "world" / "route.json").read_text())
    assert route["route"] == "black-box" and "PolynomialFeatures" in route["report"]
    marker = json.loads((d / "world" / "model.json").read_text())
    assert marker["kind"] == "user_black_box" and marker["model_sha256"] == route["model_sha256"]
    manifest = json.loads((d / "labels" / "manifest.json").read_text())
    assert manifest["solver"] == "geco" and manifest["certified"] is False
    labels = MaceLabelSet.load(d / "labels")
    assert labels.ok.sum() >= 20 and np.all(labels.delta_min == 0)  # no lower bound: nothing certified
    assert not (labels.status == "no_recourse").any()  # GeCo finding nothing is no proof
    assert not (d / "labels" / "chunks").exists() and (d / "labels" / "chunks_geco").exists()
    assert (d / "models" / "nearest_cfe").exists()


def test_the_run_reloads_with_the_users_model_as_a_checked_black_box(run_dir):
    d, pipe, table, _ = run_dir
    run = load_tabular_run(d)
    assert run.black_box and isinstance(run.world.model, BlackBoxModel)
    assert run.user_oracle() is run.world.model.oracle
    X = run.data().X_test
    raw = run.world.encoder.decode(X)
    assert np.array_equal(run.world.accepts(X), pipe.predict(raw[list(table.columns[:-1])]) == "good")
    model_file = d / "world" / "user_model.skops"
    original = model_file.read_bytes()
    try:
        model_file.write_bytes(original + b"x")
        with pytest.raises(ValueError, match="does not match its SHA-256"):
            load_tabular_run(d)
    finally:
        model_file.write_bytes(original)
    marker = d / "world" / "model.json"
    text = marker.read_text()
    try:
        marker.write_text(text.replace("user_model.skops", "other.skops"))
        with pytest.raises(ValueError, match="fingerprint"):
            load_tabular_run(d)
    finally:
        marker.write_text(text)


def test_evaluation_is_against_geco_and_certifies_nothing(run_dir):
    d, _, _, _ = run_dir
    m = evaluate_tabular(d, progress=False)
    assert m["route"] == "black-box" and m["reference"] == "GeCo, not certified"
    assert m["mace"]["certified_share"] == "n/a (black box)" and "geco" not in m
    assert m["generators"]["nearest_cfe"]["validity"] == 1.0
    assert m["generators"]["proposer"]["validity"] == 1.0  # within its budget, through the user's model alone
    report = (d / "report.md").read_text()
    assert "reference: GeCo, not certified" in report and "n/a (black box)" in report
    assert "MACE (certified)" not in report


def test_the_proposer_answers_within_its_budget_through_the_users_model(run_dir):
    """The learned black-box generator (issue 56) on the black-box route: reloaded from the run, it answers
    within 2 round trips and 256 rows per agent (enforced), and the user's own Pipeline accepts every answer."""
    from dataclasses import replace

    from envs.black_box import BlackBoxModel as Counted
    from envs.black_box import Budget
    from learners.tabular import TabularGenerator

    d, pipe, table, _ = run_dir
    run = load_tabular_run(d)
    gen = TabularGenerator.load(d / "models" / "proposer")
    assert gen.fit_info_["surrogate"]["rows"] > 0  # the surrogate's queries were the model's, counted
    own = gen.fit_info_["self_labels"]  # the rejected training rows MACE did not label, answered on two processes
    assert own["agents"] == 12 and own["labels"] == gen.fit_info_["labels"] + own["answered"] and own["rows"] > 0
    assert (d / "self_labels" / "proposer").is_dir()  # kept under the run: an interrupted fit resumes
    X = run.data().X_test
    X = X[~run.world.accepts(X)][:8]
    counted = Counted(run.world.model)
    rec = gen.recommend_within(replace(run.world, model=counted), X, Budget(2, 256))
    assert rec.found.any() and counted.calls <= 2 and (rec.rows <= 256).all()
    raw = run.world.encoder.decode(rec.CF[rec.found])
    assert (pipe.predict(raw[list(table.columns[:-1])]) == "good").all()


def test_the_proposer_is_served_on_the_black_box_route(run_dir):
    """``serve.py --model proposer``: its answers are verified against the user's model, never optimal."""
    from serving.tabular import TabularService

    d, pipe, table, _ = run_dir
    svc = TabularService(d, model="proposer", fallback_budget_s=None)
    try:
        run = load_tabular_run(d)
        X = run.data().X_test
        X = X[~run.world.accepts(X)][:6]
        records = [svc.codec.decode(x) for x in X]
        results = svc.recommend_records(records)
        assert any(r["method"] == "proposer" for r in results)
        assert all(r["optimal"] is None for r in results)
        answered = [(rec, r) for rec, r in zip(records, results, strict=True) if r["status"] == "ok"]
        assert answered and all(r["verified"] for _, r in answered)
        after = pd.DataFrame([{**rec, **{c["feature"]: c["to"] for c in r["changes"]}} for rec, r in answered])
        assert (pipe.predict(after[list(table.columns[:-1])]) == "good").all()
    finally:
        svc.close()


def test_served_answers_come_from_geco_only_and_are_never_optimal(run_dir, monkeypatch):
    from serving.page import form_schema
    from serving.tabular import TabularService

    d, pipe, table, _ = run_dir
    svc = TabularService(d, fallback_budget_s=None)
    try:
        assert svc.black_box and svc.describe()["fallback"]["chain"] == ["geco"]
        assert "not certified" in svc.describe()["fallback"]["certificate"]
        assert form_schema(svc).certificate is None  # the page: "optimality not certified"
        run = load_tabular_run(d)
        X = run.data().X_test
        X = X[~run.world.accepts(X)][:6]
        records = [svc.codec.decode(x) for x in X]
        results = svc.recommend_records(records)
        # The generator's answers, then the same records with the generator silenced: GeCo answers them all.
        monkeypatch.setattr(svc, "_generate", lambda X, n: (np.full(X.shape, np.nan), None))
        results += svc.recommend_records(records[:3])
        assert {r["method"] for r in results[-3:]} <= {"geco", "fallback"}
        assert any(r["method"] == "geco" for r in results[-3:])
        assert all(r["optimal"] is None for r in results) and all(r["status"] != "no_recourse" for r in results)
        answered = [(rec, r) for rec, r in zip(records + records[:3], results, strict=True) if r["status"] == "ok"]
        assert answered and all(r["verified"] for _, r in answered)
        after = pd.DataFrame([{**rec, **{c["feature"]: c["to"] for c in r["changes"]}} for rec, r in answered])
        assert (pipe.predict(after[list(table.columns[:-1])]) == "good").all()  # the user's own model accepts
        svc.geco = None  # nothing left after GeCo: "unknown", never MACE, never a proof
        a = svc._chain_here(X[0], 0)
        assert a.status == "unknown" and a.optimal is None
    finally:
        svc.close()


def test_the_audit_refuses_a_black_box_run(run_dir, capsys):
    d, _, _, _ = run_dir
    sys.path.insert(0, str(ROOT))
    import evaluate

    assert evaluate.main(["--audit", str(d), "--groups", "sex"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and AUDIT_REFUSAL in lines[0], lines
