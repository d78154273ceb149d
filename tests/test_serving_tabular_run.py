"""A real tabular run end to end: trained with evaluation.tabular_experiment (German, a tree, 12 MACE-labelled
agents, the nearest_cfe generator), served by serve.py's code path, its fingerprint checked at start."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import yaml
from fastapi.testclient import TestClient

import serve
from evaluation.tabular_experiment import load_tabular_config, train_tabular
from serving.service import ServiceError
from serving.tabular import TabularService, is_tabular_run
from serving.tabular_app import create_tabular_app


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tabular_run")
    cfg = {"name": "tiny_german", "output_dir": str(root / "runs"),
           "tabular": {"dataset": "german", "model": "tree", "seed": 0, "agents": 12, "test_fraction": 0.25,
                       "mace": {"backend": "milp", "norm": "one", "rel_tol": 0.001, "time_limit": 10},
                       "compute": {"backend": "local", "n_workers": 1}, "geco_agents": 0},
           "generators": [{"method": "nearest_cfe"}]}
    (root / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    return train_tabular(load_tabular_config(root / "tiny.yaml"), progress=False)


def test_serves_a_trained_run(run_dir):
    assert is_tabular_run(run_dir)
    app = create_tabular_app(run_dir, fallback_budget_s=None)
    svc = app.state.service
    try:
        c = TestClient(app)
        info = c.get("/model").json()
        fp = json.loads((run_dir / "world" / "fingerprint.json").read_text())
        assert (info["dataset"], info["model_class"], info["generator"]) == ("german", "tree", "nearest_cfe")
        assert info["fingerprint"]["model_sha256"] == fp["model_sha256"] and info["fallback"]["chain"] == ["geco", "mace"]
        labels = svc.run.labels()
        _, test = svc.run.split()
        for x in labels.X[test]:
            a = c.post("/recommend", json=svc.codec.decode(x)).json()
            assert a["status"] == "ok" and a["verified"] and a["method"] in ("nearest_cfe", "geco", "mace"), a
    finally:
        svc.close()


def test_serve_py_offline_file_and_a_changed_world(run_dir, tmp_path, capsys):
    svc = TabularService(run_dir, fallback_budget_s=None)
    svc.close()
    labels = svc.run.labels()
    pd.DataFrame([svc.codec.decode(x) for x in labels.X[:4]]).to_csv(tmp_path / "in.csv", index=False)
    assert serve.main([str(run_dir), "--batch-in", str(tmp_path / "in.csv"), "--batch-out", str(tmp_path / "out.csv")]) == 0
    out = pd.read_csv(tmp_path / "out.csv")
    assert len(out) == 4 and set(out["status"]) <= {"ok", "no_recourse"} and out["verified"][out["status"] == "ok"].all()
    # the world's model changes after training: refused at start, naming the file
    bad = tmp_path / "changed"
    shutil.copytree(run_dir, bad)
    model = json.loads((bad / "world" / "model.json").read_text())
    (bad / "world" / "model.json").write_text(json.dumps(model) + "\n")
    with pytest.raises(ServiceError, match="model.json"):
        TabularService(bad)
    assert serve.main([str(bad)]) == 2
    assert "model.json" in capsys.readouterr().err
