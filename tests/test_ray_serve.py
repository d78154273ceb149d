"""``serve.py --ray-serve`` (serving/ray_serve.py, issue 57 item 1), through the real command line on a tiny
tabular run: a local Ray instance with 2 replicas answers exactly what the single process answers (every
answer minus ``latency_ms``, a job's too), and a replica whose process is SIGKILLed under load is replaced
while every request keeps succeeding (no client retries; the ingress sends a request whose replica died
to another one). The argument errors are one line each."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

pytest.importorskip("ray.serve", reason="the ray extra (ray[serve]) is not installed")

from benchmarks.ray_serve_load import (  # noqa: E402
    RESENT,
    alive,
    answers,
    compare,
    kill_replica,
    load,
    replacement_ready,
    replica_pids,
    stop_ray_server,
)
from benchmarks.server_harness import free_port, start_on_free_port, start_server, stop_server  # noqa: E402
from evaluation.tabular_experiment import load_tabular_run  # noqa: E402
from serving.ray_serve import parse_autoscale  # noqa: E402
from serving.tabular import TabularService  # noqa: E402
from tests.test_user_model import train_tiny_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["--fallback-budget-ms", "0"]  # no answer depends on time: a fallback's record answers "unknown" at once


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return train_tiny_run(tmp_path_factory.mktemp("ray_serve"))


def _records(run_dir: Path, n: int = 50) -> list[dict]:
    """``n`` distinct rejected test and training records the generator answers itself."""
    svc = TabularService(run_dir, fallback_budget_s=0.0)
    try:
        run = load_tabular_run(run_dir)
        X = np.unique(np.vstack([run.data().X_test, np.asarray(run.domain_rows(), float)]), axis=0)
        X = X[~svc.world.accepts(X)]
        X = X[[a.method == svc.model_name for a in svc.recommend(X)]]
        assert len(X) >= 20
        return [svc.codec.decode(x) for x in X[np.random.default_rng(0).permutation(len(X))[:n]]]
    finally:
        svc.close()


@pytest.mark.slow
def test_ray_serve_answers_as_one_process_and_survives_a_killed_replica(run_dir, tmp_path):
    records = _records(run_dir)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    single = start_server(run_dir, None, port, 10_000, tmp_path / "single.log", timeout=300,
                          extra=FLAGS + ["--jobs-dir", "none"])
    try:
        expected = answers(base, records)
        with httpx.Client(base_url=base, timeout=60) as c:
            expected_batch = c.post("/recommend/batch", json={"records": records[:10]}).json()
    finally:
        stop_server(single)
    assert all("status" in a for a in expected), expected[:2]

    log = tmp_path / "ray.log"
    t0 = time.monotonic()
    proc, port = start_on_free_port(run_dir, None, 10_000, log, timeout=400,
                                    extra=FLAGS + ["--ray-serve", "--replicas", "2", "--jobs-dir", str(tmp_path / "jobs")])
    base = f"http://127.0.0.1:{port}"
    print(f"Ray Serve ready after {time.monotonic() - t0:.1f} s")
    try:
        assert len(replica_pids(proc.pid)) == 2 and len(replica_pids(proc.pid, "RecourseJobs")) == 1
        # Identical answers, one record at a time, as a batch, and as a job (the jobs replica's).
        got = compare(expected, answers(base, records))
        assert got["identical"] == len(records), got["differing"]
        with httpx.Client(base_url=base, timeout=60) as c:
            assert c.get("/readyz").status_code == 200 and c.get("/livez").status_code == 200
            assert c.get("/").headers["content-type"].startswith("text/html")
            batch = c.post("/recommend/batch", json={"records": records[:10]}).json()
            assert compare(expected_batch["results"], batch["results"])["identical"] == 10
            bad = c.post("/recommend", json={**records[0], "bogus": 1})
            assert bad.status_code == 422 and "bogus" in bad.json()["detail"]
            r = c.post("/jobs", json={"records": records[:20]})
            assert r.status_code == 202, r.text
            deadline = time.monotonic() + 60
            while (job := c.get(r.headers["location"]).json())["status"] != "done" and time.monotonic() < deadline:
                time.sleep(0.3)
            assert job["status"] == "done" and compare(expected[:20], job["results"])["identical"] == 20
            assert list(r.headers.get_list("x-request-id")) and len(r.headers.get_list("x-request-id")) == 1

        # A replica's process SIGKILLed under load: 3 threads of single requests and one of batches
        # (a batch is nearly always in flight on each replica, so the kill catches requests).
        before = replica_pids(proc.pid)
        stop = threading.Event()
        batch_errors: list[str] = []

        def batches() -> None:
            with httpx.Client(base_url=base, timeout=120) as c:
                while not stop.is_set():
                    try:
                        resp = c.post("/recommend/batch", json={"records": records * 4})
                    except httpx.HTTPError as err:
                        batch_errors.append(f"{type(err).__name__}: {err}")
                        continue
                    if resp.status_code != 200:
                        batch_errors.append(f"{resp.status_code}: {resp.text[:200]}")

        sender = threading.Thread(target=batches)
        sender.start()
        killed: dict = {}

        def kill() -> None:
            killed["pid"], killed["children"] = kill_replica(proc.pid)
            killed["at"] = time.monotonic()

        try:
            rows, _ = load(base, records, 6.0, 3, at=2.0, action=kill)
            ready = replacement_ready(base, killed["at"], timeout=240)
            more, _ = load(base, records, 2.0, 3)  # the replacement in the rotation
        finally:
            stop.set()
            sender.join()
        errors = [r[2] for r in rows + more if r[2]] + batch_errors
        assert not errors, errors[:5]
        assert ready is not None, "no replacement replica answered"
        after = replica_pids(proc.pid)
        assert len(after) == 2 and killed["pid"] not in after and set(after) - set(before), (before, after)
        assert not [p for p in killed["children"] if alive(p)], "the killed replica's children outlived it"
        print(f"{len(rows) + len(more)} requests, 0 errors; replacement answering {ready} s after the kill; "
              f"re-sent: {log.read_text(errors='replace').count(RESENT)}")
    finally:
        t_stop = time.monotonic()
        rc = stop_ray_server(proc)
        print(f"stopped in {time.monotonic() - t_stop:.1f} s")
    assert rc == 0, log.read_text(errors="replace")[-3000:]


def test_arguments_are_one_line_errors(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / "serve.py"), str(tmp_path), *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)

    for args, words in ((["--ray-serve", "--batch-in", "a.csv", "--batch-out", "b.csv"], "--ray-serve serves HTTP"),
                        (["--replicas", "2"], "go with --ray-serve"),
                        (["--ray-serve", "--replicas", "2", "--autoscale", "1:3"], "give one of them")):
        r = run(*args)
        assert r.returncode == 2 and words in r.stderr, r.stderr
    for bad in ("3", "2:1", "a:b", "-1:2", "0:0"):
        with pytest.raises(ValueError, match="--autoscale"):
            parse_autoscale(bad)
    assert parse_autoscale("0:4") == (0, 4) and parse_autoscale("2:2") == (2, 2)


FIXTURES = ROOT / "tests" / "fixtures" / "runs_before_house"


def _fixture_run(tmp_path: Path, run: str, data: str, pointer: str) -> Path:
    """A fixture run of tests/test_runs_before_house.py, copied, its data pointer at the copy."""
    run_dir = Path(shutil.copytree(FIXTURES / run, tmp_path / run))
    info = json.loads((run_dir / pointer).read_text())
    info["path"] = str(shutil.copytree(FIXTURES / data, tmp_path / data))
    (run_dir / pointer).write_text(json.dumps(info))
    return run_dir


@pytest.mark.parametrize("family", ["capability", "sequential"])
def test_a_replica_serves_the_other_families(family, tmp_path):
    """A replica (in this process, without Ray) builds a capability or sequential run with serve.py's builder
    and answers through its ASGI forwarding as the app does: the page's example, its recommendation, /readyz,
    the health check; the same bytes as the app itself gives."""
    import serve
    from serving.ray_serve import RecourseReplica, call_asgi

    data, pointer = {"capability": ("capability_dataset", "dataset.json"),
                     "sequential": ("sequential_labels", "labels.json")}[family]
    run_dir = _fixture_run(tmp_path, family, data, pointer)
    args = argparse.Namespace(run_dir=str(run_dir), model=None, filter="all", seed=0, max_batch=100, max_diverse=5,
                              beam_width=None, jobs_dir="none", keys=None, rate_limit=50.0)
    build = {"capability": serve._capability_builder, "sequential": serve._sequential_builder}[family](args, None)

    async def go() -> None:
        replica = RecourseReplica.__new__(RecourseReplica)
        await replica.__init__(build, "app", "warning")
        try:
            await replica.check_health()
            status, _, body = await replica.forward("GET", "/example", b"", [], b"")
            assert status == 200, body
            record = json.dumps(json.loads(body)["record"]).encode()
            head = [(b"content-type", b"application/json")]
            status, headers, answer = await replica.forward("POST", "/recommend", b"", head, record)
            assert status == 200 and "status" in json.loads(answer), answer
            again = await call_asgi(replica.app.app, "POST", "/recommend", b"", head, record)
            assert _no_latency(again[2]) == _no_latency(answer)
            status, _, _ = await replica.forward("GET", "/readyz", b"", [], b"")
            assert status == 200
            status, _, body = await replica.forward("POST", "/recommend", b"", head, b"{")
            assert status == 400 and b"invalid JSON" in body
        finally:
            await replica.__del__()  # as Ray Serve's graceful stop awaits it
        assert replica.__del__() is None  # the garbage collector's later call does nothing

    asyncio.run(go())


def _no_latency(raw: bytes) -> dict:
    return {k: v for k, v in json.loads(raw).items() if k != "latency_ms"}
