"""The proposer's setting chosen from the model's answers (learners/tabular/setting.py, ``setting="auto"``; issue
56): the rule itself, and fits that take it on a model in steps (German forest) with few and with many
unlabelled rows and on a smooth one (a small MLP); what was chosen survives save and load."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from envs.black_box import BlackBoxModel
from learners.tabular import TabularGenerator, TabularLabels, build_tabular_generator
from learners.tabular.setting import (
    AUTO_FIELDS,
    FEW_ROWS_POOL,
    MANY_UNLABELLED,
    SELF_LABELS,
    STUDENT_AGENTS,
    choose_setting,
)
from tests.tabular_worlds import german_mace_labels, german_rejected, train_labels
from tests.test_surrogate import tiny_mlp  # noqa: F401 (a fixture)

SMALL = {"max_epochs": 5, "student_corners": 20}  # a student of 60 drawn agents, so that a fit takes seconds


def test_the_rule():
    chosen, why = choose_setting(steps=False, unlabelled=5000)
    assert chosen["surrogate"] and chosen["student_agents"] == 0 and chosen["self_labels"] == 0 and "smooth" in why
    assert chosen["surrogate_members"] == 3 and choose_setting(steps=False, unlabelled=0, surrogate_members=5)[0][
        "surrogate_members"] == 5  # three averaged at least: one surrogate is a draw
    chosen, why = choose_setting(steps=True, unlabelled=5000)
    assert not chosen["surrogate"] and chosen["student_use"] == "both" and chosen["student_threshold"] == 0.2
    assert (chosen["student_agents"], chosen["self_labels"]) == (STUDENT_AGENTS, SELF_LABELS) and "steps" in why
    chosen, _ = choose_setting(steps=True, unlabelled=MANY_UNLABELLED, self_labels=5000)
    assert chosen["self_labels"] == MANY_UNLABELLED  # never more than there are
    chosen, why = choose_setting(steps=True, unlabelled=MANY_UNLABELLED - 1, student_agents=60)
    assert (chosen["student_use"], chosen["student_pool"], chosen["self_labels"]) == ("round_two", FEW_ROWS_POOL, 0)
    assert chosen["student_agents"] == 60 and "round two" in why
    assert all(set(choose_setting(steps=s, unlabelled=n)[0]) == set(AUTO_FIELDS) for s in (True, False) for n in (0, 5000))
    with pytest.raises(ValueError, match="unlabelled"):
        choose_setting(steps=True, unlabelled=-1)
    with pytest.raises(ValueError, match="setting: expected one of manual, auto"):
        build_tabular_generator("proposer", {"setting": "best"})
    with pytest.raises(ValueError, match="setting: 'auto' adds learned parts, and proposals 'averages' is a baseline"):
        build_tabular_generator("proposer", {"setting": "auto", "proposals": "averages"})


@pytest.fixture(scope="module")
def german():
    world, _ = german_rejected()
    labels, train, test = german_mace_labels()
    return replace(world, model=BlackBoxModel(world.model)), train_labels(labels, train), labels.X[test]


def test_a_forest_with_few_rows_takes_the_student_in_round_two(german, tmp_path):
    world, labels, X = german
    gen = build_tabular_generator("proposer", {**SMALL, "setting": "auto", "student_agents": 60}).fit(world, labels)
    assert gen._in_steps() and gen.student_ is not None and gen.surrogate_ is None
    assert (gen.params.student_use, gen.params.student_pool, gen.params.self_labels) == ("round_two", FEW_ROWS_POOL, 0)
    assert gen.params.student_agents == 60 and "steps" in gen.fit_info_["setting"]["why"]
    rec = gen.recommend(world, X)
    assert rec.found.mean() >= 0.8 and world.accepts(rec.CF[rec.found]).all()
    gen.save(tmp_path / "m")
    back = TabularGenerator.load(tmp_path / "m")
    assert back.params == gen.params and back.student_ is not None
    assert np.array_equal(np.nan_to_num(back.recommend(world, X).CF, nan=-7), np.nan_to_num(rec.CF, nan=-7))


def test_a_forest_with_many_unlabelled_rows_takes_both_rounds_and_self_labels(german):
    world, labels, X = german
    many = np.repeat(X, -(-MANY_UNLABELLED // len(X)), axis=0)[:MANY_UNLABELLED]  # rejected rows MACE did not label
    more = TabularLabels(labels.X, labels.CF, labels.distance, unlabelled=many)
    gen = build_tabular_generator("proposer", {**SMALL, "setting": "auto", "student_agents": 60, "self_labels": 8,
                                               "self_label_calls": 2, "self_label_rows": 128, "self_label_workers": 1}
                                  ).fit(world, more)
    assert (gen.params.student_use, gen.params.self_labels) == ("both", 8) and gen.student_ is not None
    assert gen.fit_info_["self_labels"]["agents"] == 8


def test_a_smooth_model_takes_the_surrogate(tiny_mlp):  # noqa: F811 (the fixture)
    world, labels, agents, _ = tiny_mlp
    gen = build_tabular_generator("proposer", {"max_epochs": 5, "setting": "auto", "surrogate_queries": 50,
                                               "surrogate_epochs": 5, "surrogate_max_sigma": 10.0}
                                  ).fit(replace(world, model=BlackBoxModel(world.model)), labels)
    assert not gen._in_steps() and gen.params.surrogate and gen.params.surrogate_members == 3 and gen.student_ is None
    assert gen.fit_info_["surrogate"]["used"] and "smooth" in gen.fit_info_["setting"]["why"]
    manual = build_tabular_generator("proposer", {"max_epochs": 5}).fit(world, labels)
    assert manual.params.setting == "manual" and "setting" not in manual.fit_info_ and manual.surrogate_ is None


def test_train_py_hands_the_unlabelled_rows_and_keeps_the_students_answers(tmp_path):
    import json

    import yaml

    from evaluation.tabular_experiment import load_tabular_config, train_tabular

    cfg = {"name": "auto", "output_dir": str(tmp_path), "tabular": {
        "dataset": "german", "model": "tree", "agents": 40, "mace": {"time_limit": 10}, "compute": {"n_workers": 1}},
        "generators": [{"method": "proposer", "params": {**SMALL, "setting": "auto", "student_agents": 30}}]}
    path = tmp_path / "auto.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run_dir = train_tabular(load_tabular_config(path), progress=False)
    meta = json.loads((run_dir / "models" / "proposer" / "config.json").read_text())
    chosen = meta["params"]
    assert chosen["setting"] == "auto" and chosen["student_use"] == "round_two" and chosen["student_agents"] == 30
    why = meta["meta"]["fit_info"]["setting"]["why"]
    assert "steps" in why and int(why.split(" with ")[1].split()[0]) > 0  # the rejected rows MACE did not label
    assert any((run_dir / "student" / "proposer").iterdir())  # the model's answers kept for a rerun
