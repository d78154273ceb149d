"""The recommendation service (serving/, serve.py): answers, verification, fallback,
bad input, provenance and the offline batch command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

import learners.registry  # noqa: F401  (the real generators, before the test one is added)
from data_gen.dataset import load_dataset
from learners.base import GENERATORS
from serving.app import create_app
from serving.service import ServiceError
from solvers.setcover_fast import FastSetCover
from tests.serving_run import N_FEATURES as N
from tests.serving_run import table_generator_registered, train_run


@pytest.fixture(scope="module", autouse=True)
def table_generator():
    with table_generator_registered():
        yield


@pytest.fixture(scope="module")
def run(tmp_path_factory, table_generator) -> Path:
    return train_run(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def ds(run):
    return load_dataset(json.loads((run / "dataset.json").read_text())["path"])


@pytest.fixture(scope="module")
def client(run) -> TestClient:
    return TestClient(create_app(run, model="table"))


@pytest.fixture(scope="module")
def wrong_app(run):
    return create_app(run, model="wrong", fallback_budget_s=None)


def agents(ds, k: int) -> tuple[list[list[int]], list[int]]:
    return ds.X[:k].astype(int).tolist(), ds.groups[:k].astype(int).tolist()


def batch(X: list[list[int]], G: list[int]) -> dict[str, Any]:
    """A /recommend/batch body: each agent with its group."""
    return {"agents": [{"x": x, "group": g} for x, g in zip(X, G, strict=True)]}


def check_answer(ds, x: list[int], g: int, ans: dict[str, Any]) -> None:
    """The answer is what the world says about its actions."""
    w = ds.world
    ids = [a["id"] for a in ans["actions"]]
    for a in ans["actions"]:
        assert a["name"] == w.action_names[a["id"]]
        assert a["effects"] == [w.feature_names[j] for j in np.flatnonzero(w.actions[a["id"]])]
    if ans["status"] == "ok":
        _, cost, ok = w.rollout(np.array([x]), np.array([ids]), np.array([g]))
        assert ok[0] and ans["verified"] and ans["cost"] == pytest.approx(cost[0])


def optimum(ds, X: list[list[int]], groups: list[int]) -> np.ndarray:
    return FastSetCover().label_batch(ds.world, np.array(X, np.uint8), np.array(groups)).cost


# ---------------------------------------------------------------------------- happy paths
def test_single_recommendation(client, ds):
    X, G = agents(ds, 1)
    r = client.post("/recommend", json={"x": X[0], "group": G[0]})
    assert r.status_code == 200, r.text
    ans = r.json()
    assert ans["status"] == "ok" and ans["verified"] and not ans["budget_exceeded"]
    assert ans["method"] in ("generator:test_table", "fallback:setcover-bnb")
    check_answer(ds, X[0], G[0], ans)
    if ans["method"] == "generator:test_table":
        assert ans["confidence"] == 0.75


def test_batch_recommendation(client, ds):
    X, G = agents(ds, 60)
    r = client.post("/recommend/batch", json=batch(X, G))
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["results"]) == 60 and body["counts"] == {"ok": 60}
    best = optimum(ds, X, G)
    methods = [a["method"] for a in body["results"]]
    assert methods.count("generator:test_table") > 30  # training agents: the table knows most
    for x, g, ans, c in zip(X, G, body["results"], best, strict=True):
        check_answer(ds, x, g, ans)
        assert ans["cost"] >= c - 1e-9


def test_already_positive_and_no_recourse(client, ds):
    w = ds.world
    reach = (w.access.astype(int) @ w.actions.astype(int)) > 0
    g, j = map(int, np.argwhere(~reach)[0])  # a capability group g can never get
    no_way = [1] * w.n_features
    no_way[j] = 0
    r = client.post("/recommend/batch", json=batch([[1] * w.n_features, no_way], [0, g]))
    assert r.status_code == 200, r.text
    pos, none = r.json()["results"]
    assert pos == {"status": "already_positive", "actions": [], "cost": 0.0, "confidence": None, "verified": True,
                   "method": "world", "optimal": None, "budget_exceeded": False}
    assert none["status"] == "no_recourse" and none["actions"] == [] and none["cost"] is None
    assert FastSetCover().label_batch(w, np.array([no_way], np.uint8), np.array([g])).cost[0] == np.inf


# ---------------------------------------------------------------------------- verification and fallback
def test_invalid_answers_fall_back_to_the_exact_optimum(wrong_app, ds):
    c = TestClient(wrong_app)
    before = c.get("/model").json()["counters"]
    X, G = agents(ds, 40)
    r = c.post("/recommend/batch", json=batch(X, G))
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert {a["method"] for a in res} == {"fallback:setcover-bnb"}
    assert all(a["verified"] and a["optimal"] and a["confidence"] is None for a in res)
    np.testing.assert_allclose([a["cost"] for a in res], optimum(ds, X, G))
    for x, g, ans in zip(X, G, res, strict=True):
        check_answer(ds, x, g, ans)
    after = c.get("/model").json()["counters"]
    assert after["fallbacks"] - before["fallbacks"] == 40
    assert after["generated"] - before["generated"] == 40
    assert after["agents"] - before["agents"] == 40 and after["requests"] - before["requests"] == 1
    assert after["fallback_rate"] == 1.0


def test_fallback_budget_exceeded_answers_unknown(run, ds):
    c = TestClient(create_app(run, model="wrong", fallback_budget_s=0.0))
    X, G = agents(ds, 5)
    res = c.post("/recommend/batch", json=batch(X, G)).json()["results"]
    assert all(a["status"] == "unknown" and a["budget_exceeded"] and not a["verified"] and a["cost"] is None
               and a["actions"] == [] for a in res)
    assert c.get("/model").json()["counters"]["budget_exceeded"] == 5


def test_failing_generator_falls_back(run, ds, monkeypatch):
    app = create_app(run, model="table")
    svc = app.state.service

    def broken(X):
        raise RuntimeError("boom")

    monkeypatch.setattr(svc.generator, "predict", broken)
    X, G = agents(ds, 3)
    res = TestClient(app).post("/recommend/batch", json=batch(X, G)).json()["results"]
    np.testing.assert_allclose([a["cost"] for a in res], optimum(ds, X, G))
    assert {a["method"] for a in res} == {"fallback:setcover-bnb"}


def test_unexpected_error_is_a_json_500(run, monkeypatch):
    app = create_app(run, model="table")
    monkeypatch.setattr(app.state.service, "describe", lambda: 1 / 0)
    r = TestClient(app, raise_server_exceptions=False).get("/model")
    assert r.status_code == 500 and "ZeroDivisionError" in r.json()["detail"]


@pytest.mark.skipif("hamming_knn" not in GENERATORS, reason="hamming_knn not available")
def test_real_generator_answers_are_verified(run, ds):
    c = TestClient(create_app(run, model="hamming_knn"))
    X, G = agents(ds, 30)
    res = c.post("/recommend/batch", json=batch(X, G)).json()["results"]
    for x, g, ans in zip(X, G, res, strict=True):
        assert ans["status"] == "ok" and ans["verified"]
        check_answer(ds, x, g, ans)


# ---------------------------------------------------------------------------- bad input
ROW = [0] * N
A = {"x": ROW, "group": 0}
BAD = [
    ("/recommend", {"x": [0] * 3, "group": 0}, 422, "x: expected 8 features"),
    ("/recommend", {"x": [0] * 9, "group": 0}, 422, "x: expected 8 features"),
    ("/recommend", {"x": ["a"] * N, "group": 0}, 422, "x[0]"),
    ("/recommend", {"x": [True] * N, "group": 0}, 422, "x[0]"),
    ("/recommend", {"x": [0.5] + ROW[1:], "group": 0}, 422, "x[0]"),
    ("/recommend", {"x": ROW[:-1] + [2], "group": 0}, 422, "x[7]"),
    ("/recommend", {"x": ROW[:-1] + [10**30], "group": 0}, 422, "x[7]"),
    ("/recommend", {"x": ROW[:-1] + [[1]], "group": 0}, 422, "x[7]"),
    ("/recommend", {"x": "01010101", "group": 0}, 422, "x"),
    ("/recommend", {"x": None, "group": 0}, 422, "x"),
    ("/recommend", {"group": 0}, 422, "x"),
    ("/recommend", {"x": ROW}, 422, "group"),
    ("/recommend", {"x": ROW, "group": 2}, 422, "group"),
    ("/recommend", {"x": ROW, "group": -1}, 422, "group"),
    ("/recommend", {"x": ROW, "group": "1"}, 422, "group"),
    ("/recommend", {"x": ROW, "group": 0, "extra": 1}, 422, "extra"),
    ("/recommend", [ROW], 422, "body"),
    ("/recommend", {"x": [], "group": 0}, 422, "x: expected 8 features, got 0"),
    ("/recommend/batch", {"agents": []}, 422, "agents: expected at least 1 agent, got 0"),
    ("/recommend/batch", {"agents": [A, {"x": ROW[:-1], "group": 0}]}, 422, "agents[1].x: expected 8 features"),
    ("/recommend/batch", {"agents": [A, {"x": ROW[:-1] + [3], "group": 0}]}, 422, "agents[1].x[7]"),
    ("/recommend/batch", {"agents": [{"x": ROW}]}, 422, "agents[0].group: required field missing"),
    ("/recommend/batch", {"agents": [A, {"x": ROW, "group": 2}]}, 422, "agents[1].group"),
    ("/recommend/batch", {"agents": [{"x": ROW, "group": None}]}, 422, "agents[0].group"),
    ("/recommend/batch", {"agents": [A], "group": [0]}, 422, "group: unknown field"),
    ("/recommend/batch", {"agents": [ROW], "groups": [0]}, 422, 'agents[0]: expected {"x": [...], "group": id}'),
    ("/recommend/batch", {"agents": [A] * 10_001}, 422, "agents: batch of 10001 agents exceeds max_batch=10000"),
    ("/recommend/batch", {"agents": [{"x": [9] * N}] * 10_001}, 422, "agents: batch of 10001 agents exceeds"),
]


@pytest.mark.parametrize("path,body,code,field", BAD, ids=[f"{i}-{b[3]}" for i, b in enumerate(BAD)])
def test_bad_input_is_a_clear_4xx(client, path, body, code, field):
    r = client.post(path, json=body)
    assert r.status_code == code, r.text
    assert field in r.json()["detail"]


RAW = [
    (b'{"x": [NaN, 0, 0, 0, 0, 0, 0, 0], "group": 0}', "application/json", 422, "x[0]"),
    (b'{"x": [Infinity, 0, 0, 0, 0, 0, 0, 0], "group": 0}', "application/json", 422, "x[0]"),
    (b'{"x": [1e400, 0, 0, 0, 0, 0, 0, 0], "group": 0}', "application/json", 422, "x[0]"),
    (b'{"x": [0, 0, ', "application/json", 400, "body: invalid JSON"),
    (b"\xff\xfe\x00\x01garbage", "application/json", 400, "body: not UTF-8"),  # JSON over HTTP is UTF-8
    (b'{"x": [0, 0, 0, 0, 0, 0, 0, 0], "group": 0}', "text/plain", 422, "body"),
    (b"", "application/json", 422, "body"),
    (b"x" * 3_000_000, "application/json", 413, "body"),
]


@pytest.mark.parametrize("content,ctype,code,field", RAW, ids=[f"{i}-{r[3]}" for i, r in enumerate(RAW)])
def test_malformed_bodies_are_4xx(client, content, ctype, code, field):
    r = client.post("/recommend", content=content, headers={"content-type": ctype})
    assert r.status_code == code, r.text
    assert field in r.json()["detail"]


def test_oversize_body_without_content_length_is_413(client):
    def chunks():
        for _ in range(300):
            yield b" " * 10_000

    r = client.post("/recommend/batch", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "body" in r.json()["detail"]


def test_rejections_are_counted(client):
    before = client.get("/model").json()["counters"]["rejected"]
    client.post("/recommend", json={"x": [7]})
    client.get("/nowhere")
    client.post("/recommend", content=b" " * 3_000_000, headers={"content-type": "application/json"})
    assert client.get("/model").json()["counters"]["rejected"] == before + 3


# ---------------------------------------------------------------------------- provenance
def test_model_description(client, run, ds):
    info = client.get("/model").json()
    assert info["model"] == "table" and info["method"] == "test_table"
    assert info["filter"] == "all" and info["seed"] == 0
    assert info["world_fingerprint"] == ds.world.fingerprint() == ds.manifest["world_fingerprint"]
    assert len(info["model_fingerprint"]) == 64 and info["model_files"] == ["config.json", "arrays.npz"]
    assert info["dataset"]["config"]["n_features"] == N and info["dataset"]["name"] == "svc"
    assert info["metrics"] is None
    assert set(info["counters"]) >= {"requests", "agents", "verified", "fallbacks", "fallback_rate"}
    assert client.get("/health").json()["status"] == "ok"
    assert client.get("/docs").status_code == 200
    assert "/recommend/batch" in client.get("/openapi.json").json()["paths"]


def test_metrics_and_model_fingerprint_follow_the_files(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    entry = {"seed": 0, "accuracy": {"value": 0.5}}
    (copy / "metrics.json").write_text(json.dumps({"models": {"table [all]": {"seeds": [entry]}}}))
    first = create_app(copy, model="table").state.service
    assert first.describe()["metrics"] == entry
    weights = copy / "models" / "table" / "all" / "seed0" / "arrays.npz"
    with np.load(weights) as z:
        X, sets = z["X"], z["sets"]
    np.savez(weights, X=X[:-1], sets=sets[:-1])
    assert create_app(copy, model="table").state.service.model_fingerprint != first.model_fingerprint


def test_changed_world_is_refused(run, ds, tmp_path):
    import serve

    data, copy = tmp_path / "data", tmp_path / "run"
    shutil.copytree(ds.path, data)
    shutil.copytree(run, copy)
    world = json.loads((data / "world.json").read_text())
    world["costs"][0] += 1.0
    (data / "world.json").write_text(json.dumps(world))
    info = json.loads((copy / "dataset.json").read_text())
    (copy / "dataset.json").write_text(json.dumps({**info, "path": str(data)}))
    with pytest.raises(ServiceError, match="fingerprint.*changed since training"):
        create_app(copy, model="table")
    assert serve.main([str(copy), "--model", "table"]) == 2


def test_unknown_model_filter_seed_are_refused(run):
    for kw, word in (({"model": "nope"}, "model"), ({"rule": ">40"}, "filter"), ({"seed": 7}, "seed")):
        with pytest.raises(ServiceError, match=word):
            create_app(run, **{"model": "table", **kw})


# ---------------------------------------------------------------------------- offline batch
def test_offline_batch_csv_to_parquet_matches_http(client, run, ds, tmp_path):
    import serve

    X, G = agents(ds, 25)
    src = tmp_path / "agents.csv"
    pd.DataFrame({**{f"f{j}": [x[j] for x in X] for j in range(N)}, "group": G}).to_csv(src, index=False)
    out = tmp_path / "out.parquet"
    assert serve.main([str(run), "--model", "table", "--batch-in", str(src), "--batch-out", str(out)]) == 0
    got = pd.read_parquet(out)
    http = client.post("/recommend/batch", json=batch(X, G)).json()["results"]
    assert list(got.columns) == ["agent", "group", "status", "action_ids", "actions", "cost", "confidence",
                                 "verified", "method", "optimal", "budget_exceeded"]
    assert len(got) == 25 and got["group"].tolist() == G
    assert got["status"].tolist() == [a["status"] for a in http]
    assert [list(v) for v in got["action_ids"]] == [[a["id"] for a in r["actions"]] for r in http]
    assert [list(v) for v in got["actions"]] == [[a["name"] for a in r["actions"]] for r in http]
    np.testing.assert_allclose(got["cost"], [a["cost"] for a in http])
    assert got["method"].tolist() == [a["method"] for a in http] and got["verified"].all()


def test_offline_batch_parquet_list_column_to_csv(run, ds, tmp_path):
    import serve

    X, G = agents(ds, 10)
    X[0] = [1] * N  # already positive
    src, out = tmp_path / "agents.parquet", tmp_path / "out.csv"
    pd.DataFrame({"x": X, "group": G}).to_parquet(src)
    assert serve.main([str(run), "--model", "wrong", "--batch-in", str(src), "--batch-out", str(out)]) == 0
    got = pd.read_csv(out)
    assert len(got) == 10 and got["status"].iloc[0] == "already_positive"
    assert (got["method"].iloc[1:] == "fallback:setcover-bnb").all()
    np.testing.assert_allclose(got["cost"].iloc[1:], optimum(ds, X[1:], G[1:]))
    assert json.loads(got["action_ids"].iloc[0]) == []


def test_offline_batch_bad_file_is_a_clear_error(run, tmp_path, capsys):
    import serve

    src = tmp_path / "bad.csv"
    pd.DataFrame({"f0": [0], "f1": [1]}).to_csv(src, index=False)
    assert serve.main([str(run), "--model", "table", "--batch-in", str(src), "--batch-out",
                       str(tmp_path / "o.csv")]) == 2
    assert "columns" in capsys.readouterr().err
    pd.DataFrame({**{f"f{j}": [0.0] for j in range(N)}, "group": [0]}).assign(f3=[np.nan]).to_csv(src, index=False)
    assert serve.main([str(run), "--model", "table", "--batch-in", str(src), "--batch-out",
                       str(tmp_path / "o.csv")]) == 2
    assert "NaN" in capsys.readouterr().err


# ---------------------------------------------------------------------------- layering
def test_no_lower_layer_imports_serving():
    """serving sits above learners: envs, solvers, data_gen and learners never import it."""
    import ast

    root = Path(__file__).resolve().parents[1]
    offenders = []
    for pkg in ("envs", "solvers", "data_gen", "learners"):
        for path in sorted((root / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
                offenders += [f"{path.relative_to(root)}: {n}" for n in names if n.split(".")[0] == "serving"]
    assert offenders == []
