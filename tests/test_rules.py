"""The rule language (envs.rules, issue 55): the shared checker against a direct reading, contradictions,
errors that name the rule, the YAML and JSON round trips, the spec's ``rules:`` section, GeCo's PLAF."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from data_gen.spec import DataSpec, load_spec
from data_gen.spec_rules import spec_rules
from envs.rules import RuleError, RuleSet, compile_rules
from envs.schema import Feature, FeatureSchema
from solvers.geco.plaf import Plaf
from tests.rules_reference import broken

SCHEMA = FeatureSchema((
    Feature("n", "numeric", 0, 20, "free", integer=True),
    Feature("r", "numeric", -5, 5, "free"),
    Feature("o", "ordinal", 0, 4, "increase", categories=tuple(f"o{i}" for i in range(5)), integer=True),
    Feature("bin", "binary", 0, 1, "free", categories=("no", "yes"), integer=True),
    Feature("imm", "binary", 0, 1, "immutable", integer=True),
    *(Feature(f"g={c}", "binary", 0, 1, "free", group="g", integer=True) for c in "abc"),
    Feature("dec", "numeric", 0, 10, "decrease", integer=True),
))
PLAF = {
    "PLAF IF x_cf.bin > x.bin THEN x_cf.n >= x.n + 2": lambda x, c: not c["bin"] > x["bin"] or c["n"] >= x["n"] + 2,
    "PLAF x_cf.r - x.r <= 0.5 * x_cf.n - 0.5 * x.n": lambda x, c: c["r"] - x["r"] <= 0.5 * c["n"] - 0.5 * x["n"],
    "PLAF IF x.g = 'a' && x_cf.o > x.o THEN x_cf.g != 'c'": lambda x, c: not (x["g"] == 0 and c["o"] > x["o"]) or c["g"] != 2,
    "PLAF IF x_cf.dec < x.dec THEN x_cf.r > x.r": lambda x, c: not c["dec"] < x["dec"] or c["r"] > x["r"],
    "PLAF x_cf.n != 7": lambda x, c: c["n"] != 7,
}


def _rows(rng: np.random.Generator, n: int) -> np.ndarray:
    g = np.zeros((n, 3))
    g[np.arange(n), rng.integers(0, 3, n)] = 1
    return np.column_stack([rng.integers(0, 21, n), rng.integers(-10, 11, n) / 2, rng.integers(0, 5, n),
                            rng.integers(0, 2, n), rng.integers(0, 2, n), g, rng.integers(0, 11, n)]).astype(float)


steps = st.lists(st.sampled_from([("n", "max_increase", 3), ("n", "max_decrease", 0), ("r", "max_increase", 1.5),
                                  ("r", "max_decrease", 2.5), ("o", "max_levels_up", 2), ("dec", "max_decrease", 4)]),
                 unique=True, max_size=4)
forbids = st.lists(st.sampled_from([("o", "o0", "o1"), ("o", "o1", "o3"), ("g", "a", "b"), ("g", "c", "a"),
                                    ("n", 5, 6), ("bin", "no", "yes")]), unique=True, max_size=4)
links = st.lists(st.tuples(st.sampled_from([("n", "dec"), ("o", "n"), ("bin", "r"), ("r", "n"), ("dec", "r")]),
                           st.sampled_from([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0]), st.sampled_from(["up", "down"])),
                 unique_by=lambda t: t[0], max_size=3)


def _rule_set(s, f, lk, p) -> RuleSet:
    feats: dict = {}
    for name, kind, v in s:
        feats.setdefault(name, {})[kind] = v
    for name, a, b in f:
        feats.setdefault(name, {}).setdefault("forbid", []).append([a, b])
    return RuleSet.from_dict({"features": feats, "plaf": p,
                              "links": [{"from": a, "to": b, "per_unit": k, "on": on} for (a, b), k, on in lk]})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(steps, forbids, links, st.lists(st.sampled_from(list(PLAF)), unique=True, max_size=3),
       st.integers(0, 2**31 - 1))
def test_checker_agrees_with_a_direct_reading(s, f, lk, p, seed):
    rules = _rule_set(s, f, lk, p)
    try:
        compiled = compile_rules(rules, SCHEMA)
    except RuleError:
        assume(False)
    rng = np.random.default_rng(seed)
    X = _rows(rng, 40)
    CF = _rows(rng, 40)
    near = X.copy()  # counterfactuals one or two moves from their agent: rule boundaries are hit often
    for i in range(len(near)):
        for c in rng.choice([0, 1, 2, 3, 8], rng.integers(1, 3), replace=False):
            near[i, c] += rng.integers(-2, 3) * (0.5 if c == 1 else 1)
    near = np.clip(near, *SCHEMA.bounds())
    for A, B in ((X, CF), (X, near), (X, X)):
        got = compiled.violations(A, B)
        for x, cf, name in zip(A, B, got, strict=True):
            want = broken(SCHEMA, rules, x, cf, PLAF)
            assert name == (want[0] if want else None), (x, cf, want)
        x0 = A[0]  # one agent broadcast over many rows
        assert list(compiled.violations(x0, B)) == [(lambda w: w[0] if w else None)(broken(SCHEMA, rules, x0, cf, PLAF))
                                                    for cf in B]


def test_geco_reads_the_exported_plaf_alike():
    """The rules as PLAF text (``plaf_statements``) mean to GeCo's grounding what they mean to the checker."""
    rules = _rule_set([("n", "max_increase", 3), ("o", "max_levels_up", 2)], [("o", "o0", "o1"), ("g", "a", "b")],
                      [(("o", "n"), 1.0, "up"), (("bin", "r"), -0.5, "up")], [list(PLAF)[0]])
    compiled = compile_rules(rules, SCHEMA)
    program = Plaf(compiled.plaf_statements()).compile(SCHEMA)
    rng = np.random.default_rng(0)
    for x in _rows(rng, 20):
        CF = _rows(rng, 200)
        np.testing.assert_array_equal(program.ground(x).violations(CF) == 0, compiled.holds(x, CF))


@pytest.mark.parametrize(("rules", "match"), [
    ({"o": {"forbid": [["o0", "o1"], ["o0", "o2"], ["o0", "o3"], ["o0", "o4"], ["o1", "o2"], ["o1", "o3"],
                       ["o1", "o4"], ["o2", "o3"], ["o2", "o4"], ["o3", "o4"]]}},
     r"rules \['o: increase-only \(schema\)', 'o: forbid o0 -> o1', .*\] together leave 'o' no move"),
    ({"links": [{"from": "o", "to": "n", "per_unit": 1}], "n": {"max_increase": 0}},
     r"rules \['o: increase-only \(schema\)', 'n: max_increase 0', 'link o -> n \(1 per unit\)'\] together leave 'o'"),
    ({"o": {"max_levels_up": 0}}, r"together leave 'o' no move"),
    ({"plaf": ["PLAF x_cf.n >= x.n + 4"], "n": {"max_increase": 2}},
     r"'n: max_increase 2' and 'PLAF x_cf.n >= x.n \+ 4' contradict|'PLAF x_cf.n >= x.n \+ 4' and 'n: max_increase 2'"),
    ({"plaf": ["PLAF x_cf.dec >= x.dec + 1"]}, r"contradict: 'dec'"),
    ({"plaf": ["PLAF x_cf.n >= x.n + 30"]}, r"more than its range"),
    ({"plaf": ["PLAF x_cf.o > x.o"], "links": [{"from": "o", "to": "dec", "per_unit": 1}]},
     r"makes every agent move 'o' up, which rule 'link o -> dec"),
    ({"g": {"forbid": [["a", "b"], ["a", "c"], ["b", "a"], ["b", "c"], ["c", "a"], ["c", "b"]]}},
     r"together leave 'g' no move"),
    ({"age": {"max_increase": 1}}, r"rule 'age: max_increase 1': unknown feature 'age'"),
    ({"links": [{"from": "n", "to": "height", "per_unit": 1}]}, r"unknown feature 'height'"),
    ({"weights": {"nn": 2}}, r"'weights: nn': unknown feature 'nn'"),
    ({"plaf": ["PLAF x_cf.height >= x.height"]}, r"unknown feature"),
    ({"n": {"max_levels_up": 1}}, r"'n' is integer; it takes max_increase"),
    ({"o": {"max_increase": 1}}, r"'o' is ordinal; it takes max_levels_up"),
    ({"r": {"forbid": [[1, 2]]}}, r"'r' is real"),
    ({"o": {"forbid": [["o1", "o9"]]}}, r"'o9' is not a level of 'o'"),
    ({"o": {"forbid": [["o1", "o1"]]}}, r"forbids staying at 'o1'"),
    ({"links": [{"from": "g", "to": "n", "per_unit": 1}]}, r"'g' is categorical"),
    ({"weights": {"g": {"up": 1, "down": 2}}}, r"categorical feature has no direction"),
    ({"n": {"max_increase": -1}}, r"must be >= 0"),
    ({"links": [{"from": "n", "to": "n", "per_unit": 1}]}, r"linked to itself"),
    ({"links": [{"from": "n", "to": "r", "per_unit": 0}]}, r"must not be 0"),
    ({"n": {"max_up": 1}}, r"unknown rule 'max_up'"),
])
def test_contradictions_and_bad_rules_name_the_rule(rules, match):
    with pytest.raises(RuleError, match=match) as err:
        compile_rules(RuleSet.from_dict(rules), SCHEMA)
    assert "\n" not in str(err.value)


def test_a_rule_that_pins_a_feature_alone_is_no_contradiction():
    compile_rules(RuleSet.from_dict({"plaf": ["PLAF x_cf.n = x.n"], "o": {"max_levels_up": 1}}), SCHEMA)
    compile_rules(RuleSet.from_dict({"imm": {"forbid": [[0, 1]]}}), SCHEMA)  # immutable anyway


COMBINED = {"plaf": [list(PLAF)[0], list(PLAF)[2]],
            "n": {"max_increase": 3, "max_decrease": 1, "forbid": [[5, 6]]},
            "o": {"max_levels_up": 2, "forbid": [["o0", "o1"]]},
            "links": [{"from": "o", "to": "n", "per_unit": 1}, {"from": "n", "to": "r", "per_unit": -0.5, "on": "down"}],
            "weights": {"n": {"up": 2.0, "down": 0.5}, "g": 0.25}}


def test_dict_and_json_round_trip():
    rules = RuleSet.from_dict(COMBINED)
    assert RuleSet.from_dict(rules.to_dict()) == rules
    assert RuleSet.from_dict(json.loads(json.dumps(rules.to_dict()))) == rules
    assert RuleSet.from_dict({"features": {"n": COMBINED["n"]}}) == RuleSet.from_dict({"n": COMBINED["n"]})
    assert RuleSet.from_dict({"link": COMBINED["links"][0]}).links == rules.links[:1]
    assert not RuleSet.from_dict(None) and not RuleSet()
    compiled = compile_rules(rules, SCHEMA)
    assert compiled.constraining and compiled.weighted
    np.testing.assert_array_equal(compiled.cost[0], [2.0, 0.5])


def _table() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 60
    return pd.DataFrame({"income": rng.integers(0, 100, n).astype(float), "age": rng.integers(20, 60, n),
                         "edu": pd.Categorical(rng.choice(["hs", "ba", "ma"], n), categories=["hs", "ba", "ma"],
                                               ordered=True),
                         "job": rng.choice(["a", "b", "c"], n), "y": rng.integers(0, 2, n)})


SPEC_RULES = {"income": {"max_increase": 40}, "edu": {"max_levels_up": 1, "forbid": [["ma", "ba"]]},
              "job": {"forbid": [["a", "c"]]}, "links": [{"from": "edu", "to": "age", "per_unit": 1}],
              "weights": {"income": {"up": 2.0, "down": 0.5}},
              "plaf": ["PLAF IF x_cf.job != x.job THEN x_cf.income >= x.income"]}


def test_spec_rules_yaml_round_trip(tmp_path):
    df = _table()
    spec = load_spec({"target": "y", "favourable": 1, "features": {"edu": {"mutability": "increase"},
                                                                    "age": {"mutability": "increase", "weight": 0.5}},
                      "rules": SPEC_RULES}, df)
    assert spec.rules == RuleSet.from_dict(SPEC_RULES)
    (tmp_path / "spec.yaml").write_text(spec.to_yaml())
    again = load_spec(tmp_path / "spec.yaml", df)
    assert again == spec and again.rules == spec.rules
    assert DataSpec.from_dict(yaml.safe_load(spec.to_yaml())) == spec
    assert DataSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    merged = spec_rules(spec)  # the feature's weight joins the rules' weights (both directions)
    assert {(w.feature, w.up, w.down) for w in merged.weights} == {("income", 2.0, 0.5), ("age", 0.5, 0.5)}


@pytest.mark.parametrize(("rules", "match"), [
    ({"salary": {"max_increase": 1}}, r"unknown feature 'salary'"),
    ({"edu": {"forbid": [["phd", "ba"]]}}, r"'phd' is not a level of 'edu'"),
    ({"edu": {"max_levels_up": 0}}, r"together leave 'edu' no move"),
    ({"rules": 1}, r"expected a mapping"),
])
def test_spec_rules_are_checked_when_the_spec_is_read(rules, match):
    spec = {"target": "y", "favourable": 1, "features": {"edu": {"mutability": "increase"}}, "rules": rules}
    with pytest.raises(ValueError, match=match):
        load_spec(spec, _table())


def test_world_carries_and_checks_its_rules():
    from envs.models import LinearModel
    from envs.tabular import TabularWorld

    model = LinearModel(np.ones(len(SCHEMA)), -1.0)
    world = TabularWorld("w", SCHEMA, model, rules=RuleSet.from_dict(COMBINED))
    assert world.compiled_rules().names[0] == "o: increase-only (schema)"
    assert TabularWorld("w", SCHEMA, model).compiled_rules() is None
    with pytest.raises(RuleError, match="unknown feature"):
        TabularWorld("w", SCHEMA, model, rules=RuleSet.from_dict({"zz": {"max_increase": 1}}))


def test_a_run_saves_and_reloads_the_worlds_rules(tmp_path):
    from data_gen.tabular_encoder import TabularEncoder
    from envs.models import LinearModel
    from envs.tabular import TabularWorld
    from evaluation.tabular_experiment import _write_world, load_world

    df = _table()
    spec = load_spec({"target": "y", "favourable": 1, "features": {"edu": {"mutability": "increase"}},
                      "rules": SPEC_RULES}, df)
    encoder = TabularEncoder.fit(spec.to_raw_columns(), df[spec.names])
    world = TabularWorld("w/lr", encoder.schema, LinearModel(np.ones(len(encoder.schema)), -1.0), encoder,
                         spec_rules(spec))
    _write_world(world, {}, tmp_path)
    again = load_world(tmp_path)
    assert again.rules == world.rules and again.compiled_rules().names == world.compiled_rules().names
    _write_world(TabularWorld("w/lr", encoder.schema, world.model, encoder), {}, tmp_path / "plain")
    assert load_world(tmp_path / "plain").rules is None
    (tmp_path / "rules.json").write_text(json.dumps({**world.rules.to_dict(), "plaf": []}))
    with pytest.raises(ValueError, match="rules.json does not match its fingerprint"):
        load_world(tmp_path)
