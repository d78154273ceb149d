"""The refinement's moves in ``learners/tabular/budget_search.py`` (issue 56): the trades against a plain loop
over their definition, the moves for a model that answers in steps, and the rows a round's moves leave
unused going to single-feature screens and additions nearer than the answer."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from envs.black_box import BlackBoxModel, Budget
from learners.tabular import WorldGeometry, build_tabular_generator
from learners.tabular.budget_search import (
    RAY,
    STEP_FLIPS,
    STEP_FRACTIONS,
    TRADE_BACKS,
    TRADE_SHARES,
    _brackets,
    _moves,
    _moves_one,
    _trades,
    value_vocabulary,
)
from learners.tabular.moves import SMOOTH_TRADE_SHARES
from learners.tabular.rows import nearest_first
from learners.tabular.slides import SLIDE_BACKS, SLIDE_SHARES, slides
from tests.tabular_worlds import german_train_split, toy_mlp_world


@pytest.fixture(scope="module")
def german():
    return german_train_split()


def _trades_by_loop(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, shares=TRADE_SHARES) -> list[list[np.ndarray]]:
    """Per agent, every trade row written out one at a time from the definition (the second route)."""
    lo, hi = geo.box(X)
    cost, raw = geo.direction_costs, geo.raw_of_column
    num = np.flatnonzero(geo.numeric & ~geo.fixed)
    out = []
    for i in range(len(X)):
        rows = []
        for c in num[geo.rounded[num]]:
            g = B[i, c] - X[i, c]
            for k in TRADE_BACKS:
                if abs(g) <= 1e-12 or abs(g) <= k - 1e-9:
                    continue
                freed = k / geo.span[c] * (cost[raw[c], 1] if g < 0 else cost[raw[c], 0])
                for j in num[num != c]:
                    for sgn, w in ((1.0, cost[raw[j], 0]), (-1.0, cost[raw[j], 1])):
                        if sgn * (B[i, j] - X[i, j]) < -1e-12:  # it changed the other way
                            continue
                        if (sgn > 0 and hi[i, j] <= B[i, j]) or (sgn < 0 and lo[i, j] >= B[i, j]):
                            continue
                        for share in shares:
                            r = B[i].copy()
                            r[c] = B[i, c] - np.sign(g) * k
                            r[j] = B[i, j] + sgn * (share * (freed / w) * geo.span[j])
                            rows.append(r)
        out.append(rows)
    return out


@pytest.mark.parametrize("shares", [TRADE_SHARES, SMOOTH_TRADE_SHARES])
def test_trades_match_a_loop_over_every_combination(german, shares):
    """The vectorized ``_trades`` gives, per agent, exactly the rows of the definition written as a loop (the
    shares of a model in steps and the finer ones of a smooth model)."""
    world, labels, _ = german
    geo = WorldGeometry.of(world)
    X, B = labels.X[:12], labels.CF[:12].copy()
    B[3] = X[3]  # an agent whose answer changes nothing: no trade
    changed = np.abs(B - X) > 1e-12
    R = np.concatenate(_trades(geo, X, B, changed, shares) or [np.zeros((len(X), 0, X.shape[1]))], axis=1)
    expected = _trades_by_loop(geo, X, B, shares)
    assert sum(map(len, expected)) > 0
    for i in range(len(X)):
        got = R[i][~np.isnan(R[i]).any(1)]
        want = np.array(expected[i]).reshape(-1, X.shape[1])
        assert len(got) == len(want)
        np.testing.assert_allclose(got[np.lexsort(got.T)], want[np.lexsort(want.T)], rtol=1e-12, atol=1e-12)


def test_slides_match_a_loop_over_every_combination():
    """``slides``: per agent, exactly the rows of the definition written as a loop (a changed real column
    gives back a share of its change, another changed column with room moves on in its own direction by
    shares of the weighted distance that frees), and none is farther than the answer."""
    rng = np.random.default_rng(3)
    world = toy_mlp_world(rng, D=4)
    geo = WorldGeometry.of(world)
    lo, hi = geo.box(np.zeros((1, 4)) + geo.lower)
    X = geo.lower + rng.random((8, 4)) * (geo.upper - geo.lower)
    B = geo.project(X, (X + rng.normal(0, 3, (8, 4)))[:, None])[:, 0]
    B[2, 1:] = X[2, 1:]  # one changed column: nothing to slide
    B[5] = np.nan  # no answer
    R = slides(geo, X, B)
    lo, hi = geo.box(X)
    cost, raw = geo.direction_costs, geo.raw_of_column
    num = np.flatnonzero(geo.numeric & ~geo.fixed)
    total = 0
    for i in range(len(X)):
        want = []
        if not np.isnan(B[i]).any():
            for c in num[~geo.rounded[num]]:
                g = B[i, c] - X[i, c]
                for j in num[num != c]:
                    h = B[i, j] - X[i, j]
                    if abs(g) <= 1e-12 or abs(h) <= 1e-12 or (hi[i, j] <= B[i, j] if h > 0 else lo[i, j] >= B[i, j]):
                        continue
                    for q in SLIDE_BACKS:
                        freed = q * abs(g) / geo.span[c] * (cost[raw[c], 1] if g < 0 else cost[raw[c], 0])
                        w = cost[raw[j], 0] if h > 0 else cost[raw[j], 1]
                        for share in SLIDE_SHARES:
                            r = B[i].copy()
                            r[c] = B[i, c] - q * g
                            r[j] = B[i, j] + np.sign(h) * share * freed / w * geo.span[j]
                            want.append(r)
        got = R[i][~np.isnan(R[i]).any(1)]
        want = np.array(want).reshape(-1, X.shape[1])
        assert len(got) == len(want)
        np.testing.assert_allclose(got[np.lexsort(got.T)], want[np.lexsort(want.T)], rtol=1e-12, atol=1e-12)
        if len(got):
            assert (geo.distance(X[i][None], got) <= geo.distance(X[i][None], B[i][None])[0] + 1e-12).all()
        total += len(got)
    assert total > 0


def test_step_moves_flip_a_change_to_the_other_side(german):
    """With ``steps`` the shrinks are ``STEP_FRACTIONS`` of each change and a changed numeric column also
    goes to the first ``STEP_FLIPS`` vocabulary values on the other side of the agent (a forest need not be
    monotone); without, no move crosses the agent."""
    world, labels, _ = german
    geo = WorldGeometry.of(world)
    vocab = value_vocabulary(geo, labels.X, labels.CF)
    X, B = labels.X[:10], labels.CF[:10]
    for steps in (False, True):
        M = _moves_one(geo, X, B, vocab, steps)
        flipped = 0
        for i in range(len(X)):
            R = M[i][~np.isnan(M[i]).any(1)]
            for c in np.flatnonzero(geo.numeric & (np.abs(B[i] - X[i]) > 1e-12)):
                other = np.sign(R[:, c] - X[i, c]) == -np.sign(B[i, c] - X[i, c])
                flipped += int(other.sum())
                v = vocab[c]
                side = v[v < X[i, c]][::-1] if B[i, c] > X[i, c] else v[v > X[i, c]]
                assert np.isin(R[other, c], side[:STEP_FLIPS]).all()
                if steps and len(side):  # the first value the other way is among the moves
                    assert np.isclose(R[other, c], side[0]).any()
        assert (flipped > 0) == steps
    fractions = _moves_one(geo, X[:1], B[:1], None, True)[0]
    c = int(np.flatnonzero(geo.numeric & (np.abs(B[0] - X[0]) > 1e-12))[0])
    t = (fractions[:, c] - X[0, c]) / (B[0, c] - X[0, c])
    assert np.isin(np.round(t[np.isfinite(t)], 6), np.round(np.asarray(STEP_FRACTIONS + (0.0, 1.0)), 6)).any()


def test_brackets_are_the_farthest_rejected_row_on_each_ray(german):
    """``_brackets`` finds, per start, the largest fraction f < 1 at which a rejected row lies on the start's
    ray, checked against rows built at known fractions: on-ray rows (integer columns rounded) count, rows
    off the ray (another numeric column moved, or past the start) do not, and a start with no on-ray row
    gets 0; the ray's moves then lie inside (f, 1)."""
    world, labels, _ = german
    geo = WorldGeometry.of(world)
    num = geo.numeric & ~geo.fixed
    keep = np.flatnonzero([(np.abs(labels.CF[i] - labels.X[i])[num] > 20).any() for i in range(len(labels.X))])[:6]
    X, B = labels.X[keep], labels.CF[keep]
    S = np.stack([B, np.full_like(B, np.nan)], axis=1)  # a second, empty start per agent

    def on_ray(f: float) -> np.ndarray:
        R = B.copy()
        R[:, geo.numeric] = X[:, geo.numeric] + f * (B[:, geo.numeric] - X[:, geo.numeric])
        return geo.project(X, R[:, None])[:, 0]

    off = on_ray(0.9)
    free = np.flatnonzero(num & (np.abs(B - X) <= 1e-12).all(0))
    off[:, free[0]] += 1.0  # a column the answers leave alone, moved: not on the ray
    R = np.stack([on_ray(0.3), on_ray(0.7), off, on_ray(1.5), np.full_like(B, np.nan)], axis=1)
    lo = _brackets(geo, X, S, R)
    assert lo.shape == (len(X), 2) and (lo[:, 1] == 0).all()
    np.testing.assert_allclose(lo[:, 0], 0.7, atol=0.1)  # integer columns: the fraction of a rounded row
    assert (_brackets(geo, X, S, R[:, [2, 3, 4]]) == 0).all()  # off the ray, beyond the start, unscored
    below = 0
    for bracket in (lo[:, 0], None):
        M = _moves_one(geo, X, B, None, lo=bracket)
        for i in range(len(X)):
            ray = M[i][~np.isnan(M[i]).any(-1)][-len(RAY):]  # the whole change's ray: each agent's last real rows
            c = int(np.argmax(np.where(num, np.abs(B[i] - X[i]) / geo.span, -1)))
            t = (ray[:, c] - X[i, c]) / (B[i, c] - X[i, c])
            tol = 0.5 / abs(B[i, c] - X[i, c])  # rounding
            assert (t < 1 + tol).all()
            if bracket is not None:
                assert (t > lo[i, 0] - tol).all()
            else:
                below += int((t < lo[i, 0] - tol).sum())
    assert below > 0  # without the bracket the ray reaches below it


@pytest.mark.parametrize("budget", [Budget(2, 256), Budget(6, 1200)])
def test_no_row_is_asked_twice_and_the_answers_hold(german, budget):
    """The moves, additions, screens and corners overlap; a row asked twice would be a row of the budget
    lost. Per agent, no row is scored twice across all its rounds, the rows stay within the budget, and
    every answer is accepted by the model."""
    world, labels, test = german
    gen = build_tabular_generator("proposer", {"max_epochs": 20}).fit(world, labels)
    for x in test[:8]:
        bb, rows = BlackBoxModel(world.model), []
        scored = bb.predict_proba
        bb.predict_proba = lambda R, scored=scored, rows=rows: (rows.append(np.array(R, float)), scored(R))[1]
        rec = gen.recommend_within(replace(world, model=bb), x[None], budget)
        asked = np.concatenate(rows)
        assert len(asked) <= budget.rows
        assert len(np.unique(asked, axis=0)) == len(asked)
        if rec.found[0]:
            assert world.model.predict_proba(rec.CF[:1]).ravel()[-1] > 0.5


@pytest.mark.parametrize("budget", [Budget(2, 256), Budget(4, 600)])
def test_an_answer_does_not_depend_on_the_rest_of_the_batch(german, budget):
    """Every per-round count (rows, starts, additions, the spread over nearness ranks) is each agent's own:
    a batch of agents gets exactly the answers each agent gets alone, rows scored included."""
    world, labels, test = german
    gen = build_tabular_generator("proposer", {"max_epochs": 20}).fit(world, labels)
    X = test[:10]
    batch = gen.recommend_within(replace(world, model=BlackBoxModel(world.model)), X, budget)
    for i in range(len(X)):
        one = gen.recommend_within(replace(world, model=BlackBoxModel(world.model)), X[i:i + 1], budget)
        assert one.found[0] == batch.found[i]
        np.testing.assert_array_equal(one.CF[0], batch.CF[i])
        assert one.rows[0] == batch.rows[i]


def test_moves_of_all_starts_at_once_are_each_starts_own(german):
    """``_moves`` builds every start's moves in one call (a request of one agent pays the numpy overhead
    once, not per start); per agent and start, the rows are those ``_moves_one`` builds for that start
    alone (the second route), as a set: the layout of NaN rows may differ with the batch."""
    world, labels, test = german
    geo = WorldGeometry.of(world)
    vocab = value_vocabulary(geo, labels.X, labels.CF)
    X = test[:5]
    rng = np.random.default_rng(3)
    S = geo.project(X, X[:, None, :] + rng.normal(0, 0.3, (5, 3, X.shape[1])) * geo.span * (rng.random((5, 3, X.shape[1])) < 0.3))
    S[1, 2] = np.nan  # a start that is not there moves nothing
    for steps in (False, True):
        M = _moves(geo, X, S, vocab, steps).reshape(5, 3, -1, X.shape[1])
        for t in range(3):
            alone = _moves_one(geo, X, S[:, t], vocab, steps)
            for i in range(5):
                a, b = M[i, t], alone[i]
                a, b = a[~np.isnan(a).any(-1)], b[~np.isnan(b).any(-1)]
                assert np.array_equal(np.unique(a, axis=0), np.unique(b, axis=0))


def _nearest_first_by_loop(geo, X, C, rows, below, caps):
    """Per agent: the rows nearer than ``below``, sorted by distance (stable), a row equal to the one
    before it dropped, then ``caps`` of them spread over the nearness ranks (the second route)."""
    out = np.full((len(X), rows, X.shape[1]), np.nan)
    for i in range(len(X)):
        live = [q for q in range(C.shape[1]) if not np.isnan(C[i, q]).any()]
        d = {q: float(geo.distance(X[i:i + 1], C[i, q][None])[0]) for q in live}
        ranked = sorted((q for q in live if d[q] < below[i] - 1e-15 and geo.keeps(X[i], C[i, q][None])[0]),
                        key=lambda q: d[q])
        kept = [q for j, q in enumerate(ranked) if j == 0 or not np.array_equal(C[i, q], C[i, ranked[j - 1]])]
        k = min(rows, int(caps[i]))
        n = len(kept)
        picks = range(min(n, k)) if n <= k else [int(np.floor(p / max(k - 1, 1) * (n - 1))) for p in range(k)]
        for p, j in enumerate(picks):
            out[i, p] = C[i, kept[j]]
    return out


@pytest.mark.parametrize("agents", [6, 1])
@pytest.mark.parametrize("rules", [False, True])
def test_nearest_first_matches_a_loop(german, rules, agents):
    """``rows.nearest_first`` compares only rows at equal distance when it drops repeats, and checks the
    world's rules (German's default: weights, steps, PLAF) only on rows still in the running; against a
    loop that compares every pair of neighbours in distance order, with repeated rows, NaN rows and caps."""
    from data_gen.default_rules import default_rules

    world, _, test = german
    world = replace(world, rules=default_rules("german")) if rules else world
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(5)
    X, n = test[:agents], agents
    for _ in range(25):
        Q = int(rng.integers(1, 60))
        C = geo.project(X, X[:, None, :] + rng.normal(0, 0.2, (n, Q, X.shape[1])) * geo.span
                        * (rng.random((n, Q, X.shape[1])) < 0.3))
        C[:, rng.integers(0, Q, Q // 3)] = C[:, rng.integers(0, Q, Q // 3)]  # repeats
        C[rng.random((n, Q)) < 0.1] = np.nan
        rows = int(rng.integers(1, 30))
        below = np.where(rng.random(n) < 0.3, np.inf, rng.random(n) * 2)
        caps = rng.integers(0, rows + 1, n)
        got = nearest_first(geo, X, C, rows, below, caps)
        want = _nearest_first_by_loop(geo, X, C, rows, below, caps)
        assert np.array_equal(got, want, equal_nan=True)


def test_an_agent_no_proposal_reached_gets_the_screens_in_round_two(german):
    """Proposals that change nothing (every ray is the agent itself): round one's screens are the only rows
    that can be accepted; where they are not, round two's unused rows go to the screens (one feature at a
    time, coarsest first), within the budget, no row twice, every answer accepted by the model."""
    from learners.tabular.budget_search import budget_search

    world, labels, test = german
    geo = WorldGeometry.of(world)
    X = test[:10]
    P = np.repeat(X[:, None, :], 4, axis=1)  # no change proposed
    bb = BlackBoxModel(world.model)
    with bb.budget(Budget(2, 40), agents=len(X)):  # round one: 20 rows, too few for any screen
        res = budget_search(bb, geo, X, P, Budget(2, 40))
    assert bb.calls == 2 and (res.rows <= 40).all()
    assert res.found.sum() >= 5  # round two's screens answer them
    assert world.accepts(res.CF[res.found]).all()


def test_donors_answer_the_agents_nothing_else_reached_each_on_its_own(german):
    """Agents still unanswered after the far round get their training neighbours' transplants in the later
    rounds (``donors``), each agent's next donors after those its own rows reached: more agents answered
    than without donors, every answer accepted, within the budget, and each agent's answer the same alone
    as in the batch."""
    from learners.tabular.budget_search import budget_search

    world, labels, test = german
    geo = WorldGeometry.of(world)
    gen = build_tabular_generator("proposer", {"proposals": "averages"}).fit(world, labels)
    X = test[:10]
    P = np.repeat(X[:, None, :], 4, axis=1)  # no change proposed

    def run(A: np.ndarray, with_donors: bool):
        bb = BlackBoxModel(world.model)
        donors = (lambda a, start, k: gen._donor_rows(A[a], start, k)) if with_donors else None
        with bb.budget(Budget(4, 24), agents=len(A)):  # round two's 7 rows: too few screens for most
            return budget_search(bb, geo, A, np.repeat(A[:, None, :], 4, axis=1), Budget(4, 24), donors=donors)

    plain, helped = run(X, False), run(X, True)
    assert helped.found.sum() > plain.found.sum() and (helped.rows <= 24).all()
    assert world.accepts(helped.CF[helped.found]).all()
    for i in range(len(X)):
        alone = run(X[i:i + 1], True)
        assert alone.found[0] == helped.found[i]
        assert np.array_equal(alone.CF[0], helped.CF[i], equal_nan=True)
    assert P.shape == (10, 4, X.shape[1])


def test_found_agents_get_their_donors_in_a_round_a_later_round_follows(german):
    """An answer found far out: where a round has rows its moves leave unused and a later round follows,
    the training neighbours' transplants nearer than the answer are asked too. With donors that hold each
    agent's MACE answer, every agent ends at most that far; the moves alone leave some farther."""
    from learners.tabular.budget_search import budget_search

    world, labels, _ = german
    geo = WorldGeometry.of(world)
    X, CF = labels.X[:12], labels.CF[:12]
    P = (X + 3.0 * (CF - X))[:, None, :]  # one proposal, three times MACE's change

    def donors(a, start, k):
        out = np.full((len(a), k, X.shape[1]), np.nan)
        out[:, 0] = np.where((start == 0)[:, None], CF[a], np.nan)
        return out

    def run(with_donors: bool):
        bb = BlackBoxModel(world.model)
        with bb.budget(Budget(3, 6000), agents=len(X)):
            return budget_search(bb, geo, X, P, Budget(3, 6000), donors=donors if with_donors else None)

    plain, helped = run(False), run(True)
    d_mace = geo.distance(X, CF)
    assert helped.found.all() and world.accepts(helped.CF).all()
    assert (helped.distance <= d_mace * (1 + 1e-9)).all()
    assert (plain.distance > d_mace * (1 + 1e-9)).any()


def test_a_row_that_is_no_record_is_never_asked_nor_the_answer():
    """A vocabulary value that is not whole on an integer column (a labeler's float noise: 5.6 where the
    model's split is at 5.5) would make a refinement row (the answer's edge just inside it) that the model
    accepts and that is nearer than any whole value: the search never asks it, and its answer is whole.
    ``_no_record`` against ``geo.violations`` on rows with every kind of break."""
    from envs.models import Tree, TreeEnsemble
    from envs.schema import Feature, FeatureSchema
    from envs.tabular import TabularWorld
    from learners.tabular.budget_search import _no_record, budget_search

    schema = FeatureSchema((Feature("x0", "numeric", 0.0, 10.0), Feature("x1", "numeric", 0, 9, integer=True)))
    tree = Tree(np.array([1, -1, -1]), np.array([2, -1, -1]), np.array([1, 0, 0]), np.array([5.5, 0, 0]),
                np.array([0.0, 0.0, 1.0]), np.array([0.0, 1.0, 0.0]))  # accept iff x1 > 5.5
    world = TabularWorld("toy/integer", schema, TreeEnsemble([tree], 2))
    geo = WorldGeometry.of(world)
    X = np.array([[3.0, 2.0]])
    P = np.array([[[3.0, 8.0]]])  # accepted, two steps past the split
    vocab = [np.zeros(0), np.array([5.6, 8.0])]
    bb = BlackBoxModel(world.model)
    asked = []
    real = bb.predict_proba
    bb.predict_proba = lambda R: (asked.append(np.array(R)), real(R))[1]
    with bb.budget(Budget(2, 64)):
        res = budget_search(bb, geo, X, P, Budget(2, 64), vocab=vocab, steps=True)
    rows = np.concatenate(asked)
    assert not (np.abs(rows[:, 1] - np.round(rows[:, 1])) > 1e-9).any()
    assert res.found[0] and res.CF[0, 1] == 6.0  # the first whole value past the split
    C = np.array([[[3.0, 6.0], [3.0, 5.6], [11.0, 6.0], [3.0, np.nan]]])
    assert _no_record(geo, X, C).tolist() == [[False, True, True, False]]
    assert _no_record(geo, X, C[:, :3]).tolist()[0] == geo.violations(np.repeat(X, 3, 0), C[0, :3]).tolist()
