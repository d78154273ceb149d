"""A tabular run served against a remote model (serving/remote_model.py; issue 56, item 4): the model
behind a round trip, seen through predict_proba only; within a request its answers remembered per
exact row (never a different row's answer), the records riding along the first call, so a proposer's
request costs its search's round trips and no more; GeCo the only fallback; ``model="none"`` serves the
fallback chain alone."""

from __future__ import annotations

import pickle
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.black_box import BlackBoxModel
from learners.tabular import build_tabular_generator
from serving.remote_model import RemoteModel
from serving.service import ServiceError
from serving.tabular import TabularService
from serving.tabular_app import create_tabular_app
from tests.tabular_serving_run import NearestAccepted
from tests.tabular_worlds import german_rejected, german_train_split


@pytest.fixture(scope="module")
def german():
    world, neg = german_rejected()
    return world, neg


def test_remote_model_remembers_within_a_request_only(german):
    world, neg = german
    rm = RemoteModel(world.model, latency_s=0.0)
    X = neg[:5]
    assert np.array_equal(rm.predict(X), world.accepts(X))
    rm.predict(X)
    assert (rm.calls, rm.rows) == (2, 10)  # outside a request: every call goes out
    with rm.request(neg[5:8]):
        p = rm.predict_proba(X)  # one call: X and the request's 3 records
        assert (rm.calls, rm.rows) == (3, 18)
        assert np.array_equal(rm.predict_proba(X[::-1]), p[::-1])  # remembered: no call
        assert np.array_equal(rm.predict(neg[5:8]), world.accepts(neg[5:8]))  # rode along: no call
        assert rm.calls == 3
        both = np.vstack([X[:2], neg[9:10]])  # one row new: one call of that row only
        assert np.array_equal(rm.predict(both), world.accepts(both))
        assert (rm.calls, rm.rows) == (4, 19)
        with rm.request(neg[20:22]):  # inside another: the outer memory, the outer records
            rm.predict(X)
            assert rm.calls == 4
    rm.predict(X)
    assert rm.calls == 5  # forgotten after the request
    with pytest.raises(AttributeError, match="only predict_proba"):
        rm.remote.trees  # noqa: B018  (the white box stays hidden)


def test_remote_model_waits_and_pickles(german):
    world, neg = german
    rm = RemoteModel(world.model, latency_s=0.02)
    t = time.perf_counter()
    with rm.request(neg[:3]):
        rm.predict(neg[:3])
        rm.predict(neg[:3])
    assert 0.02 <= time.perf_counter() - t < 0.2 and rm.calls == 1  # one round trip, not two
    back = pickle.loads(pickle.dumps(rm))  # as the fallback process gets it: the model, no memory
    assert back.latency_s == 0.02 and np.array_equal(back.predict(neg[:4]), world.accepts(neg[:4]))


def test_remote_model_memory_is_per_thread(german):
    world, neg = german
    rm = RemoteModel(world.model)
    seen = {}

    def other():
        c0 = rm.calls
        rm.predict(neg[:2])  # another thread's request does not answer for this one
        seen["calls"] = rm.calls - c0

    with rm.request():
        rm.predict(neg[:2])
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen["calls"] == 1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 11), min_size=1, max_size=6), min_size=1, max_size=5),
       st.lists(st.integers(0, 11), max_size=4))
def test_remembered_answers_are_the_models_own(german, calls, records):
    """Any sequence of calls in a request, rows repeated within and across calls: each answer equals the
    model's answer for that row, and no row is sent twice."""
    world, neg = german
    pool = np.vstack([neg[:6], neg[:6] + 0.0, neg[6:12]])  # equal rows under different arrays
    rm = RemoteModel(world.model)
    with rm.request(pool[records] if records else None):
        for idx in calls:
            assert np.array_equal(rm.predict_proba(pool[idx]), BlackBoxModel(world.model).predict_proba(pool[idx]))
    asked = {pool[i].tobytes() for idx in calls for i in idx}
    assert rm.rows <= len(asked) + len(records)


def _run(world, neg, generators):
    return SimpleNamespace(world=world, generators=generators,
                           config={"name": "german_forest", "tabular": {"dataset": "german", "model": "forest"}},
                           mace_params={"backend": "milp", "norm": "one"}, metrics={})


def test_served_against_a_remote_model(german):
    world, neg = german
    run = _run(world, neg, {"nearest": NearestAccepted(world, _accepted(world))})
    svc = TabularService("german_forest", "nearest", None, run=run, geco_data=_accepted(world), model_latency_s=0.005)
    try:
        assert svc.black_box and svc.describe()["fallback"]["chain"] == ["geco"]  # no MACE: it cannot read the model
        c0 = svc.remote.calls
        answers, bad = svc.first_pass(neg[:4])
        assert svc.remote.calls - c0 == 1  # the stand-in's one call; the records and the checks ride on it
        assert not len(bad) and all(a.status == "ok" for a in answers)
        assert world.accepts(np.vstack([a.cf for a in answers])).all()  # valid on the real model
        client = TestClient(create_tabular_app("unused", service=svc))
        r = client.post("/recommend", json=svc.codec.decode(neg[5]))
        assert r.status_code == 200 and r.json()["status"] == "ok"
        info = client.get("/model").json()
        assert info["remote_model"]["latency_ms"] == 5.0 and info["remote_model"]["calls"] >= 2
    finally:
        svc.close()


def _accepted(world):
    from data_gen.classifiers import build

    X = build("german", "forest").data.X_train
    return X[world.accepts(X)]


def test_no_generator_serves_the_fallback_chain(german):
    world, neg = german
    run = _run(world, neg, {"nearest": NearestAccepted(world, _accepted(world))})
    svc = TabularService("german_forest", "none", None, run=run, geco_data=_accepted(world))
    try:
        answers = svc.recommend(neg[:2], budget_s=None)
        assert [a.kind for a in answers] == ["geco", "geco"] and svc.counters["generator_none"] == 2
        assert world.accepts(np.vstack([a.cf for a in answers])).all()
    finally:
        svc.close()
    with pytest.raises(ServiceError, match="'none': the fallback chain alone"):
        TabularService("german_forest", "magic", None, run=run, geco_data=_accepted(world))
    with pytest.raises(ServiceError, match="model_latency_s: must be >= 0"):
        TabularService("german_forest", None, None, run=run, model_latency_s=-1)


class _ReadsTheModel:
    """A stand-in for a generator that reads the model's white box (as ``change_value`` reads a forest's splits)."""

    def recommend(self, world, X):
        return X + 0.0 * world.model.score(X)[:, None], np.zeros(len(X))


def test_a_white_box_generator_is_refused_against_a_remote_model(german):
    world, neg = german
    gen = _ReadsTheModel()
    gen.recommend(world, neg[:2])  # it answers on the run's own model
    with pytest.raises(ServiceError, match="cannot answer on this world .* serve a proposer generator"):
        TabularService("german_forest", "cv", None, run=_run(world, neg, {"cv": gen}), geco_data=_accepted(world),
                       model_latency_s=0.001)


def test_a_proposer_request_costs_its_search_calls_only(german):
    world, neg = german
    _, labels, held = german_train_split()
    gen = build_tabular_generator("proposer", {"max_epochs": 20}).fit(world, labels)
    svc = TabularService("german_forest", "p", None, run=_run(world, neg, {"p": gen}), geco_data=_accepted(world),
                         model_latency_s=0.001)
    try:
        for x in held[:6]:
            c0 = svc.remote.calls
            answers, bad = svc.first_pass(x[None])
            assert svc.remote.calls - c0 <= gen.params.calls  # the record's acceptance and the check: no call
            if not len(bad):
                assert world.accepts(answers[0].cf[None])[0]
    finally:
        svc.close()


def test_the_benchmark_checks_answers_on_the_runs_own_model(german):
    """``benchmarks/serving_remote.score``: an answer whose changes the run's model accepts is valid, one whose
    change was undone is not (the check reads the raw record, not the server's word)."""
    from benchmarks.serving_remote import markdown, score

    world, neg = german
    run = _run(world, neg, {"nearest": NearestAccepted(world, _accepted(world))})
    svc = TabularService("german_forest", "nearest", None, run=run, geco_data=_accepted(world), model_latency_s=1e-4)
    try:
        X = neg[:4]
        records = [svc.codec.decode(x) for x in X]
        answers = svc.records(X, svc.first_pass(X)[0])
    finally:
        svc.close()
    assert all(a["status"] == "ok" and a["changes"] for a in answers)
    d = np.array([a["distance"] for a in answers])
    good = score(run, records, answers, d)
    assert good["valid"] == 1.0 and good["optimal"] == 1.0 and good["status"] == {"ok": 4}
    undone = [dict(a, changes=[]) for a in answers[:1]] + answers[1:]  # an answer that changes nothing
    bad = score(run, records, undone, d * 0.5)
    assert bad["valid"] == 0.75 and "rejects it" in bad["problems"][0] and bad["optimal"] == 0.0
    r = {"run": "x", "latency_ms": 20.0, "agents": 4, "load_average": 0.5, "methods": {
        "proposer": {"p50_ms": 61.0, "p90_ms": 70.0, "p99_ms": 80.0, "max_ms": 90.0, "calls_per_answer": 2.0,
                     "rows_per_answer": 190.0, **good},
        "proposer_surrogate": {"p50_ms": 59.0, "p90_ms": 70.0, "p99_ms": 80.0, "max_ms": 90.0, "calls_per_answer": 2.0,
                               "rows_per_answer": 210.0, **good}}}
    md = markdown([r], "python benchmarks/serving_remote.py")
    assert "| proposer (network) | 61.0 |" in md and "proposer (network) not met (61.0 ms)" in md
    assert "proposer + surrogate met (59.0 ms)" in md  # each learned generator against the line
