"""What operators read and set (issue 57 items 4 and 5): ``/metrics`` in Prometheus's format read back by its
own parser, a request id on every response and one JSON access line per request; API keys as bearer
tokens (401 without, the page, docs and probes open), a per-key rate limit (429), keys off by default."""

from __future__ import annotations

import json
import logging

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from serving.keys import KeyStore, RateLimiter, key_hash
from serving.keys import main as keys_main
from serving.tabular import TabularService
from serving.tabular_app import create_tabular_app
from tests.tabular_serving_run import german_run


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("ops")
    return (root, *german_run(root))


@pytest.fixture(scope="module")
def svc(built):
    root, run, X_train, neg, _ = built
    s = TabularService(root / "german_forest", "nearest", None, run=run, geco_data=X_train)
    yield s, [s.codec.decode(x) for x in neg[:4]]
    s.close()


def _metrics(c: TestClient) -> dict[str, dict[tuple, float]]:
    r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_metrics_count_requests_answers_and_latency(svc, caplog):
    s, records = svc
    c = TestClient(create_tabular_app("unused", service=s))
    before = _metrics(c)
    with caplog.at_level(logging.INFO, logger="recourse_gym.access"):
        for rec in records:
            r = c.post("/recommend", json=rec)
            assert r.status_code == 200 and len(r.headers["x-request-id"]) == 32
        bad = c.post("/recommend", json={"nope": 1}, headers={"X-Request-ID": "client-chosen-42"})
        assert bad.status_code == 422 and bad.headers["x-request-id"] == "client-chosen-42"
        weird = c.get("/health", headers={"X-Request-ID": "no spaces allowed; " + "x" * 80})
        assert len(weird.headers["x-request-id"]) == 32  # not a short token: a new id
    m = _metrics(c)
    key = (("method", "POST"), ("route", "/recommend"), ("status", "200"))
    assert m["recourse_http_requests_total"][key] - before.get("recourse_http_requests_total", {}).get(key, 0) == 4
    assert m["recourse_http_requests_total"][(("method", "POST"), ("route", "/recommend"), ("status", "422"))] >= 1
    assert m["recourse_http_request_seconds_count"][(("route", "/recommend"),)] >= 5
    answered = sum(v for k, v in m["recourse_answers_total"].items())
    assert answered >= 4 and "recourse_jobs_queue_depth" in m and "recourse_fallback_restarts_total" in m
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "recourse_gym.access"]
    assert any(li["request_id"] == "client-chosen-42" and li["status"] == 422 and li["route"] == "/recommend"
               for li in lines)
    assert all({"ts", "method", "route", "status", "ms", "client"} <= set(li) for li in lines)


def test_keys_guard_every_route_but_the_page_docs_and_probes(svc, tmp_path):
    s, records = svc
    (tmp_path / "keys").write_text(f"# operators\nalice:{key_hash('s3cret')}\n{key_hash('other')}\n")
    keys = KeyStore.from_file(tmp_path / "keys")
    c = TestClient(create_tabular_app("unused", service=s, keys=keys, rate_limit=0))
    for path in ("/", "/docs", "/openapi.json", "/schema", "/health"):
        assert c.get(path).status_code == 200, path
    spec = c.get("/openapi.json").json()
    assert "bearer" in spec["components"]["securitySchemes"]
    for path, ops in spec["paths"].items():  # the contract says who needs a key (schemathesis reads it)
        for method, op in ops.items():
            if path in ("/health", "/schema", "/readyz", "/livez"):
                assert op["security"] == [], (method, path)
            else:
                assert "401" in op["responses"] and "security" not in op, (method, path)
    for method, path, body in (("post", "/recommend", records[0]), ("post", "/recommend/batch", {"records": records}),
                               ("post", "/jobs", {"records": records}), ("get", "/model", None),
                               ("get", "/metrics", None), ("get", "/example", None), ("get", "/jobs/abc", None)):
        r = getattr(c, method)(path, **({"json": body} if body is not None else {}))
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (path, r.status_code)
        assert r.json()["detail"].startswith("authorization:")
        wrong = getattr(c, method)(path, headers={"Authorization": "Bearer nope"},
                                   **({"json": body} if body is not None else {}))
        assert wrong.status_code == 401 and "not valid" in wrong.json()["detail"]
    ok = c.post("/recommend", json=records[0], headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200
    assert c.get("/model", headers={"Authorization": "bearer other"}).status_code == 200


def test_rate_limit_is_documented_where_it_applies(svc):
    s, _ = svc
    c = TestClient(create_tabular_app("unused", service=s, keys=KeyStore.from_keys(["k"]), rate_limit=5))
    ops = c.get("/openapi.json").json()["paths"]
    assert "429" in ops["/recommend"]["post"]["responses"] and "429" not in ops["/health"]["get"]["responses"]


def test_rate_limit_per_key(svc):
    s, records = svc
    keys = KeyStore.from_keys(["k1", "k2"])
    c = TestClient(create_tabular_app("unused", service=s, keys=keys, rate_limit=2))
    h1, h2 = {"Authorization": "Bearer k1"}, {"Authorization": "Bearer k2"}
    codes = [c.get("/model", headers=h1).status_code for _ in range(8)]
    assert codes[:4] == [200] * 4 and 429 in codes  # a burst of 2 x 2 a second, then refused
    r = next(c.get("/model", headers=h1) for _ in range(1))
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1 and r.json()["detail"].startswith("rate:")
    assert c.get("/model", headers=h2).status_code == 200  # another key has its own bucket


def test_key_store_and_limiter_units(tmp_path, capsys, monkeypatch):
    with pytest.raises(ValueError, match="not a SHA-256"):
        KeyStore({"a": "xyz"})
    with pytest.raises(FileNotFoundError, match="--api-keys"):
        KeyStore.from_file(tmp_path / "missing")
    monkeypatch.delenv("RECOURSE_API_KEYS", raising=False)
    assert KeyStore.configured(None) is None  # off by default
    monkeypatch.setenv("RECOURSE_API_KEYS", "a, b")
    assert KeyStore.configured(None).name_of("b") == "env1"
    keys_main(["hash", "s3cret", "--name", "alice"])
    assert capsys.readouterr().out.strip() == f"alice:{key_hash('s3cret')}"
    lim = RateLimiter(rate=1000.0, burst=1)
    assert lim.take("x") == 0.0 and 0 < lim.take("x") <= 0.001
