"""The change-and-value generator's search (``learners/tabular/change_value.py``,
``change_search.py``): its subsets, the values it tries (room levels, combinations, discrete moves),
its score bounds and its answers against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.models import Tree, TreeEnsemble, split_limits
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular import TabularLabels, WorldGeometry, accepts, build_tabular_generator
from tests.tabular_worlds import german_mace_labels, german_rejected, train_labels


@pytest.fixture(scope="module")
def german():
    return german_rejected()


@pytest.fixture(scope="module")
def german_labels():
    return german_mace_labels()


def _two_split_world() -> TabularWorld:
    """One tree on two real features in [0, 10]: accept iff x0 > 6 or (x0 > 3 and x1 > 7)."""
    schema = FeatureSchema((Feature("x0", "numeric", 0.0, 10.0), Feature("x1", "numeric", 0.0, 10.0)))
    # node 0: x0 <= 6 ? node 1 : leaf 2 (accept); node 1: x0 <= 3 ? leaf 3 (reject) : node 4
    # node 4: x1 <= 7 ? leaf 5 (reject) : leaf 6 (accept)
    left = np.array([1, 3, -1, -1, 5, -1, -1])
    right = np.array([2, 4, -1, -1, 6, -1, -1])
    feature = np.array([0, 0, 0, 0, 1, 0, 0])
    threshold = np.array([6.0, 3.0, 0, 0, 7.0, 0, 0])
    p1 = np.array([0, 0, 1, 0, 0, 0, 1.0])
    return TabularWorld("toy/two", schema, TreeEnsemble([Tree(left, right, feature, threshold, p1, 1 - p1)], 2))


def _brute_force(world, x, grid):
    """The nearest accepted point over a fine grid that holds every split crossing."""
    geo = WorldGeometry.of(world)
    P = np.array(np.meshgrid(grid, grid, indexing="ij")).reshape(2, -1).T
    P = P[accepts(world, P)]
    d = geo.distance(x, P)
    return d.min()


@settings(max_examples=30, deadline=None)
@given(x0=st.floats(0.0, 2.9), x1=st.floats(0.0, 6.9))
def test_change_value_reaches_the_brute_force_optimum(x0, x1):
    """Trained on a few MACE-like answers of a toy tree, the learned generator's grid over the
    predicted subsets and the exact edge sweep find the brute-force nearest counterfactual."""
    world = _two_split_world()
    rng = np.random.default_rng(0)
    X_train = np.column_stack([rng.uniform(0, 2.9, 40), rng.uniform(0, 6.9, 40)])
    to_x0 = np.column_stack([np.full(40, split_limits(6.0)[1]), X_train[:, 1]])
    to_both = np.column_stack([np.full(40, split_limits(3.0)[1]), np.full(40, split_limits(7.0)[1])])
    geo = WorldGeometry.of(world)
    CF = np.where((geo.distance(X_train, to_x0) <= geo.distance(X_train, to_both))[:, None], to_x0, to_both)
    gen = build_tabular_generator("change_value", {"max_epochs": 30, "hidden": [32, 32]}).fit(
        world, TabularLabels(X_train, CF, geo.distance(X_train, CF)))
    x = np.array([[x0, x1]])
    rec = gen.recommend(world, x)
    edges = np.concatenate([split_limits(t) for t in (3.0, 6.0, 7.0)])
    grid = np.unique(np.concatenate([np.linspace(0, 10, 101), edges, x[0]]))
    assert rec.found[0]
    assert rec.distance[0] <= _brute_force(world, x[0], grid) + 1e-12


def test_change_value_subsets_are_the_most_probable():
    gen = build_tabular_generator("change_value", {"top_features": 3, "top_subsets": 7})
    prob = np.array([[0.9, 0.1, 0.6, 0.01]])
    subs = gen.subsets(prob)[0]
    assert subs.shape == (7, 4) and not subs[:, 3].any()  # feature 3 is not among the top 3
    assert len({tuple(s) for s in subs}) == 7 and subs.any(1).all()
    q = np.clip(prob[0, :3], 1e-6, 1 - 1e-6)
    logp = [np.sum(np.where(s[:3], np.log(q), np.log1p(-q))) for s in subs]
    assert all(a >= b - 1e-12 for a, b in zip(logp, logp[1:], strict=False))
    assert tuple(subs[0]) == (True, False, True, False)


def test_change_value_rejects_bad_params():
    with pytest.raises(ValueError, match="top_features"):
        build_tabular_generator("change_value", {"top_features": 20})
    with pytest.raises(ValueError, match="top_subsets"):
        build_tabular_generator("change_value", {"top_subsets": 0})
    with pytest.raises(ValueError, match="scan_depth"):
        build_tabular_generator("change_value", {"scan_depth": 4})
    with pytest.raises(ValueError, match="scan_starts"):
        build_tabular_generator("change_value", {"scan_starts": 0})
    with pytest.raises(ValueError, match="scan_features"):
        build_tabular_generator("change_value", {"scan_features": -1})


def test_discrete_variants_are_every_reachable_value_once(german):
    """Every other reachable value of each discrete feature, alone, once, in agent order: the
    variants' rows are those of a brute force over every column set of each feature."""
    from learners.tabular.change_search import discrete_variants

    world, neg = german
    geo = WorldGeometry.of(world)
    x = neg[:5]
    V, owner = discrete_variants(geo, x)
    assert (np.diff(owner) >= 0).all()
    R = V.rows()
    lo, hi = geo.box(x)
    for i in range(len(x)):
        want = []  # brute force: each discrete raw feature at each of its other values, kept where reachable
        for j, kind in enumerate(geo.raw_kinds):
            cols = np.flatnonzero(geo.raw_of_column == j)
            if kind == "numeric":
                continue
            if kind == "group":
                options = [np.eye(len(cols))[k] for k in range(len(cols))]
            else:
                options = [np.array([v]) for v in range(int(geo.lower[cols[0]]), int(geo.upper[cols[0]]) + 1)]
            for v in options:
                r = x[i].copy()
                r[cols] = v
                if (r != x[i]).any() and (r >= lo[i]).all() and (r <= hi[i]).all():
                    want.append(r)
        mine = R[owner == i]
        np.testing.assert_array_equal(mine, np.array(want).reshape(-1, x.shape[1]))
        assert len(mine)
        d = geo.deltas(x[i][None], mine)
        assert ((d > 0).sum(1) == 1).all()  # one raw feature each
        assert not geo.violations(np.repeat(x[i][None], len(mine), 0), mine).any()  # reachable, groups one-hot
        assert len(np.unique(mine, axis=0)) == len(mine)
        # an immutable discrete feature never moves
        for j in (j for j, k in enumerate(geo.raw_kinds) if k != "numeric" and geo.fixed[geo.raw_of_column == j].all()):
            assert (d[:, j] == 0).all()
    assert V.cols.shape[1] <= 2  # a move changes one column, or two of a one-hot group


def test_room_levels_take_every_reachable_step_that_fits():
    """An integer feature with 3 steps within reach gets all 3 (a regression: the spread pick once
    returned the first step e times), and a real one e values over its whole reach, both ways."""
    from envs.models import LinearModel
    from learners.tabular.change_search import room_levels

    schema = FeatureSchema((Feature("a", "numeric", 0, 100, integer=True, mutability="increase"),
                            Feature("b", "numeric", 0, 10)))
    world = TabularWorld("toy/levels", schema, LinearModel(np.array([1.0, 1.0]), -5.0))
    geo = WorldGeometry.of(world)
    x = np.array([[50.0, 5.0]])
    out = room_levels(world, geo, x, np.array([0.035]), [(8, False)])[(8, False)][0]
    assert sorted(out[0][~np.isnan(out[0])]) == [51.0, 52.0, 53.0]  # increase-only: 3.5 steps of reach
    b = out[1][~np.isnan(out[1])]
    assert len(b) == 8 and (b < 5).any() and (b > 5).any() and np.abs(b - 5).max() <= 0.35 + 1e-9


def test_room_levels_of_integer_columns_are_every_step_within_reach():
    """All-integer columns (where only the steps within reach are built, not e each way) against a
    brute force: every integer step within reach and the box, ascending, spread over e where more."""
    from envs.models import LinearModel
    from learners.tabular.change_search import room_levels

    schema = FeatureSchema((Feature("a", "numeric", 0, 40, integer=True),
                            Feature("b", "numeric", 0, 9, integer=True, mutability="increase"),
                            Feature("c", "numeric", -5, 5, integer=True)))
    world = TabularWorld("toy/int-levels", schema, LinearModel(np.array([1.0, 1.0, 1.0]), -5.0))
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(0)
    X = np.stack([rng.integers(0, 41, 60), rng.integers(0, 10, 60), rng.integers(-5, 6, 60)], 1).astype(float)
    room = rng.uniform(0, 0.4, 60)
    lo, hi = geo.box(X)
    for e in (16, 40):  # at most 16 steps within reach (e: spread over, or all)
        out = room_levels(world, geo, X, room, [(e, False)])[(e, False)]
        for i in range(len(X)):
            for c in range(3):
                reach = room[i] * geo.span[c]
                ks = [k for k in range(-60, 61) if k and abs(k) <= reach + 1e-12]
                want = [X[i, c] + k for k in ks if lo[i, c] <= X[i, c] + k <= hi[i, c]]
                if len(want) > e:
                    want = [want[int(np.floor(j * len(want) / e))] for j in range(e)]
                got = out[i, c][~np.isnan(out[i, c])]
                assert list(got) == want, (e, i, c, got, want)


def test_combinations_within_are_every_winning_product_of_the_options(german, monkeypatch):
    """``combinations_within`` with no cap against a brute-force product: every combination of two or
    more numeric features at their option values (or unchanged) nearer than the budget, and no other;
    a cap keeps that many per agent, the farthest first."""
    import itertools

    from learners.tabular.change_search import combinations_within, room_levels
    from learners.tabular.polish import split_edges

    world, neg = german
    geo = WorldGeometry.of(world)
    X = neg[:4]
    best = np.array([0.02, 0.05, 0.03, 0.0])
    cols = [c for c in np.flatnonzero(geo.numeric & ~geo.fixed) if c in split_edges(world)]
    common = np.full((X.shape[1], 2), np.nan)
    common[cols[0]] = [X[:, cols[0]].max() + 1, np.nan]  # a value the training answers would lend
    lv0 = room_levels(world, geo, X, best / geo.weights[1], [(2, True)])[(2, True)]
    common[cols[1], 0] = lv0[0, cols[1], 0]  # and one that is also a crossing: tried once
    bounded, own_b = combinations_within(world, geo, X, best, 2, 10**9, common)
    monkeypatch.setattr(type(world.model), "score_bounds", lambda self, *a: None)  # the enumeration itself
    V, own = combinations_within(world, geo, X, best, 2, 10**9, common)
    rows = V.rows()
    d = geo.distance(X[own], rows)
    assert len(rows) > 10 and (d < best[own]).all()
    assert ((np.abs(rows - X[own]) > 1e-12).sum(1) >= 2).all()
    room = best / geo.weights[1]
    lv = room_levels(world, geo, X, room, [(2, True)])[(2, True)]
    for i in range(len(X)):
        opts = []
        for c in cols:
            o = [v for v in lv[i, c] if not np.isnan(v)]
            v = common[c, 0]
            lo, hi = geo.box(X[i:i + 1])
            if not np.isnan(v) and lo[0, c] <= v <= hi[0, c] and v != X[i, c] and abs(v - X[i, c]) <= room[i] * geo.span[c] + 1e-12:
                o.append(v)
            opts.append([X[i, c]] + o)
        want = set()
        for combo in itertools.product(*opts):
            r = X[i].copy()
            r[cols] = combo
            if (np.abs(r - X[i]) > 1e-12).sum() >= 2 and geo.distance(X[i], r) < best[i] - 1e-12:
                want.add(r.tobytes())
        assert {r.tobytes() for r in rows[own == i]} == want
        assert len(want) == (own == i).sum()  # each once: an option met again (a common value that is a crossing) adds no row
    assert not (own == 3).any()  # a zero budget: nothing can win
    accepted = world.accepts(rows)
    for i in range(len(X)):  # with the model's score bound: all of an agent's, or none where none is accepted
        got = {r.tobytes() for r in bounded.rows()[own_b == i]}
        assert got == {r.tobytes() for r in rows[own == i]} or (not got and not accepted[own == i].any())
    V2, own2 = combinations_within(world, geo, X, best, 2, 5, common)
    assert np.bincount(own2, minlength=4).max() <= 5 and len(own2)
    every = {(int(o), r.tobytes()) for o, r in zip(own, rows, strict=True)}
    assert {(int(o), r.tobytes()) for o, r in zip(own2, V2.rows(), strict=True)} <= every  # capped: some of the same
    far = geo.distance(X[own2], V2.rows())
    for i in np.unique(own2):  # the farther of the agent's combinations are kept
        assert far[own2 == i].mean() >= d[own == i].mean()


def test_combination_values_are_the_common_ones_then_the_neighbours(german, german_labels):
    """Per agent, ``_combo_values`` holds the training answers' most common values per column, then
    each value the answers of its nearest training agents move the column to; ``combinations_within``
    with the same values per agent (N, D, m) gives what the shared (D, m) gives, and with values met
    twice what it gives with each once."""
    from learners.tabular.change_search import _first_of_each, combinations_within

    world, neg = german
    labels, train, _ = german_labels
    gen = build_tabular_generator("change_value", {"max_epochs": 2, "combo_neighbours": 5}).fit(
        world, train_labels(labels, train), seed=0)
    X = neg[:6]
    vals = gen._combo_values(X)
    common = gen._common_values(int(gen.params.combo_common))
    near = gen._neighbours(X, 5)
    assert vals.shape == (len(X), X.shape[1], common.shape[1] + 5)
    for i in range(len(X)):
        for c in range(X.shape[1]):
            got = vals[i, c][~np.isnan(vals[i, c])]
            moved = np.abs(gen.CF_[near[i], c] - gen.X_[near[i], c]) > 1e-12
            want = set(common[c][~np.isnan(common[c])]) | set(gen.CF_[near[i], c][moved])
            assert set(got) == want
            k = int((~np.isnan(common[c])).sum())
            np.testing.assert_array_equal(vals[i, c, :k], common[c, :k])  # the common ones first, in order
    geo = WorldGeometry.of(world)
    best = np.full(len(X), 0.05)
    shared = combinations_within(world, geo, X, best, 2, 50, common)
    per_agent = combinations_within(world, geo, X, best, 2, 50, np.broadcast_to(common[None], (len(X),) + common.shape))
    np.testing.assert_array_equal(shared[1], per_agent[1])
    np.testing.assert_array_equal(shared[0].rows(), per_agent[0].rows())
    mine = combinations_within(world, geo, X, best, 2, 10**6, vals)[0].rows()
    assert len(mine) >= len(combinations_within(world, geo, X, best, 2, 10**6, common)[0].rows())
    once = _first_of_each(vals)
    assert np.isnan(once).sum() > np.isnan(vals).sum()  # some value was met twice
    np.testing.assert_array_equal(mine, combinations_within(world, geo, X, best, 2, 10**6, once)[0].rows())


def test_score_bounds_skip_only_rows_no_model_accepts(german, german_labels, monkeypatch):
    """The searches skip the boxes a forest's score bound rules out: the answers are the same as
    with no bound at all (every skipped row would have been rejected), on an MLP's interval bound too."""
    from data_gen.classifiers import build as build_cell
    from envs.models import MLPModel, TreeEnsemble

    world, neg = german
    labels, train, _ = german_labels
    gen = build_tabular_generator("change_value", {"max_epochs": 3}).fit(world, train_labels(labels, train), seed=0)
    mlp_world = build_cell("german", "mlp").world
    mlp_gen = build_tabular_generator("change_value", {"max_epochs": 3}).fit(mlp_world, train_labels(labels, train), seed=0)
    with_bound = [gen.recommend(world, neg[:30]).CF, mlp_gen.recommend(mlp_world, neg[:30]).CF]
    calls = []
    for cls in (TreeEnsemble, MLPModel):
        original = cls.score_bounds

        def spy(self, *a, _original=original):
            calls.append(1)
            return _original(self, *a)

        monkeypatch.setattr(cls, "score_bounds", spy)
    gen.recommend(world, neg[:30])
    mlp_gen.recommend(mlp_world, neg[:30])
    assert calls  # the bound was used
    for cls in (TreeEnsemble, MLPModel):
        monkeypatch.setattr(cls, "score_bounds", lambda self, *a: None)
    without = [gen.recommend(world, neg[:30]).CF, mlp_gen.recommend(mlp_world, neg[:30]).CF]
    for a, b in zip(with_bound, without, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_predictions_pieces_only_ever_shorten_answers(german, german_labels):
    """The LP over the network's predicted pieces (``piece_predicted``) keeps every answer valid and
    never farther than without it, and shortens some on an MLP."""
    from data_gen.classifiers import build as build_cell
    from learners.tabular.geometry import accepts

    world, neg = german
    labels, train, _ = german_labels
    mlp_world = build_cell("german", "mlp").world
    X = neg[:40]
    X = X[~accepts(mlp_world, X)]
    out = {}
    for k in (0, 1):
        gen = build_tabular_generator("change_value", {"max_epochs": 3, "piece_predicted": k}).fit(
            mlp_world, train_labels(labels, train), seed=0)
        out[k] = gen.recommend(mlp_world, X)
    assert (out[1].found == out[0].found).all()
    f = out[1].found
    assert accepts(mlp_world, out[1].CF[f]).all()
    assert (out[1].distance[f] <= out[0].distance[f] + 1e-12).all()
