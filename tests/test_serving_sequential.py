"""Serving a sequential world (serving/sequential.py): raw records in, ordered actions with values,
per-step costs and states out, verified by rollout; the BRKGA sequencer behind the policy within
the budget. German CSCF world, the no-learning lookahead as the policy and a broken stand-in."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
from fastapi.testclient import TestClient

import learners.registry  # noqa: F401
from data_gen.sequential_worlds import build_sequential, rejected_agents
from envs.sequential_candidates import FlatGrid, candidates
from learners.base import build_generator
from learners.policies.sequential import sequential_context
from serving.sequential import SequentialService, ServiceError, create_sequential_app, is_sequential_run


class Broken:
    """A policy whose sequences are empty (never accepted): everything goes to the sequencer."""

    def predict_sequences(self, X, beam_width=None):
        B = len(X)
        return SimpleNamespace(sets=np.full((B, 1), -1), values=np.full((B, 1), np.nan))


@pytest.fixture(scope="module")
def built():
    b = build_sequential("german")
    X = rejected_agents(b, 12, split="all")
    pol = build_generator("seq_lookahead", {"depth": 1}).fit(SimpleNamespace(X=X), None, sequential_context(b.world))
    return b, X, pol


def service(built, policy="lookahead1", budget=None, beam_width=None) -> SequentialService:
    b, _, pol = built
    return SequentialService("seq_run", policy, budget, world=b.world, policies={"lookahead1": pol, "broken": Broken()},
                             encoder=b.data.encoder, config={"name": "seq", "sequencer_generations": 3},
                             beam_width=beam_width)


def test_beam_width_is_served(built):
    """``beam_width`` answers with the policy's verified beam search: valid, and on these agents no
    dearer in sum (the beam also takes the cheapest accepting first step the raw rollout takes)."""
    b, X, _ = built
    raw, beam = service(built), service(built, beam_width=4)
    ra, ba = raw.records(X[:6], raw.recommend(X[:6])), beam.records(X[:6], beam.recommend(X[:6]))
    assert all(r["status"] == "ok" and r["verified"] for r in ba)
    assert sum(r["total_cost"] for r in ba) <= sum(r["total_cost"] for r in ra) + 1e-9
    with pytest.raises(ServiceError, match="beam_width"):
        service(built, beam_width=0)


def test_ordered_actions_with_costs_and_states(built):
    b, X, _ = built
    svc = service(built)
    c = TestClient(create_sequential_app("unused", service=svc))
    rec = svc.codec.decode(X[0])
    a = c.post("/recommend", json=rec).json()
    assert a["status"] == "ok" and a["verified"] and a["method"] == "lookahead1" and a["optimal"] is None
    assert a["steps"] and a["total_cost"] == pytest.approx(sum(s["cost"] for s in a["steps"]))
    names, values = [s["action"] for s in a["steps"]], [s["value"] for s in a["steps"]]
    ev = b.world.evaluate(X[0], list(zip(names, values, strict=True)))
    assert ev.valid and ev.cost == pytest.approx(a["total_cost"])
    assert a["steps"][-1]["state"] == svc.codec.decode(ev.final_state)
    assert {ch["feature"] for ch in a["changes"]} <= {ch["feature"] for s in a["steps"] for ch in s["changes"]}
    r = c.post("/recommend", json={**rec, "age": "old"})
    assert r.status_code == 422 and r.json()["detail"].startswith("age")
    info = c.get("/model").json()
    assert info["kind"] == "sequential" and info["counters"]["policy"] == 1 and info["fallback"]["chain"] == ["brkga"]


def test_the_sequencer_takes_over_and_finishes_in_the_background(built):
    b, X, _ = built
    svc = service(built, "broken", budget=0.0)
    try:
        first = svc.recommend(X[:2])
        assert all(a.status == "unknown" and a.budget_exceeded for a in first)
        deadline = time.time() + 60  # ends as soon as it is done: 12 s ran out once in CI on a loaded machine
        while time.time() < deadline and any(not f.done() for f in list(svc._futures)):
            time.sleep(0.05)
        again = svc.records(X[:2], svc.recommend(X[:2]))
        for r in again:
            assert r["status"] == "ok" and r["method"] == "brkga" and r["verified"] and r["steps"]
    finally:
        svc.close()


def test_run_detection(tmp_path):
    (tmp_path / "config.yaml").write_text("name: s\nworld: adult\npolicies: []\n")
    assert is_sequential_run(tmp_path)
    (tmp_path / "config.yaml").write_text("name: t\ntabular: {dataset: adult, model: tree}\n")
    assert not is_sequential_run(tmp_path)


class Fixed:
    """A policy that answers every agent with one given (action, value) step."""

    def __init__(self, action: int, value: float):
        self.action, self.value = action, value

    def predict_sequences(self, X, beam_width=None):
        B = len(X)
        return SimpleNamespace(sets=np.full((B, 1), self.action), values=np.full((B, 1), self.value))


def test_answers_in_the_worlds_domain_outside_the_datas_range_are_served(built):
    """CSCF's German loan may run 1..119 months (the data: 4..72): a valid answer that shortens the
    loan below the data's minimum is served as the policy's, verified, not sent to the fallback."""
    b, _, _ = built
    w, grid = b.world, FlatGrid.of(b.world)
    j = w.schema.names.index("duration")
    lo = w.schema.bounds()[0][j]
    X = rejected_agents(b, 60, split="all")
    c = candidates(w, grid, X, np.zeros((len(X), w.n_actions), bool), keep_states=True)
    i, k = np.argwhere(c.accepted & (c.states[..., j] < lo - 0.5))[0]
    svc = SequentialService("seq_run", "fixed", None, world=w,
                            policies={"fixed": Fixed(int(grid.action[k]), float(grid.value[k]))},
                            encoder=b.data.encoder, config={"name": "seq", "sequencer_generations": 3})
    a = svc.records(X[i:i + 1], svc.recommend(X[i:i + 1]))[0]
    assert a["status"] == "ok" and a["verified"] and a["method"] == "fixed"
    assert a["steps"][0]["state"]["duration"] < lo
    assert svc.counters["policy_invalid"] == 0
