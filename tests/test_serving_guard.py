"""Bad input before parsing (issue 57 item 7): a body nested deeper than ``MAX_DEPTH`` gets a 400 on every
route that reads a body, of every run family, over a real keep-alive connection that stays usable; the
depth is counted as a JSON parser would count it (strings skipped)."""

from __future__ import annotations

import json

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from serving.guard import MAX_DEPTH, nesting_depth
from serving.tabular import TabularService
from serving.tabular_app import create_tabular_app
from tests.tabular_serving_run import german_run
from tests.test_page import served


def _depth(v) -> int:
    if isinstance(v, list):
        return 1 + max((_depth(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((_depth(x) for x in v.values()), default=0)
    return 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(alphabet='[]{}"\\ab,:'),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='[]{}"\\x', max_size=4), inner,
                                                               max_size=3),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_depth_is_the_parsers_depth(value):
    """Brackets inside strings (escaped quotes included) do not count; the rest nest as parsed."""
    text = json.dumps(value).encode()
    assert nesting_depth(text) == _depth(value)


def deep(levels: int, kind: str = "list") -> bytes:
    return (b"[" * levels + b"]" * levels) if kind == "list" else (b'{"a":' * levels + b"1" + b"}" * levels)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("guard")
    return (root, *german_run(root))


@pytest.fixture(scope="module")
def tabular(built):
    root, run, X_train, neg, _ = built
    svc = TabularService(root / "german_forest", "nearest", None, run=run, geco_data=X_train)
    yield svc, [svc.codec.decode(x) for x in neg[:3]]
    svc.close()


ROUTES = [("/recommend", lambda recs: recs[0]), ("/recommend/batch", lambda recs: {"records": recs}),
          ("/jobs", lambda recs: {"records": recs})]


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 1_000, 10_000])
@pytest.mark.parametrize("kind", ["list", "object"])
def test_deep_json_is_a_400_and_the_connection_stays_usable(tabular, levels, kind):
    svc, records = tabular
    with served(create_tabular_app("unused", service=svc)) as url, httpx.Client(base_url=url, timeout=30) as c:
        for route, valid in ROUTES:
            r = c.post(route, content=deep(levels, kind), headers={"Content-Type": "application/json"})
            assert r.status_code == 400, (route, r.status_code, r.text)
            assert "nested" in r.json()["detail"] and r.headers.get("connection") != "close"
            ok = c.post(route, json=valid(records))  # the same keep-alive connection
            assert ok.status_code in (200, 202), (route, ok.text)
        assert c.get("/health").status_code == 200


def test_a_record_at_the_limit_still_parses(tabular):
    """A body exactly MAX_DEPTH deep reaches the route (and is judged by the schema there)."""
    svc, records = tabular
    c = TestClient(create_tabular_app("unused", service=svc))
    body = {"records": [{**records[0], "extra": json.loads(deep(MAX_DEPTH - 3))}]}
    assert nesting_depth(json.dumps(body).encode()) == MAX_DEPTH
    r = c.post("/recommend/batch", json=body)
    assert r.status_code == 422 and "extra" in r.text


def test_capability_routes_refuse_deep_json(tmp_path):
    """The same guard on the capability app's body routes."""
    from serving.app import create_app
    from tests.serving_run import table_generator_registered, train_run

    with table_generator_registered():
        c = TestClient(create_app(train_run(tmp_path), model="table"))
        for route in ("/recommend", "/recommend/batch"):
            r = c.post(route, content=deep(10_000, "object"), headers={"Content-Type": "application/json"})
            assert r.status_code == 400 and "nested" in r.json()["detail"], (route, r.text)
        assert c.get("/health").status_code == 200


def test_the_warm_up_answers_the_runs_records_without_counting_them(tabular):
    """serve.py's warm-up (serving/startup.py): the generator answers a batch, one record and alternatives on
    the run's rejected rows before the first request; no counter moves."""
    from serving.startup import warm_up_tabular

    svc, _ = tabular
    before = dict(svc.counters)
    assert warm_up_tabular(svc) >= 0.0
    assert svc.counters == before
