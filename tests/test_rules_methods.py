"""GeCo, MD-PSO, the tabular generators and the metrics under the world's rules (issue 55, item 3).

Hypothesis draws rule sets of every kind (step bounds, forbidden transitions, links, PLAF statements,
cost weights) on a small mixed world (integer, real, ordinal, binary, one-hot and monotone features;
``tests/test_rules.py``'s schema) and a model of each family: no answer of GeCo, MD-PSO or any tabular
generator breaks a rule, by the shared checker (``CompiledRules.violations``) and by the row-by-row
reference (``tests/rules_reference.py``), and each reports the weighted distance of the reference. The
generators are fitted once per model on the world without rules and answer on the worlds with rules,
so their checks, not their training, keep the rules. On the enumerable world of
``tests/test_mace_rules.py``, GeCo's distance is within 1% of MACE's certified optimum under each rule
kind on most agents.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from envs.recourse import Recourse
from envs.rules import RuleError, RuleSet, compile_rules
from envs.tabular import TabularWorld
from evaluation.counterfactual_metrics import CounterfactualScorer
from learners.tabular import TabularLabels, build_tabular_generator
from solvers.geco import GeCo, Plaf
from solvers.mace import MACE
from solvers.pso import MDPSO
from tests import test_mace_rules as small
from tests.rules_reference import holds, weighted_distance
from tests.test_mace import MODELS, _fit
from tests.test_rules import PLAF, SCHEMA, _rows, forbids, links, steps

WEIGHTS = [{"n": {"up": 2.0, "down": 0.5}}, {"r": {"up": 0.5, "down": 1.5}}, {"g": 0.5},
           {"bin": {"up": 0.25, "down": 3.0}}, {"o": 1.5}]
GENERATORS = {"nearest_cfe": {}, "named_cfe": {"max_epochs": 3, "hidden": (32,)},
              "change_value": {"max_epochs": 3, "hidden": (32,)}}


def _data(n: int = 600, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = _rows(rng, n)
    z = 0.15 * X[:, 0] + 0.4 * X[:, 1] + 0.5 * X[:, 2] + 0.8 * X[:, 3] + 0.6 * X[:, 4] + 0.7 * X[:, 6] \
        - 0.2 * X[:, 8] - 2.6
    return X, (z + rng.normal(0, 0.5, n) > 0).astype(int)


@pytest.fixture(scope="module")
def fitted():
    """Per model family: the model, the data, and the three generators fitted on MACE's answers on the
    world without rules."""
    X, y = _data()
    out = {}
    for kind in MODELS:
        model = _fit(kind, X, y)
        plain = TabularWorld(f"methods/{kind}", SCHEMA, model)
        neg = X[~plain.accepts(X)][:40]
        solved = [(x, r) for x in neg for r in MACE(norm="one").solve(plain, x)[:1] if r.found]
        labels = TabularLabels(np.array([x for x, _ in solved]), np.array([r.final_state for _, r in solved]),
                               np.array([r.cost for _, r in solved]))
        with warnings.catch_warnings():  # torch and lightning on a tiny training set
            warnings.simplefilter("ignore")
            gens = {m: build_tabular_generator(m, p).fit(plain, labels) for m, p in GENERATORS.items()}
        out[kind] = (model, X, gens)
    return out


def _rules(s, f, lk, p, w) -> RuleSet:
    feats: dict = {}
    for name, kind, v in s:
        feats.setdefault(name, {})[kind] = v
    for name, a, b in f:
        feats.setdefault(name, {}).setdefault("forbid", []).append([a, b])
    weights = {k: v for d in w for k, v in d.items()}
    return RuleSet.from_dict({"features": feats, "plaf": p, "weights": weights,
                              "links": [{"from": a, "to": b, "per_unit": k, "on": on} for (a, b), k, on in lk]})


def _check(world: TabularWorld, x: np.ndarray, CF: np.ndarray, dist: np.ndarray, who: str) -> None:
    """Every row keeps every rule (checker and reference), is accepted, and reports the weighted distance."""
    if not len(CF):
        return
    got = compile_rules(world.rules, world.schema).violations(x, CF)  # (an empty rule set: the schema's alone)
    assert all(v is None for v in got), (who, got)
    assert holds(SCHEMA, world.rules, x, CF, PLAF).all(), who
    assert world.accepts(CF).all(), who
    np.testing.assert_allclose(dist, weighted_distance(SCHEMA, world.rules, x, CF, "one"), rtol=1e-9, atol=1e-12,
                               err_msg=who)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(steps, forbids, links, st.lists(st.sampled_from(list(PLAF)), unique=True, max_size=3),
       st.lists(st.sampled_from(WEIGHTS), unique_by=lambda d: next(iter(d)), max_size=2), st.sampled_from(MODELS))
def test_no_method_returns_an_answer_that_breaks_a_rule(fitted, s, f, lk, p, w, kind):
    model, X, gens = fitted[kind]
    try:
        world = TabularWorld(f"methods/{kind}", SCHEMA, model, rules=_rules(s, f, lk, p, w))
    except RuleError:
        assume(False)
    agents = X[~world.accepts(X)][40:45]  # held out from the generators' labels
    geco = GeCo(plaf=Plaf(), population_size=40, max_generations=20).fit(world, X)
    pso = MDPSO(n_particles=16, n_iterations=15, max_iterations=30).fit(world, X)
    for x in agents[:2]:
        for solver in (geco, pso):
            found = [r for r in solver.solve(world, x) if r.found]
            _check(world, x, np.array([r.final_state for r in found]).reshape(-1, len(x)),
                   np.array([r.cost for r in found]), solver.name)
    for name, gen in gens.items():
        rec = gen.recommend(world, agents, n_alternatives=2)
        for x, cf, d, ok, alts in zip(agents, rec.CF, rec.distance, rec.found, rec.alternatives, strict=True):
            if ok:
                _check(world, x, cf[None], np.array([d]), name)
            alts = alts[~np.isnan(alts).any(1)]
            assert holds(SCHEMA, world.rules, x, alts, PLAF).all(), name


def test_geco_is_near_maces_certified_optimum_under_each_rule_kind():
    """Small enumerable world, each rule kind and all together, every model family: GeCo's nearest answer
    is within 1% of MACE's certified optimum under the rules (weights included) on most agents."""
    X, y = small._data()
    within, total = {}, {}
    for kind in MODELS:
        model = _fit(kind, X, y)
        for rules in small.KINDS:
            world = TabularWorld(f"small/{kind}", small._schema(), model, rules=RuleSet.from_dict(small.KINDS[rules]))
            geco = GeCo(plaf=Plaf()).fit(world, X)
            for x in X[~world.accepts(X)][:3]:
                m = MACE(norm="one").solve(world, x)[0]
                if not (m.found and m.optimal and m.extra["distance"] > 0):
                    continue
                g = [r for r in geco.solve(world, x) if r.found]
                total[rules] = total.get(rules, 0) + 1
                if g:
                    cf = np.array([r.final_state for r in g])
                    assert holds(world.schema, world.rules, x, cf, small.PLAF).all()
                    within[rules] = within.get(rules, 0) + bool(min(r.cost for r in g) <= 1.01 * m.extra["distance"])
    assert sum(total.values()) >= 50
    for rules, n in total.items():
        assert within.get(rules, 0) >= 0.75 * n, (rules, within, total)
    assert sum(within.values()) >= 0.9 * sum(total.values()), (within, total)


def test_metrics_count_a_broken_rule_invalid_and_weigh_the_distance():
    X, y = _data()
    model = _fit("lr", X, y)
    rules = RuleSet.from_dict({"n": {"max_increase": 2}, "weights": {"n": {"up": 2.0, "down": 0.5}}})
    world = TabularWorld("metrics/lr", SCHEMA, model, rules=rules)
    plain = TabularWorld("metrics/lr", SCHEMA, model)
    x = X[~world.accepts(X)][0]
    far, near = x.copy(), x.copy()
    far[0], near[0] = min(x[0] + 3, 20), max(x[0] - 1, 0)
    answers = [Recourse((), (), cf, 0.0, True, "t") for cf in (far, near)]
    scored = CounterfactualScorer(n_diverse=2).fit(world, X).score(x, answers)
    base = CounterfactualScorer(n_diverse=2).fit(plain, X).score(x, answers)
    ok = world.accepts(np.array([far, near]))
    assert scored["violations"] == base["violations"] + int(far[0] - x[0] > 2)
    assert scored["validity"] == pytest.approx(np.mean(ok & np.array([far[0] - x[0] <= 2, True])))
    if ok[1]:
        assert scored["distance"] == pytest.approx(weighted_distance(SCHEMA, rules, x, near[None], "one")[0])
