"""The tabular polish (``learners/tabular/polish.py``): the known optimum of a split, trades against
brute force, the linear-piece step and LP against an LP's optimum and sampled points of the piece."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.models import split_limits
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular import NearestCfeGenerator, TabularLabels, WorldGeometry, accepts
from tests.tabular_worlds import threshold_world, toy_mlp_world


def test_polish_reaches_the_known_optimum():
    """Brute force knows the nearest counterfactual: x0 just above 5.5, x1 unchanged."""
    world = threshold_world()
    X_train = np.array([[1.0, 3.0], [2.0, 7.0], [4.0, 1.0]])
    CF_train = np.array([[9.0, 3.0], [8.0, 2.0], [7.5, 1.0]])  # far answers, and one changing x1 needlessly
    gen = NearestCfeGenerator(k=3).fit(world, TabularLabels(X_train, CF_train, np.ones(3)))
    X = np.array([[3.0, 4.0], [0.5, 9.0]])
    rec = gen.recommend(world, X)
    assert rec.found.all()
    for i in range(2):
        assert rec.CF[i, 1] == X[i, 1]  # the needless change was dropped
        assert np.float32(rec.CF[i, 0]) > 5.5  # accepted ...
        # ... exactly at the split: the smallest float64 sklearn's float32 test sends right of 5.5
        assert rec.CF[i, 0] == split_limits(5.5)[1]


@settings(max_examples=40, deadline=None)
@given(w0=st.floats(0.5, 5.0), w1=st.floats(0.5, 5.0), need=st.floats(5.0, 60.0), start=st.integers(0, 1))
def test_trades_shorten_and_never_beat_the_brute_force_optimum(w0, w1, need, start):
    """Two integer features and a linear boundary: a trade gives one feature back and the other
    takes it up. The result is accepted, no farther than the start, and no nearer than the
    brute-force optimum over every integer point."""
    from envs.models import LinearModel
    from learners.tabular import trade_sweep

    schema = FeatureSchema((Feature("a", "numeric", 0, 20, integer=True), Feature("b", "numeric", 0, 40, integer=True)))
    world = TabularWorld("toy/linear", schema, LinearModel(np.array([w0, w1]), -need))
    geo = WorldGeometry.of(world)
    x = np.array([[0.0, 0.0]])
    grid = np.array(np.meshgrid(np.arange(21.0), np.arange(41.0), indexing="ij")).reshape(2, -1).T
    ok = accepts(world, grid)
    if not ok.any():
        return
    best = geo.distance(x, grid[ok]).min()
    # start from the accepted point that changes one feature only (the farther of the two if both exist)
    singles = [p for p in grid[ok] if (p == 0).sum() == 1]
    if not singles:
        return
    c = np.array([max(singles, key=lambda p: geo.distance(x, p[None])[0]) if start else singles[0]])
    out = trade_sweep(world, geo, x, c)
    assert accepts(world, out).all()
    assert geo.distance(x, out)[0] <= geo.distance(x, c)[0] + 1e-12
    assert geo.distance(x, out)[0] >= best - 1e-12


def test_a_trade_beats_the_coordinate_optimum():
    """3a + 2b >= 40 from (0, 0), b's span twice a's: (14, 0) cannot shrink along a alone (13 fails),
    yet giving a back and taking b up is nearer."""
    from envs.models import LinearModel
    from learners.tabular import trade_sweep

    schema = FeatureSchema((Feature("a", "numeric", 0, 20, integer=True), Feature("b", "numeric", 0, 40, integer=True)))
    world = TabularWorld("toy/linear", schema, LinearModel(np.array([3.0, 2.0]), -40.0))
    geo = WorldGeometry.of(world)
    x, c = np.array([[0.0, 0.0]]), np.array([[14.0, 0.0]])
    assert accepts(world, c).all() and not accepts(world, np.array([[13.0, 0.0]])).all()
    out = trade_sweep(world, geo, x, c)
    assert accepts(world, out).all() and geo.distance(x, out)[0] < geo.distance(x, c)[0]


def test_a_large_integer_change_is_traded_in_shares():
    """German MLP's case: a wide integer feature (an amount, span 10,000) changed by thousands of units
    where a narrow one (span 60) buys more score per unit of distance. Give-backs of 1-16 units free
    too little room to pay for one month; shares of the change do: from (9,100, 0) the trade lands
    within 10% of the brute-force optimum (45 months alone), the old steps alone stay at 1.2x."""
    from envs.models import LinearModel
    from learners.tabular import trade_sweep

    schema = FeatureSchema((Feature("amount", "numeric", 0, 10_000, integer=True),
                            Feature("months", "numeric", 0, 60, integer=True)))
    world = TabularWorld("toy/wide", schema, LinearModel(np.array([0.01, 2.0]), -90.0))
    geo = WorldGeometry.of(world)
    x, c = np.array([[0.0, 0.0]]), np.array([[9100.0, 0.0]])
    assert accepts(world, c).all()
    grid = np.array(np.meshgrid(np.arange(0.0, 10_001.0), np.arange(61.0), indexing="ij")).reshape(2, -1).T
    best = geo.distance(x, grid[accepts(world, grid)]).min()
    out = trade_sweep(world, geo, x, c)
    assert accepts(world, out).all()
    assert geo.distance(x, out)[0] <= best * 1.10


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_region_step_reaches_the_l1_optimum_of_a_linear_model(seed):
    """On LR the linear piece is the whole model, so the fractional fill is the l1 optimum: it meets an
    LP's optimum (scipy's HiGHS) from any accepted start, and is accepted."""
    from scipy.optimize import linprog

    from envs.models import LinearModel
    from learners.tabular.geometry import MARGIN
    from learners.tabular.pieces import region_step

    rng = np.random.default_rng(seed)
    D = 4
    schema = FeatureSchema(tuple(Feature(f"f{j}", "numeric", 0, float(rng.integers(5, 50)),
                                         mutability=("free", "increase", "decrease")[j % 3]) for j in range(D)))
    w = rng.normal(0, 1, D)
    world = TabularWorld("toy/region", schema, LinearModel(w, 0.0))
    geo = WorldGeometry.of(world)
    span = geo.span
    x = rng.uniform(0, 1, D) * span
    world.model.b = float(-(x @ w) - rng.uniform(0.1, 2.0))  # the agent is rejected by a margin
    lo, hi = geo.box(x[None])
    # an accepted start: the box corner the weights favour, if it is accepted
    start = np.where(w > 0, hi[0], lo[0])
    if start @ w + world.model.b < MARGIN * 10:
        return  # no recourse in the box
    R = region_step(world, geo, x[None], start[None], rounds=2)[0]
    # the LP: min sum |d_j| / span_j  s.t.  w . (x + d) + b >= margin, box; d = u - v, u, v >= 0
    c = np.concatenate([1 / span, 1 / span])
    A = -np.concatenate([w, -w])[None]
    res = linprog(c, A_ub=A, b_ub=[(x @ w) + world.model.b - MARGIN],
                  bounds=[(0, hi[0, j] - x[j]) for j in range(D)] + [(0, x[j] - lo[0, j]) for j in range(D)],
                  method="highs")
    assert res.status == 0
    got = (np.abs(R - x) / span).sum()
    assert world.model.score(R[None])[0] >= MARGIN
    assert got <= res.fun * (1 + 1e-5) + 1e-12


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_piece_optimum_is_the_optimum_over_the_answers_piece(seed):
    """On a random ReLU MLP the LP's answer is accepted, never farther than the start, and no point of
    the start's linear piece that the model accepts is nearer (5,000 sampled points of the box, kept
    where every unit is on the start's side: a second route). Agents solved together (block-diagonal
    LPs) get what each gets alone."""
    from learners.tabular.geometry import MARGIN
    from learners.tabular.pieces import piece_optimum

    rng = np.random.default_rng(seed)
    world = toy_mlp_world(rng)
    geo = WorldGeometry.of(world)
    model = world.model
    X = rng.uniform(0, 1, (40, 3)) * geo.span
    lo, hi = geo.box(X)
    S = np.stack([rng.uniform(lo[i], hi[i], (200, 3)) for i in range(len(X))])  # candidate starts per agent
    scores = model.score(S.reshape(-1, 3)).reshape(len(X), -1)
    rejected = model.score(X) < 0
    has = (scores >= 10 * MARGIN).any(1) & rejected
    if has.sum() < 2:
        return
    X, S, scores, lo, hi = X[has], S[has], scores[has], lo[has], hi[has]
    start = S[np.arange(len(X)), scores.argmax(1)]  # an accepted start far from the boundary
    together = piece_optimum(world, geo, X, start)
    alone = np.stack([piece_optimum(world, geo, X[i:i + 1], start[i:i + 1])[0] for i in range(len(X))])
    np.testing.assert_allclose(together, alone, rtol=1e-6, atol=1e-6 * geo.span.max())
    assert (model.score(together) >= MARGIN).all()
    d_start, d_lp = geo.distance(X, start), geo.distance(X, together)
    assert (d_lp <= d_start + 1e-12).all()

    def pattern(R):
        return np.concatenate([h > 0 for h in model.hidden(R)], 1)

    for i in range(len(X)):
        P = rng.uniform(lo[i], hi[i], (5000, 3))
        same = (pattern(P) == pattern(start[i:i + 1])).all(1) & (model.score(P) >= 2 * MARGIN)
        if same.any():
            assert geo.distance(X[i:i + 1], P[same]).min() >= d_lp[i] - 1e-6


def test_piece_optimum_leaves_other_models_and_missing_answers_alone():
    """A tree ensemble has no linear pieces: answers come back as they were; a row without an answer
    (NaN) stays NaN."""
    from learners.tabular.pieces import piece_optimum

    rng = np.random.default_rng(0)
    world = toy_mlp_world(rng)
    geo = WorldGeometry.of(world)
    X = rng.uniform(0, 1, (3, 3)) * geo.span
    C = X.copy()
    C[1] = np.nan
    out = piece_optimum(world, geo, X, C)
    assert np.isnan(out[1]).all()
    tree_world = threshold_world()
    tree_geo = WorldGeometry.of(tree_world)
    T = np.array([[2.0, 3.0], [9.0, 3.0]])
    np.testing.assert_array_equal(piece_optimum(tree_world, tree_geo, np.array([[1.0, 3.0], [1.0, 3.0]]), T), T)


def test_a_start_near_the_margin_leaves_its_chunk_solvable():
    """An agent whose box holds no point scoring twice the margin (its start clears the margin only)
    cannot make the block LP it shares with other agents infeasible: the others are still solved,
    as each is alone, and that agent's start is kept or replaced only by an accepted, nearer point.
    An LR: score = f0 + f1 - 15, f0 may only rise (to 10), f1 only fall, so agent i's best score is
    its own f1 - 5."""
    from envs.models import LinearModel
    from learners.tabular.geometry import MARGIN
    from learners.tabular.pieces import piece_optimum

    schema = FeatureSchema((Feature("f0", "numeric", 0.0, 10.0, mutability="increase"),
                            Feature("f1", "numeric", 0.0, 10.0, mutability="decrease")))
    world = TabularWorld("toy/lr", schema, LinearModel(np.array([1.0, 1.0]), -15.0))
    geo = WorldGeometry.of(world)
    X = np.array([[0.0, 5.0 + 1.9 * MARGIN], [0.0, 8.0], [1.0, 9.0], [2.0, 7.5]])
    start = np.array([[10.0 - 0.4 * MARGIN, X[0, 1]], [10.0, 8.0], [10.0, 9.0], [10.0, 7.5]])
    assert MARGIN <= world.model.score(start[:1])[0] < 2 * MARGIN
    together = piece_optimum(world, geo, X, start)
    alone = np.stack([piece_optimum(world, geo, X[i:i + 1], start[i:i + 1])[0] for i in range(len(X))])
    np.testing.assert_allclose(together[1:], alone[1:], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(together[1:, 0], 15.0 - X[1:, 1], atol=1e-5)  # f0 rises just far enough
    assert world.model.score(together[:1])[0] >= MARGIN
    assert geo.distance(X[:1], together[:1])[0] <= geo.distance(X[:1], start[:1])[0] + 1e-12
