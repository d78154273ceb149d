"""``learners/tabular/bolder.py``: an agent a refinement round brought no nearer gets its refused rows pushed
further in the next round."""

from __future__ import annotations

import numpy as np
import pytest

import learners.tabular.budget_search as budget_search_module
from envs.black_box import BlackBoxModel, Budget
from envs.models import Tree, TreeEnsemble
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular import WorldGeometry
from learners.tabular.bolder import BOLD_FACTORS, BOLD_ROWS, bolder
from learners.tabular.budget_search import budget_search
from learners.tabular.rows import row_keys

D = 3


@pytest.fixture(scope="module")
def either() -> TabularWorld:
    """One tree on three features in [0, 100]: accepts x0 > 50, or x1 > 5.5 and x2 > 5.5 together. From the
    agent at 0, moving x0 alone costs 50 / 300 of the distance; x1 and x2 together 11 / 300."""
    schema = FeatureSchema(tuple(Feature(f"x{j}", "numeric", 0.0, 100.0) for j in range(D)))
    tree = Tree(np.array([1, 3, -1, -1, 5, -1, -1]), np.array([2, 4, -1, -1, 6, -1, -1]),
                np.array([0, 1, 0, 0, 2, 0, 0]), np.array([50.0, 5.5, 0, 0, 5.5, 0, 0]),
                np.array([0, 0, 1.0, 0, 0, 0, 1.0]), np.array([0, 0, 0, 1.0, 0, 1.0, 0]))
    return TabularWorld("toy/either", schema, TreeEnsemble([tree], D))


def test_bolder_rows_are_refused_rows_outside_the_answers_set_pushed_out_and_nearer_than_it(either):
    geo = WorldGeometry.of(either)
    X = np.zeros((2, D))
    answer = np.array([[60.0, 0, 0], [0, 30.0, 30.0]])
    refused = np.array([[[40.0, 0, 0], [0, 2.0, 2.0], [0, 4.0, 0], [np.nan] * D],
                        [[0, 3.0, 0], [0, 1.0, 2.0], [1.0, 1.0, 0], [np.nan] * D]])
    below = geo.distance(X, answer)
    caps = np.array([40, 5])
    out = bolder(geo, X, answer, refused, None, row_keys(np.zeros((2, 0, D))), 40, below, caps)
    for i in range(2):
        # the second route: every push of every refused row that changes a column the answer leaves alone
        keep = [r for r in refused[i] if not np.isnan(r).any()
                and ((np.abs(r - X[i]) > 0) & (np.abs(answer[i] - X[i]) == 0)).any()]
        want = {tuple(np.clip(X[i] + f * (r - X[i]), 0, 100)) for r in keep for f in BOLD_FACTORS}
        want = {w for w in want if geo.distance(X[i:i + 1], np.array([w]))[0] < below[i]}
        got = [tuple(r) for r in out[i] if not np.isnan(r).any()]
        assert len(got) == min(caps[i], len(want)) and len(set(got)) == len(got)
        assert set(got) <= want
        if i == 0:  # a shrink of the answer ([40, 0, 0]) is never pushed: it would go back toward the answer
            assert all(g[0] == 0 for g in got) and set(got) == want
    # every row asked before is left out
    asked = row_keys(out[:1, :3])
    again = bolder(geo, X[:1], answer[:1], refused[:1], None, asked, 40, below[:1], caps[:1])
    assert not ({tuple(r) for r in out[0, :3]} & {tuple(r) for r in again[0] if not np.isnan(r).any()})


def test_bolder_rows_take_the_first_refused_rows_and_snap_outward_to_the_vocabulary(either):
    geo = WorldGeometry.of(either)
    X = np.zeros((1, D))
    refused = np.concatenate([np.tile([[0, 2.0, 2.0]], (BOLD_ROWS, 1)), [[0, 4.0, 4.0]]])[None]
    refused[0, :BOLD_ROWS, 1] += np.arange(BOLD_ROWS) * 1e-3  # distinct rows; the last one is past the first BOLD_ROWS
    answer = np.array([[90.0, 0, 0]])
    out = bolder(geo, X, answer, refused, None, row_keys(np.zeros((1, 0, D))), 1000, np.array([1.0]),
                 np.array([1000]))
    got = out[0][~np.isnan(out[0]).any(-1)]
    assert len(got) == BOLD_ROWS * len(BOLD_FACTORS) and not np.isclose(got[:, 2], 4.0 * 1.15).any()
    vocab = [np.array([]), np.array([3.0, 6.0, 9.0]), np.array([3.0, 6.0, 9.0])]
    snapped = bolder(geo, X, answer, refused[:, -1:], vocab, row_keys(np.zeros((1, 0, D))), 10, np.array([1.0]),
                     np.array([10]))
    got = snapped[0][~np.isnan(snapped[0]).any(-1)]
    # 4 x 1.15 = 4.6 and 4 x 1.3 = 5.2 snap to 6, 4 x 2.5 = 10 has no vocabulary value past it and stays
    assert {tuple(r) for r in got} == {(0, 6.0, 6.0), (0, 9.0, 9.0), (0, 10.0, 10.0), (0, 12.0, 12.0)}


@pytest.mark.parametrize("steps", [False, True])
def test_a_search_that_stops_getting_nearer_pushes_its_refused_rows_and_finds_the_nearer_set(either, steps,
                                                                                            monkeypatch):
    """The proposals: x0 to 60 (accepted) and x1, x2 to 2 (refused on every ray round one asks, up to 4.4).
    Every refinement round then only shrinks x0 toward 50; without the bolder rows the search ends there,
    with them it finds x1 and x2 past 5.5, at less than a quarter of the distance."""
    geo = WorldGeometry.of(either)
    X = np.zeros((1, D))
    P = np.array([[[60.0, 0, 0], [0, 2.0, 2.0]]])
    found = budget_search(BlackBoxModel(either.model), geo, X, P, Budget(6, 400), steps=steps)
    assert found.found[0] and found.CF[0, 0] == 0 and (found.CF[0, 1:] > 5.5).all()
    assert found.distance[0] < 0.25 * (50 / 300)
    monkeypatch.setattr(budget_search_module, "BOLD_SHARE", 0.0)
    without = budget_search(BlackBoxModel(either.model), geo, X, P, Budget(6, 400), steps=steps)
    assert without.CF[0, 0] > 50 and without.distance[0] > 50 / 300 - 1e-9


def test_an_agents_bolder_rows_do_not_depend_on_the_rest_of_the_batch(either):
    """Agents that stall in different rounds, with different caps of bolder rows: each alone gets the answer
    it gets in the batch, bit for bit."""
    geo = WorldGeometry.of(either)
    X = np.array([[0.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0], [0, 0, 0]])
    P = np.array([[[60.0, 0, 0], [0, 2.0, 2.0]], [[80.0, 0, 0], [1.0, 3.0, 3.0]], [[70.0, 1.0, 0], [0, 1.5, 1.0]],
                  [[0, 7.0, 7.0], [55.0, 0, 0]]])
    batch = budget_search(BlackBoxModel(either.model), geo, X, P, Budget(5, 300), steps=True)
    for i in range(len(X)):
        alone = budget_search(BlackBoxModel(either.model), geo, X[i:i + 1], P[i:i + 1], Budget(5, 300), steps=True)
        assert np.array_equal(alone.CF[0], batch.CF[i], equal_nan=True) and alone.rows[0] == batch.rows[i]
