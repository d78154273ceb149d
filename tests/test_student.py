"""``learners/tabular/student.py``: a boosted stand-in of a forest learnt from its answers on vocabulary corners
(issue 56): its picks are the nearest corners it accepts, checked against a loop over the pool; it learns a
one-tree world exactly; its fit-time calls are counted; it survives JSON; it leads round one of the search; the
proposer fits one only where the model answers in steps, and saves and loads it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from envs.black_box import BlackBoxModel, Budget
from envs.models import LinearModel, Tree, TreeEnsemble
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from learners.tabular import TabularGenerator, WorldGeometry, build_tabular_generator
from learners.tabular.budget_search import budget_search
from learners.tabular.corners import nearest_corners
from learners.tabular.student import CornerStudent
from tests.tabular_worlds import german_mace_labels, german_rejected, train_labels

D = 3
VOCAB = [np.array([20.0, 51.0, 70.0]), np.array([3.0, 6.0, 9.0]), np.array([4.0, 6.0, 12.0])]


@pytest.fixture(scope="module")
def either() -> TabularWorld:
    """One tree on three features in [0, 100]: accepts x0 > 50, or x1 > 5.5 and x2 > 5.5 together."""
    schema = FeatureSchema(tuple(Feature(f"x{j}", "numeric", 0.0, 100.0) for j in range(D)))
    tree = Tree(np.array([1, 3, -1, -1, 5, -1, -1]), np.array([2, 4, -1, -1, 6, -1, -1]),
                np.array([0, 1, 0, 0, 2, 0, 0]), np.array([50.0, 5.5, 0, 0, 5.5, 0, 0]),
                np.array([0, 0, 1.0, 0, 0, 0, 1.0]), np.array([0, 0, 0, 1.0, 0, 1.0, 0]))
    return TabularWorld("toy/either", schema, TreeEnsemble([tree], D))


def _agents(n: int, seed: int = 0) -> np.ndarray:
    """Rejected agents of ``either``: x0 at most 40, x1 and x2 at most 5."""
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.uniform(0, 40, n), rng.uniform(0, 5, n), rng.uniform(0, 5, n)]).round(1)


@pytest.fixture(scope="module")
def student(either) -> tuple[CornerStudent, BlackBoxModel]:
    bb = BlackBoxModel(either.model)
    s = CornerStudent(max_iter=60).fit(replace(either, model=bb), WorldGeometry.of(either), _agents(40), VOCAB,
                                       drawn=150, corners=26, seed=0)
    return s, bb


@pytest.fixture(scope="module")
def pair(either) -> CornerStudent:
    """Two members on independent draws (seeds 0 and 1), few enough rows each that they disagree."""
    return CornerStudent(max_iter=20, members=2).fit(either, WorldGeometry.of(either), _agents(40), VOCAB, drawn=30,
                                                     corners=8, seed=0)


@pytest.mark.parametrize("first", [2, 256])
@pytest.mark.parametrize("distinct", [True, False])
@pytest.mark.parametrize("pool", [None, 3, 8])
@pytest.mark.parametrize("members", [1, 2])
def test_picks_are_the_nearest_corners_the_student_accepts(either, student, pair, members, pool, distinct, first,
                                                           monkeypatch):
    """Against a loop over the whole pool, whether the corners are looked at in one stage or in several
    (``STAGE_FIRST`` 2: 2, 6, 18, ... of them, each agent stopping once it has its k picks); with two members, a
    corner either member's own trees accept."""
    s = student[0] if members == 1 else pair
    geo = WorldGeometry.of(either)
    X = _agents(12, seed=1)
    monkeypatch.setattr("learners.tabular.student.PICK_ROWS", 40)  # the agents' pools scored a few agents at a time
    monkeypatch.setattr("learners.tabular.student.STAGE_FIRST", first)
    monkeypatch.setattr("learners.tabular.student.STAGE_GROWTH", 3)
    for k in (1, 3, 40):
        got = s.picks(geo, X, VOCAB, k, pool=pool, distinct=distinct)
        R, d = nearest_corners(geo, X, VOCAB, s.pool if pool is None else pool, cuts=s.cuts(D) if distinct else None)
        for i in range(len(X)):  # the second route: a loop over the pool, nearest first
            want = [R[i, j] for j in range(R.shape[1]) if np.isfinite(d[i, j])
                    and max(1.0 / (1.0 + np.exp(-t.score(R[i, j][None])[0])) for t in s.members_) > s.threshold][:k]
            assert got.shape == (len(X), k, D)
            assert np.array_equal(got[i, :len(want)], np.array(want).reshape(-1, D))
            assert np.isnan(got[i, len(want):]).all()
    one = s.picks(geo, X[3:4], VOCAB, 3, pool=pool, distinct=distinct)  # an agent's picks do not depend on its batch
    assert np.array_equal(np.nan_to_num(one[0], nan=-1),
                          np.nan_to_num(s.picks(geo, X, VOCAB, 3, pool=pool, distinct=distinct)[3], nan=-1))
    with pytest.raises(ValueError, match="pool: must be >= 1"):
        s.picks(geo, X, VOCAB, 3, pool=0)


def test_the_student_cuts_are_its_trees_split_points(either, student):
    """The cuts (a second route: every internal node's flip point, by a loop) and the corners they keep."""
    s, _ = student
    want = [set() for _ in range(D)]
    for t in s.members_[0].trees:
        upper = t.limits()[0]
        for node in range(len(t.left)):
            if t.left[node] >= 0:
                want[int(t.feature[node])].add(float(upper[node]))
    assert [sorted(w) for w in want] == [list(c) for c in s.cuts(D)]
    assert any(40.0 <= c < 51.0 for c in s.cuts(D)[0])  # it found the tree's split of x0 (agents below 40, 51 accepted)
    geo = WorldGeometry.of(either)
    X = _agents(12, seed=5)
    every, _ = nearest_corners(geo, X, VOCAB, 27)
    told, _ = nearest_corners(geo, X, VOCAB, 27, cuts=s.cuts(D))
    assert np.isfinite(told).all(1).sum() <= np.isfinite(every).all(1).sum()  # fewer corners, never more


def test_the_student_learns_a_one_tree_world(either, student):
    """Its first pick is the nearest accepted corner (enumerated through the true model) for every agent."""
    s, _ = student
    geo = WorldGeometry.of(either)
    X = _agents(30, seed=2)
    first = s.picks(geo, X, VOCAB, 1)[:, 0]
    R, d = nearest_corners(geo, X, VOCAB, 100)
    for i in range(len(X)):
        live = np.isfinite(d[i])
        ok = either.model.predict_proba(R[i, live]) > 0.5
        assert np.array_equal(first[i], R[i, live][np.argmax(ok)])


def test_fit_counts_its_calls_and_says_when_there_is_nothing_to_learn(either, student):
    s, bb = student
    assert s.info_["rows"] > 0 and 0 < s.info_["accepted"] < 1 and s.info_["agents"] == 150
    assert bb.rows >= s.info_["rows"] and bb.calls >= 2  # the corners, and drawing rejected agents
    never = replace(either, model=BlackBoxModel(LinearModel(np.zeros(D), -5.0)))
    with pytest.raises(ValueError, match="corners: the model answered all"):
        CornerStudent(max_iter=5).fit(never, WorldGeometry.of(either), _agents(10), VOCAB, drawn=20, corners=5)
    with pytest.raises(ValueError, match="drawn, corners"):
        CornerStudent().fit(either, WorldGeometry.of(either), _agents(10), VOCAB, drawn=20, corners=0)
    with pytest.raises(ValueError, match="corners: at most the 1000 nearest"):
        CornerStudent().fit(either, WorldGeometry.of(either), _agents(10), VOCAB, drawn=20, corners=1001)


def test_the_student_survives_json(either, student):
    s, _ = student
    geo = WorldGeometry.of(either)
    X = _agents(10, seed=3)
    again = CornerStudent.from_dict(s.to_dict())
    assert again.info_ == s.info_ and again.threshold == s.threshold and again.distinct == s.distinct
    plain = CornerStudent.from_dict({**s.to_dict(), "distinct": False})
    old = {k: v for k, v in s.to_dict().items() if k != "distinct"}  # saved before the option: every corner
    assert not plain.distinct and not CornerStudent.from_dict(old).distinct
    assert CornerStudent.from_dict({**s.to_dict(), "distinct": True}).distinct
    assert np.array_equal(np.nan_to_num(plain.picks(geo, X, VOCAB, 5), nan=-1),
                          np.nan_to_num(s.picks(geo, X, VOCAB, 5, distinct=False), nan=-1))
    assert np.array_equal(np.nan_to_num(again.picks(geo, X, VOCAB, 5), nan=-1),
                          np.nan_to_num(s.picks(geo, X, VOCAB, 5), nan=-1))


class _Recording:
    """A model that keeps the rows of every call."""

    def __init__(self, model) -> None:
        self.model, self.calls = model, []

    def predict_proba(self, X):
        self.calls.append(np.array(X))
        return self.model.predict_proba(X)


def test_picks_lead_round_one_inside_the_grid_share(either):
    geo = WorldGeometry.of(either)
    X = _agents(2, seed=4)
    P = np.repeat(X[:, None, :], 2, axis=1)
    P[:, 0, 1], P[:, 1, 0] = 30.0, 45.0  # proposals: x1 up, x0 up (neither accepted alone)
    picks = np.array([[[X[0, 0], 9.0, 12.0], [np.nan] * D], [[70.0, X[1, 1], X[1, 2]], [51.0, X[1, 1], X[1, 2]]]])
    for i, k in ((0, 1), (1, 2)):  # each agent alone: its call's first rows are its picks
        rec, plain = _Recording(either.model), _Recording(either.model)
        res = budget_search(rec, geo, X[i:i + 1], P[i:i + 1], Budget(2, 64), vocab=VOCAB, grid_share=0.25, steps=True,
                            picks=picks[i:i + 1])
        budget_search(plain, geo, X[i:i + 1], P[i:i + 1], Budget(2, 64), vocab=VOCAB, grid_share=0.25, steps=True)
        assert np.array_equal(rec.calls[0][:k], picks[i, :k])
        assert len(rec.calls[0]) <= 32 and len(plain.calls[0]) <= 32 and res.rows.max() <= 64  # round one's half
        assert res.found.all()


def test_the_proposer_fits_a_student_only_in_steps_and_saves_it(tmp_path):
    world, _ = german_rejected()
    labels, train, test = german_mace_labels()
    tl = train_labels(labels, train)
    bb = BlackBoxModel(world.model)
    params = {"max_epochs": 5, "student_agents": 60, "student_corners": 20, "student_memory": str(tmp_path / "memory")}
    gen = build_tabular_generator("proposer", params).fit(replace(world, model=bb), tl)
    info = gen.fit_info_["student"]
    assert list((tmp_path / "memory").glob("answers_*/chunk_*.npz")) and info["rows_remembered"] == 0
    assert gen.student_ is not None and info["rows"] > 0 and bb.rows >= info["rows_asked"] >= info["rows"]
    X = labels.X[test][:8]
    a = gen.recommend_within(replace(world, model=BlackBoxModel(world.model)), X, Budget(2, 256))
    gen.save(tmp_path / "m")
    back = TabularGenerator.load(tmp_path / "m")
    b = back.recommend_within(replace(world, model=BlackBoxModel(world.model)), X, Budget(2, 256))
    assert back.student_ is not None and np.array_equal(np.nan_to_num(a.CF, nan=-7), np.nan_to_num(b.CF, nan=-7))
    back.params.student_pool = 50  # the corners scored per agent when answering: the proposer's parameter
    want = back.student_.picks(WorldGeometry.of(world), X, back.vocab_, back.params.student_rows, pool=50)
    assert np.array_equal(np.nan_to_num(back._picks(WorldGeometry.of(world), X), nan=-7), np.nan_to_num(want, nan=-7))
    back.params.student_distinct = True  # only the corners it tells apart, whatever the student's own default
    want = back.student_.picks(WorldGeometry.of(world), X, back.vocab_, back.params.student_rows, pool=50, distinct=True)
    assert np.array_equal(np.nan_to_num(back._picks(WorldGeometry.of(world), X), nan=-7), np.nan_to_num(want, nan=-7))
    back.params.student_threshold = 0.1  # the threshold it picks over: the proposer's parameter too
    want = back.student_.picks(WorldGeometry.of(world), X, back.vocab_, back.params.student_rows, pool=50, distinct=True,
                               threshold=0.1)
    assert np.array_equal(np.nan_to_num(back._picks(WorldGeometry.of(world), X), nan=-7), np.nan_to_num(want, nan=-7))
    back.params.student_threshold = 0.3
    assert back._next_picks(WorldGeometry.of(world), X) is None  # "round_one" (the default): round one only
    back.params.student_use = "round_two"  # round two only: none in round one
    assert back._picks(WorldGeometry.of(world), X) is None
    later = back._next_picks(WorldGeometry.of(world), X)
    assert np.array_equal(np.nan_to_num(later(np.array([5, 2]), 7), nan=-7),
                          np.nan_to_num(back.student_.picks(WorldGeometry.of(world), X[[5, 2]], back.vocab_, 7, pool=50,
                                                            distinct=True), nan=-7))
    back.params.student_use = "both"
    assert back._picks(WorldGeometry.of(world), X) is not None and back._next_picks(WorldGeometry.of(world), X)
    import learners.tabular.proposer as proposer_module

    seen = {}
    real = proposer_module.budget_search

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    back.params.student_near_picks = 9  # round two's near picks: the proposer's parameter, handed to the search
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(proposer_module, "budget_search", spy)
        back.recommend_within(replace(world, model=BlackBoxModel(world.model)), X[:2], Budget(2, 256))
    assert seen["near_picks"] == 9 and seen["next_picks"] is not None
    with pytest.raises(ValueError, match="student_use: expected one of round_one, round_two, both"):
        build_tabular_generator("proposer", {"student_use": "never"})
    with pytest.raises(ValueError, match="student_pool: must be >= 1"):
        build_tabular_generator("proposer", {"student_pool": 0})
    smooth = replace(world, model=LinearModel(np.linspace(-0.01, 0.01, X.shape[1]), 0.0))  # no steps: no student
    lin = build_tabular_generator("proposer", params).fit(smooth, tl)
    assert lin.student_ is None and "student" not in lin.fit_info_


class _Dying:
    """A model stopped, as a killed fit would be, at its ``after``-th call of ``size`` rows (the student's calls)."""

    def __init__(self, model, size: int, after: int) -> None:
        self.model, self.size, self.after, self.blocks = model, size, after, 0
        self.n_features = model.n_features

    def predict_proba(self, X):
        if len(X) == self.size:
            if self.blocks == self.after:
                raise RuntimeError("killed")
            self.blocks += 1
        return self.model.predict_proba(X)

    def predict(self, X):
        return self.predict_proba(X) > 0.5


class _Refusing:
    """A model that refuses every row whose column ``c`` is exactly ``value`` (a vocabulary value: corners, not
    the drawn agents, whose values are continuous), and otherwise answers as ``model``."""

    def __init__(self, model, c: int, value: float) -> None:
        self.model, self.c, self.value, self.n_features = model, c, value, model.n_features

    def predict_proba(self, X):
        X = np.atleast_2d(X)
        return np.where(X[:, self.c] == self.value, 0.0, self.model.predict_proba(X))

    def predict(self, X):
        return self.predict_proba(X) > 0.5


def test_an_interrupted_fit_asks_only_what_its_memory_lacks(either, tmp_path):
    geo = WorldGeometry.of(either)
    kw = dict(drawn=150, corners=26, seed=0, call_rows=500)
    plain_bb = BlackBoxModel(either.model)
    plain = CornerStudent(max_iter=60).fit(replace(either, model=plain_bb), geo, _agents(40), VOCAB, **kw)
    assert plain.info_["rows"] > 4 * 500  # several calls
    with pytest.raises(RuntimeError, match="killed"):
        CornerStudent(max_iter=60).fit(replace(either, model=_Dying(either.model, 500, 3)), geo, _agents(40), VOCAB,
                                       memory=tmp_path, **kw)
    assert len(list(tmp_path.glob("answers_*/chunk_*.npz"))) == 3 and not list(tmp_path.glob("**/*tmp*"))
    bb = BlackBoxModel(either.model)
    again = CornerStudent(max_iter=60).fit(replace(either, model=bb), geo, _agents(40), VOCAB, memory=tmp_path, **kw)
    assert again.info_["rows_remembered"] == 3 * 500
    assert bb.rows == plain_bb.rows - 3 * 500 + 256  # the calls it lacked, and one that checks the model
    X = _agents(10, seed=5)
    assert np.array_equal(np.nan_to_num(again.picks(geo, X, VOCAB, 4), nan=-1),
                          np.nan_to_num(plain.picks(geo, X, VOCAB, 4), nan=-1))
    # another model that draws the same agents but answers the corners otherwise: its memory is not this one
    with pytest.raises(ValueError, match="memory: the answers kept in .* are not this model's"):
        CornerStudent(max_iter=5).fit(replace(either, model=_Refusing(either.model, 0, 51.0)), geo, _agents(40), VOCAB,
                                      memory=tmp_path, **kw)


def test_members_each_fit_their_own_draw_and_the_margin_is_the_largest(either, student, pair, tmp_path):
    """Member m of a student is the one-member student of seed + m (the same rows asked, the same trees); the
    margin is their largest; the cuts are every member's; JSON keeps them; a file saved before members loads."""
    geo = WorldGeometry.of(either)
    single = [CornerStudent(max_iter=20).fit(either, geo, _agents(40), VOCAB, drawn=30, corners=8, seed=m)
              for m in (0, 1)]
    R = nearest_corners(geo, _agents(20, seed=6), VOCAB, 27)[0].reshape(-1, D)
    for m in (0, 1):
        assert np.array_equal(pair.members_[m].score(R), single[m].margin(R))
    assert not np.array_equal(single[0].margin(R), single[1].margin(R))  # the draws differ
    assert np.array_equal(pair.margin(R), np.maximum(single[0].margin(R), single[1].margin(R)))
    assert pair.info_["rows"] == single[0].info_["rows"] + single[1].info_["rows"] and len(pair.info_["members"]) == 2
    for j in range(D):
        assert set(pair.cuts(D)[j]) == set(single[0].cuts(D)[j]) | set(single[1].cuts(D)[j])
    back = CornerStudent.from_dict(pair.to_dict())
    assert back.members == 2 and np.array_equal(back.margin(R), pair.margin(R))
    old = {k: v for k, v in student[0].to_dict().items() if k not in ("members", "more_trees")}
    assert np.array_equal(CornerStudent.from_dict(old).margin(R), student[0].margin(R))
    with pytest.raises(ValueError, match="members: must be >= 1"):
        CornerStudent(members=0).fit(either, geo, _agents(10), VOCAB, drawn=20, corners=5)
    with pytest.raises(ValueError, match="student_members: must be >= 1"):
        build_tabular_generator("proposer", {"student_members": 0})


def test_a_threshold_when_answering_is_the_student_fitted_with_it(either, student):
    """``picks(threshold=t)`` is the same student with ``threshold`` t; a lower one never has fewer picks, and
    each agent's picks at the higher one are among them; out of (0, 1) it is refused, here and in the proposer."""
    s, _ = student
    geo = WorldGeometry.of(either)
    X = _agents(12, seed=7)
    for t in (0.05, 0.2, 0.6):
        same = replace(s, threshold=t)
        same.members_ = s.members_
        assert np.array_equal(np.nan_to_num(s.picks(geo, X, VOCAB, 6, threshold=t), nan=-1),
                              np.nan_to_num(same.picks(geo, X, VOCAB, 6), nan=-1))
    low, high = s.picks(geo, X, VOCAB, 27, threshold=0.05), s.picks(geo, X, VOCAB, 27, threshold=0.6)
    for i in range(len(X)):
        lo, hi = low[i][~np.isnan(low[i]).any(1)], high[i][~np.isnan(high[i]).any(1)]
        assert len(lo) >= len(hi) and all((lo == row).all(1).any() for row in hi)
    for bad in (0.0, 1.0):
        with pytest.raises(ValueError, match="threshold: a probability in"):
            s.picks(geo, X, VOCAB, 3, threshold=bad)
        with pytest.raises(ValueError, match="student_threshold: a probability in"):
            build_tabular_generator("proposer", {"student_threshold": bad})


def test_margins_are_computed_once_for_corners_the_student_sends_alike(either, student, pair):
    """``_margins`` scores one corner of each class the student's splits send alike (values on a split point, just
    past it, and between two) and gives it to the others: the margins of every row, bit for bit, fewer scored."""
    geo = WorldGeometry.of(either)
    for s in (student[0], pair):
        cuts = s.cuts(D)
        R, d = nearest_corners(geo, _agents(30, seed=4), VOCAB, 40)
        on = np.array([[c[len(c) // 2] if len(c) else 1.0 for c in cuts]])  # a row right on split points
        R[0, :3] = np.concatenate([on, np.nextafter(on, np.inf), np.nextafter(on, -np.inf)])
        d[0, :3] = 1.0
        live = np.isfinite(d)
        got = s._margins(R, d)
        np.testing.assert_array_equal(got[live], s.margin(R[live]))
        assert (got[~live] == -np.inf).all()
        first, inverse = s._alike(R[live])
        assert len(first) < live.sum() and np.array_equal(inverse[first], np.arange(len(first)))


@pytest.mark.parametrize("members", [1, 2])
def test_a_scan_continues_picks_where_earlier_ones_stopped(either, student, pair, members, monkeypatch):
    """Round one's picks keep each agent's corners in ``scan``; round two's more picks start from there (agents
    stopped at different stages, new agents beside them): the same picks as from nothing."""
    s = student[0] if members == 1 else pair
    geo = WorldGeometry.of(either)
    X = _agents(10, seed=5)
    monkeypatch.setattr("learners.tabular.student.STAGE_FIRST", 2)
    monkeypatch.setattr("learners.tabular.student.STAGE_GROWTH", 3)
    scan: dict = {}
    first = s.picks(geo, X[:7], VOCAB, 2, scan=scan)
    assert len(scan) == 7 and len({len(v[2]) for v in scan.values()}) > 1  # stopped at different stages
    np.testing.assert_array_equal(first, s.picks(geo, X[:7], VOCAB, 2))
    more = s.picks(geo, X[::-1], VOCAB, 30, scan=scan)  # seven scanned, three new, in another order
    np.testing.assert_array_equal(more, s.picks(geo, X[::-1], VOCAB, 30))
    assert len(scan) == 10


def test_classes_of_corners_alike_hold_past_one_int64_key(student, monkeypatch):
    """Splits too many for one int64 key a row (the product of each column's cut count past 2**62): the classes
    come from the rows' per-column sides compared whole, the same classes."""
    s = student[0]
    cuts = [np.arange(float(1 << 21)) for _ in range(D)]  # (2**21 + 1)**3 > 2**62
    monkeypatch.setattr(s, "cuts", lambda columns: cuts)
    rows = np.random.default_rng(6).integers(0, 4, (200, D)) * 1000.5
    first, inverse = s._alike(rows)
    sides = np.stack([np.searchsorted(cuts[j], rows[:, j], side="left") for j in range(D)], 1)
    _, want = np.unique(sides, axis=0, return_inverse=True)
    assert len(first) == len(np.unique(sides, axis=0))
    assert np.array_equal(sides[first][inverse], sides)  # each row's class holds rows alike
    assert len(set(zip(inverse.tolist(), want.reshape(-1).tolist(), strict=True))) == len(first)  # one to one


def test_a_long_descent_split_over_two_threads_gives_the_same_margins(student, pair, monkeypatch):
    """From ``SPLIT_ROWS`` rows, half the rows are descended on a second thread: the same margins bit for bit, and
    no second thread while a search runs in the process (its waits are not idle then)."""
    import learners.tabular.student as student_module

    rng = np.random.default_rng(5)
    R = rng.uniform(0, 100, (301, D))
    used = []
    real = student_module.second_thread

    def spy():
        used.append(1)
        return real()

    for s in (student[0], pair):
        want = s._margin_rows(R)
        used.clear()
        monkeypatch.setattr(student_module, "SPLIT_ROWS", 8)
        monkeypatch.setattr(student_module, "second_thread", spy)
        np.testing.assert_array_equal(s.margin(R), want)
        assert used == [1]
        monkeypatch.setattr(student_module, "running", lambda: 1)
        np.testing.assert_array_equal(s.margin(R), want)
        assert used == [1]
        monkeypatch.undo()
