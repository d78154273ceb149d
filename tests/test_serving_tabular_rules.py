"""The tabular service under the world's rules (issue 55): every answer checked against them, the rule
that refused a generator's answer counted per name (``/model``, ``/metrics``, the log), ``refused_by``
on an answer the rules left ``unknown`` or without recourse, ``rules`` on an answer (the rules that
bear on it), the weighted distance MACE certifies, and a world without rules served as before.
German Credit with a decision tree, German's default rules, the serving tests' stand-in generators;
the fallback is MACE alone (fast)."""

from __future__ import annotations

import logging
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from fastapi.testclient import TestClient

from data_gen.default_rules import default_rules
from envs.rules import RuleSet
from serving.tabular import TabularService
from serving.tabular_app import create_tabular_app
from serving.tabular_rules import bearing_rules
from solvers.mace.distance import distance
from tests.tabular_serving_run import german_run


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("tabular_rules")
    run, X_train, neg, _ = german_run(root, "german", "tree")
    return root, run, X_train, neg


def service(built, rules, model="careless", budget=None) -> TabularService:
    root, run, X_train, _ = built
    ruled = SimpleNamespace(**{**vars(run), "world": replace(run.world, rules=rules)})
    svc = TabularService(root / "german_tree", model, budget, run=ruled, geco_data=X_train[:200])
    svc.geco = None  # the fallback is MACE alone
    return svc


def test_rule_refusals_are_named_counted_and_measured(built, caplog):
    rules = default_rules("german")
    svc = service(built, rules, budget=0.0)
    try:
        c = TestClient(create_tabular_app("unused", service=svc))
        records = [svc.codec.decode(x) for x in built[3][:30]]
        with caplog.at_level(logging.INFO, logger="recourse_gym.serve"):
            rows = c.post("/recommend/batch", json={"records": records}).json()["results"]
        info = c.get("/model").json()
        names = info["rules"]
        assert names == list(svc.rules.names) and names[0].endswith("(schema)")
        refusals = info["rule_refusals"]
        assert refusals and set(refusals) <= set(names)
        assert info["counters"]["rule_refusals"] == sum(refusals.values()) <= info["counters"]["generator_invalid"]
        logged = " ".join(r.getMessage() for r in caplog.records)
        assert all(repr(n) in logged for n in refusals)
        metrics = c.get("/metrics").text
        for n, k in refusals.items():
            assert f'recourse_rule_refusals_total{{rule="{n}"}} {float(k)}' in metrics
        # the records whose answer a rule refused: unknown within the budget of 0, naming the rule
        unknown = [r for r in rows if r["status"] == "unknown" and r["refused_by"]]
        assert unknown and all(set(r["refused_by"]) <= set(refusals) for r in unknown)
        assert all(r["refused_by"] is None for r in rows if r["status"] in ("ok", "already_positive"))
        # every served answer keeps every rule
        for rec, r in zip(records, rows, strict=True):
            if r["status"] == "ok":
                cf = dict(rec) | {ch["feature"]: ch["to"] for ch in r["changes"]}
                assert svc.rules.holds(svc.codec.encode([rec]), svc.codec.encode([cf])).all()
    finally:
        svc.close()


def test_no_recourse_names_the_rules(built):
    """Every free feature pinned by a PLAF statement (age and employment may still rise): for a record
    MACE proves has no counterfactual under the rules, the answer names the rules that the nearest
    counterfactual without them breaks."""
    svc0 = service(built, None)
    pins = RuleSet.from_dict({"plaf": [f"PLAF x_cf.{r.name} = x.{r.name}" for r in svc0.codec.raws
                                       if svc0.world.schema.features[r.columns[0]].mutability == "free"]})
    svc0.close()
    svc = service(built, pins)
    try:
        rows = svc.recommend_records([svc.codec.decode(x) for x in built[3][:12]])
        none = [r for r in rows if r["status"] == "no_recourse"]
        assert none and all(r["method"] == "mace" and r["rules"] is None for r in none)
        # the pins the unconstrained optimum breaks (and the schema's rules that refused the careless
        # generator's answer: a counterfactual found and refused too)
        assert all(set(r["refused_by"]) <= set(svc.rules.names) and set(r["refused_by"]) & set(pins.plaf) for r in none)
        for r in rows:  # an answer found (raising age or employment) keeps the pins
            assert r["status"] != "ok" or {c["feature"] for c in r["changes"]} <= {"age", "employment"}
    finally:
        svc.close()


def test_rules_bearing_on_an_answer(built):
    rules = default_rules("german")
    svc = service(built, rules)
    try:
        codec, comp = svc.codec, svc.rules
        rec = next(svc.codec.decode(x) for x in built[3] if svc.codec.decode(x)["employment"] != ">=7 years"
                   and svc.codec.decode(x)["housing"] == "rent" and svc.codec.decode(x)["age"] < 70)
        levels = list(codec.domains[codec.names.index("employment")].levels)
        up = {**rec, "employment": levels[levels.index(rec["employment"]) + 1], "age": rec["age"] + 2}
        cheaper = {**rec, "credit_amount": max(250, rec["credit_amount"] - 100)}
        X, CF = codec.encode([rec, rec]), codec.encode([up, cheaper])
        assert comp.holds(X, CF).all()
        a, b = bearing_rules(comp, X, CF)
        assert "link employment -> age (2 per unit)" in a and "credit_amount: max_decrease 5000" not in a
        assert "PLAF IF x_cf.employment > x.employment THEN x_cf.age >= x.age + 1" in a
        assert "credit_amount: max_decrease 5000" in b and "link employment -> age (2 per unit)" not in b
        assert "housing: forbid rent -> own" in a and "housing: forbid rent -> own" in b  # the record rents
        assert not any(n.endswith("(schema)") for n in a + b)
        # served: an ok answer lists the rules bearing on it
        [row] = svc.recommend_records([rec])
        if row["status"] == "ok":
            cf = dict(rec) | {ch["feature"]: ch["to"] for ch in row["changes"]}
            assert row["rules"] == bearing_rules(comp, codec.encode([rec]), codec.encode([cf]))[0]
    finally:
        svc.close()


def test_distance_is_the_weighted_one_mace_certifies(built):
    rules = default_rules("german")
    svc = service(built, rules)
    try:
        x = built[3][0]
        rec = svc.codec.decode(x)
        moves = [{**rec, "credit_amount": max(250, rec["credit_amount"] - 500)},
                 {**rec, "credit_amount": min(18424, rec["credit_amount"] + 500)},
                 {**rec, "duration": max(4, rec["duration"] - 6), "installment_rate": 1}]
        CF = svc.codec.encode(moves)
        want = distance(svc.world.schema, x, CF, "one", cost=svc.rules.cost)
        assert np.allclose(svc.codec.distance(np.repeat(x[None], 3, 0), CF), want)
        plain = distance(svc.world.schema, x, CF, "one")
        assert want[0] == pytest.approx(2 * plain[0]) and want[1] == pytest.approx(0.5 * plain[1])
    finally:
        svc.close()


def test_a_world_without_rules_is_served_as_before(built):
    svc = service(built, None, model="nearest")
    try:
        rows = svc.recommend_records([svc.codec.decode(x) for x in built[3][:5]])
        assert all(r["refused_by"] is None and r["rules"] is None for r in rows)
        info = svc.describe()
        assert info["rules"] is None and info["rule_refusals"] == {} and info["counters"]["rule_refusals"] == 0
    finally:
        svc.close()
