"""The sequential worlds (envs.sequential, envs.sequential_cscf): the spec's semantics by hand,
the batched API against one-at-a-time evaluation, JSON persistence and clear errors."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.sequential import Condition, Effort, SequentialAction, SequentialWorld, Tau
from envs.sequential_cscf import german_actions
from tests.seq_worlds import adult_agent, adult_world, german_agent, german_world, toy_agents, toy_world

# ------------------------------------------------------------------ Adult, by hand


@pytest.fixture(scope="module")
def adult():
    return adult_world()


def test_add_education_adds_two_years_per_level_and_is_discounted_by_hours(adult):
    r = adult.evaluate(adult_agent(), [("AddEducation", 2)])  # HS-grad (level 9), 40 hours
    s = adult.schema.index
    assert r.final_state[s["age"]] == 35 and r.final_state[s["education-num"]] == 10  # level 11
    assert r.cost == pytest.approx(2 * 0.7)  # tau hours -> education: 0.7 up to 40 hours
    assert r.extra["text"] == "AddEducation +2 (education-num HS-grad→Assoc-voc, age 31→35)"
    for hours, g in ((19, 0.5), (20, 0.6), (29, 0.6), (30, 0.7), (40, 0.7), (41, 1.0)):
        assert adult.price(adult_agent(**{"hours-per-week": hours}), [("AddEducation", 2)]) == pytest.approx(2 * g)
    assert not adult.evaluate(adult_agent(**{"education-num": 16}), [("AddEducation", 1)]).extra["conditions_held"]


def test_capital_loss_refused_while_there_is_a_capital_gain(adult):
    refused = adult.evaluate(adult_agent(**{"capital-gain": 2000.0}), [("ChangeCapitalLoss", 1900)])
    assert not refused.extra["conditions_held"] and not refused.valid
    allowed = adult.evaluate(adult_agent(), [("ChangeCapitalLoss", 1900)])
    assert allowed.extra["conditions_held"] and allowed.cost == pytest.approx(1.9)
    assert not adult.evaluate(adult_agent(**{"capital-loss": 1500.0}),
                              [("IncreaseCapitalGain", 7000)]).extra["conditions_held"]


def test_adult_discounts_by_hand(adult):
    # capital gain: mean of tau_edu = 1 - level / 32 and tau_hours = 1 - (e^h - 1) / (e^80 - 1)
    g = (1 - 9 / 32 + 1 - (np.exp(40) - 1) / (np.exp(80) - 1)) / 2
    r = adult.evaluate(adult_agent(), [("IncreaseCapitalGain", 7000)])
    assert r.cost == pytest.approx(0.7 * g) and r.valid  # 7 + code 8 > 14.5
    assert adult.price(adult_agent(**{"hours-per-week": 80}), [("IncreaseCapitalGain", 7000)]) == pytest.approx(
        0.7 * (1 - 9 / 32) / 2)
    assert adult.price(adult_agent(), [("Enlist", None)]) == pytest.approx(5 * (1 - 9 / 32))  # tau_edu -> occupation
    assert adult.price(adult_agent(), [("WaitYears", 5)]) == pytest.approx(5)  # age has no incoming edge
    assert adult.price(adult_agent(), [("ChangeWorkingHours", 48)]) == pytest.approx(0.8)
    # order matters: education first makes the capital gain cheaper (CSCF's point)
    edu_first = adult.price(adult_agent(), [("AddEducation", 2), ("IncreaseCapitalGain", 7000)])
    gain_first = adult.price(adult_agent(), [("IncreaseCapitalGain", 7000), ("AddEducation", 2)])
    assert edu_first == pytest.approx(1.4 + 0.7 * (1 - 11 / 32 + 1 - (np.exp(40) - 1) / (np.exp(80) - 1)) / 2)
    assert gain_first == pytest.approx(0.7 * g + 1.4) and edu_first < gain_first
    scf = adult_world(discounts=False)
    assert scf.price(adult_agent(), [("IncreaseCapitalGain", 7000), ("AddEducation", 2)]) == pytest.approx(2.7)
    assert not scf.order_matters and adult.order_matters


def test_enlist_assigns_the_category_once(adult):
    r = adult.evaluate(adult_agent(), [("Enlist", None)])
    s = adult.schema.index
    assert r.final_state[s["occupation=Armed-Forces"]] == 1 and r.final_state[s["occupation=Sales"]] == 0
    assert r.extra["text"] == "Enlist (occupation Sales→Armed-Forces)"
    assert not adult.evaluate(adult_agent(), [("Enlist", None), ("Enlist", None)]).extra["conditions_held"]


def test_recourse_carries_steps_costs_states_and_text(adult):
    r = adult.evaluate(adult_agent(), [("AddEducation", 2), ("ChangeWorkingHours", 48)])
    assert r.steps == (("AddEducation", 2), ("ChangeWorkingHours", 48)) and r.action_ids == (0, 1)
    assert r.extra["step_costs"] == pytest.approx([1.4, 0.8]) and len(r.extra["states"]) == 3
    assert r.extra["text"].endswith(", then ChangeWorkingHours 40→48")
    json.dumps(r.to_dict())  # JSON-friendly


def test_gower_and_tweak_counts(adult):
    x = adult_agent()
    lo, hi = adult.schema.bounds()
    age = adult.schema.index["age"]
    r = adult.evaluate(x, [("Enlist", None), ("WaitYears", 5)])
    assert r.extra["gower"] == pytest.approx((1 + 5 / (hi[age] - lo[age])) / len(adult.raw_names))
    counts = adult.tweak_counts(np.array([[0, 5, -1], [1, -1, -1]]))  # AddEducation + WaitYears; hours
    raw = adult.raw_names
    assert counts[0, raw.index("age")] == 2 and counts[0, raw.index("education-num")] == 1
    assert counts[1].sum() == 1 and counts[1, raw.index("hours-per-week")] == 1


# ------------------------------------------------------------------ German, by hand


def test_german_loan_actions():
    world = german_world()
    s = world.schema.index
    x = german_agent()
    r = world.evaluate(x, [("AdjustLoanPeriod", 1000)])
    assert r.final_state[s["duration"]] == pytest.approx(6) and r.cost == pytest.approx(0.75 ** 2) and r.valid
    r = world.evaluate(x, [("ChangeCreditAmount", 3000), ("ChangeLoanPeriod", 12)])
    assert r.extra["step_costs"] == pytest.approx([0.0625, 0.25]) and r.final_state[s["duration"]] == 12
    assert not world.evaluate(german_agent(credit_amount=900), [("AdjustLoanPeriod", 500)]).extra["conditions_held"]


def test_german_assign_actions():
    world = german_world()
    s = world.schema.index
    assert not world.evaluate(german_agent(), [("GetUnskilledJob", None)]).extra["conditions_held"]  # skilled
    r = world.evaluate(german_agent(job="unemployed / unskilled non-resident"), [("GetUnskilledJob", None)])
    assert r.extra["conditions_held"] and r.final_state[s["job"]] == 1 and r.cost == 5
    r = world.evaluate(german_agent(), [("Naturalize", None), ("GetGuarantor", None)])
    assert r.final_state[s["foreign_worker"]] == 0 and r.final_state[s["other_debtors=guarantor"]] == 1
    assert r.final_state[s["other_debtors=none"]] == 0 and r.cost == 10
    assert not world.evaluate(german_agent(foreign_worker="no"), [("Naturalize", None)]).extra["conditions_held"]


# ------------------------------------------------------------------ errors


def test_bad_input_gets_clear_errors(adult):
    x = adult_agent()
    with pytest.raises(ValueError, match="unknown action 'Fly'"):
        adult.evaluate(x, [("Fly", 1)])
    with pytest.raises(ValueError, match=r"'AddEducation': value 20 is outside its domain \[1, 15\]"):
        adult.evaluate(x, [("AddEducation", 20)])
    with pytest.raises(ValueError, match="whole number"):
        adult.evaluate(x, [("AddEducation", 1.5)])
    with pytest.raises(ValueError, match="takes no value"):
        adult.evaluate(x, [("Enlist", 3)])
    with pytest.raises(ValueError, match="not a number"):
        adult.evaluate(x, [("ChangeWorkingHours", "forty")])
    with pytest.raises(ValueError, match=r"steps\[0\]: expected \(action, value\)"):
        adult.evaluate(x, ["AddEducation"])
    with pytest.raises(ValueError, match=f"expected {adult.n_features} features"):
        adult.evaluate(x[:-1], [])
    bad = x.copy()
    bad[adult.schema.index["occupation=Armed-Forces"]] = 1
    with pytest.raises(ValueError, match="one-hot group 'occupation'"):
        adult.evaluate(bad, [])
    bad = x.copy()
    bad[0] = np.nan
    with pytest.raises(ValueError, match="'age' is nan"):
        adult.evaluate(bad, [])
    with pytest.raises(ValueError, match="one agent"):
        adult.evaluate(np.stack([x, x]), [])


def test_bad_definitions_get_clear_errors(adult):
    with pytest.raises(ValueError, match="unknown column 'nope'"):
        SequentialWorld("w", adult.schema, [SequentialAction("A", "nope", "add", Effort("abs"), (1,))], adult.model)
    with pytest.raises(ValueError, match="strictly increasing"):
        SequentialAction("A", "age", "add", Effort("abs"), (2, 1))
    with pytest.raises(ValueError, match="leaves the domain"):
        SequentialAction("A", "age", "add", Effort("abs"), (1, 200), (1, 100))
    with pytest.raises(ValueError, match="unknown op"):
        Condition("age", "=<", 3)
    with pytest.raises(ValueError, match="needs params"):
        Tau("linear", "age", {"a": 1})
    with pytest.raises(ValueError, match="duplicate names"):
        SequentialWorld("w", adult.schema, [adult.actions[0], adult.actions[0]], adult.model)
    with pytest.raises(ValueError, match="the German actions need columns"):
        german_actions(adult.schema)


# ------------------------------------------------------------------ persistence


def test_json_round_trip_and_fingerprint(adult, tmp_path):
    adult.save(tmp_path / "w.json")
    back = SequentialWorld.load(tmp_path / "w.json", fingerprint=adult.fingerprint())
    assert back.fingerprint() == adult.fingerprint()
    steps = [("AddEducation", 2), ("IncreaseCapitalGain", 7000)]
    assert back.price(adult_agent(), steps) == adult.price(adult_agent(), steps)
    assert adult.without_discounts().fingerprint() != adult.fingerprint()
    d = json.loads((tmp_path / "w.json").read_text())
    d["actions"][0]["effort"]["scale"] = 2.0
    (tmp_path / "edited.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match="fingerprint .* does not match"):
        SequentialWorld.load(tmp_path / "edited.json")
    with pytest.raises(ValueError, match="expected deadbeef"):
        SequentialWorld.load(tmp_path / "w.json", fingerprint="deadbeef")

    class Opaque:
        def predict_proba(self, X):
            return np.zeros(len(X))

    with pytest.raises(ValueError, match="white-box"):
        adult.with_model(Opaque()).save(tmp_path / "x.json")


# ------------------------------------------------------------------ batched API


def test_apply_rows_with_different_actions_match_single_steps(adult):
    X = np.stack([adult_agent(), adult_agent(**{"hours-per-week": 20}), adult_agent(**{"capital-gain": 500.0})])
    t = adult.apply(X, np.array([0, 4, 3]), np.array([2.0, 5000.0, np.nan]))
    for i, (a, v) in enumerate([("AddEducation", 2), ("IncreaseCapitalGain", 5000), ("Enlist", None)]):
        r = adult.evaluate(X[i], [(a, v)])
        assert t.cost[i] == pytest.approx(r.cost) and np.array_equal(t.states[i], r.final_state)
    k = int(np.flatnonzero(adult.grid("IncreaseCapitalGain") == 5000)[0])
    assert np.array_equal(adult.apply_index(X, "IncreaseCapitalGain", k).states,
                          adult.apply(X, "IncreaseCapitalGain", 5000.0).states)
    with pytest.raises(ValueError, match="value_index"):
        adult.apply_index(X, "Enlist", 1)


def test_step_mask(adult):
    X = np.stack([adult_agent(), adult_agent(**{"capital-gain": 2000.0})])
    m = adult.step_mask(X)
    a = adult.action_index
    assert m.shape == (2, adult.n_actions, adult.grid_values.shape[1])
    assert m[0, a["ChangeCapitalLoss"], :49].all() and not m[1, a["ChangeCapitalLoss"]].any()
    assert m[0, a["AddEducation"], :7].all() and not m[0, a["AddEducation"], 7:].any()  # up to level 16
    assert m[0, a["Enlist"], 0] and not m[0, a["Enlist"], 1:].any()  # one slot, no padding
    assert not m[0, a["ChangeWorkingHours"], 39]  # 40 hours: setting 40 changes nothing
    used = np.zeros((2, adult.n_actions), bool)
    used[:, a["WaitYears"]] = True
    assert not adult.step_mask(X, used)[:, a["WaitYears"]].any()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_rollout_prices_like_evaluate(seed):
    """The batched rollout and one-at-a-time evaluation price every sequence identically."""
    world = toy_world(seed % 5)
    rng = np.random.default_rng(seed)
    X = toy_agents(world, 8, seed)
    S = np.full((8, 4), -1)
    V = np.full((8, 4), np.nan)
    for i in range(8):
        seq = rng.permutation(4)[: rng.integers(0, 5)]
        S[i, : len(seq)] = seq
        V[i, : len(seq)] = [rng.choice(world.actions[a].grid) if world.actions[a].valued else np.nan for a in seq]
    r = world.rollout(X, S, V)
    for i in range(8):
        steps = [(int(a), None if np.isnan(v) else v) for a, v in zip(S[i], V[i], strict=True) if a >= 0]
        one = world.evaluate(X[i], steps)
        assert one.cost == pytest.approx(r.cost[i]) and np.allclose(one.final_state, r.final[i])
        assert one.valid == bool(r.ok[i] and world.accepts(r.final[i])[0])


def test_world_pickles_for_worker_processes(adult):
    import pickle

    back = pickle.loads(pickle.dumps(adult))  # the labellers send the world to worker processes
    assert back.fingerprint() == adult.fingerprint()
    assert back.price(adult_agent(), [("IncreaseCapitalGain", 7000)]) == adult.price(adult_agent(),
                                                                                     [("IncreaseCapitalGain", 7000)])
