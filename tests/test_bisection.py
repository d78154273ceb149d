"""``learners/tabular/bisection.py``: the answer's changed columns bisected between it and the refused rows on their
lines, in the refinement rounds of a search on a model in steps."""

from __future__ import annotations

import numpy as np
import pytest

import learners.tabular.bisection as bisection_module
import learners.tabular.budget_search as budget_search_module
from envs.black_box import BlackBoxModel, Budget
from envs.models import Tree, TreeEnsemble
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular import WorldGeometry
from learners.tabular.bisection import PROBES, edge_bisection, line_brackets
from learners.tabular.budget_search import budget_search

D = 3
EDGE0, EDGE1 = 37.3, 50.5  # the tree's thresholds: no value of the vocabulary below


@pytest.fixture(scope="module")
def both() -> TabularWorld:
    """One tree on x0, x1 in [0, 100] and an integer x2 in [0, 10]: accepts x0 > 37.3 and x1 > 50.5 together."""
    schema = FeatureSchema((Feature("x0", "numeric", 0.0, 100.0), Feature("x1", "numeric", 0.0, 100.0),
                            Feature("x2", "numeric", 0.0, 10.0, integer=True)))
    tree = Tree(np.array([1, -1, 3, -1, -1]), np.array([2, -1, 4, -1, -1]), np.array([0, 0, 1, 0, 0]),
                np.array([EDGE0, 0, EDGE1, 0, 0]), np.array([0, 0, 0, 0, 1.0]), splits="float64")
    return TabularWorld("toy/both", schema, TreeEnsemble([tree], D))


def _brackets_by_loop(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, R: np.ndarray) -> np.ndarray:
    """The second route: every (agent, refused row, column) checked one at a time; a row on the answer's line first,
    else one further the same way on its other columns."""
    out = np.full(X.shape, np.nan)
    for n in range(len(X)):
        if np.isnan(B[n]).any():
            continue
        best = {True: {}, False: {}}  # on the line or not: column -> largest fraction
        for r in R[n]:
            if np.isnan(r).any():
                continue
            inside, further, ok = [], False, True
            for j in range(X.shape[1]):
                b, v = B[n, j] - X[n, j], r[j] - X[n, j]
                if abs(v - b) <= 1e-9 * (1 + abs(B[n, j])):
                    continue  # as the answer
                if not geo.numeric[j]:
                    ok = False
                elif b != 0 and v * b >= 0 and abs(v) < abs(b):
                    inside.append(j)
                elif v * b > 0 and abs(v) > abs(b):
                    further = True
                else:
                    ok = False
            if ok and len(inside) == 1:
                j = inside[0]
                f = (r[j] - X[n, j]) / (B[n, j] - X[n, j])
                for line in {not further, False}:
                    best[line][j] = max(best[line].get(j, -1.0), f)
        for j, f in {**best[False], **best[True]}.items():
            out[n, j] = f
    return out


@pytest.mark.parametrize("seed", range(5))
def test_line_brackets_are_the_largest_refused_fraction_on_each_changed_columns_line(both, seed, monkeypatch):
    geo = WorldGeometry.of(both)
    rng = np.random.default_rng(seed)
    N, Q = 6, 40
    X = rng.integers(0, 20, (N, D)).astype(float)
    B = X + rng.integers(0, 30, (N, D)) * (rng.random((N, D)) < 0.7)
    B[0] = np.nan  # an agent without an answer
    R = np.repeat(B[:, None], Q, axis=1)
    col = rng.integers(0, D, (N, Q))
    frac = rng.choice([-0.5, 0.0, 0.25, 0.5, 0.9, 1.0, 1.5], (N, Q))
    n, q = np.indices((N, Q))
    R[n, q, col] = X[n, col] + frac * (B[n, col] - X[n, col])
    other = (col + 1) % D
    for shift, share in ((1.0, 0.15), (-1.0, 0.15)):  # a second column further from the agent, or back toward it
        a, r = np.nonzero(rng.random((N, Q)) < share)
        j = other[a, r]
        R[a, r, j] += shift * np.sign(B[a, j] - X[a, j] + 1e-9)
    R[rng.random((N, Q)) < 0.1] = np.nan
    assert np.array_equal(line_brackets(geo, X, B, R), _brackets_by_loop(geo, X, B, R), equal_nan=True)
    monkeypatch.setattr(bisection_module, "BLOCK", 4)  # blocks of agents: the same brackets
    assert np.array_equal(line_brackets(geo, X, B, R), _brackets_by_loop(geo, X, B, R), equal_nan=True)
    assert np.isnan(line_brackets(geo, X, B, R[:, :0])).all()


def test_bisection_rows_move_one_bracketed_column_strictly_inside_its_bracket(both):
    geo = WorldGeometry.of(both)
    X = np.array([[30.0, 0, 0], [0, 0, 0]])
    B = np.array([[40.0, 51.0, 7.0], [np.nan] * D])
    R = np.array([[[35.0, 51.0, 7.0], [38.0, 51.0, 7.0], [40.0, 40.0, 7.0], [40.0, 51.0, 5.0], [39.0, 50.0, 7.0]],
                  [[1.0, 1.0, 1.0]] * 5])
    out = edge_bisection(geo, X, B, R)
    assert np.isnan(out[1]).all()
    rows = out[0][~np.isnan(out[0]).any(-1)]
    bracket = {0: 38.0, 1: 40.0, 2: 5.0}  # the nearest refused value to the answer on each column's line
    seen = {j: 0 for j in range(D)}
    for r in rows:
        (j,) = np.flatnonzero(r != B[0])  # one column moved
        lo, hi = sorted((bracket[j], B[0, j]))
        assert lo < r[j] < hi
        seen[j] += 1
    assert seen[0] == PROBES and seen[1] == PROBES
    assert sorted(rows[rows[:, 2] != 7.0][:, 2]) == [6.0]  # an integer column: whole values only, each once
    assert len({tuple(r) for r in rows if r[2] == 7.0}) == 2 * PROBES


def test_a_forest_edge_no_label_has_is_found_by_bisection(both, monkeypatch):
    """The vocabulary's values are past both thresholds; the shrinks' fractions stop short of them. With the
    bisection in every refinement round the search ends within 0.05% of the optimum; without it, more than 0.4%
    away; in the last round only (the default), nearer than without."""
    geo = WorldGeometry.of(both)
    X = np.array([[30.0, 0, 0]])
    P = np.array([[[40.0, 51.0, 0]]])
    vocab = [np.array([40.0]), np.array([51.0]), np.array([])]
    optimum = geo.distance(X, np.array([[EDGE0, EDGE1, 0]]))[0]
    # the bisection alone: the float32 nudges' rows (``steps.float32_nudges``) would move this toy's caps
    monkeypatch.setattr(budget_search_module, "float32_nudges", lambda g, A: np.full((len(A), 0, A.shape[1]), np.nan))
    last = budget_search(BlackBoxModel(both.model), geo, X, P, Budget(8, 200), vocab=vocab, steps=True)
    monkeypatch.setattr(budget_search_module, "BISECT_LAST", 7)  # every refinement round
    found = budget_search(BlackBoxModel(both.model), geo, X, P, Budget(8, 200), vocab=vocab, steps=True)
    assert found.found[0] and both.model.predict(found.CF)[0] == 1
    assert found.distance[0] <= 1.0005 * optimum
    monkeypatch.setattr(budget_search_module, "BISECT_ROWS", 0)
    without = budget_search(BlackBoxModel(both.model), geo, X, P, Budget(8, 200), vocab=vocab, steps=True)
    assert without.distance[0] > 1.004 * optimum
    assert last.distance[0] < without.distance[0]  # by default, in the last round only: one step of it


def test_bisection_is_asked_in_the_last_rounds_only(both, monkeypatch):
    """Earlier rounds look for a nearer changed set: the bisection rows are built for the last ``BISECT_LAST``
    refinement rounds only, and not at all in a search of fewer than ``BISECT_MIN_CALLS`` round trips (earlier
    rounds bisect only in the rows they leave free, ``FREE_BISECT``: off here, ``tests/test_free_rows.py``)."""
    monkeypatch.setattr(budget_search_module, "FREE_BISECT", False)
    geo = WorldGeometry.of(both)
    calls = []
    real = budget_search_module.edge_bisection

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(budget_search_module, "edge_bisection", spy)
    X, P = np.array([[30.0, 0, 0]]), np.array([[[40.0, 51.0, 0]]])
    budget_search(BlackBoxModel(both.model), geo, X, P, Budget(6, 600), vocab=[np.array([40.0]), np.array([51.0]),
                                                                                np.array([])], steps=True)
    assert len(calls) == budget_search_module.BISECT_LAST
    calls.clear()
    budget_search(BlackBoxModel(both.model), geo, X, P, Budget(budget_search_module.BISECT_MIN_CALLS - 1, 600),
                  vocab=[np.array([40.0]), np.array([51.0]), np.array([])], steps=True)
    assert not calls
