"""MACE under the world's rules (issue 55): the certified optimum is the enumerated optimum under the rules.

A small all-discrete world (every counterfactual enumerable, 1,440 states) and one rule set per kind
(step bounds, forbidden transitions, links, PLAF statements, cost weights per direction) and all of
them together. Per model (tree, forest, LR, MLP), norm and agent: the enumerated optimum under the
rules (``tests/rules_reference.py``, a row-by-row reading independent of ``envs.rules``) lies in
[delta_min, d] with d within the certificate's tolerance, the answer is flagged optimal and passes
both the shared checker and the reference. The proof route (``minimize(cut=...)``) closes at the
optimum and not above it; the z3 backend (the SMT route) certifies the same optimum; an agent no rule-keeping point exists for
gets "no recourse" naming the rule; a continuous world with a continuous link and a strict rule
takes the robust reading and is still certified.
"""

from __future__ import annotations

import numpy as np
import pytest

from envs.rules import RuleSet
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from solvers.mace import MACE
from solvers.mace.milp import MilpBackend, proof_closes
from tests.rules_reference import broken, holds, weighted_distance
from tests.test_mace import MODELS, NORMS, _all_states, _fit, _mixed_data, _mixed_schema, _negatives, _one_hot


def _schema() -> FeatureSchema:
    return FeatureSchema((
        Feature("a", "numeric", 0, 4, "free", integer=True),
        Feature("b", "ordinal", 0, 3, "increase", categories=("lo", "mid", "hi", "top"), integer=True),
        Feature("s", "binary", 0, 1, "immutable", integer=True),
        Feature("t", "binary", 0, 1, "free", categories=("no", "yes"), integer=True),
        *(Feature(f"g={c}", "binary", 0, 1, "free", group="g", integer=True) for c in "xyz"),
        Feature("c", "numeric", 0, 5, "increase", integer=True),
    ))


def _data(n: int = 500, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.integers(0, 5, n), rng.integers(0, 4, n), rng.integers(0, 2, n), rng.integers(0, 2, n),
                         _one_hot(rng, n, 3), rng.integers(0, 6, n)]).astype(float)
    z = 0.6 * X[:, 0] + 0.8 * X[:, 1] + 0.7 * X[:, 2] + X[:, 3] + 1.2 * X[:, 4] - 0.8 * X[:, 5] + 0.3 * X[:, 7] - 4.2
    return X, (z + rng.normal(0, 0.6, n) > 0).astype(int)


PLAF = {  # the PLAF statements of the tests, and their direct reading
    "PLAF IF x_cf.t > x.t THEN x_cf.a >= x.a + 1": lambda x, c: not c["t"] > x["t"] or c["a"] >= x["a"] + 1,
    "PLAF x_cf.a + x_cf.c <= 6": lambda x, c: c["a"] + c["c"] <= 6,
    "PLAF IF x.g = 'x' THEN x_cf.g != 'z'": lambda x, c: not x["g"] == 0 or c["g"] != 2,
    "PLAF IF x_cf.b > x.b && x.c < 3 THEN x_cf.c >= 3": lambda x, c: not (c["b"] > x["b"] and x["c"] < 3) or c["c"] >= 3,
}
KINDS = {
    "steps": {"a": {"max_increase": 1, "max_decrease": 1}, "c": {"max_increase": 2}, "b": {"max_levels_up": 1}},
    "forbid": {"b": {"forbid": [["lo", "mid"], ["mid", "hi"], ["lo", "top"]]}, "g": {"forbid": [["x", "y"], ["z", "x"]]},
               "a": {"forbid": [[1, 2], [2, 3], [3, 4]]}},
    "links": {"links": [{"from": "b", "to": "c", "per_unit": 1}, {"from": "t", "to": "a", "per_unit": 2},
                        {"from": "a", "to": "c", "per_unit": 0.5, "on": "down"}]},
    "plaf": {"plaf": list(PLAF)},
    "weights": {"weights": {"a": {"up": 2.0, "down": 0.5}, "t": {"up": 0.25, "down": 3.0}, "g": 0.5, "b": 1.5}},
}
KINDS["combined"] = {**KINDS["steps"], **KINDS["links"], **KINDS["plaf"], **KINDS["weights"],
                     "b": {"max_levels_up": 2, "forbid": [["lo", "mid"]]}, "g": {"forbid": [["x", "y"]]}}


@pytest.fixture(scope="module")
def models():
    X, y = _data()
    return {kind: (_fit(kind, X, y), X) for kind in MODELS}


def _tol(d: float) -> float:
    return max(1e-3 * d, 1e-7)


def _optimum(world: TabularWorld, x: np.ndarray, norm: str, ok: np.ndarray, S: np.ndarray) -> float:
    ok = ok & world.accepts(S)
    return float(weighted_distance(world.schema, world.rules, x, S[ok], norm).min()) if ok.any() else np.inf


@pytest.mark.parametrize("rules", list(KINDS))
@pytest.mark.parametrize("kind", MODELS)
def test_certified_optimum_is_the_enumerated_one(models, kind, rules):
    model, X = models[kind]
    world = TabularWorld(f"rules/{kind}", _schema(), model, rules=RuleSet.from_dict(KINDS[rules]))
    S = _all_states(world.schema)
    checker = world.compiled_rules()
    for x in _negatives(world, X, 3):
        ok = holds(world.schema, world.rules, x, S, PLAF)
        np.testing.assert_array_equal(checker.holds(x, S), ok)  # the shared checker is the reference
        for norm in NORMS:
            best = _optimum(world, x, norm, ok, S)
            r = MACE(norm=norm).solve(world, x)[0]
            if not np.isfinite(best):
                assert r.status == "no_recourse", (norm, r.extra)
                continue
            cf = np.asarray(r.final_state)
            assert r.status == "ok" and world.model.predict(cf[None])[0]
            assert checker.violations(x, cf[None])[0] is None and not broken(world.schema, world.rules, x, cf, PLAF)
            assert r.cost == pytest.approx(weighted_distance(world.schema, world.rules, x, cf[None], norm)[0], abs=1e-12)
            assert r.extra["delta_min"] <= best <= r.cost <= best + _tol(best), (norm, best, r.extra)
            assert r.optimal, r.extra.get("reason")
            assert r.extra["rules"] == len(checker.names)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("kind", MODELS)
def test_proof_route_under_rules(models, kind, norm):
    """The second route closes below the optimum under the rules, and does not close above it."""
    model, X = models[kind]
    world = TabularWorld(f"rules/{kind}", _schema(), model, rules=RuleSet.from_dict(KINDS["combined"]))
    S = _all_states(world.schema)
    for x in _negatives(world, X, 2):
        best = _optimum(world, x, norm, holds(world.schema, world.rules, x, S, PLAF), S)
        if not np.isfinite(best):
            continue
        inst = MACE(norm=norm)._instance(world, x)
        for cut, expect in ((best - inst.tolerance(best) / 2, True), (best * 1.5 + 1e-3, False)):
            be = MilpBackend(inst)
            r = be.minimize(30.0, cut=cut)
            v = float(inst.distance(r.x[None])[0]) if r.x is not None else np.inf
            assert proof_closes(r.status, v, r.delta_min, cut) is expect, (cut, best, r.status, v)


def test_plausible_off_keeps_the_rules(models):
    """``plausible=False`` drops the schema's mutability, not the user's rules."""
    model, X = models["lr"]
    world = TabularWorld("rules/lr", _schema(), model, rules=RuleSet.from_dict(KINDS["combined"]))
    S = _all_states(world.schema)
    for x in _negatives(world, X, 3):
        ok = holds(world.schema, world.rules, x, S, PLAF, mutability=False)
        best = _optimum(world, x, "one", ok, S)
        r = MACE(norm="one", plausible=False).solve(world, x)[0]
        assert r.extra["delta_min"] <= best <= r.cost <= best + _tol(best) and r.optimal
        assert not broken(world.schema, world.rules, x, np.asarray(r.final_state), PLAF, mutability=False)


@pytest.mark.parametrize("rules", list(KINDS))
@pytest.mark.parametrize("kind", ["tree", "forest", "lr"])
def test_z3_backend_certifies_the_same_optimum(models, kind, rules):
    """The SMT route (z3, Algorithm 1) encodes the same grounded rules and cost weights: its certified
    answer is the enumerated optimum under the rules, as the MILP's is."""
    pytest.importorskip("z3")
    model, X = models[kind]
    world = TabularWorld(f"rules/{kind}", _schema(), model, rules=RuleSet.from_dict(KINDS[rules]))
    S = _all_states(world.schema)
    checker = world.compiled_rules()
    for x in _negatives(world, X, 2):
        ok = holds(world.schema, world.rules, x, S, PLAF)
        for norm in NORMS:
            best = _optimum(world, x, norm, ok, S)
            (r,) = MACE(backend="z3", norm=norm, time_limit=60.0).solve(world, x)
            if not np.isfinite(best):
                assert r.status == "no_recourse", (norm, r.extra)
                continue
            cf = np.asarray(r.final_state)
            assert r.status == "ok" and r.optimal, (norm, r.extra.get("reason"))
            assert checker.violations(x, cf[None])[0] is None and not broken(world.schema, world.rules, x, cf, PLAF)
            assert r.extra["delta_min"] <= best <= r.cost <= best + _tol(best), (norm, best, r.extra)


def test_no_recourse_names_the_rule(models):
    """An agent whose rules no point keeps (here: a forced increase beyond the range) gets no recourse."""
    model, X = models["forest"]
    world = TabularWorld("rules/forest", _schema(), model, rules=RuleSet.from_dict({"plaf": ["PLAF x_cf.c >= x.c + 3"]}))
    x = next(x for x in _negatives(world, X, 20) if x[7] >= 3)
    (r,) = MACE().solve(world, x)
    assert r.status == "no_recourse" and "PLAF x_cf.c >= x.c + 3" in r.extra["reason"]


@pytest.mark.parametrize("kind", MODELS)
def test_continuous_rules_are_kept_and_certified(kind):
    """A continuous link (income follows edu), a strict comparison and a continuous step bound: the answer
    keeps every rule by the shared checker (the robust reading where the relaxed point sits on a
    boundary) and is certified; the bound never exceeds a rule-keeping point found by a grid."""
    X, y = _mixed_data()
    rules = RuleSet.from_dict({"links": [{"from": "edu", "to": "income", "per_unit": 7.5}],
                               "income": {"max_increase": 30.0},
                               "plaf": ["PLAF IF x_cf.income > x.income THEN x_cf.debt < x.debt"],
                               "weights": {"income": {"up": 1.5, "down": 0.5}}})
    world = TabularWorld(f"mixed/{kind}", _mixed_schema(), _fit(kind, X, y), rules=rules)
    checker = world.compiled_rules()
    for x in _negatives(world, X, 4):
        r = MACE(norm="one").solve(world, x)[0]
        if r.status != "ok":
            continue
        cf = np.asarray(r.final_state)
        assert checker.violations(x, cf[None])[0] is None and world.model.predict(cf[None])[0]
        assert r.optimal, r.extra.get("reason")
        assert r.extra["delta_min"] <= r.cost


def test_weighted_l0_bound_rounds_to_the_weights_unit(models):
    """Under l0 every distance is alpha times a sum of cost weights: a dual bound rounds up to the next
    multiple of alpha·gcd(weights) (0.25 for the weights of KINDS['weights']: 2, 0.5, 0.25, 3, 1.5, 1), and
    never where a weight is no small fraction."""
    model, X = models["tree"]
    world = TabularWorld("rules/tree", _schema(), model, rules=RuleSet.from_dict(KINDS["weights"]))
    inst = MACE(norm="zero")._instance(world, _negatives(world, X, 1)[0])
    a = inst.weights[0]
    assert inst.weight_unit() == 0.25
    assert inst.round_bound(a * 0.26) == pytest.approx(a * 0.5)
    assert inst.round_bound(a * 0.5) == pytest.approx(a * 0.5)
    inst.cost = inst.cost * np.sqrt(2)
    assert inst.weight_unit() is None and inst.round_bound(a * 0.26) == a * 0.26
