"""benchmarks/misses.py: its kinds of miss, the set namer's ranks, its page and its argument checks (the
measurement itself is a benchmark)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks.misses import KINDS, main, miss_kinds, namer_ranks, paired_lead, report
from evaluation.tabular_experiment import optimal_answers, score_answers
from learners.tabular import WorldGeometry


def _staircase3():
    """One tree: accept iff float32(x0) > 2.9 and float32(x1) > 3.9; x2 is read by no split (all in [0, 10])."""
    from envs.models import Tree, TreeEnsemble
    from envs.schema import Feature, FeatureSchema
    from envs.tabular import TabularWorld

    schema = FeatureSchema(tuple(Feature(f"x{i}", "numeric", 0.0, 10.0) for i in range(3)))
    tree = Tree(np.array([1, -1, 3, -1, -1]), np.array([2, -1, 4, -1, -1]), np.array([0, 0, 1, 0, 0]),
                np.array([2.9, 0, 3.9, 0, 0]), np.array([0.0, 0, 0, 0, 1]), np.array([1.0, 1, 1, 1, 0]))
    return TabularWorld("toy/staircase3", schema, TreeEnsemble([tree], 3))


def test_each_miss_is_no_answer_another_set_or_the_same_set_against_a_brute_force_of_the_toy_world():
    """MACE's optimum of the agent at the origin is (3, 4, 0); five answers: optimal, within 1%, the same set
    farther, another set (x2 moved too), none; an agent MACE did not solve is no miss whatever it gets."""
    world = _staircase3()
    geo = WorldGeometry.of(world, "one")
    grid = np.stack(np.meshgrid(np.arange(11.0), np.arange(11.0), [0.0], indexing="ij"), -1).reshape(-1, 3)
    acc = grid[world.accepts(grid)]
    nearest = acc[np.argmin(geo.distance(np.zeros((len(acc), 3)), acc))]
    np.testing.assert_array_equal(nearest, [3.0, 4.0, 0.0])  # the brute force agrees with the tree's splits
    X = np.zeros((6, 3))
    mace_cf = np.tile(nearest, (6, 1))
    mace_d = geo.distance(X, mace_cf)
    mace_ok = np.array([True] * 5 + [False])
    CF = np.array([[3.0, 4.0, 0.0], [3.0, 4.02, 0.0], [3.0, 6.0, 0.0], [3.0, 4.0, 1.0], [np.nan] * 3, [np.nan] * 3])
    found = ~np.isnan(CF).any(1)
    good = optimal_answers(world, X, CF, found, mace_d, mace_ok)
    np.testing.assert_array_equal(good, [True, True, False, False, False, False])
    assert score_answers(world, X, CF, found, mace_d, mace_ok)["optimal_share"] == good.sum() / mace_ok.sum()
    kinds = miss_kinds(geo, X, CF, found, mace_cf, mace_ok, good)
    assert list(kinds) == ["", "", KINDS[2], KINDS[1], KINDS[0], ""]
    # a refused row is never optimal, however near
    assert not optimal_answers(world, X[:1], np.array([[2.0, 4.0, 0.0]]), np.array([True]), mace_d[:1] * 10, mace_ok[:1])[0]


def test_the_namer_rank_is_one_based_and_says_unnamed_for_a_set_no_label_changes():
    namer = SimpleNamespace(keys_=np.array([[True, False], [False, True]]),
                            scores=lambda Xs: np.column_stack([Xs[:, 0], -Xs[:, 0]]))
    gen = SimpleNamespace(set_namer_=namer, _scaled=lambda X: X)
    X = np.array([[1.0], [-1.0], [0.5]])
    sets = np.array([[True, False], [True, False], [True, True]])
    assert namer_ranks(gen, X, sets) == ["1", "2", "unnamed"]
    assert namer_ranks(SimpleNamespace(), X, sets) == ["-", "-", "-"]


def test_the_page_counts_per_fit_and_set_and_lists_every_miss():
    out = {"cell": "adult/forest", "generator": "g", "baseline": "search_no_net", "budget": "2x256",
           "counts": [{"seed": 0, "set": "held-out", "agents": 100, "generator": 0.96, "baseline": 0.9,
                       "only_generator": 7, "only_baseline": 1, "lead": (6.0, 0.5, 11.5),
                       KINDS[0]: 1, KINDS[1]: 2, KINDS[2]: 1}],
           "leads": {"held-out": {"agents": 100, "fits": 4, "lead": (6.75, 1.0, 12.5)}},
           "agents": [{"seed": 0, "set": "held-out", "agent": 84, "kind": KINDS[0], "ratio": np.inf,
                       "mace": "capital-gain, capital-loss", "answer": "-", "rank": "11", "baseline": False},
                      {"seed": 0, "set": "held-out", "agent": 57, "kind": KINDS[1], "ratio": 1.138,
                       "mace": "age, capital-gain", "answer": "capital-gain", "rank": "8", "baseline": True}]}
    text = report(out, "python benchmarks/misses.py")
    assert "| 0 | held-out (100) | 0.9600 | 0.9000 | +6.00 (+0.50 to +11.50) | 7 | 1 | 1 | 2 | 1 |" in text
    assert "| held-out (100) | 4 | +6.75 (+1.00 to +12.50) |" in text
    assert "| 0 | held-out | 84 | no answer | - | capital-gain, capital-loss | - | 11 | no |" in text
    assert "| 0 | held-out | 57 | another set | 1.138 | age, capital-gain | capital-gain | 8 | yes |" in text
    assert "Written by `python benchmarks/misses.py`" in text


def test_the_paired_lead_is_the_mean_difference_with_a_normal_interval_that_covers_it_at_95_percent():
    """Against its formula on a small case, and by simulation: agents whose generator and baseline each answer
    with fixed probabilities; the interval covers the true lead in about 95% of 2,000 samples of 400 agents."""
    d = np.array([1.0, 0.0, 0.0, -1.0, 1.0, 1.0, 0.0, 0.0])
    mean, lo, hi = paired_lead(d)
    half = 1.959964 * d.std(ddof=1) / np.sqrt(len(d))
    assert mean == pytest.approx(25.0) and lo == pytest.approx(100 * (0.25 - half)) and hi == pytest.approx(100 * (0.25 + half))
    rng = np.random.default_rng(0)
    p_gen, p_base = 0.97, 0.88  # outcomes correlated: the baseline's agents mostly the generator's too
    covered = 0
    for _ in range(2000):
        u = rng.random(400)
        gen, base = u < p_gen, u < p_base
        flip = rng.random(400) < 0.02
        base = np.where(flip, ~base, base)
        true = 100 * (p_gen - (p_base * 0.98 + (1 - p_base) * 0.02))
        _, lo, hi = paired_lead(gen.astype(float) - base.astype(float))
        covered += lo <= true <= hi
    assert 0.93 <= covered / 2000 <= 0.97


@pytest.mark.parametrize("argv, message", [(["--budget", "2x"], "--budget: expected RxN"),
                                           (["--seeds", "0,a"], "--seeds: expected comma-separated")])
def test_bad_arguments_name_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit):
        main(argv + ["--out", "/nonexistent/never-written"])
    assert message in capsys.readouterr().err
