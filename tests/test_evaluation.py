"""Evaluation that compares like with like: unseen-x accuracy, group-blind ceilings, group-aware
generators (one-hot group input, one model per group) and speed ratios, against brute force."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_gen.config import DatasetConfig
from data_gen.dataset import build_dataset
from evaluation.config import parse_config
from evaluation.experiment import evaluate_run, train_experiment
from evaluation.metrics import (
    bayes_group_blind_ceiling,
    canonical,
    empirical_group_blind_ceiling,
    row_ids,
    unseen_mask,
)
from evaluation.report import ratio
from learners.base import FitContext, Generator
from learners.grouped import group_aware, group_one_hot
from tests.brute import brute_force_covers
from tests.worlds import random_world

binary_rows = st.integers(1, 40).flatmap(lambda b: st.lists(
    st.lists(st.integers(0, 1), min_size=5, max_size=5), min_size=b, max_size=b))


@settings(max_examples=40, deadline=None)
@given(train=binary_rows, test=binary_rows)
def test_unseen_mask_matches_a_loop(train, test):
    train, test = np.array(train, np.uint8), np.array(test, np.uint8)
    seen = {tuple(r) for r in train.tolist()}
    assert unseen_mask(train, test).tolist() == [tuple(r) not in seen for r in test.tolist()]


def test_row_ids_agree_across_arrays_and_dtypes():
    a = np.array([[0, 1, 1], [1, 0, 0], [0, 1, 1]], np.uint8)
    sets = np.array([[3, -1, -1], [0, 1, -1], [3, -1, -1]])
    ia, ib = row_ids(a, a[::-1].astype(np.int64))
    assert ia.tolist()[0] == ia.tolist()[2] != ia.tolist()[1] and ib.tolist() == ia[::-1].tolist()
    (ids,) = row_ids(sets)
    assert ids[0] == ids[2] != ids[1]
    with pytest.raises(ValueError, match="width"):
        row_ids(a, a[:, :2])


def brute_empirical_ceiling(X, sets, groups):
    """For each distinct x the most frequent CFE among its agents (ties: each mode equally likely)."""
    by_x = defaultdict(Counter)
    rows = [(tuple(x), tuple(s)) for x, s in zip(X.tolist(), canonical(sets).tolist(), strict=True)]
    for x, s in rows:
        by_x[x][s] += 1
    p = []
    for x, s in rows:
        top = max(by_x[x].values())
        modes = [c for c, k in by_x[x].items() if k == top]
        p.append((s in modes) / len(modes))
    p = np.array(p)
    return p.mean(), {str(g): p[groups == g].mean() for g in np.unique(groups)}


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_empirical_ceiling_matches_brute_force(data):
    n = data.draw(st.integers(1, 60))
    X = np.array(data.draw(st.lists(st.lists(st.integers(0, 1), min_size=2, max_size=2), min_size=n, max_size=n)))
    cls = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    sets = np.array([[-1, -1], [0, -1], [0, 2], [1, 2]])[cls]
    groups = np.array(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    got = empirical_group_blind_ceiling(X, sets, groups)
    want, want_by = brute_empirical_ceiling(X, sets, groups)
    assert got["value"] == pytest.approx(want)
    assert got["by_group"] == pytest.approx(want_by)
    # an upper bound of every function of x: e.g. the predictor "first CFE seen for this x"
    first = {}
    for x, c in zip(map(tuple, X.tolist()), cls.tolist(), strict=True):
        first.setdefault(x, c)
    assert np.mean([first[tuple(x)] == c for x, c in zip(X.tolist(), cls.tolist(), strict=True)]) <= want + 1e-12


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bayes_ceiling_matches_brute_force(seed):
    world = random_world(seed, n=5, A=7, groups=3)
    rng = np.random.default_rng(seed)
    X = (rng.random((60, 5)) < 0.4).astype(np.uint8)
    groups = rng.integers(0, 3, 60)
    max_len = 2

    def kept_cfe(x, g):
        cost, covers = brute_force_covers(world, x, g)
        ok = 0 < cost < np.inf and len(covers) == 1 and len(covers[0]) <= max_len
        return covers[0] if ok else None

    own = [kept_cfe(x, g) for x, g in zip(X, groups, strict=True)]
    keep = np.array([c is not None for c in own])  # as in a dataset: agents kept in their own group
    X, groups = X[keep], groups[keep]
    sets = np.array([list(c) + [-1] * (max_len - len(c)) for c in np.array(own, dtype=object)[keep]])
    p = []
    for x, g in zip(X, groups, strict=True):
        answers = Counter(c for c in (kept_cfe(x, h) for h in range(3)) if c is not None)
        top = max(answers.values())
        modes = [c for c, k in answers.items() if k == top]
        p.append((kept_cfe(x, g) in modes) / len(modes))
    got = bayes_group_blind_ceiling(world, X, groups, sets, max_len, require_unique=True)
    assert got["value"] == pytest.approx(np.mean(p))
    assert got["by_group"] == pytest.approx({str(g): np.mean(np.array(p)[groups == g]) for g in np.unique(groups)})


def test_ratio_prints_real_ratios():
    assert [ratio(r) for r in (0.2381, 1.0, 4.66, 47.2, 31550.8, None, float("nan"))] == \
        ["0.24×", "1×", "4.7×", "47×", "31,551×", "-", "-"]


@pytest.fixture(scope="module")
def grouped_ds(tmp_path_factory):
    return build_dataset(DatasetConfig(n_features=8, n_actions=12, n_agents=2500, groups="manual", n_groups=3,
                                       seed=2), tmp_path_factory.mktemp("data"), "grouped", progress=False)


def test_group_one_hot_shapes(grouped_ds):
    train, _ = grouped_ds.split("all")
    Z = group_one_hot(train.X, train.groups, 3)
    assert Z.shape == (len(train), 8 + 3) and Z.dtype == np.uint8
    assert (Z[:, :8] == train.X).all() and (Z[:, 8:].sum(1) == 1).all()
    assert (Z[np.arange(len(Z)), 8 + train.groups] == 1).all()
    with pytest.raises(ValueError, match="groups are required"):
        group_one_hot(train.X, None, 3)
    with pytest.raises(ValueError, match=r"in \[0, 3\)"):
        group_one_hot(train.X[:2], np.array([0, 3]), 3)


@pytest.mark.parametrize("method,params", [
    ("named_cfe", {"hidden": [16], "max_epochs": 2, "batch_size": 256}),
    ("full_action_seq", {"hidden": [16], "state_size": 16, "max_epochs": 1, "batch_size": 256}),
    ("hamming_knn", {"k": 3}),
])
def test_group_input_generators(method, params, grouped_ds, tmp_path):
    train, test = grouped_ds.split("all")
    ctx = FitContext.from_world(grouped_ds.world, 3, seed=0, progress=False)
    model = group_aware(method, params, "input").fit(train, None, ctx)
    inner = model.model_
    assert getattr(inner, "n_features_", None) in (None, 8 + 3)  # the inner model sees x and the one-hot group
    pred = model.predict(test.X, test.groups)
    assert pred.sets.shape[0] == len(test) and pred.confidence.shape == (len(test),)
    with pytest.raises(ValueError, match="groups are required"):
        model.predict(test.X)
    model.save(tmp_path / "m")
    again = Generator.load(tmp_path / "m")
    assert np.array_equal(again.predict(test.X, test.groups).sets, pred.sets)


def test_per_group_generator_answers_each_group_with_its_model(grouped_ds, tmp_path):
    train, test = grouped_ds.split("all")
    ctx = FitContext.from_world(grouped_ds.world, 3, seed=0, progress=False)
    model = group_aware("hamming_knn", {"k": 1}, "per_group").fit(train, None, ctx)
    assert [len(m.X_) for m in model.models_] == np.bincount(train.groups).tolist()
    # k = 1 on a training agent: its own group's nearest neighbour is itself (or an equal x of that group)
    pred = model.predict(train.X[:200], train.groups[:200])
    for g in range(3):
        rows = np.flatnonzero(train.groups[:200] == g)
        solo = model.models_[g].predict(train.X[rows])
        assert np.array_equal(canonical(pred.sets[rows])[:, : solo.sets.shape[1]], canonical(solo.sets))
    model.save(tmp_path / "pg")
    assert np.array_equal(Generator.load(tmp_path / "pg").predict(test.X, test.groups).sets,
                          model.predict(test.X, test.groups).sets)


def test_group_mode_config_errors():
    with pytest.raises(ValueError, match="generators.0.group_mode.*needs a dataset with groups"):
        parse_config({"name": "x", "generators": [{"method": "named_cfe", "group_mode": "input"}]})
    with pytest.raises(ValueError, match="model names must differ"):
        parse_config({"name": "x", "dataset": {"groups": "manual"},
                      "generators": [{"method": "named_cfe", "name": "a"}, {"method": "hamming_knn", "name": "a"}]})
    with pytest.raises(ValueError, match="cannot be wrapped"):
        group_aware("per_group", {"method": "named_cfe"}, "input")


def test_grouped_protocols_smoke(tmp_path):
    """The three Table 4 protocols from one config, trained and evaluated with tiny budgets."""
    mc = {"output": "factored", "hidden": [], "embed_dim": 16, "set_hidden": [16], "max_epochs": 2,
          "batch_size": 256}
    cfg = parse_config({
        "name": "groups", "data_dir": str(tmp_path / "data"), "output_dir": str(tmp_path / "runs"),
        "dataset": {"n_features": 8, "n_actions": 12, "n_agents": 2000, "groups": "probabilistic", "n_groups": 2,
                    "group_pa": [0.4, 0.7], "seed": 3},
        "generators": [{"method": "named_cfe", "name": "MCf", "params": mc},
                       {"method": "named_cfe", "params": mc, "group_mode": "input"},
                       {"method": "named_cfe", "params": mc, "group_mode": "per_group"}],
        "evaluation": {"filters": ["all"], "solver_timing_agents": 10, "verified_top_k": 0}})
    run = train_experiment(cfg, progress=False, log=lambda *a: None)
    res = evaluate_run(run, plots=False, log=lambda *a: None)
    assert set(res["models"]) == {"MCf [all]", "named_cfe_input [all]", "named_cfe_per_group [all]"}
    f = res["filters"]["all"]
    assert 0 < f["unseen_agents"] <= f["test_agents"]
    for kind in ("bayes", "empirical"):
        c = f["group_blind_ceiling"][kind]
        assert 0.0 < c["value"] <= 1.0 and set(c["by_group"]) == {"0", "1"}
    for r in res["models"].values():
        m = r["seeds"][0]
        assert m["accuracy_unseen"]["n"] == f["unseen_agents"] and set(m["accuracy_by_group"]) == {"0", "1"}
    assert res["models"]["named_cfe_input [all]"]["group_mode"] == "input"
    saved = json.loads((run / "models" / "named_cfe_per_group" / "all" / "seed0" / "config.json").read_text())
    assert saved["method"] == "per_group" and saved["params"]["method"] == "named_cfe"
    report = (run / "report.md").read_text()
    assert "group-blind ceiling, bayes [all]" in report and "Unseen x" in report and "×" in report
