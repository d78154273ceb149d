"""The tabular API states its contract: every raw feature with its domain in the OpenAPI schema,
every status documented with its body, and schemathesis -- in-process against the ASGI app, every
check on -- finds no disagreement between the schema and the service (no 5xx, a 4xx for whatever
the schema rejects, a 200 in the documented shape for whatever it accepts)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS, load_all_checks

from serving.tabular import TabularService
from serving.tabular_app import create_tabular_app
from tests.tabular_serving_run import german_run
from tests.test_serving_contract import body_schema, resolve

MAX_BATCH = 20
FUZZ_EXAMPLES = 40

load_all_checks()
ALL_CHECKS = list(CHECKS.get_all())
FUZZ_CALLS: Counter[tuple[str, str, str]] = Counter()


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    if os.environ.get("SERVING_TABULAR_RUN"):  # benchmarks/serving.py: fuzz a trained run instead
        svc = TabularService(os.environ["SERVING_TABULAR_RUN"], None, 0.05, MAX_BATCH, 3)
    else:
        root = tmp_path_factory.mktemp("tabular_contract")
        run, X_train, _, _ = german_run(root)
        run.mace_params = {**run.mace_params, "time_limit": 2.0}
        svc = TabularService(root / "german_forest", "nearest", 0.02, MAX_BATCH, 3, run=run, geco_data=X_train)
    yield create_tabular_app("unused", service=svc)
    svc.close()


@pytest.fixture(scope="module")
def openapi(app) -> dict[str, Any]:
    return TestClient(app).get("/openapi.json").json()


def test_every_feature_is_listed_with_its_domain(app, openapi):
    svc = app.state.service
    req = body_schema(openapi, "/recommend")
    assert set(req["required"]) == set(svc.codec.names) and req["additionalProperties"] is False
    for d in svc.codec.domains:
        p = req["properties"][d.name]
        assert p["description"]
        if d.kind == "categorical" or (d.levels and not d.integer_levels):
            assert p["enum"] == list(d.levels), d.name
        else:
            assert p["minimum"] <= p["maximum"], d.name
    batch = body_schema(openapi, "/recommend/batch")
    assert batch["properties"]["records"]["maxItems"] == MAX_BATCH


def test_every_status_is_documented_with_its_body(openapi):
    expected = {"post": {"200", "400", "413", "422", "500"}, "get": {"200", "413", "500"}}
    expected_at = {("get", "/example"): expected["get"] | {"404", "422"},  # the page's example: none here, bad seed
                   ("post", "/jobs"): (expected["post"] - {"200"}) | {"202", "429"},  # accepted; too many jobs
                   ("get", "/jobs/{job_id}"): expected["get"] | {"404", "422"},  # no such job; bad offset/limit
                   ("delete", "/jobs/{job_id}"): expected["get"] | {"404", "422"}}
    error = openapi["components"]["schemas"]["ErrorResponse"]
    for path, ops in openapi["paths"].items():
        for method, op in ops.items():
            want = expected_at[(method, path)] if (method, path) in expected_at else expected[method]
            assert set(op["responses"]) == want, (method, path)
            for code, resp in op["responses"].items():
                if code not in ("200", "202"):  # 202: a job accepted (its Job body)
                    assert resolve(openapi, resp["content"]["application/json"]["schema"]) == error


@pytest.fixture(scope="module")
def api_schema(app):
    return schemathesis.openapi.from_asgi("/openapi.json", app)


fuzz = schemathesis.pytest.from_fixture("api_schema")


@fuzz.parametrize()
@settings(max_examples=FUZZ_EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_schemathesis_finds_no_failure(case):
    meta = case.meta
    FUZZ_CALLS[case.operation.label, meta.generation.mode.value, meta.phase.name.value] += 1
    case.call_and_validate(checks=ALL_CHECKS)


def test_schemathesis_reached_every_operation_both_ways(openapi):
    if not FUZZ_CALLS:
        pytest.skip("needs test_schemathesis_finds_no_failure to run first in this session")
    for op in ("POST /recommend", "POST /recommend/batch"):
        for mode in ("positive", "negative"):
            assert FUZZ_CALLS[op, mode, "fuzzing"] > 0, dict(FUZZ_CALLS)
    print(f"schemathesis: {sum(FUZZ_CALLS.values())} requests, {len(ALL_CHECKS)} checks:", dict(FUZZ_CALLS))
    out = os.environ.get("SERVING_FUZZ_COUNTS")
    if out:  # benchmarks/serving.py reads the counts
        import json

        with open(out, "w") as f:
            json.dump({"requests": sum(FUZZ_CALLS.values()), "checks": len(ALL_CHECKS),
                       "by_case": {" | ".join(k): v for k, v in FUZZ_CALLS.items()}}, f)
