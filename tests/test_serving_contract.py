"""The served API states its contract (serving/schemas.py, serving/app.py): the OpenAPI schema
gives the exact shape of every request and every status an operation returns, /model names no
filesystem path, and schemathesis -- run in-process against the ASGI app, every check on -- finds
no disagreement between the schema and the service."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from pydantic import ValidationError
from schemathesis.checks import CHECKS, load_all_checks

from serving.app import create_app
from serving.schemas import request_models
from tests.serving_run import N_FEATURES, table_generator_registered, train_run

MAX_BATCH = 50  # small, so that the fuzzer also reaches the upper bound of a batch
FUZZ_EXAMPLES = 50  # fuzzing-phase cases per operation (besides the coverage phase): bounded, derandomized

load_all_checks()
ALL_CHECKS = list(CHECKS.get_all())  # every check schemathesis has, none left to the config's defaults
FUZZ_CALLS: Counter[tuple[str, str, str]] = Counter()  # (operation, generation mode, phase) -> requests


@pytest.fixture(scope="module", autouse=True)
def table_generator():
    with table_generator_registered():
        yield


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("contract")


@pytest.fixture(scope="module")
def app(root, table_generator):
    return create_app(train_run(root, knn=False), model="table", max_batch=MAX_BATCH)


@pytest.fixture(scope="module")
def openapi(app) -> dict[str, Any]:
    return TestClient(app).get("/openapi.json").json()


def resolve(spec: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """Follow local ``$ref`` pointers (``#/components/schemas/Name``)."""
    while "$ref" in node:
        target: Any = spec
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def body_schema(spec: dict[str, Any], path: str) -> dict[str, Any]:
    return resolve(spec, spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"])


# ---------------------------------------------------------------------------- the schema states the contract
def test_x_has_the_exact_length_and_values(openapi):
    agent = body_schema(openapi, "/recommend")
    x = agent["properties"]["x"]
    assert x["type"] == "array" and x["minItems"] == x["maxItems"] == N_FEATURES
    assert x["items"] == {"type": "integer", "minimum": 0, "maximum": 1}
    group = agent["properties"]["group"]  # the world has 2 groups: required, 0 or 1
    assert sorted(agent["required"]) == ["group", "x"]
    assert (group["type"], group["minimum"], group["maximum"]) == ("integer", 0, 1)
    assert agent["additionalProperties"] is False


def test_batch_has_its_bounds_and_one_group_per_agent(openapi):
    batch = body_schema(openapi, "/recommend/batch")
    agents = batch["properties"]["agents"]
    assert (agents["minItems"], agents["maxItems"]) == (1, MAX_BATCH)
    assert resolve(openapi, agents["items"]) == body_schema(openapi, "/recommend")
    assert batch["required"] == ["agents"] and batch["additionalProperties"] is False


def test_every_status_is_documented_with_its_body(openapi):
    expected = {"post": {"200", "400", "413", "422", "500"}, "get": {"200", "413", "500"}}
    expected_at = {("get", "/example"): expected["get"] | {"404", "422"}}  # the page's example: none here, bad seed
    error = openapi["components"]["schemas"]["ErrorResponse"]
    for path, ops in openapi["paths"].items():
        for method, op in ops.items():
            assert set(op["responses"]) == expected_at.get((method, path), expected[method]), (method, path)
            for code, resp in op["responses"].items():
                schema = resolve(openapi, resp["content"]["application/json"]["schema"])
                if code != "200":
                    assert schema == error, (method, path, code)


def test_request_models_of_a_one_group_world():
    Agent, Batch = request_models(5, 1, 3)
    assert "group" not in Agent.model_json_schema().get("required", [])
    for ok in ({"x": [0, 1, 0, 1, 1]}, {"x": [0] * 5, "group": 0}, {"x": [1] * 5, "group": None}):
        Agent.model_validate(ok)
    # JSON Schema's integer includes 1.0 (JSON has one number type), so the service takes it.
    assert Agent.model_validate({"x": [1.0, 0.0, 1, 0, 1], "group": 0.0}).x == [1, 0, 1, 0, 1]
    for bad, field in (({"x": [0] * 5, "group": 1}, "group"), ({"x": [0] * 4}, "x"), ({"x": [0] * 5, "g": 0}, "g"),
                       ({"x": [0] * 4 + [2]}, "x.4"), ({"x": [0] * 4 + [True]}, "x.4"), ({"x": [0] * 4 + ["1"]}, "x.4"),
                       ({"x": [0] * 4 + [0.5]}, "x.4")):
        with pytest.raises(ValidationError, match=re.escape(field)):
            Agent.model_validate(bad)
    Batch.model_validate({"agents": [{"x": [0] * 5}] * 3})
    for n in (0, 4):
        with pytest.raises(ValidationError, match="agents"):
            Batch.model_validate({"agents": [{"x": [0] * 5}] * n})


def test_model_names_no_filesystem_path(app, root):
    c = TestClient(app)
    text = c.get("/model").text
    assert str(root) not in text and str(Path.home()) not in text

    def strings(v: Any):
        if isinstance(v, dict):
            for k, item in v.items():
                yield k
                yield from strings(item)
        elif isinstance(v, list):
            for item in v:
                yield from strings(item)
        elif isinstance(v, str):
            yield v

    info = json.loads(text)
    absolute = [s for s in strings(info) if s.startswith(("/", "~")) or re.match(r"^[A-Za-z]:[\\/]", s)]
    assert absolute == []
    assert info["run_dir"] == "svc" and info["dataset"]["dir"].startswith("svc-")


# ---------------------------------------------------------------------------- schemathesis
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
    ops = {f"{m.upper()} {p}" for p, methods in openapi["paths"].items() for m in methods}
    assert {op for op, _, _ in FUZZ_CALLS} == ops
    for op in ("POST /recommend", "POST /recommend/batch"):
        for mode in ("positive", "negative"):
            assert FUZZ_CALLS[op, mode, "fuzzing"] > 0 and FUZZ_CALLS[op, mode, "coverage"] > 0, dict(FUZZ_CALLS)
    print(f"schemathesis: {sum(FUZZ_CALLS.values())} requests, {len(ALL_CHECKS)} checks:", dict(FUZZ_CALLS))
