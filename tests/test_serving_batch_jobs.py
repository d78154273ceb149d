"""Big batches that do not starve single requests (serving/jobs.py), UTF-8-only bodies and the tabular API's
own error wording, and the fallback process's lifecycle (priority, replacement after SIGKILL, stop on close).
German Credit with a random forest and stand-in generators (tests/tabular_serving_run.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

import serving.jobs as jobs_mod
from serving.tabular import FALLBACK_NICE, TabularService
from serving.tabular_app import create_tabular_app
from tests.tabular_serving_run import german_run


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("tabular_jobs")
    return (root, *german_run(root))


def service(built, model="nearest", **kw) -> TabularService:
    root, run, X_train, _, _ = built
    return TabularService(root / "german_forest", model, kw.pop("budget", None), run=run, geco_data=X_train, **kw)


@pytest.fixture(scope="module")
def svc(built):
    s = service(built)
    yield s
    s.close()


@pytest.fixture(scope="module")
def client(svc):
    return TestClient(create_tabular_app("unused", service=svc))


@pytest.fixture(scope="module")
def records(svc, built):
    _, _, _, neg, pos = built
    return [svc.codec.decode(x) for x in (*neg[:40], *pos[:5])]


def test_batch_in_chunks_equals_single_answers(client, records, monkeypatch):
    monkeypatch.setattr(jobs_mod, "CHUNK", 7)  # chunks of 7, the last one short
    calls = []
    svc = client.app.state.service
    real = svc.recommend
    monkeypatch.setattr(svc, "recommend", lambda X, *a, **k: calls.append(len(X)) or real(X, *a, **k))
    r = client.post("/recommend/batch", json={"records": records})
    assert r.status_code == 200, r.text
    body = r.json()
    n = len(records)
    assert n % 7 and calls == [7] * (n // 7) + [n % 7] and len(body["results"]) == n
    assert body["counts"] == {s: sum(a["status"] == s for a in body["results"]) for s in body["counts"]}
    for rec, a in zip(records[:5], body["results"], strict=False):
        one = client.post("/recommend", json=rec).json()
        assert (one["status"], one["changes"], one["method"]) == (a["status"], a["changes"], a["method"])


def test_batch_errors_name_the_record_across_chunks(client, records, monkeypatch):
    monkeypatch.setattr(jobs_mod, "CHUNK", 10)
    bad = [dict(r) for r in records]
    bad[23]["age"], bad[31]["zodiac"] = 500, "leo"  # chunks 2 and 3
    r = client.post("/recommend/batch", json={"records": bad})
    assert r.status_code == 422 and r.json()["detail"].startswith("records[23].age"), r.text
    assert [e["field"] for e in r.json()["errors"]] == ["records[23].age", "records[31].zodiac"]
    for body, code, start in [({"records": []}, 422, "records"), ({"records": records[:1], "x": 1}, 422, "x"),
                              ({"records": records[:1] * 10_001}, 422, "records: batch of 10001"),
                              ([1], 422, "body"), ("{", 400, "body")]:
        r = client.post("/recommend/batch", content=body if isinstance(body, str) else json.dumps(body),
                        headers={"content-type": "application/json"})
        assert r.status_code == code and r.json()["detail"].startswith(start), (body if len(str(body)) < 80 else start,
                                                                                 r.text[:200])


def test_jobs_answer_in_pages(client, records):
    r = client.post("/jobs", json={"records": records})
    assert r.status_code == 202 and r.headers["location"] == f"/jobs/{r.json()['id']}"
    job = r.json()
    n = len(records)
    assert job["total"] == n and job["status"] in ("queued", "running", "done")
    t_end = time.monotonic() + 60
    while (page := client.get(f"/jobs/{job['id']}", params={"limit": 0}).json())["status"] != "done":
        assert time.monotonic() < t_end and page["status"] in ("queued", "running"), page
        time.sleep(0.05)
    assert page["done"] == n
    got = []
    for offset in range(0, n, 20):
        p = client.get(f"/jobs/{job['id']}", params={"offset": offset, "limit": 20}).json()
        assert p["offset"] == offset
        got += p["results"]
    sync = client.post("/recommend/batch", json={"records": records}).json()
    strip = [{k: v for k, v in a.items() if k != "latency_ms"} for a in got]
    assert strip == [{k: v for k, v in a.items() if k != "latency_ms"} for a in sync["results"]]
    assert page["counts"] == sync["counts"]
    assert client.get("/jobs/nope").status_code == 404
    assert client.get(f"/jobs/{job['id']}", params={"limit": 5000}).status_code == 422
    r = client.post("/jobs", json={"records": [{**records[0], "age": 500}]})
    assert r.status_code == 422 and r.json()["detail"].startswith("records[0].age")


def test_a_job_is_cancelled(svc, records):
    store = jobs_mod.JobStore(svc, __import__("pydantic").TypeAdapter(list[dict]))
    try:
        gate = store.executor.submit(time.sleep, 0.5)  # keeps the job queued
        job = store.submit(svc.parse(records))
        assert store.cancel(job.id).status == "cancelled"
        gate.result()
        time.sleep(0.1)
        assert store.page(job, 0, 100)["results"] == [] and job.status == "cancelled"
        for _ in range(store.max_jobs):
            store.jobs[f"x{_}"] = jobs_mod._JobState(1)
        with pytest.raises(Exception, match="at most"):
            store.submit(svc.parse(records[:1]))
    finally:
        store.close()


def test_health_answers_while_a_big_batch_runs(client, records):
    """The batch runs in chunks on a worker thread: the event loop answers /health meanwhile."""
    body = {"records": records * 100}  # 4,500 records (about 3 s)

    async def scenario() -> tuple[float, list[float], list[float]]:
        transport = httpx.ASGITransport(app=client.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            t0 = time.perf_counter()
            batch = asyncio.create_task(c.post("/recommend/batch", json=body, timeout=120))
            health, seen = [], []
            await asyncio.sleep(0.05)
            while not batch.done():
                t = time.perf_counter()
                assert (await c.get("/health")).status_code == 200
                health.append(time.perf_counter() - t)
                seen.append(t - t0)
                await asyncio.sleep(0.02)
            assert (await batch).status_code == 200
            return time.perf_counter() - t0, health, seen

    total, health, seen = asyncio.run(scenario())
    assert len(health) >= 5 and max(seen) > total / 2, (total, len(health))  # answered all along, not only at the end
    # promptly: a full collection of the heap the app started with once held the GIL for 0.3-0.8 s here (the
    # app freezes that heap: serving.app.freeze_startup_heap)
    assert max(health) < 0.25, (total, sorted(health)[-3:])


def test_utf16_bodies_are_rejected_and_errors_use_tabular_words(client, records):
    for enc in ("utf-16", "utf-16-le", "utf-32"):
        r = client.post("/recommend", content=json.dumps(records[0]).encode(enc),
                        headers={"content-type": "application/json"})
        assert r.status_code == 400 and "UTF-8" in r.json()["detail"] and r.json()["detail"].startswith("body"), enc
    r = client.post("/recommend/batch", content=b'{"records": [{"age": "\xff"}]}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 400 and "UTF-8" in r.json()["detail"]
    assert client.post("/recommend", content=json.dumps(records[0]).encode("utf-8-sig"),
                       headers={"content-type": "application/json"}).status_code == 200  # a UTF-8 BOM is UTF-8
    spec = client.get("/openapi.json").json()
    for path in ("/recommend", "/recommend/batch", "/jobs"):
        text = spec["paths"][path]["post"]["responses"]["422"]["description"]
        assert "category" in text and "observed range" in text, text
        assert not any(w in text for w in ("0/1", "group", "agents")), text
    assert spec["paths"]["/recommend/batch"]["post"]["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/BatchRequest"}
    assert "age" in spec["components"]["schemas"]["RawRecord"]["properties"]


# ---------------------------------------------------------------- the fallback process (real child processes)

def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def needs_fallback(svc: TabularService, built) -> np.ndarray:
    """Rejected records the careless generator answers wrongly (they go to GeCo in the fallback process)."""
    neg = built[3][:40]
    _, bad = svc.first_pass(neg)
    assert len(bad) >= 3
    return neg[bad]


@pytest.mark.slow
def test_fallback_child_is_replaced_after_sigkill_at_nice_10_up_to_a_limit(built, caplog, monkeypatch):
    import serving.tabular as tab

    monkeypatch.setattr(tab, "MAX_RESTARTS", 1)
    svc = service(built, "careless", fallback_process=True)
    neg = needs_fallback(svc, built)
    own = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        assert svc.recommend(neg[:1])[0].kind in ("geco", "mace")
        (pid,) = svc.fallback_pids()
        assert os.getpriority(os.PRIO_PROCESS, pid) == max(FALLBACK_NICE, own)  # 10, not 10 + 10
        os.kill(pid, signal.SIGKILL)
        with caplog.at_level(logging.ERROR, logger="recourse_gym.serve"):
            again = svc.recommend(neg[1:2])[0]  # a new record: not from the cache
        assert again.kind in ("geco", "mace") and again.verified
        (new,) = svc.fallback_pids()
        assert new != pid and _alive(new) and not _alive(pid) and svc.restarts == 1 and svc.fallback_process
        assert "starting a new one (restart 1 of 1)" in caplog.text
        assert os.getpriority(os.PRIO_PROCESS, new) == max(FALLBACK_NICE, own)
        os.kill(new, signal.SIGKILL)  # past the limit: the server solves in its own process
        with caplog.at_level(logging.ERROR, logger="recourse_gym.serve"):
            last = svc.recommend(neg[2:3])[0]
        assert last.verified and np.isfinite(last.distance) and not svc.fallback_process and svc.fallback_pids() == []
        assert "after 1 restarts; solving in the server process" in caplog.text
    finally:
        svc.close()

