"""``learners/tabular/fine_grid.py``: the answer's numeric changes on a fine grid toward the agent, in the rows the last
round of a search on a model in steps leaves unused."""

from __future__ import annotations

import numpy as np
import pytest

import learners.tabular.budget_search as budget_search_module
import learners.tabular.speculation as speculation_module
from envs.black_box import BlackBoxModel, Budget
from envs.models import Tree, TreeEnsemble
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular import WorldGeometry
from learners.tabular.budget_search import budget_search
from learners.tabular.fine_grid import POINTS, fine_grid

D = 3
EDGE = 37.3  # the one threshold of ``edge``: between the agent and the only vocabulary value


def _schema() -> FeatureSchema:
    return FeatureSchema((Feature("x0", "numeric", 0.0, 100.0), Feature("x1", "numeric", 0.0, 100.0),
                          Feature("x2", "numeric", 0.0, 10.0, integer=True)))


@pytest.fixture(scope="module")
def edge() -> TabularWorld:
    """One tree on x0 in [0, 100]: accepts x0 > 37.3 (x1 and the integer x2 do nothing)."""
    tree = Tree(np.array([1, -1, -1]), np.array([2, -1, -1]), np.array([0, 0, 0]), np.array([EDGE, 0, 0]),
                np.array([0, 0, 1.0]), splits="float64")
    return TabularWorld("toy/edge", _schema(), TreeEnsemble([tree], D))


@pytest.fixture(scope="module")
def both() -> TabularWorld:
    """One tree: accepts x0 > 37.3 and x1 > 50.5 together."""
    tree = Tree(np.array([1, -1, 3, -1, -1]), np.array([2, -1, 4, -1, -1]), np.array([0, 0, 1, 0, 0]),
                np.array([EDGE, 0, 50.5, 0, 0]), np.array([0, 0, 0, 0, 1.0]), splits="float64")
    return TabularWorld("toy/both", _schema(), TreeEnsemble([tree], D))


def _grid_by_loop(geo: WorldGeometry, x: np.ndarray, b: np.ndarray, points: int) -> set[tuple[float, ...]]:
    """The second route, one agent: every variant (the answer, then each other changed feature back) and every
    changed numeric column, one fraction at a time, projected one row at a time."""
    if np.isnan(b).any():
        return set()
    changed = [j for j in range(D) if abs(b[j] - x[j]) > 1e-12]
    variants = [b] + [np.where(np.arange(D) == j, x, b) for j in changed if len(changed) > 1]
    out = set()
    for v in variants:
        for c in range(D):
            if abs(v[c] - x[c]) <= 1e-12:
                continue
            for k in range(1, points + 1):
                r = v.copy()
                r[c] = x[c] + k / (points + 1) * (v[c] - x[c])
                out.add(tuple(geo.project(x[None], r[None, None])[0, 0]))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_the_grid_is_each_variant_with_one_changed_column_at_even_fractions(both, seed):
    geo = WorldGeometry.of(both)
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 20, (5, D)).astype(float)
    B = X + rng.integers(0, 30, (5, D)) * (rng.random((5, D)) < 0.7)
    B[:, 2] = np.minimum(B[:, 2], 10)
    B[0] = np.nan  # no answer: no rows
    B[1] = X[1]
    B[1, 0] = X[1, 0] + 9  # one changed column: the answer alone, no variant
    G = fine_grid(geo, X, B, points=7)
    for n in range(len(X)):
        got = {tuple(r) for r in G[n] if not np.isnan(r).any()}
        assert got == _grid_by_loop(geo, X[n], B[n], 7)
    assert np.isnan(G[0]).all()
    with pytest.raises(ValueError, match="points"):
        fine_grid(geo, X, B, points=0)


def test_an_edge_no_label_has_is_reached_in_the_last_round_s_unused_rows(edge, monkeypatch):
    """At 2 x 256 the vocabulary's 90 is far past the edge at 37.3 and round two's fractions stop short of it: with
    the grid the answer is one grid step (round one's change over POINTS + 1) past the edge at most, nearer than
    without it; the rows it adds are the last round's unused ones, at most ``FINE_ROWS``."""
    geo = WorldGeometry.of(edge)
    X, P = np.array([[30.0, 5.0, 2.0]]), np.array([[[90.0, 5.0, 2.0]]])
    vocab = [np.array([90.0]), np.array([]), np.array([])]
    cap = budget_search_module.FINE_ROWS
    first = budget_search(BlackBoxModel(edge.model), geo, X, P, Budget(1, 128), vocab=vocab, steps=True)
    with_grid = budget_search(BlackBoxModel(edge.model), geo, X, P, Budget(2, 256), vocab=vocab, steps=True)
    monkeypatch.setattr(budget_search_module, "FINE_ROWS", 0)
    without = budget_search(BlackBoxModel(edge.model), geo, X, P, Budget(2, 256), vocab=vocab, steps=True)
    assert with_grid.found[0] and edge.model.predict(with_grid.CF)[0] == 1
    step = (first.CF[0, 0] - X[0, 0]) / (POINTS + 1)
    assert EDGE < with_grid.CF[0, 0] <= EDGE + step + 1e-9
    assert with_grid.distance[0] < without.distance[0]
    assert without.rows[0] < with_grid.rows[0] <= min(256, without.rows[0] + cap)


@pytest.mark.parametrize("seed", range(6))
def test_the_grid_never_leaves_an_answer_farther(both, seed, monkeypatch):
    """Its rows come after every other piece's, in the last round only: each answer with it is at least as near as
    without it, and accepted."""
    geo = WorldGeometry.of(both)
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(0, 30, 8), rng.uniform(0, 45, 8), rng.integers(0, 10, 8)])
    P = X[:, None, :] + np.column_stack([rng.uniform(10, 50, 8), rng.uniform(10, 50, 8), np.zeros(8)])[:, None, :]
    P[:, :, :2] = np.minimum(P[:, :, :2], 100.0)
    vocab = [np.array([45.0, 60.0]), np.array([55.0, 70.0]), np.array([])]
    budget = Budget(2, int(rng.choice([64, 128, 256])))
    with_grid = budget_search(BlackBoxModel(both.model), geo, X, P, budget, vocab=vocab, steps=True)
    monkeypatch.setattr(budget_search_module, "FINE_ROWS", 0)
    without = budget_search(BlackBoxModel(both.model), geo, X, P, budget, vocab=vocab, steps=True)
    assert (with_grid.found >= without.found).all()
    ok = with_grid.found
    assert (with_grid.distance[ok] <= without.distance[ok] + 1e-15).all()
    assert (both.model.predict(with_grid.CF[ok]) == 1).all()
    assert (with_grid.rows <= budget.rows).all()


def test_the_grid_is_built_for_the_last_round_only(both, monkeypatch):
    geo = WorldGeometry.of(both)
    calls = []
    real = speculation_module.fine_grid  # the search builds it through ``speculation.answer_piece``

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(speculation_module, "fine_grid", spy)
    X, P = np.array([[30.0, 0, 0]]), np.array([[[40.0, 51.0, 0]]])
    vocab = [np.array([40.0]), np.array([51.0]), np.array([])]
    budget_search(BlackBoxModel(both.model), geo, X, P, Budget(5, 2000), vocab=vocab, steps=True)
    assert len(calls) == 1  # the last round, which has rows left (one block of one agent)
    calls.clear()
    budget_search(BlackBoxModel(both.model), geo, X, P, Budget(2, 256), vocab=vocab, steps=False)
    assert not calls  # a smooth model: its own brackets and slides


def test_the_grid_is_fine_enough_for_the_one_percent_an_answer_is_judged_by(monkeypatch):
    """Round one answers 40 (the vocabulary's value) for an agent at 30; the edge lies just past half way. The grid's
    step (1/161 of the change) ends the search within 1% of the edge; the 48 fractions it had before stop 2.6% past."""
    X0, A = 30.0, 40.0
    edge_at = X0 + 0.501 * (A - X0)
    tree = Tree(np.array([1, -1, -1]), np.array([2, -1, -1]), np.array([0, 0, 0]), np.array([edge_at, 0, 0]),
                np.array([0, 0, 1.0]), splits="float64")
    world = TabularWorld("toy/half", _schema(), TreeEnsemble([tree], D))
    geo = WorldGeometry.of(world)
    X, P = np.array([[X0, 5.0, 2.0]]), np.array([[[A, 5.0, 2.0]]])
    vocab = [np.array([A]), np.array([]), np.array([])]

    def ratio() -> float:
        res = budget_search(BlackBoxModel(world.model), geo, X, P, Budget(2, 256), vocab=vocab, steps=True)
        assert res.found[0] and world.model.predict(res.CF)[0] == 1
        return float((res.CF[0, 0] - X0) / (edge_at - X0))

    assert POINTS >= 100 and 1.0 < ratio() <= 1.01
    monkeypatch.setattr(speculation_module, "fine_grid", lambda g, x, b: fine_grid(g, x, b, points=48))
    assert ratio() > 1.02
