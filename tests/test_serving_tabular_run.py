"""A real tabular run end to end: trained with evaluation.tabular_experiment (German, a tree, 12 MACE-labelled
agents, the nearest_cfe generator), served by serve.py's code path, its fingerprint checked at start."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
import yaml
from fastapi.testclient import TestClient

import serve
from data_gen.compute import ComputeConfig
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


# ---------------------------------------------------------------- serve.py's lifecycle, with real processes

def _descendants(pid: int) -> set[int]:
    """Every living process below ``pid`` (from /proc)."""
    parents: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents.setdefault(int(fields[1]), []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        for c in parents.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_py_stops_every_child_on_a_signal(run_dir, tmp_path, sig):
    """A served run whose fallback process (and multiprocessing's resource tracker) has started: no
    process of it is left 5 s after SIGTERM / SIGINT."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen([sys.executable, "serve.py", str(run_dir), "--port", str(port), "--log-level", "warning"],
                            cwd=Path(__file__).resolve().parents[1], stdout=log, stderr=log)
    try:
        base = f"http://127.0.0.1:{port}"
        t_end = time.monotonic() + 180  # the subject is the shutdown: a loaded machine may take a minute to start it
        while True:
            assert proc.poll() is None and time.monotonic() < t_end, (tmp_path / "server.log").read_text()[-2000:]
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        svc = TabularService(run_dir, fallback_budget_s=None)
        svc.close()
        X = svc.run.labels().X
        answers, bad = svc.first_pass(X, 5)
        short = [i for i, a in enumerate(answers) if a.kind == "generator" and len(a.alternatives) < 5]
        record = svc.codec.decode(X[([*bad, *short])[0]])
        # the generator's answer is wrong or has fewer than 5 alternatives: GeCo, in the fallback process
        assert httpx.post(f"{base}/recommend", json={**record, "n_diverse": 5}, timeout=60).status_code == 200
        while len(children := _descendants(proc.pid)) < 2:  # the fallback process and the resource tracker
            assert time.monotonic() < t_end, children
            time.sleep(0.2)
        proc.send_signal(sig)
        t_stop = time.monotonic()
        proc.wait(timeout=10)
        while any(_alive(p) for p in children) and time.monotonic() - t_stop < 5:
            time.sleep(0.1)
        left = {p: open(f"/proc/{p}/cmdline").read().replace("\0", " ")[:120] for p in children if _alive(p)}
        assert not left, f"left after {time.monotonic() - t_stop:.1f} s: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in _descendants(proc.pid) | set(locals().get("children", ())):
            if _alive(p):
                os.kill(p, signal.SIGKILL)
        log.close()


# ---------------------------------------------------------------- Ray: a Parquet file of raw records in chunks

@pytest.mark.slow
def test_ray_batch_equals_in_process_with_a_worker_killed_and_resumes(run_dir, tmp_path, ray_cluster):
    from serving.batch import recommend_raw_file, recommend_raw_parquet

    svc = TabularService(run_dir, fallback_budget_s=None)
    svc.close()
    labels = svc.run.labels()
    frame = pd.DataFrame([svc.codec.decode(x) for x in labels.X[:12]])
    frame.insert(0, "id", [f"p{i}" for i in range(len(frame))])
    src = tmp_path / "in.parquet"
    frame.to_parquet(src, row_group_size=5)  # row groups of 5, 5, 2; chunks of 3: 3+2, 3+2, 2
    recommend_raw_file(svc, src, tmp_path / "ref.parquet")
    want = pd.read_parquet(tmp_path / "ref.parquet")

    killed: list[int] = []
    finished = threading.Event()

    def kill_a_worker() -> None:  # SIGKILL the first Ray worker seen running a chunk (it is loading the run)
        while not killed and not finished.is_set():  # on a loaded machine the workers may take a minute to start
            for d in os.listdir("/proc"):
                try:
                    with open(f"/proc/{d}/cmdline", "rb") as f:
                        if f.read().startswith(b"ray::_recommend_raw_chunk"):
                            os.kill(int(d), signal.SIGKILL)
                            killed.append(int(d))
                            return
                except (OSError, ValueError):
                    continue
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_worker)
    killer.start()
    compute = ComputeConfig(backend="ray", chunk_size=3)
    try:
        counts = recommend_raw_parquet(svc, src, tmp_path / "out.parquet", tmp_path / "work", compute=compute,
                                       progress=False)
    finally:
        finished.set()
    killer.join()
    got = pd.read_parquet(tmp_path / "out.parquet")
    assert killed, "no Ray worker was seen running a chunk"
    assert len(list((tmp_path / "work").glob("chunk_*.npz"))) == 5 and sum(counts.values()) == 12
    assert list(got.columns) == list(want.columns)
    for col in ("row", "id", "status", "changes", "verified", "method", "budget_exceeded", "alternatives"):
        assert got[col].tolist() == want[col].tolist(), col
    assert got["optimal"].astype(object).where(got["optimal"].notna(), None).tolist() == \
        want["optimal"].astype(object).where(want["optimal"].notna(), None).tolist()
    np.testing.assert_array_equal(got["distance"].to_numpy(float), want["distance"].to_numpy(float))
    # resumable: a rerun finds every chunk done and recomputes none
    stamps = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "work").glob("chunk_*.npz")}
    assert recommend_raw_parquet(svc, src, tmp_path / "again.parquet", tmp_path / "work", compute=compute,
                                 progress=False) == counts
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "work").glob("chunk_*.npz")} == stamps
    assert pd.read_parquet(tmp_path / "again.parquet").equals(got)
