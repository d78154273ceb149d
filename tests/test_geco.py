"""GeCo (solvers/geco): PLAF, the optimum on brute-forceable worlds, constraints, representations, errors."""

from __future__ import annotations

import numpy as np
import pytest
from blackbox_worlds import RULES, SCHEMA, brute_force, rejected, toy_data, toy_world
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from solvers.geco import ADULT, CREDIT, GeCo, Plaf, PlafError
from solvers.geco.partial_eval import BlackBox
from solvers.geco.population import REPRESENTATIONS
from solvers.geco.search import _Run

MODELS = ("tree", "forest", "lr", "mlp")


@pytest.fixture(scope="module")
def worlds():
    return {k: toy_world(k) for k in MODELS}


# ------------------------------------------------------------------------------------------- PLAF

def test_plaf_groups_rules_and_order():
    schema = FeatureSchema((
        Feature("a", "numeric", 0, 9, integer=True), Feature("b-c", "numeric", 0, 9, integer=True),
        Feature("d", "numeric", 0, 9, integer=True), Feature("e", "numeric", 0, 9, integer=True),
    ))
    prog = Plaf.parse("""
        GROUP a, b-c   # one group, sampled together
        PLAF x_cf.a >= x.a
        PLAF IF x_cf.e > x.e THEN x_cf.d <= x.d - 1
        PLAF IF x_cf.d > 5 THEN x_cf.a >= 2 * x.a + 1
    """).compile(schema, schema_rules=False)
    assert [prog.group_name(g) for g in range(len(prog.groups))] == ["a+b-c", "d", "e"]
    assert list(prog.unary) == [0]  # x_cf.a >= x.a only reads the group {a, b-c}
    # e -> d -> {a, b-c}: the cascade fixes d before it reads d for the group of a
    assert [prog.rules[i].text.split("THEN")[1].strip() for i in prog.cascade] == ["x_cf.d <= x.d - 1",
                                                                                  "x_cf.a >= 2 * x.a + 1"]
    g = prog.ground(np.array([2.0, 0.0, 5.0, 1.0]))
    X = np.array([[2, 0, 5, 1], [1, 0, 5, 1], [2, 0, 5, 2], [5, 0, 4, 2], [4, 0, 6, 1]], float)
    assert g.violations(X).tolist() == [0, 1, 1, 0, 1]  # a dropped; e up, d not down; d > 5 needs a >= 5


def test_default_programs_compile_with_labels_and_schema_rules(worlds):
    import pandas as pd

    from data_gen.loaders import CREDIT_FEATURES
    from data_gen.tabular_encoder import TabularEncoder
    credit = pd.DataFrame([[0, 1, 1, 2, 100.0, 50.0, 1, 2, 3, 10.0, 5.0, 0, 0, 0],
                           [1, 0, 2, 4, 900.0, 10.0, 0, 0, 0, 20.0, 0.0, 2, 6, 1]],
                          columns=[f.name for f in CREDIT_FEATURES])
    schema = TabularEncoder.fit(CREDIT_FEATURES, credit).schema
    prog = CREDIT.compile(schema)
    assert len(prog.cascade) == 2
    x = np.array([0, 1, 0, 0, 100, 50, 1, 2, 3, 10, 5, 0, 0, 0], float)  # AgeGroup '<25', lowest education
    g = prog.ground(x)
    bad = x.copy()
    bad[3] = 2  # education up by 2 while under 25: AgeGroup must become '25-39' (code 1)
    fixed = bad.copy()
    fixed[2] = 1
    assert g.violations(np.array([x, bad, fixed])).tolist() == [0, 1, 0]
    assert "x_cf.AgeGroup" in str(CREDIT) and "education-num" in str(ADULT)


@pytest.mark.parametrize(("text", "problem"), [
    ("PLAF x_cf.nope >= x.nope", "unknown feature"),
    ("PLAF x_cf.age >= ", "unexpected end"),
    ("PLAF IF x_cf.age > x.age x_cf.edu >= x.edu", "expected THEN"),
    ("PLAF x_cf.edu = 'phd'", "not a category"),
    ("PLAF x_cf.job < x.job", "categorical"),
    ("PLAF x_cf.age + x_cf.edu >= 1", "must end in 'THEN x_cf.F op e'"),
    ("PLAF IF x_cf.income > x.income THEN x_cf.income >= x_cf.age", "reads the group"),
    ("GROUP age", "at least two"),
    ("PLAF x_cf.age >= x.age $", "unexpected character"),
])
def test_plaf_errors_name_the_problem(text, problem):
    with pytest.raises(PlafError, match=problem):
        Plaf.parse(text).compile(SCHEMA)


def test_plaf_cycle_is_an_error():
    prog = Plaf.parse("PLAF IF x_cf.age > x.age THEN x_cf.income > x.income\n"
                      "PLAF IF x_cf.income > x.income THEN x_cf.age > x.age")
    with pytest.raises(PlafError, match="cyclic"):
        prog.compile(SCHEMA)


# ---------------------------------------------------------------------------------- optimality

@pytest.mark.parametrize("kind", MODELS)
def test_finds_the_brute_force_optimum(worlds, kind):
    world = worlds[kind]
    geco = GeCo(plaf=Plaf(), refine=False).fit(world, toy_data())
    agents = rejected(world)[::23][:8]
    assert len(agents) >= 4
    for x in agents:
        best, _ = brute_force(world, x)
        got = geco.solve(world, x)
        assert got[0].found and got[0].valid
        assert got[0].cost == pytest.approx(best, abs=1e-12)
        assert got[0].extra["model_calls"] >= 2


def test_finds_the_optimum_under_an_implication_and_other_norms(worlds):
    world = worlds["forest"]
    for weights, norm in (((0.0, 1.0, 0.0), None), ((1.0, 0.0, 0.0), (1 / 5, 0.0, 0.0)),
                          ((0.0, 0.0, 1.0), (0.0, 0.0, 1.0))):
        geco = GeCo(plaf=RULES, alpha=weights[0], beta=weights[1], gamma=weights[2]).fit(world, toy_data())
        for x in rejected(world)[::31][:5]:
            best, _ = brute_force(world, x, RULES, weights=norm)
            assert geco.solve(world, x)[0].cost == pytest.approx(best, abs=1e-12)


def test_representations_and_partial_evaluation_agree(worlds):
    for kind in MODELS:
        world = worlds[kind]
        x = rejected(world)[7]
        answers = []
        for rep in REPRESENTATIONS:
            for pe in (True, False):
                got = GeCo(plaf=RULES, representation=rep, partial_eval=pe, seed=3).fit(world, toy_data()).solve(world, x)
                answers.append(np.array([r.final_state for r in got]))
                assert got[0].extra["partial_eval"] == pe
        for a in answers[1:]:
            np.testing.assert_array_equal(a, answers[0])


@pytest.mark.parametrize("kind", MODELS)
def test_partial_evaluation_gives_the_models_probabilities(worlds, kind):
    world = worlds[kind]
    geco = GeCo(plaf=Plaf()).fit(world, toy_data())
    for rep in REPRESENTATIONS:
        geco.representation = rep
        agent = geco.space_.ground(rejected(world)[3], (0.0, 1.0, 0.0))
        run = _Run(geco, agent, BlackBox(None), None)
        start = run.pop_class.start(agent)
        pop = run.pop_class.concat(run.mutate(start, 20, 0))
        pop = run.pop_class.concat(run.mutate(pop, 5, 1) + run.crossover(pop, 1))
        exact = world.model.predict_proba(pop.rows())
        np.testing.assert_allclose(geco.code_.specialize(agent).proba(pop), exact, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------- constraints

@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(age=st.integers(0, 4), edu=st.integers(0, 3), sex=st.integers(0, 1), income=st.integers(0, 5),
       job=st.integers(0, 2), kind=st.sampled_from(MODELS), rep=st.sampled_from(sorted(REPRESENTATIONS)),
       seed=st.integers(0, 3))
def test_constraints_never_violated(worlds, age, edu, sex, income, job, kind, rep, seed):
    world = worlds[kind]
    x = np.array([age, edu, sex, income, *np.eye(3)[job]], float)
    geco = GeCo(plaf=RULES, representation=rep, seed=seed, n_diverse=3).fit(world, toy_data())
    grounded = RULES.compile(SCHEMA).ground(x)
    for r in geco.solve(world, x):
        if not r.found:
            assert r.status == "no_recourse"  # the toy D is the whole space: GeCo can prove it
            assert brute_force(world, x, RULES)[0] == float("inf")
            continue
        cf = r.final_state
        SCHEMA.validate(cf)  # range, integers
        assert cf[4:].sum() == 1  # one job
        assert cf[2] == x[2] and cf[0] >= x[0] and cf[1] >= x[1]  # immutable sex, monotone age and edu
        if cf[1] > x[1]:
            assert cf[0] >= x[0] + 2  # the implication
        assert grounded.violations(cf[None])[0] == 0
        assert r.valid and world.model.predict_proba(cf[None])[0] > 0.5


def test_cascade_repairs_instead_of_rejecting(worlds):
    world = worlds["lr"]
    geco = GeCo(plaf=RULES).fit(world, toy_data())
    x = np.array([0, 0, 1, 0, 0, 0, 1], float)  # education is the cheap lever; the rule forces age
    got = geco.solve(world, x)
    edu_up = [r for r in got if r.final_state[1] > 0]
    assert edu_up and all(r.final_state[0] >= 2 for r in edu_up)


# ------------------------------------------------------------------------------ answers, errors

def test_already_positive_and_no_recourse(worlds):
    world = worlds["tree"]
    X = toy_data()
    pos = X[world.model.predict_proba(X) > 0.5][0]
    got = GeCo().fit(world, X).solve(world, pos)
    assert got[0].valid and got[0].cost == 0.0 and got[0].extra["reason"] == "already_positive"
    frozen = FeatureSchema(tuple(Feature(f.name, f.kind, f.lower, f.upper, "immutable", f.categories, f.group,
                                         f.integer) for f in SCHEMA.features))
    stuck = TabularWorld("toy/frozen", frozen, world.model)
    x = rejected(world)[0]
    got = GeCo().fit(stuck, X).solve(stuck, x)
    assert got[0].status == "no_recourse" and not got[0].found


def test_returns_k_distinct_counterfactuals_best_first(worlds):
    world = worlds["forest"]
    got = GeCo(n_diverse=4).fit(world, toy_data()).solve(world, rejected(world)[5])
    assert 1 <= len(got) <= 4
    costs = [r.cost for r in got]
    assert costs == sorted(costs)
    assert len({tuple(r.final_state) for r in got}) == len(got)


def test_bad_input_gets_a_clear_error(worlds):
    world = worlds["tree"]
    X = toy_data()
    with pytest.raises(ValueError, match="not fitted"):
        GeCo().solve(world, X[0])
    geco = GeCo().fit(world, X)
    with pytest.raises(ValueError, match="fitted on 'toy/tree'"):
        geco.solve(worlds["lr"], X[0])
    with pytest.raises(ValueError, match="expected 7 features"):
        geco.solve(world, X[0][:5])
    bad = X[0].copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="'income' is nan"):
        geco.solve(world, bad)
    bad = X[0].copy()
    bad[0] = 9
    with pytest.raises(ValueError, match="'age' = 9.0 is outside"):
        geco.solve(world, bad)
    bad = X[0].copy()
    bad[4:] = 1
    with pytest.raises(ValueError, match="one-hot group 'job'"):
        geco.solve(world, bad)
    with pytest.raises(ValueError, match="one agent"):
        geco.solve(world, X[:2])
    for params, msg in (({"n_diverse": 0}, "n_diverse"), ({"n_diverse": 200}, "must not exceed"),
                        ({"alpha": 0.5}, "sum to 1"), ({"representation": "dense"}, "representation"),
                        ({"threshold": 1.0}, "threshold"), ({"mutate_top": 0}, "mutate_top")):
        with pytest.raises(ValueError, match=msg):
            GeCo(**params).fit(world, X)
    with pytest.raises(ValueError, match="data: expected 7 features"):
        GeCo().fit(world, X[:, :4])
    with pytest.raises(ValueError, match="needs at least one row"):
        GeCo().fit(world, X[:0])


class _Conjunction:
    """Accepts iff x0 >= 0.31 and x1 >= 0.47 (a threshold pair between the data's values)."""

    kind = "threshold"
    n_features = 3

    def predict_proba(self, X):
        X = np.atleast_2d(X)
        return np.where((X[:, 0] >= 0.31) & (X[:, 1] >= 0.47), 0.9, 0.1)

    def predict(self, X):
        return self.predict_proba(X) > 0.5


def test_refinement_reaches_thresholds_between_data_values():
    """The data's values are a coarse grid (0, 0.25, ...); refinement finds the thresholds themselves."""
    schema = FeatureSchema(tuple(Feature(f"f{j}", "numeric", 0.0, 1.0) for j in range(3)))
    world = TabularWorld("reals/and", schema, _Conjunction())
    D = np.array([[a, b, c] for a in np.arange(0, 1.01, 0.25) for b in np.arange(0, 1.01, 0.25) for c in (0.0, 1.0)])
    x = np.array([0.0, 0.0, 0.5])
    got = GeCo(plaf=Plaf()).fit(world, D).solve(world, x)
    assert got[0].valid and got[0].final_state[2] == 0.5  # f2 does not matter: never changed
    assert got[0].final_state[:2] == pytest.approx([0.31, 0.47], abs=1e-5)
    paper = GeCo(plaf=Plaf(), refine=False).fit(world, D).solve(world, x)
    assert paper[0].final_state[:2] == pytest.approx([0.5, 0.5])  # the paper's search: data values only
