"""Serving a tabular run (serving/tabular.py, serving/tabular_app.py): raw records in, verified answers
out, the GeCo -> MACE fallback within the budget, the background cache, bad input as a 4xx naming
the field, the offline file mode. German Credit with a random forest and stand-in generators
(tests/tabular_serving_run.py)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from envs.recourse import Recourse
from serving.records import RecordCodec
from serving.tabular import TabularService
from serving.tabular_app import create_tabular_app
from serving.tabular_schemas import record_models
from tests.tabular_serving_run import german_run


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("tabular")
    return (root, *german_run(root))


def service(built, model="nearest", budget=None, **kw) -> TabularService:
    root, run, X_train, _, _ = built
    return TabularService(root / "german_forest", model, budget, run=run, geco_data=X_train, **kw)


@pytest.fixture(scope="module")
def svc(built):
    s = service(built, budget=None)
    yield s
    s.close()


@pytest.fixture(scope="module")
def client(svc):
    return TestClient(create_tabular_app("unused", service=svc))


def raw(svc: TabularService, x: np.ndarray) -> dict:
    return svc.codec.decode(x)


def apply(svc: TabularService, record: dict, changes: list[dict]) -> dict:
    out = dict(record)
    for c in changes:
        assert out[c["feature"]] == c["from"]
        out[c["feature"]] = c["to"]
    return out


# ------------------------------------------------------------------------------------------ records
def test_records_round_trip_and_name_the_field(svc, built):
    _, _, X_train, neg, _ = built
    codec = svc.codec
    recs = [codec.decode(x) for x in X_train[:50]]
    assert np.array_equal(codec.encode(recs), X_train[:50])
    assert np.array_equal(codec.encode(recs), svc.world.encoder.encode(pd.DataFrame(recs)))
    r = recs[0]
    for bad, msg in (({**r, "age": 500}, "records[0].age: 500 is outside"), ({**r, "age": 30.5}, "age: 30.5 is not an int"),
                     ({**r, "purpose": "yacht"}, "records[0].purpose: 'yacht' is not in the domain"),
                     ({**r, "duration": "12"}, "duration: expected a number"), ({**r, "duration": True}, "duration"),
                     ({**r, "age": math.nan}, "age: nan is not a finite"), ({**r, "zodiac": 1}, "zodiac: unknown feature"),
                     ({k: v for k, v in r.items() if k != "housing"}, "records[0].housing: required feature missing")):
        with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace("[", r"\[").replace(".", r"\.")):
            codec.encode([bad])


def test_verification_rechecks_every_constraint(svc, built):
    _, _, _, neg, _ = built
    x = neg[0]
    names = svc.world.schema.names
    imm = [j for j, f in enumerate(svc.world.schema.features) if f.mutability == "immutable" and f.group is None]
    inc = names.index("age")
    cases = {}
    c = x.copy(); c[inc] -= 1; cases["increase-only"] = c  # noqa: E702
    c = x.copy(); c[names.index("duration")] += 0.5; cases["integer"] = c  # noqa: E702
    c = x.copy(); c[names.index("duration")] = 1e6; cases["bounds"] = c  # noqa: E702
    group = svc.world.groups()["purpose"]
    c = x.copy(); c[group] = 0; cases["one-hot"] = c  # noqa: E702
    c = x.copy(); g = svc.world.groups()["personal_status_sex"]; c[g] = np.roll(c[g], 1); cases["immutable group"] = c  # noqa: E702
    if imm:
        c = x.copy(); c[imm[0]] = 1 - c[imm[0]]; cases["immutable"] = c  # noqa: E702
    problems = svc.codec.violations(np.repeat(x[None], len(cases), 0), np.vstack(list(cases.values())))
    assert all(p is not None for p in problems), dict(zip(cases, problems, strict=True))
    assert not svc.verify(np.repeat(x[None], len(cases), 0), np.vstack(list(cases.values()))).any()
    assert svc.codec.violations(x, x) == [None]


def test_request_model_states_every_domain(svc):
    Request, Batch = record_models(svc.codec, 7, 3)
    schema = Request.model_json_schema()
    props = schema["properties"]
    assert set(schema["required"]) == set(svc.codec.names) and schema["additionalProperties"] is False
    assert props["purpose"]["enum"][0] == "car (new)" and props["purpose"]["type"] == "string"
    assert props["employment"]["enum"] == list(svc.codec.domains[svc.codec.names.index("employment")].levels)
    assert "increase-only" in props["employment"]["description"]
    assert "immutable" in props["personal_status_sex"]["description"]
    assert (props["age"]["type"], props["age"]["minimum"], props["age"]["maximum"]) == ("integer", 19, 75)
    assert props["n_diverse"]["maximum"] == 3 and "n_diverse" not in schema["required"]
    assert Batch.model_json_schema()["properties"]["records"]["maxItems"] == 7


def test_integer_levels_are_a_range(tmp_path):
    """Adult's education-num (levels 1..16, labelled) is an integer with minimum/maximum."""
    from data_gen.loaders import ADULT_FEATURES
    from data_gen.tabular_encoder import TabularEncoder

    df = pd.DataFrame({"age": [20, 60], "workclass": ["Private", "State-gov"], "education-num": [3, 16],
                       "marital-status": ["Divorced", "Never-married"], "occupation": ["Sales", "Sales"],
                       "relationship": ["Husband", "Wife"], "race": ["White", "Other"], "sex": ["Male", "Female"],
                       "capital-gain": [0.0, 5000.5], "capital-loss": [0.0, 10.0], "hours-per-week": [10, 60],
                       "native-country": ["Peru", "Cuba"]})
    codec = RecordCodec(TabularEncoder.fit(ADULT_FEATURES, df))
    props = record_models(codec, 5, 5)[0].model_json_schema()["properties"]
    edu = props["education-num"]
    assert (edu["type"], edu["minimum"], edu["maximum"]) == ("integer", 3, 16) and "Doctorate" in edu["description"]
    assert (props["capital-gain"]["type"], props["capital-gain"]["maximum"]) == ("number", 5000.5)
    rec = {**df.iloc[0].to_dict(), "education-num": 16.0}
    assert np.array_equal(codec.encode([rec]), codec.encoder.encode(pd.DataFrame([rec])))
    assert codec.decode(codec.encode([rec])[0])["education-num"] == 16


# ------------------------------------------------------------------------------------------ answers
def test_recommend_answers_a_rejected_record_in_raw_units(client, svc, built):
    _, _, _, neg, pos = built
    rec = raw(svc, neg[0])
    r = client.post("/recommend", json=rec)
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["status"] == "ok" and a["verified"] and a["method"] == "nearest" and a["optimal"] is None
    assert a["changes"] and all(set(c) == {"feature", "from", "to"} for c in a["changes"])
    changed = {c["feature"] for c in a["changes"]}
    assert not changed & {"credit_history", "personal_status_sex", "foreign_worker"}  # immutable
    after = apply(svc, rec, a["changes"])
    X = svc.codec.encode([after])
    assert svc.world.accepts(X)[0]
    assert a["distance"] == pytest.approx(svc.codec.distance(neg[:1], X)[0])
    assert 0 < a["latency_ms"] < 5000
    r = client.post("/recommend", json=raw(svc, pos[0]))
    assert r.json()["status"] == "already_positive" and r.json()["changes"] == [] and r.json()["distance"] == 0.0


def test_invalid_generator_answers_go_to_geco_then_mace(built, monkeypatch):
    _, _, _, neg, _ = built
    s = service(built, "careless")
    try:
        ans = s.recommend(neg[:12])
        recs = s.records(neg[:12], ans)
        assert all(r["status"] == "ok" and r["verified"] for r in recs)
        assert {"geco"} <= {r["method"] for r in recs}
        for x, a in zip(neg[:12], ans, strict=True):
            assert s.verify(x[None], a.cf[None])[0]
        # GeCo finds nothing -> MACE, certified
        s.geco = None
        x = neg[12:13]
        (a,) = s.recommend(x, n_diverse=1)
        if a.kind == "generator":
            pytest.skip("the careless generator happened to be valid on this record")
        assert a.method == "mace" and a.optimal is True and a.verified
        # MACE's proof of no recourse -> no_recourse (and only then)
        monkeypatch.setattr("solvers.mace.MACE.solve", lambda self, w, x, **o: [Recourse.none("mace-milp")])
        (a,) = s.recommend(neg[13:14])
        if a.kind != "generator":
            assert a.status == "no_recourse" and a.method == "mace"
        monkeypatch.setattr("solvers.mace.MACE.solve",
                            lambda self, w, x, **o: [Recourse.none("mace-milp", status="unknown")])
        (a,) = s.recommend(neg[14:15])
        if a.kind != "generator":
            assert a.status == "unknown"
        s.count(ans)
        st = s.stats()
        assert st["counters"]["geco"] >= 1 and st["rates"]["fallback"] > 0
    finally:
        s.close()


def test_past_the_budget_unknown_then_cached(built):
    _, _, _, neg, _ = built
    s = service(built, "careless", budget=0.0)
    try:
        X = neg[20:26]
        first = s.recommend(X)
        waiting = [i for i, a in enumerate(first) if a.kind != "generator"]
        assert waiting and all(first[i].status == "unknown" and first[i].budget_exceeded for i in waiting)
        deadline = time.time() + 12
        while time.time() < deadline and s._futures:
            time.sleep(0.05)
        again = s.recommend(X)
        assert all(again[i].status == "ok" and again[i].verified and again[i].method in ("geco", "mace")
                   for i in waiting)
    finally:
        s.close()


def test_diverse_alternatives(client, svc, built):
    _, _, _, neg, _ = built
    a = client.post("/recommend", json={**raw(svc, neg[1]), "n_diverse": 2}).json()
    assert a["status"] == "ok" and 1 <= len(a["alternatives"]) <= 2
    for alt in a["alternatives"]:
        X = svc.codec.encode([apply(svc, raw(svc, neg[1]), alt["changes"])])
        assert svc.world.accepts(X)[0] and alt["verified"]
    sets = [frozenset(c["feature"] for c in x["changes"]) for x in [a, *a["alternatives"]]]
    assert len(set(sets)) == len(sets)  # diverse: each changes a different set of features


def test_bad_input_gets_a_4xx_naming_the_field(client, svc, built):
    _, _, _, neg, _ = built
    rec = raw(svc, neg[0])
    cases = [({**rec, "zodiac": "leo"}, "zodiac"), ({k: v for k, v in rec.items() if k != "age"}, "age"),
             ({**rec, "purpose": "yacht"}, "purpose"), ({**rec, "age": 500}, "age"), ({**rec, "age": "30"}, "age"),
             ({**rec, "duration": 12.5}, "duration"), ({**rec, "credit_amount": True}, "credit_amount"),
             ({**rec, "employment": 3}, "employment"), ({**rec, "n_diverse": 99}, "n_diverse"),
             ([rec], "body"), ("text", "body")]
    for body, field in cases:
        r = client.post("/recommend", json=body)
        assert r.status_code == 422 and r.json()["detail"].startswith(field), (field, r.text)
    for text in ('{"age": NaN}', '{"age": Infinity}'):
        r = client.post("/recommend", content=text.replace("{", "{" + json.dumps(rec)[1:-1] + ",", 1).replace(
            '"age": ' + str(rec["age"]) + ",", "", 1), headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["detail"].startswith("age"), r.text
    r = client.post("/recommend", content=b'{"age": ', headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["detail"].startswith("body")
    r = client.post("/recommend/batch", json={"records": [rec, {**rec, "housing": "castle"}]})
    assert r.status_code == 422 and r.json()["detail"].startswith("records[1].housing"), r.text
    assert client.get("/model").json()["counters"]["rejected"] >= len(cases)


def test_batch_and_model_info(client, svc, built, tmp_path):
    root, _, _, neg, pos = built
    recs = [raw(svc, x) for x in (*neg[:6], pos[0])]
    r = client.post("/recommend/batch", json={"records": recs})
    assert r.status_code == 200
    body = r.json()
    assert body["counts"]["already_positive"] == 1 and len(body["results"]) == 7
    assert all(a["verified"] for a in body["results"] if a["status"] == "ok")
    info = client.get("/model").json()
    assert (info["dataset"], info["model_class"], info["generator"]) == ("german", "forest", "nearest")
    assert set(info["fingerprint"]) == {"model_sha256", "encoder_sha256"}
    assert info["counters"]["generator"] >= 6 and 0 <= info["rates"]["generator"] <= 1
    assert info["fallback"]["chain"] == ["geco", "mace"]
    text = json.dumps(info)
    assert str(root) not in text and str(Path.home()) not in text


def test_offline_file_of_raw_records(svc, built, tmp_path):
    from serving.batch import recommend_raw_file

    _, _, _, neg, pos = built
    df = pd.DataFrame([raw(svc, x) for x in (*neg[:5], pos[0])])
    df.insert(0, "id", [f"p{i}" for i in range(len(df))])
    df.to_csv(tmp_path / "in.csv", index=False)
    counts = recommend_raw_file(svc, tmp_path / "in.csv", tmp_path / "out.parquet")
    out = pd.read_parquet(tmp_path / "out.parquet")
    assert list(out["id"]) == list(df["id"]) and counts.get("already_positive") == 1
    assert all(out["verified"]) and all(isinstance(json.loads(c), list) for c in out["changes"])
    df.loc[2, "age"] = 999
    df.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match=r"rows\[2\]\.age"):
        recommend_raw_file(svc, tmp_path / "bad.csv", tmp_path / "out.csv")


def test_fallback_process_gives_the_same_answers(built):
    """serve.py runs GeCo and MACE in a child process (no shared GIL with requests): same answers."""
    _, _, _, neg, _ = built
    here, there = service(built, "careless", budget=None), service(built, "careless", budget=None, fallback_process=True)
    try:
        a, b = here.recommend(neg[:4]), there.recommend(neg[:4])
        assert there._pool is not None or all(x.kind == "generator" for x in b)
        for x, y in zip(a, b, strict=True):
            assert (x.status, x.method, x.kind) == (y.status, y.method, y.kind)
            if x.cf is not None:
                np.testing.assert_array_equal(x.cf, y.cf)
    finally:
        here.close()
        there.close()
