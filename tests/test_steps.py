"""``learners.tabular.steps``: telling a model that answers in steps from its answers alone, the corner grid
of the proposals' changed sets on the value vocabulary, and the inner grid of an answer (issue 56)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from envs.black_box import BlackBoxModel
from learners.tabular import WorldGeometry, build_tabular_generator
from learners.tabular.budget_search import value_vocabulary
from learners.tabular.steps import GRID_VALUES, STEP_SHARE_MIN, corner_grid, first_vocab_values, step_share
from tests.tabular_worlds import german_train_split, threshold_world, toy_mlp_world


@pytest.fixture(scope="module")
def german():
    world, labels, _ = german_train_split()
    return world, labels


def _inside(world, n, seed):
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(seed)
    lo = np.array([f.lower for f in world.schema.features], float)
    hi = np.array([f.upper for f in world.schema.features], float)
    X = lo + rng.random((n, len(lo))) * (hi - lo)
    return geo, geo.project(X, X[:, None, :])[:, 0]


def test_a_forest_answers_in_steps_and_a_network_does_not(german):
    world, labels = german
    counted = BlackBoxModel(world.model)
    assert step_share(counted, WorldGeometry.of(world), labels.X) >= 0.9
    assert counted.calls == 1  # one call, counted
    geo, X = _inside(threshold_world(), 200, 0)
    assert step_share(threshold_world().model, geo, X) >= 0.95
    class Strict:  # a model behind a schema that checks its integer codes (the user's route)
        def predict_proba(self, X):
            if not np.array_equal(X, np.round(X)):
                raise ValueError("X: row 0 feature 'age' = 21.000051 must be an integer code")
            return world.model.predict_proba(X)

    assert step_share(Strict(), WorldGeometry.of(world), labels.X) == 0.0  # German: integer columns only
    mlp = toy_mlp_world(np.random.default_rng(1))
    geo, X = _inside(mlp, 200, 1)
    assert step_share(mlp.model, geo, X) <= 0.05


def test_corner_grid_puts_each_changed_set_on_the_vocabulary(german):
    """Every row keeps its proposal's changed set, each changed numeric column at one of the ``GRID_VALUES``
    vocabulary values nearest the agent taken either way in turn (the first in the proposal's direction,
    the first the other way, ...; or the proposed value where there is none); a proposal repeating an
    earlier changed set adds no row; rows are distinct."""
    world, labels = german
    geo = WorldGeometry.of(world)
    vocab = value_vocabulary(geo, labels.X, labels.CF)
    X, P = labels.X[:10], labels.CF[:10, None, :]
    P = np.concatenate([P, P + 0.0], axis=1)  # the same set twice
    G = corner_grid(geo, X, P, vocab, 64)
    for i in range(len(X)):
        R = G[i][~np.isnan(G[i]).any(1)]
        own = geo.deltas(X[i][None], geo.project(X[i:i + 1], P[i:i + 1, :1])[0]) > 1e-12
        cols = np.flatnonzero(geo.numeric & (np.abs(P[i, 0] - X[i]) > 1e-12))
        if not 1 <= len(cols) <= 3:
            assert not len(R)
            continue
        assert len(R) and len(np.unique(R, axis=0)) == len(R)
        assert len(R) <= GRID_VALUES[len(cols)] ** len(cols)
        assert ((geo.deltas(X[i][None], R) > 1e-12) == own).all()
        V = GRID_VALUES[len(cols)]
        for c in cols:
            v = vocab[c]
            above, below = v[v > X[i, c]], v[v < X[i, c]][::-1]
            ahead, behind = (above, below) if P[i, 0, c] > X[i, c] else (below, above)
            allowed = np.concatenate([ahead[:(V + 1) // 2], behind[:V // 2], [P[i, 0, c]]])
            assert np.isin(R[:, c], allowed).all()
            if len(ahead) and len(behind) and V > 1:  # both ways on the grid
                assert (np.sign(R[:, c] - X[i, c]) == np.sign(ahead[0] - X[i, c])).any()
                assert (np.sign(R[:, c] - X[i, c]) == np.sign(behind[0] - X[i, c])).any()
    empty = corner_grid(geo, X, X[:, None, :], vocab, 8)  # no change proposed: no row
    assert np.isnan(empty).all()


def test_the_proposer_probes_the_model_and_uses_the_grid_only_on_steps(german, tmp_path):
    world, labels = german
    gen = build_tabular_generator("proposer", {"max_epochs": 5}).fit(world, labels)
    assert gen.fit_info_["steps"]["share"] >= STEP_SHARE_MIN and gen.fit_info_["steps"]["calls"] == 1
    assert gen._grid_share() == 0.25
    gen.save(tmp_path / "p")
    from learners.tabular import TabularGenerator

    assert TabularGenerator.load(tmp_path / "p")._grid_share() == 0.25
    off = build_tabular_generator("proposer", {"max_epochs": 5, "corner_grid": 0.0}).fit(world, labels)
    assert off._grid_share() == 0.0 and "steps" not in off.fit_info_
    with pytest.raises(ValueError, match="corner_grid"):
        build_tabular_generator("proposer", {"corner_grid": 1.5})

def _corner_grid_rows(geo, X, P, vocab, rows):
    """``corner_grid`` by its definition: agent by agent, proposal by proposal, grid point by grid point."""
    out = np.full((len(X), rows, X.shape[1]), np.nan)
    first = first_vocab_values(geo, X, vocab, max(GRID_VALUES.values()))
    for i in range(len(X)):
        Pp = geo.project(X[i:i + 1], P[i:i + 1])[0]
        seen, n = [], 0
        for k in range(len(Pp)):
            moved = np.abs(Pp[k] - X[i]) > 1e-12
            if any((moved == s).all() for s in seen):
                continue
            seen.append(moved)
            cols = np.flatnonzero(moved & geo.numeric)
            if len(cols) not in GRID_VALUES:
                continue
            V = GRID_VALUES[len(cols)]
            options = []
            for c in cols:  # the first value the proposal's way, the first the other way, the second ...
                up = Pp[k, c] > X[i, c]
                ahead, behind = (first[0, i, c], first[1, i, c]) if up else (first[1, i, c], first[0, i, c])
                vals = [v for pair in zip(ahead[:V], behind[:V], strict=True) for v in pair][:V]
                vals[0] = Pp[k, c] if np.isnan(vals[0]) else vals[0]
                options.append(vals)
            for point in itertools.product(*options):
                if n < rows and not np.isnan(point).any():
                    r = Pp[k].copy()
                    r[cols] = point
                    r = geo.project(X[i:i + 1], r[None, None])[0, 0]
                    if np.abs(r - X[i]).max() > 1e-12:  # not clipped back to the agent
                        out[i, n] = r
                        n += 1
    return out


@pytest.mark.parametrize("n_agents", [1, 7, 40])
def test_corner_grid_at_once_is_the_loop_over_proposals(german, n_agents):
    """The grid built for every proposal at once equals its definition row by row, bit for bit, agents alone
    or in a batch, with repeated changed sets and agents whose rows run out."""
    world, labels = german
    geo = WorldGeometry.of(world)
    vocab = value_vocabulary(geo, labels.X, labels.CF)
    rng = np.random.default_rng(n_agents)
    idx = rng.integers(0, len(labels.X), n_agents)
    X = labels.X[idx]
    # proposals: each agent's label, other agents' labels' changes set on it, and repeats of them
    donors = labels.CF[rng.integers(0, len(labels.X), (n_agents, 9))] - labels.X[rng.integers(0, len(labels.X), (n_agents, 9))]
    P = np.concatenate([labels.CF[idx][:, None], X[:, None] + donors, labels.CF[idx][:, None]], axis=1)
    for rows in (5, 40, 200):
        np.testing.assert_array_equal(corner_grid(geo, X, P, vocab, rows), _corner_grid_rows(geo, X, P, vocab, rows))


def _inner_loop(X, B, vocab, numeric, K):
    """``inner_values`` by its definition, one agent and column at a time."""
    out = np.full(X.shape + (K,), np.nan)
    for n, c in itertools.product(range(len(X)), np.flatnonzero(numeric)):
        x, b = X[n, c], B[n, c]
        if abs(b - x) <= 1e-12:
            continue
        inside = sorted((v for v in vocab[c] if min(x, b) < v < max(x, b)), key=lambda v: abs(v - b))[:K]
        out[n, c, : len(inside)] = inside
    return out


def test_inner_values_are_the_vocabulary_values_just_inside_the_answer(german):
    """Per changed numeric column, the vocabulary values strictly between the agent's value and the answer's,
    nearest the answer first; NaN for unchanged and other columns and past the values there are."""
    from learners.tabular.moves import inner_values

    world, labels = german
    geo = WorldGeometry.of(world)
    vocab = value_vocabulary(geo, labels.X, labels.CF)
    rng = np.random.default_rng(0)
    X = labels.X[:20]
    B = np.where(rng.random(X.shape) < 0.5, labels.CF[:20], labels.CF[rng.permutation(20)])  # answers either way
    for K in (1, 3, 6):
        np.testing.assert_array_equal(inner_values(geo, X, B, vocab, K), _inner_loop(X, B, vocab, geo.numeric, K))


def _staircase_world():
    """One tree: accept iff float32(x0) > 2.9 and float32(x1) > 3.9 (both real, in [0, 10])."""
    from envs.models import Tree, TreeEnsemble
    from envs.schema import Feature, FeatureSchema
    from envs.tabular import TabularWorld

    schema = FeatureSchema((Feature("x0", "numeric", 0.0, 10.0), Feature("x1", "numeric", 0.0, 10.0)))
    tree = Tree(np.array([1, -1, 3, -1, -1]), np.array([2, -1, 4, -1, -1]), np.array([0, 0, 1, 0, 0]),
                np.array([2.9, 0, 3.9, 0, 0]), np.array([0.0, 0, 0, 0, 1]), np.array([1.0, 1, 1, 1, 0]))
    return TabularWorld("toy/staircase", schema, TreeEnsemble([tree], 2))


def test_the_inner_grid_moves_two_columns_onto_their_split_edges_at_once(monkeypatch):
    """From an accepted answer past both splits, the nearest accepted row (3, 4: both columns on the vocabulary
    value just past their split) differs from it in two columns: the one-column shrinks do not reach it in one
    round, the inner grid does; every inner-grid row is the answer with a pair of changed columns at levels of
    ``inner_values`` (level 0: the answer's own value)."""
    import learners.tabular.moves as mv

    world = _staircase_world()
    geo = WorldGeometry.of(world)
    vocab = [np.array([1.0, 2.0, 3.0, 3.5, 6.0]), np.array([2.0, 4.0, 4.5, 7.0, 9.0])]
    X, B = np.array([[0.0, 0.0]]), np.array([[6.0, 7.0]])
    target = np.array([3.0, 4.0])
    assert world.model.predict(target[None])[0] and not world.model.predict(np.array([[2.0, 4.0], [3.0, 2.0]])).any()

    def has(M):
        return bool((np.abs(np.nan_to_num(M[0], nan=-1.0) - target) == 0).all(-1).any())

    assert has(mv._moves_one(geo, X, B, vocab, steps=True))
    monkeypatch.setattr(mv, "STEP_INNER_VALUES", 0)
    assert not has(mv._moves_one(geo, X, B, vocab, steps=True))
    K = 6
    W = mv.inner_values(geo, X, B, vocab, K)
    levels = [np.concatenate([B[0, c:c + 1], W[0, c][~np.isnan(W[0, c])]]) for c in (0, 1)]
    rows = np.concatenate(mv.inner_grid(geo, X, B, vocab, np.array([[True, True]]), K), axis=1)[0]
    rows = rows[~np.isnan(rows).any(-1)]
    expected = {(a, b) for a in levels[0] for b in levels[1]} - {(6.0, 7.0)} | {(3.5, 4.5)}  # and both at their first
    assert {tuple(r) for r in rows} == expected


def test_the_answer_edges_are_its_changed_columns_alone_and_in_pairs_just_inside_it():
    """``answer_edges``: the answer with one changed column at one of its ``inner_values`` (the others as
    answered), then ``inner_grid``'s pairs; nothing for an agent without an answer."""
    import learners.tabular.moves as mv

    world = _staircase_world()
    geo = WorldGeometry.of(world)
    vocab = [np.array([1.0, 2.0, 3.0, 3.5, 6.0]), np.array([2.0, 4.0, 4.5, 7.0, 9.0])]
    X, B = np.array([[0.0, 0.0], [0.0, 0.0]]), np.array([[6.0, 7.0], [np.nan, np.nan]])
    E = mv.answer_edges(geo, X, B, vocab, 6)
    assert np.isnan(E[1]).all()
    rows = {tuple(r) for r in E[0][~np.isnan(E[0]).any(-1)]}
    alone = {(v, 7.0) for v in (3.5, 3.0, 2.0, 1.0)} | {(6.0, v) for v in (4.5, 4.0, 2.0)}
    pairs = {tuple(r) for r in np.concatenate(mv.inner_grid(geo, X[:1], B[:1], vocab, np.array([[True, True]]), 6),
                                                axis=1)[0] if not np.isnan(r).any()}
    assert alone <= rows and pairs <= rows and rows == alone | pairs


def test_a_refinement_round_asks_the_answers_edges_ahead_of_its_spread(monkeypatch):
    """At 2 x 32 from a proposal far past both splits, round two reaches the nearest accepted row (3, 4) through
    the answer's edges; with none (``EDGE_ROWS`` 0) its spread of moves stops at (3, 4.5)."""
    import learners.tabular.budget_search as bs
    from envs.black_box import Budget

    world = _staircase_world()
    geo = WorldGeometry.of(world)
    vocab = [np.array([1.0, 2.0, 3.0, 3.5, 6.0, 6.5, 7.0, 8.0]), np.array([2.0, 4.0, 4.5, 5.0, 5.5, 7.0, 7.5, 9.0])]
    X, P = np.array([[0.0, 0.0]]), np.array([[[6.0, 7.0]]])

    def answer():
        bb = BlackBoxModel(world.model)
        with bb.budget(Budget(2, 32), agents=1):
            return bs.budget_search(bb, geo, X, P, Budget(2, 32), vocab=vocab, steps=True).CF[0]

    np.testing.assert_array_equal(answer(), [3.0, 4.0])
    monkeypatch.setattr(bs, "EDGE_ROWS", 0)
    np.testing.assert_array_equal(answer(), [3.0, 4.5])


def _edge_copies():
    """Two copies of the split edge 5.5 of ``threshold_world`` (float32(x0) > 5.5) 2e-13 apart, either side of
    the midpoint between float32(5.5) and the next float32: the lower reads as 5.5 (on the split), the upper
    as past it."""
    lo32 = np.float64(np.float32(5.5))
    mid = (lo32 + np.float64(np.nextafter(np.float32(5.5), np.float32(10.0)))) / 2
    return mid - 1e-13, mid + 1e-13


def test_vocab_sides_keep_each_edges_upward_copy_going_up_and_its_downward_copy_going_down():
    """Copies of one edge (float noise of the labels' unscaling) collapse to their largest for upward moves and
    their smallest for downward ones; other values, and a vocabulary without copies, stay as they are."""
    from learners.tabular.steps import vocab_sides

    a, b = _edge_copies()
    up, down = vocab_sides(np.array([1.0, a, b, 7.0]))
    np.testing.assert_array_equal(up, [1.0, b, 7.0])
    np.testing.assert_array_equal(down, [1.0, a, 7.0])
    plain = np.array([1.0, 2.0, 2.0001, 7.0])
    for side in vocab_sides(plain):
        np.testing.assert_array_equal(side, plain)


def test_every_vocabulary_move_takes_the_copy_that_crosses_the_split():
    """On a forest that reads float32, of two copies of its edge only the upper crosses it going up and only the
    lower going down; the values going up (``first_vocab_values``, the corners, the snaps, the inner values of
    an answer past the edge, the step trades' give-backs and partners) each take the upper, going down the lower."""
    import learners.tabular.moves as mv
    from learners.tabular.corners import nearest_corners
    from learners.tabular.first_round import _snap
    from learners.tabular.steps import vocab_between, vocab_past

    world = threshold_world()
    geo = WorldGeometry.of(world)
    a, b = _edge_copies()
    assert world.model.predict(np.array([[b, 0.0]]))[0] and not world.model.predict(np.array([[a, 0.0]]))[0]
    vocab = [np.array([2.0, a, b, 8.0]), np.zeros(0)]
    below, above = np.array([[1.0, 0.0]]), np.array([[9.0, 0.0]])
    F = first_vocab_values(geo, below, vocab, 2)
    assert F[0, 0, 0].tolist() == [2.0, b]
    assert first_vocab_values(geo, above, vocab, 2)[1, 0, 0].tolist() == [8.0, a]
    corners_up = nearest_corners(geo, below, vocab, 3)[0][0, :, 0]
    assert b in corners_up and a not in corners_up
    assert _snap(geo, below, np.array([[[5.0, 0.0]]]), vocab)[0, 0, 0] == b
    assert _snap(geo, above, np.array([[[6.0, 0.0]]]), vocab)[0, 0, 0] == a
    assert mv.inner_values(geo, below, np.array([[8.0, 0.0]]), vocab, 2)[0, 0].tolist() == [b, 2.0]
    assert mv.inner_values(geo, above, np.array([[2.0, 0.0]]), vocab, 2)[0, 0].tolist() == [a, 8.0]
    assert vocab_between(vocab[0], np.array([1.0]), np.array([8.0]), 2)[0].tolist() == [b, 2.0]
    assert vocab_past(vocab[0], np.array([2.0]), np.array([True]), 2)[0].tolist() == [b, 8.0]
    assert vocab_past(vocab[0], np.array([8.0]), np.array([False]), 2)[0].tolist() == [a, 2.0]
