"""Batch jobs that survive a restart (issue 57 item 6, serving/job_files.py): a ``serve.py`` process killed with
SIGKILL while 3 jobs run finishes all 3 after a restart on the same jobs directory, with the answers an
uninterrupted run gives; ``DELETE`` removes a job for good (a later ``GET`` is 404, also after a restart)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml
from pydantic import TypeAdapter

from evaluation.tabular_experiment import load_tabular_run
from serving.jobs import JobStore
from serving.tabular import TabularService
from tests.test_user_model import train_tiny_run

ROOT = Path(__file__).resolve().parents[1]
N_RECORDS = 4_000  # per job: 16 chunks of 250


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return train_tiny_run(tmp_path_factory.mktemp("jobs_restart"))


def _records(run_dir: Path) -> list[list[dict]]:
    """Three jobs of rejected test records the generator answers itself (no time-dependent fallback)."""
    svc = TabularService(run_dir, fallback_budget_s=0.0)
    try:
        X = load_tabular_run(run_dir).data().X_test
        X = X[~svc.world.accepts(X)]
        answers = svc.recommend(X)
        X = X[[a.method == svc.model_name for a in answers]]
        assert len(X) >= 3
        rng = np.random.default_rng(0)
        return [[svc.codec.decode(x) for x in X[rng.integers(0, len(X), N_RECORDS)]] for _ in range(3)]
    finally:
        svc.close()


def _serve(run_dir: Path, jobs_dir: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "serve.py"), str(run_dir), "--port", str(port),
                             "--jobs-dir", str(jobs_dir), "--fallback-budget-ms", "0", "--log-level", "warning"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _ready(c: httpx.Client, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()
        try:
            if c.get("/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError("the server did not become ready")


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (/proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _strip(answers: list[dict]) -> list[dict]:
    return [{k: v for k, v in a.items() if k != "latency_ms"} for a in answers]


def _all(c: httpx.Client, job_id: str) -> dict:
    out, offset = None, 0
    results: list = []
    while True:
        page = c.get(f"/jobs/{job_id}", params={"offset": offset, "limit": 1000}).json()
        out = out or page
        results += page["results"]
        offset += len(page["results"])
        if not page["results"]:
            return {**page, "results": results}


@pytest.mark.slow
def test_killed_server_finishes_its_jobs_after_a_restart(run_dir, tmp_path):
    jobs = _records(run_dir)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    jobs_dir = tmp_path / "jobs"
    proc = _serve(run_dir, jobs_dir, port)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as c:
        _ready(c, proc)
        ids = [c.post("/jobs", json={"records": recs}).json()["id"] for recs in jobs]
        deadline = time.time() + 120
        while not list(jobs_dir.glob(f"{ids[0]}/chunk-*.json")) and time.time() < deadline:
            time.sleep(0.01)
        kids = _children(proc.pid)  # the batch worker (and the fallback process, if it started)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        deadline = time.time() + 10
        while any(Path(f"/proc/{k}").exists() for k in kids) and time.time() < deadline:
            time.sleep(0.1)
        assert not [k for k in kids if Path(f"/proc/{k}").exists()], "a child outlived the SIGKILLed server"
        statuses = [yaml.safe_load((jobs_dir / i / "meta.json").read_text())["status"] for i in ids]
        assert statuses.count("done") < 3, "every job ended before the kill: nothing was interrupted"
        proc = _serve(run_dir, jobs_dir, port)
        try:
            _ready(c, proc)
            deadline = time.time() + 300
            while time.time() < deadline and any(c.get(f"/jobs/{i}", params={"limit": 0}).json()["status"] != "done"
                                                 for i in ids):
                time.sleep(0.2)
            got = [_all(c, i) for i in ids]
            # Deleted for good: 404 now and after another restart.
            assert c.delete(f"/jobs/{ids[2]}").status_code == 200
            assert c.get(f"/jobs/{ids[2]}").status_code == 404 and not (jobs_dir / ids[2]).exists()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    svc = TabularService(run_dir, fallback_budget_s=0.0)
    try:
        for g, recs in zip(got, jobs, strict=True):
            assert g["status"] == "done" and g["done"] == g["total"] == N_RECORDS
            assert _strip(g["results"]) == _strip(svc.recommend_records(recs))  # the uninterrupted answers
    finally:
        svc.close()


def test_a_store_reopened_on_its_directory_resumes_and_forgets_deleted_jobs(run_dir, tmp_path, monkeypatch):
    """In process: a job cut after its first chunk resumes at the second; a deleted one stays gone."""
    import serving.jobs as jobs_mod

    monkeypatch.setattr(jobs_mod, "CHUNK", 5)
    svc = TabularService(run_dir, fallback_budget_s=0.0)
    dump = TypeAdapter(list[dict])
    try:
        X = load_tabular_run(run_dir).data().X_test[:12]
        store = JobStore(svc, dump, directory=tmp_path)
        job = store.submit(X)
        gone = store.submit(X[:3])
        deadline = time.time() + 30
        while store.get(gone.id).finished_at is None and time.time() < deadline:
            time.sleep(0.01)
        store.cancel(gone.id)
        full = store.page(store.get(job.id), 0, 100)["results"]
        store.executor.shutdown(wait=True)
        for chunk in sorted((tmp_path / job.id).glob("chunk-*.json"))[1:]:  # as if killed after chunk 0
            chunk.unlink()
        (tmp_path / job.id / "meta.json").write_text(
            (tmp_path / job.id / "meta.json").read_text().replace('"done"', '"running"'))
        again = JobStore(svc, dump, directory=tmp_path)
        with pytest.raises(Exception, match="no job"):
            again.get(gone.id)
        while again.get(job.id).finished_at is None and time.time() < deadline:
            time.sleep(0.01)
        page = again.page(again.get(job.id), 0, 100)
        assert page["status"] == "done" and _strip(page["results"]) == _strip(full)
        again.close()
    finally:
        svc.close()


def test_finished_jobs_expire_after_their_ttl_on_disk_too(run_dir, tmp_path):
    """A finished job is kept ``ttl_s`` seconds, then it is gone: from the store (a later get fails), from
    its directory, and from a store reopened on that directory."""
    svc = TabularService(run_dir, fallback_budget_s=0.0)
    dump = TypeAdapter(list[dict])
    try:
        X = load_tabular_run(run_dir).data().X_test[:4]
        store = JobStore(svc, dump, directory=tmp_path, ttl_s=0.5)
        job = store.submit(X)
        deadline = time.time() + 30
        while store.get(job.id).finished_at is None and time.time() < deadline:
            time.sleep(0.01)
        assert store.get(job.id).status == "done" and (tmp_path / job.id).exists()  # kept while young
        time.sleep(0.6)
        store.submit(X[:1])  # any submit expires what is past its time
        with pytest.raises(Exception, match="no job"):
            store.get(job.id)
        assert not (tmp_path / job.id).exists()
        store.close()
        again = JobStore(svc, dump, directory=tmp_path, ttl_s=0.5)
        with pytest.raises(Exception, match="no job"):
            again.get(job.id)
        again.close()
    finally:
        svc.close()


@pytest.mark.slow
def test_the_batch_worker_answers_as_the_server_and_survives_a_kill(run_dir):
    """serving/batch_worker.py: chunks answered in a child process equal the server process's answers; a
    killed child is started again and the chunk still answered."""
    from serving.batch_worker import BatchWorker

    svc = TabularService(run_dir, fallback_budget_s=0.0)
    worker = BatchWorker(str(run_dir), None, 0.0, 1000, 5)
    try:
        X = load_tabular_run(run_dir).data().X_test[:40]
        here = svc.records(X, svc.recommend(X))
        there = svc.records(X, worker.recommend(X, 0, svc.recommend))
        assert _strip(there) == _strip(here)
        for p in list(worker._pool._processes.values()):
            os.kill(p.pid, signal.SIGKILL)
        time.sleep(0.5)
        again = svc.records(X, worker.recommend(X, 0, svc.recommend))
        assert _strip(again) == _strip(here) and worker.restarts == 1
    finally:
        worker.close()
        svc.close()
